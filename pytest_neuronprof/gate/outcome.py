"""TestOutcome: the one record per profiled test that travels from xdist workers to the
controller (as JSON) and feeds every output; and the per-op changes people read in it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..costmodel.recommendations import Recommendation
from ..costmodel.utilisation import Utilisation
from ..formatting import relative_change
from .compare import FAILED, NOT_COMPARED, Finding, Kind, Status, Verdict
from .decode import Decoder
from .summary import TIME_DECIMALS, ProfileSummary

_FLAG_OF_KIND = {Kind.SLOWER: Status.REGRESSION, Kind.CALLS: Status.REGRESSION,
                 Kind.NEW: Status.REGRESSION, Kind.FASTER: Status.IMPROVED, Kind.ALLOWED: "allowed",
                 Kind.REPLACED: "replaced"}


@dataclass
class TestOutcome:
    __test__ = False  # not a test class, whatever pytest's naming rules say

    nodeid: str
    location: tuple[str, int]  # test file (relative to rootdir) and 1-based line
    verdict: Verdict
    current: ProfileSummary
    baseline: ProfileSummary | None
    # Where the test's baseline is: its key in the baseline file (the test file's path relative
    # to the folder that holds the baseline directory, so it does not depend on where pytest was
    # started) and that directory. "" where no baseline directory is involved (`neuronprof`).
    key: str = ""
    baseline_dir: str = ""
    # Gated against a git ref (--neuron-baseline-ref): the ref, its commit and the commit's
    # subject (untrusted text: escaped where shown). "" otherwise.
    base_ref: str = ""
    base_commit: str = ""
    base_subject: str = ""
    base_resimulated: bool = False  # the base was recorded afresh (`neuronprof continuous`)
    # Why it is slow (report version 6): the run's Neuron Explorer Summary metrics and the
    # recommendations that apply, most device time at stake first (costmodel/utilisation.py,
    # recommendations.py); None and () on measured backends, and in reports written before them.
    utilisation: Utilisation | None = None
    recommendations: tuple[Recommendation, ...] = ()
    # The variant options the test's marker sets (of "hardware", "execution", "auto_cast"): a
    # command that re-records it needs none of them (outputs/hints.py).
    marker_selects: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.key:
            self.key = self.nodeid

    @property
    def baseline_key(self) -> str:
        return self.key

    @property
    def compared(self) -> bool:
        """A baseline was there and comparable: the numbers were judged."""
        return self.baseline is not None and self.verdict.compared

    @property
    def comparable_baseline(self) -> ProfileSummary | None:
        """The baseline, where its numbers may be set against the current ones (not for an
        incomparable one: another cost model, torch or hardware; nor for a base's entry no test
        of the run produced, which has no current numbers)."""
        return None if self.verdict.status in (Status.INCOMPARABLE, Status.NOT_GATED) else self.baseline

    @property
    def delta(self) -> float | None:
        """Relative change of the total, on the numbers as baselines keep them (rounded), so
        unchanged code reads 0.0 and not -2e-06."""
        if self.baseline is None or self.verdict.status in NOT_COMPARED:
            return None
        old = round(self.baseline.total_device_time_us, TIME_DECIMALS)
        new = round(self.current.total_device_time_us, TIME_DECIMALS)
        return relative_change(old, new) if old else None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "nodeid": self.nodeid,
            "baseline_key": self.baseline_key,
            "baseline_dir": self.baseline_dir,
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
            # ops costed by the fallback (derived from current; for dashboards, not read back)
            "uncosted": {"ops": [name for name, _ in self.current.uncosted()],
                         "share": round(self.current.uncosted_share(), 6)},
        }
        if self.base_ref:
            data["base"] = {"ref": self.base_ref, "commit": self.base_commit, "subject": self.base_subject,
                            "resimulated": self.base_resimulated}
        if self.verdict.accepted or self.verdict.accepted_reason:
            # gated against a git ref: the pull request's own changes and its reason (only
            # then, so that a report of any other run reads as before)
            data["verdict"]["accepted"] = [f.to_json() for f in self.verdict.accepted]
            data["verdict"]["accepted_reason"] = self.verdict.accepted_reason
        if self.verdict.stale:  # the run does not hold what the change recorded (report 6)
            data["verdict"]["stale"] = [f.to_json() for f in self.verdict.stale]
        data["utilisation"] = self.utilisation.to_json() if self.utilisation is not None else None
        data["recommendations"] = [r.to_json() for r in self.recommendations]
        if self.marker_selects:
            data["marker_selects"] = list(self.marker_selects)
        return data

    @classmethod
    def from_json(cls, data: Any, fail: Callable[[str], Exception] = ValueError,
                  legacy: bool = False, policy_known: bool = True) -> "TestOutcome":
        """What ``to_json`` wrote, every field checked; ``fail(message)`` makes the error.
        ``legacy``: a test of a version 1 report (ops with one module, no baseline key);
        ``policy_known``: a report that records the marker's policy (version 6 on)."""
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
        current = ProfileSummary.from_json(data.get("current"), check, "test.current", legacy,
                                           policy_known)
        baseline = data.get("baseline")
        nodeid = check.string("test.nodeid", data.get("nodeid"))
        outcome = cls(
            nodeid=nodeid,
            location=(check.string("test.location[0]", location[0]),
                      check.whole("test.location[1]", location[1])),
            verdict=Verdict(
                status=status,
                regressions=_findings(check, verdict, "regressions"),
                improvements=_findings(check, verdict, "improvements"),
                allowed=_findings(check, verdict, "allowed"),
                message=check.string("test.verdict.message", verdict.get("message")),
                # absent from reports written before --neuron-baseline-ref
                accepted=_findings(check, verdict, "accepted", optional=True),
                accepted_reason=check.string("test.verdict.accepted_reason",
                                             verdict.get("accepted_reason", "")),
                stale=_findings(check, verdict, "stale", optional=True),
            ),
            current=current,
            baseline=None if baseline is None
            else ProfileSummary.from_json(baseline, check, "test.baseline", legacy, policy_known),
            key=check.string("test.baseline_key", data.get("baseline_key", nodeid)),
            baseline_dir=check.string("test.baseline_dir", data.get("baseline_dir", "")),
        )
        found = data.get("utilisation")  # report version 6
        if found is not None:
            outcome.utilisation = Utilisation.from_json(found, check, "test.utilisation")
        outcome.recommendations = tuple(
            Recommendation.from_json(r, check, f"test.recommendations[{i}]")
            for i, r in enumerate(check.items("test.recommendations", data.get("recommendations", []))))
        outcome.marker_selects = tuple(
            check.string(f"test.marker_selects[{i}]", v)
            for i, v in enumerate(check.items("test.marker_selects", data.get("marker_selects", []))))
        base = data.get("base")  # reports of runs gated against a git ref (version 5)
        if base is not None:
            check.mapping("test.base", base)
            outcome.base_ref = check.string("test.base.ref", base.get("ref"))
            outcome.base_commit = check.string("test.base.commit", base.get("commit"))
            outcome.base_subject = check.string("test.base.subject", base.get("subject", ""))
            outcome.base_resimulated = base.get("resimulated", False) is True
        # ``data`` is what to_json() made (rounded, canonical): keep it as the summary's JSON, so
        # the controller does not serialize 2,000 tests' ops again for the report (half its cost).
        current.__dict__["_json"] = data["current"]
        return outcome


