"""ProfileSummary: the per-op numbers of one profiled test that baselines store and the gate
compares. Built from a ProfileResult; plain data, no torch, no I/O."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

# Fixed rounding, so re-recording unchanged code gives byte-identical baseline files.
TIME_DECIMALS = 4
SHARE_DECIMALS = 6
SAMPLE_DECIMALS = 3  # per-round samples of measured backends: a nanosecond is plenty


@dataclass(frozen=True)
class OpSummary:
    count: int
    device_time_us: float
    engine: str
    flops: int
    bytes: int
    share: float
    module: str  # the module path where this op spent most of its device time

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "device_time_us": round(self.device_time_us, TIME_DECIMALS),
            "engine": self.engine,
            "flops": self.flops,
            "bytes": self.bytes,
            "share": round(self.share, SHARE_DECIMALS),
            "module": self.module,
        }


@dataclass(frozen=True)
class RoundSamples:
    """Per-round times of a measured test, for the gate's significance test: the total of each
    round, and each round's time of the ops that matter (the hotspots when it was made).
    Rounds are in the order they ran."""

    total: tuple[float, ...]
    ops: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    @property
    def rounds(self) -> int:
        return len(self.total)

    def to_json(self) -> dict[str, Any]:
        return {
            "rounds": self.rounds,
            "total_device_time_us": [round(v, SAMPLE_DECIMALS) for v in self.total],
            "ops": {name: [round(v, SAMPLE_DECIMALS) for v in values]
                    for name, values in sorted(self.ops.items())},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "RoundSamples":
        return cls(tuple(float(v) for v in data["total_device_time_us"]),
                   {name: tuple(float(v) for v in values) for name, values in data["ops"].items()})


@dataclass(frozen=True)
class ProfileSummary:
    backend: str
    hardware: str
    cost_model_version: str
    torch_version: str
    total_device_time_us: float
    ops: dict[str, OpSummary] = field(default_factory=dict)
    # Measured backends only: the rounds behind the medians above. None for the simulated
    # backend, whose numbers are exact (and whose baselines stay as they were).
    samples: RoundSamples | None = None

    @property
    def variant(self) -> str:
        """Baselines keep one entry per backend and hardware; never compared across them."""
        return f"{self.backend}:{self.hardware}"

    def ranked(self) -> list[tuple[str, OpSummary]]:
        """Ops by device time, largest first; ties by name so the order is deterministic."""
        return sorted(self.ops.items(), key=lambda item: (-item[1].device_time_us, item[0]))

    def to_json(self) -> dict[str, Any]:
        return self._json

    @functools.cached_property
    def _json(self) -> dict[str, Any]:
        # Computed once: a summary is serialized for xdist, the report and the baseline file.
        data = {
            "backend": self.backend,
            "hardware": self.hardware,
            "cost_model_version": self.cost_model_version,
            "torch_version": self.torch_version,
            "total_device_time_us": round(self.total_device_time_us, TIME_DECIMALS),
            "ops": {name: op.to_json() for name, op in sorted(self.ops.items())},
        }
        if self.samples is not None:
            data["samples"] = self.samples.to_json()
        return data


def torch_minor_version(version: str) -> str:
    """'2.13.0+cpu' -> '2.13': patch releases and build flavours do not change op sequences."""
    return ".".join(version.split("+")[0].split(".")[:2])


def summarize(result: Any, cost_model_version: str, torch_version: str) -> ProfileSummary:
    """Aggregate a ProfileResult per op name. Ops with no device time (views) are left out."""
    totals: dict[str, dict[str, Any]] = {}
    for r in result.records:
        if r.device_time_us <= 0:
            continue
        entry = totals.setdefault(r.name, {"count": 0, "time": 0.0, "flops": 0, "bytes": 0,
                                           "engine": r.engine, "modules": {}})
        entry["count"] += 1
        entry["time"] += r.device_time_us
        entry["flops"] += r.flops
        entry["bytes"] += r.bytes_read + r.bytes_written
        entry["modules"][r.module_path] = entry["modules"].get(r.module_path, 0.0) + r.device_time_us
    total = sum(e["time"] for e in totals.values())
    ops = {
        name: OpSummary(
            count=e["count"],
            device_time_us=e["time"],
            engine=e["engine"],
            flops=e["flops"],
            bytes=e["bytes"],
            share=e["time"] / total if total else 0.0,
            module=min(e["modules"].items(), key=lambda m: (-m[1], m[0]))[0],
        )
        for name, e in totals.items()
    }
    return ProfileSummary(result.backend, result.hardware, cost_model_version,
                          torch_minor_version(torch_version), total, ops)


def summarize_rounds(results: Sequence[Any], cost_model_version: str, torch_version: str,
                     sample_ops: Callable[[ProfileSummary], Iterable[str]] | None = None) -> ProfileSummary:
    """One summary of several rounds of the same test (measured backends).

    Timing noise on a shared machine (preemption, cache and memory-bandwidth contention, page
    faults) only ever adds time, so each op's number is its *best* round: the minimum of its
    per-round device time over the rounds it ran in ("best of N", as ``timeit`` advises). An op
    that ran in fewer than half of the rounds is left out (one-time work: lazy init). Its
    calls are the lower median of its per-round calls. The total is the sum of the ops' best
    rounds: for the examples on 2 shared cores it varied 4-13 % across 8 processes, where the
    fastest round's total varied 8-22 % and the median round's 10-41 %.

    With ``sample_ops``, the summary keeps every round's total and the per-round times of the
    ops ``sample_ops(summary)`` names (the hotspots), for the gate's significance test. One
    round without ``sample_ops`` is ``summarize`` itself (the simulated backend's path).
    """
    from .stats import median_low

    if not results:
        raise ValueError("summarize_rounds needs at least one round")
    if len(results) == 1 and sample_ops is None:
        return summarize(results[0], cost_model_version, torch_version)
    rounds = [summarize(r, cost_model_version, torch_version) for r in results]
    first = rounds[0]
    totals = [s.total_device_time_us for s in rounds]
    per_op: dict[str, list[float]] = {}
    best: dict[str, float] = {}
    for name in sorted({name for s in rounds for name in s.ops}):
        present = [s.ops[name].device_time_us for s in rounds if name in s.ops]
        per_op[name] = [s.ops[name].device_time_us if name in s.ops else 0.0 for s in rounds]
        if 2 * len(present) >= len(rounds) and min(present) > 0:
            best[name] = min(present)
    total = sum(best.values())
    ops: dict[str, OpSummary] = {}
    for name, value in best.items():
        present_ops = [s.ops[name] for s in rounds if name in s.ops]
        ops[name] = OpSummary(
            count=median_low([s.ops[name].count if name in s.ops else 0 for s in rounds]),
            device_time_us=value,
            engine=present_ops[0].engine,
            flops=median_low([op.flops for op in present_ops]),
            bytes=median_low([op.bytes for op in present_ops]),
            share=value / total if total else 0.0,
            # the module where the op spent most of its time in most rounds
            module=max(sorted({op.module for op in present_ops}),
                       key=lambda m: sum(op.module == m for op in present_ops)),
        )
    summary = ProfileSummary(first.backend, first.hardware, cost_model_version,
                             first.torch_version, total, ops)
    if sample_ops is None:
        return summary
    chosen = sorted(set(sample_ops(summary)) & set(ops))
    samples = RoundSamples(tuple(totals), {name: tuple(per_op[name]) for name in chosen})
    return ProfileSummary(summary.backend, summary.hardware, cost_model_version,
                          summary.torch_version, summary.total_device_time_us, ops, samples)
