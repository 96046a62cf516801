"""The one place that turns a published row into a comparison: what the published figure counts
(its ``Figure``), the simulated figure that counts the same (``simulate``), and the row's result.

Every phase of a row's workload runs once outside the profiler (warm-up: lazy caches, optimizer
state, the fake process group; the model's output, whose tensors the host gets back) and then
once under ``NeuronProfiler(NeuronConfig(hardware=<row's profile>, execution="graph",
auto_cast=<row's>))``. With graph execution every phase is one graph execution, and each pays
the profile's device-side fixed cost ``graph_floor_us`` on top of its ops' device time (a
phase weighted ``1 / accum``, a training row's optimizer step, pays it with that weight), and,
when its collectives span several ranks, the barrier the execution starts with over them
(``barrier_us``: the profile's ``collectives.barrier_us``). Eager
execution adds no graph costs (each op pays its own launch).

What each kind of figure counts (the methodology file, ``benchmarks/data/published_methodology.md``):

==============  ===========================================================================
figure          the simulated time it is compared with
==============  ===========================================================================
``device``      device time only: the op-level rows and the NKI kernels (neuron-profile's
                ``total_time`` excludes the host, section 1.7)
``latency``     one request's whole time as the host measures it (NeuronPerf's P50 takes CPU
                tensors, section 1.2; an LLM's TPOT or TTFT): the host's call
                (``graph_execution_us``), the copies of the real inputs to the device and of the
                real outputs back (their published dtypes: I/O stays FP32 whatever
                ``--auto-cast`` says, section 1.3) over the profile's host link, and the device
                time. With ``w`` requests in flight per core (Little's law, section 1.4; ``w``
                from ``rows.in_flight``) a request waits behind the others: latency =
                ``w x max(device, (host + device) / w)``; encoder rows ``w = 1`` (N = 2 on 2 cores)
``throughput``  items per second over the instance's cores from the per-core time per batch,
                ``max(device, (host + device) / w)``: with ``w = 2`` (vision batch rows, N = 4)
                one worker's copies overlap the other's execution, so it is close to the device
                time; with ``w = 1`` the whole request
``step``        a training throughput: an optimizer step (``accum`` micro-steps, the gradient
                all-reduce over the data-parallel replicas, the optimizer), per microbatch
==============  ===========================================================================

The host link's parameters are the profile's (``host_*``: ``benchmarks/host_link.py`` derives
them from published pairs) and ``graph_execution_us``, the host's call, what remains of the
fitted per-execution host cost once the copies are counted (``benchmarks/fit_trn.py``).
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Any

from . import rows as R
from .workloads import HostTensor, UnbuildableRow, build, parse_config

DEVICE, LATENCY, THROUGHPUT, STEP = "device", "latency", "throughput", "step"


@dataclasses.dataclass(frozen=True)
class Figure:
    """What a published figure counts: its ``kind`` (the table above), the requests in flight
    per core, and where that count comes from."""

    kind: str
    per_core: int = 1
    why: str = ""

    @property
    def host(self) -> bool:
        """Whether the figure includes the host's call and copies."""
        return self.kind in (LATENCY, THROUGHPUT)

    def short(self) -> str:
        """The comparator as the tables print it: ``device``, ``step``, ``e2e w=1``, ``core w=2``."""
        if self.kind == LATENCY:
            return f"e2e w={self.per_core}"
        if self.kind == THROUGHPUT:
            return f"core w={self.per_core}"
        return self.kind


def figure_of(row: dict[str, Any], cfg: dict[str, Any]) -> Figure:
    """What a row's published figure counts (the module's table)."""
    workload = row["workload"]
    if row["set"] == R.OPLEVEL or workload == "mamba_fused" or cfg.get("unit") == "us":
        return Figure(DEVICE, why="a device time (neuron-profile / the kernel's own figure)")
    if workload == "train_step":
        return Figure(STEP, why="an optimizer step: accum micro-steps, gradient all-reduce, optimizer")
    flight = R.in_flight(row, cfg)
    kind = THROUGHPUT if cfg.get("unit") == "per_s" else LATENCY
    return Figure(kind, flight.per_core, flight.why)


