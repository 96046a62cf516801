"""Compare the simulated NeuronCore with performance figures AWS publishes, at two levels.

Run by hand (a few minutes on 2 cores; the model-level rows need ``transformers``)::

    python benchmarks/published.py                          # every row, graph execution
    python benchmarks/published.py --rows calibration       # the 18 model-level calibration rows
    python benchmarks/published.py --rows holdout --json out.json
    python benchmarks/published.py --rows oplevel           # the 18 single-kernel / collective rows
    python benchmarks/published.py --execution eager        # the same rows as eager execution
    python benchmarks/published.py --hardware-override trn2 # every row on another profile
    python benchmarks/published.py --strict                 # exit 1 when a target fails

Data (``benchmarks/data/README.md`` describes the columns and where each figure comes from):

* model level: ``trn_published_calibration.csv`` (18 rows, the ones a fit may use) and
  ``trn_published_holdout.csv`` (rows kept aside to check a fit on workloads it was not fitted
  to): whole models, ``benchmarks/published_workloads.py`` rebuilds each on ``meta`` tensors;
* op level: ``trn_oplevel_calibration.csv`` (18 rows, ``--rows oplevel``): one kernel or
  collective per row (``mm_t``, ``silu``, ``adamw``, ``all_reduce``), its inputs made outside the
  profiled phase (already in HBM), one compiled graph. Split by whole shape ranges
  (``OPLEVEL_FIT_IDS``, ``oplevel_rows``): a fit may use the GEMMs from 512^3 to 2048^3, the
  all-reduces up to 16 MiB and the trn1 SiLU; the GEMMs from 2560^3 to 5120^3, the all-reduces
  from 256 MiB, the trn1 best matmul kernel and AdamW are held out.

Every phase runs once outside the profiler (warm-up: lazy caches, optimizer state, the fake
process group) and then once under ``NeuronProfiler(NeuronConfig(hardware=<row's profile>,
execution="graph", auto_cast=<row's>))``. The weighted device time of the phases is converted
into the row's unit and divided by the published value.

What a simulated figure includes, so that it counts what the published one counts: with graph
execution every phase is one graph execution, and each execution pays the profile's
device-side fixed cost ``graph_floor_us`` (a one-op graph's floor) on top of its ops' device
time: op-level rows (device times: ``best_kernel``, ``collective``) and model-level rows alike,
once per execution (a training row's optimizer phase, weighted ``1 / accum``, pays it with that
weight). Host-measured latencies (``ms`` rows but the NKI kernel's device time) add the
profile's ``graph_execution_us`` (host and runtime side) per execution on top, as before;
throughputs keep requests in flight and hide it. Eager execution adds neither (each op pays its
own launch).

Compiler flags: each row is costed with the neuronx-cc ``--auto-cast`` it was compiled with
(``row_auto_cast``): a config key ``auto_cast`` wins; op-level rows ``none`` (the fp32 rows'
sources say ``--auto-cast=none``; the bf16 ones are NKI kernels and a collective, which the
compiler does not cast); NKI kernel rows (``mamba_fused``) ``none``; a row whose notes name the
flag (``--auto-cast matmult``, "matmult autocast") that flag; otherwise the SDK version in its
notes: before Neuron 2.27 ``matmult`` (the old default), from 2.27 ``none`` (the new default),
``none`` when no version is stated. Only float32 matrix products depend on it: rows simulated
in bf16 cost the same either way.

Printed: the model-level table (label, hardware, workload, category, auto-cast, published value
and unit, simulated value, ratio simulated / published and the time ratio, which is the same
for time units and its inverse for throughputs, so that > 1 always means "the simulator is
slower"), the median |ratio - 1| and the share within 2x over all, device-bound (batch
throughput, training, NKI kernel) and batch-1 latency rows, per set and per workload; the
op-level table (id, hardware, params, published and simulated us, ratio, the dominant op with
what bounds it and the fraction of that peak it reaches) with the fit and held-out summaries;
the regression-size pairs (``find_pairs``: model-level rows of the same chip and workload whose
configs differ only in batch, arch or depth, two archs being sizes of one model family) with
published and simulated growth in time per execution (a throughput's: items / throughput); and the
targets of issue 17 (``targets``), each with its value, threshold and PASS / FAIL. A row that
fails to build or run prints its error and the run goes on. ``--json PATH`` writes the per-row
results, the pairs and the targets (for a fitting script).

Each row runs once, captured in graph mode; ``--execution`` then times the capture as eager or
graph execution (graph: the default, as the published figures come from compiled graphs). The
rows' own profile (Trn2 rows published at the SDK's default LNC=2 run on ``trn2``; ``lnc=1`` rows
on ``trn2-lnc1``), unless ``--hardware-override``. ``benchmarks/fit_trn.py`` uses
``capture_row`` and ``time_row`` to fit the profiles.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib.util
import json
import math
import re
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
ROW_FILES = {"calibration": DATA / "trn_published_calibration.csv",
             "holdout": DATA / "trn_published_holdout.csv",
             "oplevel": DATA / "trn_oplevel_calibration.csv"}
MODEL_SETS = ("calibration", "holdout")
OPLEVEL = "oplevel"
# The op-level rows a fit may use, by whole shape ranges: the GEMMs 512^3-2048^3, the
# all-reduces up to 16 MiB and the trn1 SiLU. The rest (GEMMs 2560^3-5120^3, all-reduces from
# 256 MiB, the trn1 best matmul kernel, AdamW) is held out.
OPLEVEL_FIT_IDS = frozenset({"g512", "g1024", "g1536", "g2048", "ar2_1k", "ar2_1m", "ar2_16m", "n1_silu"})


def _oplevel_row(raw: dict[str, str], index: int) -> dict[str, Any]:
    """An op-level CSV row in the model-level rows' shape (config, published value and unit)."""
    import published_workloads as pw

    return {"set": OPLEVEL, "index": index, "id": raw["id"], "source": raw["source"],
            "hardware_profile": raw["hardware_profile"], "workload": raw["workload"],
            "config": pw.oplevel_config(raw["workload"], raw["params"], raw["dtype"]),
            "params": raw["params"], "dtype": raw["dtype"], "kind": raw["kind"],
            "published_metric": f"device time ({raw['kind']})", "published_value": raw["published_us"],
            "published_unit": "us", "notes": "",
            "split": "fit" if raw["id"] in OPLEVEL_FIT_IDS else "holdout"}


