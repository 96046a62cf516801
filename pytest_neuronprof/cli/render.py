"""What `neuronprof compare` and `neuronprof show` print, as text, JSON or Markdown.

Values from the files compared go through their output's escaping (``safetext``): text tables
through ``terminal.text_table``, values in text lines through ``plain``, Markdown through the
``markdown`` module's cells and code spans, JSON through ``json_text``."""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from ..formatting import delta_json, format_bytes, format_delta, format_si, format_us, relative_change
from ..gate.compare import FAILED, Kind, Status
from ..gate.history import HistoryPoint
from ..gate.outcome import TestOutcome, op_changes, regressions_first, several_variants
from ..gate.policy import describe_policies
from ..gate.summary import ProfileSummary
from ..jsontext import Deferred, iterdumps  # json.dumps(indent=2, sort_keys=True), faster
from ..outputs.markdown import Markup, code, outcomes_markdown, table, test_code
from ..outputs.rows import (ACCEPTED, ACCEPTED_HEADERS, ALLOWED, NEW, OP_HEADERS, TOTALS_HEADERS, accepted_rows,
                            op_rows, totals_rows, verdict_word)
from ..outputs.why import achieved_cell, metric_rows, recommendation_text, utilisation_line
from ..outputs.terminal import findings_table, notices, session_table, short_id, text_table
from ..safetext import MAX_MESSAGE_CHARS, json_text, line_blocks, md_text, plain
from .diffing import Comparison
from .inputs import REPORT, Loaded


def _describe(loaded: Loaded) -> str:
    return f"{plain(loaded.path)} ({loaded.kind}, {loaded.count()} entries)"


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _loud(verdict: str) -> str:
    """A verdict in a text table: a failure (a regression, does-not-fit) in capitals, as Markdown
    has it in bold."""
    return verdict.upper() if verdict in FAILED else str(verdict)


# --- compare ----------------------------------------------------------------------------------

def compare_text(old: Loaded, new: Loaded, comparison: Comparison) -> str:
    outcomes = comparison.outcomes
    lines = [f"OLD: {_describe(old)}", f"NEW: {_describe(new)}",
             f"gate: {plain(describe_policies(comparison.policies), MAX_MESSAGE_CHARS)} (with the "
             "marker arguments each NEW entry was recorded with)", ""]
    rows = totals_rows(regressions_first(outcomes), _loud, short_id)
    rows += [[short_id(nodeid), variant, "-", "-", "-", "only in OLD"] for nodeid, variant in comparison.only_old]
    lines.append(text_table(rows, TOTALS_HEADERS))
    for o in outcomes:
        if o.verdict.message:
            lines += ["", f"{_test(o)}: {plain(o.verdict.message, MAX_MESSAGE_CHARS)}"]
        for f in o.verdict.regressions:
            if f.kind == Kind.FIT:  # "does not fit on trn2: 29.9 GiB peak, 24 GiB per NeuronCore"
                lines += ["", f"{_test(o)}: {plain(f.reason, MAX_MESSAGE_CHARS)}"]
            elif f.kind == Kind.POLICY:  # "marker threshold 5% -> 500%: gates less than ..."
                _, _, before, after, *_ = f.cells()
                lines += ["", f"{_test(o)}: {plain(f.op)} {before} -> {after}: "
                              f"{plain(f.reason, MAX_MESSAGE_CHARS)}"]
        if o.baseline is None or o.verdict.status == Status.INCOMPARABLE:
            continue
        rows = op_rows(o, _loud)
        if rows:
            lines += ["", f"{_test(o)}: {o.verdict.status}, per-op changes:",
                      _indent(text_table(rows, OP_HEADERS))]
        if o.verdict.accepted_reason:
            lines += ["", f"{_test(o)}: accepted: NEW's entry gives the reason "
                          f"{plain(o.verdict.accepted_reason, MAX_MESSAGE_CHARS)!r} for these numbers"]
    lines += ["", verdict_line(comparison)]
    return "\n".join(lines)


def _test(o: TestOutcome) -> str:
    """A test and its variant at the start of a line of text."""
    return f"{plain(o.nodeid)} [{plain(o.current.variant)}]"


