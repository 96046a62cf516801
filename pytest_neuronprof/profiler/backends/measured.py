"""Measured backends: per-op times from ``torch.profiler`` on the CPU, a CUDA GPU, or a Neuron
device, turned into the same OpRecords (and so the same tables, traces, baselines and gate) as
the simulated backend.

- ``cpu``: each ATen op's *self* CPU time (its wall time on the thread that ran it, less the
  time of the ATen ops nested in it, so ``aten::linear -> aten::addmm`` is not counted twice).
- ``cuda``: each ATen op's *self* device time: the summed duration of the CUDA kernels (and
  memcpys/memsets) that torch.profiler links to that op itself, not to the ops nested in it.
- ``neuron``: TorchNeuron's documented path, ``torch.profiler.profile(activities=[CPU,
  PrivateUse1], experimental_config=torch_neuronx.profiling.NeuronConfig(...))``, with each op's
  self device time from the PrivateUse1 activity linked to it, as for CUDA. Written against the
  Neuron documentation and tested with a stand-in ``torch_neuronx``; not run on Trainium.

Device activity that torch.profiler links to no op (or to a ``record_function`` range, as
compiled regions are) is kept as a record of its own, named as the profiler names it, so the
totals hold every kernel. Module paths come from ``record_function`` ranges named
``nn.Module: <path>`` that global module hooks open around each ``forward``; user
``record_function`` ranges become scopes, as in the simulated backend. Ops that run under
autograd's backward (``autograd::engine::evaluate_function`` ranges) are in the "backward"
phase.

Timing noise is handled above this module: the plugin runs measured tests for several rounds
and the gate tests the rounds for significance (``gate/stats.py``, used by ``gate/compare.py``).
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import re
import sys
import tempfile
import threading
from typing import Any, Callable, Iterable, Iterator

from ...defaults import BACKEND_TABLE, DEFAULT_HARDWARE, BackendFacts
from ...errors import ConfigError
from ...vocabulary import BACKWARD, CUDA, FORWARD, MEASURED_BACKENDS, NEURON, RECOMPUTE, Engine
from ..modules import ModuleTracker
from ..result import OpRecord, ProfileResult, ScopeRecord

# How measured times are extracted. Part of a baseline entry (its ``cost_model_version``): a
# change here makes older baselines incomparable instead of silently different.
MEASURED_VERSION = "measured-1"
MODULE_PREFIX = "nn.Module: "
RECOMPUTE_PREFIX = "nn.Module (recompute): "  # a forward activation checkpointing runs again
BACKWARD_PREFIX = "autograd::engine::evaluate_function"
_OP_NAME = re.compile(r"^[A-Za-z_]\w*::[A-Za-z_]\w*(\.\w+)?$")
_NOT_OPS = ("autograd::", "profiler::")
_FUNCTION_SCOPE = 0  # torch's RecordScope::FUNCTION: ATen ops (and custom ops)
_BACKWARD_SCOPE = 1  # RecordScope::BACKWARD_FUNCTION: autograd nodes
NEURON_MISSING = (f"the {NEURON} backend needs {BACKEND_TABLE[NEURON].requires}, which is not "
                  "installed here ({error}); install torch-neuronx on a Trainium or Inferentia "
                  "instance, or use --neuron-backend simulated (or cpu)")


def measured_facts(kind: str) -> BackendFacts:
    """The backend table's row of measured backend ``kind``; ConfigError for any other name."""
    if kind not in MEASURED_BACKENDS:
        raise ConfigError(f"unknown measured backend {kind!r}; valid: {', '.join(MEASURED_BACKENDS)}")
    return BACKEND_TABLE[kind]


def slug(text: str) -> str:
    """'Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz' -> 'intel-xeon-platinum-8375c'."""
    text = re.sub(r"\((r|tm|c)\)", " ", text.lower())
    text = text.split("@")[0]
    words = [w for w in re.split(r"[^a-z0-9.]+", text) if w and w not in ("cpu", "processor")]
    return "-".join(words).strip(".-") or "unknown"


