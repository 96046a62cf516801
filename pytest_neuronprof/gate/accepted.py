"""Gating a pull request against its base (``--neuron-baseline-ref REF``): what a change
records in its own baseline entries, and the reason it gives for them. ``gate/judge.py`` decides
what a reason accepts; this module holds the recording side (``with_reason``: where
``--neuron-reason`` goes, and what a re-recorded entry keeps), which reason of an entry counts
(``reason_in_change``) and what a failure that needs one says.

A reason is written with a digest of the numbers it accepted (``reason_for``, schema 6) and
counts only while the entry still holds them: a reason re-recorded over with other numbers
covers nothing. A schema-5 reason (no digest) counts only when it is new against the base. A
reason nobody can read (blank, zero-width or filler characters: ``values.reason_problem``) is
no reason.
"""

from __future__ import annotations

from dataclasses import replace

from ..values import reason_problem
from .compare import Finding, Kind, Verdict
from .summary import ProfileSummary, numbers_digest

REASON_OPTION = "--neuron-reason"


def _key(finding: Finding) -> tuple[str, str]:
    return (finding.kind.value, finding.op)


# What each regression the pull request recorded says (short: it is repeated per row), and the
# whole sentence the failure ends with (``fix_sentence``).
NO_REASON = "accepted in this change without a reason"
STALE = "its reason was given for other numbers"
UNREADABLE = "its reason has nothing a person can read"
STALE_REASON = "the reason on this entry was given for other numbers: give one for these"


def fix_sentence(verdict: Verdict) -> str:
    """The start of the failure's last line for a verdict that ``needs_reason``."""
    if verdict.stale:
        return (f"This change's own baseline entry does not hold what this run measured "
                f"({stale_numbers(verdict)}), and a reason accepts only the numbers it was given "
                "for: re-record it, with a reason for these numbers")
    loosened = [f for f in verdict.regressions if f.kind == Kind.POLICY]
    if loosened:
        changes = ", ".join(f"{f.op} {f.cells()[2]} -> {f.cells()[3]}" for f in loosened[:3])
        more = f" and {len(loosened) - 3} more" if len(loosened) > 3 else ""
        return (f"This test's marker gates less than its baseline entry ({changes}{more}); record "
                "it with a reason for it")
    if any(f.reason.endswith(STALE) for f in verdict.regressions):
        return STALE_REASON[:1].upper() + STALE_REASON[1:]
    if any(f.reason.endswith(UNREADABLE) for f in verdict.regressions):
        return "The reason on this entry has nothing a person can read; give one"
    return "This change re-recorded these numbers without a reason for them; give one"


def stale_numbers(verdict: Verdict) -> str:
    """The first number a stale recording does not hold, both ways: "(total): 28.632 us
    recorded, 83.023 us measured" (the op unescaped: each output escapes the phrase its way)."""
    first = verdict.stale[0]
    _, _, recorded, measured, *_ = first.cells()
    return f"{first.op}: {recorded} recorded, {measured} measured"


def reason_placeholder(verdict: Verdict) -> str:
    """What the command the failure ends with puts after --neuron-reason."""
    if all(f.kind == Kind.POLICY for f in verdict.regressions) and not verdict.stale:
        return "why the marker gates less"
    return "why it is slower"


def needs_reason(verdict: Verdict) -> bool:
    """The next step is to record with a reason, not only to re-record: the change recorded a
    regression with no reason for its numbers, its own entry does not hold what the run
    measured (``stale``: a reason accepts only its numbers), or its marker gates less than the
    baseline entry's (Kind.POLICY)."""
    if verdict.stale or any(f.kind == Kind.POLICY for f in verdict.regressions):
        return True
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
    if reason_problem(own.reason):  # blank, zero-width or filler characters: nobody can read it
        return "", UNREADABLE
    given_for_these = own.reason_given_for_these_numbers
    if given_for_these is False:
        return "", STALE
    if given_for_these is None and own.reason == base.reason:  # schema 5: only when new
        return "", ("accepted in this change with the reason the base already had; give this "
                    "change's own")
    return own.reason, ""