def verdict_line(comparison: Comparison) -> str:
    """The last line, agreeing with the exit code: no count of regressions reads as a verdict
    when the input could not be judged (exit 2)."""
    regressed = comparison.regressions
    # with its variant where a test has several (chips, eager and graph): no name twice
    name = _test if several_variants(comparison.outcomes) else (lambda o: plain(o.nodeid))
    counted = (f"{len(regressed)} regression{'s' if len(regressed) != 1 else ''} in "
               f"{len(comparison.compared)} compared test entries"
               + (f": {', '.join(map(name, regressed))}" if regressed else ""))
    over = comparison.does_not_fit
    if over:  # exit 3: said first, as the exit code does
        counted = (f"{len(over)} {'does' if len(over) == 1 else 'do'} not fit in device memory: "
                   f"{', '.join(map(name, over))}; {counted}")
    problem = comparison.problem()
    if problem is None:
        return counted
    return f"no verdict (exit {comparison.exit_code()}): {plain(problem, MAX_MESSAGE_CHARS)}; {counted}"


def _json_document(document: Any) -> Iterator[str]:
    """A JSON document to print, in blocks of whole lines (``json_text`` applied to each): a
    large one never exists whole."""
    return map(json_text, line_blocks(iterdumps(document)))


def compare_json(old: Loaded, new: Loaded, comparison: Comparison) -> Iterator[str]:
    tests = []
    for o in comparison.outcomes:
        entry: dict[str, Any] = {
            "nodeid": o.nodeid, "variant": o.current.variant, "location": list(o.location),
            "status": o.verdict.status, "verdict": verdict_word(o), "message": o.verdict.message,
            "old_total_us": o.baseline.total_device_time_us if o.baseline else None,
            "new_total_us": o.current.total_device_time_us,
            "delta": delta_json(o.delta),
        }
        for attr in ("regressions", "improvements", "allowed"):
            entry[attr] = [f.to_json() for f in getattr(o.verdict, attr)]
        entry["ops"] = [] if o.baseline is None or o.verdict.status == Status.INCOMPARABLE else [
            {"op": c.op, "engine": c.engine, "module": c.module, "old_us": c.old_us, "new_us": c.new_us,
             "delta": delta_json(c.delta), "old_count": c.old_count, "new_count": c.new_count,
             "gate": c.flag} for c in op_changes(o)]
        tests.append(entry)
    document = {
        "old": str(old.path), "new": str(new.path),
        "policy": {backend: {"threshold": policy.threshold, "floor_us": policy.floor_us,
                             "hotspots": policy.hotspots, "min_share": policy.min_share,
                             "coverage": policy.coverage}
                   for backend, policy in comparison.policies.items()},  # by backend
        "exit_code": comparison.exit_code(), "problem": comparison.problem(),
        "regressions": len(comparison.regressions),
        "does_not_fit": len(comparison.does_not_fit),
        "tests": tests,
        "only_old": [{"nodeid": n, "variant": v} for n, v in comparison.only_old],
    }
    return _json_document(document)


def compare_markdown(old: Loaded, new: Loaded, comparison: Comparison) -> str:
    intro = (f"{code(str(old.path))} \u2192 {code(str(new.path))}; "
             f"gate: {md_text(describe_policies(comparison.policies), MAX_MESSAGE_CHARS)}. "
             "Generated by `neuronprof compare --format markdown`.")
    return outcomes_markdown(comparison.outcomes, "Device-time changes", intro=intro, per_op=True,
                             only_old=comparison.only_old, update=False)


# --- compare --by chip: the chips of each test side by side ---------------------------------

def _rest(o: TestOutcome) -> str:
    """A variant without its hardware: "simulated", "simulated:graph"."""
    return o.current.variant.replace(f":{o.current.hardware}", "", 1)


def by_chip(comparison: Comparison) -> tuple[list[str], list[tuple[str, str, dict[str, TestOutcome]]]]:
    """The chips of the comparison (in name order) and a row per test and rest of its variant
    (backend, execution, auto-cast): each chip's outcome."""
    chips = sorted({o.current.hardware for o in comparison.outcomes})
    rows: dict[tuple[str, str], dict[str, TestOutcome]] = {}
    for o in regressions_first(comparison.outcomes):
        rows.setdefault((o.nodeid, _rest(o)), {})[o.current.hardware] = o
    return chips, [(nodeid, rest, cells) for (nodeid, rest), cells in rows.items()]


def _absolute(o: TestOutcome) -> str:
    """A chip's numbers in NEW: its device time and peak ("2.730 ms, 3.1 GiB")."""
    memory = o.current.memory
    return format_us(o.current.total_device_time_us) + (
        f", {format_bytes(memory.peak_bytes)}" if memory is not None else "")


