"""What the gate decided, for people: failure tables, the session summary, the JSON report.

TestOutcome is the one record per profiled test that travels from xdist workers to the
controller (as JSON) and feeds every report.

Names in these texts come from baseline and report files: every table cell and every value in
a line goes through ``safetext.plain`` (capped, control characters visible, no workflow command).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol, Sequence

from ..files import show_path
from ..formatting import RECORD_OPTION, format_bytes, format_delta, format_share, format_us
from ..gate.accepted import REASON_OPTION, fix_sentence, needs_reason, reason_placeholder, stale_numbers
from ..gate.compare import MEMORY_KINDS, NOT_COMPARED, Finding, Kind, Status
from ..gate.outcome import TestOutcome, chip_label, regressions_first, several_variants, status_counts
from ..gate.summary import ProfileSummary
from ..safetext import MAX_MESSAGE_CHARS, plain
from .hints import record_hint
from .rows import (ACCEPTED_HEADERS, PEAK_HEADER, TENSOR_HEADERS, TENSORS_TITLE, accepted_reason,
                   UNMEASURED, accepted_rows, compared_with_text, finding_rows, fit_text, has_memory,
                   impact_phrase, largest_finding, memory_finding, memory_line, peak_cell, tensor_rows,
                   tensors_left, verdict_word)
from .why import change_line, failure_recommendations, recommendation_lines
from .tables import grid

def text_table(rows: Iterable[Sequence[object]], headers: Sequence[str], fmt: str = "simple") -> str:
    """Every terminal table: each cell and header through ``plain`` (a chip's name from a file
    heads a column of `compare --by chip`), numbers kept as written."""
    return grid([[plain(c) for c in row] for row in rows], [plain(h) for h in headers], fmt)


def findings_table(findings: Iterable[Finding], fmt: str = "simple") -> str:
    """A row per op (``rows.finding_rows``: its calls beside its time)."""
    return text_table(finding_rows(list(findings)), Finding.HEADERS, fmt)


def failure_section(outcome: TestOutcome, siblings: Sequence[TestOutcome] = ()) -> str:
    """The text a regressed test fails with, naming its full variant; ``siblings``: the test's
    outcomes on every chip of the run, which its re-record command re-records together."""
    current = outcome.current
    lines = [failure_headline(outcome)]
    change = change_line(outcome)  # the kind of slowdown, before the table
    if change:
        lines.append(f"utilisation: {change}")
    lines += ["", findings_table(outcome.verdict.regressions)]
    if outcome.verdict.allowed:
        lines += ["", "allowed changes:", findings_table(outcome.verdict.allowed)]
    if memory_finding(outcome) and current.memory is not None:
        lines += ["", memory_line(current.memory)]
        tensors = tensor_rows(outcome)
        if tensors:
            lines += [f"{TENSORS_TITLE}:", text_table(tensors, TENSOR_HEADERS)]
            left = tensors_left(outcome)
            lines += [plain(left, MAX_MESSAGE_CHARS)] if left else []
    uncosted = uncosted_text(current)
    if uncosted:
        lines += ["", uncosted]
    advice = failure_recommendations(outcome)
    if advice:
        lines += ["", "why it is slow (Neuron Explorer's rules that name the ops that changed):",
                  *recommendation_lines(advice, current.total_device_time_us,
                                        lambda text: plain(text, MAX_RECOMMENDATION_CHARS))]
    for fix in failure_fixes(outcome, siblings):
        lines += ["", fix]
    return "\n".join(lines)


def failure_fixes(outcome: TestOutcome, siblings: Sequence[TestOutcome] = (),
                  intended: str = "If this change is intended") -> list[str]:
    """What to do about a failure: re-record the baseline (when the change is intended), and
    for a test that does not fit, what would fit (``rows.fit_text``: a new baseline would not
    change its limit)."""
    kinds = {f.kind for f in outcome.verdict.regressions}
    fixes = []
    if outcome.base_resimulated:  # neuronprof continuous: no stored baseline to update
        fixes.append(f"{intended}, there is nothing to re-record (`neuronprof continuous` re-simulates "
                     f"{plain(outcome.base_ref)} on every run): accept it in review, or allow it in the "
                     "test's marker (allow={'op': 'why'})")
    elif needs_reason(outcome.verdict):
        command = record_hint([outcome], siblings or None).replace(
            f" {RECORD_OPTION}", f" {RECORD_OPTION} {REASON_OPTION} '{reason_placeholder(outcome.verdict)}'", 1)
        fixes.append(f"{plain(fix_sentence(outcome.verdict), MAX_MESSAGE_CHARS)} (a reviewer reads it "
                     f"in the diff): {command}")
    elif kinds - {Kind.FIT} or not kinds:
        fixes.append(f"{intended}, update the baseline: {record_hint([outcome], siblings or None)}")
    if Kind.FIT in kinds:
        fixes.append(plain(fit_text(outcome), MAX_FIT_CHARS))
    return fixes


MAX_FIT_CHARS = 1000  # the paragraph of what would fit: a chip's name from a file is in it
MAX_RECOMMENDATION_CHARS = 1000  # a recommendation's line: op and module names from a file are in it


def memory_only(outcome: TestOutcome) -> bool:
    """Only the test's device memory failed (or it has no baseline, where only its memory
    limit applies): its failure then leads with the peak, not the device time."""
    findings = outcome.verdict.regressions
    return outcome.baseline is None or (bool(findings) and all(f.kind in MEMORY_KINDS for f in findings))


def failure_headline(outcome: TestOutcome) -> str:
    """A failure's first line (pytest's short summary line): that it does not fit (also with no
    baseline), else the change of the total device time and the finding that adds the most
    (``rows.largest_finding``), else (only the memory failed) the change of the peak."""
    current, baseline = outcome.current, outcome.baseline
    findings = outcome.verdict.regressions
    variant = plain(current.variant)
    for f in findings:
        if f.kind == Kind.FIT:
            slower = (f"; device time {format_delta(outcome.delta)}"
                      if any(g.kind not in MEMORY_KINDS for g in findings) else "")
            return (f"does not fit in device memory on {variant} (peak {format_bytes(f.current)}, "
                    f"limit {format_bytes(f.baseline)}){slower}")
    beyond = [f for f in findings if f.kind not in (Kind.POLICY, *MEMORY_KINDS)
              and f.current > f.baseline * (1.0 + f.threshold)]
    if outcome.verdict.stale and not beyond:  # the run passes against the base, not the change
        return (f"this change's own baseline entry does not hold what this run measured on "
                f"{variant} ({plain(stale_numbers(outcome.verdict))})")
    if findings and all(f.kind == Kind.POLICY for f in findings):
        return (f"the marker gates less than the baseline entry on {variant}: " + ", ".join(
            f"{plain(f.op)} {f.cells()[2]} -> {f.cells()[3]}" for f in findings))
    if not memory_only(outcome):
        assert baseline is not None
        found = largest_finding(outcome)
        return (f"device time regression on {variant} "
                f"(total {format_us(baseline.total_device_time_us)} -> "
                f"{format_us(current.total_device_time_us)}, {format_delta(outcome.delta)})"
                + (f"; largest: {plain(impact_phrase(found), MAX_MESSAGE_CHARS)}" if found else ""))
    for f in findings:
        if f.kind == Kind.MEMORY:
            return (f"device memory regression on {variant} (peak {format_bytes(f.baseline)} -> "
                    f"{format_bytes(f.current)}, {format_delta(f.delta)})")
    return f"regression on {variant}"  # no finding says what (a report edited by hand)


def uncosted_text(summary: ProfileSummary, name: Callable[[str], str] = plain) -> str:
    """Which ops the cost model does not know (costed by their bytes on VectorE, the fallback)
    and how much of the time they are; "" when every op was costed. The one sentence every
    output says it with: ``name`` escapes each op's name for that output (Markdown, HTML)."""
    ops = summary.uncosted()
    if not ops:
        return ""
    names = ", ".join(f"{name(op_name)} {format_us(op.device_time_us)} ({format_share(op.share)})"
                      for op_name, op in ops)
    return (f"costed by the fallback (not in the cost model): {names}; "
            f"{format_share(summary.uncosted_share())} of the device time")