@dataclasses.dataclass
class RowCapture:
    """One row's workload, run once: per phase its capture and weight."""

    row: dict[str, Any]
    cfg: dict[str, Any]
    workload: Any
    phases: list[tuple[str, float, Any]]  # (name, weight, Capture)
    uncosted: list[str]
    auto_cast: str = "none"
    figure: Figure = Figure(DEVICE)


def capture_row(row: dict[str, Any], tp_method: str = "shard") -> RowCapture:
    """Build the row's workload and run each phase once under the simulated profiler (graph
    mode, so that the capture holds the dataflow); warm-up runs first, unprofiled, and gives
    the model's output (the tensors the host gets back)."""
    from pytest_neuronprof import NeuronConfig, NeuronProfiler

    cfg = parse_config(row["config"])
    auto_cast = R.row_auto_cast(row, cfg)
    workload = build(row["workload"], cfg, tp_method=tp_method, notes=row.get("notes") or "")
    result = None
    for phase in workload.phases:  # warm-up, unprofiled: lazy caches, optimizer state
        result = phase.fn()
    if workload.outputs is not None and not workload.host_outputs:
        workload.host_outputs = workload.outputs(result)
    del result
    phases, uncosted = [], set()
    for phase in workload.phases:
        prof = NeuronProfiler(NeuronConfig(hardware=R.row_hardware(row, cfg), execution="graph",
                                           modes=("device",), auto_cast=auto_cast))
        prof._backend.keep_capture = True
        with prof:
            phase.fn()
        uncosted.update(prof.result.uncosted_ops)
        phases.append((phase.name, phase.weight, prof._backend.last_capture))
    return RowCapture(row, cfg, workload, phases, sorted(uncosted), auto_cast, figure_of(row, cfg))


def per_execution_us(capture: RowCapture, hw: Any, execution: str) -> float:
    """The device's fixed cost of one graph execution (nothing in eager execution)."""
    return hw.graph_floor_us if execution == "graph" else 0.0


def barrier_us(captured: Any, hw: Any, execution: str) -> float:
    """The barrier a graph execution with collectives starts with, over the largest group among
    them (the profile's ``collectives.barrier_us``: neuron-profile shows each execution's
    ``cc_exec_barrier``); nothing without collectives, in eager execution, or on a profile
    whose package has no barrier."""
    barrier = getattr(hw.collectives, "barrier_us", None)
    if execution != "graph" or barrier is None:
        return 0.0
    ranks = max([cost.ranks for cost in captured.costs
                 if cost is not None and getattr(cost, "ranks", 0) > 1], default=1)
    return barrier(ranks, hw.cores_per_chip) if ranks > 1 else 0.0


def copy_us(tensor: HostTensor, hw: Any, to_device: bool) -> float:
    """One host tensor's copy over the profile's host link (0 where the profile has none)."""
    rate = hw.host_h2d_gbps if to_device else hw.host_d2h_gbps
    if rate <= 0:
        return 0.0
    us = hw.host_transfer_us + tensor.nbytes / (rate * 1e3)
    if not to_device and hw.host_fresh_page_gbps > 0 and hw.host_mmap_bytes and tensor.nbytes > hw.host_mmap_bytes:
        us += tensor.nbytes / (hw.host_fresh_page_gbps * 1e3)  # a fresh mapping, faulted in
    return us


@dataclasses.dataclass
class HostSide:
    """The host's part of one request: its call and the copies of the inputs and outputs."""

    call_us: float = 0.0
    inputs_us: float = 0.0
    outputs_us: float = 0.0
    input_bytes: int = 0
    output_bytes: int = 0

    @property
    def total_us(self) -> float:
        return self.call_us + self.inputs_us + self.outputs_us


