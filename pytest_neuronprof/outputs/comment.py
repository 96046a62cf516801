"""The body of one pull-request comment (``--neuron-comment PATH``, `neuronprof comment`):
Markdown a workflow posts and later updates in place, found again by its first line, a hidden
marker.

Regressions first, then the changes accepted in this change (gated against a git ref, each with
its reason), improvements and the tests not compared; each test's per-op table folded under
``<details>``. GitHub refuses a comment over 65,536 characters: when the body would be longer,
whole rows, items and per-op tables are cut from the end (the per-op tables first, the
regressions last) and a line says what was cut and where the rest is.

The cells, code spans and tables are ``outputs/markdown.py``'s: the same escaping as the step
summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Sequence

from ..files import atomic_write_text
from ..gate.compare import FAILED, NOT_COMPARED, Status
from ..gate.outcome import TestOutcome, regressions_first, several_variants
from ..safetext import MAX_MESSAGE_CHARS, md_text
from .markdown import (ALLOWED_HEADING, accepted_headers, accepted_rows_markdown, code, counts_line,
                       findings_markdown, per_op_details, table, test_code)
from .rows import compared_with_text

MARKER = "<!-- pytest-neuronprof -->"  # the first line: how a workflow finds the comment again
MAX_COMMENT_CHARS = 65_536  # GitHub's limit on a comment's body
_CUT_RESERVE = 400  # room kept for the line that says what was cut
ARTIFACT_NOTE = "the full report is in the job's artifact"


@dataclass
class _Section:
    """A heading (kept while any unit is) and units that are cut whole, from the end."""

    heading: list[str]
    units: list[str]
    noun: str  # what a unit is, in the cut line: "per-op tables"
    cut: int = field(default=0)

    def size(self) -> int:
        return sum(len(line) + 1 for line in self.heading + self.units) + 1 if self.units else 0

    def lines(self) -> list[str]:
        if not self.units:
            return []
        return [*self.heading, *self.units[:-1], self.units[-1].rstrip("\n"), ""]


def _table_section(heading: str, text: str, noun: str) -> _Section:
    """A Markdown table as a section whose units are its rows (each one line: cells are
    escaped, no line breaks in them)."""
    lines = text.splitlines()
    return _Section([f"### {heading}", "", *lines[:2]], lines[2:], noun)


def _sections(outcomes: Sequence[TestOutcome]) -> list[_Section]:
    chips = several_variants(outcomes)
    sections = []
    if any(o.verdict.regressions for o in outcomes):
        sections.append(_table_section("Regressions", findings_markdown(outcomes, "regressions"),
                                       "regression rows"))
    if any(o.verdict.accepted for o in outcomes):
        sections.append(_table_section(
            "Accepted in this change",
            table(accepted_headers(chips), accepted_rows_markdown(outcomes, chips)), "accepted changes"))
    if any(o.verdict.allowed for o in outcomes):
        sections.append(_table_section(ALLOWED_HEADING, findings_markdown(outcomes, "allowed"),
                                       "allowed changes"))
    if any(o.verdict.improvements for o in outcomes):
        sections.append(_table_section("Improvements", findings_markdown(outcomes, "improvements"),
                                       "improvement rows"))
    not_compared = [o for o in outcomes if o.verdict.status in NOT_COMPARED]
    if not_compared:
        sections.append(_Section(["### Not compared", ""], [
            f"- {test_code(o.nodeid)} [{md_text(o.current.variant)}]: "
            f"{md_text(o.verdict.message, MAX_MESSAGE_CHARS)}" for o in not_compared],
            "tests not compared"))
    details = [block for o in _by_interest(outcomes) for block in [per_op_details(o, chips)] if block]
    if details:
        sections.append(_Section(["### Per-op changes", ""], [d + "\n" for d in details],
                                 "per-op tables"))
    return sections


def _by_interest(outcomes: Sequence[TestOutcome]) -> list[TestOutcome]:
    """Failed tests first (regressed, or do not fit), then those with accepted changes, then
    improved, then the rest."""
    def rank(o: TestOutcome) -> int:
        return (0 if o.verdict.status in FAILED else 1 if o.verdict.accepted
                else 2 if o.verdict.status == Status.IMPROVED else 3)
    return sorted(regressions_first(outcomes), key=rank)


def _fit(sections: list[_Section], limit: int) -> None:
    """Cut whole units from the end (the last section first) until the sections fit in
    ``limit`` characters."""
    total = sum(s.size() for s in sections)
    for section in reversed(sections):
        while section.units and total > limit:
            before = section.size()
            section.units.pop()
            section.cut += 1
            total -= before - section.size()


def comment_body(outcomes: Sequence[TestOutcome], limit: int = MAX_COMMENT_CHARS) -> str:
    """The comment: the marker, a title with the counts, the sections; at most ``limit``
    characters, with a line saying what was cut when something was."""
    outcomes = sorted(outcomes, key=lambda o: o.nodeid)  # stable: a test's chips in their order
    # a failed test's changes accepted in this change too (the counts say "accepted" of a pass)
    failed = sum(1 for o in outcomes if o.verdict.accepted and o.verdict.failed)
    title = counts_line(outcomes) + (f", {failed} of the failed with changes accepted in this change"
                                     if failed else "")
    head = [MARKER, f"### Neuron device time: {title}", ""]
    base = compared_with_text(outcomes, code)
    if base:
        head += [base[:1].upper() + base[1:] + ".", ""]
    sections = _sections(outcomes)
    _fit(sections, limit - sum(len(line) + 1 for line in head) - _CUT_RESERVE)
    lines = head + [line for s in sections for line in s.lines()]
    cut = [f"{s.cut} more {s.noun}" for s in sections if s.cut]
    if cut:
        lines.append(f"_... not shown: {', '.join(cut)}; {ARTIFACT_NOTE}._")
    return "\n".join(lines).rstrip() + "\n"


def write_comment(path: Path, outcomes: Sequence[TestOutcome], paths: Mapping[str, Path]) -> None:
    """--neuron-comment at the session's end (its entry in ``outputs/registry.py``)."""
    atomic_write_text(path, comment_body(outcomes))