def load_rows(which: str) -> list[dict[str, Any]]:
    """The rows of one set ("calibration", "holdout", "oplevel") or of all three ("all")."""
    names = [*MODEL_SETS, OPLEVEL] if which == "all" else [which]
    rows: list[dict[str, Any]] = []
    for name in names:
        with open(ROW_FILES[name], newline="", encoding="utf-8") as f:
            for i, row in enumerate(csv.DictReader(f), 1):
                if name == OPLEVEL:
                    rows.append(_oplevel_row(row, i))
                    continue
                row["set"] = name
                row["index"] = i
                rows.append(row)
    return rows


def oplevel_rows(split: str | None = None) -> list[dict[str, Any]]:
    """The op-level rows: all of them, or those of one split ("fit" or "holdout")."""
    return [r for r in load_rows(OPLEVEL) if split is None or r["split"] == split]


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _oplevel_shape(workload: str, cfg: dict[str, Any]) -> str:
    if workload == "all_reduce":
        return f"{cfg['ranks']} ranks {_size(int(cfg['bytes']))}"
    dims = [cfg[k] for k in ("M", "K", "N") if k in cfg]
    return f"{dims[0]}^3" if len(dims) == 3 and len(set(dims)) == 1 else "x".join(str(d) for d in dims)


def row_label(row: dict[str, Any], cfg: dict[str, Any]) -> str:
    if row["set"] == OPLEVEL:  # e.g. "O g2048 mm_t 2048^3"
        return f"O {row['id']} {row['workload']} {_oplevel_shape(row['workload'], cfg)}"
    prefix = "C" if row["set"] == "calibration" else "H"
    parts = [cfg.get("arch", row["workload"].split("_")[0])]
    for key, short in (("batch", "b"), ("seq", "s"), ("ctx", "ctx"), ("channels", "c"), ("tp", "tp")):
        if key in cfg and not (key == "tp" and int(cfg[key]) == 1):
            parts.append(f"{short}{cfg[key]}")
    if row["workload"] == "llama_prefill":
        parts.append("prefill")
    return f"{prefix}{row['index']:02d} " + " ".join(str(p) for p in parts)


def category(workload: str, cfg: dict[str, Any]) -> str:
    import published_workloads as pw

    if workload in pw.OPLEVEL_PARAMS:
        return "collective" if workload == "all_reduce" else "op-kernel"
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


