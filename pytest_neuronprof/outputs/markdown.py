"""GitHub-flavoured Markdown of outcomes: the Actions step summary and the text a reviewer pastes
into a pull request (`neuronprof compare --format markdown`). One renderer for both, so they read
the same.

Names come from baseline and report files: every table cell and header is Markdown text
(``safetext.md_text``: HTML and Markdown syntax escaped) unless it is ``Markup`` this module
built, such as a node id in a code span (``safetext.md_code``) or a bold verdict. A value inside
the raw HTML this module writes (``<details><summary>``) is HTML text (``safetext.html_text``):
that line is an HTML block, where Markdown's backslash escapes are shown, not obeyed."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

from ..formatting import RECORD_OPTION, format_delta
from ..gate.accepted import REASON_OPTION, needs_reason, reason_placeholder
from ..gate.compare import FAILED, MEMORY_KINDS, NOT_COMPARED, Finding, Status
from ..gate.outcome import TestOutcome, chip_label, several_variants
from ..safetext import MAX_MESSAGE_CHARS, html_text, md_code, md_text
from .rows import (ACCEPTED_HEADERS, OP_HEADERS, TENSOR_HEADERS, TENSORS_TITLE, accepted_rows,
                   compared_with_text, finding_rows, fit_text, has_memory, memory_finding, memory_line,
                   op_rows, peak_cell, tensor_rows, tensors_left, totals_headers, totals_rows,
                   verdict_counts)
from .why import change_line, failure_recommendations, recommendation_text
from .hints import record_commands
from .tables import grid
from .terminal import short_id, uncosted_text

# Verdicts whose baseline is missing or no longer says what the code does: re-recording helps
# (not "not-profiled": that test's fix is in its code; not "does-not-fit", unless its time
# changed too: a new baseline does not change its limit).
_STALE = (Status.REGRESSION, Status.IMPROVED, Status.NO_BASELINE, Status.INCOMPARABLE)


def _stale(outcome: TestOutcome) -> bool:
    return outcome.verdict.status in _STALE or (
        outcome.verdict.status == Status.DOES_NOT_FIT and outcome.baseline is not None
        and any(f.kind not in MEMORY_KINDS for f in outcome.verdict.regressions))


class Markup(str):
    """Markdown this module built from escaped parts: a table cell takes it as it is."""


def cell(value: object) -> str:
    """A table cell: Markup as it is, anything else escaped as Markdown text (a `|` would end the
    cell, a newline the row, and a name must never become a link, an image or a tag)."""
    return value if isinstance(value, Markup) else md_text(value)


def code(text: object) -> Markup:
    """An id in a code span that holds any text (backticks, `|`)."""
    return Markup(md_code(text))


def test_code(nodeid: str) -> Markup:
    """A node id in a table cell: a code span, shortened in the middle (a 200-character id
    made every row 240 columns wide); the full id is in the per-op details."""
    return code(short_id(nodeid))


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Headers are cells too: a chip's name from a file heads a column of `compare --by chip`."""
    return grid([[cell(c) for c in row] for row in rows], [cell(h) for h in headers], "github")


def counts_line(outcomes: Sequence[TestOutcome]) -> str:
    """How many tests read as each verdict (``rows.verdict_word``: accepted, allowed and new
    said as such), failures first and in bold."""
    parts = [f"{n} {word}" if word not in FAILED
             else f"**{n} {word}{'s' if n > 1 and word == Status.REGRESSION else ''}**"
             for word, n in verdict_counts(outcomes)]
    return ", ".join(parts) or "no profiled tests"


def findings_markdown(outcomes: Sequence[TestOutcome], attr: str) -> str:
    """A row per finding; a variant column when a test has several (chips, eager and graph)."""
    chips = several_variants(outcomes)
    rows = [[test_code(o.nodeid), *([o.current.variant] if chips else []), *cells]
            for o in outcomes for cells in finding_rows(getattr(o.verdict, attr))]
    return table(["test", *(["variant"] if chips else []), *Finding.HEADERS], rows)


# Changes the marker's allow= accepts, each with the reason it gives (the findings' reason column)
ALLOWED_HEADING = "Allowed by the marker"