def uncosted_lines(outcomes: Iterable[TestOutcome]) -> list[str]:
    return [f"{plain(o.nodeid)}: {text}" for o in outcomes for text in [uncosted_text(o.current)] if text]


MAX_ID_WIDTH = 90  # the session table's test column; full ids are in the lines below it


def short_id(nodeid: str, width: int = MAX_ID_WIDTH) -> str:
    """A node id cut in the middle to ``width`` characters (a 300-character parametrize id made
    the table 350 characters wide)."""
    if len(nodeid) <= width:
        return nodeid
    head = (width - 1) * 2 // 3
    return nodeid[:head] + "\u2026" + nodeid[-(width - 1 - head):]


MAX_HOTSPOT_CHARS = 120  # the op's name in the session table, leaving room for its share


def top_hotspot(outcome: TestOutcome) -> str:
    """The op with the most device time and its share; an optimizer's state creation (its first
    step: a recommendation says so, and how to keep it out) is said to be one-time."""
    ranked = outcome.current.ranked()
    if not ranked:
        return "-"
    name, op = ranked[0]
    once = any(r.rule == "state_creation" and name in r.ops for r in outcome.recommendations)
    # the share stays in the cell
    return f"{plain(name, MAX_HOTSPOT_CHARS)} ({op.share:.0%}{', one-time optimizer state' if once else ''})"


