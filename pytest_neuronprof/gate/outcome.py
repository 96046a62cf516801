"""TestOutcome: the one record per profiled test that travels from xdist workers to the
controller (as JSON) and feeds every output; and the per-op changes people read in it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from .compare import Finding, Kind, Status, Verdict
from .decode import Decoder
from .summary import ProfileSummary

_FLAG_OF_KIND = {Kind.SLOWER: Status.REGRESSION, Kind.CALLS: Status.REGRESSION,
                 Kind.NEW: Status.REGRESSION, Kind.FASTER: Status.IMPROVED, Kind.ALLOWED: "allowed"}


@dataclass
class TestOutcome:
    __test__ = False  # not a test class, whatever pytest's naming rules say

    nodeid: str
    location: tuple[str, int]  # test file (relative to rootdir) and 1-based line
    verdict: Verdict
    current: ProfileSummary
    baseline: ProfileSummary | None

    @property
    def delta(self) -> float | None:
        if self.baseline is None or self.verdict.status == Status.INCOMPARABLE:
            return None
        old = self.baseline.total_device_time_us
        return self.current.total_device_time_us / old - 1.0 if old else None

    def to_json(self) -> dict[str, Any]:
        return {
            "nodeid": self.nodeid,
            "location": list(self.location),
            "verdict": {
                "status": self.verdict.status.value,
                "message": self.verdict.message,
                "regressions": [f.to_json() for f in self.verdict.regressions],
                "improvements": [f.to_json() for f in self.verdict.improvements],
                "allowed": [f.to_json() for f in self.verdict.allowed],
            },
            "current": self.current.to_json(),
            "baseline": self.baseline.to_json() if self.baseline else None,
        }

    @classmethod
    def from_json(cls, data: Any, fail: Callable[[str], Exception] = ValueError) -> "TestOutcome":
        """What ``to_json`` wrote, every field checked; ``fail(message)`` makes the error."""
        check = Decoder(fail)
        check.mapping("test", data)
        verdict = check.mapping("test.verdict", data.get("verdict"))
        location = check.items("test.location", data.get("location"))
        if len(location) != 2:
            raise check.fail(f"test.location should be [file, line], got {location!r:.60}")
        try:
            status = Status(verdict.get("status"))
        except ValueError:
            raise check.fail(f"test.verdict.status {verdict.get('status')!r:.40} is not one of "
                             f"{', '.join(Status)}") from None
        current = ProfileSummary.from_json(data.get("current"), check, "test.current")
        baseline = data.get("baseline")
        outcome = cls(
            nodeid=check.string("test.nodeid", data.get("nodeid")),
            location=(check.string("test.location[0]", location[0]),
                      check.whole("test.location[1]", location[1])),
            verdict=Verdict(
                status=status,
                regressions=_findings(check, verdict, "regressions"),
                improvements=_findings(check, verdict, "improvements"),
                allowed=_findings(check, verdict, "allowed"),
                message=check.string("test.verdict.message", verdict.get("message")),
            ),
            current=current,
            baseline=None if baseline is None
            else ProfileSummary.from_json(baseline, check, "test.baseline"),
        )
        # ``data`` is what to_json() made (rounded, canonical): keep it as the summary's JSON, so
        # the controller does not serialize 2,000 tests' ops again for the report (half its cost).
        current.__dict__["_json"] = data["current"]
        return outcome


def _findings(check: Decoder, verdict: dict, key: str) -> tuple[Finding, ...]:
    found = []
    for i, item in enumerate(check.items(f"test.verdict.{key}", verdict.get(key))):
        where = f"test.verdict.{key}[{i}]"
        check.mapping(where, item)
        try:
            kind = Kind(item.get("kind"))
        except ValueError:
            raise check.fail(f"{where}.kind {item.get('kind')!r:.40} is not one of "
                             f"{', '.join(Kind)}") from None
        found.append(Finding(
            kind, check.string(f"{where}.op", item.get("op")),
            check.string(f"{where}.module", item.get("module")),
            check.number(f"{where}.baseline", item.get("baseline")),
            check.number(f"{where}.current", item.get("current")),
            check.number(f"{where}.threshold", item.get("threshold")),
            check.string(f"{where}.reason", item.get("reason"))))
    return tuple(found)


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

    @property
    def calls(self) -> str:
        return (f"{self.old_count} -> {self.new_count}" if self.old_count != self.new_count
                else str(self.new_count))


def _flags(verdict: Verdict) -> dict[str, str]:
    flags: dict[str, str] = {}
    for finding in verdict.allowed + verdict.improvements + verdict.regressions:  # regression wins
        flags[finding.op] = str(_FLAG_OF_KIND.get(finding.kind, ""))
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
