"""What the gate decided, for people: failure tables, the session summary, the JSON report.

TestOutcome is the one record per profiled test that travels from xdist workers to the
controller (as JSON) and feeds every report.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from tabulate import tabulate

from ..formatting import format_delta, format_fraction, format_us
from ..gate.compare import NOT_COMPARED, Finding, Status
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
    uncosted = uncosted_text(current)
    if uncosted:
        lines += ["", uncosted]
    lines += ["", f"If this change is intended, update the baseline: {update_command(outcome.nodeid)}"]
    return "\n".join(lines)


def uncosted_text(summary: ProfileSummary) -> str:
    """Which ops the cost model does not know (costed by their bytes on VectorE, the fallback)
    and how much of the time they are; "" when every op was costed."""
    ops = summary.uncosted()
    if not ops:
        return ""
    names = ", ".join(f"{name} {format_us(op.device_time_us)} ({format_fraction(round(op.share, 3))})"
                      for name, op in ops)
    return (f"costed by the fallback (not in the cost model): {names}; "
            f"{format_fraction(round(summary.uncosted_share(), 3))} of the device time")


def uncosted_lines(outcomes: Iterable[TestOutcome]) -> list[str]:
    return [f"{o.nodeid}: {text}" for o in outcomes for text in [uncosted_text(o.current)] if text]


MAX_ID_WIDTH = 90  # the session table's test column; full ids are in the lines below it


def short_id(nodeid: str, width: int = MAX_ID_WIDTH) -> str:
    """A node id cut in the middle to ``width`` characters (a 300-character parametrize id made
    the table 350 characters wide)."""
    if len(nodeid) <= width:
        return nodeid
    head = (width - 1) * 2 // 3
    return nodeid[:head] + "\u2026" + nodeid[-(width - 1 - head):]


def top_hotspot(summary: ProfileSummary) -> str:
    ranked = summary.ranked()
    if not ranked:
        return "-"
    name, op = ranked[0]
    return f"{name} ({op.share:.0%})"


def session_table(outcomes: Iterable[TestOutcome]) -> str:
    rows = [[short_id(o.nodeid),
             "-" if o.verdict.status == Status.NOT_PROFILED else format_us(o.current.total_device_time_us),
             format_delta(o.delta), top_hotspot(o.current), o.verdict.status] for o in outcomes]
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
    action = "fails under --neuron-strict" if strict else "passes"
    for o in outcomes:
        if o.verdict.status == Status.NO_BASELINE:
            lines.append(f"{o.nodeid}: no baseline for {o.current.variant} ({action}); "
                         f"record it with {update_command(o.nodeid)}")
        elif o.verdict.status == Status.INCOMPARABLE:
            lines.append(f"{o.nodeid}: not compared: {o.verdict.message}")
        elif o.verdict.status == Status.NOT_PROFILED:
            lines.append(f"{o.nodeid}: {o.verdict.message} ({action}); put the code to profile in "
                         "`with neuron_profile:`, or drop the fixture")
    return lines


def not_compared_line(outcomes: Sequence[TestOutcome]) -> str:
    """How many profiled tests the gate did not compare, and why: "" when it compared them all."""
    counts: dict[str, int] = {}
    for o in outcomes:
        if o.verdict.status in NOT_COMPARED:
            counts[o.verdict.status] = counts.get(o.verdict.status, 0) + 1
    total = sum(counts.values())
    if not total:
        return ""
    why = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return (f"{total} of {len(outcomes)} profiled tests {'was' if total == 1 else 'were'} not "
            f"compared ({why})")
