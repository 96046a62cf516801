"""pytest-neuronprof: per-op device-time profiling and regression gating for PyTorch on a
simulated (or measured) AWS Trainium NeuronCore.

Importing this package does not import torch: the pytest plugin loads it lazily, so a suite
with no profiled tests pays nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .profiler.config import NeuronConfig, ProfileMode
from .errors import BaselineError, ConfigError, HardwareProfileError, NeuronProfError

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .profiler.profiler import NeuronProfiler
    from .profiler.result import OpRecord, ProfileResult

_LAZY = {"NeuronProfiler": "profiler.profiler", "ProfileResult": "profiler.result",
         "OpRecord": "profiler.result"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BaselineError",
    "ConfigError",
    "HardwareProfileError",
    "NeuronConfig",
    "NeuronProfError",
    "NeuronProfiler",
    "OpRecord",
    "ProfileMode",
    "ProfileResult",
    "__version__",
]
