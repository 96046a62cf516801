"""ProfileResult: the per-op records of one profiled region, and the views users read.

``key_averages()`` returns torch's own averaged ``EventList``, so ``.table()`` prints torch's
layout with ``Self NEURON`` / ``NEURON total`` columns; ``to_dataframe()`` gives pandas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..defaults import BACKEND_TABLE
from ..vocabulary import CUDA, EAGER, NEURON

if TYPE_CHECKING:  # pandas and torch's profiler utils load only when a view is asked for
    import pandas
    from torch.autograd.profiler_util import EventList


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
    input_shapes: list[list[int]]  # [] for non-tensor arguments, as torch's profiler does
    input_dtypes: list[str]
    engine: str  # Tensor, Vector, Scalar, GpSimd, DMA, or "-" for ops that move no data
    flops: int
    bytes_read: int
    bytes_written: int
    launch_us: float
    compute_us: float
    memory_us: float
    device_time_us: float
    bound: str  # "compute", "memory", or "none"
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

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


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
    # Graph execution: the fixed cost of launching the region's graph, host and runtime side
    # (the profile's graph_execution_us per region); not device time, so not in any op's.
    execution_overhead_us: float = 0.0
    # Threads on which modules ran during the region outside its capture (profiler/threads.py),
    # one "'name' ran Type" each: the profile misses their ops. Empty when nothing was missed.
    uncaptured: list[str] = field(default_factory=list)

    @classmethod
    def concatenate(cls, results: list["ProfileResult"]) -> "ProfileResult":
        """One result of several regions run one after another (on the same backend)."""
        if len(results) == 1:
            return results[0]
        from dataclasses import replace

        records: list[OpRecord] = []
        device_clock = 0.0
        for result in results:
            offset = len(records)
            for r in result.records:
                records.append(replace(r, index=offset + r.index,
                                       device_start_us=device_clock + r.device_start_us,
                                       group=r.group + offset if r.group >= 0 else -1))
            device_clock += result.total_device_time_us
        first = results[0]
        return cls(
            records=records, backend=first.backend, hardware=first.hardware, core=first.core,
            scopes=[s for result in results for s in result.scopes],
            correlate_device_time=first.correlate_device_time,
            notes=list(dict.fromkeys(n for result in results for n in result.notes)),
            execution=first.execution,
            execution_overhead_us=sum(result.execution_overhead_us for result in results),
            uncaptured=sorted({t for result in results for t in result.uncaptured}))

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
        kernel events on the NeuronCore, and record_function ranges."""
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
            next_id += 1
        for r in self.records:
            host_end = r.host_start_us + r.cpu_time_us
            op = FunctionEvent(
                id=next_id, name=r.name, overload_name=r.overload, thread=r.thread,
                start_us=r.host_start_us, end_us=host_end, input_shapes=r.input_shapes,
                use_device=use_device, flops=r.flops or None, stack=[],
            )
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
                next_id += 1
        event_list = EventList(events, use_device=use_device)
        event_list._build_tree()
        return event_list

    def key_averages(self, group_by_input_shapes: bool = False) -> "EventList":
        """torch's averaged EventList; ``.table(sort_by="self_device_time_total")``."""
        return self.events().key_averages(group_by_input_shapes=group_by_input_shapes)

    def table(self, sort_by: str = "self_device_time_total", row_limit: int = 10) -> str:
        return self.key_averages().table(sort_by=sort_by, row_limit=row_limit)

    # -- pandas --------------------------------------------------------------------------------

    def to_dataframe(self, by: str = "name") -> "pandas.DataFrame":
        """One row per op name (or per ``by`` column: "module_path", "engine", ...), sorted by
        device time."""
        import pandas as pd

        columns = ["name", "engine", "flops", "bytes_read", "bytes_written", "device_time_us",
                   "cpu_time_us", "compute_us", "memory_us", "module_path", "phase", "costed"]
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