# "Neuron 2.28.0", "Neuron SDK 2.32", "sdk2.26.1", "Neuron 2.21-2.23": the SDK a row was measured with
_SDK_VERSION = re.compile(r"(?:\bNeuron(?:\s+SDK)?\s*|\bsdk\s*)(\d+)\.(\d+)", re.IGNORECASE)
NONE_DEFAULT_SINCE = (2, 27)  # neuronx-cc's --auto-cast default: matmult before, none since


def row_auto_cast(row: dict[str, Any], cfg: dict[str, Any]) -> str:
    """The neuronx-cc ``--auto-cast`` a row was compiled with (the rule in the module's docstring)."""
    if "auto_cast" in cfg:
        return str(cfg["auto_cast"])
    if row["set"] == OPLEVEL or row["workload"] == "mamba_fused":
        return "none"  # NKI kernels keep the dtypes they are written in; the fp32 rows say none
    notes = row.get("notes") or ""
    if re.search(r"auto-cast[ =]+none", notes):
        return "none"
    if "matmult" in notes:
        return "matmult"
    version = _SDK_VERSION.search(notes)
    if version and (int(version[1]), int(version[2])) < NONE_DEFAULT_SINCE:
        return "matmult"
    return "none"


@dataclasses.dataclass
class RowCapture:
    """One row's workload, run once: per phase its capture and weight."""

    row: dict[str, Any]
    cfg: dict[str, Any]
    workload: Any
    phases: list[tuple[str, float, Any]]  # (name, weight, Capture)
    uncosted: list[str]
    auto_cast: str = "none"


def capture_row(row: dict[str, Any], tp_method: str = "shard") -> RowCapture:
    """Build the row's workload and run each phase once under the simulated profiler (graph
    mode, so that the capture holds the dataflow); warm-up runs first, unprofiled."""
    from pytest_neuronprof import NeuronConfig, NeuronProfiler
    import published_workloads as pw

    cfg = pw.parse_config(row["config"])
    auto_cast = row_auto_cast(row, cfg)
    workload = pw.build(row["workload"], cfg, tp_method=tp_method)
    for phase in workload.phases:  # warm-up, unprofiled: lazy caches, optimizer state
        phase.fn()
    phases, uncosted = [], set()
    for phase in workload.phases:
        prof = NeuronProfiler(NeuronConfig(hardware=row_hardware(row, cfg), execution="graph",
                                           modes=("device",), auto_cast=auto_cast))
        prof._backend.keep_capture = True
        with prof:
            phase.fn()
        uncosted.update(prof.result.uncosted_ops)
        phases.append((phase.name, phase.weight, prof._backend.last_capture))
    return RowCapture(row, cfg, workload, phases, sorted(uncosted), auto_cast)


def per_execution_us(capture: RowCapture, hw: Any, execution: str) -> float:
    """The fixed costs one graph execution adds to its ops' device time, as the row's figure
    counts them: the device-side floor always, the host and runtime's launch in host-measured
    latencies; nothing in eager execution."""
    if execution != "graph":
        return 0.0
    host = hw.graph_execution_us if host_measured(capture.row, capture.cfg) else 0.0
    return hw.graph_floor_us + host


def time_row(capture: RowCapture, hw: Any, execution: str,
             auto_cast: str | None = None) -> tuple[float, dict[str, float], float]:
    """(weighted time in us as the published figure counts it, per-phase device times, weighted
    collective time) of a captured row on profile ``hw``, compiled with ``auto_cast`` (default:
    the row's own)."""
    phases: dict[str, float] = {}
    collective = 0.0
    fixed = per_execution_us(capture, hw, execution)
    cast = auto_cast or capture.auto_cast
    for name, weight, captured in capture.phases:
        records = captured.retime(hw, execution, cast)
        phases[name] = sum(r.device_time_us for r in records) + fixed
        collective += weight * sum(r.device_time_us for r in records if r.engine == "Collective")
    return capture.workload.weighted(phases), phases, collective


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


