"""The simulated NeuronCore's cost model: hardware profiles, op work, roofline timing.

COST_MODEL_VERSION changes whenever a formula or a bundled profile changes the numbers, so that
baselines recorded under another version are reported as incomparable instead of compared.
"""

from __future__ import annotations

from .engines import Engine, OpCost, TensorMeta, op_cost
from .profiles import HardwareProfile, available_hardware, load_hardware
from .roofline import Timing, device_time

COST_MODEL_VERSION = "1"

__all__ = [
    "COST_MODEL_VERSION",
    "Engine",
    "HardwareProfile",
    "OpCost",
    "TensorMeta",
    "Timing",
    "available_hardware",
    "device_time",
    "load_hardware",
    "op_cost",
]