def compared_with(outcomes: Iterable[TestOutcome]) -> tuple[str, str, str] | None:
    """(ref, commit, subject) of the base the outcomes were gated against, or None: what every
    output names as what it compared with."""
    return next(((o.base_ref, o.base_commit, o.base_subject) for o in outcomes if o.base_ref), None)


def status_counts(outcomes: Iterable[TestOutcome]) -> Counter[Status]:
    """How many outcomes have each verdict: what every count line and report total reads."""
    return Counter(o.verdict.status for o in outcomes)


def _findings(check: Decoder, verdict: dict, key: str, optional: bool = False) -> tuple[Finding, ...]:
    """The findings under ``key``; ``optional``: a report without the key has none."""
    found = []
    items = verdict.get(key, []) if optional else verdict.get(key)
    for i, item in enumerate(check.items(f"test.verdict.{key}", items)):
        where = f"test.verdict.{key}[{i}]"
        check.mapping(where, item)
        try:
            kind = Kind(item.get("kind"))
        except ValueError:
            raise check.fail(f"{where}.kind {item.get('kind')!r:.40} is not one of "
                             f"{', '.join(Kind)}") from None
        modules = []
        for j, change in enumerate(check.items(f"{where}.modules", item.get("modules", []))):
            if not isinstance(change, list) or len(change) != 3:
                raise check.fail(f"{where}.modules[{j}] should be [module, baseline, current]")
            modules.append((check.string(f"{where}.modules[{j}][0]", change[0]),
                            check.number(f"{where}.modules[{j}][1]", change[1]),
                            check.number(f"{where}.modules[{j}][2]", change[2])))
        found.append(Finding(
            kind, check.string(f"{where}.op", item.get("op")),
            check.string(f"{where}.module", item.get("module")),
            check.number(f"{where}.baseline", item.get("baseline")),
            check.number(f"{where}.current", item.get("current")),
            check.number(f"{where}.threshold", item.get("threshold")),
            check.string(f"{where}.reason", item.get("reason")), tuple(modules)))
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
    flag: str  # "regression", "improved", "allowed", "replaced", "accepted" (what the gate said), or ""

    @property
    def delta(self) -> float:
        return relative_change(self.old_us, self.new_us)

    @property
    def calls(self) -> str:
        return (f"{self.old_count} -> {self.new_count}" if self.old_count != self.new_count
                else str(self.new_count))


