"""The regression gate: compare(baseline, current, policy) -> Verdict. Pure: data in, verdict out.

What is checked, per test:
- the total device time (ops named in ``allow`` left out on both sides);
- each hotspot of the baseline: the top ops that together make ``coverage`` of the device time
  (at most ``hotspots`` of them), plus any op whose share is at least ``min_share``;
- the call counts of those hotspots (the same work split into more calls, a loop over a batch
  or a lost fusion, shows as more calls);
- new ops: an op absent from the baseline that is now a hotspot (same rule as above);
- replaced ops: an op of the baseline that no longer runs, with the new ops in the modules it
  ran in (``replacements``): "aten::_scaled_dot_product_flash_attention replaced by 3 new ops";
  a regression when they cost more (beyond the threshold and floor) or are flagged as new ops
  themselves, an improvement when they cost less; it stands for the op's own "no longer
  called" improvement, and sits next to the new ops' findings (simulated backend only);
- the peak of device memory (``memory_findings``), where both sides measured it, against its
  own threshold and floor in bytes; and the peak against the test's memory limit
  (``limit_findings``), which applies with no baseline too (``uncompared``).
An increase is a regression only when it is beyond the threshold *and* above ``floor_us``, so
that tiny ops do not flap. Decreases beyond the threshold are improvements: the test passes and
the summary says how to update the baseline. A peak above the memory limit is a verdict of its
own, ``Status.DOES_NOT_FIT`` (whatever else changed): a new baseline would not change it.

Findings come in order of impact (``by_impact``): the total first, then the device time each
finding adds or removes, largest first (an op's time and call-count findings together; a
replaced op with the new ops that replaced it), then the peak of device memory.

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

import enum
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Collection, Mapping, Sequence

from ..defaults import (DEFAULT_ALPHA, DEFAULT_COVERAGE, DEFAULT_FLOOR_US, DEFAULT_HOTSPOTS,
                        DEFAULT_MATERIAL_SHARE, DEFAULT_MEMORY_FLOOR_BYTES,
                        DEFAULT_MEMORY_THRESHOLD, DEFAULT_MIN_SHARE, DEFAULT_THRESHOLD)
from ..formatting import (delta_json, format_bytes, format_delta, format_fraction, format_us,
                          record_command, relative_change)
from ..safetext import clip
from ..vocabulary import SIMULATED, Engine
from .graphs import graph_changes
from .memory import device_memory, memory_reason
from .reasons import CHANGED, why, work_bytes
from .stats import permutation_p
from .summary import OpSummary, ProfileSummary

TOTAL = "(total)"
PEAK = "(peak memory)"  # the op column of a finding about the test's device memory


class _Word(str, enum.Enum):
    """An enum whose members read as their values in text and JSON."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class Status(_Word):
    """A profiled test's verdict."""

    PASS = "pass"
    REGRESSION = "regression"
    IMPROVED = "improved"
    DOES_NOT_FIT = "does-not-fit"  # the peak of device memory is above the test's limit
    NO_BASELINE = "no-baseline"
    INCOMPARABLE = "incomparable"
    NOT_PROFILED = "not-profiled"  # the neuron_profile fixture was requested, no region entered
    RECORDED = "recorded"
    # Gated against a ref: an entry of the base that no test of the run produced (a test renamed,
    # removed, skipped or deselected), listed so that no base entry stops being gated unseen
    NOT_GATED = "not-gated"


# Verdicts that fail the test: every output that asks "did it fail?" of a status reads this.
FAILED = (Status.REGRESSION, Status.DOES_NOT_FIT)

# Verdicts that compared nothing: the test has no usable baseline, or no profile. Every output
# and check that asks "was it compared?" reads this (with RECORDED: recording compares nothing).
NOT_COMPARED = (Status.NO_BASELINE, Status.INCOMPARABLE, Status.NOT_PROFILED, Status.NOT_GATED)


class Kind(_Word):
    """What a finding says."""

    TOTAL = "total"  # the total device time grew
    SLOWER = "slower"  # a hotspot grew
    CALLS = "calls"  # a hotspot is called more often
    NEW = "new"  # an op the baseline does not have is now a hotspot
    REPLACED = "replaced"  # an op of the baseline no longer runs: new ops in its modules took over
    FASTER = "faster"  # the total or a hotspot shrank
    ALLOWED = "allowed"  # an op named in allow= changed
    MEMORY = "memory"  # the peak of device memory grew (or, among improvements, shrank)
    FIT = "does-not-fit"  # the peak is above the device's memory or the test's memory_limit
    # A marker argument that gates less than the base entry's (gate/judge.py): its op is the
    # argument ("marker threshold", "marker allow['aten::cat']"), its numbers the two values.
    POLICY = "policy"
    BREAK = "graph-break"  # a graph break was added (or, among improvements, is gone)
    COMPILED = "compiled-graphs"  # a function was compiled into more (or fewer) graphs


