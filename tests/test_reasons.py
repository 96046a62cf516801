"""Why it got slower (issue 18, item 2): reasons.why() rule by rule, the gate's findings that
use it, and two regressions in pytest runs whose failures name the physical reason."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_neuronprof.gate.compare import GatePolicy, Kind, compare
from pytest_neuronprof.gate.reasons import MAX_REASON_CHARS, why
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary, RoundSamples
from pytest_neuronprof.vocabulary import BOUNDS, GRAPH

pytest_plugins = ["pytester"]

MM = OpSummary(count=12, device_time_us=100.0, engine="Tensor", flops=10**9, bytes=10**6,
               share=1.0, bound="TensorE", dtype="bfloat16")


def op(**changes: Any) -> OpSummary:
    return replace(MM, **changes)


# --- why(), rule by rule ----------------------------------------------------------------------------

def test_dtype_to_float32_on_tensore_names_the_fp32_rate_and_contrasts_flops():
    """The issue's first example: the same flops, twice the bytes, the slower fp32 rate."""
    slower = op(device_time_us=188.0, bytes=2 * 10**6, dtype="float32")
    assert why(MM, slower) == "flops x1.0, bytes x2.0, float32 (was bfloat16): TensorE at the fp32 rate"
    assert why(slower, MM) == "flops x1.0, bytes x0.5, bfloat16 (was float32): TensorE at the bf16 rate"


def test_more_smaller_calls_that_became_fixed_cost_bound():
    """The issue's second example: the same flops in 8x the calls."""
    split = op(count=96, device_time_us=400.0, bytes=4 * 10**6, bound="fixed cost")
    assert why(MM, split) == "12 -> 96 calls, each 8x smaller: fixed cost per call now dominates"
    assert why(split, MM) == "96 -> 12 calls, each 8x larger: now TensorE-bound (was fixed cost)"
    assert why(MM, split, note="(same total work)") == (
        "12 -> 96 calls, each 8x smaller (same total work): fixed cost per call now dominates")
    same_each = op(count=24, device_time_us=200.0, flops=2 * 10**9, bytes=2 * 10**6)
    assert why(MM, same_each) == "12 -> 24 calls, same work each: still TensorE-bound"


def test_calls_of_ops_without_flops_are_sized_by_bytes():
    add = op(engine="Vector", flops=0, bytes=8 * 10**6, bound="HBM", dtype="float32")
    assert why(add, replace(add, count=24, bytes=4 * 10**6, device_time_us=150.0)) == (
        "12 -> 24 calls, each 4x smaller: still HBM-bound")


def test_flops_and_bytes_ratios_beyond_5_percent_only():
    assert why(MM, op(flops=2 * 10**9, bytes=2 * 10**6, device_time_us=190.0)) == (
        "flops x2.0, bytes x2.0: still TensorE-bound")
    # flops +4 %, bytes +3 %: within rounding of tiles, not a change to name
    assert why(MM, op(flops=1_040_000_000, bytes=1_030_000, device_time_us=130.0)) == (
        "same work, other shapes: still TensorE-bound")
    # one changed: the other is shown for contrast; bytes alone where there are no flops
    assert why(MM, op(flops=3 * 10**9, device_time_us=290.0)) == "flops x3.0, bytes x1.0: still TensorE-bound"
    exp = op(engine="Scalar", flops=0, bound="ScalarE", dtype="float32")
    assert why(exp, replace(exp, bytes=64 * 10**6, device_time_us=900.0)) == "bytes x64: still ScalarE-bound"
    assert why(MM, op(flops=10**6, bytes=10**5, device_time_us=10.0)) == (
        "flops x0.001, bytes x0.1: still TensorE-bound")