def host_side(capture: RowCapture, hw: Any, execution: str, copies: bool = True) -> HostSide:
    """What the host adds to one request of a host-measured figure (nothing to the others);
    ``copies=False``: the call alone."""
    if not capture.figure.host:
        return HostSide()
    wl = capture.workload
    call = hw.graph_execution_us if execution == "graph" else 0.0
    if not copies:
        return HostSide(call_us=call)
    return HostSide(call_us=call,
                    inputs_us=sum(copy_us(t, hw, True) for t in wl.host_inputs),
                    outputs_us=sum(copy_us(t, hw, False) for t in wl.host_outputs),
                    input_bytes=sum(t.nbytes for t in wl.host_inputs),
                    output_bytes=sum(t.nbytes for t in wl.host_outputs))


# The terms of the comparison this module adds to issue 17's, each of which can be left out
# (``published.py --without``) to show what it changes: the host's copies of the real inputs and
# outputs, the requests in flight per core, a training step's gradient all-reduce. Without all
# three (and with issue 17's graph_execution_us, 449.2 us) the comparison is issue 17's: a
# host-measured latency adds one fixed host cost per execution, a throughput none.
TERMS = ("copies", "inflight", "allreduce")


@dataclasses.dataclass
class Simulated:
    """A row's simulated figure, counting what the published one counts."""

    device_us: float  # weighted device time of one run, graph floors included
    host: HostSide
    time_us: float  # the time the figure compares (latency, per-core time, step, device)
    value: float  # in the row's unit
    phases_us: dict[str, float]
    collective_us: float


def simulate(capture: RowCapture, hw: Any, execution: str, auto_cast: str | None = None,
             terms: tuple[str, ...] = TERMS) -> Simulated:
    """The row's figure on profile ``hw`` (compiled with ``auto_cast``, default: the row's own),
    counting the ``terms`` of the comparison (default: all)."""
    phases: dict[str, float] = {}
    collective = 0.0
    fixed = per_execution_us(capture, hw, execution)
    cast = auto_cast or capture.auto_cast
    for name, weight, captured in capture.phases:
        records = captured.retime(hw, execution, cast)
        barrier = barrier_us(captured, hw, execution)
        if "allreduce" not in terms and capture.figure.kind == STEP and name == "optimizer":
            records = [r for r in records if r.engine != "Collective"]
            barrier = 0.0
        phases[name] = sum(r.device_time_us for r in records) + fixed + barrier
        collective += weight * sum(r.device_time_us for r in records if r.engine == "Collective")
    device = capture.workload.weighted(phases)
    host = host_side(capture, hw, execution, copies="copies" in terms)
    figure = capture.figure
    if figure.host and "inflight" in terms:
        per_core = max(device, (host.total_us + device) / figure.per_core)
        elapsed = per_core * figure.per_core if figure.kind == LATENCY else per_core
    elif figure.kind == LATENCY:  # without requests in flight: the host in series, once
        elapsed = device + host.total_us
    else:  # ... and a throughput hides the host entirely (issue 17's comparison)
        elapsed = device
    return Simulated(device, host, elapsed, capture.workload.to_metric(elapsed), phases, collective)


def time_row(capture: RowCapture, hw: Any, execution: str,
             auto_cast: str | None = None) -> tuple[float, dict[str, float], float]:
    """(the compared time in us, per-phase device times, weighted collective time)."""
    sim = simulate(capture, hw, execution, auto_cast)
    return sim.time_us, sim.phases_us, sim.collective_us


def dominant_op(capture: RowCapture, hw: Any, execution: str) -> dict[str, Any]:
    """The op with the most device time over the row's phases: its name, share of the ops'
    time, what bounds it and the fraction of that peak it reaches."""
    records = [r for _, _, captured in capture.phases
               for r in captured.retime(hw, execution, capture.auto_cast)]
    total = sum(r.device_time_us for r in records)
    if not records or total <= 0:
        return {"name": None, "share": 0.0, "bound": None, "peak_fraction": None}
    top = max(records, key=lambda r: r.device_time_us)
    return {"name": top.name, "share": top.device_time_us / total, "bound": top.bound,
            "peak_fraction": top.peak_fraction}


