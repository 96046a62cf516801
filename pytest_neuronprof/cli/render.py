"""What `neuronprof compare` and `neuronprof show` print, as text, JSON or Markdown."""

from __future__ import annotations

import json
import math
from typing import Any

from tabulate import tabulate

from ..formatting import format_delta, format_si, format_us
from ..gate.compare import GatePolicy, Status
from ..gate.outcome import TestOutcome, op_changes
from ..gate.summary import ProfileSummary
from ..outputs.markdown import code, outcomes_markdown, table
from ..outputs.terminal import findings_table, notices, session_table
from .diffing import Comparison
from .inputs import REPORT, Loaded


def _describe(loaded: Loaded) -> str:
    return f"{loaded.path} ({loaded.kind}, {loaded.count()} entries)"


def _indent(text: str, prefix: str = "  ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _op_rows(outcome: TestOutcome) -> list[list[str]]:
    return [[c.op, c.engine, c.module or "-", format_us(c.old_us) if c.old_count else "-",
             format_us(c.new_us) if c.new_count else "-", format_delta(c.delta), c.calls,
             c.flag.upper() if c.flag == Status.REGRESSION else c.flag]
            for c in op_changes(outcome)]


_OP_HEADERS = ["op", "engine", "module", "old", "new", "delta", "calls", "gate"]


# --- compare ----------------------------------------------------------------------------------

def compare_text(old: Loaded, new: Loaded, comparison: Comparison, policy: GatePolicy) -> str:
    outcomes = comparison.outcomes
    lines = [f"OLD: {_describe(old)}", f"NEW: {_describe(new)}",
             f"gate: {policy.describe()} (marker overrides such as ops= and allow= are not "
             "applied)", ""]
    rows = [[o.nodeid, o.current.variant,
             format_us(o.baseline.total_device_time_us) if o.baseline else "-",
             format_us(o.current.total_device_time_us), format_delta(o.delta),
             o.verdict.status.upper() if o.verdict.status == Status.REGRESSION else str(o.verdict.status)]
            for o in outcomes]
    rows += [[nodeid, variant, "-", "-", "-", "only in OLD"] for nodeid, variant in comparison.only_old]
    lines.append(tabulate(rows, headers=["test", "variant", "old", "new", "delta", "verdict"],
                          tablefmt="simple", disable_numparse=True))
    for o in outcomes:
        if o.verdict.message:
            lines += ["", f"{o.nodeid} [{o.current.variant}]: {o.verdict.message}"]
        if o.baseline is None or o.verdict.status == Status.INCOMPARABLE:
            continue
        rows = _op_rows(o)
        if rows:
            lines += ["", f"{o.nodeid} [{o.current.variant}]: {o.verdict.status}, per-op changes:",
                      _indent(tabulate(rows, headers=_OP_HEADERS, tablefmt="simple", disable_numparse=True))]
    lines += ["", verdict_line(comparison)]
    return "\n".join(lines)


def verdict_line(comparison: Comparison) -> str:
    """The last line, agreeing with the exit code: no count of regressions reads as a verdict
    when the input could not be judged (exit 2)."""
    regressed = comparison.regressions
    counted = (f"{len(regressed)} regression{'s' if len(regressed) != 1 else ''} in "
               f"{len(comparison.compared)} compared test entries"
               + (f": {', '.join(o.nodeid for o in regressed)}" if regressed else ""))
    problem = comparison.problem()
    if problem is None:
        return counted
    return f"no verdict (exit {comparison.exit_code()}): {problem}; {counted}"


def _number(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 6)


def compare_json(old: Loaded, new: Loaded, comparison: Comparison, policy: GatePolicy) -> str:
    tests = []
    for o in comparison.outcomes:
        entry: dict[str, Any] = {
            "nodeid": o.nodeid, "variant": o.current.variant, "location": list(o.location),
            "status": o.verdict.status, "message": o.verdict.message,
            "old_total_us": o.baseline.total_device_time_us if o.baseline else None,
            "new_total_us": o.current.total_device_time_us,
            "delta": None if o.delta is None else round(o.delta, 6),
        }
        for attr in ("regressions", "improvements", "allowed"):
            entry[attr] = [f.to_json() for f in getattr(o.verdict, attr)]
        entry["ops"] = [] if o.baseline is None or o.verdict.status == Status.INCOMPARABLE else [
            {"op": c.op, "engine": c.engine, "module": c.module, "old_us": c.old_us, "new_us": c.new_us,
             "delta": _number(c.delta), "old_count": c.old_count, "new_count": c.new_count,
             "gate": c.flag} for c in op_changes(o)]
        tests.append(entry)
    document = {
        "old": str(old.path), "new": str(new.path),
        "policy": {"threshold": policy.threshold, "floor_us": policy.floor_us,
                   "hotspots": policy.hotspots, "min_share": policy.min_share,
                   "coverage": policy.coverage},
        "exit_code": comparison.exit_code(), "problem": comparison.problem(),
        "regressions": len(comparison.regressions),
        "tests": tests,
        "only_old": [{"nodeid": n, "variant": v} for n, v in comparison.only_old],
    }
    return json.dumps(document, indent=2, sort_keys=True)


def compare_markdown(old: Loaded, new: Loaded, comparison: Comparison, policy: GatePolicy) -> str:
    intro = (f"{code(str(old.path))} \u2192 {code(str(new.path))}; gate: {policy.describe()}. "
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
    return (f"{nodeid} [{variant}]: {format_us(summary.total_device_time_us)} "
            f"(cost model {summary.cost_model_version}, torch {summary.torch_version}; {source})")


def _show_baselines(loaded: Loaded, fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"kind": loaded.kind, "path": str(loaded.path), "tests": {
            nodeid: {variant: e.summary.to_json() for variant, e in variants.items()}
            for nodeid, variants in loaded.entries.items()}}, indent=2, sort_keys=True)
    blocks = [f"## Baselines: {code(str(loaded.path))}" if fmt == "markdown"
              else f"{loaded.path}: {loaded.count()} baseline entr{'y' if loaded.count() == 1 else 'ies'}"]
    for nodeid, variants in sorted(loaded.entries.items()):
        for variant, entry in sorted(variants.items()):
            s = entry.summary
            if fmt == "markdown":
                blocks += [f"### {code(nodeid)} [{variant}]: {format_us(s.total_device_time_us)}",
                           f"cost model {s.cost_model_version}, torch {s.torch_version}; {code(entry.source)}",
                           table(_SUMMARY_HEADERS, summary_rows(s))]
            else:
                blocks += [_heading(nodeid, variant, s, entry.source),
                           _indent(tabulate(summary_rows(s), headers=_SUMMARY_HEADERS, tablefmt="simple",
                                            disable_numparse=True))]
    return "\n\n".join(blocks)


def _show_report(loaded: Loaded, fmt: str) -> str:
    outcomes = loaded.outcomes
    if fmt == "json":
        return json.dumps({"kind": loaded.kind, "path": str(loaded.path),
                           "tests": {o.nodeid: o.to_json() for o in outcomes}}, indent=2, sort_keys=True)
    if fmt == "markdown":
        return outcomes_markdown(outcomes, f"Neuron device-time report: {code(loaded.path.name)}")
    lines = [f"{loaded.path}: {len(outcomes)} profiled tests", "", session_table(outcomes)]
    lines += notices(outcomes, strict=False)
    for o in outcomes:
        for attr, label in (("regressions", "regressions"), ("improvements", "improvements"),
                            ("allowed", "allowed changes")):
            findings = getattr(o.verdict, attr)
            if findings:
                lines += ["", f"{o.nodeid} [{o.current.variant}]: {label}", _indent(findings_table(findings))]
    return "\n".join(lines)


def show(loaded: Loaded, fmt: str) -> str:
    return _show_report(loaded, fmt) if loaded.kind == REPORT else _show_baselines(loaded, fmt)
