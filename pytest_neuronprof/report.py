"""What the gate decided, for people: failure tables, the session summary, the JSON report.

TestOutcome is the one record per profiled test that travels from xdist workers to the
controller (as JSON) and feeds every report.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Iterable

from tabulate import tabulate

from .gate import (IMPROVED, INCOMPARABLE, NO_BASELINE, RECORDED, REGRESSION, TOTAL, Finding,
                   Verdict)
from .summary import OpSummary, ProfileSummary, RoundSamples

REPORT_VERSION = 1


@dataclass
class TestOutcome:
    nodeid: str
    location: tuple[str, int]  # test file (relative to rootdir) and 1-based line
    verdict: Verdict
    current: ProfileSummary
    baseline: ProfileSummary | None

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.verdict.status == INCOMPARABLE:
            return None
        old = self.baseline.total_device_time_us
        return self.current.total_device_time_us / old - 1.0 if old else None

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "location": list(self.location),
            "verdict": {
                "status": self.verdict.status,
                "message": self.verdict.message,
                "regressions": [f.to_json() for f in self.verdict.regressions],
                "improvements": [f.to_json() for f in self.verdict.improvements],
                "allowed": [f.to_json() for f in self.verdict.allowed],
            },
            "current": self.current.to_json(),
            "baseline": self.baseline.to_json() if self.baseline else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TestOutcome":
        verdict = data["verdict"]
        return cls(
            nodeid=data["nodeid"],
            location=(data["location"][0], int(data["location"][1])),
            verdict=Verdict(
                status=verdict["status"],
                regressions=tuple(_finding(f) for f in verdict["regressions"]),
                improvements=tuple(_finding(f) for f in verdict["improvements"]),
                allowed=tuple(_finding(f) for f in verdict["allowed"]),
                message=verdict["message"],
            ),
            current=summary_from_json(data["current"]),
            baseline=summary_from_json(data["baseline"]) if data["baseline"] else None,
        )


def _finding(data: dict[str, Any]) -> Finding:
    return Finding(data["kind"], data["op"], data["module"], data["baseline"], data["current"],
                   data["threshold"], data["reason"])


def summary_from_json(data: dict[str, Any]) -> ProfileSummary:
    summary = ProfileSummary(
        backend=data["backend"], hardware=data["hardware"],
        cost_model_version=data["cost_model_version"], torch_version=data["torch_version"],
        total_device_time_us=data["total_device_time_us"],
        ops={name: OpSummary(**op) for name, op in data["ops"].items()},
        samples=RoundSamples.from_json(data["samples"]) if data.get("samples") else None,
    )
    # ``data`` is what to_json() made (rounded, canonical): keep it as the summary's JSON so the
    # controller does not serialize 2,000 tests' ops again for the report (half its cost).
    summary.__dict__["_json"] = data
    return summary


def format_us(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3f} s"
    if value >= 1e3:
        return f"{value / 1e3:.3f} ms"
    return f"{value:.3f} us"


def format_delta(delta: float | None) -> str:
    if delta is None:
        return "-"
    if math.isinf(delta):
        return "new"
    return f"{delta * 100:+.1f}%"


def finding_row(f: Finding) -> list[str]:
    if f.kind == "calls":
        old, new = f"{int(f.baseline)} calls", f"{int(f.current)} calls"
    else:
        old, new = format_us(f.baseline), format_us(f.current)
    # :g, not :.0f: a per-op threshold of 0.025 showed as "2%" (and 0.005 as "0%").
    return [f.op, f.module or "-", old, new, format_delta(f.delta), f"{f.threshold * 100:g}%", f.reason]


FINDING_HEADERS = ["op", "module", "baseline", "current", "delta", "threshold", "reason"]


def findings_table(findings: Iterable[Finding], fmt: str = "simple") -> str:
    return tabulate([finding_row(f) for f in findings], headers=FINDING_HEADERS, tablefmt=fmt,
                    disable_numparse=True)


def update_command(nodeid: str) -> str:
    return f"pytest --neuron-baseline '{nodeid}'"


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
    improved = [o for o in outcomes if o.verdict.status == IMPROVED]
    if not improved:
        return ""
    lines = []
    for o in improved:
        lines += [f"{o.nodeid}: faster than its baseline", findings_table(o.verdict.improvements), ""]
    nodeids = " ".join(f"'{o.nodeid}'" for o in improved)
    lines.append(f"Lock the gains in: pytest --neuron-baseline {nodeids}")
    return "\n".join(lines)


def notices(outcomes: Iterable[TestOutcome], strict: bool) -> list[str]:
    """One line per test that was not compared, saying why and what to do."""
    lines = []
    for o in outcomes:
        if o.verdict.status == NO_BASELINE:
            action = "fails under --neuron-strict" if strict else "passes"
            lines.append(f"{o.nodeid}: no baseline for {o.current.variant} ({action}); "
                         f"record it with {update_command(o.nodeid)}")
        elif o.verdict.status == INCOMPARABLE:
            lines.append(f"{o.nodeid}: not compared: {o.verdict.message}")
    return lines


def json_report(outcomes: Iterable[TestOutcome]) -> str:
    outcomes = list(outcomes)
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.verdict.status] = counts.get(o.verdict.status, 0) + 1
    document = {
        "report_version": REPORT_VERSION,
        "counts": dict(sorted(counts.items())),
        "regressions": counts.get(REGRESSION, 0),
        "recorded": counts.get(RECORDED, 0),
        "tests": {o.nodeid: o.to_json() for o in sorted(outcomes, key=lambda o: o.nodeid)},
    }
    # No indent: json's C encoder only runs without it (5 s -> 0.3 s for 2,000 tests).
    return json.dumps(document, sort_keys=True) + "\n"


__all__ = ["TOTAL", "TestOutcome", "failure_section", "json_report", "session_table"]