MEMORY_KINDS = (Kind.MEMORY, Kind.FIT)  # findings in bytes, not microseconds
GRAPH_KINDS = (Kind.BREAK, Kind.COMPILED)  # findings in counts (gate/graphs.py)


@dataclass(frozen=True)
class GatePolicy:
    threshold: float = DEFAULT_THRESHOLD
    hotspots: int = DEFAULT_HOTSPOTS
    coverage: float = DEFAULT_COVERAGE
    min_share: float = DEFAULT_MIN_SHARE
    floor_us: float = DEFAULT_FLOOR_US
    ops: Mapping[str, float] = field(default_factory=dict)
    allow: Mapping[str, str] = field(default_factory=dict)
    alpha: float = DEFAULT_ALPHA  # significance level of measured backends (permutation test)
    material_share: float = DEFAULT_MATERIAL_SHARE  # measured backends (defaults.py says why)
    memory_threshold: float = DEFAULT_MEMORY_THRESHOLD  # relative growth of the peak
    memory_floor_bytes: int = DEFAULT_MEMORY_FLOOR_BYTES  # ... that is also at least this
    # The most device memory the test may use: the marker's memory_limit, else the device's
    # memory per NeuronCore (the hardware profile); None: no limit. ``memory_limit_label``
    # says which, in the failure ("24 GiB per NeuronCore", "memory_limit 16 GiB").
    memory_limit: int | None = None
    memory_limit_label: str = ""

    def threshold_for(self, op: str) -> float:
        return self.ops.get(op, self.threshold)

    def describe(self) -> str:
        return (f"threshold {format_fraction(self.threshold)}, floor {self.floor_us:g} us, "
                f"hotspots {self.hotspots}, min share {format_fraction(self.min_share)}")


ModuleChange = tuple[str, float, float]  # (module path, baseline us, current us)
MAX_MODULES_SHOWN = 3  # in a table cell; the JSON report has them all
MAX_MODULE_CHARS = 60  # of each of them there, so that a long path leaves room for the others


@dataclass(frozen=True)
class Finding:
    kind: Kind
    op: str
    module: str  # the module whose time changed most (or where the op spent most of its time)
    baseline: float
    current: float
    threshold: float
    reason: str
    # The modules whose time of this op changed, largest change first: an op's time is gated as
    # a whole, and these say where it changed (detail: not part of a finding's identity).
    modules: tuple[ModuleChange, ...] = field(default=(), compare=False)

    HEADERS = ("op", "module", "baseline", "current", "delta", "threshold", "reason")

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))  # "slower" reads as Kind.SLOWER
        object.__setattr__(self, "modules", tuple(tuple(m) for m in self.modules))

    def module_cell(self) -> str:
        """The modules whose time changed, each with its own change ("small (+270.0%), big
        (+1.0%)"), when the op ran in several; else the module."""
        if not self.modules:
            return self.module or "-"
        shown = [(clip(path, MAX_MODULE_CHARS) or "-", old, new)
                 for path, old, new in self.modules[:MAX_MODULES_SHOWN]]
        if self.kind == Kind.NEW:
            cells = [path for path, _, _ in shown]
        else:
            cells = [f"{path} ({format_delta(relative_change(old, new))})" for path, old, new in shown]
        more = len(self.modules) - MAX_MODULES_SHOWN
        return ", ".join(cells) + (f", +{more} more" if more > 0 else "")

    @property
    def delta(self) -> float:
        """Relative change; inf for an op that is new."""
        return relative_change(self.baseline, self.current)

    def cells(self) -> list[str]:
        """The finding as every table shows it, one string per HEADERS column."""
        if self.kind == Kind.POLICY:
            old, new = policy_value(self.op, self.baseline), policy_value(self.op, self.current)
            return [self.op, "-", old, new, "looser", "-", self.reason]
        if self.kind == Kind.CALLS:
            old, new = f"{int(self.baseline)} calls", f"{int(self.current)} calls"
        elif self.kind in MEMORY_KINDS or self.op == PEAK:  # an allowed peak too
            old, new = format_bytes(self.baseline), format_bytes(self.current)
        elif self.kind in GRAPH_KINDS:
            unit = "breaks" if self.kind == Kind.BREAK else "graphs"
            old, new = f"{int(self.baseline)} {unit}", f"{int(self.current)} {unit}"
        else:
            old, new = format_us(self.baseline), format_us(self.current)
        return [self.op, self.module_cell(), old, new, format_delta(self.delta),
                format_fraction(self.threshold), self.reason]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "op": self.op, "module": self.module,
                "modules": [[path, round(old, 4), round(new, 4)] for path, old, new in self.modules],
                "baseline": self.baseline, "current": self.current,
                "delta": delta_json(self.delta),
                "threshold": self.threshold, "reason": self.reason}


