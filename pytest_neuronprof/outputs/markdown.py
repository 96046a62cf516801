"""GitHub-flavoured Markdown of outcomes: the Actions step summary and the text a reviewer pastes
into a pull request (`neuronprof compare --format markdown`). One renderer for both, so they read
the same.

Names come from baseline and report files: every table cell is Markdown text (``safetext.md_text``:
HTML and Markdown syntax escaped) unless it is ``Markup`` this module built, such as a node id
in a code span (``safetext.md_code``) or a bold verdict."""

from __future__ import annotations

from typing import Iterable, Sequence

from ..formatting import format_delta, record_command
from ..gate.compare import NOT_COMPARED, Finding, Status
from ..gate.outcome import TestOutcome, status_counts
from ..safetext import MAX_MESSAGE_CHARS, html_text, md_code, md_text
from .rows import OP_HEADERS, TOTALS_HEADERS, op_rows, totals_rows
from .tables import grid
from .terminal import uncosted_text

_ORDER = (Status.REGRESSION, Status.IMPROVED, Status.PASS, Status.NO_BASELINE,
          Status.INCOMPARABLE, Status.NOT_PROFILED, Status.RECORDED)
# Verdicts whose baseline is missing or no longer says what the code does: re-recording helps
# (not "not-profiled": that test's fix is in its code).
_STALE = (Status.REGRESSION, Status.IMPROVED, Status.NO_BASELINE, Status.INCOMPARABLE)


class Markup(str):
    """Markdown this module built from escaped parts: a table cell takes it as it is."""


def cell(value: object) -> str:
    """A table cell: Markup as it is, anything else escaped as Markdown text (a `|` would end the
    cell, a newline the row, and a name must never become a link, an image or a tag)."""
    return value if isinstance(value, Markup) else md_text(value)


def code(text: object) -> Markup:
    """An id in a code span that holds any text (backticks, `|`)."""
    return Markup(md_code(text))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    return grid([[cell(c) for c in row] for row in rows], headers, "github")


def counts_line(outcomes: Sequence[TestOutcome]) -> str:
    ordered = sorted(status_counts(outcomes).items(),
                     key=lambda kv: (_ORDER.index(kv[0]) if kv[0] in _ORDER else 99, kv[0]))
    parts = [f"{n} {status}" if status != Status.REGRESSION else f"**{n} {status}{'s' if n > 1 else ''}**"
             for status, n in ordered]
    return ", ".join(parts) or "no profiled tests"


def findings_markdown(outcomes: Sequence[TestOutcome], attr: str) -> str:
    rows = [[code(o.nodeid), *f.cells()] for o in outcomes for f in getattr(o.verdict, attr)]
    return table(["test", *Finding.HEADERS], rows)


def _verdict(status: str) -> str:
    return Markup(f"**{md_text(status)}**") if status == Status.REGRESSION else md_text(status)


def totals_markdown(outcomes: Sequence[TestOutcome]) -> str:
    return table(TOTALS_HEADERS, totals_rows(outcomes, _verdict, code))


def update_commands(outcomes: Sequence[TestOutcome], limit: int | None = None) -> str:
    """One command that re-records every test whose baseline is stale or missing (the whole
    suite when they are more than ``limit``)."""
    stale = [o.nodeid for o in outcomes if o.verdict.status in _STALE]
    if not stale:
        return ""
    if limit is not None and len(stale) > limit:
        return record_command()
    return record_command(*stale)


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
    not_compared, left_out = _capped([o for o in outcomes if o.verdict.status in NOT_COMPARED], limit)
    if not_compared:
        lines += ["### Not compared", ""]
        lines += [f"- {code(o.nodeid)} [{md_text(o.current.variant)}]: "
                  f"{md_text(o.verdict.message, MAX_MESSAGE_CHARS)}" for o in not_compared]
        lines += [f"- and {left_out} more"] if left_out else []
        lines.append("")
    uncosted, left_out = _capped([o for o in outcomes if o.current.uncosted()], limit)
    if uncosted:
        lines += ["### Costed by the fallback", ""]
        lines += [f"- {code(o.nodeid)}: {uncosted_text(o.current, code)}" for o in uncosted]
        lines += [f"- and {left_out} more"] if left_out else []
        lines.append("")
    if outcomes:
        shown, left_out = _capped(outcomes, limit)
        lines += ["### Per-test totals", "", totals_markdown(shown), ""]
        if left_out:
            lines += [f"{left_out} more tests that passed are not listed here.", ""]
    if only_old:
        lines += ["### Only in the old baselines", ""]
        lines += [f"- {code(nodeid)} [{md_text(variant)}]" for nodeid, variant in only_old]
        lines.append("")
    if per_op:
        for o in outcomes:
            rows = op_rows(o, _verdict) if o.comparable_baseline is not None else []
            if rows:
                lines += [f"<details><summary>Per-op changes: <code>{html_text(o.nodeid)}</code> "
                          f"({format_delta(o.delta)})</summary>", "", table(OP_HEADERS, rows), "",
                          "</details>", ""]
    command = update_commands(outcomes, limit) if update else ""
    if command:
        lines += ["### Updating the baselines", "",
                  "If these changes are intended, re-record the baselines and commit them:", "",
                  "```sh", command, "```", ""]
    return "\n".join(lines).rstrip() + "\n"
