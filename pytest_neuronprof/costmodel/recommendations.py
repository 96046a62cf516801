"""Neuron Explorer's recommendations, from a region's ``Utilisation``: each rule one small function
with the condition and threshold of its source, mapped to what the simulator knows. The Summary
page shows "2-4 recommendations ... the most critical ones first"
(aws-neuron/aws-neuron-sdk@81ce03ae: tools/neuron-explorer/overview-summary-page.rst,
"Performance Insights and Recommendations"): ``recommend`` gives at most MAX_SHOWN, the most
device time at stake first, each naming the ops and modules it is about. Pure: no torch.

The simulator's own choices, where the source gives no number, are named as such next to them:
a rule whose time at stake is under MIN_SHARE of the region's device time is not shown (the
hardware's counters always differ a little; the simulator's are exact, so a trace amount would
fire every rule), and collective outliers are calls over OUTLIER_FACTOR x their group's median.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..formatting import format_bytes
from . import utilisation as u

SDK = "aws-neuron/aws-neuron-sdk@81ce03ae"  # the Neuron documentation as read (2026-08-21, 2.32)
SUMMARY_PAGE = f"{SDK}:tools/neuron-explorer/overview-summary-page.rst"
DMA_GUIDE = f"{SDK}:nki/deep-dives/nki-dma-bandwidth-guide.rst"
GLOSSARY = f"{SDK}:tools/neuron-explorer/glossary.rst"

MAX_SHOWN = 4  # the Summary page shows 2-4
MIN_SHARE = 0.01  # the simulator's: a rule whose time at stake is under 1 % of the device time is not shown
MAX_NAMED = 3  # ops and modules a recommendation names (then how many more)

# Thresholds, each the Summary page's "Example recommendations" condition unless said otherwise.
MODEL_OF_ACTIVE = 0.50  # "Low Model FLOPS relative to Active FLOPS (< 50%)"
TRANSPOSE_OF_HARDWARE = 0.10  # "Transpose FLOPS > 10% of total hardware FLOPS"
RELOAD_OF_READS = 0.25  # "Spill reload bytes > 25% of total HBM reads"
SMALL_DMA_BYTES = 2048  # the DMA guide: ">= 2 KiB per partition (minimum recommended)"
FIXED_OF_TIME = 0.50  # the simulator's: ops bound by a fixed cost take half the device time
OUTLIER_FACTOR = 2.0  # the simulator's: the page says "significantly underperforming ... relative
# to their group median" and names no factor


@dataclass(frozen=True)
class Recommendation:
    """One rule that applies: Explorer's condition, what the simulator found, what to do, the
    device time at stake (``cost_us``, the estimate it is ranked by) and the ops and modules it
    is about (the most first, ``more_ops`` and ``more_modules`` left unnamed; ``about``: every
    op, what a failure matches the ops that changed against)."""

    rule: str
    condition: str
    found: str
    action: str
    cost_us: float
    ops: tuple[str, ...] = ()
    more_ops: int = 0
    modules: tuple[str, ...] = ()
    more_modules: int = 0
    source: str = SUMMARY_PAGE
    about: tuple[str, ...] = ()

    def where(self) -> str:
        """``aten::mm, aten::bmm (+2 more) in mlp.up, mlp.down``; "" when it names none."""
        if not self.ops:
            return ""
        ops = ", ".join(self.ops) + (f" (+{self.more_ops} more)" if self.more_ops else "")
        named = [m or "(no module)" for m in self.modules]
        modules = ", ".join(named) + (f" (+{self.more_modules} more)" if self.more_modules else "")
        return ops + (f" in {modules}" if named else "")

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "condition": self.condition, "found": self.found,
                "action": self.action, "cost_us": round(self.cost_us, 4), "ops": list(self.ops),
                "more_ops": self.more_ops, "modules": list(self.modules),
                "more_modules": self.more_modules, "source": self.source,
                "about": list(self.about or self.ops)}

    @classmethod
    def from_json(cls, data: Any, check: Any, where: str) -> "Recommendation":
        """What ``to_json`` wrote; ``check``: the reader's checks (gate/decode.py's Decoder)."""
        check.mapping(where, data)
        check.known_keys(where, data, JSON_KEYS)

        def strings(key: str) -> tuple[str, ...]:
            return tuple(check.string(f"{where}.{key}[{i}]", v)
                         for i, v in enumerate(check.items(f"{where}.{key}", data.get(key, []))))
        return cls(check.string(f"{where}.rule", data.get("rule")),
                   check.string(f"{where}.condition", data.get("condition")),
                   check.string(f"{where}.found", data.get("found")),
                   check.string(f"{where}.action", data.get("action")),
                   check.number(f"{where}.cost_us", data.get("cost_us")), strings("ops"),
                   check.whole(f"{where}.more_ops", data.get("more_ops", 0)), strings("modules"),
                   check.whole(f"{where}.more_modules", data.get("more_modules", 0)),
                   check.string(f"{where}.source", data.get("source", "")),
                   strings("about") if "about" in data else strings("ops"))


JSON_KEYS = frozenset({"rule", "condition", "found", "action", "cost_us", "ops", "more_ops", "modules",
                       "more_modules", "source", "about"})


def _ranked(ops: Mapping[str, list[Any]]) -> list[tuple[str, list[Any]]]:
    """The ops of the evidence, the most of it first (then by name)."""
    return sorted(ops.items(), key=lambda item: (-item[1][0], item[0]))


def _at_stake(ops: Mapping[str, list[Any]]) -> float:
    """What the evidence adds up to: the device time a rule's ops put at stake."""
    return sum(amount for amount, _ in ops.values())


