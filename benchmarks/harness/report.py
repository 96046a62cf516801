"""What ``benchmarks/published.py`` prints: the model-level and op-level tables (each row with the
comparator its figure uses), the summaries, the regression-size pairs and the targets of
issue 28.

Ratios: ``ratio`` = simulated / published in the row's unit; ``t_ratio`` = simulated time /
published time, the same for time units and the inverse for throughputs, so that > 1 always
means "the simulator is slower". Summaries and targets count the rows that ran and are not
dropped; a row that failed is listed by its label, a dropped one with its reason.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Sequence

from . import rows as R
from .workloads import model_family, parse_config


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    digits = max(0, 3 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{min(digits, 4)}f}"


def compared(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that ran and are not dropped: what the summaries, pairs and targets count."""
    return [r for r in results if r["error"] is None and r["ratio"] is not None and not r.get("dropped")]


def summarize(results: Sequence[dict[str, Any]], title: str) -> str:
    ratios = [r["ratio"] for r in results if r["ratio"] is not None]
    if not ratios:
        return f"{title}: no rows"
    errors = [abs(x - 1) for x in ratios]
    within = sum(1 for x in ratios if 0.5 <= x <= 2.0)
    slow = [r["time_ratio"] for r in results if r["time_ratio"] is not None]
    gmean = math.exp(statistics.fmean(math.log(x) for x in slow))
    return (f"{title}: n={len(ratios)}  median |ratio-1| = {statistics.median(errors):.3f}  "
            f"within 2x: {within}/{len(ratios)} ({within / len(ratios):.0%})  "
            f"geomean time ratio (sim/published) = {gmean:.3f}")


def _print_rows(header: str, results: Sequence[dict[str, Any]], head: Any, tail: Any) -> None:
    """A table: ``head(row)`` for every row, then ``tail(row)`` or the row's error."""
    print(header)
    print("-" * len(header))
    for r in results:
        line = f"{head(r)} ERROR {r['error']}" if r["error"] else f"{head(r)} {tail(r)}"
        print(line + ("  DROPPED" if r.get("dropped") else ""))


def _short(r: dict[str, Any]) -> str:
    return (r.get("comparator") or "-").split(":")[0]


def print_table(results: Sequence[dict[str, Any]]) -> None:
    _print_rows(
        f"{'row':<44} {'hw':<5} {'workload':<13} {'cat':<10} {'cast':<7} {'comparator':<10} "
        f"{'published':>11} {'unit':<9} {'simulated':>11} {'host ms':>8} {'ratio':>7} {'t_ratio':>7}", results,
        lambda r: (f"{r['label'][:44]:<44} {str(r['hardware'])[:5]:<5} {str(r['workload'])[:13]:<13} "
                   f"{str(r['category']):<10} {str(r['auto_cast']):<7} {_short(r):<10} "
                   f"{_fmt(r['published_value']):>11} {str(r['published_unit'])[:9]:<9}"),
        lambda r: (f"{_fmt(r['simulated_value']):>11} {_fmt((r['host_us'] or 0) / 1e3):>8} "
                   f"{r['ratio']:>7.3f} {r['time_ratio']:>7.3f}"))


def print_comparators(results: Sequence[dict[str, Any]]) -> None:
    """Each host-measured row's comparator with its host terms (the table shows its kind)."""
    print("Comparators: device = device time only; step = an optimizer step (micro-steps, gradient "
          "all-reduce, optimizer) per microbatch;\n  e2e w=N = a request's whole time "
          "(host call + input copies + device + output copies) with N requests in flight per core: "
          "N x max(device, (host + device) / N);\n  core w=N = the per-core time per batch, "
          "max(device, (host + device) / N), behind a throughput")
    for r in results:
        if r["error"] is None and r.get("comparator") and ":" in r["comparator"]:
            print(f"  {r['label'][:44]:<44} {r['comparator']}")


def _dominant(r: dict[str, Any]) -> str:
    top = r["dominant"] or {}
    peak = top.get("peak_fraction")
    return (f"{top.get('name')} ({top.get('share', 0):.0%}, {top.get('bound')}, "
            f"{'-' if peak is None else f'{peak:.0%}'})")


def print_oplevel_table(results: Sequence[dict[str, Any]]) -> None:
    _print_rows(
        f"{'id':<11} {'hardware':<9} {'workload':<10} {'params':<15} {'dtype':<5} {'split':<7} "
        f"{'published':>10} {'simulated':>10} {'ratio':>7}  dominant op (share, bound, peak)", results,
        lambda r: (f"{r['id']:<11} {str(r['hardware']):<9} {r['workload']:<10} {r['params']:<15} "
                   f"{r['dtype']:<5} {r['split']:<7} {_fmt(r['published_value']):>10}"),
        lambda r: f"{_fmt(r['simulated_value']):>10} {r['ratio']:>7.3f}  {_dominant(r)}")


