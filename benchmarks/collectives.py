"""Collectives over many ranks: the simulated NeuronCore against nccom-test's published figures.

Run by hand (about a minute; no ``transformers`` needed)::

    python benchmarks/collectives.py                      # every row, the errors per split and series
    python benchmarks/collectives.py --json out.json      # ... and the per-row results
    python benchmarks/collectives.py --fit                # ... and fit trn1's inter-node step
    python benchmarks/collectives.py --package-root DIR   # the same rows on another checkout's package
                                                          # (DIR/pytest_neuronprof: the "before")

Data: ``benchmarks/data/trn_collectives.csv`` (``benchmarks/data/README.md``): every figure of
the nccom-test page (``aws-neuron/aws-neuron-sdk``, ``tools/neuron-sys-tools/nccom-test.rst``, at
the commit each row names) with its instance and release, split by whole rank counts and size
ranges: the fit rows are the 2-rank all-reduces up to 16 MiB that ``benchmarks/fit_trn.py``
fits ``collectives.hop_us`` and the bus share on (the op-level file's all-reduces, there with the
sizes between them) and the four smallest 64-rank all-reduces across two trn1 instances (8-64
bytes: pure latency), which ``--fit`` fits trn1's ``collectives.node_hop_us`` on; held out are
the 2-rank all-reduces from 64 MiB, the 32-rank all-gathers on trn1, the 64-rank all-reduces
across instances from 128 bytes and the 16-rank all-reduces on trn2 (LNC=2). The mechanisms
this script checks (an execution's barrier over its ranks, the runtime's choice of algorithm by
the chunk each rank owns, the hierarchical algorithm across instances) add no other fitted
number. Rows whose instance the page does not state, or whose operation the model does
not cost, are dropped with that reason (the ``notes`` column), never for their ratio.

Each row is one collective on a fake process group of its ranks, profiled as one graph
execution and compared with its figure as a device time (``benchmarks/harness``: the op-level
rows' comparison, the graph's fixed cost and the barrier included). Printed: the rows (with the
algorithm the model picks; for the trn2 rows, the one nccom-test printed), the summaries per
split and per series, issue 28's target for rows it did not give ("collectives over more ranks":
median |sim/published - 1| at most 15 %, all within 2x) on the held-out rows, and what the trn2
16-rank rows would need: the barrier their four smallest sizes imply, and what that barrier
would give the same all-reduce published four releases later (the dropped multistream rows).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Sequence

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

TARGET_MEDIAN, TARGET_FACTOR = 0.15, 2.0  # issue 28, rows it did not give: median 15 %, all within 2x
SERIES = (("t1_ar2_", "trn1, 2 ranks, all-reduce (SDK 2.10)"),
          ("t1_ag32_", "trn1, 32 ranks, all-gather (SDK 2.10)"),
          ("t1_ar64n2_", "trn1, 64 ranks on 2 instances, all-reduce (SDK 2.10)"),
          ("t2_ar16_", "trn2 LNC=2, 16 ranks, all-reduce (SDK 2.28)"))


def _factor(ratio: float) -> float:
    return max(ratio, 1 / ratio)


def summary(rows: Sequence[dict[str, Any]], title: str) -> dict[str, Any]:
    ratios = [r["ratio"] for r in rows]
    if not ratios:
        return {"title": title, "n": 0}
    return {"title": title, "n": len(ratios), "median": statistics.median(abs(x - 1) for x in ratios),
            "within_2x": sum(1 for x in ratios if _factor(x) <= 2.0),
            "worst": max(ratios, key=_factor)}


def _line(s: dict[str, Any]) -> str:
    if not s["n"]:
        return f"  {s['title']}: no rows"
    return (f"  {s['title']:<58} n={s['n']:<3} median |ratio-1| {s['median']:6.3f}   within 2x "
            f"{s['within_2x']:>2}/{s['n']:<3} worst {s['worst']:.3f}")


def algorithm(hw: Any, ranks: int, size: float) -> str:
    """The algorithm the model's runtime picks for a phase of ``size`` bytes over ``ranks``."""
    links = hw.collectives
    if hasattr(links, "crosses_nodes") and links.crosses_nodes(ranks):
        return "hier"
    pick = getattr(links, "algorithm", None)
    if pick is not None:
        return pick(ranks, size)
    if size < links.mesh_max_bytes:  # a package from before Collectives.algorithm
        return "mesh"
    return "rdh" if size <= links.rhd_max_bytes else "ring"