def accepted_rows_markdown(outcomes: Sequence[TestOutcome], chips: bool) -> list[list[object]]:
    """A row per change a pull request made to its own baseline entries (gated against a git
    ref), with the reason it gave: the table's rows, each a unit another output may cut."""
    return [[test_code(o.nodeid), *([o.current.variant] if chips else []), *row]
            for o in outcomes for row in accepted_rows(o)]


def accepted_headers(chips: bool) -> list[str]:
    return ["test", *(["variant"] if chips else []), *ACCEPTED_HEADERS]


def accepted_markdown(outcomes: Sequence[TestOutcome]) -> str:
    chips = several_variants(outcomes)
    return table(accepted_headers(chips), accepted_rows_markdown(outcomes, chips))


def per_op_details(o: TestOutcome, chips: bool, ops: bool = True) -> str:
    """A test's per-op changes (``ops``) and, where the gate flagged its device memory, what is
    live at its peak by origin (new or larger first) and, for a test that does not fit, what
    would fit; folded under ``<details>``; "" when there is neither (nothing changed, or no
    comparable baseline, and no memory finding)."""
    rows = op_rows(o, _verdict) if ops and o.comparable_baseline is not None else []
    memory = o.current.memory if memory_finding(o) else None
    if not rows and memory is None:
        return ""
    # Raw HTML: every value in it is HTML text (html_text), not Markdown text.
    chip = _chip(o, chips, html_text)
    title = (f"Per-op changes: <code>{html_text(o.nodeid)}</code>{chip} ({html_text(format_delta(o.delta))})"
             if rows else f"Device memory: <code>{html_text(o.nodeid)}</code>{chip} "
             f"(peak {html_text(peak_cell(o))})")
    lines = [f"<details><summary>{title}</summary>", ""]
    if rows:
        lines += [table(OP_HEADERS, rows), ""]
    if memory is not None:
        lines += [md_text(memory_line(memory)), ""]
        tensors = tensor_rows(o)
        if tensors:
            lines += [f"{TENSORS_TITLE.capitalize()}:", "", table(TENSOR_HEADERS, tensors), ""]
            left = tensors_left(o)
            lines += [md_text(left[:1].upper() + left[1:] + "."), ""] if left else []
        fit = fit_text(o)
        if fit:
            lines += [md_text(fit, MAX_FIT_CHARS), ""]
    return "\n".join(lines + ["</details>"])


MAX_FIT_CHARS = 1000  # the paragraph of what would fit (as the failure text has it)


def why_markdown(outcomes: Sequence[TestOutcome], chips: bool) -> str:
    """Per failed test, what changed in utilisation (``why.change_line``) and the
    recommendations about the ops that changed; "" when no failure has either."""
    lines = []
    for o in outcomes:
        if not o.verdict.failed:
            continue
        change, advice = change_line(o), failure_recommendations(o)
        if change or advice:
            lines.append(f"- {test_code(o.nodeid)}{_chip(o, chips)}: utilisation "
                         f"{md_text(change or 'not known')}")
            lines += [f"  - {md_text(recommendation_text(r, o.current.total_device_time_us), MAX_FIT_CHARS)}"
                      for r in advice]
    return "\n".join(lines)


def _verdict(status: str) -> str:
    return Markup(f"**{md_text(status)}**") if status in FAILED else md_text(status)


def totals_markdown(outcomes: Sequence[TestOutcome]) -> str:
    memory = has_memory(outcomes)  # a peak column where some test measured its memory
    return table(totals_headers(memory), totals_rows(outcomes, _verdict, test_code, memory))


def update_commands(outcomes: Sequence[TestOutcome], limit: int | None = None) -> str:
    """The command that re-records every test whose baseline is stale or missing, with the
    options of its variants (the whole suite when they are more than ``limit``): one line per
    set of options."""
    stale = [o for o in outcomes if _stale(o) and not needs_reason(o.verdict)]
    # a reason is what is missing (gate/accepted.py's needs_reason)
    unexplained = [o for o in outcomes if needs_reason(o.verdict)]
    if not stale and not unexplained:
        return ""
    every = limit is not None and len({o.nodeid for o in stale}) > limit
    commands = record_commands(stale, outcomes, all_tests=every) if stale else []
    for placeholder in sorted({reason_placeholder(o.verdict) for o in unexplained}):
        tests = [o for o in unexplained if reason_placeholder(o.verdict) == placeholder]
        commands += [command.replace(f" {RECORD_OPTION}", f" {RECORD_OPTION} {REASON_OPTION} '{placeholder}'", 1)
                     for command in record_commands(tests, outcomes)]
    return "\n".join(commands)


