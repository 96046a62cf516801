"""The regression gate: compare(baseline, current, policy) -> Verdict. Pure: data in, verdict out.

What is checked, per test:
- the total device time (ops named in ``allow`` left out on both sides);
- each hotspot of the baseline: the top ops that together make ``coverage`` of the device time
  (at most ``hotspots`` of them), plus any op whose share is at least ``min_share``;
- the call counts of those hotspots (a lost fusion shows as more calls);
- new ops: an op absent from the baseline that is now a hotspot (same rule as above).
An increase is a regression only when it is beyond the threshold *and* above ``floor_us``, so
that tiny ops do not flap. Decreases beyond the threshold are improvements: the test passes and
the summary says how to update the baseline.

Measured backends (summaries with per-round ``samples``): the numbers compared are each op's
best round and their sum (``summary.summarize_rounds``), and a change beyond the threshold
counts only when it is also
- material: an op's change is at least ``material_share`` of the baseline's total (5 %), and
- statistically significant: a one-sided permutation test of the mean of the fastest half of
  the rounds, current against baseline (``stats.permutation_p``), gives p < ``alpha`` (0.01).
An op without samples on either side (a hotspot chosen by a policy wider than the one it was
recorded with) has no evidence, so it is not flagged: re-record to gate it. Call counts are
compared as for the simulated backend (they do not depend on timing noise); a new op must be
material too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from .errors import ConfigError
from .stats import permutation_p
from .summary import OpSummary, ProfileSummary

PASS, REGRESSION, IMPROVED = "pass", "regression", "improved"
NO_BASELINE, INCOMPARABLE, RECORDED = "no-baseline", "incomparable", "recorded"
TOTAL = "(total)"


@dataclass(frozen=True)
class GatePolicy:
    threshold: float = 0.10
    hotspots: int = 10
    coverage: float = 0.90
    min_share: float = 0.05
    floor_us: float = 1.0
    ops: Mapping[str, float] = field(default_factory=dict)
    allow: Mapping[str, str] = field(default_factory=dict)
    alpha: float = 0.01  # significance level of measured backends (one-sided Mann-Whitney U)
    # Measured backends: an op's change must also move the test's total by at least this share
    # of the baseline's total. Small ops are the noisiest (a 50 us op doubling on a busy
    # machine), and a change that small in one op is not what a gate on timings can judge.
    material_share: float = 0.05

    def threshold_for(self, op: str) -> float:
        return self.ops.get(op, self.threshold)


@dataclass(frozen=True)
class Finding:
    kind: str  # "total", "slower", "calls", "new", "faster", "allowed"
    op: str
    module: str
    baseline: float
    current: float
    threshold: float
    reason: str

    @property
    def delta(self) -> float:
        """Relative change; inf for an op that is new."""
        if self.baseline == 0:
            return math.inf if self.current > 0 else 0.0
        return self.current / self.baseline - 1.0

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "op": self.op, "module": self.module,
                "baseline": self.baseline, "current": self.current,
                "delta": None if math.isinf(self.delta) else round(self.delta, 6),
                "threshold": self.threshold, "reason": self.reason}


@dataclass(frozen=True)
class Verdict:
    status: str
    regressions: tuple[Finding, ...] = ()
    improvements: tuple[Finding, ...] = ()
    allowed: tuple[Finding, ...] = ()
    message: str = ""  # why a test was not compared (no baseline, incomparable)

    @property
    def failed(self) -> bool:
        return self.status == REGRESSION


def incomparable_reason(baseline: ProfileSummary, current: ProfileSummary) -> str | None:
    """What makes two summaries' numbers incomparable, or None."""
    for attr, label in (("backend", "backend"), ("hardware", "hardware profile"),
                        ("cost_model_version", "cost-model version"),
                        ("torch_version", "torch version")):
        old, new = getattr(baseline, attr), getattr(current, attr)
        if old != new:
            return (f"the baseline was recorded with {label} {old}, this run uses {new}; "
                    "re-record it with `pytest --neuron-baseline` once the change is intended")
    return None


def hotspots(summary: ProfileSummary, policy: GatePolicy) -> list[str]:
    """Top ops that make ``coverage`` of the time (at most ``hotspots``), plus big-share ops."""
    chosen: list[str] = []
    covered = 0.0
    for name, op in summary.ranked():
        if (len(chosen) < policy.hotspots and covered < policy.coverage) or op.share >= policy.min_share:
            chosen.append(name)
            covered += op.share
    return chosen


