"""The simulated NeuronCore's cost model: hardware profiles (``profiles``), per-op work
(``formulas``, registered in ``registry``), one op's time (``roofline``).

Public, for costing your own ops (see ``registry``)::

    from pytest_neuronprof.costmodel import Engine, OpCost, TensorMeta, register_cost

COST_MODEL_VERSION changes whenever a formula or a bundled profile changes the numbers, so that
baselines recorded under another version are reported as incomparable instead of compared.
Submodules load on first use: the pytest plugin reads profile names without importing torch.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..vocabulary import Engine

COST_MODEL_VERSION = "7"

_LAZY = {  # name -> the module that defines it (the registry: with the built-in formulas)
    "OpCost": "opcost", "TensorMeta": "opcost",
    "register_cost": "registry", "register_free": "registry", "unregister": "registry",
    "available_hardware": "profiles", "load_hardware": "profiles",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COST_MODEL_VERSION", "Engine", *sorted(_LAZY)]