def _chip(outcome: TestOutcome, chips: bool, escape: Callable[[object], str] = md_text) -> str:
    """" [h200]" after a test's name where a test has several variants (``chips``); else "".
    ``escape``: the chip's escaping where it goes (Markdown text, or HTML in a summary line)."""
    return f" [{escape(chip_label(outcome))}]" if chips else ""


def _capped(outcomes: list[TestOutcome], limit: int | None) -> tuple[list[TestOutcome], int]:
    """At most ``limit`` outcomes, the ones that did not simply pass first; and how many were left
    out. GitHub drops a step summary over 1 MiB, and 2,000 rows help nobody."""
    if limit is None or len(outcomes) <= limit:
        return outcomes, 0
    kept = sorted(outcomes, key=lambda o: o.verdict.status == Status.PASS)[:limit]
    return sorted(kept, key=lambda o: o.nodeid), len(outcomes) - limit  # stable: chips in their order


def outcomes_markdown(outcomes: Sequence[TestOutcome], title: str, intro: str = "",
                      per_op: bool = False, only_old: Sequence[tuple[str, str]] = (),
                      update: bool = True, limit: int | None = None) -> str:
    """The whole document. ``per_op``: a collapsible per-op table for each test that changed
    (a test whose device memory failed always gets one with the largest tensors at its peak);
    ``update``: end with the command that re-records the stale baselines; ``limit``: at most this
    many rows per list (the findings tables are never cut)."""
    outcomes = sorted(outcomes, key=lambda o: o.nodeid)  # stable: a test's chips in their order
    chips = several_variants(outcomes)
    lines = [f"## {title}", ""]
    if intro:
        lines += [intro, ""]
    lines += [counts_line(outcomes), ""]
    base = compared_with_text(outcomes, code)
    if base:
        lines += [base[:1].upper() + base[1:] + ".", ""]
    for attr, heading in (("regressions", "Regressions"), ("accepted", "Accepted in this change"),
                          ("allowed", ALLOWED_HEADING), ("improvements", "Improvements")):
        if any(getattr(o.verdict, attr) for o in outcomes):
            found = accepted_markdown(outcomes) if attr == "accepted" else findings_markdown(outcomes, attr)
            lines += [f"### {heading}", "", found, ""]
    why = why_markdown(outcomes, chips)
    if why:
        lines += ["### Why it is slow", "", why, ""]
    not_compared, left_out = _capped([o for o in outcomes if o.verdict.status in NOT_COMPARED], limit)
    if not_compared:
        lines += ["### Not compared", ""]
        lines += [f"- {test_code(o.nodeid)} [{md_text(o.current.variant)}]: "
                  f"{md_text(o.verdict.message, MAX_MESSAGE_CHARS)}" for o in not_compared]
        lines += [f"- and {left_out} more"] if left_out else []
        lines.append("")
    uncosted, left_out = _capped([o for o in outcomes if o.current.uncosted()], limit)
    if uncosted:
        lines += ["### Costed by the fallback", ""]
        lines += [f"- {test_code(o.nodeid)}{_chip(o, chips)}: {uncosted_text(o.current, code)}"
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
        lines += [f"- {code(nodeid)} [{md_text(variant)}]" for nodeid, variant in only_old]
        lines.append("")
    for o in outcomes:  # without per_op: the tensors at the peak of a test whose memory failed
        block = per_op_details(o, chips, per_op)
        if block:
            lines += [block, ""]
    command = update_commands(outcomes, limit) if update else ""
    if command:
        lines += ["### Updating the baselines", "",
                  "If these changes are intended, re-record the baselines and commit them:", "",
                  "```sh", command, "```", ""]
    return "\n".join(lines).rstrip() + "\n"
