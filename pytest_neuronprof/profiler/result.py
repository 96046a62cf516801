"""ProfileResult: the per-op records of one profiled region, and the views users read.

``key_averages()`` returns torch's own averaged ``EventList``, so ``.table()`` prints torch's
layout with ``Self NEURON`` / ``NEURON total`` columns; ``to_dataframe()`` gives pandas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Hashable, Iterable, Mapping, Sequence

from ..defaults import BACKEND_TABLE, DEFAULT_AUTO_CAST
from ..vocabulary import BOUND_NONE, CUDA, EAGER, NEURON

if TYPE_CHECKING:  # pandas and torch's profiler utils load only when a view is asked for
    import pandas
    from torch.autograd.profiler_util import EventList

    # and the cost model's memory when results are joined: the plugin's options read the gate's
    # summary (and so this module) in every session, profiled tests or not
    from ..costmodel.memory import MemoryUsage
    from ..costmodel.utilisation import Utilisation


@dataclass
class OpRecord:
    """One ATen op call in a profiled region.

    Every backend makes records by field name (the simulated one with a function generated
    from these fields that sets a per-call prototype's values and the call's own by name,
    backends/simulated.py; the measured one calls this with keywords), so a new field goes
    anywhere in this list: with a default, or with a value where the records are made."""

    index: int  # issue order in the region
    name: str  # "aten::mm"
    overload: str  # "default"
    # per argument: a tensor's shape, a list of tensors' shapes, [] for other arguments, as
    # torch's profiler gives them (record_shapes)
    input_shapes: list[Any]
    input_dtypes: list[str]  # of the tensors among the arguments, lists' included, in order
    engine: str  # Tensor, Vector, Scalar, GpSimd, DMA, or "-" for ops that move no data
    flops: int
    bytes_read: int
    bytes_written: int
    launch_us: float
    compute_us: float
    memory_us: float
    device_time_us: float
    bound: str  # what limits it: one of vocabulary.BOUNDS ("TensorE", "HBM", "fixed cost", ...)
    costed: bool  # False: the cost model does not know this op; costed by its bytes
    module_path: str  # e.g. "mlp.down"; "" outside any nn.Module
    scope: str  # enclosing record_function ranges, e.g. "forward/attn"; "" if none
    phase: str  # "forward" or "backward"
    host_start_us: float  # host time relative to the start of the region
    cpu_time_us: float
    device_start_us: float = 0.0  # position on the simulated device's queue (sum of earlier ops)
    # The op torch dispatched, where ``name`` is the kernel several ops share (the fused
    # attention ops torch picks per device and grad mode); "" when it is ``name`` itself.
    dispatched: str = ""
    group: int = -1  # graph execution: the fused group (its first op's index); -1 when alone
    # Where it ran on the host: 0, the region's thread; k, the k-th work it handed to another
    # thread (profiler/threads.py), numbered in the order the records place them.
    thread: int = 0
    # The share of its bound's peak the op reaches: the time its work would take at that
    # engine's (or HBM's, or the links') peak rate over its device time; 0 for free ops and
    # for ops bound by a fixed cost.
    peak_fraction: float = 0.0
    # A collective's: the ranks of its group (2 for a point-to-point transfer), the bytes each
    # rank sends over the links (not its HBM traffic), and the algorithm the runtime picks
    # ("mesh", "rdh", "ring", "ring+ring" across instances, "p2p"); 0, 0 and "" elsewhere.
    ranks: int = 0
    link_bytes: int = 0
    algorithm: str = ""
    # The compiled graph execution it ran in (an index of ProfileResult.graphs); -1: eager
    graph: int = -1

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclass
class GraphRun:
    """One execution of a compiled graph in a region (``torch.compile(backend="neuron")``): what
    TorchNeuron runs as one executable. Its ops are ``records[first:end]``."""

    key: str  # the executable's key (profiler/compiled.py): function, phase, inputs, digest
    where: str  # its function and phase: "Block.forward (tests/test_x.py:30) forward"
    phase: str  # "forward" or "backward"
    inputs: str  # the shapes and dtypes of its inputs that are not parameters
    first: int
    end: int
    # the graph breaks that ended its Dynamo graph or that it resumes after, (file:line,
    # Dynamo's reason) each; () if none
    breaks: tuple[tuple[str, str], ...] = ()
    device_start_us: float = 0.0
    device_time_us: float = 0.0  # the device time of its ops (its fixed cost apart)
    # profiler/compiled.py's Executable: ``key``, ``where`` and ``breaks`` name files relative
    # to the working directory; ``key_at`` and ``breaks_at``, relative to a folder of the caller's
    executable: Any = field(default=None, repr=False, compare=False)

    def key_at(self, root: str | None) -> str:
        """The executable's key with its file relative to ``root`` (the folder baseline keys are
        relative to), whatever the working directory."""
        return self.key if self.executable is None else self.executable.key_at(root)

    def breaks_at(self, root: str | None) -> tuple[tuple[str, str], ...]:
        """``breaks`` with their files relative to ``root``."""
        if self.executable is None:
            return self.breaks
        return tuple((b.at(root), b.reason) for b in self.executable.breaks)


def _concatenate_memory(usages: list[MemoryUsage], offsets: list[int]) -> MemoryUsage:
    from ..costmodel.memory import concatenate

    return concatenate(usages, offsets)


def _combined_utilisation(results: list["ProfileResult"], starts: list[float],
                          offsets: list[int]) -> "Utilisation | None":
    if all(result.utilisation is None for result in results):
        return None
    from ..costmodel.utilisation import combined

    return combined(zip((result.utilisation for result in results), starts, offsets))


def tally(weights: dict[Any, list[float]], key: Hashable, us: float) -> None:
    """Add a call of ``us`` device time to ``key``'s [time, calls] in ``weights``."""
    weight = weights.get(key)
    if weight is None:
        weights[key] = [us, 1.0]
    else:
        weight[0] += us
        weight[1] += 1.0


