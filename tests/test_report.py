"""An outcome's outputs: TestOutcome's JSON round trip (gate/outcome.py, the xdist wire format),
the terminal's tables and notices (outputs/terminal.py) and the JSON report
(outputs/json_report.py)."""

from __future__ import annotations

import json
import math

import pytest

from pytest_neuronprof.gate.compare import TOTAL, Finding, GatePolicy, Status, Verdict, compare
from pytest_neuronprof.gate.outcome import TestOutcome as Outcome
from pytest_neuronprof.formatting import format_delta, format_us
from pytest_neuronprof.outputs.json_report import REPORT_VERSION, json_report
from pytest_neuronprof.outputs.terminal import (failure_section, findings_table, improvements_text, notices,
                                      session_table, top_hotspot)
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary


def summary(ops: dict[str, tuple[int, float]], hardware: str = "trn2") -> ProfileSummary:
    total = sum(t for _, t in ops.values())
    return ProfileSummary("simulated", hardware, "1", "2.13", total, {
        # shares rounded as the files store them, so JSON round trips are exact
        name: OpSummary(count, t, "Tensor", 1000, 2000, round(t / total, 6), f"model.{name[6:]}")
        for name, (count, t) in ops.items()})


BASE = summary({"aten::mm": (1, 100.0), "aten::add": (1, 20.0)})
SLOW = summary({"aten::mm": (2, 150.0), "aten::add": (1, 20.0), "aten::exp": (1, 30.0)})


def regressed(nodeid: str = "tests/test_m.py::test_a") -> Outcome:
    verdict = compare(BASE, SLOW, GatePolicy(allow={"aten::add": "expected"}))
    return Outcome(nodeid, ("tests/test_m.py", 12), verdict, SLOW, BASE)


def no_baseline(nodeid: str = "tests/test_m.py::test_new") -> Outcome:
    return Outcome(nodeid, ("tests/test_m.py", 30), Verdict(Status.NO_BASELINE, message="no baseline for simulated:trn2"),
                       BASE, None)


# --- formatting ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,text", [
    (0.0, "0.000 us"), (2.1356, "2.136 us"), (999.9994, "999.999 us"), (1000.0, "1.000 ms"),
    (26117.3, "26.117 ms"), (1.5e6, "1.500 s"),
])
def test_format_us(value, text):
    assert format_us(value) == text


@pytest.mark.parametrize("delta,text", [
    (None, "-"), (math.inf, "new"), (0.0, "+0.0%"), (0.5, "+50.0%"), (-0.1234, "-12.3%"), (1.0, "+100.0%"),
])
def test_format_delta(delta, text):
    assert format_delta(delta) == text


def test_top_hotspot():
    assert top_hotspot(Outcome("t.py::a", ("t.py", 1), Verdict(Status.PASS), BASE, BASE)) == "aten::mm (83%)"
    empty = ProfileSummary("simulated", "trn2", "1", "2.13", 0.0, {})
    assert top_hotspot(Outcome("t.py::a", ("t.py", 1), Verdict(Status.PASS), empty, None)) == "-"


# --- TestOutcome ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [regressed, no_baseline])
def test_outcome_json_round_trip(make):
    outcome = make()
    data = outcome.to_json()
    wire = json.loads(json.dumps(data, allow_nan=False))  # what xdist sends: plain JSON
    back = Outcome.from_json(wire)
    assert back == outcome
    assert back.to_json() == data
    assert back.delta == outcome.delta


def test_outcome_json_contents():
    data = regressed().to_json()
    assert data["nodeid"] == "tests/test_m.py::test_a"
    assert data["location"] == ["tests/test_m.py", 12]
    assert data["verdict"]["status"] == "regression"
    assert [(f["kind"], f["op"], f["delta"]) for f in data["verdict"]["regressions"]] == [
        ("total", TOTAL, 0.8), ("slower", "aten::mm", 0.5), ("calls", "aten::mm", 1.0), ("new", "aten::exp", None)]
    assert data["verdict"]["regressions"][0] == {
        "kind": "total", "op": TOTAL, "module": "", "modules": [], "baseline": 100.0, "current": 180.0,
        "delta": 0.8, "threshold": 0.1, "reason": "total device time"}
    assert data["current"]["total_device_time_us"] == 200.0
    assert data["baseline"]["ops"]["aten::mm"]["count"] == 1