POLICY_PREFIX = "marker "  # the op of a Kind.POLICY finding: "marker threshold"


def policy_value(op: str, value: float) -> str:
    """One value of a marker argument, as its finding shows it (``op``: the finding's)."""
    name = op[len(POLICY_PREFIX):] if op.startswith(POLICY_PREFIX) else op
    if name.startswith("allow["):
        return "allowed" if value else "gated"
    if name == "hotspots" or name.startswith("world_size"):
        return str(int(value))
    if name == "memory_limit":
        return format_bytes(value) if value else "none"
    return format_fraction(value)


def value_in(summary: ProfileSummary, finding: Finding,
             allow: Mapping[str, str] | None = None) -> float | None:
    """What ``summary`` holds of the number ``finding`` is about (its total without the ops
    ``allow`` names, an op's time or calls, its peak); None for a finding about several ops (a
    replacement) or a setting, or a peak not measured."""
    if finding.kind == Kind.TOTAL or finding.op == TOTAL:
        return summary.total_device_time_us - sum(
            op.device_time_us for name, op in summary.ops.items() if name in (allow or {}))
    if finding.kind in MEMORY_KINDS or finding.op == PEAK:
        return float(summary.memory.peak_bytes) if summary.memory is not None else None
    if finding.kind in (Kind.REPLACED, Kind.POLICY):
        return None
    op = summary.ops.get(finding.op)
    if finding.kind == Kind.CALLS:
        return float(op.count) if op is not None else 0.0
    return op.device_time_us if op is not None else 0.0


def value_text(finding: Finding, value: float) -> str:
    """``value``, a number of the kind ``finding`` is about, as its table cells show it."""
    return replace(finding, current=value).cells()[3]


MODULE_TOLERANCE_US = 1e-3  # baselines keep 4 decimals: smaller differences are rounding


def module_changes(old: OpSummary | None, new: OpSummary | None) -> tuple[ModuleChange, ...]:
    """The modules whose time of one op changed, largest change first (ties by path); () when
    the op ran in one module only, whose name then says it all."""
    before = old.breakdown() if old is not None else {}
    after = new.breakdown() if new is not None else {}
    if len(set(before) | set(after)) <= 1:
        return ()
    changes = [(path, before.get(path, 0.0), after.get(path, 0.0)) for path in set(before) | set(after)]
    changes = [c for c in changes if abs(c[2] - c[1]) > MODULE_TOLERANCE_US]
    return tuple(sorted(changes, key=lambda c: (-abs(c[2] - c[1]), c[0])))


def _calls_reason(old: OpSummary, new: OpSummary, execution: str, measured: bool) -> str:
    """Why an op is called more often: recomputation under activation checkpointing is said as
    such; otherwise what changed (``reasons.why``), and when the total work stayed the same, the
    same total work in more calls, said as that (a loop over a batch and a lost fusion look alike:
    the gate does not guess which)."""
    more = new.count - old.count
    recomputed = new.recomputed - old.recomputed
    if recomputed >= more:
        return (f"more calls ({old.count} -> {new.count}): {recomputed} recomputed in backward "
                "(activation checkpointing)")
    if recomputed > 0:
        return (f"more calls ({old.count} -> {new.count}): {recomputed} recomputed in backward "
                f"(activation checkpointing), {more - recomputed} more")
    # what the work is known by: flops, else bytes where they are work (not in graph execution,
    # where a fused copy moves no HBM bytes however many calls it makes: reasons.work_bytes)
    if old.flops:
        same_work = abs(new.flops - old.flops) <= CHANGED * old.flops
    else:
        same_work = (work_bytes(execution) and old.bytes > 0
                     and abs(new.bytes - old.bytes) <= CHANGED * old.bytes)
    return why(old, new, execution=execution, measured=measured,
               note="(same total work)" if same_work else "")


