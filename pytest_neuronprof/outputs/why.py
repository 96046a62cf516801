"""Why it is slow, as every output says it: a run's utilisation by Neuron Explorer's Summary
metrics (``utilisation_line``, ``metric_rows``), what changed in utilisation between a
failure's baseline and this run (``change_line``, from both entries alike), each op's bound and
the share of its peak it reaches (``achieved_cell``), and the recommendations
(``recommendation_text``; ``failure_recommendations``: those a failure shows). Text unescaped:
each output escapes what it writes (names come from report files)."""

from __future__ import annotations

import functools
from typing import Callable, Sequence

from ..costmodel.profiles import HardwareProfile
from ..costmodel.recommendations import Recommendation
from ..costmodel.utilisation import ENGINE_FIELDS, Sketch, Utilisation, achieved, percent_text, rate_key, sketch
from ..errors import NeuronProfError
from ..formatting import format_bytes, format_share, format_us
from ..gate.compare import TOTAL, Kind
from ..gate.outcome import TestOutcome
from ..gate.summary import OpSummary, ProfileSummary
from ..vocabulary import SIMULATED

_ENGINE_NAMES = {"Tensor": "TensorE", "Vector": "VectorE", "Scalar": "ScalarE", "GpSimd": "GpSimd"}


def utilisation_line(found: Utilisation) -> str:
    """``MFU 38%, HFU 52%, MBU 22%; active: TensorE 41%, VectorE 12%, ScalarE 3%, GpSimd 0%,
    DMA 64%; DMA transfers 1.2 KiB on average`` (collectives' share where there are some)."""
    engines = ", ".join(f"{_ENGINE_NAMES[engine]} {percent_text(found.active_percent(engine))}"
                        for engine, _ in ENGINE_FIELDS)
    cc = found.active_percent("Collective")
    line = (f"MFU {percent_text(found.mfu_estimated_percent)}, HFU {percent_text(found.hfu_estimated_percent)}, "
            f"MBU {percent_text(found.mbu_estimated_percent)}; active: {engines}, DMA "
            f"{percent_text(found.active_percent('DMA'))}" + (f", collectives {percent_text(cc)}" if cc else ""))
    if found.dma_transfer_count:
        line += f"; DMA transfers {format_bytes(found.dma_transfer_average_bytes)} on average"
    if found.spill_save_bytes:
        line += (f"; spilled {format_bytes(found.spill_save_bytes)}, reloaded "
                 f"{format_bytes(found.spill_reload_bytes)}")
    return line


# (Explorer's name, what it is) of each metric a table shows, in the Summary page's order
METRICS = (
    ("mfu_estimated_percent", "model FLOPs over the time at TensorE's peak for their dtype"),
    ("hfu_estimated_percent", "the FLOPs TensorE's instructions occupy (padding, transposes)"),
    ("mbu_estimated_percent", "HBM bytes over the time at HBM's bandwidth"),
    ("tensor_engine_active_time_percent", "TensorE has an instruction"),
    ("vector_engine_active_time_percent", "VectorE has an instruction"),
    ("scalar_engine_active_time_percent", "ScalarE has an instruction"),
    ("gpsimd_engine_active_time_percent", "GpSimd has an instruction"),
    ("dma_active_time_percent", "a transfer is on the DMA queue"),
    ("cc_op_active_time_percent", "a collective runs"),
    ("dma_transfer_average_bytes", "bytes per DMA descriptor (per partition)"),
    ("useful_read_percent", "HBM reads that are not spill reloads"),
    ("active_throttled_percent", "TensorE's active time lost to its throttling ramp"),
)


def metric_rows(found: Utilisation) -> list[list[str]]:
    """A row per metric: Explorer's name, its value, what it is."""
    values = found.metrics()
    return [[name, format_bytes(values[name]) if name.endswith("_bytes") else percent_text(values[name]),
             meaning] for name, meaning in METRICS]


@functools.lru_cache(maxsize=16)
def _profile(hardware: str) -> HardwareProfile | None:
    from ..costmodel.profiles import available_hardware, load_hardware

    if hardware not in available_hardware():
        return None
    try:
        return load_hardware(hardware)
    except NeuronProfError:
        return None


def _peak(summary: ProfileSummary, hw: HardwareProfile) -> Callable[[str], float]:
    """TensorE's peak FLOP/us for a dtype of ``summary``'s (its logical core's arrays)."""
    def peak(dtype: str) -> float:
        return hw.tensor.flops_per_us(rate_key(dtype, summary.execution, summary.auto_cast)) * hw.tensor.arrays
    return peak