def session_table(outcomes: Iterable[TestOutcome]) -> str:
    """A row per outcome, the regressions first; a chip column when a test ran on several."""
    outcomes = regressions_first(outcomes)
    chips = several_variants(outcomes)
    memory = has_memory(outcomes)  # a peak column where some test measured its memory
    rows = [[short_id(o.nodeid), *([chip_label(o)] if chips else []),
             "-" if o.verdict.status in UNMEASURED else format_us(o.current.total_device_time_us),
             format_delta(o.delta), *([peak_cell(o)] if memory else []), top_hotspot(o),
             verdict_word(o)] for o in outcomes]
    return text_table(rows, ["test", *(["chip"] if chips else []), "device time", "delta",
                             *([PEAK_HEADER] if memory else []), "top hotspot", "verdict"])


def _named(o: TestOutcome, chips: bool) -> str:
    """A test in a line of text, with its chip when the run has several."""
    return f"{plain(o.nodeid)} [{plain(o.current.variant)}]" if chips else plain(o.nodeid)


def improvements_text(outcomes: Iterable[TestOutcome]) -> str:
    outcomes = list(outcomes)
    improved = [o for o in outcomes if o.verdict.status == Status.IMPROVED]
    if not improved:
        return ""
    chips = several_variants(outcomes)
    lines = []
    for o in improved:
        peak = [f.kind in MEMORY_KINDS for f in o.verdict.improvements]  # the peak shrank
        what = ("faster than" if not any(peak) else "a lower peak of device memory than" if all(peak)
                else "faster, with a lower peak, than")
        lines += [f"{_named(o, chips)}: {what} its baseline", findings_table(o.verdict.improvements), ""]
    lines.append(f"Lock the gains in: {record_hint(improved, outcomes)}")
    return "\n".join(lines)


def allowed_text(outcomes: Iterable[TestOutcome]) -> str:
    """The changes the marker's ``allow=`` accepted, per test, each beside the reason it gives;
    "" when none."""
    outcomes = list(outcomes)
    chips = several_variants(outcomes)
    lines = []
    for o in outcomes:
        if o.verdict.allowed:
            lines += [f"{_named(o, chips)}: allowed by its marker", findings_table(o.verdict.allowed), ""]
    return "\n".join(lines).rstrip()


def accepted_text(outcomes: Iterable[TestOutcome]) -> str:
    """The changes a pull request made to its own baseline entries (gated against a git ref,
    --neuron-baseline-ref), per test and per op, each with the reason it gave; "" when none."""
    outcomes = list(outcomes)
    chips = several_variants(outcomes)
    lines = []
    for o in regressions_first(o for o in outcomes if o.verdict.accepted):
        lines += [f"{_named(o, chips)}: accepted in this change, reason: "
                  f"{plain(accepted_reason(o), MAX_MESSAGE_CHARS)}",
                  text_table(accepted_rows(o, reason=False), ACCEPTED_HEADERS[:-1]), ""]
    return "\n".join(lines).rstrip()