@dataclass(frozen=True)
class Verdict:
    status: Status
    regressions: tuple[Finding, ...] = ()
    improvements: tuple[Finding, ...] = ()
    allowed: tuple[Finding, ...] = ()
    message: str = ""  # why a test was not compared (no baseline, incomparable)
    # Gated against a git ref (gate/accepted.py): what the pull request changed in this test's
    # own entry, base -> own, and the reason it gave in this change ("" none).
    accepted: tuple[Finding, ...] = ()
    accepted_reason: str = ""
    # Gated against a base: where the run does not hold the numbers the change recorded in its
    # own entry (gate/judge.py), which then accepts nothing: the run against that entry (what
    # was recorded -> what was measured); the regressions say what was recorded of each.
    stale: tuple[Finding, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", Status(self.status))  # "pass" reads as Status.PASS

    @property
    def failed(self) -> bool:
        # A recorded test with findings did not fit its memory limit (``uncompared``).
        return self.status in FAILED or bool(self.regressions)

    @property
    def does_not_fit(self) -> bool:
        """The peak is above the test's memory limit (also for a recorded test)."""
        return any(f.kind == Kind.FIT for f in self.regressions)

    @property
    def compared(self) -> bool:
        return self.status not in (*NOT_COMPARED, Status.RECORDED)


def incomparable_reason(baseline: ProfileSummary, current: ProfileSummary) -> str | None:
    """What makes two summaries' numbers incomparable, or None."""
    for attr, label in (("backend", "backend"), ("hardware", "hardware profile"),
                        ("cost_model_version", "cost-model version"),
                        ("torch_version", "torch version")):
        old, new = getattr(baseline, attr), getattr(current, attr)
        if old != new:
            return (f"the baseline was recorded with {label} {old}, this run uses {new}; "
                    f"re-record it with `{record_command()}` once the change is intended")
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
            material_us: float = 0.0) -> tuple[Kind | None, str]:
    """(Kind.SLOWER | Kind.FASTER | None, evidence): beyond the threshold and the floor, and for
    measured summaries also at least ``material_us`` and significant at ``policy.alpha``;
    evidence is what the reason shows."""
    if _exceeds(old, new, threshold, policy.floor_us):
        direction, alternative = Kind.SLOWER, "greater"
    elif _improves(old, new, threshold, policy.floor_us):
        direction, alternative = Kind.FASTER, "less"
    else:
        return None, ""
    if not measured:
        return direction, ""
    if abs(new - old) < material_us:
        return None, ""
    if not old_samples or not new_samples:
        return None, ""  # no rounds to weigh the change against its noise: no evidence
    p = permutation_p(old_samples, new_samples, alternative)  # computed only when it decides
    if p >= policy.alpha:
        return None, ""
    return direction, f" (p={p:.2g}, {len(old_samples)} vs {len(new_samples)} rounds)"