def sketch_of(summary: ProfileSummary) -> Sketch | None:
    """``costmodel.utilisation.sketch`` of an entry; None off the simulated backend's profiles."""
    hw = _profile(summary.hardware) if summary.backend == SIMULATED else None
    if hw is None:
        return None
    return sketch(((op.engine, op.flops, op.bytes, op.dtype, op.bound, op.device_time_us)
                   for op in summary.ops.values()), summary.total_device_time_us, _peak(summary, hw),
                  hw.hbm_bytes_per_us)


MAX_BOUNDS_NAMED = 2  # bounds whose share of the time moved most, in the change line


def change_line(outcome: TestOutcome) -> str:
    """What changed in utilisation, baseline -> this run, sketched from both entries alike:
    ``MFU 71% -> 38%, MBU 22% -> 64%; time bound by TensorE 80% -> 41%, HBM 15% -> 52%``; ""
    without a comparable baseline or off the simulated backend."""
    baseline = outcome.comparable_baseline
    if baseline is None:
        return ""
    old, new = sketch_of(baseline), sketch_of(outcome.current)
    if old is None or new is None:
        return ""
    pairs = [(percent_text(old.mfu_percent), percent_text(new.mfu_percent)),
             (percent_text(old.mbu_percent), percent_text(new.mbu_percent))]
    line = f"MFU {pairs[0][0]} -> {pairs[0][1]}, MBU {pairs[1][0]} -> {pairs[1][1]}"
    bounds = (set(old.bound_percent) | set(new.bound_percent)) - {"none"}  # "none": not known
    moved = sorted(bounds, key=lambda b: (-abs(new.bound_percent.get(b, 0.0) - old.bound_percent.get(b, 0.0)), b))
    named = [b for b in moved[:MAX_BOUNDS_NAMED]
             if abs(new.bound_percent.get(b, 0.0) - old.bound_percent.get(b, 0.0)) >= 0.5]
    if named:
        line += "; time bound by " + ", ".join(
            f"{b} {percent_text(old.bound_percent.get(b, 0.0))} -> {percent_text(new.bound_percent.get(b, 0.0))}"
            for b in named)
    elif all(before == after for before, after in pairs):
        return ""  # nothing the entries say of it moved
    return line


def achieved_cell(summary: ProfileSummary, op: OpSummary) -> str:
    """The share of its bound's peak an op of an entry reaches ("81%"), where the entry says:
    TensorE, HBM and collectives; "-" for the lane engines (entries keep no element counts; a
    report's ``utilisation`` has the run's), a fixed cost and measured backends."""
    hw = _profile(summary.hardware) if summary.backend == SIMULATED else None
    if hw is None:
        return "-"
    found = achieved(op.bound, op.flops, op.bytes, op.link_bytes, op.device_time_us, _peak(summary, hw)(op.dtype),
                     hw.hbm_bytes_per_us, hw.collectives.bus_gbps * 1e3)
    return "-" if found is None else format_share(found)


def recommendation_text(r: Recommendation, total_us: float = 0.0) -> str:
    """``Transpose FLOPS > 10% of total hardware FLOPS: transposes are 23% of TensorE's
    hardware FLOPs (at stake: 12.300 us, 4% of the device time); aten::mm in mlp.up. Improve
    memory layout ... [source]``."""
    stake = format_us(r.cost_us) + (f", {format_share(r.cost_us / total_us)} of the device time"
                                    if total_us > 0 else "")
    where = r.where()
    return (f"{r.condition}: {r.found} (at stake: {stake})" + (f"; {where}" if where else "")
            + f". {r.action}. [{r.source}]")


def changed_ops(outcome: TestOutcome) -> set[str]:
    """The ops a failure is about: those its findings name (a replaced op's too, and the new
    ops that replaced it)."""
    named: set[str] = set()
    for f in outcome.verdict.regressions:
        if f.kind in (Kind.TOTAL, Kind.POLICY) or f.op == TOTAL:
            continue
        named.update(f.op.split(" + ") if f.kind == Kind.REPLACED else (f.op,))
    return named


def failure_recommendations(outcome: TestOutcome) -> list[Recommendation]:
    """The recommendations a failure shows: this run's that name an op the failure is about.
    Baseline entries keep no recommendations (their schema is unchanged), so a failure cannot
    tell whether the base had the same one; one about the ops that changed is the change's."""
    named = changed_ops(outcome)
    return [r for r in outcome.recommendations if named & set(r.about or r.ops)]


def recommendation_lines(recommendations: Sequence[Recommendation], total_us: float,
                         escape: Callable[[str], str]) -> list[str]:
    return [f"- {escape(recommendation_text(r, total_us))}" for r in recommendations]
