"""How much the gate adds to a session of many profiled tests.

Builds N realistic per-test summaries (30 ops each), then times, as medians of repeated runs,
everything the plugin does per test besides profiling: the baseline lookup (files parsed
once), compare(), the outcome's JSON round trip (what xdist ships to the controller), and the
end-of-session summary table and JSON report. Prints seconds for N tests.

    python benchmarks/gate_scale.py [N]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_neuronprof.gate.baseline import BaselineStore
from pytest_neuronprof.gate.compare import GatePolicy, compare
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs.json_report import json_report
from pytest_neuronprof.outputs.terminal import session_table


def make_summary(seed: int, scale: float = 1.0) -> ProfileSummary:
    times = [scale * (1000.0 / (i + 1) + seed % 7) for i in range(30)]
    total = sum(times)
    ops = {f"aten::op{i}": OpSummary(i + 1, t, "Vector", 10 * i, 100 * i, t / total, f"layer{i % 4}")
           for i, t in enumerate(times)}
    return ProfileSummary("simulated", "trn2", "1", "2.13", total, ops)


def run(n: int, folder: Path) -> dict[str, float]:
    """Seconds per stage for n tests; the current summaries are built before the clock starts
    (in the plugin they come out of profiling)."""
    nodeids = [f"tests/test_mod{i % 50}.py::test_case_{i}" for i in range(n)]
    currents = [make_summary(i, 1.01) for i in range(n)]
    store = BaselineStore(folder)
    policy = GatePolicy()
    clock = time.perf_counter()
    stages: dict[str, float] = {}

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        stages[name] = now - clock
        clock = now

    outcomes = []
    for nodeid, current in zip(nodeids, currents):
        baseline = store.load(nodeid, current.variant)
        outcomes.append(TestOutcome(nodeid, ("tests/x.py", 1), compare(baseline, current, policy),
                                    current, baseline))
    lap("load + compare")
    outcomes = [TestOutcome.from_json(o.to_json()) for o in outcomes]
    lap("xdist round trip")
    session_table(outcomes)
    lap("summary table")
    json_report(outcomes)
    lap("--neuron-report")
    return stages


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        BaselineStore(folder).save((f"tests/test_mod{i % 50}.py::test_case_{i}", make_summary(i))
                                   for i in range(n))
        runs = [run(n, folder) for _ in range(5)]
    print(f"{n} profiled tests, 30 ops each; medians of {len(runs)} runs:")
    for stage in runs[0]:
        print(f"  {stage:<18} {statistics.median(r[stage] for r in runs):.3f} s")
    total = statistics.median(sum(r.values()) for r in runs)
    print(f"  {'total':<18} {total:.3f} s")


if __name__ == "__main__":
    main()
