"""What `neuronprof compare` and `neuronprof show` print, as text, JSON or Markdown.

Values from the files compared go through their output's escaping (``safetext``): text tables
through ``terminal.text_table``, values in text lines through ``plain``, Markdown through the
``markdown`` module's cells and code spans, JSON through ``json_text``."""

from __future__ import annotations

from typing import Any, Iterator

from ..formatting import delta_json, format_si, format_us
from ..gate.compare import Status
from ..gate.outcome import TestOutcome, op_changes
from ..gate.policy import describe_policies
from ..gate.summary import ProfileSummary
from ..jsontext import Deferred, iterdumps  # json.dumps(indent=2, sort_keys=True), faster
from ..outputs.markdown import code, outcomes_markdown, table
from ..outputs.rows import OP_HEADERS, TOTALS_HEADERS, op_rows, totals_rows
from ..outputs.terminal import findings_table, notices, session_table, text_table
from ..safetext import MAX_MESSAGE_CHARS, json_text, line_blocks, md_text, plain
from .diffing import Comparison
from .inputs import REPORT, Loaded


def _describe(loaded: Loaded) -> str:
    return f"{plain(loaded.path)} ({loaded.kind}, {loaded.count()} entries)"


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _loud(verdict: str) -> str:
    """A verdict in a text table: a regression in capitals, as Markdown has it in bold."""
    return verdict.upper() if verdict == Status.REGRESSION else str(verdict)


# --- compare ----------------------------------------------------------------------------------

def compare_text(old: Loaded, new: Loaded, comparison: Comparison) -> str:
    outcomes = comparison.outcomes
    lines = [f"OLD: {_describe(old)}", f"NEW: {_describe(new)}",
             f"gate: {plain(describe_policies(comparison.policies), MAX_MESSAGE_CHARS)} (marker "
             "overrides such as ops= and allow= are not applied)", ""]
    rows = totals_rows(outcomes, _loud)
    rows += [[nodeid, variant, "-", "-", "-", "only in OLD"] for nodeid, variant in comparison.only_old]
    lines.append(text_table(rows, TOTALS_HEADERS))
    for o in outcomes:
        if o.verdict.message:
            lines += ["", f"{_test(o)}: {plain(o.verdict.message, MAX_MESSAGE_CHARS)}"]
        if o.baseline is None or o.verdict.status == Status.INCOMPARABLE:
            continue
        rows = op_rows(o, _loud)
        if rows:
            lines += ["", f"{_test(o)}: {o.verdict.status}, per-op changes:",
                      _indent(text_table(rows, OP_HEADERS))]
    lines += ["", verdict_line(comparison)]
    return "\n".join(lines)


def _test(o: TestOutcome) -> str:
    """A test and its variant at the start of a line of text."""
    return f"{plain(o.nodeid)} [{plain(o.current.variant)}]"


def verdict_line(comparison: Comparison) -> str:
    """The last line, agreeing with the exit code: no count of regressions reads as a verdict
    when the input could not be judged (exit 2)."""
    regressed = comparison.regressions
    counted = (f"{len(regressed)} regression{'s' if len(regressed) != 1 else ''} in "
               f"{len(comparison.compared)} compared test entries"
               + (f": {', '.join(plain(o.nodeid) for o in regressed)}" if regressed else ""))
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
            "status": o.verdict.status, "message": o.verdict.message,
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


# --- show -------------------------------------------------------------------------------------

def summary_rows(summary: ProfileSummary) -> list[list[str]]:
    return [[name, op.engine, str(op.count), format_us(op.device_time_us), f"{op.share:.1%}",
             op.module or "-", format_si(op.flops, "FLOP"), format_si(op.bytes, "B")]
            for name, op in summary.ranked()]


_SUMMARY_HEADERS = ["op", "engine", "calls", "device time", "share", "module", "flops", "bytes"]


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
        for attr, label in (("regressions", "regressions"), ("improvements", "improvements"),
                            ("allowed", "allowed changes")):
            findings = getattr(o.verdict, attr)
            if findings:
                lines += ["", f"{_test(o)}: {label}", _indent(findings_table(findings))]
    return "\n".join(lines)


def show(loaded: Loaded, fmt: str) -> str | Iterator[str]:
    """What `neuronprof show` prints: a str, or (JSON) the document in blocks of lines."""
    return _show_report(loaded, fmt) if loaded.kind == REPORT else _show_baselines(loaded, fmt)
