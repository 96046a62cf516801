"""Fit the Trainium / Inferentia hardware profiles to the figures AWS publishes.

Run by hand (a few minutes on 2 cores; needs ``transformers``)::

    python benchmarks/fit_trn.py            # fit, print the tables, the parameters and the errors
    python benchmarks/fit_trn.py --write    # ... and write the fitted values into the profiles

Data: ``benchmarks/data/trn_published_calibration.csv`` (18 rows of NeuronCore-v2 figures:
trn1 and inf2) is fitted; ``benchmarks/data/trn_published_holdout.csv`` (40 rows, Trainium2
among them) is only predicted, never fitted. Each row's workload is rebuilt and run once on
meta tensors (``published.capture_row``); candidate parameters re-time the captures as graph
executions (``published.time_row``), so the fit does not run the models again.

The parameters, few and physical, shared by every NeuronCore-v2 row (trn1 and inf2 are the
same core); the chips' own numbers (peak rates, clocks, bandwidths, link bandwidth) come from
the Neuron documentation and are not fitted:

- ``tensor.efficiency.matmul``, ``.conv``, ``.attention``: the achieved fraction of the tile
  model's rate in compiled matrix products, convolutions and fused attention;
- ``graph_execution_us``: the fixed host and runtime cost of one graph execution, in the
  host-measured latencies;
- ``collectives.fixed_us``: the fixed cost of one collective (synchronising the ranks), which
  the tensor-parallel decode rows constrain: their small all-reduces cost about the same at 24,
  32 and 64 ranks, so the steps' latency (``hop_us``, 1.5 us: the Neuron docs' 1-2 us per hop)
  cannot be what they pay.

Trainium2 and Trainium3 have no row in the calibration file: their profiles take these values
as they are (the same compiler and runtime), which the Trainium2 rows of the holdout file test.

The fit minimises the mean |log(simulated / published)| with deterministic coordinate descent
(golden section per parameter, within physical bounds), in pure Python. Cross-validation holds
out whole models (every row of one architecture) and whole workload kinds, each predicted by a
fit that did not see it.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import published  # noqa: E402

HARDWARE = ROOT / "pytest_neuronprof" / "costmodel" / "hardware"
V2 = ("trn1", "inf2")  # NeuronCore-v2: fitted
SHARED = ("trn2", "trn2-lnc1", "trn3", "trn3-lnc1")  # take the NeuronCore-v2 values
# (name, lower, upper): the search range of each parameter
PARAMETERS = (("matmul", 0.15, 1.0), ("conv", 0.1, 1.0), ("attention", 0.03, 1.0),
              ("graph_execution_us", 0.0, 1000.0), ("collective_fixed_us", 0.0, 300.0))


@dataclasses.dataclass
class Row:
    capture: Any
    label: str
    arch: str
    workload: str
    category: str
    published: float
    per_s: bool


def with_parameters(hw: Any, theta: dict[str, float]) -> Any:
    efficiency = dict(hw.tensor.efficiency)
    efficiency.update({k: theta[k] for k in ("matmul", "conv", "attention")})
    return dataclasses.replace(
        hw, tensor=dataclasses.replace(hw.tensor, efficiency=efficiency),
        graph_execution_us=theta["graph_execution_us"],
        collectives=dataclasses.replace(hw.collectives, fixed_us=theta["collective_fixed_us"]))


def capture(which: str) -> list[Row]:
    import published_workloads as pw

    rows = []
    for row in published.load_rows(which):
        cfg = pw.parse_config(row["config"])
        captured = published.capture_row(row)
        rows.append(Row(captured, published.row_label(row, cfg), cfg.get("arch", row["workload"]),
                        row["workload"], published.category(row["workload"], cfg),
                        float(row["published_value"]), cfg.get("unit") == "per_s"))
    return rows


def time_ratio(row: Row, theta: dict[str, float]) -> float:
    """Simulated time / published time (> 1: the simulator is slower)."""
    from pytest_neuronprof.costmodel.profiles import load_hardware

    cfg = row.capture.cfg
    hw = with_parameters(load_hardware(published.row_hardware(row.capture.row, cfg)), theta)
    total, _, _ = published.time_row(row.capture, hw, "graph")
    value = row.capture.workload.to_metric(total)
    return row.published / value if row.per_s else value / row.published


def loss(rows: Sequence[Row], theta: dict[str, float]) -> float:
    return statistics.fmean(abs(math.log(time_ratio(r, theta))) for r in rows)


def fit(rows: Sequence[Row], start: dict[str, float], passes: int = 4) -> dict[str, float]:
    """Coordinate descent: golden-section search of each parameter within its bounds, in turn."""
    theta = dict(start)
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(passes):
        for name, low, high in PARAMETERS:
            def f(value: float) -> float:
                return loss(rows, {**theta, name: value})

            a, b = low, high
            c, d = b - golden * (b - a), a + golden * (b - a)
            fc, fd = f(c), f(d)
            for _ in range(24):
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - golden * (b - a)
                    fc = f(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + golden * (b - a)
                    fd = f(d)
            best = min((theta[name], f(theta[name])), ((a + b) / 2, f((a + b) / 2)), key=lambda t: t[1])
            theta[name] = best[0]
    return theta


def unit_ratio(row: Row, t_ratio: float) -> float:
    """simulated / published in the row's own unit (a throughput's is the time ratio's inverse):
    the measure benchmarks/published.py summarises."""
    return 1.0 / t_ratio if row.per_s else t_ratio


def describe(ratios: Sequence[float]) -> str:
    """median |simulated / published - 1| and the share within 2x, of ratios in the rows' units."""
    if not ratios:
        return "no rows"
    errors = [abs(r - 1) for r in ratios]
    within = sum(0.5 <= r <= 2.0 for r in ratios)
    return f"median |ratio-1| {statistics.median(errors):6.1%}, within 2x {within}/{len(ratios)}"