@functools.lru_cache(maxsize=None)
def cpu_model() -> str:
    """The CPU's model name, from /proc/cpuinfo (Linux), sysctl-free fallbacks elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cpu_hardware(threads: int) -> str:
    """The hardware part of a cpu baseline's variant: the CPU model and torch's thread count,
    since both change op times (``cpu:intel-xeon-platinum-8375c-4threads``)."""
    return f"{slug(cpu_model())}-{threads}threads"


def is_op(event: Any) -> bool:
    name = event.name
    return (getattr(event, "scope", _FUNCTION_SCOPE) == _FUNCTION_SCOPE and bool(_OP_NAME.match(name))
            and not name.startswith(_NOT_OPS))


def _is_device(event: Any) -> bool:
    return getattr(event.device_type, "name", str(event.device_type)) != "CPU"


def _elapsed(event: Any) -> float:
    return float(event.time_range.end - event.time_range.start)


def _context(event: Any) -> tuple[str, str, str]:
    """(module path, scope, phase) of an event from the ranges that enclose it."""
    module = ""
    scopes: list[str] = []
    phase = FORWARD
    recomputed = False
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name
        if name.startswith(RECOMPUTE_PREFIX):
            recomputed = True
            if not module:
                module = name[len(RECOMPUTE_PREFIX):]
        elif name.startswith(MODULE_PREFIX):
            if not module:
                module = name[len(MODULE_PREFIX):]
        elif name.startswith(BACKWARD_PREFIX) or getattr(parent, "scope", None) == _BACKWARD_SCOPE:
            phase = BACKWARD
        elif getattr(parent, "is_user_annotation", False):
            scopes.append(name)
        parent = parent.cpu_parent
    return module, "/".join(reversed(scopes)), RECOMPUTE if recomputed else phase


def records_from_events(events: Iterable[Any], kind: str) -> tuple[list[OpRecord], list[ScopeRecord]]:
    """OpRecords and scopes of a torch.profiler event list (``prof.events()``, its tree built:
    ``cpu_parent`` / ``cpu_children`` set, kernels appended to the ops that launched them).

    Pure: the events may be torch's FunctionEvents or anything with the same attributes."""
    facts = measured_facts(kind)
    engine = facts.engine
    on_host = facts.device is None  # the cpu backend: an op's time is its self time on the host
    events = list(events)
    host = [e for e in events if not _is_device(e) and not getattr(e, "is_async", False)]
    device = [e for e in events if _is_device(e)]
    # where each device activity starts, by the correlation id of the host event it belongs to
    device_start: dict[int, float] = {}
    for d in device:
        corr = getattr(d, "linked_correlation_id", 0) or 0
        if corr > 0:
            start = float(d.time_range.start)
            device_start[corr] = min(start, device_start.get(corr, start))
    ops = [e for e in host if is_op(e)]
    op_ids = {id(e) for e in ops}
    rows: list[tuple[float, OpRecord]] = []
    claimed: set[int] = set()  # correlation ids of host events whose kernels a record holds
    scopes: list[ScopeRecord] = []
    for e in host:
        kernels_us = float(sum(k.duration for k in getattr(e, "kernels", ()) or ()))
        if id(e) in op_ids:
            nested = sum(_elapsed(c) for c in e.cpu_children if id(c) in op_ids)
            self_host = max(0.0, _elapsed(e) - nested)
        elif not on_host and kernels_us > 0:
            self_host = 0.0  # device work launched from a range (a compiled region): keep it
        else:
            if getattr(e, "is_user_annotation", False) and not e.name.startswith(
                    (MODULE_PREFIX, RECOMPUTE_PREFIX)):
                scopes.append(ScopeRecord(e.name, float(e.time_range.start), float(e.time_range.end)))
            continue
        if kernels_us > 0:
            claimed.add(e.id)
        module, scope, phase = _context(e)
        start = float(e.time_range.start)
        device_us = self_host if on_host else kernels_us
        rows.append((start, OpRecord(
            index=0, name=e.name, overload=getattr(e, "overload_name", "") or "default",
            input_shapes=[list(s) for s in (getattr(e, "input_shapes", None) or [])],
            input_dtypes=[str(t) for t in (getattr(e, "input_dtypes", None) or []) if t],
            engine=engine if device_us > 0 else Engine.NONE.value, flops=int(getattr(e, "flops", 0) or 0),
            bytes_read=0, bytes_written=0, launch_us=0.0, compute_us=0.0, memory_us=0.0,
            device_time_us=device_us, bound="none", costed=True, module_path=module, scope=scope,
            phase=phase, host_start_us=start, cpu_time_us=self_host,
            device_start_us=device_start.get(e.id, start))))
    for d in device:  # device activity linked to no host event that became a record
        corr = getattr(d, "linked_correlation_id", 0) or 0
        if corr in claimed:
            continue
        start = float(d.time_range.start)
        rows.append((start, OpRecord(
            index=0, name=d.name, overload="default", input_shapes=[], input_dtypes=[],
            engine=engine, flops=0, bytes_read=0, bytes_written=0, launch_us=0.0, compute_us=0.0,
            memory_us=0.0, device_time_us=_elapsed(d), bound="none", costed=True, module_path="",
            scope="", phase="forward", host_start_us=start, cpu_time_us=0.0,
            device_start_us=start)))
    rows.sort(key=lambda row: row[0])
    records = []
    origin = min((start for start, _ in rows), default=0.0)
    for index, (_, record) in enumerate(rows):
        record.index = index
        record.host_start_us -= origin
        record.device_start_us = max(0.0, record.device_start_us - origin)
        records.append(record)
    scopes = [ScopeRecord(s.name, s.start_us - origin, s.end_us - origin)
              for s in sorted(scopes, key=lambda s: s.start_us)]
    return records, scopes


