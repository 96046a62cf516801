"""Device memory gated like time (issue 18, item 1), the gate's side: an entry's memory in
baseline schema 5 (older entries read as time only), the peak's own threshold and floor, the
test's memory limit (with or without a baseline), and the reason a peak moved."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pytest_neuronprof.errors import BaselineError
from pytest_neuronprof.formatting import format_bytes
from pytest_neuronprof.gate.baseline import (MEMORY_SCHEMA_VERSION, SCHEMA_VERSION, BaselineStore,
                                             parse_baseline_text, render_baseline)
from pytest_neuronprof.gate.compare import (PEAK, GatePolicy, Kind, Status, compare, limit_findings,
                                            uncompared)
from pytest_neuronprof.gate.memory import MemorySummary, PeakGroup, PeakTensor, memory_reason
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary

NODE = "tests/test_llama.py::test_step"
MiB = 2**20
GiB = 2**30
WEIGHT = PeakTensor(512 * MiB, (4096, 32768), "float32", "(resident)", "")
ACT = PeakTensor(64 * MiB, (8, 2048, 1024), "float32", "aten::mm", "layers.0.mlp.up")


def summary(peak: int | None = 1 * GiB, resident: int = 512 * MiB,
            at_peak: tuple[PeakTensor, ...] = (WEIGHT, ACT), time_us: float = 100.0) -> ProfileSummary:
    mm = OpSummary(4, time_us, "Tensor", 10**9, 10**6, 1.0, "mlp", bound="TensorE", dtype="float32")
    memory = None if peak is None else MemorySummary(peak, resident, at_peak)
    return ProfileSummary("simulated", "trn2", "3", "2.13", time_us, {"aten::mm": mm}, memory=memory)


def test_format_bytes_reads_as_device_memory_is_quoted():
    assert [format_bytes(n) for n in (0, 1023, 1536, 24 * GiB, 33.5e9, MiB - 1)] == [
        "0 B", "1023 B", "1.5 KiB", "24 GiB", "31.2 GiB", "1 MiB"]


def test_memory_is_written_and_read_back_byte_for_byte(tmp_path):
    entry = replace(summary(), memory=MemorySummary(GiB, 512 * MiB, (WEIGHT, ACT), 20 * MiB, 3 * MiB))
    text = render_baseline({NODE: {entry.variant: entry}})
    doc = json.loads(text)
    assert doc["schema_version"] == SCHEMA_VERSION == 7 and MEMORY_SCHEMA_VERSION == 5  # memory since 5
    memory = doc["tests"][NODE]["simulated:trn2"]["memory"]
    assert memory["peak_bytes"] == GiB and memory["resident_bytes"] == 512 * MiB
    assert memory["sbuf_peak_bytes"] == 20 * MiB and memory["spilled_bytes"] == 3 * MiB
    assert memory["at_peak"][1] == {"bytes": 64 * MiB, "dtype": "float32", "module": "layers.0.mlp.up",
                                    "op": "aten::mm", "shape": [8, 2048, 1024]}
    back = parse_baseline_text(tmp_path / "b.json", text)[NODE]["simulated:trn2"]
    assert back == entry
    assert render_baseline({NODE: {entry.variant: back}}) == text


def test_an_entry_without_memory_writes_no_memory_key():
    entry = summary(peak=None)
    assert "memory" not in json.loads(render_baseline({NODE: {entry.variant: entry}}))["tests"][NODE]["simulated:trn2"]


def test_a_schema_4_file_reads_as_time_only_and_is_never_a_memory_regression(tmp_path):
    old = summary(peak=None)
    text = render_baseline({NODE: {old.variant: old}}).replace('"schema_version": 7', '"schema_version": 4')
    path = tmp_path / "tests" / "test_llama.json"
    path.parent.mkdir()
    path.write_text(text)
    store = BaselineStore(tmp_path)
    loaded = store.load(NODE, "simulated:trn2")
    assert loaded is not None and loaded.memory is None
    huge = summary(peak=100 * GiB)  # far more than any threshold: still no memory finding
    verdict = compare(loaded, huge, GatePolicy())
    assert verdict.status == Status.PASS and verdict.regressions == ()


def test_memory_in_a_file_of_an_older_schema_is_a_broken_file(tmp_path):
    entry = summary()
    text = render_baseline({NODE: {entry.variant: entry}}).replace('"schema_version": 7', '"schema_version": 4')
    with pytest.raises(BaselineError, match="has device memory, which needs schema_version 5"):
        parse_baseline_text(tmp_path / "b.json", text)


@pytest.mark.parametrize("field, value, problem", [
    ("peak_bytes", -1, "peak_bytes"),
    ("peak_bytes", 1.5, "peak_bytes"),
    ("resident_bytes", 2 * GiB, "larger than its peak_bytes"),
    ("at_peak", "x", "at_peak"),
    ("colour", 1, "colour"),
])
def test_a_bad_memory_value_is_named(tmp_path, field, value, problem):
    entry = summary()
    doc = json.loads(render_baseline({NODE: {entry.variant: entry}}))
    doc["tests"][NODE]["simulated:trn2"]["memory"][field] = value
    with pytest.raises(BaselineError, match=problem):
        parse_baseline_text(tmp_path / "b.json", json.dumps(doc))


def test_a_peak_beyond_its_threshold_is_a_regression_that_names_the_new_tensor():
    kv = PeakTensor(256 * MiB, (1, 32, 8192, 128), "float32", "aten::cat", "layers.0.attn")
    grown = summary(peak=GiB + 256 * MiB, at_peak=(WEIGHT, kv, ACT))
    verdict = compare(summary(), grown, GatePolicy())
    assert verdict.status == Status.REGRESSION
    (finding,) = verdict.regressions
    assert (finding.kind, finding.op, finding.baseline, finding.current) == (
        Kind.MEMORY, PEAK, GiB, GiB + 256 * MiB)
    assert finding.reason == ("allocated +256 MiB; new at the peak: float32[1,32,8192,128] from "
                              "aten::cat in layers.0.attn, 256 MiB")
    assert finding.cells()[2:5] == ["1 GiB", "1.2 GiB", "+25.0%"]


def test_resident_growth_is_said_as_such():
    weights = PeakGroup("(resident)", "", (4096, 32768), "float32", 1, 512 * MiB)
    act = PeakGroup("aten::mm", "layers.0.mlp.up", (8, 2048, 1024), "float32", 1, 64 * MiB)
    before = replace(summary(), memory=MemorySummary(GiB, 512 * MiB, live=(weights, act)))
    master = replace(weights, count=2, bytes=GiB)  # a second copy of the same origin
    more = replace(summary(), memory=MemorySummary(GiB + 512 * MiB, GiB, live=(master, act)))
    (finding,) = compare(before, more, GatePolicy()).regressions
    assert finding.reason == ("resident +512 MiB; more at the peak: float32[4096,32768] resident, "
                              "512 MiB (2 now)")


def test_growth_within_the_threshold_or_below_the_floor_passes():
    assert compare(summary(), summary(peak=GiB + 50 * MiB), GatePolicy()).status == Status.PASS  # +4.9 %
    small = summary(peak=1 * MiB, resident=0, at_peak=())
    assert compare(small, summary(peak=1 * MiB + 60 * 1024, resident=0, at_peak=()),
                   GatePolicy()).status == Status.PASS  # +5.9 %, but 60 KiB: below the floor
    assert compare(small, summary(peak=1 * MiB + 60 * 1024, resident=0, at_peak=()),
                   GatePolicy(memory_floor_bytes=1024)).status == Status.REGRESSION
    assert compare(summary(), summary(peak=GiB + 50 * MiB),
                   GatePolicy(memory_threshold=0.02)).status == Status.REGRESSION


def test_a_smaller_peak_is_an_improvement():
    verdict = compare(summary(), summary(peak=GiB - 256 * MiB), GatePolicy())
    assert verdict.status == Status.IMPROVED
    assert [f.kind for f in verdict.improvements] == [Kind.MEMORY]
    assert verdict.improvements[0].reason.startswith("allocated -256 MiB")


def test_a_memory_regression_alone_fails_while_time_is_unchanged():
    verdict = compare(summary(), summary(peak=2 * GiB), GatePolicy())
    assert verdict.failed and [f.kind for f in verdict.regressions] == [Kind.MEMORY]


def test_a_peak_over_the_limit_does_not_fit_with_or_without_a_baseline():
    policy = GatePolicy(memory_limit=24 * GiB, memory_limit_label="24 GiB per NeuronCore")
    big = summary(peak=int(31.2 * GiB))
    (finding,) = limit_findings(big, policy)
    assert finding.kind == Kind.FIT
    assert finding.reason == "does not fit on trn2: 31.2 GiB peak, 24 GiB per NeuronCore"
    first_run = uncompared(big, policy, Status.NO_BASELINE, "no baseline for simulated:trn2")
    assert first_run.status == Status.DOES_NOT_FIT and first_run.failed
    assert first_run.message == "no baseline for simulated:trn2"
    recording = uncompared(big, policy, Status.RECORDED)
    assert recording.status == Status.RECORDED and recording.failed  # written, and failed
    assert compare(big, big, policy).failed  # unchanged, still too large
    fits = uncompared(summary(), policy, Status.NO_BASELINE)
    assert (fits.status, fits.failed) == (Status.NO_BASELINE, False)
    assert limit_findings(big, GatePolicy()) == []  # no limit given: none applies


def test_memory_reason_without_kept_tensors_says_only_the_bytes():
    assert memory_reason(MemorySummary(GiB, 0), MemorySummary(2 * GiB, 0)) == "allocated +1 GiB"
    assert memory_reason(MemorySummary(GiB, GiB), MemorySummary(GiB, GiB)) == "same bytes"


def test_a_lower_peak_names_no_new_tensor():
    smaller = summary(peak=GiB - 256 * MiB, at_peak=(WEIGHT, PeakTensor(1, (1,), "float32", "aten::add", "")))
    assert memory_reason(summary().memory, smaller.memory) == "allocated -256 MiB"


def test_allow_on_the_peak_lists_its_change_as_allowed_and_passes():
    policy = GatePolicy(allow={PEAK: "KV cache doubled for 8k context, #77"})
    verdict = compare(summary(), summary(peak=2 * GiB), policy)
    assert verdict.status == Status.PASS and verdict.regressions == ()
    (allowed,) = verdict.allowed
    assert (allowed.kind, allowed.op, allowed.reason) == (Kind.ALLOWED, PEAK, "KV cache doubled for 8k context, #77")
    assert allowed.cells()[2:4] == ["1 GiB", "2 GiB"]
    # the peak's allowance is not an unknown op name
    from pytest_neuronprof.plugin.marker import unknown_op_names

    assert unknown_op_names({"allow": {PEAK: "why"}}, {"aten::mm"}) is None
    assert unknown_op_names({"ops": {PEAK: 0.1}}, {"aten::mm"}) is not None
