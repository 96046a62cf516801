"""The published rows: the data files, a row's label, category, hardware profile and compiler
flags, how many requests its published run kept in flight, and the rows the methodology drops.

Data (``benchmarks/data/README.md`` describes the columns and where each figure comes from):

* model level: ``trn_published_calibration.csv`` (18 rows, the ones a fit may use) and
  ``trn_published_holdout.csv`` (rows kept aside to check a fit on workloads it was not fitted
  to): whole models;
* op level: ``trn_oplevel_calibration.csv`` (18 rows): one kernel or collective per row. Split
  by whole shape ranges (``OPLEVEL_FIT_IDS``, ``oplevel_rows``): a fit may use the GEMMs from
  512^3 to 2048^3, the all-reduces up to 16 MiB and the trn1 SiLU; the GEMMs from 2560^3 to
  5120^3, the all-reduces from 256 MiB, the trn1 best matmul kernel and AdamW are held out.

Compiler flags (``row_auto_cast``): a config key ``auto_cast`` wins; op-level rows ``none``
(the fp32 rows' sources say ``--auto-cast=none``; the bf16 ones are NKI kernels and a
collective, which the compiler does not cast); NKI kernel rows (``mamba_fused``) ``none``; a row
whose notes name the flag (``--auto-cast matmult``, "matmult autocast") that flag; otherwise the
SDK version in its notes: before Neuron 2.27 ``matmult`` (the old default), from 2.27 ``none``
(the new default), ``none`` when no version is stated.

Requests in flight (``in_flight``; Little's law, N = throughput x P50 / batch, the methodology
file's section 1.4): NeuronPerf's encoder runs keep N = 2 (one request on each of the two
NeuronCores), its vision throughput runs N = 4 (two workers per core) and its batch-1 vision
runs N = 1. A row whose notes (or ``throughput`` and ``p50_ms`` config keys) give both its
throughput and its P50 is checked against its kind's N: one that contradicts it was not
measured the way its kind was, and is dropped with that reason (``drop_reason``; the
methodology's section 1.8 lists such rows), never for its ratio.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .workloads import OPLEVEL_PARAMS, UnbuildableRow, oplevel_config, parse_config
from .workloads.kernels import COLLECTIVES

DATA = Path(__file__).resolve().parents[1] / "data"
ROW_FILES = {"calibration": DATA / "trn_published_calibration.csv",
             "holdout": DATA / "trn_published_holdout.csv",
             "oplevel": DATA / "trn_oplevel_calibration.csv"}
MODEL_SETS = ("calibration", "holdout")
OPLEVEL = "oplevel"
# The op-level rows a fit may use, by whole shape ranges: the GEMMs 512^3-2048^3, the
# all-reduces up to 16 MiB and the trn1 SiLU. The rest (GEMMs 2560^3-5120^3, all-reduces from
# 256 MiB, the trn1 best matmul kernel, AdamW) is held out.
OPLEVEL_FIT_IDS = frozenset({"g512", "g1024", "g1536", "g2048", "ar2_1k", "ar2_1m", "ar2_16m", "n1_silu"})
DEVICE_BOUND = ("batch", "training", "kernel")
# An op-level file's ``split`` column (trn_collectives.csv has one; the op-level file's split is
# OPLEVEL_FIT_IDS): "fit", "holdout", or "dropped", with the reason in ``notes``
DROPPED = "dropped"
COLLECTIVES_FILE = DATA / "trn_collectives.csv"


def _oplevel_row(raw: dict[str, str], index: int) -> dict[str, Any]:
    """An op-level CSV row in the model-level rows' shape (config, published value and unit)."""
    try:
        config, error = oplevel_config(raw["workload"], raw["params"], raw["dtype"]), None
    except UnbuildableRow as exc:  # run_row reports it with the row's label
        config, error = "", str(exc)
    split = (raw.get("split") or "").strip() or ("fit" if raw["id"] in OPLEVEL_FIT_IDS else "holdout")
    return {"set": OPLEVEL, "index": index, "id": raw["id"], "source": raw["source"],
            "hardware_profile": raw["hardware_profile"], "workload": raw["workload"],
            "config": config, "load_error": error,
            "params": raw["params"], "dtype": raw["dtype"], "kind": raw["kind"],
            "published_metric": f"device time ({raw['kind']})", "published_value": raw["published_us"],
            "published_unit": "us", "notes": raw.get("notes") or "", "split": split}