def _chip_cell(o: TestOutcome | None) -> tuple[str, str]:
    """A chip's cell: the change of the test's total with its device time and peak in NEW
    ("+12.0% (2.730 ms, 3.1 GiB)"), and the verdict when it is one to flag."""
    if o is None:
        return "-", ""
    if o.baseline is None:
        return f"not in OLD ({_absolute(o)})", ""
    if o.verdict.status == Status.INCOMPARABLE:
        return f"not comparable ({_absolute(o)})", ""
    word = verdict_word(o)  # a pass that is one of a kind says which (accepted, allowed)
    flag = word if word in (*FAILED, Status.IMPROVED, ACCEPTED, ALLOWED, NEW) else ""
    return f"{format_delta(o.delta)} ({_absolute(o)})", flag


def times_sentence(nodeid: str, cells: dict[str, TestOutcome], name: Any = plain) -> str:
    """"test: in NEW, inf2 takes 2.10x and h200 0.12x trn2's device time" against the chip
    that takes least ("" with fewer than two chips, or a chip that takes none)."""
    times = {chip: o.current.total_device_time_us for chip, o in cells.items()}
    if len(times) < 2 or min(times.values()) <= 0:
        return ""
    fastest = min(times, key=lambda chip: (times[chip], chip))
    parts = [f"{name(chip)} {times[chip] / times[fastest]:.2f}x" for chip in sorted(times)
             if chip != fastest]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"{name(nodeid)}: in NEW, {listed} {name(fastest)}'s device time"


def costs_sentence(nodeid: str, cells: dict[str, TestOutcome], name: Any = plain) -> str:
    """"test: this change costs +12.0% on trn2 and +3.0% on h200" ("" when nothing changed)."""
    changes = [(chip, o.delta) for chip, o in cells.items() if o.delta is not None]
    if not any(delta for _, delta in changes):
        return ""
    parts = [f"{format_delta(delta)} on {name(chip)}" for chip, delta in changes]
    listed = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return f"{name(nodeid)}: this change costs {listed}"


def compare_chips_text(old: Loaded, new: Loaded, comparison: Comparison) -> str:
    chips, rows = by_chip(comparison)
    several = len({rest for _, rest, _ in rows}) > 1
    headers = ["test", *(["variant"] if several else []), *chips]
    table_rows = [[short_id(nodeid), *([rest] if several else []),
                   *(" ".join(filter(None, (text, _loud(flag) if flag else "")))
                     for text, flag in (_chip_cell(cells.get(chip)) for chip in chips))]
                  for nodeid, rest, cells in rows]
    lines = [f"OLD: {_describe(old)}", f"NEW: {_describe(new)}",
             f"gate: {plain(describe_policies(comparison.policies), MAX_MESSAGE_CHARS)}; the change "
             "of each test's total device time on each chip (its device time and peak in NEW)", "",
             text_table(table_rows, headers)]
    sentences = [s for nodeid, _, cells in rows
                 for s in (costs_sentence(nodeid, cells), times_sentence(nodeid, cells))]
    if any(sentences):
        lines += ["", *(s for s in sentences if s)]
    lines += ["", verdict_line(comparison)]
    return "\n".join(lines)


def compare_chips_markdown(old: Loaded, new: Loaded, comparison: Comparison) -> str:
    chips, rows = by_chip(comparison)
    several = len({rest for _, rest, _ in rows}) > 1
    headers = ["test", *(["variant"] if several else []), *chips]

    def cell(text: str, flag: str) -> Markup:
        shown = f"**{flag}**" if flag in FAILED else flag
        return Markup(" ".join(filter(None, (md_text(text), shown))))

    table_rows = [[test_code(nodeid), *([rest] if several else []),
                   *(cell(*_chip_cell(cells.get(chip))) for chip in chips)]
                  for nodeid, rest, cells in rows]
    sentences = [s for nodeid, _, cells in rows
                 for s in (costs_sentence(nodeid, cells, md_text), times_sentence(nodeid, cells, md_text))]
    lines = ["## Device-time changes per chip", "",
             f"{code(str(old.path))} \u2192 {code(str(new.path))}; the change of each test's total "
             "device time on each chip (its device time and peak in NEW). Generated by "
             "`neuronprof compare --by chip --format markdown`.",
             "", table(headers, table_rows), ""]
    lines += [f"- {s}" for s in sentences if s]
    return "\n".join(lines).rstrip() + "\n"


