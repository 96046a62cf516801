"""Comparing two sets of summaries (two baseline directories, two reports) test by test.

The verdict of each test comes from ``gate.compare``, the plugin's own gate: this module only
pairs entries up and lists per-op differences for people to read. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from .gate import INCOMPARABLE, NO_BASELINE, REGRESSION, GatePolicy, Verdict, compare
from .inputs import Entry
from .report import TestOutcome
from .summary import ProfileSummary

# Exit codes of `neuronprof compare`.
OK, REGRESSED, BAD_INPUT = 0, 1, 2

_FLAG_OF_KIND = {"slower": "regression", "calls": "regression", "new": "regression",
                 "faster": "improved", "allowed": "allowed"}


@dataclass(frozen=True)
class OpChange:
    op: str
    engine: str
    module: str
    old_us: float
    new_us: float
    old_count: int
    new_count: int
    flag: str  # "regression", "improved", "allowed" (what the gate said), or ""

    @property
    def delta(self) -> float:
        if self.old_us == 0:
            return math.inf if self.new_us > 0 else 0.0
        return self.new_us / self.old_us - 1.0


@dataclass
class Comparison:
    outcomes: list[TestOutcome]  # tests on both sides, plus tests only in NEW (no-baseline)
    only_old: list[tuple[str, str]] = field(default_factory=list)  # (nodeid, variant)

    @property
    def regressions(self) -> list[TestOutcome]:
        return [o for o in self.outcomes if o.verdict.status == REGRESSION]

    @property
    def incomparable(self) -> list[TestOutcome]:
        return [o for o in self.outcomes if o.verdict.status == INCOMPARABLE]

    @property
    def compared(self) -> list[TestOutcome]:
        return [o for o in self.outcomes if o.baseline is not None]

    def problem(self) -> str | None:
        """Why the inputs could not be compared (exit 2), or None."""
        bad = self.incomparable
        if bad:
            more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
            return f"{bad[0].nodeid} [{bad[0].current.variant}] is not comparable{more}: {bad[0].verdict.message}"
        if not self.compared and self.outcomes and self.only_old:
            old = sorted({variant for _, variant in self.only_old})
            new = sorted({o.current.variant for o in self.outcomes})
            if set(old) & set(new):
                return "OLD and NEW have no test in common: are they baselines of the same suite?"
            return (f"OLD and NEW have no variant in common (numbers are only compared on the same "
                    f"backend and hardware): OLD has {', '.join(old)}, NEW has {', '.join(new)}")
        return None

    def exit_code(self) -> int:
        if self.problem() is not None:
            return BAD_INPUT
        return REGRESSED if self.regressions else OK


def compare_entries(old: Mapping[str, Mapping[str, Entry]], new: Mapping[str, Mapping[str, Entry]],
                    policy: GatePolicy) -> Comparison:
    outcomes: list[TestOutcome] = []
    only_old: list[tuple[str, str]] = []
    for nodeid in sorted(set(old) | set(new)):
        olds, news = old.get(nodeid, {}), new.get(nodeid, {})
        for variant in sorted(set(olds) | set(news)):
            before, after = olds.get(variant), news.get(variant)
            if after is None:
                only_old.append((nodeid, variant))
                continue
            location = after.location or (before.location if before else None) \
                or (nodeid.split("::", 1)[0], 0)
            if before is None:
                verdict = Verdict(NO_BASELINE, message=f"not in OLD for {variant}")
                outcomes.append(TestOutcome(nodeid, location, verdict, after.summary, None))
            else:
                verdict = compare(before.summary, after.summary, policy)
                outcomes.append(TestOutcome(nodeid, location, verdict, after.summary, before.summary))
    return Comparison(outcomes, only_old)


def _flags(verdict: Verdict) -> dict[str, str]:
    flags: dict[str, str] = {}
    for finding in verdict.allowed + verdict.improvements + verdict.regressions:  # regression wins
        flags[finding.op] = _FLAG_OF_KIND.get(finding.kind, "")
    return flags


def op_changes(outcome: TestOutcome, changed_only: bool = True) -> list[OpChange]:
    """Per-op old/new device time and calls, largest absolute change first."""
    old = outcome.baseline or ProfileSummary("", "", "", "", 0.0)
    new = outcome.current
    flags = _flags(outcome.verdict)
    rows = []
    for name in set(old.ops) | set(new.ops):
        a, b = old.ops.get(name), new.ops.get(name)
        row = OpChange(
            op=name, engine=(b or a).engine, module=(b or a).module,  # type: ignore[union-attr]
            old_us=a.device_time_us if a else 0.0, new_us=b.device_time_us if b else 0.0,
            old_count=a.count if a else 0, new_count=b.count if b else 0,
            flag=flags.get(name, ""))
        if not changed_only or row.old_us != row.new_us or row.old_count != row.new_count:
            rows.append(row)
    return sorted(rows, key=lambda r: (-abs(r.new_us - r.old_us), r.op))