def compare(baseline: ProfileSummary, current: ProfileSummary, policy: GatePolicy) -> Verdict:
    reason = incomparable_reason(baseline, current)
    if reason is not None:
        return Verdict(Status.INCOMPARABLE, message=reason)
    regressions: list[Finding] = []
    improvements: list[Finding] = []
    allowed: list[Finding] = []
    missing = OpSummary(0, 0.0, Engine.NONE.value, 0, 0, 0.0, "")
    measured = baseline.samples is not None or current.samples is not None
    material_us = policy.material_share * baseline.total_device_time_us if measured else 0.0

    def gated_total(summary: ProfileSummary) -> float:
        return summary.total_device_time_us - sum(
            op.device_time_us for name, op in summary.ops.items() if name in policy.allow)

    # An op that no longer runs, and the new ops in its modules (simulated: exact numbers)
    replaced = [] if measured else replacements(baseline, current, policy)
    old_total, new_total = gated_total(baseline), gated_total(current)
    direction, evidence = _change(old_total, new_total, _total_samples(baseline, policy.allow),
                                  _total_samples(current, policy.allow), policy.threshold, policy,
                                  measured)
    if direction == Kind.SLOWER:
        regressions.append(Finding(Kind.TOTAL, TOTAL, "", old_total, new_total, policy.threshold,
                                   "total device time" + evidence))
    elif direction == Kind.FASTER:
        improvements.append(Finding(Kind.FASTER, TOTAL, "", old_total, new_total, policy.threshold,
                                    "total device time" + evidence))

    for name in hotspots(baseline, policy):
        old, new = baseline.ops[name], current.ops.get(name, missing)
        threshold = policy.threshold_for(name)
        modules = module_changes(old, current.ops.get(name))
        module = modules[0][0] if modules else new.module or old.module
        if name in policy.allow:
            if old.device_time_us != new.device_time_us or old.count != new.count:
                allowed.append(Finding(Kind.ALLOWED, name, module, old.device_time_us,
                                       new.device_time_us, threshold, policy.allow[name], modules))
            continue
        new_samples = _op_samples(current, name)
        if name not in current.ops and current.samples is not None:
            new_samples = (0.0,) * current.samples.rounds  # it no longer runs at all
        direction, evidence = _change(old.device_time_us, new.device_time_us,
                                      _op_samples(baseline, name), new_samples, threshold,
                                      policy, measured, material_us)
        if direction == Kind.SLOWER:
            regressions.append(Finding(Kind.SLOWER, name, module, old.device_time_us,
                                       new.device_time_us, threshold,
                                       why(old, new, execution=current.execution,
                                           measured=measured) + evidence, modules))
        elif direction == Kind.FASTER:
            improvements.append(Finding(Kind.FASTER, name, module, old.device_time_us,
                                        new.device_time_us, threshold,
                                        why(old, new, execution=current.execution,
                                            measured=measured) + evidence, modules))
        if new.count > old.count and new.count > old.count * (1.0 + threshold):
            regressions.append(Finding(Kind.CALLS, name, module, old.count, new.count, threshold,
                                       _calls_reason(old, new, current.execution, measured),
                                       modules))

    # A new op counts when it is a hotspot of the current run (top ops or >= min_share), the
    # same rule the baseline's hotspots follow; min_share alone missed it in flat profiles. So
    # does an op the baseline has at 0 us (graph execution hid it behind other work): no
    # baseline hotspot, its time now is as new as a new op's.
    current_hotspots = set(hotspots(current, policy))
    for name, op in current.ranked():
        hidden = baseline.ops.get(name)
        if name in policy.allow or (hidden is not None and hidden.device_time_us > 0):
            continue
        if name in current_hotspots and op.device_time_us > max(policy.floor_us, material_us):
            reason = (f"new op takes {op.share:.0%} of the time" if hidden is None else
                      f"was hidden behind other work (0 us), now {op.share:.0%} of the time")
            regressions.append(Finding(Kind.NEW, name, op.module, 0.0, op.device_time_us,
                                       policy.threshold, reason, module_changes(hidden, op)))

    for swap in replaced:
        costlier = _exceeds(swap.removed_us, swap.added_us, policy.threshold, policy.floor_us)
        if not costlier:  # new names for the same work (a renamed op): not new ops that cost more
            regressions = [f for f in regressions if not (f.kind == Kind.NEW and f.op in swap.new)]
        flagged = any(f.kind == Kind.NEW and f.op in swap.new for f in regressions)
        if flagged or costlier:
            regressions.append(swap.finding(policy.threshold))
        elif _improves(swap.removed_us, swap.added_us, policy.threshold, policy.floor_us):
            improvements.append(swap.finding(policy.threshold))
        # the replacement (a finding or, at the same cost, none) stands for its ops' "no
        # longer called"
        improvements = [f for f in improvements if not (f.kind == Kind.FASTER and f.op in swap.gone)]

    # a total that regressed names the ops behind it that no finding of their own names
    named = {op for f in regressions if f.kind != Kind.TOTAL
             for op in (f.op.split(" + ") if f.kind == Kind.REPLACED else (f.op,))}
    named |= {op for swap in replaced for op in swap.new}
    regressions = [replace(f, reason=f.reason + contributors(baseline, current, policy.allow, named))
                   if f.kind == Kind.TOTAL else f for f in regressions]

    grew, shrank = memory_findings(baseline, current, policy)
    if PEAK in policy.allow and (grew or shrank):  # allow={"(peak memory)": "why"}
        allowed += [replace(f, kind=Kind.ALLOWED, reason=policy.allow[PEAK]) for f in grew + shrank]
    else:
        regressions += grew
        improvements += shrank
    regressions += limit_findings(current, policy)
    regressions += smaller_groups(baseline, current, policy)
    for change in graph_changes(baseline.graphs, current.graphs):
        (regressions if change.worse else improvements).append(Finding(
            Kind.BREAK if change.op.endswith("break)") else Kind.COMPILED, change.op,
            change.where, change.baseline, change.current, 0.0, change.reason))
    status = (Status.DOES_NOT_FIT if any(f.kind == Kind.FIT for f in regressions)
              else Status.REGRESSION if regressions else Status.IMPROVED if improvements
              else Status.PASS)
    order = by_impact(baseline, current, replaced)
    return Verdict(status, order(regressions), order(improvements), order(allowed))


GROUP_POLICY = POLICY_PREFIX + "world_size"  # the op of a smaller group's finding, then the op's