def compare_chips_json(old: Loaded, new: Loaded, comparison: Comparison) -> Iterator[str]:
    chips, rows = by_chip(comparison)
    document = {
        "old": str(old.path), "new": str(new.path), "chips": chips,
        "exit_code": comparison.exit_code(), "problem": comparison.problem(),
        "regressions": len(comparison.regressions),
        "does_not_fit": len(comparison.does_not_fit),
        "tests": [{"nodeid": nodeid, "variant": rest, "chips": {
            chip: {"status": o.verdict.status, "verdict": verdict_word(o), "delta": delta_json(o.delta),
                   "old_total_us": o.baseline.total_device_time_us if o.baseline else None,
                   "new_total_us": o.current.total_device_time_us,
                   "old_peak_bytes": o.baseline.memory.peak_bytes
                   if o.baseline is not None and o.baseline.memory is not None else None,
                   "new_peak_bytes": o.current.memory.peak_bytes if o.current.memory is not None else None}
            for chip, o in cells.items()}} for nodeid, rest, cells in rows],
    }
    return _json_document(document)


# --- show -------------------------------------------------------------------------------------

def summary_rows(summary: ProfileSummary) -> list[list[str]]:
    """A row per op: what limits it (``bound``, "-" in an entry recorded before schema version
    4) and the share of that limit's peak it reaches (``why.achieved_cell``)."""
    return [[name, op.engine, str(op.count), format_us(op.device_time_us), f"{op.share:.1%}",
             op.where() or "-", format_si(op.flops, "FLOP"), format_si(op.bytes, "B"), op.bound or "-",
             achieved_cell(summary, op)]
            for name, op in summary.ranked()]


_SUMMARY_HEADERS = ["op", "engine", "calls", "device time", "share", "module", "flops", "bytes", "bound",
                    "of peak"]


def _heading(nodeid: str, variant: str, summary: ProfileSummary, source: str) -> str:
    return (f"{plain(nodeid)} [{plain(variant)}]: {format_us(summary.total_device_time_us)} "
            f"(cost model {plain(summary.cost_model_version)}, torch {plain(summary.torch_version)}; "
            f"{plain(source)})")


def _show_baselines(loaded: Loaded, fmt: str) -> str | Iterator[str]:
    if fmt == "json":
        return _json_document({"kind": loaded.kind, "path": str(loaded.path), "tests": {
            nodeid: {variant: Deferred(e.summary.to_write) for variant, e in variants.items()}
            for nodeid, variants in loaded.entries.items()}})
    blocks = [f"## Baselines: {code(str(loaded.path))}" if fmt == "markdown"
              else f"{plain(loaded.path)}: {loaded.count()} baseline entr{'y' if loaded.count() == 1 else 'ies'}"]
    for nodeid, variants in sorted(loaded.entries.items()):
        for variant, entry in sorted(variants.items()):
            s = entry.summary
            if fmt == "markdown":
                blocks += [f"### {code(nodeid)} [{md_text(variant)}]: "
                           f"{format_us(s.total_device_time_us)}",
                           f"cost model {md_text(s.cost_model_version)}, torch {md_text(s.torch_version)}; "
                           f"{code(entry.source)}",
                           table(_SUMMARY_HEADERS, summary_rows(s))]
            else:
                blocks += [_heading(nodeid, variant, s, entry.source),
                           _indent(text_table(summary_rows(s), _SUMMARY_HEADERS))]
    return "\n\n".join(blocks)


def _show_report(loaded: Loaded, fmt: str) -> str | Iterator[str]:
    outcomes = loaded.outcomes
    if fmt == "json":
        return _json_document({"kind": loaded.kind, "path": str(loaded.path),
                               "tests": {o.nodeid: o.to_json() for o in outcomes}})
    if fmt == "markdown":
        return outcomes_markdown(outcomes, f"Neuron device-time report: {code(loaded.path.name)}")
    lines = [f"{plain(loaded.path)}: {len(outcomes)} profiled tests", "", session_table(outcomes)]
    lines += notices(outcomes, strict=False)
    for o in outcomes:
        lines += _why_lines(o)
        for attr, label in (("regressions", "regressions"), ("accepted", "accepted in this change"),
                            ("improvements", "improvements"), ("allowed", "allowed changes")):
            findings = getattr(o.verdict, attr)
            if findings:
                shown = (text_table(accepted_rows(o), ACCEPTED_HEADERS) if attr == "accepted"
                         else findings_table(findings))
                lines += ["", f"{_test(o)}: {label}", _indent(shown)]
    return "\n".join(lines)


