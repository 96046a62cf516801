"""Gating a pull request against its base (``--neuron-baseline-ref REF``): what the pull request
changed in its own baseline files is *accepted in this change*, and a slower number needs a
reason in the diff.

Three entries of one test and variant meet here: the base's (at REF, what the run is gated
against), the pull request's own (the working tree's file, maybe re-recorded) and the run's
numbers. ``accept`` takes the run's verdict against the base and

- lists the pull request's own changes, base -> own entry, per op (``compare`` of the two:
  regressions and improvements alike), as the accepted changes of the test;
- lets a regression of the run pass only when the pull request accepted it (its own entry has
  the same regression against the base) *and* gave a reason for exactly those numbers: the
  entry's ``reason`` (``--neuron-reason`` when recording) was written with a digest of the
  numbers it accepted (``reason_for``, schema 6) and the entry still holds them. A reason
  re-recorded over with other numbers covers nothing; a schema-5 reason (no digest) counts only
  when it is new against the base. A regression the pull request did not record (its own entry
  is the base's) fails as without the option.

``with_reason`` is the recording side: where ``--neuron-reason`` goes, and what a re-recorded
entry keeps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .compare import Finding, GatePolicy, Status, Verdict, compare
from .summary import ProfileSummary, numbers_digest

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


# What each regression the pull request recorded says (short: it is repeated per row), and the
# whole sentence the failure ends with (``fix_sentence``).
NO_REASON = "accepted in this change without a reason"
STALE = "its reason was given for other numbers"
STALE_REASON = "the reason on this entry was given for other numbers: give one for these"


def fix_sentence(verdict: Verdict) -> str:
    """The start of the failure's last line for a verdict that ``needs_reason``."""
    if any(f.reason.endswith(STALE) for f in verdict.regressions):
        return STALE_REASON[:1].upper() + STALE_REASON[1:]
    return "This change re-recorded these numbers without a reason for them; give one"


def needs_reason(verdict: Verdict) -> bool:
    """A regression of the verdict was recorded by the pull request (an accepted change) with no
    reason for its numbers: the next step is to give one, not to re-record."""
    if not verdict.accepted or verdict.accepted_reason:
        return False
    recorded = {_key(f) for f in verdict.accepted if f.current > f.baseline}
    return any(_key(f) in recorded for f in verdict.regressions)


def with_reason(recorded: ProfileSummary, old: ProfileSummary | None, reason: str,
                named: bool = False) -> ProfileSummary:
    """The entry to write when ``recorded`` replaces ``old`` (None: a new entry), with
    ``--neuron-reason`` ``reason`` ("" not given). The reason is written, bound to the recorded
    numbers, where they changed in this recording or the stored reason was given for other
    numbers; never where numbers and reason still match (the diff shows reasons only where
    numbers moved). ``named``: the run was narrowed to this test (node ids, ``-k``), as the
    failure's hint does after a re-record without a reason: an entry with no reason for its
    numbers gets it too. Without a new reason the stored one is kept with the numbers it was
    given for, so once they change it covers nothing (and says so)."""
    digest = numbers_digest(recorded)
    kept_reason = old.reason if old is not None else ""
    # a schema-5 reason (no digest) was given for the old entry's numbers
    kept_for = (old.reason_for or numbers_digest(old)) if old is not None and old.reason else ""
    if reason:
        moved = old is None or numbers_digest(old) != digest
        if moved or (kept_reason and kept_for != digest) or (named and kept_for != digest):
            return replace(recorded, reason=reason, reason_for=digest)
    return replace(recorded, reason=kept_reason, reason_for=kept_for)


def reason_in_change(base: ProfileSummary, own: ProfileSummary) -> tuple[str, str]:
    """(the reason of the pull request's entry that covers its numbers, "" none; why not, "" when
    there is none at all)."""
    if not own.reason:
        return "", ""
    given_for_these = own.reason_given_for_these_numbers
    if given_for_these is False:
        return "", STALE
    if given_for_these is None and own.reason == base.reason:  # schema 5: only when new
        return "", ("accepted in this change with the reason the base already had; give this "
                    "change's own")
    return own.reason, ""


def accept(base: ProfileSummary | None, own: ProfileSummary | None, verdict: Verdict,
           policy: GatePolicy) -> tuple[Verdict, Acceptance | None]:
    """The run's ``verdict`` against ``base`` (the entry at the ref), given the pull request's
    ``own`` entry: (the verdict with accepted regressions passed or explained, the acceptance;
    None when the pull request did not change the entry)."""
    if base is None or own is None or own == base:
        return verdict, None
    changed = compare(base, own, policy)
    reason, invalid = reason_in_change(base, own)
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
    # the command that gives one is said once, as the failure's last line (needs_reason)
    why = invalid or NO_REASON
    explained = tuple(replace(f, reason=f"{f.reason}; {why}") if _key(f) in recorded else f
                      for f in verdict.regressions)
    return replace(verdict, regressions=explained, accepted=acceptance.changes), acceptance