# --- regression sizes: pairs of published figures that differ only in size ------------------------

SIZE_KEYS = frozenset({"batch", "arch", "depth"})


def find_pairs(rows: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]]:
    """Pairs of model-level rows of the same chip and workload whose configs are equal but for
    batch, arch or depth (the sizes a regression changes), two archs being sizes of one model
    family (``workloads.model_family``: ResNet-18 and -152, BERT base and large, not ALBERT and
    BERT): (row, row, the keys that differ), in the rows' order."""
    model = [r for r in rows if r["set"] in R.MODEL_SETS]
    configs = [parse_config(r["config"]) for r in model]
    pairs = []
    for i, (a, ca) in enumerate(zip(model, configs)):
        for b, cb in zip(model[i + 1:], configs[i + 1:]):
            if (a["hardware_profile"], a["workload"]) != (b["hardware_profile"], b["workload"]):
                continue
            differ = sorted(k for k in {*ca, *cb} if ca.get(k) != cb.get(k))
            if not differ or not set(differ) <= SIZE_KEYS:
                continue
            if "arch" in differ and model_family(str(ca.get("arch"))) != model_family(str(cb.get("arch"))):
                continue
            pairs.append((a, b, tuple(differ)))
    return pairs


def pair_growths(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair's growth in the time its figures compare, smaller published time first:
    published, simulated (each counting what its published figure counts) and simulated /
    published. A throughput's time is items / throughput, so the growth of a pair is the ratio
    of the rows' times whatever their unit. Dropped rows make no pair."""
    out = []
    for a, b, differ in find_pairs([r for r in results if not r.get("dropped")]):
        entry: dict[str, Any] = {"rows": [a["label"], b["label"]], "differ": list(differ),
                                 "published_growth": None, "simulated_growth": None, "ratio": None}
        if a.get("time_ratio") and b.get("time_ratio"):
            # published time = simulated time / (simulated / published time)
            pub = {r["label"]: r["simulated_time_us"] / r["time_ratio"] for r in (a, b)}
            small, large = sorted((a, b), key=lambda r: pub[r["label"]])
            entry["rows"] = [small["label"], large["label"]]
            entry["published_growth"] = pub[large["label"]] / pub[small["label"]]
            entry["simulated_growth"] = large["simulated_time_us"] / small["simulated_time_us"]
            entry["ratio"] = entry["simulated_growth"] / entry["published_growth"]
        out.append(entry)
    return out


def print_pairs(pairs: Sequence[dict[str, Any]]) -> None:
    print(f"{'smaller':<40} {'larger':<40} {'differ':<11} {'pub growth':>10} {'sim growth':>10} {'sim/pub':>8}")
    for p in pairs:
        cells = (f"{_fmt(p['published_growth']):>10} {_fmt(p['simulated_growth']):>10} {p['ratio']:>8.3f}"
                 if p["ratio"] is not None else "not run")
        print(f"{p['rows'][0][:40]:<40} {p['rows'][1][:40]:<40} {','.join(p['differ']):<11} {cells}")


# --- the targets of issue 28 ---------------------------------------------------------------------

TARGETS_OF = "issue 28"


@dataclasses.dataclass
class Target:
    """A figure the simulator must reach: ``value`` within [low, high] (None: unbounded)."""

    level: str
    name: str
    value: float | None  # None: the rows it needs did not run
    low: float | None
    high: float | None
    rows: str = ""  # how many rows or pairs it was measured on

    @property
    def passed(self) -> bool | None:
        if self.value is None:
            return None
        return (self.low is None or self.value >= self.low) and (self.high is None or self.value <= self.high)

    @property
    def threshold(self) -> str:
        if self.low is None:
            return f"<= {self.high:.3f}"
        return f"in [{self.low:.3f}, {self.high:.3f}]"

    @property
    def status(self) -> str:
        return {True: "PASS", False: "FAIL", None: "n/a"}[self.passed]

    def line(self) -> str:
        value = "-" if self.value is None else f"{self.value:.3f}"
        return f"  {self.level:<11} {self.name:<52} {value:>8}  {self.threshold:<16} {self.status:<5} {self.rows}"

    def as_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "threshold": self.threshold, "passed": self.passed}


def _factor(ratio: float) -> float:
    """How far a ratio is from 1, either way: 2.0 for 0.5 and for 2."""
    return max(ratio, 1 / ratio)


def _median_error(rows: Sequence[dict[str, Any]]) -> float | None:
    return statistics.median(abs(r["ratio"] - 1) for r in rows) if rows else None


def _worst(ratios: Sequence[float]) -> float | None:
    return max(map(_factor, ratios)) if ratios else None