class ModuleRanges(ModuleTracker):
    """Opens a ``record_function`` range named ``nn.Module: <path>`` around every module's
    forward while installed, so that profiler events know their module
    (``nn.Module (recompute): <path>`` when activation checkpointing runs it again)."""

    def __init__(self) -> None:
        super().__init__()
        self._ranges: list[Any] = []

    def entered(self, path: str) -> None:
        from torch.autograd.profiler import record_function

        scope = record_function((RECOMPUTE_PREFIX if self.recomputing else MODULE_PREFIX) + path)
        scope.__enter__()
        self._ranges.append(scope)

    def exited(self) -> None:
        self._ranges.pop().__exit__(None, None, None)


@contextlib.contextmanager
def quiet_kineto() -> Iterator[None]:
    """torch's profiler (kineto) writes ``USDT: ... profiler_start`` and ``profiler_stop`` lines
    straight to file descriptor 2 at every start and stop: 46 lines under each failing cpu-backend
    test. Those lines are dropped; anything else it writes there is passed on."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no usable stderr: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode("utf-8", "replace")
            kept = "".join(line for line in text.splitlines(True) if not line.startswith("USDT:"))
            if kept:
                sys.stderr.write(kept)


def _cuda_synchronize() -> None:
    import torch

    torch.cuda.synchronize()


def _neuron_modules() -> tuple[Any, Any]:
    """(torch_neuronx, torch_neuronx.profiling), or ConfigError saying it is not installed."""
    try:
        import torch_neuronx  # noqa: F401
        from torch_neuronx import profiling
    except ImportError as exc:
        raise ConfigError(NEURON_MISSING.format(error=f"import torch_neuronx.profiling: {exc}")) from None
    return torch_neuronx, profiling


def _neuron_synchronize() -> None:
    """Wait for queued device work, as the Neuron docs do before a profile ends
    (``torch.neuron.synchronize()``; ``torch_neuronx.synchronize()`` in their multi-rank
    example)."""
    torch_neuronx, _ = _neuron_modules()
    sync = getattr(torch_neuronx, "synchronize", None)
    if sync is None:
        import torch

        sync = getattr(torch, "neuron").synchronize  # registered by torch_neuronx on a Neuron machine
    sync()


def _check_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"the {CUDA} backend needs {BACKEND_TABLE[CUDA].requires}, and "
                          f"torch.cuda.is_available() is False here (torch {torch.__version__}); "
                          "use --neuron-backend cpu or simulated")


# How each backend that needs something (BackendFacts.requires) finds out whether it is there.
_AVAILABILITY: dict[str, Callable[[], object]] = {CUDA: _check_cuda, NEURON: _neuron_modules}
_SYNCHRONIZE: dict[str, Callable[[], None]] = {CUDA: _cuda_synchronize, NEURON: _neuron_synchronize}


def check_available(kind: str) -> None:
    """ConfigError when this machine cannot run the ``kind`` backend (any backend of the table:
    one that requires nothing is always available)."""
    if kind in BACKEND_TABLE and not BACKEND_TABLE[kind].measured:
        return
    if measured_facts(kind).requires:
        _AVAILABILITY[kind]()


class MeasuredBackend:
    """One region profiled with torch.profiler on the ``kind`` device.

    ``threads`` (cpu): torch's intra-op thread count while the region runs, restored after it
    (None: leave it). One thread makes CPU op times far steadier on shared machines: with two
    threads on two busy cores, an op waits for its descheduled second thread and swings 10x.

    ``profiler_factory`` (a callable returning a torch.profiler-like object with start(),
    stop() and events()), ``synchronize`` and ``hardware`` replace what the backend would
    otherwise build or detect; tests use them to feed recorded profiler output."""

    def __init__(self, kind: str, config: Any = None, *, core: int = 0,
                 threads: int | None = None,
                 profiler_factory: Callable[[], Any] | None = None,
                 synchronize: Callable[[], None] | None = None,
                 hardware: str | None = None) -> None:
        self.facts = measured_facts(kind)
        self.name = kind
        self.config = config
        self.core = core
        self._factory = profiler_factory
        self._synchronize = synchronize
        self._hardware = hardware
        self._fixed_hardware = hardware is not None
        self.threads = threads if self.facts.threads else None
        self._saved_threads: int | None = None
        self._profiler: Any = None
        self._modules: ModuleRanges | None = None
        self._thread = 0
        if profiler_factory is None:
            check_available(kind)

    @property
    def version(self) -> str:
        return MEASURED_VERSION

    @property
    def hardware(self) -> str:
        if self._hardware is None:
            self._hardware = self._detect_hardware()
        return self._hardware

    def _detect_hardware(self) -> str:
        import torch

        if self.facts.names_chip:
            # TorchNeuron has no documented call that names the chip: the configured profile
            # (--neuron-hardware / NeuronConfig.hardware, e.g. trn2) names it.
            return str(getattr(self.config, "hardware", DEFAULT_HARDWARE))
        if self.facts.device is None:
            return cpu_hardware(torch.get_num_threads())
        return slug(torch.cuda.get_device_name(torch.cuda.current_device()))

    def _make_profiler(self) -> Any:
        if self._factory is not None:
            return self._factory()
        from torch.profiler import ProfilerActivity, profile

        activities = [getattr(ProfilerActivity, name) for name in self.facts.activities]
        if self.name == NEURON:  # TorchNeuron's documented path: its own experimental config
            return profile(activities=activities, experimental_config=self.neuron_config())
        return profile(activities=activities)

    def neuron_config(self) -> Any:
        """TorchNeuron's NeuronConfig for this profiler's NeuronConfig: the same modes (by
        name), target cores and output directory."""
        _, profiling = _neuron_modules()
        ours = self.config
        kwargs: dict[str, Any] = {}
        if ours is not None:
            modes = getattr(profiling, "ProfileMode", None)
            if modes is not None:
                kwargs["modes"] = [getattr(modes, m.name) for m in ours.modes]
            kwargs["capture_enabled_for_nc"] = ours.capture_enabled_for_nc
            if ours.profile_output_dir is not None:
                kwargs["profile_output_dir"] = os.fspath(ours.profile_output_dir)
        return profiling.NeuronConfig(**kwargs)

    def synchronize(self) -> None:
        synchronize = self._synchronize or _SYNCHRONIZE.get(self.name)
        if synchronize is not None:  # the cpu backend's ops have finished when they return
            synchronize()

    def _set_threads(self) -> None:
        if self.threads is not None:
            import torch

            self._saved_threads = torch.get_num_threads()
            if self._saved_threads != self.threads:
                torch.set_num_threads(self.threads)

    def _restore_threads(self) -> None:
        saved, self._saved_threads = self._saved_threads, None
        if saved is not None and self.threads is not None and saved != self.threads:
            import torch

            torch.set_num_threads(saved)

    def start(self) -> None:
        self._thread = threading.get_ident()
        self._set_threads()
        if not self._fixed_hardware:
            self._hardware = self._detect_hardware()  # outside the region; threads included
        self.synchronize()  # work queued before the region is not the region's
        self._profiler = self._make_profiler()
        self._modules = ModuleRanges()
        self._modules.install()
        try:
            with quiet_kineto():
                self._profiler.start()
        except BaseException:
            self._modules.remove()
            self._modules = self._profiler = None
            self._restore_threads()
            raise

    def stop(self, correlate_device_time: bool = True) -> ProfileResult:
        profiler, modules = self._profiler, self._modules
        if profiler is None or modules is None:
            raise RuntimeError(f"MeasuredBackend({self.name!r}).stop() called before start()")
        if threading.get_ident() != self._thread:
            raise RuntimeError("a NeuronProfiler must be stopped on the thread that started it")
        try:
            self.synchronize()
        finally:
            modules.remove()
            with quiet_kineto():
                profiler.stop()
            self._profiler = self._modules = None
            self._restore_threads()
        records, scopes = records_from_events(profiler.events(), self.name)
        notes = [f"measured on {self.name}: device_time_us is the {self.facts.label}"]
        return ProfileResult(records=records, backend=self.name, hardware=self.hardware,
                             core=self.core, scopes=scopes,
                             correlate_device_time=correlate_device_time, notes=notes)