def _make(rule: str, condition: str, found: str, action: str, cost_us: float,
          evidence: Mapping[str, list[Any]], source: str = SUMMARY_PAGE) -> Recommendation:
    """A recommendation naming the ops and modules with the most of ``evidence`` (then how
    many more), and about every op of it."""
    ranked = _ranked(evidence)
    modules: dict[str, float] = {}
    for _, (_, by_module) in ranked:
        for module, amount in by_module.items():
            modules[module] = modules.get(module, 0.0) + amount
    top = sorted(modules.items(), key=lambda item: (-item[1], item[0]))
    return Recommendation(rule, condition, found, action, cost_us,
                          tuple(name for name, _ in ranked[:MAX_NAMED]), max(0, len(ranked) - MAX_NAMED),
                          tuple(name for name, _ in top[:MAX_NAMED]), max(0, len(top) - MAX_NAMED),
                          source, tuple(name for name, _ in ranked))


def _pct(value: float) -> str:
    return u.percent_text(100.0 * value)


# --- the rules --------------------------------------------------------------------------------------

def low_model_flops(s: u.Utilisation) -> Recommendation | None:
    """Summary page: "Low Model FLOPS relative to Active FLOPS (< 50%)": TensorE is active but not
    doing the model's products. Active FLOPs: TensorE's active time at its peak; model FLOPs: the
    products' own, at their dtype's peak (the padding of tiles smaller than 128 x 128, the
    per-instruction cost of small products and the throttling ramp are the difference)."""
    active = s.active_us.get("Tensor", 0.0)
    if active <= 0 or s.model_peak_us >= MODEL_OF_ACTIVE * active:
        return None
    evidence = s.evidence.get(u.WASTED, {})
    return _make("low_model_flops", "Low Model FLOPS relative to Active FLOPS (< 50%)",
                 f"model FLOPs are {_pct(s.model_peak_us / active)} of what TensorE's active time "
                 "could do at peak", "Ensure instructions use the entire tensor engine and are "
                 "pipelined correctly: products whose dims are multiples of 128 and large enough "
                 "to fill the 128 x 128 array, fewer and larger products (batch them)",
                 _at_stake(evidence), evidence)