def _flags(verdict: Verdict) -> dict[str, str]:
    flags: dict[str, str] = {}
    for finding in verdict.accepted:  # what the pull request accepted, unless flagged otherwise
        for op in finding.op.split(" + ") if finding.kind == Kind.REPLACED else (finding.op,):
            flags[op] = "accepted"
    for finding in verdict.allowed + verdict.improvements + verdict.regressions:  # regression wins
        flag = str(_FLAG_OF_KIND.get(finding.kind, ""))
        # a replaced op's finding names the ops that went ("aten::a + aten::b"): each is replaced
        for op in finding.op.split(" + ") if finding.kind == Kind.REPLACED else (finding.op,):
            flags[op] = flag
    return flags


def op_changes(outcome: TestOutcome, changed_only: bool = True) -> list[OpChange]:
    """Per-op old/new device time and calls, largest absolute change first."""
    old = outcome.comparable_baseline or ProfileSummary("", "", "", "", 0.0)
    new = outcome.current
    flags = _flags(outcome.verdict)
    rows = []
    for name in set(old.ops) | set(new.ops):
        a, b = old.ops.get(name), new.ops.get(name)
        if (changed_only and a is not None and b is not None and a.device_time_us == b.device_time_us
                and a.count == b.count):
            continue  # unchanged, as most ops of a large suite are: no row to build
        row = OpChange(
            op=name, engine=(b or a).engine, module=(b or a).where(),  # type: ignore[union-attr]
            old_us=a.device_time_us if a else 0.0, new_us=b.device_time_us if b else 0.0,
            old_count=a.count if a else 0, new_count=b.count if b else 0,
            flag=flags.get(name, ""))
        if not changed_only or row.old_us != row.new_us or row.old_count != row.new_count:
            rows.append(row)
    return sorted(rows, key=lambda r: (-abs(r.new_us - r.old_us), r.op))


def several_variants(outcomes: Iterable[TestOutcome]) -> bool:
    """Some test has more than one outcome: a run on several chips (``--neuron-hardware
    trn2,h200``), or a comparison holding two variants of a test. Every output then shows each
    row's chip (a column); otherwise it keeps its one-variant layout."""
    seen: set[str] = set()
    for o in outcomes:
        if o.nodeid in seen:
            return True
        seen.add(o.nodeid)
    return False


def chip_label(outcome: TestOutcome) -> str:
    """A row's chip: its variant without the backend ("trn2", "h200:graph"), the backend
    being the session's."""
    variant = outcome.current.variant
    prefix = f"{outcome.current.backend}:"
    return variant[len(prefix):] if variant.startswith(prefix) else variant


def regressions_first(outcomes: Iterable[TestOutcome]) -> list[TestOutcome]:
    """The outcomes with the failed ones first (regressed, or that do not fit), each group in
    its given order: what a reviewer reads first in every list."""
    return sorted(outcomes, key=lambda o: o.verdict.status not in FAILED)