def heaviest(weights: Mapping[str, Sequence[float]]) -> str:
    """The key of ``tally``'s ``weights`` with the most device time, then the most calls, then
    the first name: e.g. the bound of the calls that carry most of an op's time, even when all
    of them are charged 0 us (hidden in a graph's schedule)."""
    if len(weights) == 1:  # most ops: one bound and one dtype for all their calls
        return next(iter(weights))
    return min(weights.items(), key=lambda w: (-w[1][0], -w[1][1], w[0]))[0]


def bounds_by(calls: Iterable[tuple[Hashable, str, float, float]]) -> dict[Hashable, tuple[str, float]]:
    """Per key, from (key, bound, peak fraction, device us) per call: the bound of the calls
    that carry most of the key's device time, and their peak fraction weighted by device time
    (by call where all of them are charged 0 us)."""
    groups: dict[Hashable, tuple[dict[str, list[float]], list[float]]] = {}
    for key, bound, fraction, us in calls:
        bounds, sums = groups.setdefault(key, ({}, [0.0, 0.0, 0.0]))
        tally(bounds, bound or BOUND_NONE, us)
        sums[0] += fraction * us
        sums[1] += us
        sums[2] += fraction
    return {key: (heaviest(bounds), weighted / us if us > 0 else plain / sum(w[1] for w in bounds.values()))
            for key, (bounds, (weighted, us, plain)) in groups.items()}


def _explain(event: Any, bound: str, peak_fraction: float, device_us: float) -> None:
    """What bounds a FunctionEvent's op (torch has no field for it: attributes of our own), and
    its device time, which weighs it in ``key_averages``."""
    event.bound, event.peak_fraction, event.device_us = bound or BOUND_NONE, peak_fraction, device_us


@dataclass
class ScopeRecord:
    """A record_function range on the host, relative to the start of the region."""

    name: str
    start_us: float
    end_us: float