def run_row(row: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from pytest_neuronprof.costmodel.profiles import load_hardware
    import published_workloads as pw

    cfg = pw.parse_config(row["config"])
    hardware = row_hardware(row, cfg, args.hardware_override)
    published = float(row["published_value"])
    out: dict[str, Any] = {
        "label": row_label(row, cfg), "set": row["set"], "index": row["index"], "source": row["source"],
        "id": row.get("id"), "split": row.get("split", row["set"]), "kind": row.get("kind"),
        "params": row.get("params"), "dtype": row.get("dtype"),
        "hardware_profile": row["hardware_profile"], "hardware": hardware, "workload": row["workload"],
        "config": row["config"], "category": category(row["workload"], cfg),
        "auto_cast": row_auto_cast(row, cfg),
        "published_metric": row["published_metric"], "published_value": published,
        "published_unit": row["published_unit"], "unit": cfg.get("unit"), "execution": args.execution,
        "tp_method": args.tp_method, "simulated_value": None, "ratio": None, "time_ratio": None,
        "device_time_us": None, "fixed_per_execution_us": None, "phases_us": {}, "collective_us": 0.0,
        "dominant": None, "uncosted_ops": [], "notes": [], "error": None,
    }
    start = time.perf_counter()
    try:
        capture = capture_row(row, args.tp_method)
        hw = load_hardware(hardware)
        out["notes"] += capture.workload.notes
        out["uncosted_ops"] = capture.uncosted
        total, out["phases_us"], out["collective_us"] = time_row(capture, hw, args.execution)
        out["device_time_us"] = total
        out["fixed_per_execution_us"] = per_execution_us(capture, hw, args.execution)
        if row["set"] == OPLEVEL:  # one op: which one bounds it is the point of the row
            out["dominant"] = dominant_op(capture, hw, args.execution)
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


def _print_rows(header: str, results: Sequence[dict[str, Any]], head: Any, tail: Any) -> None:
    """A table: ``head(row)`` for every row, then ``tail(row)`` or the row's error."""
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{head(r)} ERROR {r['error']}" if r["error"] else f"{head(r)} {tail(r)}")


def print_table(results: list[dict[str, Any]]) -> None:
    _print_rows(
        f"{'row':<44} {'hw':<5} {'workload':<13} {'cat':<10} {'cast':<7} {'published':>11} "
        f"{'unit':<9} {'simulated':>11} {'ratio':>7} {'t_ratio':>7}", results,
        lambda r: (f"{r['label'][:44]:<44} {r['hardware']:<5} {r['workload']:<13} {r['category']:<10} "
                   f"{r['auto_cast']:<7} {_fmt(r['published_value']):>11} {r['published_unit'][:9]:<9}"),
        lambda r: f"{_fmt(r['simulated_value']):>11} {r['ratio']:>7.3f} {r['time_ratio']:>7.3f}")


def _dominant(r: dict[str, Any]) -> str:
    top = r["dominant"] or {}
    peak = top.get("peak_fraction")
    return (f"{top.get('name')} ({top.get('share', 0):.0%}, {top.get('bound')}, "
            f"{'-' if peak is None else f'{peak:.0%}'})")


def print_oplevel_table(results: list[dict[str, Any]]) -> None:
    _print_rows(
        f"{'id':<11} {'hardware':<9} {'workload':<10} {'params':<15} {'dtype':<5} {'split':<7} "
        f"{'published':>10} {'simulated':>10} {'ratio':>7}  dominant op (share, bound, peak)", results,
        lambda r: (f"{r['id']:<11} {r['hardware']:<9} {r['workload']:<10} {r['params']:<15} "
                   f"{r['dtype']:<5} {r['split']:<7} {_fmt(r['published_value']):>10}"),
        lambda r: f"{_fmt(r['simulated_value']):>10} {r['ratio']:>7.3f}  {_dominant(r)}")


# --- regression sizes: pairs of published figures that differ only in size ------------------------

SIZE_KEYS = frozenset({"batch", "arch", "depth"})


def find_pairs(rows: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any], tuple[str, ...]]]:
    """Pairs of model-level rows of the same chip and workload whose configs are equal but for
    batch, arch or depth (the sizes a regression changes), two archs being sizes of one model
    family (``published_workloads.model_family``: ResNet-18 and -152, BERT base and large, not
    ALBERT and BERT): (row, row, the keys that differ), in the rows' order."""
    import published_workloads as pw

    model = [r for r in rows if r["set"] in MODEL_SETS]
    configs = [pw.parse_config(r["config"]) for r in model]
    pairs = []
    for i, (a, ca) in enumerate(zip(model, configs)):
        for b, cb in zip(model[i + 1:], configs[i + 1:]):
            if (a["hardware_profile"], a["workload"]) != (b["hardware_profile"], b["workload"]):
                continue
            differ = sorted(k for k in {*ca, *cb} if ca.get(k) != cb.get(k))
            if not differ or not set(differ) <= SIZE_KEYS:
                continue
            if "arch" in differ and pw.model_family(str(ca.get("arch"))) != pw.model_family(str(cb.get("arch"))):
                continue
            pairs.append((a, b, tuple(differ)))
    return pairs


