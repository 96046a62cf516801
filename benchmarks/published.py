"""Compare the simulated NeuronCore with performance figures AWS publishes, at two levels.

Run by hand (a few minutes on 2 cores; the model-level rows need ``transformers``)::

    python benchmarks/published.py                          # every row, graph execution
    python benchmarks/published.py --rows calibration       # the 18 model-level calibration rows
    python benchmarks/published.py --rows holdout --json out.json
    python benchmarks/published.py --rows oplevel           # the 18 single-kernel / collective rows
    python benchmarks/published.py --file my_rows.csv       # rows of another file (same columns)
    python benchmarks/published.py --execution eager        # the same rows as eager execution
    python benchmarks/published.py --hardware-override trn2 # every row on another profile
    python benchmarks/published.py --strict                 # exit 1 when a target fails or a row fails
    python benchmarks/published.py --without copies,inflight,allreduce --set graph_execution_us=449.2
                                                            # issue 17's comparison (the "before")

The command line of the published-figure harness (``benchmarks/harness``): ``harness.rows``
loads the rows (the data files, labels, compiler flags, requests in flight, dropped rows),
``harness.workloads`` rebuilds each row's model on ``meta`` tensors (one module per family),
``harness.compare`` turns a row into a comparison (what its published figure counts: a device
time, one request's whole time with the host's call and copies, a per-core time with requests in
flight, an optimizer step), ``harness.report`` prints the tables, the comparator of each row,
the summaries, the regression-size pairs and the targets of issue 28. A row that cannot be
built or run is a named failure (its label and why), never a silent skip; ``--json PATH`` writes
the per-row results, the pairs and the targets (for a fitting script).

Each row runs once, captured in graph mode; ``--execution`` then times the capture as eager or
graph execution (graph: the default, as the published figures come from compiled graphs). The
rows' own profile (Trn2 rows published at the SDK's default LNC=2 run on ``trn2``; ``lnc=1`` rows
on ``trn2-lnc1``), unless ``--hardware-override``. ``benchmarks/fit_trn.py`` fits on
``harness.compare.capture_row`` and ``simulate``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
for _path in (str(ROOT), str(HERE)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from harness import compare, report  # noqa: E402
from harness import rows as R  # noqa: E402
from harness.report import Target, find_pairs, pair_growths, targets  # noqa: E402,F401  (the API)
from harness.rows import load_rows, row_label  # noqa: E402,F401


# The numbers of a profile --set may override (top-level floats of HardwareProfile)
_PROFILE_NUMBERS = frozenset({"graph_execution_us", "graph_floor_us", "dma_efficiency", "host_h2d_gbps",
                              "host_d2h_gbps", "host_transfer_us", "host_mmap_bytes", "host_fresh_page_gbps"})


def select(rows: list[dict], only: str | None) -> list[dict]:
    """The rows whose label, workload or config contains ``only``, or whose profile is ``only``."""
    if not only:
        return rows
    return [r for r in rows if only in row_label(r) or only in r["workload"] or only in r["config"]
            or only == r["hardware_profile"]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--execution", choices=("eager", "graph"), default="graph",
                        help="time the rows as eager or graph execution (default: graph, as published)")
    parser.add_argument("--rows", choices=(*R.MODEL_SETS, R.OPLEVEL, "all"), default="all",
                        help="the model-level calibration or holdout rows, the op-level rows, or all")
    parser.add_argument("--file", metavar="CSV", default=None,
                        help="run the rows of this file instead (model-level columns; set 'holdout', "
                             "or 'oplevel' for a file with the op-level columns: --rows oplevel)")
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
    parser.add_argument("--without", metavar="TERMS", default="",
                        help="leave these terms out of the comparison (comma-separated: "
                             + ", ".join(compare.TERMS) + "), to show what each changes")
    parser.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                        help="override a number of every row's profile (e.g. graph_execution_us=449.2)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 when a target fails or a row cannot be built or run")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print tracebacks, notes and uncosted ops per row")
    args = parser.parse_args(argv)

    import torch

    without = {t.strip() for t in args.without.split(",") if t.strip()}
    if without - set(compare.TERMS):
        print(f"--without: unknown term(s) {', '.join(sorted(without - set(compare.TERMS)))}; "
              f"known: {', '.join(compare.TERMS)}", file=sys.stderr)
        return 2
    terms = tuple(t for t in compare.TERMS if t not in without)
    overrides: dict[str, float] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        try:
            overrides[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or key.strip() not in _PROFILE_NUMBERS:
            print(f"--set {item!r}: expected KEY=NUMBER with KEY one of the profile's numbers "
                  f"({', '.join(sorted(_PROFILE_NUMBERS))})", file=sys.stderr)
            return 2

    if args.file:
        name = R.OPLEVEL if args.rows == R.OPLEVEL else "holdout"
        rows = R.read_rows(Path(args.file), name)
    else:
        rows = load_rows(args.rows)
    rows = select(rows, args.only)
    needs_models = any(r["set"] in R.MODEL_SETS for r in rows)
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
        result = compare.run_row(row, args.execution, args.tp_method, args.hardware_override, args.verbose,
                                 terms, overrides)
        results.append(result)
        if args.verbose:
            status = result["error"] or f"ratio {result['ratio']:.3f}"
            print(f"[{result['elapsed_s']:6.1f}s] {result['label']}: {status}; "
                  f"uncosted {result['uncosted_ops']}; notes {result['notes']}", file=sys.stderr)

    header = (f"Published figures vs simulated NeuronCore (execution={args.execution}, "
              f"tp_method={args.tp_method}"
              + (f", hardware override {args.hardware_override}" if args.hardware_override else "")
              + (f", without {', '.join(sorted(without))}" if without else "")
              + "".join(f", {k}={v:g}" for k, v in overrides.items()) + ")")
    pairs, goals = report.print_report(results, header)
    print(f"elapsed {time.perf_counter() - started:.0f} s")

    if args.json:
        versions: dict[str, str] = {"torch": str(torch.__version__)}
        if needs_models:
            import transformers

            versions["transformers"] = transformers.__version__
        payload = {"execution": args.execution, "tp_method": args.tp_method,
                   "hardware_override": args.hardware_override, "rows": args.rows, "terms": list(terms),
                   "profile_overrides": overrides, **versions,
                   "results": results, "pairs": pairs, "targets": [g.as_dict() for g in goals]}
        Path(args.json).write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    failed = any(r["error"] for r in results)
    if args.strict and (failed or any(g.passed is False for g in goals)):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