def test_outcome_delta():
    assert regressed().delta == pytest.approx(200.0 / 120.0 - 1)
    assert no_baseline().delta is None
    incomparable = Outcome("t.py::x", ("t.py", 1), Verdict(Status.INCOMPARABLE, message="m"), SLOW, BASE)
    assert incomparable.delta is None
    zero = ProfileSummary("simulated", "trn2", "1", "2.13", 0.0, {})
    assert Outcome("t.py::x", ("t.py", 1), Verdict(Status.PASS), BASE, zero).delta is None


# --- tables ---------------------------------------------------------------------------------------------

def _rows(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines()]


def test_failure_section():
    text = failure_section(regressed())
    lines = text.splitlines()
    assert lines[0] == ("device time regression on simulated:trn2 "
                        "(total 120.000 us -> 200.000 us, +66.7%); largest: aten::mm +50.000 us (+50.0%)")
    assert lines[2].split() == ["op", "module", "baseline", "current", "delta", "threshold", "reason"]
    assert lines[4].split() == ["(total)", "-", "100.000", "us", "180.000", "us", "+80.0%", "10%",
                                "total", "device", "time"]
    # one row per op: its calls beside its time, one reason (the calls' says more)
    assert lines[5].split() == ["aten::mm", "model.mm", "100.000", "us", "(1", "call)", "150.000", "us",
                                "(2", "calls)", "+50.0%", "10%",
                                *"1 -> 2 calls, each 2x smaller (same total work)".split()]
    assert lines[6].split() == ["aten::exp", "model.exp", "0.000", "us", "30.000", "us", "new", "10%",
                                "new", "op", "takes", "15%", "of", "the", "time"]
    assert sum(line.startswith("aten::mm") for line in lines) == 1
    assert lines[-1] == ("If this change is intended, update the baseline: "
                         "pytest --neuron-baseline 'tests/test_m.py::test_a'")
    assert "allowed changes" not in text


def test_failure_section_lists_allowed_changes():
    base = summary({"aten::mm": (1, 100.0), "aten::cat": (1, 50.0)})
    current = summary({"aten::mm": (1, 150.0), "aten::cat": (1, 90.0)})
    verdict = compare(base, current, GatePolicy(allow={"aten::cat": "new KV layout #123"}))
    text = failure_section(Outcome("t.py::x", ("t.py", 1), verdict, current, base))
    assert "\nallowed changes:\n" in text
    allowed = [line.split() for line in text.splitlines() if line.startswith("aten::cat")]
    assert allowed == [["aten::cat", "model.cat", "50.000", "us", "90.000", "us", "+80.0%", "10%",
                        "new", "KV", "layout", "#123"]]


def test_findings_table_shows_fractional_thresholds():
    finding = Finding("slower", "aten::mm", "m", 100.0, 110.0, 0.025, "hotspot slower")
    row = findings_table([finding]).splitlines()[2].split()
    assert row[6:8] == ["+10.0%", "2.5%"]


def test_session_table():
    recorded = Outcome("tests/test_m.py::test_r", ("tests/test_m.py", 40), Verdict(Status.RECORDED), BASE, None)
    text = session_table([regressed(), no_baseline(), recorded])
    rows = _rows(text)
    assert rows[0] == ["test", "device", "time", "delta", "top", "hotspot", "verdict"]
    assert rows[2] == ["tests/test_m.py::test_a", "200.000", "us", "+66.7%", "aten::mm", "(75%)", "regression"]
    assert rows[3] == ["tests/test_m.py::test_new", "120.000", "us", "-", "aten::mm", "(83%)", "new"]
    assert rows[4] == ["tests/test_m.py::test_r", "120.000", "us", "-", "aten::mm", "(83%)", "recorded"]


def test_improvements_text_gives_the_update_command():
    faster = summary({"aten::mm": (1, 50.0), "aten::add": (1, 20.0)})
    verdict = compare(BASE, faster, GatePolicy())
    assert verdict.status == Status.IMPROVED
    outcomes = [Outcome("t.py::a", ("t.py", 1), verdict, faster, BASE),
                Outcome("t.py::b", ("t.py", 5), verdict, faster, BASE), no_baseline()]
    text = improvements_text(outcomes)
    lines = text.splitlines()
    assert lines[0] == "t.py::a: faster than its baseline"
    assert lines[3].split()[:7] == ["(total)", "-", "120.000", "us", "70.000", "us", "-41.7%"]
    assert lines[-1] == "Lock the gains in: pytest --neuron-baseline 't.py::a' 't.py::b'"
    assert improvements_text([regressed(), no_baseline()]) == ""