def smaller_groups(baseline: ProfileSummary, current: ProfileSummary,
                   policy: GatePolicy) -> list[Finding]:
    """Collectives measured for a smaller process group than the baseline's (the marker's
    ``world_size=``, or the test's own group): a collective over fewer ranks moves less over the
    links, so its numbers say nothing about the group the baseline was measured for (a 4x bigger
    all-reduce at 1 rank instead of 8 reads -98 %). Like a loosened marker, a Kind.POLICY
    finding with both group sizes, failing until the change records it with a reason. Entries
    without ``ranks`` (before schema 7, or not a collective) compare nothing; a larger group
    only costs more, and the numbers say so."""
    found = []
    for name, old in sorted(baseline.ops.items()):
        new = current.ops.get(name)
        if name in policy.allow or new is None or not old.ranks or not new.ranks or new.ranks >= old.ranks:
            continue
        found.append(Finding(
            Kind.POLICY, f"{GROUP_POLICY} ({name})", new.module or old.module, old.ranks, new.ranks, 0.0,
            f"{new.ranks} rank{'s' if new.ranks != 1 else ''} (was {old.ranks}): a smaller process "
            "group moves less over the links; measure the base's group, or record it with a reason"))
    # the group's collectives gone with it (code that skips them on one rank): the entry's
    # largest group, unless an op above already says it
    largest_before = max((op.ranks for op in baseline.ops.values()), default=0)
    largest_now = max((op.ranks for op in current.ops.values()), default=0)
    if not found and largest_now < largest_before and GROUP_POLICY not in policy.allow:
        found.append(Finding(
            Kind.POLICY, GROUP_POLICY, "", largest_before, largest_now, 0.0,
            (f"the largest process group a collective ran over is {largest_now} ranks"
             if largest_now else "no collective ran") + f" (the base entry's: {largest_before} "
            "ranks): measure the base's group, or record it with a reason"))
    return found


MAX_CONTRIBUTORS = 3  # ops a total's change names
CONTRIBUTORS_COVER = 0.8  # ... until they account for this much of it


def contributors(baseline: ProfileSummary, current: ProfileSummary, allow: Mapping[str, str],
                 named: Collection[str] = ()) -> str:
    """The ops that account for most of the change of the total, whether or not each crossed
    its own threshold (a copy that was no hotspot of the baseline grows from 2 to 8 calls):
    "; most of the change: aten::clone +12.300 us (82%, model.layers.0.mlp), ...", the largest
    absolute change in the total's direction first, until they cover CONTRIBUTORS_COVER of it
    (at most MAX_CONTRIBUTORS), less those a finding of their own names (``named``: the table
    says it already); "" when none is left."""
    missing = OpSummary(0, 0.0, Engine.NONE.value, 0, 0, 0.0, "")
    names = (set(baseline.ops) | set(current.ops)) - set(allow)
    change = sum(current.ops.get(n, missing).device_time_us - baseline.ops.get(n, missing).device_time_us
                 for n in names)
    if change == 0:
        return ""
    moved = sorted(((current.ops.get(n, missing).device_time_us - baseline.ops.get(n, missing).device_time_us, n)
                    for n in names), key=lambda m: (-abs(m[0]), m[1]))
    parts: list[str] = []
    covered, counted = 0.0, 0
    for delta, name in moved:
        if delta * change <= 0 or counted == MAX_CONTRIBUTORS or covered >= CONTRIBUTORS_COVER * abs(change):
            break
        counted += 1
        covered += abs(delta)
        if name in named:
            continue
        old, new = baseline.ops.get(name), current.ops.get(name)
        modules = module_changes(old, new)
        module = modules[0][0] if modules else (new or old or missing).module
        sign = "+" if delta > 0 else "-"
        where = f", {clip(module, MAX_MODULE_CHARS)}" if module else ""
        parts.append(f"{clip(name, MAX_REPLACER_CHARS)} {sign}{format_us(abs(delta))} "
                     f"({abs(delta) / abs(change):.0%}{where})")
    return "; most of the change: " + ", ".join(parts) if parts else ""


@dataclass(frozen=True)
class Replacement:
    """Ops of the baseline that no longer run (``gone``) and the new ops that ran in their
    modules (``new``), each the most device time first, with their times in all."""

    gone: tuple[str, ...]
    new: tuple[str, ...]
    removed_us: float
    added_us: float
    module: str  # where the first of ``gone`` spent most of its time
    new_us: tuple[float, ...] = ()  # each new op's device time, in ``new``'s order
    # Every module the swap changed: the time of the ops that went there (baseline) and of the
    # new ops (current), largest change first: a table lists them all (the first few, then how
    # many more), not only the first op's module
    modules: tuple[ModuleChange, ...] = ()

    @property
    def op(self) -> str:
        """The finding's op: the ops that went, "aten::a + aten::b" where several did."""
        return " + ".join(self.gone)

    def finding(self, threshold: float) -> Finding:
        return Finding(Kind.REPLACED, self.op, self.module, self.removed_us, self.added_us,
                       threshold, self.reason(), self.modules)

    def reason(self) -> str:
        """``replaced by 3 new ops, +21.868 us: aten::bmm 14.906 us, aten::_softmax 7.331 us,
        aten::clone 7.209 us`` (the first MAX_REPLACERS_NAMED of them)."""
        change = self.added_us - self.removed_us
        sign = "+" if change >= 0 else "-"
        many = len(self.new) != 1
        named = ", ".join(f"{clip(name, MAX_REPLACER_CHARS)} {format_us(us)}"
                          for name, us in list(zip(self.new, self.new_us))[:MAX_REPLACERS_NAMED])
        more = len(self.new) - MAX_REPLACERS_NAMED
        return (f"replaced by {len(self.new)} new op{'s' if many else ''}, {sign}{format_us(abs(change))}: "
                f"{named}" + (f", +{more} more" if more > 0 else ""))


