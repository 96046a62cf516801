"""NeuronProfiler: the context manager users and the plugin profile a region with."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..costmodel import load_hardware
from ..defaults import BACKEND_TABLE
from ..errors import ConfigError
from ..vocabulary import SIMULATED
from .backends import Backend, make_backend
from .config import NeuronConfig, ProfileMode
from .result import ProfileResult


class NeuronProfiler:
    """Profile a region of PyTorch code::

        with NeuronProfiler(NeuronConfig(hardware="trn2")) as prof:
            model(x)
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=10))

    ``backend``: "simulated" (default: the cost model of ``config.hardware``), or a measured
    one, timed by torch.profiler: "cpu" (self CPU time per op), "cuda" (self CUDA time per
    op) or "neuron" (TorchNeuron's profiler; needs torch_neuronx). ``threads``: the cpu
    backend sets torch's intra-op threads to this while the region runs (None: unchanged).

    or ``prof.start()`` ... ``prof.stop()``. After the region, ``prof.result`` holds the
    ProfileResult; its views (key_averages, to_dataframe, total_device_time_us,
    export_chrome_trace) are also reachable on the profiler itself.

    Several chips from one run (simulated backend): with ``keep_capture=True`` the profiler
    keeps the region's capture, and ``prof.result_for("h200")`` is the full ProfileResult of the
    same region costed on another hardware profile (same execution mode and auto-cast), without
    running the code again::

        with NeuronProfiler(NeuronConfig(hardware="trn2"), keep_capture=True) as prof:
            model(x)
        on_h200 = prof.result_for("h200")
    """

    def __init__(self, config: NeuronConfig | None = None, backend: str = SIMULATED,
                 threads: int | None = None, keep_capture: bool = False) -> None:
        self.config = config if config is not None else NeuronConfig()
        if backend in BACKEND_TABLE and BACKEND_TABLE[backend].names_chip:  # simulated, neuron
            profile = load_hardware(self.config.hardware)
            bad = [c for c in self.config.target_cores if c >= profile.cores_per_chip]
            if bad:
                raise ConfigError(
                    f"capture_enabled_for_nc={self.config.capture_enabled_for_nc!r}: core(s) "
                    f"{bad} do not exist on {profile.name} (cores 0-{profile.cores_per_chip - 1})"
                )
        self.backend_name = backend
        self._backend: Backend = make_backend(backend, self.config.hardware,
                                              self.config.target_cores[0], config=self.config,
                                              threads=threads)
        self._result: ProfileResult | None = None
        self._running = False
        if keep_capture:
            self._check_retimes()
            self._backend.keep_capture = True  # type: ignore[attr-defined]  # the simulated one

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "NeuronProfiler":
        if self._running:
            raise RuntimeError("NeuronProfiler.start(): this profiler is already running")
        self._result = None
        self._backend.start()
        self._running = True
        return self

    def stop(self) -> ProfileResult:
        if not self._running:
            raise RuntimeError("NeuronProfiler.stop(): this profiler is not running")
        # Running until the backend has stopped: a refused stop (wrong thread, an inner profiler
        # still running) leaves the profiler stoppable once the caller has fixed that.
        self._result = self._backend.stop(self.config.correlate_device_time)
        self._running = False
        return self._result

    def __enter__(self) -> "NeuronProfiler":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def backend_version(self) -> str:
        return self._backend.version

    @property
    def result(self) -> ProfileResult:
        if self._result is None:
            state = "still running" if self._running else "not started"
            raise RuntimeError(f"NeuronProfiler has no result yet: the profiler is {state}")
        return self._result

    def _check_retimes(self) -> None:
        """Only the simulated backend costs a capture: a measured one timed its one device."""
        if self.backend_name != SIMULATED:
            raise ConfigError(f"the {self.backend_name} backend measures the one device it runs on: "
                              "it cannot give a region's time on another chip (only the "
                              f"{SIMULATED} backend can; use backend={SIMULATED!r})")

    def result_for(self, hardware: str) -> ProfileResult:
        """The last region's ProfileResult on the ``hardware`` profile (``config.hardware``:
        ``result`` itself). Needs ``keep_capture=True``. Raises ConfigError for an unknown
        profile or a measured backend."""
        self._check_retimes()
        result = self.result
        profile = load_hardware(hardware)  # ConfigError naming the profiles known
        if profile.name == result.hardware:
            return result
        if not getattr(self._backend, "keep_capture", False):
            raise RuntimeError("NeuronProfiler.result_for(): create the profiler with "
                               "keep_capture=True to cost its region on other chips")
        return self._backend.result_for(result, profile.name)  # type: ignore[attr-defined]

    # -- views of the result -------------------------------------------------------------------

    def key_averages(self, group_by_input_shapes: bool = False):
        return self.result.key_averages(group_by_input_shapes=group_by_input_shapes)

    def to_dataframe(self, by: str = "name"):
        return self.result.to_dataframe(by=by)

    @property
    def total_device_time_us(self) -> float:
        return self.result.total_device_time_us

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Trace Event Format JSON, for chrome://tracing or ui.perfetto.dev."""
        from .trace import write_chrome_trace

        write_chrome_trace(self.result, path)

    def export(self) -> list[Path]:
        """Write the selected streams into ``config.profile_output_dir``: the framework trace
        (RUNTIME) and the device trace (DEVICE). Returns the files written."""
        from .trace import write_chrome_trace

        if self.config.profile_output_dir is None:
            return []
        out = Path(self.config.profile_output_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        if ProfileMode.RUNTIME in self.config.modes:
            path = out / "framework_trace.json"
            write_chrome_trace(self.result, path, host=True, device=False)
            written.append(path)
        if ProfileMode.DEVICE in self.config.modes:
            path = out / "device_trace.json"
            write_chrome_trace(self.result, path, host=False, device=True)
            written.append(path)
        return written