def test_bound_changed_and_engine_changed():
    hbm = op(bytes=30 * 10**6, device_time_us=400.0, bound="HBM")
    assert why(MM, hbm) == "flops x1.0, bytes x30: now HBM-bound (was TensorE)"
    moved = op(engine="Vector", bound="VectorE", device_time_us=300.0)
    assert why(MM, moved) == "engine Vector (was Tensor): now VectorE-bound (was TensorE)"


def test_costed_by_formula_and_the_bytes_fallback():
    fallback = op(uncosted=True, bound="HBM", device_time_us=300.0)
    assert why(fallback, MM) == "now costed by its formula (was the bytes fallback): now TensorE-bound (was HBM)"
    assert why(MM, fallback) == "now the bytes fallback (was costed by its formula): now HBM-bound (was TensorE)"


def test_same_work_reads_by_execution_mode_and_direction():
    slower, faster = op(device_time_us=150.0), op(device_time_us=50.0)
    assert why(MM, slower, execution=GRAPH) == "same work, slower schedule: still TensorE-bound"
    assert why(MM, faster, execution=GRAPH) == "same work, faster schedule: still TensorE-bound"
    assert why(MM, slower) == "same work, other shapes: still TensorE-bound"  # eager


def test_measured_backends_keep_their_wording_and_name_no_limit():
    slower = op(device_time_us=150.0, bound="none", dtype="")
    assert why(MM, slower, measured=True) == "hotspot slower"
    assert why(slower, MM, measured=True) == "hotspot faster"
    assert why(MM, op(flops=2 * 10**9, bound="none"), measured=True) == "flops x2.0, bytes x1.0"


def test_an_old_entry_without_bound_or_dtype_gives_no_empty_parts():
    old = op(bound="", dtype="")  # as read from a schema-3 file
    new = op(bytes=2 * 10**6, dtype="float32", device_time_us=188.0)
    assert why(old, new) == "flops x1.0, bytes x2.0: TensorE-bound"
    assert why(old, op(device_time_us=150.0)) == "same work, other shapes: TensorE-bound"
    assert why(old, replace(old, device_time_us=150.0)) == "same work, other shapes"
    assert why(op(bound=""), op(bound="fixed cost", count=96)) == "12 -> 96 calls, each 8x smaller: fixed-cost-bound"


def test_gone_ops():
    assert why(MM, op(count=0, device_time_us=0.0, flops=0, bytes=0)) == "no longer called"


def test_long_reasons_drop_their_least_telling_parts():
    everything = op(count=96, flops=2 * 10**9, bytes=9 * 10**6, engine="Vector", dtype="float32",
                    uncosted=True, bound="fixed cost", device_time_us=500.0)
    # the engine and the fallback (the last changes) make way for the limit: 156 characters in all
    assert why(MM, everything) == (
        "12 -> 96 calls, each 4x smaller, float32 (was bfloat16): fixed cost per call now dominates")


texts = st.sampled_from(["", "bfloat16", "float32", "x" * 80, "y" * 2_000_000])  # a hostile file's dtype
entries = st.builds(OpSummary, count=st.integers(0, 10**4), device_time_us=st.floats(0, 1e6),
                    engine=st.sampled_from(["", "Tensor", "Vector", "-"]), flops=st.integers(0, 10**15),
                    bytes=st.integers(0, 10**12), share=st.just(0.5),
                    uncosted=st.booleans(), bound=st.sampled_from(["", *BOUNDS]), dtype=texts)


@given(entries, entries, st.booleans(), st.sampled_from(["eager", "graph"]))
def test_any_two_entries_give_one_short_line_without_empty_parts(old, new, measured, execution):
    text = why(old, new, execution=execution, measured=measured)
    assert text and len(text) <= MAX_REASON_CHARS and "\n" not in text
    assert "(was )" not in text and not text.endswith(":") and ", ," not in text and "  " not in text
    assert not text.startswith((",", ":"))


# --- the gate's findings ----------------------------------------------------------------------------