def transposes(s: u.Utilisation) -> Recommendation | None:
    """Summary page: "Transpose FLOPS > 10% of total hardware FLOPS"."""
    if s.hardware_flops <= 0 or s.transpose_flops <= TRANSPOSE_OF_HARDWARE * s.hardware_flops:
        return None
    evidence = s.evidence.get(u.TRANSPOSE, {})
    return _make("transpose_flops", "Transpose FLOPS > 10% of total hardware FLOPS",
                 f"transposes are {_pct(s.transpose_flops / s.hardware_flops)} of TensorE's hardware FLOPs",
                 "Improve memory layout to reduce transpose operations: keep a tensor in the "
                 "layout its products contract it in (the same axis each time)",
                 s.transpose_peak_us, evidence)


def spill_reload(s: u.Utilisation) -> Recommendation | None:
    """Summary page: "Spill reload bytes > 25% of total HBM reads" (graph execution: the
    intermediates that did not fit in SBUF)."""
    if s.hbm_read_bytes <= 0 or s.spill_reload_bytes <= RELOAD_OF_READS * s.hbm_read_bytes:
        return None
    per_us = s.hbm_bytes_per_us or 1.0
    evidence = {op: [amount / per_us, {m: b / per_us for m, b in modules.items()}]
                for op, (amount, modules) in s.evidence.get(u.SPILL, {}).items()}
    return _make("spill_reload", "Spill reload bytes > 25% of total HBM reads",
                 f"spill reloads are {_pct(s.spill_reload_bytes / s.hbm_read_bytes)} of HBM reads "
                 f"({format_bytes(s.spill_save_bytes)} saved, {format_bytes(s.spill_reload_bytes)} reloaded)",
                 "Check for data dependencies causing excessive spill/reload operations: "
                 "intermediates that outlive SBUF (split the batch or sequence, or recompute "
                 "them where they are needed)",
                 (s.spill_save_bytes + s.spill_reload_bytes) / per_us, evidence)


def small_dma(s: u.Utilisation) -> Recommendation | None:
    """The NKI DMA bandwidth guide: transfers under 2 KiB per partition stay below the DMA's peak
    ("256 B -- 2 KiB per partition: Improving but still below peak"; "< 256 B ... Severely
    overhead-bound"); the Summary page's ``average_dma_size`` ("higher is better")."""
    average = s.dma_transfer_average_bytes
    if not s.dma_transfer_count or average >= SMALL_DMA_BYTES:
        return None
    evidence = s.evidence.get(u.SMALL_DMA, {})
    severe = " (under 256 B: severely overhead-bound)" if average < 256 else ""
    return _make("small_dma", "Average DMA transfer below 2 KiB per partition",
                 f"the average DMA descriptor moves {format_bytes(average)}{severe}",
                 "Maximize the free dimension of every DMA tile and coalesce transfers: fewer, "
                 "larger tensors, contiguous in memory (>= 4 KiB per partition saturates the DMA)",
                 _at_stake(evidence), evidence, DMA_GUIDE)


def throttling(s: u.Utilisation) -> Recommendation | None:
    """Summary page: "Active FLOPS throttling detected": on Trn2 and Trn3 TensorE "starts at
    roughly 50% utilization ... and ramps to full over about the first ~3 microseconds", again
    after utilisation drops below 50 % for ~3 us ("Understanding throttling"). The page gives no
    threshold for "detected": MIN_SHARE applies."""
    if s.throttled_us <= 0:
        return None
    evidence = s.evidence.get(u.THROTTLE, {})
    return _make("throttling", "Active FLOPS throttling detected",
                 f"TensorE's ramp after idle gaps costs {_pct(s.throttled_us / s.active_us.get('Tensor', 1.0))} "
                 "of its active time", "Keep the Tensor Engine busy: avoid idle gaps between "
                 "products (overlap DMA with compute, batch small products"
                 + ("; eager kernels each start on a quiet array: a compiled graph keeps it busy)"
                    if s.execution == "eager" else ")"),
                 s.throttled_us, evidence)


