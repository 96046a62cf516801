"""The regression gate (gate.py): compare() on hand-built summaries, exact Findings, edges."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_neuronprof.errors import ConfigError
from pytest_neuronprof.gate.compare import (TOTAL, Finding, GatePolicy, Status, compare, hotspots,
                                            incomparable_reason)
from pytest_neuronprof.plugin.marker import policy_from_marker
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary, summarize, torch_minor_version


def summary(ops: dict[str, tuple[int, float] | tuple[int, float, str]], *, backend: str = "simulated",
            hardware: str = "trn2", cost_model_version: str = "1",
            torch_version: str = "2.13") -> ProfileSummary:
    """ops: name -> (count, device_time_us[, module]); shares and the total are derived."""
    total = sum(spec[1] for spec in ops.values())
    built = {
        name: OpSummary(count=spec[0], device_time_us=float(spec[1]), engine="Tensor", flops=0,
                        bytes=0, share=spec[1] / total if total else 0.0,
                        module=spec[2] if len(spec) > 2 else f"mod.{name}")
        for name, spec in ops.items()
    }
    return ProfileSummary(backend, hardware, cost_model_version, torch_version, total, built)


POLICY = GatePolicy()  # 10 %, 1 us floor, 10 hotspots covering 90 %, min_share 5 %
# The reason of a slower or faster op whose counts, flops, bytes and dtype (all that summary()
# keeps) did not change, in eager execution (reasons.why; tests/test_reasons.py has the rest).
SAME = "same work, other shapes"


# --- no change, incomparable ----------------------------------------------------------------------

def test_identical_profiles_pass_with_no_findings():
    base = summary({"aten::mm": (2, 100.0), "aten::add": (1, 20.0)})
    verdict = compare(base, base, POLICY)
    assert verdict.status == Status.PASS
    assert not verdict.failed
    assert (verdict.regressions, verdict.improvements, verdict.allowed, verdict.message) == ((), (), (), "")


@pytest.mark.parametrize("field,label,old,new", [
    ("cost_model_version", "cost-model version", "1", "2"),
    ("torch_version", "torch version", "2.12", "2.13"),
    ("backend", "backend", "simulated", "cpu"),
])
def test_incomparable_numbers_are_reported_never_compared(field, label, old, new):
    base = summary({"aten::mm": (1, 100.0)}, **{field: old})
    # 10x slower: would be a regression if it were compared
    current = summary({"aten::mm": (1, 1000.0)}, **{field: new})
    verdict = compare(base, current, POLICY)
    assert verdict.status == Status.INCOMPARABLE
    assert not verdict.failed
    assert verdict.regressions == verdict.improvements == ()
    assert verdict.message == (
        f"the baseline was recorded with {label} {old}, this run uses {new}; "
        "re-record it with `pytest --neuron-baseline` once the change is intended")
    assert incomparable_reason(base, base) is None


# --- regressions ------------------------------------------------------------------------------------

def test_total_and_hotspot_slower():
    base = summary({"aten::mm": (1, 100.0, "proj")})
    current = summary({"aten::mm": (1, 150.0, "proj")})
    verdict = compare(base, current, POLICY)
    assert verdict.status == Status.REGRESSION and verdict.failed
    assert verdict.regressions == (
        Finding("total", TOTAL, "", 100.0, 150.0, 0.10, "total device time"),
        Finding("slower", "aten::mm", "proj", 100.0, 150.0, 0.10, SAME),
    )
    assert verdict.regressions[1].delta == pytest.approx(0.5)


def test_hotspot_slower_while_total_is_within_threshold():
    base = summary({"aten::mm": (1, 50.0), "aten::add": (1, 50.0)})
    current = summary({"aten::mm": (1, 60.0), "aten::add": (1, 44.0)})  # total +4 %
    verdict = compare(base, current, POLICY)
    assert verdict.status == Status.REGRESSION
    assert verdict.regressions == (
        Finding("slower", "aten::mm", "mod.aten::mm", 50.0, 60.0, 0.10, SAME),)
    # add went down 12 %: an improvement is listed, but the regression decides the status
    assert verdict.improvements == (
        Finding("faster", "aten::add", "mod.aten::add", 50.0, 44.0, 0.10, SAME),)


@pytest.mark.parametrize("current,regressed", [
    (125.0, False),  # exactly at the threshold: not beyond it
    (125.5, True),
])
def test_threshold_edge(current, regressed):
    policy = GatePolicy(threshold=0.25)
    verdict = compare(summary({"aten::mm": (1, 100.0)}), summary({"aten::mm": (1, current)}), policy)
    assert verdict.failed is regressed
    assert [f.kind for f in verdict.regressions] == (["total", "slower"] if regressed else [])


@pytest.mark.parametrize("current,regressed", [
    (3.0, False),  # +50 % but exactly 1 us more: at the floor, tiny ops do not flap
    (3.01, True),
])
def test_absolute_floor_edge(current, regressed):
    verdict = compare(summary({"aten::relu": (1, 2.0)}), summary({"aten::relu": (1, current)}), POLICY)
    assert verdict.failed is regressed
    if regressed:
        assert verdict.regressions == (
            Finding("total", TOTAL, "", 2.0, current, 0.10, "total device time"),
            Finding("slower", "aten::relu", "mod.aten::relu", 2.0, current, 0.10, SAME),
        )


def test_floor_is_a_policy_knob():
    base, current = summary({"aten::relu": (1, 2.0)}), summary({"aten::relu": (1, 2.5)})
    assert compare(base, current, POLICY).status == Status.PASS
    assert compare(base, current, GatePolicy(floor_us=0.1)).status == Status.REGRESSION


def test_more_calls_of_a_hotspot_is_a_regression_even_at_equal_time():
    # a lost fusion: the same work in two launches
    base = summary({"aten::mm": (1, 100.0, "attn")})
    current = summary({"aten::mm": (2, 102.0, "attn")})
    verdict = compare(base, current, POLICY)
    assert verdict.status == Status.REGRESSION
    # no flops and no bytes kept: nothing says the two calls did the same work (issue 34, item 8)
    assert verdict.regressions == (
        Finding("calls", "aten::mm", "attn", 1, 2, 0.10, "1 -> 2 calls"),)
    assert verdict.regressions[0].delta == 1.0


def test_call_count_threshold_edge():
    base = summary({"aten::mm": (10, 100.0)})
    assert compare(base, summary({"aten::mm": (11, 100.0)}), POLICY).status == Status.PASS  # +10 %
    assert compare(base, summary({"aten::mm": (12, 100.0)}), POLICY).status == Status.REGRESSION


def test_new_op_that_becomes_a_hotspot():
    base = summary({"aten::mm": (1, 100.0)})
    current = summary({"aten::mm": (1, 100.0), "aten::exp": (1, 20.0, "act")})
    verdict = compare(base, current, GatePolicy(threshold=0.25))  # total +20 %: within threshold
    assert verdict.status == Status.REGRESSION
    assert verdict.regressions == (
        Finding("new", "aten::exp", "act", 0.0, 20.0, 0.25, "new op takes 17% of the time"),)
    assert math.isinf(verdict.regressions[0].delta)
    assert verdict.regressions[0].to_json()["delta"] is None


def test_new_op_below_min_share_or_floor_is_not_a_regression():
    base = summary({"aten::mm": (1, 100.0), "aten::add": (1, 100.0)})
    small_share = summary({"aten::mm": (1, 100.0), "aten::add": (1, 100.0), "aten::exp": (1, 4.0)})
    assert compare(base, small_share, POLICY).status == Status.PASS  # 2 % of the time
    tiny = summary({"aten::relu": (1, 1.0)})
    tiny_new = summary({"aten::relu": (1, 1.0), "aten::exp": (1, 0.9)})  # 47 % but 0.9 us
    assert compare(tiny, tiny_new, POLICY).status == Status.PASS


def test_new_op_in_the_top_ops_of_a_flat_profile_is_a_hotspot():
    # 30 ops of 3 % each: hotspots are the top 10 by time even though each is below min_share
    ops = {f"aten::op{i:02d}": (1, 10.0) for i in range(30)}
    base = summary(ops)
    current = summary({**ops, "aten::exp": (1, 12.0)})  # 3.8 %, the largest op now
    verdict = compare(base, current, GatePolicy(threshold=0.5))
    assert [f.kind + ":" + f.op for f in verdict.regressions] == ["new:aten::exp"]


def test_slowdown_of_a_non_hotspot_op_is_not_gated():
    base = summary({"aten::mm": (1, 1000.0), "aten::add": (1, 10.0)})  # add is 1 %
    current = summary({"aten::mm": (1, 1000.0), "aten::add": (1, 20.0)})
    assert compare(base, current, POLICY).status == Status.PASS


# --- hotspot selection --------------------------------------------------------------------------------

def test_hotspots_cover_90_percent_at_most_n_plus_big_shares():
    base = summary({"a": (1, 50.0), "b": (1, 30.0), "c": (1, 15.0), "d": (1, 3.0), "e": (1, 2.0)})
    assert hotspots(base, POLICY) == ["a", "b", "c"]  # 95 % after c
    assert hotspots(base, GatePolicy(hotspots=1)) == ["a", "b", "c"]  # b and c are >= 5 %
    assert hotspots(base, GatePolicy(hotspots=1, min_share=0.4)) == ["a"]
    assert hotspots(base, GatePolicy(hotspots=0, min_share=0.2)) == ["a", "b"]
    assert hotspots(base, GatePolicy(coverage=1.0, min_share=1.0)) == ["a", "b", "c", "d", "e"]


def test_hotspot_ties_rank_by_name():
    base = summary({"b": (1, 10.0), "a": (1, 10.0), "c": (1, 10.0)})
    assert hotspots(base, GatePolicy(hotspots=2, min_share=0.9)) == ["a", "b"]


def test_limiting_hotspots_hides_a_small_ops_slowdown():
    base = summary({"a": (1, 60.0), "b": (1, 40.0)})
    current = summary({"a": (1, 60.0), "b": (1, 46.0)})  # b +15 %, total +6 %
    assert compare(base, current, POLICY).status == Status.REGRESSION
    assert compare(base, current, GatePolicy(hotspots=1, min_share=0.5)).status == Status.PASS


# --- per-op thresholds and allow ------------------------------------------------------------------------

def test_per_op_threshold_tighter():
    base = summary({"aten::mm": (1, 50.0), "aten::add": (1, 50.0)})
    current = summary({"aten::mm": (1, 53.0), "aten::add": (1, 50.0)})  # mm +6 %, total +3 %
    assert compare(base, current, POLICY).status == Status.PASS
    verdict = compare(base, current, GatePolicy(ops={"aten::mm": 0.02}))
    assert verdict.regressions == (
        Finding("slower", "aten::mm", "mod.aten::mm", 50.0, 53.0, 0.02, SAME),)


def test_per_op_threshold_looser():
    base = summary({"aten::mm": (1, 50.0), "aten::add": (1, 50.0)})
    current = summary({"aten::mm": (1, 65.0), "aten::add": (1, 50.0)})  # mm +30 %, total +15 %
    policy = GatePolicy(threshold=0.2, ops={"aten::mm": 0.5})
    assert compare(base, current, policy).status == Status.PASS
    assert compare(base, current, GatePolicy(threshold=0.2)).regressions == (
        Finding("slower", "aten::mm", "mod.aten::mm", 50.0, 65.0, 0.2, SAME),)


def test_allowed_op_change_passes_and_is_listed():
    base = summary({"aten::cat": (1, 50.0, "kv"), "aten::mm": (1, 50.0)})
    current = summary({"aten::cat": (3, 200.0, "kv"), "aten::mm": (1, 50.0)})
    reason = "new KV cache layout, see #123"
    verdict = compare(base, current, GatePolicy(allow={"aten::cat": reason}))
    assert verdict.status == Status.PASS  # the total leaves allowed ops out on both sides
    assert verdict.allowed == (Finding("allowed", "aten::cat", "kv", 50.0, 200.0, 0.10, reason),)
    assert compare(base, current, POLICY).status == Status.REGRESSION


def test_allowed_new_op_is_not_a_regression():
    base = summary({"aten::mm": (1, 50.0)})
    current = summary({"aten::mm": (1, 50.0), "aten::exp": (1, 50.0)})
    verdict = compare(base, current, GatePolicy(allow={"aten::exp": "new activation"}))
    assert verdict.status == Status.PASS


def test_allow_does_not_hide_other_regressions():
    base = summary({"aten::cat": (1, 50.0), "aten::mm": (1, 50.0)})
    current = summary({"aten::cat": (1, 80.0), "aten::mm": (1, 70.0)})
    verdict = compare(base, current, GatePolicy(allow={"aten::cat": "expected"}))
    assert [(f.kind, f.op, f.baseline, f.current) for f in verdict.regressions] == [
        ("total", TOTAL, 50.0, 70.0), ("slower", "aten::mm", 50.0, 70.0)]
    assert [f.op for f in verdict.allowed] == ["aten::cat"]


# --- improvements ------------------------------------------------------------------------------------

def test_improvement_beyond_threshold_passes_and_is_listed():
    base = summary({"aten::mm": (1, 100.0, "proj")})
    current = summary({"aten::mm": (1, 80.0, "proj")})
    verdict = compare(base, current, POLICY)
    assert verdict.status == Status.IMPROVED and not verdict.failed
    assert verdict.improvements == (
        Finding("faster", TOTAL, "", 100.0, 80.0, 0.10, "total device time"),
        Finding("faster", "aten::mm", "proj", 100.0, 80.0, 0.10, SAME),
    )


@pytest.mark.parametrize("current,improved", [
    (90.5, False),  # -9.5 %: faster, but within the 10 % threshold
    (90.0, False),  # -10 %: at the threshold, not beyond it
    (89.5, True),
])
def test_improvement_threshold_edge(current, improved):
    verdict = compare(summary({"aten::mm": (1, 100.0)}), summary({"aten::mm": (1, current)}), POLICY)
    assert verdict.status == (Status.IMPROVED if improved else Status.PASS)
    for finding in verdict.improvements:
        assert finding.delta < -finding.threshold  # what the table shows agrees with the verdict


def test_improvement_below_floor_is_not_listed():
    verdict = compare(summary({"aten::relu": (1, 2.0)}), summary({"aten::relu": (1, 1.2)}), POLICY)
    assert verdict.status == Status.PASS  # -40 % but only 0.8 us


def test_removed_hotspot_is_an_improvement():
    base = summary({"aten::mm": (1, 50.0), "aten::contiguous": (1, 50.0)})
    current = summary({"aten::mm": (1, 50.0)})
    verdict = compare(base, current, POLICY)
    assert verdict.status == Status.IMPROVED
    assert Finding("faster", "aten::contiguous", "mod.aten::contiguous", 50.0, 0.0, 0.10,
                   "no longer called") in verdict.improvements


# --- properties -------------------------------------------------------------------------------------

op_specs = st.dictionaries(
    st.sampled_from([f"aten::op{i}" for i in range(12)]),
    st.tuples(st.integers(1, 5), st.floats(0.5, 1e4, allow_nan=False)),
    min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(op_specs)
def test_property_unchanged_profile_always_passes(ops):
    s = summary(ops)
    assert compare(s, s, POLICY).status == Status.PASS


@settings(max_examples=60, deadline=None)
@given(op_specs, st.floats(1.3, 5.0))
def test_property_uniform_slowdown_beyond_threshold_and_floor_fails(ops, factor):
    base = summary(ops)
    current = summary({name: (count, t * factor) for name, (count, t) in ops.items()})
    verdict = compare(base, current, POLICY)
    if base.total_device_time_us * (factor - 1) > POLICY.floor_us:
        assert verdict.status == Status.REGRESSION
        assert verdict.regressions[0].kind == "total"
    # and the reverse direction is never a regression
    assert compare(current, base, POLICY).status in (Status.PASS, Status.IMPROVED)


# --- policy from marker arguments -----------------------------------------------------------------------

def test_policy_from_marker_applies_each_argument():
    base = GatePolicy()
    policy = policy_from_marker(base, {
        "threshold": 0.05, "hotspots": 3, "min_share": 0.2, "ops": {"aten::mm": 0.02},
        "allow": {"aten::cat": "new layout"}, "rounds": 3, "warmup": 0, "hardware": "trn1"})
    assert policy == GatePolicy(threshold=0.05, hotspots=3, min_share=0.2, ops={"aten::mm": 0.02},
                                allow={"aten::cat": "new layout"}, floor_us=base.floor_us)
    assert policy.threshold_for("aten::mm") == 0.02
    assert policy.threshold_for("aten::add") == 0.05
    assert policy_from_marker(base, {}) == base
    assert policy_from_marker(base, {"threshold": 1}).threshold == 1.0


@pytest.mark.parametrize("kwargs,named", [
    ({"treshold": 0.1}, "treshold"),
    ({"threshold": "ten"}, "threshold"),  # "10%" is 0.1, as for the option (issue 11)
    ({"threshold": -0.1}, "threshold"),
    ({"threshold": math.nan}, "threshold"),
    ({"threshold": True}, "threshold"),
    ({"min_share": 1.5}, "min_share"),
    ({"hotspots": 2.5}, "hotspots"),
    ({"hotspots": -1}, "hotspots"),
    ({"ops": ["aten::mm"]}, "ops"),
    ({"ops": {"aten::mm": "2 %%"}}, "ops['aten::mm']"),
    ({"allow": ["aten::cat"]}, "allow"),
    ({"allow": {"aten::cat": ""}}, "allow"),
    ({"allow": {"aten::cat": None}}, "allow"),
    ({"rounds": 0}, "rounds"),
    ({"warmup": -1}, "warmup"),
    ({"warmup": 1.0}, "warmup"),
    ({"hardware": 2}, "hardware"),
])
def test_bad_marker_argument_names_it(kwargs, named):
    with pytest.raises(ConfigError) as info:
        policy_from_marker(GatePolicy(), kwargs)
    assert named in str(info.value)


# --- summaries (what the gate compares) -------------------------------------------------------------

def _record(name, time_us, module="", engine="Tensor", flops=10, read=4, written=2, bound="TensorE",
            dtypes=("float32",)):
    return SimpleNamespace(name=name, device_time_us=time_us, module_path=module, engine=engine,
                           flops=flops, bytes_read=read, bytes_written=written, phase="forward",
                           costed=True, bound=bound, input_dtypes=list(dtypes))


def test_summarize_aggregates_per_op_and_picks_the_costliest_module():
    result = SimpleNamespace(backend="simulated", hardware="trn2", records=[
        _record("aten::mm", 3.0, "attn.q"),
        _record("aten::mm", 5.0, "mlp.up"),
        _record("aten::mm", 3.0, "attn.q"),
        _record("aten::view", 0.0, "attn", engine="-", bound="none"),  # a free op: left out
        _record("aten::add", 1.0, "", engine="Vector", bound="VectorE", dtypes=("bfloat16",)),
    ])
    s = summarize(result, "7", "2.13.1+cpu")
    assert (s.backend, s.hardware, s.cost_model_version, s.torch_version) == ("simulated", "trn2", "7", "2.13")
    assert s.variant == "simulated:trn2"
    assert s.total_device_time_us == 12.0
    assert set(s.ops) == {"aten::mm", "aten::add"}
    assert s.ops["aten::mm"] == OpSummary(3, 11.0, "Tensor", 30, 18, 11.0 / 12.0, "attn.q",
                                          {"attn.q": 6.0, "mlp.up": 5.0}, bound="TensorE",
                                          dtype="float32")
    assert s.ops["aten::add"] == OpSummary(1, 1.0, "Vector", 10, 6, 1.0 / 12.0, "", {"": 1.0},
                                           bound="VectorE", dtype="bfloat16")
    assert [name for name, _ in s.ranked()] == ["aten::mm", "aten::add"]


def test_torch_minor_version():
    assert torch_minor_version("2.13.0+cpu") == "2.13"
    assert torch_minor_version("2.4.1") == "2.4"
    assert torch_minor_version("2.14.0a0+git123") == "2.14"


# --- ops the baseline has at 0 us -------------------------------------------------------------------

def test_an_op_hidden_at_0_us_in_the_baseline_that_now_takes_time_is_a_regression():
    """Graph execution charges an op what it adds to the schedule: one hidden behind other
    engines is at 0 us in the baseline, and is never one of its hotspots. If it now takes a
    hotspot's time, that is as new as a new op, and said as such."""
    base = summary({"aten::mm": (4, 100.0), "aten::gelu": (1, 0.0)})
    now = summary({"aten::mm": (4, 100.0), "aten::gelu": (1, 30.0)})
    verdict = compare(base, now, POLICY)
    assert verdict.status == Status.REGRESSION
    findings = [(f.op, f.kind.value, f.reason) for f in verdict.regressions if f.op != TOTAL]
    assert findings == [("aten::gelu", "new",
                         "was hidden behind other work (0 us), now 23% of the time")]
    # still hidden, or taking less than the floor: nothing to say
    assert compare(base, base, POLICY).status == Status.PASS
    small = summary({"aten::mm": (4, 100.0), "aten::gelu": (1, 0.5)})
    assert not [f for f in compare(base, small, POLICY).regressions if f.op == "aten::gelu"]