def read_rows(path: Path, name: str) -> list[dict[str, Any]]:
    """The rows of one CSV file as set ``name`` (a model-level file's columns, or the op-level
    file's, which ``_oplevel_row`` turns into the same shape)."""
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for i, row in enumerate(csv.DictReader(f), 1):
            if name == OPLEVEL:
                rows.append(_oplevel_row(row, i))
                continue
            row["set"] = name
            row["index"] = i
            rows.append(row)
    return rows


def load_rows(which: str) -> list[dict[str, Any]]:
    """The rows of one set ("calibration", "holdout", "oplevel") or of all three ("all")."""
    names = [*MODEL_SETS, OPLEVEL] if which == "all" else [which]
    return [row for name in names for row in read_rows(ROW_FILES[name], name)]


def oplevel_rows(split: str | None = None) -> list[dict[str, Any]]:
    """The op-level rows: all of them, or those of one split ("fit" or "holdout")."""
    return [r for r in load_rows(OPLEVEL) if split is None or r["split"] == split]


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _oplevel_shape(workload: str, cfg: dict[str, Any]) -> str:
    if workload in COLLECTIVES and "ranks" in cfg:
        return f"{cfg['ranks']} ranks {_size(int(cfg['bytes']))}"
    dims = [cfg[k] for k in ("M", "K", "N") if k in cfg]
    return f"{dims[0]}^3" if len(dims) == 3 and len(set(dims)) == 1 else "x".join(str(d) for d in dims)


def row_label(row: dict[str, Any], cfg: dict[str, Any] | None = None) -> str:
    """``C01 bert-base-uncased b1 s128``, ``H27 llama-3.3-70b b1 ctx12288 tp64 prefill``,
    ``O g2048 mm_t 2048^3``: the set's letter and the row's index, then what tells it apart."""
    if cfg is None:
        try:
            cfg = parse_config(row["config"])
        except ValueError:
            cfg = {}
    if row["set"] == OPLEVEL:  # e.g. "O g2048 mm_t 2048^3"
        shape = _oplevel_shape(row["workload"], cfg) or str(row.get("params", "")).replace(";", "x")
        return f"O {row['id']} {row['workload']} {shape}"
    prefix = {"calibration": "C", "holdout": "H"}.get(row["set"], "R")
    parts = [cfg.get("arch", str(row.get("workload", "?")).split("_")[0])]
    for key, short in (("batch", "b"), ("seq", "s"), ("ctx", "ctx"), ("channels", "c"), ("tp", "tp"),
                       ("pp", "pp")):
        if key in cfg and not (key in ("tp", "pp") and int(cfg[key]) == 1):
            parts.append(f"{short}{cfg[key]}")
    if row.get("workload") == "llama_prefill":
        parts.append("prefill")
    if cfg.get("impl") not in (None, "nki"):
        parts.append(str(cfg["impl"]))
    return f"{prefix}{int(row['index']):02d} " + " ".join(str(p) for p in parts)


def category(workload: str, cfg: dict[str, Any]) -> str:
    if workload in OPLEVEL_PARAMS:
        return "collective" if workload in COLLECTIVES else "op-kernel"
    if workload == "mamba_fused":
        return "kernel"
    if workload == "train_step":
        return "training"
    return "batch" if int(cfg.get("batch", 1)) > 1 else "b1-latency"


def row_hardware(row: dict[str, Any], cfg: dict[str, Any], override: str | None = None) -> str:
    """The profile a row runs on: its own, at the LNC it was published with."""
    hardware = override or row["hardware_profile"]
    if not override and int(cfg.get("lnc", 2)) == 1 and hardware in ("trn2", "trn3"):
        hardware += "-lnc1"
    return hardware


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


# --- requests in flight (Little's law) -----------------------------------------------------------