MAX_REPLACERS_NAMED = 3  # in a replaced op's reason; each new op has its own finding too
MAX_REPLACER_CHARS = 40


def replacements(baseline: ProfileSummary, current: ProfileSummary,
                 policy: GatePolicy) -> list[Replacement]:
    """The ops of ``baseline`` that no longer run in ``current`` (or, in part, take less time in
    the modules new ops ran in: some of their calls renamed) and the ops new in ``current``,
    joined where they ran in a common module (one module path; transitively, so that two ops
    that went from one attention module and the five that came are one replacement); only
    those with ops on both sides. Ops named in ``allow`` and ops of 0 us are left out. A
    replacement that costs no more than what went is new names for the same work (a renamed
    op): its new ops are no "new op" regressions (``compare``)."""
    def kept(ops: Mapping[str, OpSummary], other: Mapping[str, OpSummary]) -> dict[str, OpSummary]:
        return {name: op for name, op in ops.items()
                if name not in other and name not in policy.allow and op.device_time_us > 0}

    gone, new = kept(baseline.ops, current.ops), kept(current.ops, baseline.ops)
    if new:  # ops with calls gone (renamed) that run less in some module: what they no longer
        # spend there, as gone; an op with as many calls as before was not renamed, however a
        # graph's schedule moved its time
        for name, old in baseline.ops.items():
            now = current.ops.get(name)
            if now is None or name in policy.allow or now.count >= old.count:
                continue
            less = {path: us - now.breakdown().get(path, 0.0) for path, us in old.breakdown().items()}
            less = {path: us for path, us in less.items() if us > MODULE_TOLERANCE_US}
            if less:
                gone[name] = replace(old, device_time_us=sum(less.values()), modules=less,
                                     module="")
    if not gone or not new:
        return []
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for side, ops in (("-", gone), ("+", new)):
        for name, op in ops.items():
            for path in op.breakdown():  # an op and each module it ran in are joined
                parent[root(side + name)] = root("m" + path)
    components: dict[str, tuple[list[str], list[str]]] = {}
    for side, ops in (("-", gone), ("+", new)):
        for name in ops:
            components.setdefault(root(side + name), ([], []))[side == "+"].append(name)
    found = []
    for went, came in components.values():
        if not went or not came:
            continue
        went.sort(key=lambda n: (-gone[n].device_time_us, n))
        came.sort(key=lambda n: (-new[n].device_time_us, n))
        found.append(Replacement(tuple(went), tuple(came),
                                 sum(gone[n].device_time_us for n in went),
                                 sum(new[n].device_time_us for n in came),
                                 gone[went[0]].module, tuple(new[n].device_time_us for n in came),
                                 _swapped_modules([gone[n] for n in went], [new[n] for n in came])))
    return sorted(found, key=lambda r: r.gone)


def _swapped_modules(went: Sequence[OpSummary], came: Sequence[OpSummary]) -> tuple[ModuleChange, ...]:
    """Per module path, the time of the ops that went (baseline) and of those that came
    (current), largest change first (ties by path); () when the swap was in one module only,
    whose name then says it all."""
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for ops, times in ((went, before), (came, after)):
        for op in ops:
            for path, us in op.breakdown().items():
                times[path] = times.get(path, 0.0) + us
    paths = set(before) | set(after)
    if len(paths) <= 1:
        return ()
    changes = [(path, before.get(path, 0.0), after.get(path, 0.0)) for path in paths]
    return tuple(sorted(changes, key=lambda c: (-abs(c[2] - c[1]), c[0])))


_KIND_ORDER = {kind: rank for rank, kind in enumerate(
    (Kind.TOTAL, Kind.POLICY, Kind.REPLACED, Kind.SLOWER, Kind.CALLS, Kind.NEW, Kind.FASTER,
     Kind.ALLOWED, Kind.FIT, Kind.MEMORY, Kind.BREAK, Kind.COMPILED))}