def fit_node_hop(rows: Sequence[dict[str, Any]], compare: Any, load_hardware: Any) -> tuple[float, int]:
    """``collectives.node_hop_us`` of trn1, fitted on the fit rows across two trn1 instances (the
    64-rank all-reduces of 8 to 64 bytes, pure latency): the value that minimises their mean
    |log(simulated / published)|, golden-section search over 1-500 us, every other number the
    profile's. Returns (value, rows)."""
    import dataclasses
    import math

    fit = [r for r in rows if r["id"].startswith("t1_ar64n2_") and r["split"] == "fit"]
    captures = [compare.capture_row(r) for r in fit]
    hw = load_hardware("trn1")

    def loss(hop: float) -> float:
        trial = dataclasses.replace(hw, collectives=dataclasses.replace(hw.collectives, node_hop_us=hop))
        return sum(abs(math.log(compare.simulate(c, trial, "graph").time_us / float(r["published_value"])))
                   for c, r in zip(captures, fit)) / len(fit)

    low, high = 1.0, 500.0
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        a, b = high - golden * (high - low), low + golden * (high - low)
        if loss(a) <= loss(b):
            high = b
        else:
            low = a
    return (low + high) / 2, len(fit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", default=None, help="write the per-row results here")
    parser.add_argument("--fit", action="store_true",
                        help="also fit trn1's collectives.node_hop_us on its fit rows (the 64-rank "
                             "all-reduces across two instances of 8-64 bytes) and print it")
    parser.add_argument("--package-root", metavar="DIR", default=None,
                        help="import pytest_neuronprof from DIR (another checkout: the 'before')")
    args = parser.parse_args(argv)
    for path in (str(HERE), args.package_root or str(ROOT)):
        sys.path.insert(0, path)
    import warnings

    warnings.simplefilter("ignore")
    from harness import compare
    from harness import rows as R
    from harness.workloads import parse_config
    from pytest_neuronprof.costmodel.profiles import load_hardware

    rows = R.read_rows(R.COLLECTIVES_FILE, R.OPLEVEL)
    results = []
    for row in rows:
        result = compare.run_row(row)
        if result["error"] is None and not (result["dropped"] and result["ratio"] is None):
            cfg = parse_config(row["config"])
            hw = load_hardware(result["hardware"])
            phases = 2 if row["workload"] == "all_reduce" else 1
            size = float(cfg["bytes"])
            result["algorithm"] = algorithm(hw, int(cfg["ranks"]), size) if phases else "-"
            barrier = getattr(hw.collectives, "barrier_us", None)
            result["barrier_us"] = barrier(int(cfg["ranks"]), hw.cores_per_chip) if barrier else 0.0
        results.append(result)

    print(f"nccom-test's figures vs the simulated NeuronCore ({R.COLLECTIVES_FILE.name}; "
          f"package {args.package_root or 'this checkout'})")
    print("us: one collective as one graph execution (the graph's fixed cost and the barrier included); "
          "alg: the model's algorithm (published: nccom-test --show-algorithm's)")
    header = (f"{'id':<17} {'hw':<5} {'op':<10} {'ranks':>5} {'bytes':>11} {'split':<8} "
              f"{'published':>10} {'simulated':>10} {'ratio':>7}  alg (published)")
    print(header)
    print("-" * len(header))
    for r in results:
        cfg = parse_config(r["config"]) if r["config"] else {}
        head = (f"{r['id']:<17} {str(r['hardware_profile']):<5} {r['workload']:<10} "
                f"{cfg.get('ranks', r['params'].split(';')[0]):>5} "
                f"{cfg.get('bytes', r['params'].split(';')[-1]):>11} {r['split']:<8} "
                f"{r['published_value']:>10.2f}")
        if r["error"]:
            print(f"{head} ERROR {r['error']}")
            continue
        if r["ratio"] is None:
            print(f"{head} {'-':>10} {'-':>7}  dropped: {r['dropped'][:60]}")
            continue
        published_alg = ""
        notes = next((row.get("notes") for row in rows if row["id"] == r["id"]), "") or ""
        if "runtime picked" in notes:
            published_alg = f" ({notes.rsplit('picked ', 1)[1]})"
        print(f"{head} {r['simulated_value']:>10.2f} {r['ratio']:>7.3f}  {r.get('algorithm', '')}{published_alg}"
              + ("  dropped" if r["dropped"] else ""))

    ran = [r for r in results if r["error"] is None and r["ratio"] is not None and not r["dropped"]]
    print("\nErrors (ratio = simulated / published)")
    summaries = [summary([r for r in ran if r["split"] == "fit"], "fit rows (hop_us, bus share: fit_trn.py; node_hop_us: --fit)"),
                 summary([r for r in ran if r["split"] == "holdout"], "held-out rows")]
    for prefix, title in SERIES:
        for split in ("fit", "holdout"):
            subset = [r for r in ran if r["id"].startswith(prefix) and r["split"] == split]
            if subset:
                summaries.append(summary(subset, f"{title}, {split}"))
    for s in summaries:
        print(_line(s))

    held = [r for r in ran if r["split"] == "holdout"]
    more = [r for r in held if int(parse_config(r["config"])["ranks"]) > 2]
    median = statistics.median(abs(r["ratio"] - 1) for r in more) if more else None
    worst = max((_factor(r["ratio"]) for r in more), default=None)
    print("\nTarget (issue 28, rows it did not give: collectives over more ranks, held out)")
    if median is not None:
        print(f"  median |sim/published - 1| {median:6.3f} <= {TARGET_MEDIAN:.3f}  "
              f"{'PASS' if median <= TARGET_MEDIAN else 'FAIL'}  {len(more)} rows")
        print(f"  worst ratio, either way    {worst:6.3f} <= {TARGET_FACTOR:.3f}  "
              f"{'PASS' if worst <= TARGET_FACTOR else 'FAIL'}  "
              f"{sum(1 for r in more if _factor(r['ratio']) > TARGET_FACTOR)} rows outside 2x")
        for prefix, title in SERIES[1:]:
            subset = [r for r in more if r["id"].startswith(prefix)]
            if subset:
                s = summary(subset, title)
                print(f"    {title:<54} median {s['median']:.3f}, {s['n'] - s['within_2x']} of {s['n']} outside 2x")

    # What the trn2 16-rank rows (SDK 2.28) would need, and what it would do to the same
    # all-reduce four releases later (SDK 2.32, dropped: instance not stated, a second stream).
    small = [r for r in ran if r["id"].startswith("t2_ar16_") and float(parse_config(r["config"])["bytes"]) <= 8192]
    later = [r for r in results if r["id"].startswith("x_ms_ar16_") and r["ratio"] is not None]
    if small:
        implied = statistics.median(r["published_value"] - r["simulated_value"] + r.get("barrier_us", 0.0)
                                    for r in small)
        model_barrier = statistics.median(r.get("barrier_us", 0.0) for r in small)
        print(f"\ntrn2, 16 ranks: the four smallest all-reduces (SDK 2.28) imply a barrier of {implied:.1f} us "
              f"per execution; the model's (2 phases of the group's hops) is {model_barrier:.1f} us")
        if later:
            ratios = [(r["simulated_value"] + implied - r.get("barrier_us", model_barrier)) / r["published_value"]
                      for r in later]
            print(f"  the same all-reduce at SDK 2.32 (bf16, 1 KiB-1 MiB, multistream example) is "
                  f"{min(r['published_value'] for r in later):.1f}-{max(r['published_value'] for r in later):.1f} us: "
                  f"the model gives {min(r['ratio'] for r in later):.3f}-{max(r['ratio'] for r in later):.3f} of it, "
                  f"that barrier would give {min(ratios):.3f}-{max(ratios):.3f}")

    print("\nThe barrier a graph execution over p ranks starts with (Collectives.barrier_us), per profile:")
    for name, groups in (("trn1", (2, 32, 64)), ("inf2", (2, 24)), ("trn2", (16, 64)), ("trn2-lnc1", (128,)),
                         ("trn3", (64,))):
        hw = load_hardware(name)
        barrier = getattr(hw.collectives, "barrier_us", None)
        if barrier is not None:
            print(f"  {name:<10} " + ", ".join(f"{p} ranks {barrier(p, hw.cores_per_chip):.1f} us" for p in groups))

    if args.fit:
        hop, n = fit_node_hop(rows, compare, load_hardware)
        print(f"\nfit: trn1 collectives.node_hop_us = {hop:.1f} us on {n} rows (the profile has "
              f"{load_hardware('trn1').collectives.node_hop_us:g})")

    if args.json:
        Path(args.json).write_text(json.dumps({"package": args.package_root, "results": results,
                                               "summaries": summaries}, indent=1, default=str) + "\n",
                                   encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