def fixed_cost(s: u.Utilisation) -> Recommendation | None:
    """Eager execution compiles "many small NEFFs (potentially hundreds), one per operator"
    (glossary.rst, "Eager mode"): each op pays its launch and its DMA's start. When the ops
    bound by a fixed cost (more than half of each one's time is not its work at peak: the same
    rule the ``bound`` of an op is, by the calls with most of its time as its entry keeps it)
    carry half the device time or more (the simulator's
    threshold), a compiled graph runs the region as one; what is at stake is the launches and
    DMA starts it would not pay."""
    if s.execution != "eager" or s.total_time_us <= 0 or s.fixed_bound_us < FIXED_OF_TIME * s.total_time_us:
        return None
    evidence = s.evidence.get(u.FIXED, {})
    return _make("fixed_cost", "Kernels dominated by their fixed cost (eager: one NEFF per op)",
                 f"ops bound by a fixed cost take {_pct(s.fixed_bound_us / s.total_time_us)} of the "
                 f"device time; the region's {s.kernels} kernels spend {_pct(s.fixed_us / s.total_time_us)} "
                 "of the device time on launches and DMA starts",
                 "Compile the region as one graph (torch.compile(backend=\"neuron\"); profile it with "
                 "execution=\"graph\"), or fuse the small ops by hand",
                 s.fixed_us, evidence, GLOSSARY)


def collective_outliers(s: u.Utilisation) -> Recommendation | None:
    """Summary page: "Collective operation outliers detected": calls "significantly
    underperforming ... relative to their group median", grouped by operation type and size
    (the Collective Operations Duration chart); OUTLIER_FACTOR is the simulator's."""
    evidence: dict[str, list[Any]] = {}
    slowest = 0.0
    for (name, _), calls in s.collectives.items():
        if len(calls) < 3:
            continue
        median = statistics.median(us for us, _ in calls)
        for us, module in calls:
            if median > 0 and us > OUTLIER_FACTOR * median:
                entry = evidence.setdefault(name, [0.0, {}])
                entry[0] += us - median
                entry[1][module] = entry[1].get(module, 0.0) + us - median
                slowest = max(slowest, us / median)
    if not evidence:
        return None
    return _make("collective_outliers", "Collective operation outliers detected",
                 f"collectives up to {slowest:.1f}x their group's median time",
                 "Check for overlapping instructions that might be causing delays (and for "
                 "calls whose group crosses instances)", _at_stake(evidence), evidence)


def state_creation(s: u.Utilisation) -> Recommendation | None:
    """The simulator's own: an optimizer's first step makes its state (AdamW's moments: a
    ``zeros_like`` per parameter, torch/optim/adam.py ``_init_group``), work a later step does
    not do. Not an Explorer rule: a profile of a steady step has none."""
    evidence = s.evidence.get(u.STATE, {})
    if not evidence:
        return None
    return _make("state_creation", "One-time optimizer state creation in the region",
                 "the optimizer's first step creates its state (a later step does not)",
                 "If the test means a steady training step, run one step before the region "
                 "(optimizer.step() outside `with neuron_profile:`) so that the state exists",
                 _at_stake(evidence), evidence, "torch/optim/adam.py (torch 2.13): _init_group")


RULES: tuple[Callable[[u.Utilisation], Recommendation | None], ...] = (
    low_model_flops, transposes, spill_reload, small_dma, throttling, fixed_cost,
    collective_outliers, state_creation)


def recommend(found: u.Utilisation | None, limit: int = MAX_SHOWN) -> list[Recommendation]:
    """The rules that apply, the most device time at stake first (ties by rule), at most
    ``limit``; those under MIN_SHARE of the device time left out. [] without a utilisation
    (measured backends)."""
    if found is None or found.total_time_us <= 0:
        return []
    applies = [r for r in (rule(found) for rule in RULES)
               if r is not None and r.cost_us >= MIN_SHARE * found.total_time_us]
    return sorted(applies, key=lambda r: (-r.cost_us, r.rule))[:limit]