def by_impact(baseline: ProfileSummary, current: ProfileSummary,
              replaced: Sequence[Replacement] = ()) -> Callable[[Sequence[Finding]], tuple[Finding, ...]]:
    """A function that orders findings by the device time they add or remove, largest first:
    the total first; each op's findings (time, calls) together, weighed by the change of its
    time; a replaced op with the new ops that replaced it, weighed by the larger of the
    replacement's change and theirs; then the peak of device memory (does not fit first). Ties
    by name."""
    unit_of = {name: swap.op for swap in replaced for name in swap.new}
    missing = OpSummary(0, 0.0, Engine.NONE.value, 0, 0, 0.0, "")

    def change(f: Finding) -> float:
        if f.kind == Kind.CALLS or (f.kind == Kind.ALLOWED and f.op != PEAK):  # the op's time
            old, new = baseline.ops.get(f.op, missing), current.ops.get(f.op, missing)
            return abs(new.device_time_us - old.device_time_us)
        return abs(f.current - f.baseline)

    def order(findings: Sequence[Finding]) -> tuple[Finding, ...]:
        memory = [f for f in findings if f.kind in MEMORY_KINDS or f.op == PEAK
                  or f.kind in GRAPH_KINDS]  # then the compiled graphs: counts, not time
        units: dict[str, list[Finding]] = {}
        for f in findings:
            if f.kind in (Kind.TOTAL, Kind.POLICY) or f.kind in MEMORY_KINDS or f.op == PEAK or f.kind in GRAPH_KINDS:
                continue
            units.setdefault(unit_of.get(f.op, f.op) if f.kind == Kind.NEW else f.op, []).append(f)
        weight = {key: max(map(change, members)) for key, members in units.items()}
        ranked = sorted(units, key=lambda key: (-weight[key], key))
        # the total, then how the test is gated (a loosened marker), then the ops by impact
        ordered = [f for f in findings if f.kind == Kind.TOTAL] + [f for f in findings if f.kind == Kind.POLICY]
        for key in ranked:
            ordered += sorted(units[key], key=lambda f: (_KIND_ORDER[f.kind], -change(f), f.op))
        return tuple(ordered + sorted(memory, key=lambda f: (_KIND_ORDER.get(f.kind, 99), f.module)))

    return order


def memory_findings(baseline: ProfileSummary, current: ProfileSummary,
                    policy: GatePolicy) -> tuple[list[Finding], list[Finding]]:
    """(regressions, improvements) of the peak of device memory: a change beyond
    ``memory_threshold`` that is also at least ``memory_floor_bytes``. Nothing when either side
    has no memory (measured backends, entries recorded before baseline schema version 5)."""
    old, new = baseline.memory, current.memory
    if old is None or new is None:
        return [], []
    change = new.peak_bytes - old.peak_bytes
    if abs(change) < policy.memory_floor_bytes:
        return [], []
    finding = Finding(Kind.MEMORY, PEAK, "", old.peak_bytes, new.peak_bytes,
                      policy.memory_threshold, memory_reason(old, new))
    if new.peak_bytes > old.peak_bytes * (1.0 + policy.memory_threshold):
        return [finding], []
    if new.peak_bytes < old.peak_bytes * (1.0 - policy.memory_threshold):
        return [], [finding]
    return [], []


def limit_findings(current: ProfileSummary, policy: GatePolicy) -> list[Finding]:
    """The peak above the test's memory limit (``policy.memory_limit``): it does not fit, with
    or without a baseline, e.g. ``does not fit on trn2: 31.2 GiB peak, 24 GiB per NeuronCore``."""
    memory, limit = current.memory, policy.memory_limit
    if memory is None or limit is None or memory.peak_bytes <= limit:
        return []
    label = policy.memory_limit_label or format_bytes(limit)
    return [Finding(Kind.FIT, PEAK, "", limit, memory.peak_bytes, 0.0,
                    f"does not fit on {current.hardware}: {format_bytes(memory.peak_bytes)} peak, "
                    f"{label}")]


def uncompared(current: ProfileSummary, policy: GatePolicy, status: Status,
               message: str = "") -> Verdict:
    """The verdict of a test with nothing to compare against (``status``: no baseline, or
    recorded): its memory limit still applies. One that does not fit fails with
    ``Status.DOES_NOT_FIT``; recording keeps its status, so that its entry is still written,
    and fails too."""
    over = limit_findings(current, policy)
    if over and status != Status.RECORDED:
        status = Status.DOES_NOT_FIT
    return Verdict(status, tuple(over), message=message)


def with_memory_limit(policy: GatePolicy, hardware: str, backend: str) -> GatePolicy:
    """``policy`` with the test's memory limit: the marker's memory_limit where it gave one, else
    the device memory of one core of ``hardware`` (the simulated backend's hardware profile;
    none for a profile this version does not know, and none on measured backends)."""
    if policy.memory_limit is not None or backend != SIMULATED:
        return policy
    found = device_memory(hardware)
    if found is None:
        return policy
    return replace(policy, memory_limit=found[0], memory_limit_label=found[1])