def not_compared_fix(outcome: TestOutcome, siblings: Sequence[TestOutcome] = ()) -> str:
    """What to do about a test the gate did not compare (the summary, annotations, --neuron-strict);
    ``siblings``: the run's outcomes, whose chips of the same test the command re-records too."""
    if outcome.verdict.status == Status.NOT_PROFILED:
        return "put the code to profile in `with neuron_profile:`, or drop the fixture"
    # Only the test's chips that were not compared either: re-recording a chip whose check
    # failed would accept its regression (that is the regression hint's to offer).
    missing = [s for s in siblings if s.nodeid != outcome.nodeid or s.verdict.status in NOT_COMPARED]
    return f"record it with {record_hint([outcome], missing or None)}"


def notices(outcomes: Iterable[TestOutcome], strict: bool) -> list[str]:
    """One line per test that was not compared, saying why and what to do."""
    lines = []
    outcomes = list(outcomes)
    chips = several_variants(outcomes)
    action = "fails under --neuron-strict" if strict else "passes"
    for o in outcomes:
        nodeid, message = plain(o.nodeid), plain(o.verdict.message, MAX_MESSAGE_CHARS)
        if o.verdict.status == Status.NO_BASELINE:
            lines.append(f"{nodeid}: no baseline for {plain(o.current.variant)} ({action}); "
                         f"{not_compared_fix(o, outcomes)}")
        elif o.verdict.status == Status.INCOMPARABLE:
            lines.append(f"{_named(o, chips)}: not compared: {message}")
        elif o.verdict.status == Status.NOT_PROFILED:
            lines.append(f"{_named(o, chips)}: {message} ({action}); {not_compared_fix(o, outcomes)}")
        elif o.verdict.status == Status.NOT_GATED:
            lines.append(f"{plain(o.nodeid)} [{plain(o.current.variant)}]: {message}")
    return lines


def not_compared_line(outcomes: Sequence[TestOutcome]) -> str:
    """How many profiled tests the gate did not compare, and why: "" when it compared them all."""
    counts = {status: n for status, n in status_counts(outcomes).items() if status in NOT_COMPARED}
    entries = counts.pop(Status.NOT_GATED, 0)  # no test of the run: not counted as one
    total = sum(counts.values())
    why = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    line = (f"{total} of {len(outcomes) - entries} profiled tests {'was' if total == 1 else 'were'} "
            f"not compared ({why})") if total else ""
    if entries:
        line += (("; " if line else "") + f"{entries} baseline entr{'y' if entries == 1 else 'ies'} "
                 "of the base no test produced (not gated)")
    return line


MAX_UNFINISHED_SHOWN = 5  # tests named in the summary of a recording stopped early


@dataclass
class WriteLog:
    """What the session's end wrote and what it did not, for the summary (the plugin's session
    fills it; the errors also end the run, below the summary: this says it where it is read)."""

    record: bool = False  # a recording run (--neuron-baseline)
    changed: list[Path] = field(default_factory=list)  # baseline files changed
    unwritten_tests: int = 0  # recorded tests whose baseline file could not be written
    not_written: list[str] = field(default_factory=list)  # why each output that failed failed
    stopped: str | None = None  # why the run ended early (Ctrl-C, -x), or None
    unfinished: list[str] | None = None  # profiled tests that did not finish; None: not known
    reason: str = ""  # --neuron-reason given to the recording ("" none): where it went is said


class Terminal(Protocol):
    """What the summary writes to (pytest's terminal reporter)."""

    def write_sep(self, sep: str, title: str) -> object: ...

    def write_line(self, line: str) -> object: ...


def stopped_line(log: WriteLog) -> str:
    """A recording stopped early: the tests that finished were recorded (nothing measured
    is thrown away), those that did not keep their old baselines; which, by name."""
    line = (f"recording stopped early ({log.stopped}): every test that finished and passed "
            "was recorded; ")
    if log.unfinished is None:  # an xdist controller does not collect
        return line + "the profiled tests that did not finish keep their old baselines"
    if not log.unfinished:
        return line + "every profiled test had finished"
    shown = ", ".join(plain(n) for n in log.unfinished[:MAX_UNFINISHED_SHOWN])
    if len(log.unfinished) > MAX_UNFINISHED_SHOWN:
        shown += ", ..."
    return line + f"profiled tests that did not finish keep their old baselines: {len(log.unfinished)} ({shown})"


