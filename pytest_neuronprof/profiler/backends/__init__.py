"""Backends turn "run this code" into a ProfileResult. One module per backend."""

from __future__ import annotations

from typing import Any, Protocol

from ...defaults import DEFAULT_AUTO_CAST, DEFAULT_EXECUTION, backend_facts
from ..result import ProfileResult


class Backend(Protocol):
    name: str

    @property
    def version(self) -> str: ...

    def start(self) -> None: ...

    def stop(self, correlate_device_time: bool = True) -> ProfileResult: ...


def make_backend(name: str, hardware: str, core: int, config: Any = None,
                 threads: int | None = None) -> Backend:
    """The backend ``name``; ``config`` (a NeuronConfig) tells a measured backend its modes,
    target cores and output directory; ``threads``, the cpu backend's torch thread count
    while it measures (None: unchanged). Raises ConfigError for an unknown backend, or one
    this machine cannot run (no CUDA GPU, no torch_neuronx)."""
    if not backend_facts(name).measured:  # ConfigError for a name not in the table
        from .simulated import SimulatedBackend

        return SimulatedBackend(hardware=hardware, core=core,
                                execution=getattr(config, "execution", DEFAULT_EXECUTION),
                                auto_cast=getattr(config, "auto_cast", DEFAULT_AUTO_CAST),
                                profile_memory=getattr(config, "profile_memory", True))
    from .measured import MeasuredBackend

    return MeasuredBackend(name, config, core=core, threads=threads)