def test_notices_for_tests_that_were_not_compared():
    incomparable = Outcome("t.py::old", ("t.py", 1), Verdict(Status.INCOMPARABLE, message="recorded with X"),
                               SLOW, BASE)
    outcomes = [regressed(), no_baseline(), incomparable]
    assert notices(outcomes, strict=False) == [
        "tests/test_m.py::test_new: no baseline for simulated:trn2 (passes); record it with "
        "pytest --neuron-baseline 'tests/test_m.py::test_new'",
        "t.py::old: not compared: recorded with X",
    ]
    assert "(fails under --neuron-strict)" in notices(outcomes, strict=True)[0]


def test_update_command():
    from pytest_neuronprof.formatting import record_command

    assert record_command("tests/test_m.py::test_a[2-x]") == "pytest --neuron-baseline 'tests/test_m.py::test_a[2-x]'"


# --- JSON report ------------------------------------------------------------------------------------------

def test_json_report():
    outcomes = [regressed("b.py::test"), no_baseline("a.py::test"),
                Outcome("c.py::test", ("c.py", 1), Verdict(Status.PASS), BASE, BASE)]
    text = json_report(outcomes)
    assert text == json_report(list(reversed(outcomes)))  # deterministic
    doc = json.loads(text)
    # 2: modules, baseline keys, uncosted ops; 3: bound, dtype; 4: memory; 5: does-not-fit,
    # replaced ops, findings by impact, what is live at the peak by origin
    assert doc["report_version"] == REPORT_VERSION == 6
    assert doc["counts"] == {"no-baseline": 1, "pass": 1, "regression": 1}
    assert doc["regressions"] == 1 and doc["recorded"] == 0 and doc["does_not_fit"] == 0
    assert list(doc["tests"]) == ["a.py::test", "b.py::test", "c.py::test"]
    test = doc["tests"]["b.py::test"]
    assert test["verdict"]["status"] == "regression"
    assert [f["reason"] for f in test["verdict"]["regressions"]] == [
        "total device time", "1 -> 2 calls, each 2x smaller",
        "1 -> 2 calls, each 2x smaller (same total work)", "new op takes 15% of the time"]
    assert test["current"]["total_device_time_us"] == 200.0
    assert test["current"]["ops"]["aten::exp"]["device_time_us"] == 30.0
    assert test["baseline"]["total_device_time_us"] == 120.0
    assert doc["tests"]["a.py::test"]["baseline"] is None
    assert Outcome.from_json(test) == outcomes[0]
    empty = json.loads(json_report([]))
    assert empty.pop("plugin")["name"] == "pytest-neuronprof"  # who wrote it, in which run
    assert empty == {"report_version": REPORT_VERSION, "counts": {}, "regressions": 0,
                     "does_not_fit": 0, "recorded": 0, "tests": {}}


def test_a_version_2_report_is_read_with_its_modules_and_without_bound_or_dtype():
    """Version 3 added each op's bound and dtype; a version 2 file (written before) has neither
    and keeps its time per module, which only version 1 lacked: `neuronprof` reads it as such."""
    from pathlib import Path

    from pytest_neuronprof.cli.inputs import _report_outcomes

    outcome = regressed("b.py::test")
    doc = json.loads(json_report([outcome]))
    test = doc["tests"]["b.py::test"]
    for side in ("current", "baseline"):
        for op in test[side]["ops"].values():
            del op["bound"], op["dtype"]
    test["current"]["ops"]["aten::exp"]["modules"] = {"a": 10.0, "b": 20.0}
    (read,) = _report_outcomes(Path("r.json"), {**doc, "report_version": 2})
    exp = read.current.ops["aten::exp"]
    assert exp.breakdown() == {"a": 10.0, "b": 20.0} and (exp.bound, exp.dtype) == ("", "")
    with pytest.raises(Exception, match=f"report_version {REPORT_VERSION + 1} is not supported.*a newer "
                       "pytest-neuronprof wrote it: upgrade this one"):
        _report_outcomes(Path("r.json"), {**doc, "report_version": REPORT_VERSION + 1})
    with pytest.raises(Exception, match="report_version 0 is not supported.*re-run pytest with --neuron-report"):
        _report_outcomes(Path("r.json"), {**doc, "report_version": 0})
