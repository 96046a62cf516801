"""False failures and detection of the measured cpu backend's gate, on this machine.

Copies the example suite into a temporary folder, records its baselines once under
``--neuron-backend cpu``, then runs it again RUNS times unchanged (every regression there is a
false failure) and RUNS times with the hidden layer of the 256x1024 MLPs SCALE times wider (a
knob in a conftest.py of the copy): test_mlp's two matmuls (``aten::addmm``) then do 30 % more
work, and so do the transformer block's MLP matmuls (its addmm also holds the attention
projections, which measure about as slow). A regression of those two tests is a detection;
the conv net and the training step (a 128x512 MLP) are unchanged, so a regression there is a
false failure too. Each run is a fresh ``pytest`` process, as in CI. The Llama example runs
on meta tensors and skips itself under measured backends.

Prints, per test: false failures, the largest ratio of a gated number (total or hotspot,
current / baseline) and the smallest p-value of the gate's test seen in the runs of unchanged
code; for the slowed tests, how many runs were caught, the ratios of the total and of addmm,
and the median addmm p-value of the gate's test (permutation test of the fastest half of the
rounds) and, for comparison, of a Mann-Whitney U test of all rounds.

    python benchmarks/noise.py [--runs 10] [--scale 1.3] [-- extra pytest options]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mannwhitney import p_greater  # noqa: E402  (benchmarks/, beside this script)

from pytest_neuronprof.defaults import BACKEND_TABLE
from pytest_neuronprof.gate.compare import GatePolicy, hotspots
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.stats import permutation_p
from pytest_neuronprof.values import parse_threshold

ROOT = Path(__file__).resolve().parent.parent

KNOB = '''"""The noise benchmark's knob: NEURONPROF_NOISE_SCALE widens the hidden layer of the
256x1024 MLPs (test_mlp's, and the transformer block's), so their matmuls do that much more work."""
import os

import models

_SCALE = float(os.environ.get("NEURONPROF_NOISE_SCALE", "1"))
if _SCALE != 1.0:
    _init = models.MLP.__init__

    def _wider(self, d=256, hidden=1024):
        _init(self, d, int(round(hidden * _SCALE)) if (d, hidden) == (256, 1024) else hidden)

    models.MLP.__init__ = _wider
'''
SLOWED = ("test_mlp_forward", "test_transformer_block_forward")  # the tests the knob changes


def run_suite(suite: Path, base: Path, report: Path, extra: list[str], scale: float | None,
              record: bool = False) -> None:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTEST_ADDOPTS", None)
    if scale is not None:
        env["NEURONPROF_NOISE_SCALE"] = str(scale)
    command = [sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider",
               "--rootdir", str(suite), "--neuron-backend", "cpu", "--neuron-baseline-dir",
               str(base), "--neuron-report", str(report), *extra]
    if record:
        command.append("--neuron-baseline")
    done = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: tests failed (regressions); anything else is broken
        sys.exit(f"pytest failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def gated_numbers(outcome: TestOutcome, policy: GatePolicy) -> list[tuple[str, float, float, float]]:
    """(name, current/baseline, the gate's p, all-rounds Mann-Whitney p) of the total and of
    each baseline hotspot: the gate's p is the one-sided permutation test of the fastest-half
    means (stats.permutation_p); the Mann-Whitney U test of all rounds is shown for comparison."""
    base, cur = outcome.baseline, outcome.current
    if base is None or base.samples is None or cur.samples is None:
        return []
    rows = [("(total)", cur.total_device_time_us / base.total_device_time_us,
             permutation_p(base.samples.total, cur.samples.total),
             p_greater(base.samples.total, cur.samples.total))]
    for name in hotspots(base, policy):
        old, new = base.samples.ops.get(name), cur.samples.ops.get(name)
        if old and new and name in cur.ops:
            rows.append((name, cur.ops[name].device_time_us / base.ops[name].device_time_us,
                         permutation_p(old, new), p_greater(old, new)))
    return rows


def load(report: Path) -> dict[str, TestOutcome]:
    data = json.loads(report.read_text())
    return {nodeid: TestOutcome.from_json(test) for nodeid, test in data["tests"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="unchanged runs, and slowed runs (10)")
    parser.add_argument("--scale", type=float, default=1.3, help="MLP hidden-size factor (1.3)")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep it (default: a temp dir)")
    parser.add_argument("--figures-only", action="store_true",
                        help="print the figures of the reports already in --keep DIR, run nothing")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest options, after --")
    opts = parser.parse_args()

    if opts.figures_only and not opts.keep:
        parser.error("--figures-only needs --keep DIR")
    work = Path(opts.keep) if opts.keep else Path(tempfile.mkdtemp(prefix="neuronprof-noise-"))
    suite, base, reports = work / "suite", work / "baselines", work / "reports"
    load_before = os.getloadavg()
    started = time.time()
    if not opts.figures_only:
        shutil.rmtree(suite, ignore_errors=True)
        shutil.rmtree(base, ignore_errors=True)
        shutil.rmtree(reports, ignore_errors=True)
        shutil.copytree(ROOT / "examples", suite, ignore=shutil.ignore_patterns("__pycache__"))
        (suite / "conftest.py").write_text(KNOB)
        reports.mkdir(parents=True)
        run_suite(suite, base, reports / "record.json", opts.pytest_args, None, record=True)
        for i in range(opts.runs):
            run_suite(suite, base, reports / f"clean-{i}.json", opts.pytest_args, None)
        for i in range(opts.runs):
            run_suite(suite, base, reports / f"slow-{i}.json", opts.pytest_args, opts.scale)
    elapsed = time.time() - started
    load_after = os.getloadavg()

    from pytest_neuronprof.profiler.backends.measured import cpu_model

    recorded = load(reports / "record.json")
    clean = [load(p) for p in sorted(reports.glob("clean-*.json"), key=lambda p: int(p.stem[6:]))]
    slowed = [load(p) for p in sorted(reports.glob("slow-*.json"), key=lambda p: int(p.stem[5:]))]

    first = next(iter(recorded.values())).current
    threshold = BACKEND_TABLE["cpu"].threshold
    for i, arg in enumerate(opts.pytest_args):  # the threshold the runs used, for the figures
        if arg.startswith("--neuron-threshold"):
            text = arg.split("=", 1)[1] if "=" in arg else opts.pytest_args[i + 1]
            threshold = parse_threshold("--neuron-threshold", text)
    policy = GatePolicy(threshold=threshold)
    print(f"machine: {cpu_model()}, {os.cpu_count()} cores; variant {first.variant}; "
          f"rounds per test {first.samples.rounds if first.samples else '?'}; "
          f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; {elapsed:.0f} s")
    print(f"unchanged runs: {len(clean)}, slowed runs (256x1024 MLPs' hidden x{opts.scale:g}): {len(slowed)}")
    print()
    header = (f"{'test':31} {'false fail':>10} {'max ratio':>9} {'min p':>7} | {'caught':>7} "
              f"{'total ratio (median, range)':>27} {'addmm ratio':>11} {'addmm p':>8} {'MWU p':>8}")
    print("(ratios: current / baseline of the gated numbers; p: one-sided, the gate's permutation test;"
          " MWU p: a Mann-Whitney U test of all rounds, for comparison; addmm: medians over runs)")
    print(header)
    print("-" * len(header))
    total_false = total_runs = 0
    for nodeid in sorted(recorded):
        short = nodeid.split("::")[-1]
        unchanged = [o[nodeid] for o in clean if nodeid in o]
        slow = [o[nodeid] for o in slowed if nodeid in o]
        if short not in SLOWED:  # unchanged in the slowed runs too: a control
            unchanged, slow = unchanged + slow, []
        false = sum(o.verdict.failed for o in unchanged)
        total_false += false
        total_runs += len(unchanged)
        numbers = [row for o in unchanged for row in gated_numbers(o, policy)]
        max_ratio = max((r for _, r, _, _ in numbers), default=float("nan"))
        min_p = min((p for _, _, p, _ in numbers), default=float("nan"))
        caught = sum(o.verdict.failed for o in slow)
        rows = [row for o in slow for row in gated_numbers(o, policy)]
        totals = [r for name, r, _, _ in rows if name == "(total)"]
        addmm = [(r, p, u) for name, r, p, u in rows if name == "aten::addmm"]
        ratio = (f"{statistics.median(totals):.2f} ({min(totals):.2f}..{max(totals):.2f})"
                 if totals else "-")
        print(f"{short[:31]:31} {false:>4}/{len(unchanged):<5} {max_ratio:>9.3f} {min_p:>7.2g} | "
              + (f"{caught:>3}/{len(slow):<3} {ratio:>27} "
                 f"{statistics.median(r for r, _, _ in addmm):>11.2f} "
                 f"{statistics.median(p for _, p, _ in addmm):>8.2g} "
                 f"{statistics.median(u for _, _, u in addmm):>8.2g}"
                 if slow else f"{'(control)':>7}"))
    print()
    print(f"false failures: {total_false} of {total_runs} test runs of unchanged code (the unchanged "
          f"runs, and the controls of the slowed runs) at threshold {policy.threshold:.0%} "
          f"(alpha {policy.alpha:g}, material share {policy.material_share:.0%})")
    detected = {nodeid: [o[nodeid].verdict.failed for o in slowed if nodeid in o]
                for nodeid in recorded if nodeid.split("::")[-1] in SLOWED}
    hits = sum(sum(v) for v in detected.values())
    count = sum(len(v) for v in detected.values())
    print(f"detection of the slowed tests: {hits} of {count} test runs "
          f"({hits / count:.0%})" if count else "detection: no slowed tests")
    for nodeid, outcomes in ((n, [o[n] for o in slowed if n in o]) for n in sorted(recorded)):
        reasons = sorted({f"{f.op}: {f.reason}" for o in outcomes for f in o.verdict.regressions})
        if reasons:
            print(f"  {nodeid.split('::')[-1]}: " + "; ".join(reasons[:4]))
    print(f"(reports and baselines in {work})")


if __name__ == "__main__":
    main()