def _exceeds(baseline: float, current: float, threshold: float, floor_us: float) -> bool:
    return current - baseline > floor_us and current > baseline * (1.0 + threshold)


def _improves(baseline: float, current: float, threshold: float, floor_us: float) -> bool:
    # Relative to the baseline, like the delta the tables show: with a 10 % threshold a 9.5 %
    # decrease is not "beyond the threshold" (the mirrored _exceeds(new, old) said it was).
    return baseline - current > floor_us and current < baseline * (1.0 - threshold)


Samples = Sequence[float]


def _op_samples(summary: ProfileSummary, name: str) -> Samples | None:
    return summary.samples.ops.get(name) if summary.samples is not None else None


def _total_samples(summary: ProfileSummary, allow: Mapping[str, str]) -> Samples | None:
    """Per-round totals without the allowed ops (their median where a round's time is not kept)."""
    if summary.samples is None:
        return None
    rounds = summary.samples.total
    allowed = [name for name in summary.ops if name in allow]
    if not allowed:
        return rounds
    columns = [summary.samples.ops.get(name) or (summary.ops[name].device_time_us,) * len(rounds)
               for name in allowed]
    return tuple(total - sum(column[i] for column in columns) for i, total in enumerate(rounds))


def _change(old: float, new: float, old_samples: Samples | None, new_samples: Samples | None,
            threshold: float, policy: GatePolicy, measured: bool,
            material_us: float = 0.0) -> tuple[str, str]:
    """("slower" | "faster" | "", evidence): beyond the threshold and the floor, and for
    measured summaries also at least ``material_us`` and significant at ``policy.alpha``;
    evidence is what the reason shows."""
    if _exceeds(old, new, threshold, policy.floor_us):
        direction, alternative = "slower", "greater"
    elif _improves(old, new, threshold, policy.floor_us):
        direction, alternative = "faster", "less"
    else:
        return "", ""
    if not measured:
        return direction, ""
    if abs(new - old) < material_us:
        return "", ""
    if not old_samples or not new_samples:
        return "", ""  # no rounds to weigh the change against its noise: no evidence
    p = permutation_p(old_samples, new_samples, alternative)  # computed only when it decides
    if p >= policy.alpha:
        return "", ""
    return direction, f" (p={p:.2g}, {len(old_samples)} vs {len(new_samples)} rounds)"


def compare(baseline: ProfileSummary, current: ProfileSummary, policy: GatePolicy) -> Verdict:
    reason = incomparable_reason(baseline, current)
    if reason is not None:
        return Verdict(INCOMPARABLE, message=reason)
    regressions: list[Finding] = []
    improvements: list[Finding] = []
    allowed: list[Finding] = []
    missing = OpSummary(0, 0.0, "-", 0, 0, 0.0, "")
    measured = baseline.samples is not None or current.samples is not None
    material_us = policy.material_share * baseline.total_device_time_us if measured else 0.0

    def gated_total(summary: ProfileSummary) -> float:
        return summary.total_device_time_us - sum(
            op.device_time_us for name, op in summary.ops.items() if name in policy.allow)

    old_total, new_total = gated_total(baseline), gated_total(current)
    direction, evidence = _change(old_total, new_total, _total_samples(baseline, policy.allow),
                                  _total_samples(current, policy.allow), policy.threshold, policy,
                                  measured)
    if direction == "slower":
        regressions.append(Finding("total", TOTAL, "", old_total, new_total, policy.threshold,
                                   "total device time" + evidence))
    elif direction == "faster":
        improvements.append(Finding("faster", TOTAL, "", old_total, new_total, policy.threshold,
                                    "total device time" + evidence))

    for name in hotspots(baseline, policy):
        old, new = baseline.ops[name], current.ops.get(name, missing)
        threshold = policy.threshold_for(name)
        module = new.module or old.module
        if name in policy.allow:
            if old.device_time_us != new.device_time_us or old.count != new.count:
                allowed.append(Finding("allowed", name, module, old.device_time_us,
                                       new.device_time_us, threshold, policy.allow[name]))
            continue
        new_samples = _op_samples(current, name)
        if name not in current.ops and current.samples is not None:
            new_samples = (0.0,) * current.samples.rounds  # it no longer runs at all
        direction, evidence = _change(old.device_time_us, new.device_time_us,
                                      _op_samples(baseline, name), new_samples, threshold,
                                      policy, measured, material_us)
        if direction == "slower":
            regressions.append(Finding("slower", name, module, old.device_time_us,
                                       new.device_time_us, threshold, "hotspot slower" + evidence))
        elif direction == "faster":
            improvements.append(Finding("faster", name, module, old.device_time_us,
                                        new.device_time_us, threshold, "hotspot faster" + evidence))
        if new.count > old.count and new.count > old.count * (1.0 + threshold):
            regressions.append(Finding("calls", name, module, old.count, new.count, threshold,
                                       f"more calls ({old.count} -> {new.count}): a lost fusion?"))

    # A new op counts when it is a hotspot of the current run (top ops or >= min_share), the
    # same rule the baseline's hotspots follow; min_share alone missed it in flat profiles.
    current_hotspots = set(hotspots(current, policy))
    for name, op in current.ranked():
        if name in baseline.ops or name in policy.allow:
            continue
        if name in current_hotspots and op.device_time_us > max(policy.floor_us, material_us):
            regressions.append(Finding("new", name, op.module, 0.0, op.device_time_us,
                                       policy.threshold, f"new op takes {op.share:.0%} of the time"))

    status = REGRESSION if regressions else IMPROVED if improvements else PASS
    return Verdict(status, tuple(regressions), tuple(improvements), tuple(allowed))