def targets(results: Sequence[dict[str, Any]], pairs: Sequence[dict[str, Any]]) -> list[Target]:
    """Issue 28's targets on the rows compared (n/a where the rows a target needs did not run)."""
    ran = compared(results)
    op = [r for r in ran if r["set"] == R.OPLEVEL]
    n_op = f"{len(op)}/{sum(1 for r in results if r['set'] == R.OPLEVEL)} rows"
    by_id = {r["id"]: r for r in op}
    growth = None
    if "g512" in by_id and "g4096" in by_id:  # (sim 4096 / sim 512) / (published 4096 / published 512)
        growth = by_id["g4096"]["time_ratio"] / by_id["g512"]["time_ratio"]
    model = [r for r in ran if r["set"] in R.MODEL_SETS]
    held = [r for r in model if r["set"] == "holdout"]
    held_bound = [r for r in held if r["category"] in R.DEVICE_BOUND]
    measured = [p["ratio"] for p in pairs if p["ratio"] is not None]
    median_pair = statistics.median(map(_factor, measured)) if measured else None
    return [
        Target("op-level", "median |sim/published - 1|", _median_error(op), None, 0.05, n_op),
        Target("op-level", "worst time ratio, either way (all within 1.2x)",
               _worst([r["time_ratio"] for r in op]), None, 1.2, n_op),
        Target("op-level", "GEMM growth 512^3 -> 4096^3, sim / published",
               growth, 1 / 1.3, 1.3, "published growth 33.8x" if growth is not None else ""),
        Target("model", "held-out median |sim/published - 1|", _median_error(held), None, 0.15,
               f"{len(held)} rows"),
        Target("model", "device-bound held-out median |sim/published - 1|", _median_error(held_bound),
               None, 0.20, f"{len(held_bound)} rows"),
        Target("model", "worst time ratio, either way (all within 2x)",
               _worst([r["time_ratio"] for r in model]), None, 2.0, f"{len(model)} rows"),
        Target("sizes", "median pair's growth sim / published, either way", median_pair, None, 1.1,
               f"{len(measured)} pairs"),
        Target("sizes", "worst pair's growth sim / published, either way", _worst(measured), None, 1.5,
               f"{len(measured)} pairs"),
    ]


def print_report(results: Sequence[dict[str, Any]], header: str) -> tuple[list[dict[str, Any]], list[Target]]:
    """Print every section; returns the pairs and the targets."""
    print(header)
    print("ratio = simulated / published in the row's unit; t_ratio = simulated time / published time "
          "(> 1: simulator slower); cast = neuronx-cc --auto-cast of the row; comparator: what the "
          "published figure counts (below); host ms: the host's part of one request")
    ok = compared(results)
    model = [r for r in results if r["set"] in R.MODEL_SETS]
    if model:
        print("\nModel level")
        print_table(model)
        print()
        print_comparators(model)
        print()
        model_ok = [r for r in ok if r["set"] in R.MODEL_SETS]
        print(summarize(model_ok, "all rows"))
        print(summarize([r for r in model_ok if r["category"] in R.DEVICE_BOUND],
                        "device-bound (batch, training, kernel)"))
        print(summarize([r for r in model_ok if r["category"] == "b1-latency"], "batch-1 latency"))
        for name in R.MODEL_SETS:
            subset = [r for r in model_ok if r["set"] == name]
            if subset and len(subset) != len(model_ok):
                print(summarize(subset, name))
        for workload in sorted({r["workload"] for r in model_ok}):
            print(summarize([r for r in model_ok if r["workload"] == workload], f"  {workload}"))
        for figure in sorted({r["figure"] for r in model_ok}):
            print(summarize([r for r in model_ok if r["figure"] == figure], f"  comparator {figure}"))
    oplevel = [r for r in results if r["set"] == R.OPLEVEL]
    if oplevel:
        print("\nOp level (device time of one graph execution, us; split: fit or held out)")
        print_oplevel_table(oplevel)
        print()
        op_ok = [r for r in ok if r["set"] == R.OPLEVEL]
        print(summarize(op_ok, "op-level rows"))
        for split in ("fit", "holdout"):
            print(summarize([r for r in op_ok if r["split"] == split], f"  {split}"))
    pairs = pair_growths(results)
    if pairs:
        print(f"\nRegression sizes: {len(pairs)} pairs of rows that differ only in {', '.join(sorted(SIZE_KEYS))}")
        print_pairs(pairs)
    goals = targets(results, pairs)
    print(f"\nTargets ({TARGETS_OF})")
    for goal in goals:
        print(goal.line())
    dropped = [r for r in results if r.get("dropped") and r["error"] is None]
    if dropped:
        print(f"{len(dropped)} row(s) dropped (not compared): "
              + "; ".join(f"{r['label']}: {r['dropped']}" for r in dropped))
    failed = [r for r in results if r["error"]]
    if failed:
        print(f"{len(failed)} row(s) FAILED (not compared): " + "; ".join(r["error"] for r in failed))
    return pairs, goals
