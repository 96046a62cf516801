"""GitHub-flavoured Markdown of outcomes: the Actions step summary and the text a reviewer pastes
into a pull request (`neuronprof compare --format markdown`). One renderer for both, so they read
the same."""

from __future__ import annotations

from typing import Iterable, Sequence

from tabulate import tabulate

from ..formatting import format_delta, format_fraction, format_us
from ..gate.compare import Finding, Status
from ..gate.outcome import TestOutcome, op_changes
from .terminal import update_command

_ORDER = (Status.REGRESSION, Status.IMPROVED, Status.PASS, Status.NO_BASELINE,
          Status.INCOMPARABLE, Status.NOT_PROFILED, Status.RECORDED)


def cell(text: object) -> str:
    """Table cells: a `|` would end the cell (even inside a code span) and a newline the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text: str) -> str:
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    return tabulate([[cell(c) for c in row] for row in rows], headers=list(headers),
                    tablefmt="github", disable_numparse=True)


def counts_line(outcomes: Sequence[TestOutcome]) -> str:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict.status] = counts.get(o.verdict.status, 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: (_ORDER.index(kv[0]) if kv[0] in _ORDER else 99, kv[0]))
    parts = [f"{n} {status}" if status != Status.REGRESSION else f"**{n} {status}{'s' if n > 1 else ''}**"
             for status, n in ordered]
    return ", ".join(parts) or "no profiled tests"


def findings_markdown(outcomes: Sequence[TestOutcome], attr: str) -> str:
    rows = [[code(o.nodeid), *f.cells()] for o in outcomes for f in getattr(o.verdict, attr)]
    return table(["test", *Finding.HEADERS], rows)


def _verdict(status: str) -> str:
    return f"**{status}**" if status == Status.REGRESSION else str(status)


def totals_markdown(outcomes: Sequence[TestOutcome]) -> str:
    rows = [[code(o.nodeid), o.current.variant,
             format_us(o.baseline.total_device_time_us) if o.baseline else "-",
             format_us(o.current.total_device_time_us), format_delta(o.delta), _verdict(o.verdict.status)]
            for o in outcomes]
    return table(["test", "variant", "baseline", "current", "delta", "verdict"], rows)


def ops_markdown(outcome: TestOutcome) -> str:
    rows = [[c.op, c.engine, c.module or "-", format_us(c.old_us) if c.old_count else "-",
             format_us(c.new_us) if c.new_count else "-", format_delta(c.delta),
             c.calls, _verdict(c.flag) if c.flag else ""]
            for c in op_changes(outcome)]
    return table(["op", "engine", "module", "old", "new", "delta", "calls", "gate"], rows)


def update_commands(outcomes: Sequence[TestOutcome], limit: int | None = None) -> str:
    """One command that re-records every test whose baseline is stale or missing (the whole
    suite when they are more than ``limit``)."""
    stale = [o.nodeid for o in outcomes if o.verdict.status in (
        Status.REGRESSION, Status.IMPROVED, Status.NO_BASELINE, Status.INCOMPARABLE)]
    if not stale:
        return ""
    if limit is not None and len(stale) > limit:
        return update_command()
    return update_command(*stale)


def _capped(outcomes: list[TestOutcome], limit: int | None) -> tuple[list[TestOutcome], int]:
    """At most ``limit`` outcomes, the ones that did not simply pass first; and how many were left
    out. GitHub drops a step summary over 1 MiB, and 2,000 rows help nobody."""
    if limit is None or len(outcomes) <= limit:
        return outcomes, 0
    kept = sorted(outcomes, key=lambda o: o.verdict.status == Status.PASS)[:limit]
    return sorted(kept, key=lambda o: (o.nodeid, o.current.variant)), len(outcomes) - limit


def outcomes_markdown(outcomes: Sequence[TestOutcome], title: str, intro: str = "",
                      per_op: bool = False, only_old: Sequence[tuple[str, str]] = (),
                      update: bool = True, limit: int | None = None) -> str:
    """The whole document. ``per_op``: a collapsible per-op table for each test that changed;
    ``update``: end with the command that re-records the stale baselines; ``limit``: at most this
    many rows per list (the findings tables are never cut)."""
    outcomes = sorted(outcomes, key=lambda o: (o.nodeid, o.current.variant))
    lines = [f"## {title}", ""]
    if intro:
        lines += [intro, ""]
    lines += [counts_line(outcomes), ""]
    for attr, heading in (("regressions", "Regressions"), ("improvements", "Improvements")):
        if any(getattr(o.verdict, attr) for o in outcomes):
            lines += [f"### {heading}", "", findings_markdown(outcomes, attr), ""]
    not_compared, left_out = _capped([o for o in outcomes if o.verdict.message], limit)
    if not_compared:
        lines += ["### Not compared", ""]
        lines += [f"- {code(o.nodeid)} [{o.current.variant}]: {o.verdict.message}" for o in not_compared]
        lines += [f"- and {left_out} more"] if left_out else []
        lines.append("")
    uncosted, left_out = _capped([o for o in outcomes if o.current.uncosted()], limit)
    if uncosted:
        lines += ["### Costed by the fallback", "",
                  "Ops the cost model does not know, costed by their bytes on VectorE:", ""]
        lines += [f"- {code(o.nodeid)}: {format_fraction(round(o.current.uncosted_share(), 3))} of the "
                  "device time: " + ", ".join(f"{code(name)} {format_us(op.device_time_us)}"
                                               for name, op in o.current.uncosted())
                  for o in uncosted]
        lines += [f"- and {left_out} more"] if left_out else []
        lines.append("")
    if outcomes:
        shown, left_out = _capped(outcomes, limit)
        lines += ["### Per-test totals", "", totals_markdown(shown), ""]
        if left_out:
            lines += [f"{left_out} more tests that passed are not listed here.", ""]
    if only_old:
        lines += ["### Only in the old baselines", ""]
        lines += [f"- {code(nodeid)} [{variant}]" for nodeid, variant in only_old]
        lines.append("")
    if per_op:
        for o in outcomes:
            if o.comparable_baseline is not None and op_changes(o):
                lines += [f"<details><summary>Per-op changes: <code>{_html_text(o.nodeid)}</code> "
                          f"({format_delta(o.delta)})</summary>", "", ops_markdown(o), "", "</details>", ""]
    command = update_commands(outcomes, limit) if update else ""
    if command:
        lines += ["### Updating the baselines", "",
                  "If these changes are intended, re-record the baselines and commit them:", "",
                  "```sh", command, "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _html_text(text: str) -> str:
    from html import escape

    return escape(text, quote=False)
