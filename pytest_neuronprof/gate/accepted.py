"""Gating a pull request against its base (``--neuron-baseline-ref REF``): what the pull request
changed in its own baseline files is *accepted in this change*, and a slower number needs a
reason in the diff.

Three entries of one test and variant meet here: the base's (at REF, what the run is gated
against), the pull request's own (the working tree's file, maybe re-recorded) and the run's
numbers. ``accept`` takes the run's verdict against the base and

- lists the pull request's own changes, base -> own entry, per op (``compare`` of the two:
  regressions and improvements alike), as the accepted changes of the test;
- lets a regression of the run pass only when the pull request accepted it (its own entry has
  the same regression against the base) *and* gave a reason in this change: the entry's
  ``reason`` (``--neuron-reason`` when recording) is set and differs from the base's. A reason
  already there at the base does not cover a new regression; a regression the pull request did
  not record (its own entry is the base's) fails as without the option.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .compare import Finding, GatePolicy, Status, Verdict, compare
from .summary import ProfileSummary

REASON_OPTION = "--neuron-reason"


@dataclass(frozen=True)
class Acceptance:
    """What a pull request changed in one test's entry against the base, and why."""

    changes: tuple[Finding, ...]  # base -> the pull request's entry: regressions, then improvements
    reason: str  # the entry's reason, when it is new or changed in this change; else ""
    base_reason: str = ""  # the reason the base's entry had ("" none)

    @property
    def regressions(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.changes if f.current > f.baseline)


def _key(finding: Finding) -> tuple[str, str]:
    return (finding.kind.value, finding.op)


def accept(base: ProfileSummary | None, own: ProfileSummary | None, verdict: Verdict,
           policy: GatePolicy) -> tuple[Verdict, Acceptance | None]:
    """The run's ``verdict`` against ``base`` (the entry at the ref), given the pull request's
    ``own`` entry: (the verdict with accepted regressions passed or explained, the acceptance;
    None when the pull request did not change the entry)."""
    if base is None or own is None or own == base:
        return verdict, None
    changed = compare(base, own, policy)
    reason = own.reason if own.reason and own.reason != base.reason else ""
    acceptance = Acceptance(changed.regressions + changed.improvements, reason, base.reason)
    if not verdict.regressions or verdict.status != Status.REGRESSION:
        return replace(verdict, accepted=acceptance.changes, accepted_reason=reason), acceptance
    recorded = {_key(f) for f in changed.regressions}
    accepted = [f for f in verdict.regressions if _key(f) in recorded]
    if not accepted:
        return replace(verdict, accepted=acceptance.changes, accepted_reason=reason), acceptance
    if reason:
        rest = tuple(f for f in verdict.regressions if _key(f) not in recorded)
        status = (Status.REGRESSION if rest else Status.IMPROVED if verdict.improvements
                  else Status.PASS)
        return replace(verdict, status=status, regressions=rest, accepted=acceptance.changes,
                       accepted_reason=reason), acceptance
    why = ("accepted in this change with the reason the base already had; give this change's own"
           if base.reason and own.reason == base.reason else "accepted in this change without a reason; give one")
    explained = tuple(
        replace(f, reason=f"{f.reason}; {why}: re-record with {REASON_OPTION} 'why it is slower'")
        if _key(f) in recorded else f for f in verdict.regressions)
    return replace(verdict, regressions=explained, accepted=acceptance.changes), acceptance
