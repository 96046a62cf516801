"""Fit what remains fitted of the Trainium / Inferentia hardware profiles, on both levels at once.

Run by hand (a few minutes on 2 cores; needs ``transformers``)::

    python benchmarks/fit_trn.py            # fit, print the tables, the parameters and the errors
    python benchmarks/fit_trn.py --write    # ... and write the fitted values into the profiles
    python benchmarks/fit_trn.py --only graph_execution_us   # fit these, the rest as the profiles have them

Data: the op-level rows of ``benchmarks/data/trn_oplevel_calibration.csv`` in the fit split
(``harness.rows.OPLEVEL_FIT_IDS``: GEMMs up to 2048^3, all-reduces up to 16 MiB, the SiLU kernel)
and the 18 model-level rows of ``trn_published_calibration.csv``; the op-level rows held out by
shape range and the 40 rows of ``trn_published_holdout.csv`` are only predicted. Each row's
workload is rebuilt and run once on meta tensors (``harness.compare.capture_row``); candidate
parameters re-time the captures as graph executions and compare them as each row's published
figure counts (``harness.compare.simulate``), so the fit does not run the models again.

Cost model 3 takes every rate, size and latency the Neuron docs give from the docs (each
profile's [sources]). Five parameters remain, each a physical quantity the docs do not give,
shared by every profile (the same compiler, runtime and DMA design):

- ``graph_floor_us``: the fixed device time of one graph (NEFF) execution, which every
  published kernel and collective latency includes;
- ``dma_efficiency``: the share of the HBM bandwidth large DMA transfers sustain (the NKI
  performance guide reports about 70 %);
- ``hop_us``: the latency of one step of a collective between ranks of an instance (the docs:
  1-2 us);
- ``bus_share``: nccom-test's bus bandwidth as a share of a rank's part of the chip's NeuronLink
  bandwidth (each profile's ``bus_gbps`` is this share of its own link);
- ``graph_execution_us``: the host's call of one graph execution (runtime dispatch, Python and
  the framework), which host-measured latencies include; the copies of a call's inputs and
  outputs are counted apart, over the profile's host link (``host_*``, derived from published
  pairs by ``benchmarks/host_link.py``), so this is what remains of the host's cost.

``--only NAME,...`` fits those parameters and keeps the others as the profiles have them (the
device model untouched: ``--only graph_execution_us`` re-fits the host's call alone); ``--write``
then writes only those.

The fit minimises the mean |log(simulated / published)| of the op-level rows plus that of the
model-level rows (each level weighs the same), with deterministic coordinate descent (golden
section per parameter, within physical bounds), in pure Python.
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

from harness import compare  # noqa: E402
from harness import rows as R  # noqa: E402
from harness.workloads import parse_config  # noqa: E402

HARDWARE = ROOT / "pytest_neuronprof" / "costmodel" / "hardware"
PROFILES = ("trn1", "inf2", "trn2", "trn2-lnc1", "trn3", "trn3-lnc1")  # all take the fitted values
# (name, lower, upper): the search range of each parameter
PARAMETERS = (("graph_floor_us", 0.0, 200.0), ("dma_efficiency", 0.3, 1.0), ("hop_us", 0.2, 10.0),
              ("bus_share", 0.05, 1.0), ("graph_execution_us", 0.0, 1000.0))


@dataclasses.dataclass
class Row:
    capture: Any
    label: str
    arch: str
    workload: str
    category: str
    published: float
    per_s: bool
    oplevel: bool = False


def bus_share(hw: Any) -> float:
    """A profile's bus bandwidth as a share of its rank's link bandwidth: the share written in
    its sources, recovered from the two numbers (``bus_gbps`` and the link it cites)."""
    match = re.search(r"([0-9.]+) GB/s per rank x ([0-9.]+)", hw.sources.get("collectives.bus_gbps", ""))
    if match is None:
        raise ValueError(f"{hw.name}: collectives.bus_gbps's source does not give its link and share")
    return float(match.group(2))


def link_gbps(hw: Any) -> float:
    match = re.search(r"([0-9.]+) GB/s per rank x", hw.sources.get("collectives.bus_gbps", ""))
    return float(match.group(1)) if match else 0.0


def with_parameters(hw: Any, theta: dict[str, float]) -> Any:
    return dataclasses.replace(
        hw, graph_floor_us=theta["graph_floor_us"], dma_efficiency=theta["dma_efficiency"],
        graph_execution_us=theta["graph_execution_us"],
        collectives=dataclasses.replace(hw.collectives, hop_us=theta["hop_us"],
                                        bus_gbps=link_gbps(hw) * theta["bus_share"]))


def capture(rows_: Sequence[dict[str, Any]]) -> list[Row]:
    rows = []
    for row in rows_:
        cfg = parse_config(row["config"])
        if R.drop_reason(row, cfg):  # not measured the way its kind is: neither fitted nor checked
            continue
        captured = compare.capture_row(row)
        rows.append(Row(captured, R.row_label(row, cfg), cfg.get("arch", row["workload"]),
                        row["workload"], R.category(row["workload"], cfg),
                        float(row["published_value"]), cfg.get("unit") == "per_s",
                        row["set"] == R.OPLEVEL))
    return rows


def time_ratio(row: Row, theta: dict[str, float]) -> float:
    """Simulated time / published time (> 1: the simulator is slower)."""
    from pytest_neuronprof.costmodel.profiles import load_hardware

    cfg = row.capture.cfg
    hw = with_parameters(load_hardware(R.row_hardware(row.capture.row, cfg)), theta)
    value = compare.simulate(row.capture, hw, "graph").value
    return row.published / value if row.per_s else value / row.published


def loss(rows: Sequence[Row], theta: dict[str, float]) -> float:
    """Mean |log time ratio| of the op-level rows plus that of the model-level rows."""
    total = 0.0
    for level in (True, False):
        chosen = [r for r in rows if r.oplevel is level]
        if chosen:
            total += statistics.fmean(abs(math.log(time_ratio(r, theta))) for r in chosen)
    return total


def fit(rows: Sequence[Row], start: dict[str, float], passes: int = 4,
        free: Sequence[str] | None = None) -> dict[str, float]:
    """Coordinate descent: golden-section search of each free parameter (default: all) within
    its bounds, in turn."""
    theta = dict(start)
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(passes if free is None or len(free) > 1 else 1):
        for name, low, high in PARAMETERS:
            if free is not None and name not in free:
                continue
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
                   key: Callable[[Row], str], free: Sequence[str] | None = None) -> dict[str, float]:
    """Each group of rows predicted by a fit on the others (label -> time ratio)."""
    predicted: dict[str, float] = {}
    for group in sorted({key(r) for r in rows}):
        train = [r for r in rows if key(r) != group]
        held = [r for r in rows if key(r) == group]
        fitted = fit(train, theta, passes=2, free=free)
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
        print(f"{r.label[:44]:<44} {R.row_hardware(r.capture.row, r.capture.cfg):<9} "
              f"{r.category:<10} {ratio:>8.3f}{cells}")
    return ratios


def summary(rows: Sequence[Row], t_ratios: Sequence[float], title: str) -> None:
    ratios = [unit_ratio(r, x) for r, x in zip(rows, t_ratios)]
    by = lambda pred: [x for r, x in zip(rows, ratios) if pred(r)]  # noqa: E731
    print(f"{title}: all {describe(ratios)}; device-bound {describe(by(lambda r: r.category in R.DEVICE_BOUND))}; "
          f"batch-1 latency {describe(by(lambda r: r.category == 'b1-latency'))}")


def write(theta: dict[str, float], free: Sequence[str] | None = None) -> list[Path]:
    from pytest_neuronprof.costmodel.profiles import load_hardware

    def chosen(name: str) -> bool:
        return free is None or name in free

    written = []
    for name in PROFILES:
        path = HARDWARE / f"{name}.toml"
        hw = load_hardware(name)
        text = path.read_text(encoding="utf-8")
        for name, key, value in (("graph_floor_us", "graph_floor_us", f"{theta['graph_floor_us']:.1f}"),
                                 ("dma_efficiency", "dma_efficiency", f"{theta['dma_efficiency']:.3f}"),
                                 ("graph_execution_us", "graph_execution_us", f"{theta['graph_execution_us']:.1f}"),
                                 ("hop_us", "hop_us", f"{theta['hop_us']:.2f}"),
                                 ("bus_share", "bus_gbps", f"{link_gbps(hw) * theta['bus_share']:.1f}")):
            if chosen(name):
                text = re.sub(rf"(?m)^{key} = [0-9.]+$", f"{key} = {value}", text, count=1)
        if chosen("bus_share"):
            text = re.sub(r"(GB/s per rank x )[0-9.]+", rf"\g<1>{theta['bus_share']:.3f}", text)
            text = re.sub(r"(is )[0-9.]+( of a rank's share)", rf"\g<1>{theta['bus_share']:.3f}\g<2>", text)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="write the fitted values into the profiles")
    parser.add_argument("--no-cv", action="store_true", help="skip the cross-validation (faster)")
    parser.add_argument("--only", metavar="NAMES", default=None,
                        help="fit only these parameters (comma-separated: "
                             + ", ".join(name for name, _, _ in PARAMETERS) + "); the others as the profiles have them")
    args = parser.parse_args(argv)
    free = None
    if args.only:
        free = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(free) - {name for name, _, _ in PARAMETERS})
        if unknown:
            print(f"--only: unknown parameter(s) {', '.join(unknown)}", file=sys.stderr)
            return 2
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        print("benchmarks/fit_trn.py needs transformers to build the models: pip install transformers",
              file=sys.stderr)
        return 2
    from pytest_neuronprof.costmodel.profiles import load_hardware

    started = time.perf_counter()
    calibration = capture(R.oplevel_rows("fit") + R.load_rows("calibration"))
    holdout = capture(R.oplevel_rows("holdout") + R.load_rows("holdout"))
    print(f"captured {len(calibration)} fitted and {len(holdout)} held-out rows in "
          f"{time.perf_counter() - started:.0f} s")
    bundled = load_hardware("trn1")
    start = {"graph_floor_us": bundled.graph_floor_us, "dma_efficiency": bundled.dma_efficiency,
             "hop_us": bundled.collectives.hop_us, "bus_share": bus_share(bundled),
             "graph_execution_us": bundled.graph_execution_us}
    theta = fit(calibration, start, free=free)
    print("\nfitted (every Trainium and Inferentia profile takes them):" if free is None else
          f"\nfitted: {', '.join(free)}; the others as the profiles have them:")
    for name, value in theta.items():
        print(f"  {name:<20} {value:8.3f}" + ("" if free is None or name in free else "  (kept)"))

    print("\nFitted rows; cross-validated columns: predicted by fits without the row's model "
          "(cv_model) or its workload kind (cv_kind)")
    extra = {}
    if not args.no_cv:
        extra["cv_model"] = cross_validate(calibration, theta, lambda r: r.arch, free)
        extra["cv_kind"] = cross_validate(calibration, theta, lambda r: r.workload, free)
    ratios = print_rows(calibration, theta, extra)
    for level, title in ((True, "op level"), (False, "model level")):
        chosen = [(r, x) for r, x in zip(calibration, ratios) if r.oplevel is level]
        summary([r for r, _ in chosen], [x for _, x in chosen], f"in sample, {title}")

    print("\nHeld-out rows (never fitted)")
    held = print_rows(holdout, theta)
    for level, title in ((True, "op level"), (False, "model level")):
        chosen = [(r, x) for r, x in zip(holdout, held) if r.oplevel is level]
        summary([r for r, _ in chosen], [x for _, x in chosen], f"held out, {title}")
    if args.write:
        for path in write(theta, free):
            print(f"wrote {path.relative_to(ROOT)}")
    print(f"elapsed {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