def written_lines(log: WriteLog, outcomes: Sequence[TestOutcome]) -> list[str]:
    """What the session's end wrote and what it did not (each with its error), and after a
    recording stopped early, which tests keep their old baselines."""
    lines = []
    if log.record and (outcomes or log.stopped):
        entries = [o.nodeid for o in outcomes if o.verdict.status == Status.RECORDED]
        recorded = len(set(entries))
        chips = f" ({len(entries)} entries: one per chip)" if len(entries) > recorded else ""
        changed = (", ".join(plain(show_path(p)) for p in log.changed)
                   or ("none" if log.unwritten_tests else "none (all unchanged)"))
        line = f"baselines recorded: {recorded} tests{chips}; files changed: {changed}"
        if log.unwritten_tests:
            line += (f"; NOT written: {log.unwritten_tests} of the {recorded} (they keep their "
                     "old baselines)")
        lines.append(line)
        if log.reason:
            lines.append(reason_line(log.reason, outcomes))
        if log.stopped:
            lines.append(stopped_line(log))
    return lines + [f"NOT written: {plain(problem, MAX_MESSAGE_CHARS)}" for problem in log.not_written]


MAX_REASON_TESTS_SHOWN = 3  # tests named in the line that says where --neuron-reason went


def reason_line(reason: str, outcomes: Sequence[TestOutcome]) -> str:
    """What a recording did with ``--neuron-reason``: the entries it was written to (their
    numbers changed in this recording, or their tests were named) and those it was not (their
    numbers and reason still match what was recorded before: a reason goes with the numbers it
    accepts), and where it should go."""
    recorded = [o for o in outcomes if o.verdict.status == Status.RECORDED]
    written = [o for o in recorded if o.current.reason == reason and (
        o.baseline is None or (o.baseline.reason, o.baseline.reason_for) != (o.current.reason, o.current.reason_for))]
    kept = [o for o in recorded if o.current.reason == reason and o not in written]
    left = [o for o in recorded if o.current.reason != reason]
    quoted = plain(reason, MAX_MESSAGE_CHARS)

    def named(group: list[TestOutcome]) -> str:
        ids = list(dict.fromkeys(plain(o.nodeid) for o in group))
        return ", ".join(ids[:MAX_REASON_TESTS_SHOWN]) + (", ..." if len(ids) > MAX_REASON_TESTS_SHOWN else "")

    line = f"--neuron-reason {quoted!r}: "
    if written:
        line += f"written to {len(written)} entr{'y' if len(written) == 1 else 'ies'} ({named(written)})"
    else:
        line += "written to no entry"
    if kept:
        line += f"; {len(kept)} already had it for these numbers"
    if left:
        line += (f"; not written to {len(left)} whose numbers did not change in this recording: a "
                 "reason goes with the numbers it accepts. To give it to numbers recorded earlier "
                 f"without one (a plain re-record), name their tests: pytest {RECORD_OPTION} "
                 f"{REASON_OPTION} '...' <test id> ...")
    return line


# Another output's part of the summary (GitHub's annotations): (outcomes, write_line, rootdir).
Publisher = Callable[[Sequence[TestOutcome], Callable[[str], object], Path], object]


def write_summary(terminal: Terminal, outcomes: Sequence[TestOutcome], log: WriteLog, strict: bool,
                  rootdir: Path, publishers: Iterable[Publisher] = ()) -> None:
    """The session's summary: its table, a line per test not compared, the ops the cost model
    does not know, the improvements, what was written and not; then each publisher's part."""
    if not outcomes:
        for line in written_lines(log, outcomes):  # a recording stopped before any test finished
            terminal.write_line(line)
        return
    terminal.write_sep("=", "neuron device-time profile")
    base = compared_with_text(outcomes, plain)
    if base:
        terminal.write_line(base[:1].upper() + base[1:])
    terminal.write_line(session_table(outcomes))
    for line in [not_compared_line(outcomes), *notices(outcomes, strict), *uncosted_lines(outcomes)]:
        if line:
            terminal.write_line(line)
    for title, text in (("accepted in this change", accepted_text(outcomes)),
                        ("allowed by the marker", allowed_text(outcomes)),
                        ("improvements", improvements_text(outcomes))):
        if text:
            terminal.write_sep("-", title)
            terminal.write_line(text)
    for line in written_lines(log, outcomes):
        terminal.write_line(line)
    for publish in publishers:
        publish(outcomes, terminal.write_line, rootdir)