def comparator(capture: RowCapture, sim: Simulated) -> str:
    """The comparator a row uses, in words, with its host terms."""
    figure = capture.figure
    if not figure.host:
        return figure.short()
    host = sim.host
    return (f"{figure.short()}: call {host.call_us:.0f} us + in {_bytes(host.input_bytes)} "
            f"{host.inputs_us:.0f} us + out {_bytes(host.output_bytes)} {host.outputs_us:.0f} us")


def _bytes(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def run_row(row: dict[str, Any], execution: str = "graph", tp_method: str = "shard",
            hardware_override: str | None = None, verbose: bool = False,
            terms: tuple[str, ...] = TERMS, profile: dict[str, float] | None = None) -> dict[str, Any]:
    """One row's comparison as a dict (the JSON report's row): a row that cannot be built or run
    has its error, named with the row's label; a dropped row its reason (it still runs, and is
    left out of the summaries and targets)."""
    import torch

    from pytest_neuronprof.costmodel.profiles import load_hardware

    label = R.row_label(row)
    out: dict[str, Any] = {
        "label": label, "set": row["set"], "index": row["index"], "source": row.get("source"),
        "id": row.get("id"), "split": row.get("split", row["set"]), "kind": row.get("kind"),
        "params": row.get("params"), "dtype": row.get("dtype"),
        "hardware_profile": row.get("hardware_profile"), "hardware": None, "workload": row.get("workload"),
        "config": row.get("config"), "category": None, "auto_cast": None, "figure": None,
        "comparator": None, "published_metric": row.get("published_metric"),
        "published_value": None, "published_unit": row.get("published_unit"), "unit": None,
        "execution": execution, "tp_method": tp_method, "simulated_value": None, "ratio": None,
        "time_ratio": None, "simulated_time_us": None, "device_time_us": None, "host_us": None,
        "host": None, "fixed_per_execution_us": None, "phases_us": {}, "collective_us": 0.0,
        "dominant": None, "uncosted_ops": [], "notes": [], "dropped": None, "error": None,
        "terms": list(terms), "profile_overrides": dict(profile or {}),
    }
    start = time.perf_counter()
    try:
        if row.get("load_error"):
            if R.drop_reason(row, {}):  # dropped in its file, of a kind the harness cannot build
                out.update(dropped=R.drop_reason(row, {}), published_value=float(row["published_value"]),
                           elapsed_s=0.0)
                return out
            raise UnbuildableRow(row["load_error"])
        cfg = parse_config(row["config"])
        out.update(hardware=R.row_hardware(row, cfg, hardware_override),
                   category=R.category(row["workload"], cfg), auto_cast=R.row_auto_cast(row, cfg),
                   unit=cfg.get("unit"), dropped=R.drop_reason(row, cfg))
        published = float(row["published_value"])
        out["published_value"] = published
        capture = capture_row(row, tp_method)
        hw = dataclasses.replace(load_hardware(out["hardware"]), **(profile or {}))
        out["notes"] += capture.workload.notes
        out["uncosted_ops"] = capture.uncosted
        sim = simulate(capture, hw, execution, terms=terms)
        out.update(figure=capture.figure.kind, comparator=comparator(capture, sim),
                   simulated_time_us=sim.time_us, device_time_us=sim.device_us,
                   host_us=sim.host.total_us, host=dataclasses.asdict(sim.host),
                   phases_us=sim.phases_us, collective_us=sim.collective_us,
                   fixed_per_execution_us=per_execution_us(capture, hw, execution),
                   simulated_value=sim.value, ratio=sim.value / published)
        out["time_ratio"] = out["ratio"] if capture.workload.unit != "per_s" else published / sim.value
        if row["set"] == R.OPLEVEL:  # one op: which one bounds it is the point of the row
            out["dominant"] = dominant_op(capture, hw, execution)
    except UnbuildableRow as exc:
        out["error"] = f"cannot build {label}: {exc}"
    except Exception as exc:  # a row that fails to run: named, reported, the run goes on
        out["error"] = f"{label} failed: {type(exc).__name__}: {exc}"
        if verbose:
            traceback.print_exc()
    finally:
        torch.set_grad_enabled(True)
    out["elapsed_s"] = round(time.perf_counter() - start, 2)
    return out