def _why_lines(o: TestOutcome) -> list[str]:
    """A test's utilisation, by Neuron Explorer's Summary metrics, and its recommendations; []
    where the report has none (measured backends, reports written before them)."""
    if o.utilisation is None:
        return []
    total = o.current.total_device_time_us
    lines = ["", f"{_test(o)}: utilisation: {plain(utilisation_line(o.utilisation), MAX_MESSAGE_CHARS)}",
             _indent(text_table(metric_rows(o.utilisation), ["metric", "value", "what it is"]))]
    if o.recommendations:
        lines.append(f"{_test(o)}: recommendations (Neuron Explorer's rules), the most device time first:")
        lines += [f"  - {plain(recommendation_text(r, total), MAX_MESSAGE_CHARS)}" for r in o.recommendations]
    else:
        lines.append(f"{_test(o)}: no recommendation applies")
    return lines


def show(loaded: Loaded, fmt: str) -> str | Iterator[str]:
    """What `neuronprof show` prints: a str, or (JSON) the document in blocks of lines."""
    return _show_report(loaded, fmt) if loaded.kind == REPORT else _show_baselines(loaded, fmt)


# --- history ----------------------------------------------------------------------------------

MAX_SUBJECT_CHARS = 50  # of a commit's subject in the history table
SHORT_HASH = 10


def _series(points: Sequence[HistoryPoint]) -> list[tuple[str, str, list[HistoryPoint]]]:
    """The points of each test and variant, in (test, variant) order, each oldest first."""
    groups: dict[tuple[str, str], list[HistoryPoint]] = {}
    for point in points:
        groups.setdefault((point.nodeid, point.variant), []).append(point)
    return [(nodeid, variant, group) for (nodeid, variant), group in sorted(groups.items())]


def _step(old: float | None, new: float | None) -> float | None:
    """The change from the previous point (None for the first, or where a side has no value)."""
    return None if old is None or new is None or not old else relative_change(old, new)


def _subject(subject: str) -> str:
    """A commit's subject in a table cell: clipped to MAX_SUBJECT_CHARS, with no note of its
    length (it is a title, not a value)."""
    return plain(subject if len(subject) <= MAX_SUBJECT_CHARS else subject[:MAX_SUBJECT_CHARS - 1] + "\u2026")


def history_text(points: Sequence[HistoryPoint], op: str | None) -> str:
    """Per test and variant, a row per commit that changed its numbers: the commit, its date and
    subject, the total device time (and ``op``'s) and the change from the previous row."""
    if not points:
        return "no baseline entry changed in the commits read" + (f" (op {plain(op)})" if op else "")
    blocks = []
    for nodeid, variant, group in _series(points):
        reasons = any(p.reason for p in group)
        headers = ["commit", "date", "subject", "total", "delta", *([op, "op delta"] if op else []),
                   *(["reason"] if reasons else [])]
        rows = []
        for i, p in enumerate(group):
            before = group[i - 1] if i else None
            subject = ("(--since) " if p.since else "") + p.subject
            rows.append([p.commit[:SHORT_HASH], p.date, _subject(subject),
                         format_us(p.total_us), format_delta(_step(before.total_us if before else None, p.total_us)),
                         *([format_us(p.op_us) if p.op_us is not None else "-",
                            format_delta(_step(before.op_us if before else None, p.op_us))] if op else []),
                         *([_reason_cell(p) if p.reason else "-"] if reasons else [])])
        changes = sum(1 for p in group if not p.since)
        blocks.append(f"{plain(nodeid)} [{plain(variant)}]: {changes} change"
                      f"{'s' if changes != 1 else ''}\n" + _indent(text_table(rows, headers)))
    return "\n\n".join(blocks)


def _reason_cell(point: HistoryPoint) -> str:
    """A point's reason, and the commit that gave it where a later one did than the numbers'."""
    given = f" (given in {point.reason_commit[:SHORT_HASH]})" if point.reason_commit else ""
    return _subject(point.reason) + given


def history_json(points: Sequence[HistoryPoint], op: str | None) -> Iterator[str]:
    tests = []
    for nodeid, variant, group in _series(points):
        tests.append({"nodeid": nodeid, "variant": variant, "points": [
            {"commit": p.commit, "date": p.date, "subject": p.subject, "total_us": p.total_us,
             "delta": delta_json(_step(group[i - 1].total_us if i else None, p.total_us)),
             "op_us": p.op_us, "peak_bytes": p.peak_bytes, "reason": p.reason,
             "reason_commit": p.reason_commit or None, "since": p.since}
            for i, p in enumerate(group)]})
    return _json_document({"op": op, "tests": tests})