def pair_growths(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each pair's growth in time per execution, smaller published time first: published,
    simulated (each figure with the fixed costs its published one includes), and simulated /
    published. A throughput's time per execution is items / throughput, so the growth of a
    pair is the ratio of the rows' times whatever their unit."""
    out = []
    for a, b, differ in find_pairs(results):
        entry: dict[str, Any] = {"rows": [a["label"], b["label"]], "differ": list(differ),
                                 "published_growth": None, "simulated_growth": None, "ratio": None}
        if a.get("time_ratio") and b.get("time_ratio"):
            # published time = simulated time / (simulated / published time)
            pub = {r["label"]: r["device_time_us"] / r["time_ratio"] for r in (a, b)}
            small, large = sorted((a, b), key=lambda r: pub[r["label"]])
            entry["rows"] = [small["label"], large["label"]]
            entry["published_growth"] = pub[large["label"]] / pub[small["label"]]
            entry["simulated_growth"] = large["device_time_us"] / small["device_time_us"]
            entry["ratio"] = entry["simulated_growth"] / entry["published_growth"]
        out.append(entry)
    return out


def print_pairs(pairs: Sequence[dict[str, Any]]) -> None:
    print(f"{'smaller':<40} {'larger':<40} {'differ':<11} {'pub growth':>10} {'sim growth':>10} {'sim/pub':>8}")
    for p in pairs:
        cells = (f"{_fmt(p['published_growth']):>10} {_fmt(p['simulated_growth']):>10} {p['ratio']:>8.3f}"
                 if p["ratio"] is not None else "not run")
        print(f"{p['rows'][0][:40]:<40} {p['rows'][1][:40]:<40} {','.join(p['differ']):<11} {cells}")


# --- the targets of issue 17 --------------------------------------------------------------------

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
    """Issue 17's targets on the rows that ran (n/a where the rows a target needs did not)."""
    ran = [r for r in results if r["error"] is None and r["ratio"] is not None]
    op = [r for r in ran if r["set"] == OPLEVEL]
    n_op = f"{len(op)}/{len(load_rows(OPLEVEL))} rows"
    by_id = {r["id"]: r for r in op}
    growth = None
    if "g512" in by_id and "g4096" in by_id:  # (sim 4096 / sim 512) / (published 4096 / published 512)
        growth = by_id["g4096"]["time_ratio"] / by_id["g512"]["time_ratio"]
    model = [r for r in ran if r["set"] in MODEL_SETS]
    held = [r for r in model if r["set"] == "holdout"]
    held_bound = [r for r in held if r["category"] in DEVICE_BOUND]
    measured = [p["ratio"] for p in pairs if p["ratio"] is not None]
    median_pair = statistics.median(map(_factor, measured)) if measured else None
    return [
        Target("op-level", "median |sim/published - 1|", _median_error(op), None, 0.15, n_op),
        Target("op-level", "worst time ratio, either way (all within 1.5x)",
               _worst([r["time_ratio"] for r in op]), None, 1.5, n_op),
        Target("op-level", "GEMM growth 512^3 -> 4096^3, sim / published",
               growth, 1 / 1.3, 1.3, "published growth 33.8x" if growth is not None else ""),
        Target("model", "held-out median |sim/published - 1|", _median_error(held), None, 0.222,
               f"{len(held)} rows"),
        Target("model", "device-bound held-out median |sim/published - 1|", _median_error(held_bound),
               None, 0.20, f"{len(held_bound)} rows"),
        Target("model", "worst time ratio, either way (all within 2x)",
               _worst([r["time_ratio"] for r in model]), None, 2.0, f"{len(model)} rows"),
        Target("sizes", "median pair's growth sim / published, either way", median_pair, None, 1.15,
               f"{len(measured)} pairs"),
        Target("sizes", "worst pair's growth sim / published, either way", _worst(measured), None, 1.5,
               f"{len(measured)} pairs"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--execution", choices=("eager", "graph"), default="graph",
                        help="time the rows as eager or graph execution (default: graph, as published)")
    parser.add_argument("--rows", choices=(*MODEL_SETS, OPLEVEL, "all"), default="all",
                        help="the model-level calibration or holdout rows, the op-level rows, or all")
    parser.add_argument("--hardware-override", metavar="X", default=None,
                        help="run every row on hardware profile X instead of the row's own")
    parser.add_argument("--tp-method", choices=("shard", "divide"), default="shard",
                        help="tp > 1 rows: one rank's shard with collectives (default), or the whole "
                             "model on one core with its time divided by tp")
    parser.add_argument("--only", metavar="TEXT", default=None,
                        help="run only the rows whose label, workload or config contains TEXT, or whose "
                             "hardware profile is TEXT")
    parser.add_argument("--json", metavar="PATH", default=None,
                        help="write the per-row results, the pairs and the targets here")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print tracebacks, notes and uncosted ops per row")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import torch

    import published_workloads as pw

    rows = load_rows(args.rows)
    if args.only:
        rows = [r for r in rows if args.only in row_label(r, pw.parse_config(r["config"]))
                or args.only in r["workload"] or args.only in r["config"]
                or args.only == r["hardware_profile"]]
    needs_models = any(r["set"] in MODEL_SETS for r in rows)
    if needs_models and importlib.util.find_spec("transformers") is None:
        print("benchmarks/published.py needs transformers to build the models: "
              "pip install transformers (or --rows oplevel)", file=sys.stderr)
        return 2

    if args.hardware_override:
        from pytest_neuronprof import HardwareProfileError
        from pytest_neuronprof.costmodel.profiles import load_hardware

        try:
            load_hardware(args.hardware_override)  # fail early on an unknown name
        except HardwareProfileError as exc:
            print(f"--hardware-override: {exc}", file=sys.stderr)
            return 2

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
          "(> 1: simulator slower); cast = neuronx-cc --auto-cast of the row")
    ok = [r for r in results if r["error"] is None]
    model = [r for r in results if r["set"] in MODEL_SETS]
    if model:
        print("\nModel level")
        print_table(model)
        print()
        model_ok = [r for r in ok if r["set"] in MODEL_SETS]
        print(summarize(model_ok, "all rows"))
        print(summarize([r for r in model_ok if r["category"] in DEVICE_BOUND],
                        "device-bound (batch, training, kernel)"))
        print(summarize([r for r in model_ok if r["category"] == "b1-latency"], "batch-1 latency"))
        for name in MODEL_SETS:
            subset = [r for r in model_ok if r["set"] == name]
            if subset and len(subset) != len(model_ok):
                print(summarize(subset, name))
        for workload in sorted({r["workload"] for r in model_ok}):
            print(summarize([r for r in model_ok if r["workload"] == workload], f"  {workload}"))
    oplevel = [r for r in results if r["set"] == OPLEVEL]
    if oplevel:
        print("\nOp level (device time of one graph execution, us; split: fit or held out)")
        print_oplevel_table(oplevel)
        print()
        op_ok = [r for r in ok if r["set"] == OPLEVEL]
        print(summarize(op_ok, "op-level rows"))
        for split in ("fit", "holdout"):
            print(summarize([r for r in op_ok if r["split"] == split], f"  {split}"))
    pairs = pair_growths(results)
    if pairs:
        print(f"\nRegression sizes: {len(pairs)} pairs of rows that differ only in {', '.join(sorted(SIZE_KEYS))}")
        print_pairs(pairs)
    goals = targets(results, pairs)
    print("\nTargets (issue 17)")
    for goal in goals:
        print(goal.line())
    failed = [r for r in results if r["error"]]
    if failed:
        print(f"{len(failed)} row(s) failed: " + "; ".join(f"{r['label']}: {r['error']}" for r in failed))
    print(f"elapsed {time.perf_counter() - started:.0f} s")

    if args.json:
        versions: dict[str, str] = {"torch": str(torch.__version__)}
        if needs_models:
            import transformers

            versions["transformers"] = transformers.__version__
        payload = {"execution": args.execution, "tp_method": args.tp_method, "hardware_override": args.hardware_override,
                   "rows": args.rows, **versions, "results": results, "pairs": pairs,
                   "targets": [g.as_dict() for g in goals]}
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    if args.strict and any(g.passed is False for g in goals):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
