"""The simulated NeuronCore's cost model: hardware profiles, op work, roofline timing.

COST_MODEL_VERSION changes whenever a formula or a bundled profile changes the numbers, so that
baselines recorded under another version are reported as incomparable instead of compared.
Submodules load on first use: the pytest plugin reads profile names without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

COST_MODEL_VERSION = "1"

_LAZY = {
    "OpCost": "formulas", "TensorMeta": "formulas", "op_cost": "formulas",
    "HardwareProfile": "profiles", "available_hardware": "profiles", "load_hardware": "profiles",
    "Timing": "roofline", "device_time": "roofline",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COST_MODEL_VERSION", *sorted(_LAZY)]