def profile(ops: dict[str, OpSummary], execution: str = "eager", backend: str = "simulated",
            samples: RoundSamples | None = None) -> ProfileSummary:
    total = sum(o.device_time_us for o in ops.values())
    return ProfileSummary(backend, "trn2", "1", "2.13", total, ops, samples, execution)


def test_slower_faster_and_calls_findings_say_why():
    split = op(count=96, device_time_us=400.0, bytes=4 * 10**6, bound="fixed cost")
    verdict = compare(profile({"aten::mm": MM}), profile({"aten::mm": split}), GatePolicy())
    reasons = {f.kind: f.reason for f in verdict.regressions}
    assert reasons == {
        Kind.TOTAL: "total device time",
        Kind.SLOWER: "12 -> 96 calls, each 8x smaller: fixed cost per call now dominates",
        Kind.CALLS: "12 -> 96 calls, each 8x smaller (same total work): fixed cost per call now dominates"}
    back = compare(profile({"aten::mm": split}), profile({"aten::mm": MM}), GatePolicy())
    assert [f.reason for f in back.improvements] == [
        "total device time", "96 -> 12 calls, each 8x larger: now TensorE-bound (was fixed cost)"]
    # twice the same calls: twice the work, not a lost fusion
    twice = op(count=24, flops=2 * 10**9, bytes=2 * 10**6, device_time_us=200.0)
    calls = [f for f in compare(profile({"aten::mm": MM}), profile({"aten::mm": twice}),
                                GatePolicy()).regressions if f.kind == Kind.CALLS]
    assert calls[0].reason == "12 -> 24 calls, same work each: still TensorE-bound"


def test_recomputation_keeps_its_activation_checkpointing_explanation():
    checkpointed = op(count=24, flops=2 * 10**9, bytes=2 * 10**6, device_time_us=200.0, recomputed=12)
    finding = next(f for f in compare(profile({"aten::mm": MM}), profile({"aten::mm": checkpointed}),
                                      GatePolicy()).regressions if f.kind == Kind.CALLS)
    assert finding.reason == "more calls (12 -> 24): 12 recomputed in backward (activation checkpointing)"


def test_graph_execution_same_work_is_a_schedule_change():
    slower = op(device_time_us=150.0)
    verdict = compare(profile({"aten::mm": MM}, GRAPH), profile({"aten::mm": slower}, GRAPH), GatePolicy())
    assert verdict.regressions[1].reason == "same work, slower schedule: still TensorE-bound"


def test_measured_findings_keep_their_evidence():
    rounds = 8
    before = RoundSamples((100.0,) * rounds, {"aten::mm": tuple(100.0 + i * 0.1 for i in range(rounds))})
    after = RoundSamples((150.0,) * rounds, {"aten::mm": tuple(150.0 + i * 0.1 for i in range(rounds))})
    old, new = op(bound="none", dtype=""), op(device_time_us=150.0, bound="none", dtype="")
    verdict = compare(profile({"aten::mm": old}, backend="cpu", samples=before),
                      profile({"aten::mm": new}, backend="cpu", samples=after), GatePolicy())
    reason = next(f.reason for f in verdict.regressions if f.kind == Kind.SLOWER)
    assert reason.startswith("hotspot slower (p=") and reason.endswith(", 8 vs 8 rounds)")


# --- in a pytest run ---------------------------------------------------------------------------------

SUITE = '''
import json, pathlib

import pytest, torch

KNOBS = json.loads((pathlib.Path(__file__).parent / "knobs.json").read_text())


@pytest.mark.neuron_profile
def test_linear():
    dtype = getattr(torch, KNOBS.get("dtype", "bfloat16"))
    layer = torch.nn.Linear(2048, 2048, device="meta", dtype=dtype)
    with torch.no_grad():
        layer(torch.randn(2048, 2048, device="meta", dtype=dtype))


@pytest.mark.neuron_profile
def test_matmuls():
    calls = KNOBS.get("calls", 12)
    a = torch.randn(1024 * 12 // calls, 1024, device="meta", dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device="meta", dtype=torch.bfloat16)
    for _ in range(calls):
        a @ b
'''


