"""Compare the simulated NeuronCore with performance figures AWS publishes.

Run by hand (a few minutes on 2 cores; needs ``transformers``)::

    python benchmarks/published.py                          # every row, graph execution
    python benchmarks/published.py --rows calibration       # the 18 calibration rows only
    python benchmarks/published.py --rows holdout --json out.json
    python benchmarks/published.py --execution eager        # the same rows as eager execution
    python benchmarks/published.py --hardware-override trn2 # every row on another profile

Data: ``benchmarks/data/trn_published_calibration.csv`` (18 rows, the ones a fit may use) and
``benchmarks/data/trn_published_holdout.csv`` (rows kept aside to check a fit on workloads it
was not fitted to); ``benchmarks/data/README.md`` describes the columns and where each figure
comes from. Each row's workload is rebuilt on ``meta`` tensors by
``benchmarks/published_workloads.py``; every phase runs once outside the profiler (warm-up:
lazy caches, optimizer state) and then once under
``NeuronProfiler(NeuronConfig(hardware=<row's profile>, ...))``. The weighted device time of
the phases is converted into the row's unit and divided by the published value.

Printed: one line per row (label, hardware, workload, published value and unit, simulated
value, ratio simulated / published and the time ratio, which is the same for time units and
its inverse for throughputs, so that > 1 always means "the simulator is slower"), then the
median |ratio - 1| and the share of rows within 2x, over all rows, the device-bound rows
(batch throughput, training, NKI kernel) and the batch-1 latency rows. A row that fails to
build or run prints its error and the run goes on. ``--json PATH`` writes the per-row results
(for a fitting script).

Each row runs once, captured in graph mode; ``--execution`` then times the capture as eager or
graph execution (graph: the default, as the published figures come from compiled graphs). The
rows' own profile (Trn2 rows published at the SDK's default LNC=2 run on ``trn2``; ``lnc=1`` rows
on ``trn2-lnc1``), unless ``--hardware-override``. Host-measured latencies (ms rows but the NKI
kernel's device time) include the profile's ``graph_execution_us`` per graph execution.
``benchmarks/fit_trn.py`` uses ``capture_row`` and ``time_row`` to fit the profiles.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
ROW_FILES = {"calibration": DATA / "trn_published_calibration.csv",
             "holdout": DATA / "trn_published_holdout.csv"}


def load_rows(which: str) -> list[dict[str, Any]]:
    names = ["calibration", "holdout"] if which == "all" else [which]
    rows = []
    for name in names:
        with open(ROW_FILES[name], newline="", encoding="utf-8") as f:
            for i, row in enumerate(csv.DictReader(f), 1):
                row["set"] = name
                row["index"] = i
                rows.append(row)
    return rows


def row_label(row: dict[str, Any], cfg: dict[str, Any]) -> str:
    prefix = "C" if row["set"] == "calibration" else "H"
    parts = [cfg.get("arch", row["workload"].split("_")[0])]
    for key, short in (("batch", "b"), ("seq", "s"), ("ctx", "ctx"), ("channels", "c"), ("tp", "tp")):
        if key in cfg and not (key == "tp" and int(cfg[key]) == 1):
            parts.append(f"{short}{cfg[key]}")
    if row["workload"] == "llama_prefill":
        parts.append("prefill")
    return f"{prefix}{row['index']:02d} " + " ".join(str(p) for p in parts)


def category(workload: str, cfg: dict[str, Any]) -> str:
    if workload == "mamba_fused":
        return "kernel"
    if workload == "train_step":
        return "training"
    return "batch" if int(cfg.get("batch", 1)) > 1 else "b1-latency"


DEVICE_BOUND = ("batch", "training", "kernel")


def row_hardware(row: dict[str, Any], cfg: dict[str, Any], override: str | None = None) -> str:
    """The profile a row runs on: its own, at the LNC it was published with."""
    hardware = override or row["hardware_profile"]
    if not override and int(cfg.get("lnc", 2)) == 1 and hardware in ("trn2", "trn3"):
        hardware += "-lnc1"
    return hardware


def host_measured(row: dict[str, Any], cfg: dict[str, Any]) -> bool:
    """A latency the host measured (it includes launching the graph), not a device time (the
    NKI kernel's) or a throughput (requests kept in flight hide the launches)."""
    return cfg.get("unit") == "ms" and row["workload"] != "mamba_fused"


@dataclasses.dataclass
class RowCapture:
    """One row's workload, run once: per phase its capture and weight."""

    row: dict[str, Any]
    cfg: dict[str, Any]
    workload: Any
    phases: list[tuple[str, float, Any]]  # (name, weight, Capture)
    uncosted: list[str]


def capture_row(row: dict[str, Any], tp_method: str = "shard") -> RowCapture:
    """Build the row's workload and run each phase once under the simulated profiler (graph
    mode, so that the capture holds the dataflow); warm-up runs first, unprofiled."""
    from pytest_neuronprof import NeuronConfig, NeuronProfiler
    import published_workloads as pw

    cfg = pw.parse_config(row["config"])
    workload = pw.build(row["workload"], cfg, tp_method=tp_method)
    for phase in workload.phases:  # warm-up, unprofiled: lazy caches, optimizer state
        phase.fn()
    phases, uncosted = [], set()
    for phase in workload.phases:
        prof = NeuronProfiler(NeuronConfig(hardware=row_hardware(row, cfg), execution="graph",
                                           modes=("device",)))
        prof._backend.keep_capture = True
        with prof:
            phase.fn()
        uncosted.update(prof.result.uncosted_ops)
        phases.append((phase.name, phase.weight, prof._backend.last_capture))
    return RowCapture(row, cfg, workload, phases, sorted(uncosted))


def time_row(capture: RowCapture, hw: Any, execution: str) -> tuple[float, dict[str, float], float]:
    """(weighted time in us as the published figure counts it, per-phase device times, weighted
    collective time) of a captured row on profile ``hw``."""
    phases: dict[str, float] = {}
    collective = 0.0
    overhead = hw.graph_execution_us if execution == "graph" and host_measured(capture.row, capture.cfg) else 0.0
    for name, weight, captured in capture.phases:
        records = captured.retime(hw, execution)
        phases[name] = sum(r.device_time_us for r in records) + overhead
        collective += weight * sum(r.device_time_us for r in records if r.engine == "Collective")
    return capture.workload.weighted(phases), phases, collective


def run_row(row: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from pytest_neuronprof.costmodel.profiles import load_hardware
    import published_workloads as pw

    cfg = pw.parse_config(row["config"])
    hardware = row_hardware(row, cfg, args.hardware_override)
    published = float(row["published_value"])
    out: dict[str, Any] = {
        "label": row_label(row, cfg), "set": row["set"], "index": row["index"], "source": row["source"],
        "hardware_profile": row["hardware_profile"], "hardware": hardware, "workload": row["workload"],
        "config": row["config"], "category": category(row["workload"], cfg),
        "published_metric": row["published_metric"], "published_value": published,
        "published_unit": row["published_unit"], "unit": cfg.get("unit"), "execution": args.execution,
        "tp_method": args.tp_method, "simulated_value": None, "ratio": None, "time_ratio": None,
        "device_time_us": None, "phases_us": {}, "collective_us": 0.0, "uncosted_ops": [],
        "notes": [], "error": None,
    }
    start = time.perf_counter()
    try:
        capture = capture_row(row, args.tp_method)
        out["notes"] += capture.workload.notes
        out["uncosted_ops"] = capture.uncosted
        total, out["phases_us"], out["collective_us"] = time_row(capture, load_hardware(hardware),
                                                                 args.execution)
        out["device_time_us"] = total
        simulated = capture.workload.to_metric(total)
        out["simulated_value"] = simulated
        out["ratio"] = simulated / published
        out["time_ratio"] = out["ratio"] if capture.workload.unit != "per_s" else published / simulated
    except Exception as exc:  # a row that fails to build or run: report it, go on
        out["error"] = f"{type(exc).__name__}: {exc}"
        if args.verbose:
            traceback.print_exc()
    finally:
        torch.set_grad_enabled(True)
    out["elapsed_s"] = round(time.perf_counter() - start, 2)
    return out


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0"
    digits = max(0, 3 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{min(digits, 4)}f}"


def summarize(results: list[dict[str, Any]], title: str) -> str:
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


def print_table(results: list[dict[str, Any]]) -> None:
    header = (f"{'row':<44} {'hw':<5} {'workload':<13} {'cat':<10} {'published':>11} {'unit':<9} "
              f"{'simulated':>11} {'ratio':>7} {'t_ratio':>7}")
    print(header)
    print("-" * len(header))
    for r in results:
        if r["error"]:
            print(f"{r['label'][:44]:<44} {r['hardware']:<5} {r['workload']:<13} {r['category']:<10} "
                  f"{_fmt(r['published_value']):>11} {r['published_unit'][:9]:<9} ERROR {r['error']}")
            continue
        print(f"{r['label'][:44]:<44} {r['hardware']:<5} {r['workload']:<13} {r['category']:<10} "
              f"{_fmt(r['published_value']):>11} {r['published_unit'][:9]:<9} {_fmt(r['simulated_value']):>11} "
              f"{r['ratio']:>7.3f} {r['time_ratio']:>7.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--execution", choices=("eager", "graph"), default="graph",
                        help="time the rows as eager or graph execution (default: graph, as published)")
    parser.add_argument("--rows", choices=("calibration", "holdout", "all"), default="all")
    parser.add_argument("--hardware-override", metavar="X", default=None,
                        help="run every row on hardware profile X instead of the row's own")
    parser.add_argument("--tp-method", choices=("shard", "divide"), default="shard",
                        help="tp > 1 rows: one rank's shard with collectives (default), or the whole "
                             "model on one core with its time divided by tp")
    parser.add_argument("--only", metavar="TEXT", default=None,
                        help="run only the rows whose label, workload or config contains TEXT, or whose "
                             "hardware profile is TEXT")
    parser.add_argument("--json", metavar="PATH", default=None, help="write the per-row results here")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print tracebacks, notes and uncosted ops per row")
    args = parser.parse_args(argv)

    if importlib.util.find_spec("transformers") is None:
        print("benchmarks/published.py needs transformers to build the models: "
              "pip install transformers", file=sys.stderr)
        return 2

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch

    if args.hardware_override:
        from pytest_neuronprof import HardwareProfileError
        from pytest_neuronprof.costmodel.profiles import load_hardware

        try:
            load_hardware(args.hardware_override)  # fail early on an unknown name
        except HardwareProfileError as exc:
            print(f"--hardware-override: {exc}", file=sys.stderr)
            return 2

    import published_workloads as pw

    rows = load_rows(args.rows)
    if args.only:
        rows = [r for r in rows if args.only in row_label(r, pw.parse_config(r["config"]))
                or args.only in r["workload"] or args.only in r["config"]
                or args.only == r["hardware_profile"]]
    started = time.perf_counter()
    results = []
    for row in rows:
        result = run_row(row, args)
        results.append(result)
        if args.verbose:
            status = result["error"] or f"ratio {result['ratio']:.3f}"
            print(f"[{result['elapsed_s']:6.1f}s] {result['label']}: {status}; "
                  f"uncosted {result['uncosted_ops']}; notes {result['notes']}", file=sys.stderr)

    print(f"Published figures vs simulated NeuronCore (execution={args.execution}, tp_method={args.tp_method}"
          + (f", hardware override {args.hardware_override}" if args.hardware_override else "") + ")")
    print("ratio = simulated / published in the row's unit; t_ratio = simulated time / published time "
          "(> 1: simulator slower)")
    print()
    print_table(results)
    print()
    ok = [r for r in results if r["error"] is None]
    print(summarize(ok, "all rows"))
    print(summarize([r for r in ok if r["category"] in DEVICE_BOUND], "device-bound (batch, training, kernel)"))
    print(summarize([r for r in ok if r["category"] == "b1-latency"], "batch-1 latency"))
    for name in ("calibration", "holdout"):
        subset = [r for r in ok if r["set"] == name]
        if subset and len(subset) != len(ok):
            print(summarize(subset, name))
    for workload in sorted({r["workload"] for r in ok}):
        print(summarize([r for r in ok if r["workload"] == workload], f"  {workload}"))
    failed = [r for r in results if r["error"]]
    if failed:
        print(f"{len(failed)} row(s) failed: " + "; ".join(f"{r['label']}: {r['error']}" for r in failed))
    print(f"elapsed {time.perf_counter() - started:.0f} s")

    if args.json:
        import transformers

        payload = {"execution": args.execution, "tp_method": args.tp_method, "hardware_override": args.hardware_override,
                   "rows": args.rows, "torch": torch.__version__, "transformers": transformers.__version__,
                   "results": results}
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
