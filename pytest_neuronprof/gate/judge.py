"""The verdict of one test's numbers: the one function the plugin and `neuronprof compare` call,
so the same numbers get the same verdict wherever they are judged.

Up to three entries of one test and variant meet here:

- ``base``: what the numbers are gated against (the working tree's baseline file in a plain
  run, the file at ``--neuron-baseline-ref``, `compare`'s OLD); None when there is none;
- ``current``: the numbers judged (the run's, or `compare`'s NEW entry), with the marker
  policy they ran under (``ProfileSummary.policy``);
- ``own``: the change's own entry where the run is gated against another one (against a git
  ref, the working tree's file; in `compare`, NEW's entry, which is ``current``): what the
  change recorded, and the reason it gave.

The rules, in order:

1. **The policy.** The test's marker arguments resolve on top of the settings (``policy_for``).
   Where ``base`` recorded its own (baseline schema 7), a marker that gates less than it did
   (``policy.loosened``) is a change like any other: it is listed with both values, and unless
   the change's own entry recorded the same marker with a reason for its numbers, the run is
   gated by the stricter of the two (``policy.strictest``) and fails on the loosening itself.
2. **The numbers against the base** (``compare.compare``): regressions, improvements, the peak.
3. **What the change accepted** (``own`` differs from ``base``): its own changes, base -> own,
   are listed as accepted in this change; a regression of the run passes only when the change
   recorded the same regression and gave a reason for exactly those numbers
   (``accepted.reason_in_change``).
4. **The run against what the change recorded.** A reason accepts the numbers it was given for
   and no others: where the change re-recorded numbers, the run must also pass against its own
   entry, with the same policy (time, calls, new ops, the peak). Otherwise the recording is
   stale: nothing is accepted, and each regression says what the change recorded for it.

Pure: summaries in, a verdict out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from .accepted import NO_REASON, reason_in_change
from .compare import (TOTAL, Finding, GatePolicy, Kind, Status, Verdict, compare, uncompared,
                      value_in, value_text)
from .policy import loosened, strictest
from .summary import ProfileSummary, numbers_digest

# The policy a test is judged by, from its marker's arguments (a summary's ``policy``; None:
# unknown, an entry of an older file): the caller's settings with the marker's on top, and the
# test's memory limit.
PolicyFor = Callable[[Mapping[str, Any] | None], GatePolicy]


def judge(current: ProfileSummary, base: ProfileSummary | None, policy_for: PolicyFor, *,
          own: ProfileSummary | None = None, missing: str = "") -> Verdict:
    """The verdict of ``current`` against ``base`` (None: ``missing`` says why there is none),
    given the change's ``own`` entry where it is not ``base`` (rules in the module)."""
    policy = policy_for(current.policy)
    if base is None:
        verdict = uncompared(current, policy, Status.NO_BASELINE, missing)
        if own is None or own is current:
            return verdict
        return _against_own(own, current, policy, verdict, {}) or verdict
    before = policy_for(base.policy) if base.policy is not None and current.policy is not None else policy
    looser = loosened(before, policy)
    reason, why_not = reason_in_change(base, own) if own is not None and own != base else ("", "")
    # a loosened marker counts when the change recorded it, with a reason for those numbers
    policy_accepted = bool(looser) and bool(reason) and own is not None and own.policy == current.policy
    gate = policy if not looser or policy_accepted else strictest(before, policy)
    verdict = compare(base, current, gate)
    if verdict.status == Status.INCOMPARABLE:
        return verdict
    if looser and not policy_accepted:
        note = ("; this change recorded another marker: re-record it" if reason
                else f"; {why_not or NO_MARKER_REASON}: gated with the baseline entry's")
        total = tuple(f for f in verdict.regressions if f.kind == Kind.TOTAL)
        rest = tuple(f for f in verdict.regressions if f.kind != Kind.TOTAL)
        # how the test is gated, after its total and before its ops (compare.by_impact's order)
        verdict = _failing(verdict, total + tuple(replace(f, reason=f.reason + note) for f in looser) + rest)
    if own is None or own == base:
        return verdict
    changed = compare(base, own, gate)
    accepted = changed.regressions + changed.improvements + (looser if policy_accepted else ())
    verdict = replace(verdict, accepted=accepted, accepted_reason=reason)
    if own is not current and numbers_digest(own, policy=False) != numbers_digest(base, policy=False):
        stale = _against_own(own, current, gate, verdict, {_key(f): f for f in changed.regressions
                                                           + changed.improvements})
        if stale is not None:
            return stale
    return _accepted(verdict, changed, reason, why_not)