# --- policy from marker arguments and options -------------------------------------------------

MARKER_ARGS = ("threshold", "hardware", "hotspots", "min_share", "ops", "allow", "rounds", "warmup")


def _fraction(name: str, value: Any, low: float = 0.0, high: float = math.inf) -> float:
    try:  # float() first: an int too large for a float (10**400) raises OverflowError
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
            else math.nan
    except OverflowError:
        number = math.nan
    if not math.isfinite(number) or not low <= number <= high:
        raise ConfigError(f"{name}={value!r}: expected a number between {low} and {high} "
                          "(a relative change: 0.05 means 5 %)")
    return number


def policy_from_marker(base: GatePolicy, kwargs: Mapping[str, Any]) -> GatePolicy:
    """Apply ``@pytest.mark.neuron_profile(...)`` arguments to the session's policy.

    Raises ConfigError naming the argument when one is unknown or has a wrong type."""
    unknown = sorted(set(kwargs) - set(MARKER_ARGS))
    if unknown:
        raise ConfigError(f"neuron_profile: unknown argument(s) {', '.join(unknown)}; "
                          f"valid: {', '.join(MARKER_ARGS)}")
    changes: dict[str, Any] = {}
    if "threshold" in kwargs:
        changes["threshold"] = _fraction("neuron_profile threshold", kwargs["threshold"])
    if "min_share" in kwargs:
        changes["min_share"] = _fraction("neuron_profile min_share", kwargs["min_share"], high=1.0)
    if "hotspots" in kwargs:
        value = kwargs["hotspots"]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"neuron_profile hotspots={value!r}: expected a whole number >= 0 "
                              "(how many of the top ops are gated)")
        changes["hotspots"] = value
    if "ops" in kwargs:
        ops = kwargs["ops"]
        if not isinstance(ops, Mapping):
            raise ConfigError(f"neuron_profile ops={ops!r}: expected a dict of per-op thresholds, "
                              "e.g. ops={'aten::mm': 0.02}")
        changes["ops"] = {str(op): _fraction(f"neuron_profile ops[{op!r}]", t) for op, t in ops.items()}
    if "allow" in kwargs:
        allow = kwargs["allow"]
        if not isinstance(allow, Mapping) or not all(
                isinstance(reason, str) and reason.strip() for reason in allow.values()):
            raise ConfigError(f"neuron_profile allow={allow!r}: expected a dict of op -> reason, "
                              "e.g. allow={'aten::cat': 'new KV cache layout, see #123'}")
        changes["allow"] = {str(op): reason for op, reason in allow.items()}
    for name in ("rounds", "warmup"):
        if name in kwargs:
            value = kwargs[name]
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "rounds" else 0):
                raise ConfigError(f"neuron_profile {name}={value!r}: expected a whole number "
                                  f">= {1 if name == 'rounds' else 0}")
    if "hardware" in kwargs and not isinstance(kwargs["hardware"], str):
        raise ConfigError(f"neuron_profile hardware={kwargs['hardware']!r}: expected a profile name")
    return replace(base, **changes)