@pytest.fixture
def suite(pytester: pytest.Pytester, lean_inner_runs: None) -> pytest.Pytester:
    pytester.makepyfile(test_work=SUITE)
    (pytester.path / "knobs.json").write_text("{}")
    result = pytester.runpytest("--neuron-baseline")
    result.assert_outcomes(passed=2)
    return pytester


def reasons(pytester: pytest.Pytester, test: str) -> dict[tuple[str, str], str]:
    """(kind, op) -> reason of the test's regressions, from the JSON report."""
    report = json.loads((pytester.path / "report.json").read_text())
    findings = report["tests"][f"test_work.py::{test}"]["verdict"]["regressions"]
    return {(f["kind"], f["op"]): f["reason"] for f in findings}


def test_a_bf16_linear_made_fp32_fails_naming_the_dtype_and_tensore(suite: pytest.Pytester):
    (suite.path / "knobs.json").write_text(json.dumps({"dtype": "float32"}))
    result = suite.runpytest("--neuron-report", "report.json", "test_work.py::test_linear")
    result.assert_outcomes(failed=1)
    reason = "flops x1.0, bytes x2.0, float32 (was bfloat16): TensorE at the fp32 rate"
    result.stdout.fnmatch_lines([f"aten::addmm * us * us * +* 10% * {reason}"])
    found = reasons(suite, "test_linear")
    assert found[("slower", "aten::addmm")] == reason
    assert ("calls", "aten::addmm") not in found


def test_twelve_matmuls_made_96_smaller_ones_fail_naming_calls_and_fixed_cost(suite: pytest.Pytester):
    (suite.path / "knobs.json").write_text(json.dumps({"calls": 96}))
    result = suite.runpytest("--neuron-report", "report.json", "test_work.py::test_matmuls")
    result.assert_outcomes(failed=1)
    slower = "12 -> 96 calls, each 8x smaller: fixed cost per call now dominates"
    # one row: the time and the calls, with the calls' reason, which says the time's and more
    result.stdout.fnmatch_lines(["aten::mm * us (12 calls) * us (96 calls) * +* 10% * 12 -> 96 calls, each 8x "
                                 "smaller (same total work): fixed cost per call now dominates"])
    failure = result.stdout.str().split("short test summary info")[0]  # CI=true repeats it there
    assert sum(line.startswith("aten::mm ") for line in failure.splitlines()) == 1
    assert reasons(suite, "test_matmuls")[("slower", "aten::mm")] == slower  # the report keeps both findings
    assert reasons(suite, "test_matmuls")[("calls", "aten::mm")].startswith("12 -> 96 calls")


def test_a_schema_3_baseline_entry_gives_a_reason_without_empty_parts(suite: pytest.Pytester):
    path = suite.path / "baselines" / "test_work.json"
    doc = json.loads(path.read_text())
    doc["schema_version"] = 3
    for variants in doc["tests"].values():
        for entry in variants.values():
            entry.pop("memory", None)  # schema 5's
            for entry_op in entry["ops"].values():
                del entry_op["bound"], entry_op["dtype"]
    path.write_text(json.dumps(doc))
    (suite.path / "knobs.json").write_text(json.dumps({"dtype": "float32"}))
    result = suite.runpytest("--neuron-report", "report.json", "test_work.py::test_linear")
    result.assert_outcomes(failed=1)
    # the dtype before is unknown: not said; the bound now is known: said without a "was"
    found = reasons(suite, "test_linear")
    assert found[("slower", "aten::addmm")] == "flops x1.0, bytes x2.0: TensorE-bound"
    # the weights' initialisation ops got slower too: none of their reasons has an empty part
    assert len(found) > 2 and not [r for r in found.values() if "was" in r or r.endswith(":")]