def _key(finding: Finding) -> tuple[str, str]:
    return (finding.kind.value, finding.op)


def _failing(verdict: Verdict, regressions: tuple[Finding, ...]) -> Verdict:
    """``verdict`` failing with ``regressions`` (does-not-fit stays, whatever else)."""
    status = Status.DOES_NOT_FIT if verdict.status == Status.DOES_NOT_FIT else Status.REGRESSION
    return replace(verdict, status=status, regressions=regressions)


def _accepted(verdict: Verdict, changed: Verdict, reason: str, why_not: str) -> Verdict:
    """Rule 3: the run's regressions the change recorded pass with a reason for them, and say
    what is missing without one (the command that gives one is the failure's last line)."""
    recorded = {_key(f) for f in changed.regressions}
    mine = [f for f in verdict.regressions if _key(f) in recorded]
    if not mine or verdict.status != Status.REGRESSION:
        return verdict
    if reason:
        rest = tuple(f for f in verdict.regressions if _key(f) not in recorded)
        status = (Status.REGRESSION if rest else Status.IMPROVED if verdict.improvements
                  else Status.PASS)
        return replace(verdict, status=status, regressions=rest)
    why = why_not or NO_REASON
    return replace(verdict, regressions=tuple(replace(f, reason=f"{f.reason}; {why}")
                                              if _key(f) in recorded else f
                                              for f in verdict.regressions))


NO_MARKER_REASON = "no reason for it in this change"


def _against_own(own: ProfileSummary, current: ProfileSummary, policy: GatePolicy,
                 verdict: Verdict, recorded: Mapping[tuple[str, str], Finding]) -> Verdict | None:
    """Rule 4: None when the run passes against the change's own entry; else ``verdict``
    failing as stale. Each regression against the base that the change recorded says what it
    recorded; what the run fails against the change's entry and not against the base is added,
    base -> run, with what the change recorded. ``recorded``: the change's own findings against
    the base, by (kind, op)."""
    against = compare(own, current, policy)
    if against.status == Status.INCOMPARABLE:
        failures: tuple[Finding, ...] = ()
    else:
        failures = tuple(f for f in against.regressions if f.kind != Kind.FIT)
        if not failures:
            return None
    shown = {_key(f) for f in verdict.regressions}
    base_side = verdict.regressions
    regressions = [_with_recorded(f, recorded.get(_key(f)), own) for f in base_side]
    for f in failures:
        if _key(f) in shown:
            continue
        value = value_in(current, f)
        was = recorded.get(_key(f))
        start = was.baseline if was is not None else f.baseline
        regressions.append(replace(f, baseline=start, current=f.current if value is None else value,
                                   reason=f"{f.reason}; {RECORDED_AS} {value_text(f, f.baseline)}"))
    if against.status == Status.INCOMPARABLE:
        failures = (Finding(Kind.TOTAL, TOTAL, "", own.total_device_time_us,
                            current.total_device_time_us, policy.threshold,
                            f"this change's own entry is not comparable: {against.message}"),)
        regressions.append(failures[0])
    status = Status.DOES_NOT_FIT if verdict.status == Status.DOES_NOT_FIT else Status.REGRESSION
    return replace(verdict, status=status, regressions=tuple(regressions), stale=failures)


RECORDED_AS = "this change recorded"


def _with_recorded(finding: Finding, mine: Finding | None, own: ProfileSummary) -> Finding:
    """A regression against the base, saying what the change recorded of the same number."""
    if finding.kind == Kind.POLICY:
        return finding
    value = mine.current if mine is not None else value_in(own, finding)
    if value is None:
        return finding
    return replace(finding, reason=f"{finding.reason}; {RECORDED_AS} {value_text(finding, value)}")

