"""Backends turn "run this code" into a ProfileResult. One module per backend."""

from __future__ import annotations

from typing import Protocol

from ..errors import ConfigError
from ..result import ProfileResult

BACKENDS = ("simulated",)


class Backend(Protocol):
    name: str

    @property
    def version(self) -> str: ...

    def start(self) -> None: ...

    def stop(self, correlate_device_time: bool = True) -> ProfileResult: ...


def make_backend(name: str, hardware: str, core: int) -> Backend:
    if name == "simulated":
        from .simulated import SimulatedBackend

        return SimulatedBackend(hardware=hardware, core=core)
    raise ConfigError(f"unknown backend {name!r}; valid choices: {', '.join(BACKENDS)}")
