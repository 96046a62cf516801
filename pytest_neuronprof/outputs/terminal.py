"""What the gate decided, for people: failure tables, the session summary, the JSON report.

TestOutcome is the one record per profiled test that travels from xdist workers to the
controller (as JSON) and feeds every report.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from tabulate import tabulate

from ..formatting import format_delta, format_us
from ..gate.compare import Finding, Status
from ..gate.outcome import TestOutcome
from ..gate.summary import ProfileSummary


def shell_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def update_command(*nodeids: str) -> str:
    """The command that re-records these tests' baselines (all of them when none is given)."""
    return " ".join(["pytest --neuron-baseline", *map(shell_quote, nodeids)])


def findings_table(findings: Iterable[Finding], fmt: str = "simple") -> str:
    return tabulate([f.cells() for f in findings], headers=Finding.HEADERS, tablefmt=fmt,
                    disable_numparse=True)


def failure_section(outcome: TestOutcome) -> str:
    """The text a regressed test fails with."""
    current, baseline = outcome.current, outcome.baseline
    assert baseline is not None
    lines = [
        f"device time regression on {current.backend}:{current.hardware} "
        f"(total {format_us(baseline.total_device_time_us)} -> "
        f"{format_us(current.total_device_time_us)}, {format_delta(outcome.delta)})",
        "",
        findings_table(outcome.verdict.regressions),
    ]
    if outcome.verdict.allowed:
        lines += ["", "allowed changes:", findings_table(outcome.verdict.allowed)]
    lines += ["", f"If this change is intended, update the baseline: {update_command(outcome.nodeid)}"]
    return "\n".join(lines)


def top_hotspot(summary: ProfileSummary) -> str:
    ranked = summary.ranked()
    if not ranked:
        return "-"
    name, op = ranked[0]
    return f"{name} ({op.share:.0%})"


def session_table(outcomes: Iterable[TestOutcome]) -> str:
    rows = [[o.nodeid, format_us(o.current.total_device_time_us), format_delta(o.delta),
             top_hotspot(o.current), o.verdict.status] for o in outcomes]
    return tabulate(rows, headers=["test", "device time", "delta", "top hotspot", "verdict"],
                    tablefmt="simple", disable_numparse=True)


def improvements_text(outcomes: Iterable[TestOutcome]) -> str:
    improved = [o for o in outcomes if o.verdict.status == Status.IMPROVED]
    if not improved:
        return ""
    lines = []
    for o in improved:
        lines += [f"{o.nodeid}: faster than its baseline", findings_table(o.verdict.improvements), ""]
    lines.append(f"Lock the gains in: {update_command(*(o.nodeid for o in improved))}")
    return "\n".join(lines)


def notices(outcomes: Iterable[TestOutcome], strict: bool) -> list[str]:
    """One line per test that was not compared, saying why and what to do."""
    lines = []
    for o in outcomes:
        if o.verdict.status == Status.NO_BASELINE:
            action = "fails under --neuron-strict" if strict else "passes"
            lines.append(f"{o.nodeid}: no baseline for {o.current.variant} ({action}); "
                         f"record it with {update_command(o.nodeid)}")
        elif o.verdict.status == Status.INCOMPARABLE:
            lines.append(f"{o.nodeid}: not compared: {o.verdict.message}")
    return lines