@dataclass(frozen=True)
class InFlight:
    """The requests a published run kept in flight: ``total`` over the instance's ``cores``,
    ``per_core`` on each (what a request waits behind), and where that comes from."""

    total: int
    cores: int
    why: str

    @property
    def per_core(self) -> int:
        return max(1, self.total // max(1, self.cores))


NEURONPERF_CORES = 2  # trn1.2xlarge and inf2.xlarge: 2 NeuronCores (NeuronPerf's fallback MAX too)


def in_flight(row: dict[str, Any], cfg: dict[str, Any]) -> InFlight:
    """The requests in flight of a row's published run: a config key ``inflight`` (total, over
    ``cores``), else what NeuronPerf's configuration for the row's kind keeps (the methodology
    file, sections 1.2 and 1.4): encoders 2 on 2 cores (one request per core), vision throughput
    and batch-latency runs 4 on 2 cores (two workers per core), batch-1 vision runs 1; other
    kinds one request at a time (an LLM step spans its ``tp`` cores; a training step and a
    device time have no host requests)."""
    cores = int(cfg.get("cores", NEURONPERF_CORES))
    if "inflight" in cfg:
        return InFlight(int(cfg["inflight"]), cores, "config inflight")
    workload = row.get("workload")
    if workload == "encoder_fwd":
        return InFlight(2, NEURONPERF_CORES, "NeuronPerf encoder run: 1 request per core")
    if workload == "vision_fwd":
        if cfg.get("unit") == "per_s" or int(cfg.get("batch", 1)) > 1:
            return InFlight(4, NEURONPERF_CORES, "NeuronPerf vision batch run: 2 workers per core")
        return InFlight(1, 1, "NeuronPerf vision batch-1 run: 1 request")
    return InFlight(1, 1, "one request at a time")


_PUBLISHED_THROUGHPUT = re.compile(r"([0-9][0-9.]*)/s published")
_P50_MS = re.compile(r"P50 latency ([0-9][0-9.]*) ms")


def little_n(row: dict[str, Any], cfg: dict[str, Any]) -> float | None:
    """N = throughput x P50 / batch of a row whose config (``throughput`` per second, ``p50_ms``)
    or notes give both figures of its published run ("2119.78/s published", "P50 latency 4.587
    ms"), the other one being the row's own value; None when they do not."""
    value = float(row["published_value"])
    unit = cfg.get("unit")
    notes = row.get("notes") or ""
    throughput = cfg.get("throughput")
    p50 = cfg.get("p50_ms")
    if throughput is None and unit == "ms":
        found = _PUBLISHED_THROUGHPUT.search(notes)
        throughput = float(found.group(1)) if found else None
    if p50 is None and unit == "per_s":
        found = _P50_MS.search(notes)
        p50 = float(found.group(1)) if found else None
    if unit == "ms" and p50 is None:
        p50 = value
    if unit == "per_s" and throughput is None:
        throughput = value
    if throughput is None or p50 is None:
        return None
    return float(throughput) * float(p50) / 1e3 / int(cfg.get("batch", 1))


LITTLE_TOLERANCE = 0.15  # the share N may differ from its kind's count (timer and bucket noise)


def drop_reason(row: dict[str, Any], cfg: dict[str, Any]) -> str | None:
    """Why a row is not compared, from how it was measured (never from its ratio), or None: a
    NeuronPerf row whose throughput and P50 give another number of requests in flight than its
    kind's configuration keeps (the methodology file, section 1.8: latencies pasted from another
    configuration or batch)."""
    if row.get("set") == OPLEVEL and row.get("split") == DROPPED:
        return row.get("notes") or "dropped in its file"
    if row.get("workload") not in ("encoder_fwd", "vision_fwd") or "inflight" in cfg:
        return None
    n = little_n(row, cfg)
    expected = in_flight(row, cfg).total
    if n is None or abs(n / expected - 1) <= LITTLE_TOLERANCE:
        return None
    return (f"Little's law gives N = {n:.2f} requests in flight (throughput x P50 / batch) where "
            f"NeuronPerf's {row['workload']} runs keep {expected}: its latency and throughput are "
            "not from one configuration (methodology, section 1.8)")