def cross_validate(rows: Sequence[Row], theta: dict[str, float],
                   key: Callable[[Row], str]) -> dict[str, float]:
    """Each group of rows predicted by a fit on the others (label -> time ratio)."""
    predicted: dict[str, float] = {}
    for group in sorted({key(r) for r in rows}):
        train = [r for r in rows if key(r) != group]
        held = [r for r in rows if key(r) == group]
        fitted = fit(train, theta, passes=2)
        for r in held:
            predicted[r.label] = time_ratio(r, fitted)
    return predicted


def print_rows(rows: Sequence[Row], theta: dict[str, float], extra: dict[str, dict[str, float]] | None = None) -> list[float]:
    extra = extra or {}
    head = f"{'row':<44} {'hw':<9} {'category':<10} {'t_ratio':>8}" + "".join(f" {k:>10}" for k in extra)
    print(head)
    print("-" * len(head))
    ratios = []
    for r in rows:
        ratio = time_ratio(r, theta)
        ratios.append(ratio)
        cells = "".join(f" {extra[k][r.label]:>10.3f}" for k in extra)
        print(f"{r.label[:44]:<44} {published.row_hardware(r.capture.row, r.capture.cfg):<9} "
              f"{r.category:<10} {ratio:>8.3f}{cells}")
    return ratios


def summary(rows: Sequence[Row], t_ratios: Sequence[float], title: str) -> None:
    ratios = [unit_ratio(r, x) for r, x in zip(rows, t_ratios)]
    by = lambda pred: [x for r, x in zip(rows, ratios) if pred(r)]  # noqa: E731
    print(f"{title}: all {describe(ratios)}; device-bound {describe(by(lambda r: r.category in published.DEVICE_BOUND))}; "
          f"batch-1 latency {describe(by(lambda r: r.category == 'b1-latency'))}")


def write(theta: dict[str, float]) -> list[Path]:
    written = []
    for name in V2 + SHARED:
        path = HARDWARE / f"{name}.toml"
        text = path.read_text(encoding="utf-8")
        for key in ("matmul", "conv", "attention"):
            text = re.sub(rf"(?m)^{key} = [0-9.]+$", f"{key} = {theta[key]:.3f}", text, count=1)
        text = re.sub(r"(?m)^graph_execution_us = [0-9.]+$",
                      f"graph_execution_us = {theta['graph_execution_us']:.1f}", text, count=1)
        head, links = text.split("\n[collectives]\n", 1)
        links = re.sub(r"(?m)^fixed_us = [0-9.]+$", f"fixed_us = {theta['collective_fixed_us']:.1f}",
                       links, count=1)
        text = f"{head}\n[collectives]\n{links}"
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the fitted values into the profiles")
    parser.add_argument("--no-cv", action="store_true", help="skip the cross-validation (faster)")
    args = parser.parse_args(argv)
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        print("benchmarks/fit_trn.py needs transformers to build the models: pip install transformers",
              file=sys.stderr)
        return 2
    from pytest_neuronprof.costmodel.profiles import load_hardware

    started = time.perf_counter()
    calibration = capture("calibration")
    holdout = capture("holdout")
    print(f"captured {len(calibration)} calibration and {len(holdout)} holdout rows in "
          f"{time.perf_counter() - started:.0f} s")
    bundled = load_hardware("trn1")
    start = {"matmul": bundled.tensor.efficiency["matmul"], "conv": bundled.tensor.efficiency["conv"],
             "attention": bundled.tensor.efficiency["attention"],
             "graph_execution_us": bundled.graph_execution_us, "collective_fixed_us": bundled.collectives.fixed_us}
    theta = fit(calibration, start)
    print("\nfitted (NeuronCore-v2; Trainium2/3 take the same):")
    for name, value in theta.items():
        print(f"  {name:<20} {value:8.3f}")

    print("\nCalibration rows, fitted on all of them; cross-validated columns: predicted by fits "
          "without the row's model (cv_model) or its workload kind (cv_kind)")
    extra = {}
    if not args.no_cv:
        extra["cv_model"] = cross_validate(calibration, theta, lambda r: r.arch)
        extra["cv_kind"] = cross_validate(calibration, theta, lambda r: r.workload)
    ratios = print_rows(calibration, theta, extra)
    summary(calibration, ratios, "in sample")
    for name, values in extra.items():
        summary(calibration, [values[r.label] for r in calibration], name)

    print("\nHoldout rows (never fitted)")
    held = print_rows(holdout, theta)
    summary(holdout, held, "holdout")
    trn2 = [(r, x) for r, x in zip(holdout, held) if r.capture.row["hardware_profile"] == "trn2"]
    if trn2:
        print(f"holdout Trainium2 rows: {describe([unit_ratio(r, x) for r, x in trn2])}")
    if args.write:
        for path in write(theta):
            print(f"wrote {path.relative_to(ROOT)}")
    print(f"elapsed {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