@dataclass
class ProfileResult:
    records: list[OpRecord]
    backend: str
    hardware: str
    core: int = 0
    scopes: list[ScopeRecord] = field(default_factory=list)
    correlate_device_time: bool = True
    notes: list[str] = field(default_factory=list)
    execution: str = EAGER  # the simulated backend's execution mode ("eager" or "graph")
    # Graph execution: the fixed cost of one execution of the region's graph, host and runtime
    # side and on the device (the profile's graph_execution_us + graph_floor_us per region); in
    # no op's device time.
    execution_overhead_us: float = 0.0
    # Graph execution: neuronx-cc's --auto-cast the region was costed with (vocabulary.AUTO_CASTS).
    # Eager execution and measured backends keep the default: eager kernels keep the model's
    # dtypes (NeuronConfig), so no eager variant names it.
    auto_cast: str = DEFAULT_AUTO_CAST
    # Threads on which modules ran during the region outside its capture (profiler/threads.py),
    # one "'name' ran Type" each: the profile misses their ops. Empty when nothing was missed.
    uncaptured: list[str] = field(default_factory=list)
    # Device memory of the region (costmodel/memory.py): its peak, resident bytes, the largest
    # tensors alive at the peak (``at_peak``) and all of them grouped by what made them
    # (``live``), live bytes over its ops; graph execution adds SBUF's. None on measured
    # backends and when NeuronConfig(profile_memory=False).
    memory: MemoryUsage | None = None
    # Compiled graphs that ran in the region (torch.compile(backend="neuron")), in order.
    graphs: list[GraphRun] = field(default_factory=list)

    # Why it is slow, by Neuron Explorer's Summary (costmodel/utilisation.py): MFU, HFU, MBU, each
    # engine's active time, DMA activity and sizes, with the evidence its recommendations name
    # (costmodel/recommendations.py). The simulated backend's; None on measured backends.
    utilisation: Utilisation | None = None

    def recommendations(self) -> list[Any]:
        """Neuron Explorer's recommendations that apply to this region, the most device time at
        stake first (``costmodel.recommendations.recommend``); [] on measured backends."""
        if self.utilisation is None:
            return []
        from ..costmodel.recommendations import recommend

        return recommend(self.utilisation)

    @classmethod
    def concatenate(cls, results: list["ProfileResult"]) -> "ProfileResult":
        """One result of several regions run one after another (on the same backend)."""
        if len(results) == 1:
            return results[0]
        from dataclasses import replace

        records: list[OpRecord] = []
        offsets: list[int] = []
        graphs: list[GraphRun] = []
        device_clock = 0.0
        for result in results:
            offset = len(records)
            offsets.append(offset)
            for r in result.records:
                records.append(replace(r, index=offset + r.index,
                                       device_start_us=device_clock + r.device_start_us,
                                       group=r.group + offset if r.group >= 0 else -1,
                                       graph=r.graph + len(graphs) if r.graph >= 0 else -1))
            graphs += [replace(g, first=g.first + offset, end=g.end + offset,
                               device_start_us=device_clock + g.device_start_us)
                       for g in result.graphs]
            device_clock += result.total_device_time_us
        first = results[0]
        usages = [result.memory for result in results if result.memory is not None]
        starts = [sum(r.total_device_time_us for r in results[:k]) for k in range(len(results))]
        return cls(
            records=records, backend=first.backend, hardware=first.hardware, core=first.core,
            scopes=[s for result in results for s in result.scopes],
            correlate_device_time=first.correlate_device_time,
            notes=list(dict.fromkeys(n for result in results for n in result.notes)),
            execution=first.execution,
            auto_cast=first.auto_cast,
            execution_overhead_us=sum(result.execution_overhead_us for result in results),
            uncaptured=sorted({t for result in results for t in result.uncaptured}),
            memory=_concatenate_memory(usages, offsets) if len(usages) == len(results)
            else None,
            utilisation=_combined_utilisation(results, starts, offsets),
            graphs=graphs)

    @property
    def total_device_time_us(self) -> float:
        return sum(r.device_time_us for r in self.records)

    @property
    def device(self) -> str | None:
        """torch's name of the device whose time ``device_time_us`` is: "neuron" (simulated or
        real NeuronCore), "cuda", or None for the cpu backend, whose op times are the CPU
        columns of torch's tables already."""
        facts = BACKEND_TABLE.get(self.backend)
        return facts.device if facts else NEURON

    @property
    def uncosted_ops(self) -> list[str]:
        """Ops the cost model does not know (costed by their bytes on VectorE)."""
        return sorted({r.name for r in self.records if not r.costed})

    # -- torch's tables ---------------------------------------------------------------------

    def events(self) -> "EventList":
        """Every op as torch FunctionEvents: host ops with their device kernels, device-side
        kernel events on the NeuronCore, and record_function ranges. Each event also has
        ``bound`` and ``peak_fraction``, its record's ("none" and 0.0 for a range)."""
        from torch.autograd.profiler_util import EventList, FunctionEvent
        from torch.autograd import DeviceType

        use_device = self.device if self.correlate_device_time else None
        device_type = DeviceType.CUDA if use_device == CUDA else DeviceType.PrivateUse1
        events: list[FunctionEvent] = []
        next_id = 0
        for scope in self.scopes:
            events.append(FunctionEvent(
                id=next_id, name=scope.name, thread=0, start_us=scope.start_us,
                end_us=scope.end_us, use_device=use_device, stack=[],
            ))
            _explain(events[-1], BOUND_NONE, 0.0, 0.0)
            next_id += 1
        for r in self.records:
            host_end = r.host_start_us + r.cpu_time_us
            op = FunctionEvent(
                id=next_id, name=r.name, overload_name=r.overload, thread=r.thread,
                start_us=r.host_start_us, end_us=host_end, input_shapes=r.input_shapes,
                use_device=use_device, flops=r.flops or None, stack=[],
            )
            _explain(op, r.bound, r.peak_fraction, r.device_time_us)
            next_id += 1
            events.append(op)
            if use_device and r.device_time_us > 0:
                kernel = f"{r.engine}::{r.name}"
                op.append_kernel(kernel, self.core, r.device_time_us)
                events.append(FunctionEvent(
                    id=next_id, name=kernel, thread=0, start_us=r.device_start_us,
                    end_us=r.device_start_us + r.device_time_us, use_device=use_device,
                    device_type=device_type, device_index=self.core, stack=[],
                ))
                _explain(events[-1], r.bound, r.peak_fraction, r.device_time_us)
                next_id += 1
        event_list = EventList(events, use_device=use_device)
        event_list._build_tree()
        return event_list

    def key_averages(self, group_by_input_shapes: bool = False) -> "EventList":
        """torch's averaged EventList; ``.table(sort_by="self_device_time_total")``.

        torch's tables have no column for what bounds an op, so ``.table()`` prints torch's
        layout as it is, and each averaged event carries two attributes of its own:
        ``evt.bound``, what limits the calls that carry most of its device time (one of
        ``vocabulary.BOUNDS``: "TensorE", "HBM", "fixed cost", ...), and ``evt.peak_fraction``,
        the share of that bound's peak rate its calls reach, weighted by their device time
        (by call where all of them are charged 0 us)."""
        events = self.events()
        averages = events.key_averages(group_by_input_shapes=group_by_input_shapes)

        def key(e: Any) -> tuple[str, ...]:  # what torch groups by, less what these events share
            return (e.key, str(e.device_type), str(e.is_user_annotation),
                    str(e.input_shapes) if group_by_input_shapes else "")

        found = bounds_by((key(e), e.bound, e.peak_fraction, e.device_us) for e in events)
        for average in averages:
            average.bound, average.peak_fraction = found.get(key(average), (BOUND_NONE, 0.0))
        return averages

    def table(self, sort_by: str = "self_device_time_total", row_limit: int = 10) -> str:
        return self.key_averages().table(sort_by=sort_by, row_limit=row_limit)

    # -- pandas --------------------------------------------------------------------------------

    def to_dataframe(self, by: str = "name") -> "pandas.DataFrame":
        """One row per op name (or per ``by`` column: "module_path", "engine", ...), sorted by
        device time; ``bound`` and ``peak_fraction`` as ``key_averages()`` gives them."""
        import pandas as pd

        columns = ["name", "engine", "flops", "bytes_read", "bytes_written", "device_time_us",
                   "cpu_time_us", "compute_us", "memory_us", "module_path", "phase", "costed",
                   "bound", "peak_fraction"]
        frame = pd.DataFrame([{c: getattr(r, c) for c in columns} for r in self.records],
                             columns=columns)
        frame["bytes"] = frame["bytes_read"] + frame["bytes_written"]
        frame["count"] = 1
        sums = ["count", "flops", "bytes", "bytes_read", "bytes_written", "device_time_us",
                "cpu_time_us", "compute_us", "memory_us"]
        grouped = frame.groupby(by, sort=False)
        out = grouped[sums].sum()
        firsts = [c for c in ("name", "engine") if c != by]
        out[firsts] = grouped[firsts].first()
        out["costed"] = grouped["costed"].all()
        found = bounds_by((getattr(r, by), r.bound, r.peak_fraction, r.device_time_us) for r in self.records)
        if by != "bound":
            out["bound"] = [found[k][0] for k in out.index]
        out["peak_fraction"] = [found[k][1] for k in out.index]
        total = self.total_device_time_us
        out["share"] = out["device_time_us"] / total if total else 0.0
        out = out.reset_index().sort_values(["device_time_us", by], ascending=[False, True],
                                            kind="stable")
        return out.reset_index(drop=True)

    def summary(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "hardware": self.hardware,
            "ops": len(self.records),
            "total_device_time_us": self.total_device_time_us,
            "uncosted_ops": self.uncosted_ops,
        }
