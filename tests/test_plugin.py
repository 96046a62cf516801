"""The pytest plugin end to end, with pytester: record, gate, report, options, xdist, JUnit.

Each test writes a small suite whose profiled code is small fp32 torch work; a ``knobs.json``
next to it changes that work between runs (matrix size, a split matmul, a new op), so one
suite can be recorded and then regress in each way the gate knows. Expected numbers are derived
here from the hardware profile's TOML figures by the formulas of docs/cost-model.md, without
running the profiler.
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pytest_neuronprof.costmodel import TensorMeta
from pytest_neuronprof.costmodel.profiles import HardwareProfile, load_hardware
from pytest_neuronprof.costmodel.registry import op_cost
from pytest_neuronprof.costmodel.roofline import Timing, device_time
from pytest_neuronprof.formatting import format_delta
from pytest_neuronprof.gate.baseline import SCHEMA_VERSION
from pytest_neuronprof.outputs.trace_files import trace_file_name


pytest_plugins = ["pytester"]
# The short test summary shows a failed test's message after its node id (" - device time
# regression ...") from pytest 9; before, where the report's longrepr is a string, as the
# plugin's is, the line ends at the node id.
REASON = " - device time regression*" if pytest.version_tuple >= (9,) else ""


@pytest.fixture(autouse=True)
def lean_inner_runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Inner runs skip hypothesis' plugin: its terminal summary re-imports (and assertion-
    rewrites) hypothesis on every in-process run, about 1.5 s each."""
    # These suites gate device time; WORK's knobs change its tensors' sizes too, which would add
    # findings of the peak of device memory to every one of them: the memory gate has its own
    # tests (test_memory_*.py), so it is set out of reach here.
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:cacheprovider "
                       "--neuron-memory-threshold=100000%")
    # Under GitHub Actions the plugin annotates regressions and appends to the step summary:
    # the deliberate regressions of these inner runs must not land in the real CI job's summary.
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)

# A workload shaped by knobs.json: n (square mm size), split (the same mm as two half mms, a
# lost fusion: more calls, nearly the same time), exp (size of an extra exp, a new op).
WORK = '''
import json
import pathlib

import pytest
import torch

HERE = pathlib.Path(__file__).parent


def knobs():
    path = HERE / "knobs.json"
    return json.loads(path.read_text()) if path.exists() else {{}}


@pytest.fixture
def work():
    k = knobs()
    n = k.get("n", 64)
    a = torch.randn(n, n)
    h = torch.randn(n // 2, n)
    x = torch.randn(k.get("exp", 1), k.get("exp", 1))

    def run():
        if k.get("split"):
            h @ a
            h @ a
        else:
            a @ a
        if k.get("exp"):
            torch.exp(x)

    return run


@pytest.mark.neuron_profile{marker}
def test_work(work):
    work()
'''

NODE = "test_work.py::test_work"
# Why WORK's mm got slower from n=64 to n=512 (reasons.why): 8^3 the flops, 8^2 the bytes, and
# the fp32 product, a launch's fixed cost at 64, now keeps TensorE busy.
GROWN = "flops x512, bytes x64: now TensorE-bound (was fixed cost)"


def write_suite(pytester: pytest.Pytester, marker: str = "", name: str = "test_work", **knobs: Any) -> None:
    pytester.makepyfile(**{name: WORK.format(marker=f"({marker})" if marker else "")})
    set_knobs(pytester, **knobs)


def set_knobs(pytester: pytest.Pytester, **knobs: Any) -> None:
    (pytester.path / "knobs.json").write_text(json.dumps(knobs))


def baseline_file(pytester: pytest.Pytester, name: str = "test_work") -> Path:
    return pytester.path / "baselines" / f"{name}.json"


def stored(pytester: pytest.Pytester, nodeid: str = NODE, variant: str = "simulated:trn2",
           name: str = "test_work", memory: bool = False) -> dict:
    """A stored entry; its device memory (test_record_then_pass checks it) left out unless asked."""
    entry = json.loads(baseline_file(pytester, name).read_text())["tests"][nodeid][variant]
    return entry if memory else {key: value for key, value in entry.items() if key != "memory"}


# --- expected numbers: the cost model's own times for WORK's ops, costed alone -------------------
#
# Not by running the profiler: each op's cost comes from the registry and its time from the
# roofline (tests/test_costmodel.py and test_costmodel3.py check those formulas against the
# profile's numbers), so a wrong number anywhere between the cost model and the baseline file
# (capture, summary, rounding, storage) fails.

FP32 = 4  # bytes per element: WORK's tensors are float32


class Op(NamedTuple):
    count: int
    us: float
    engine: str
    flops: int
    bytes: int
    bound: str  # what limits it (vocabulary.BOUNDS), as the roofline says


def profile_numbers(hardware: str) -> HardwareProfile:
    """A bundled hardware profile, as the cost model loads it."""
    return load_hardware(hardware)


def eager_timing(op: str, inputs: list[tuple[int, ...]], output: tuple[int, ...],
                 hw: HardwareProfile) -> Timing:
    """A float32 op run alone (eager) on ``hw``: its registered cost, timed by the roofline."""
    import torch

    metas = [TensorMeta(shape, torch.float32) for shape in inputs]
    return device_time(op_cost(op, metas, {}, [TensorMeta(output, torch.float32)]), hw)


def mm_timing(m: int, k: int, n: int, hw: HardwareProfile) -> Timing:
    """An fp32 (m x k) @ (k x n) on TensorE: the tile model, the throttled array's ramp, its
    launch and its DMA's start."""
    return eager_timing("aten::mm", [(m, k), (k, n)], (m, n), hw)


def exp_timing(elements: int, hw: HardwareProfile) -> Timing:
    """exp on ScalarE: its instructions over the lanes, or its transfers."""
    return eager_timing("aten::exp", [(elements,)], (elements,), hw)


def work_ops(n: int = 64, split: bool = False, exp: int = 0, hardware: str = "trn2") -> dict[str, Op]:
    """WORK's ops with these knobs, as the cost model should cost them."""
    hw = profile_numbers(hardware)
    if split:  # two (n/2 x n) @ (n x n): the flops of one n x n product, a launch more
        h = n // 2
        mm = mm_timing(h, n, n, hw)
        ops = {"aten::mm": Op(2, 2 * mm.device_time_us, "Tensor", 2 * (2 * h * n * n),
                              2 * FP32 * (h * n + n * n + h * n), mm.bound)}
    else:
        mm = mm_timing(n, n, n, hw)
        ops = {"aten::mm": Op(1, mm.device_time_us, "Tensor", 2 * n ** 3, FP32 * 3 * n * n, mm.bound)}
    if exp:
        e = exp_timing(exp * exp, hw)
        ops["aten::exp"] = Op(1, e.device_time_us, "Scalar", 0, 2 * FP32 * exp * exp, e.bound)
    return ops


def total_us(n: int, split: bool = False) -> float:
    return sum(op.us for op in work_ops(n, split).values())


def expected(n: int = 64, split: bool = False, exp: int = 0, hardware: str = "trn2") -> dict[str, Any]:
    """The baseline entry the plugin should store for WORK with these knobs, its numbers rounded
    as baseline files keep them (times to 4 decimals, shares to 6)."""
    import torch

    from pytest_neuronprof.costmodel import COST_MODEL_VERSION

    ops = work_ops(n, split, exp, hardware)
    total = sum(op.us for op in ops.values())
    return {
        "backend": "simulated", "hardware": hardware, "cost_model_version": COST_MODEL_VERSION,
        "torch_version": ".".join(torch.__version__.split("+")[0].split(".")[:2]),  # "2.13"
        "total_device_time_us": round(total, 4),
        "ops": {name: {"count": op.count, "device_time_us": round(op.us, 4), "engine": op.engine,
                       "flops": op.flops, "bytes": op.bytes, "share": round(op.us / total, 6),
                       "modules": {"": round(op.us, 4)}, "bound": op.bound, "dtype": "float32"}
                for name, op in ops.items()},
    }


def us(value: float) -> str:
    from pytest_neuronprof.formatting import format_us

    return format_us(value)


def us4(value: float) -> str:
    """As the session table shows it: its numbers went through the JSON wire format (4 decimals)."""
    return us(round(value, 4))


def pct(old: float, new: float) -> str:
    from pytest_neuronprof.formatting import format_delta

    return format_delta(new / old - 1.0)


def record(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    result = pytester.runpytest("--neuron-baseline", *args)
    assert result.ret == 0, result.stdout.str()
    return result


# --- loading, marker, disabling -----------------------------------------------------------------------

@pytest.mark.slow  # starts a subprocess
def test_loading_the_plugin_does_not_import_torch(pytester: pytest.Pytester):
    pytester.makeconftest("""
        import sys

        def pytest_unconfigure(config):
            with open("torch_loaded.txt", "w") as f:
                f.write(str("torch" in sys.modules))
    """)
    pytester.makepyfile(test_plain="""
        import sys

        def test_plain(request):
            assert request.config.pluginmanager.has_plugin("neuronprof")
            assert "pytest_neuronprof.plugin" in sys.modules
            assert "torch" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("--neuron-baseline", "--neuron-report", "report.json",
                                           "--neuron-trace-dir", "traces")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "torch_loaded.txt").read_text() == "False"
    assert "neuron device-time profile" not in result.stdout.str()  # nothing profiled: no summary


def test_marker_is_registered_and_takes_every_argument(pytester: pytest.Pytester):
    write_suite(pytester, marker="threshold=0.2, hardware='trn2', hotspots=3, min_share=0.1, "
                                 "ops={'aten::mm': 0.05}, allow={'aten::exp': 'see #1'}, rounds=2, warmup=1",
                exp=4)  # allow= must name an op of the profile (issue 11, item 2)
    result = pytester.runpytest("--strict-markers", "-W", "error::pytest.PytestUnknownMarkWarning",
                                "--neuron-baseline")
    result.assert_outcomes(passed=1)
    pytester.runpytest("--strict-markers", "--neuron-strict").assert_outcomes(passed=1)
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.neuron_profile(threshold=None, hardware=None, *"])


@pytest.mark.slow  # starts a subprocess
def test_p_no_neuronprof_disables_the_plugin(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    # without the plugin, its options are unknown: none in the inner runs' PYTEST_ADDOPTS
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:cacheprovider")
    pytester.makepyfile(test_marked="""
        import pytest

        @pytest.mark.neuron_profile
        def test_marked():
            pass
    """)
    # in a subprocess: pytest's mark registry caches marker names across in-process runs
    result = pytester.runpytest_subprocess("-p", "no:neuronprof", "--strict-markers")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # the marker is unknown now
    result.stdout.fnmatch_lines(["*'neuron_profile' not found in `markers` configuration option*"])
    write_suite(pytester)
    result = pytester.runpytest("-p", "no:neuronprof", "test_work.py")
    result.assert_outcomes(passed=1)
    assert "neuron device-time profile" not in result.stdout.str()
    result = pytester.runpytest("-p", "no:neuronprof", "--neuron-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert not (pytester.path / "baselines").exists()


# --- recording ------------------------------------------------------------------------------------

def test_record_then_pass(pytester: pytest.Pytester):
    write_suite(pytester)
    result = record(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*= neuron device-time profile =*",
        "test *device time*delta*top hotspot*verdict",
        f"{NODE} *{us4(total_us(64))}*aten::mm (100%)*recorded",
        "baselines recorded: 1 tests; files changed: baselines/test_work.json",
    ])
    doc = json.loads(baseline_file(pytester).read_text())
    assert list(doc) == ["schema_version", "tests"] and doc["schema_version"] == SCHEMA_VERSION == 7
    assert list(doc["tests"]) == [NODE]
    assert list(doc["tests"][NODE]) == ["simulated:trn2"]
    entry = stored(pytester, memory=True)
    # the fixture's 64 x 64 fp32 input is resident; the product allocates one more of its size
    memory = entry.pop("memory")
    assert (memory["peak_bytes"], memory["resident_bytes"]) == (2 * 64 * 64 * 4, 64 * 64 * 4)
    assert sorted((t["op"], t["count"], t["bytes"]) for t in memory["live"]) == [
        ("(resident)", 1, 16384), ("aten::mm", 1, 16384)]
    assert entry == expected()
    # 64 x 64 fp32 on trn2: 64 cycles (one 128-row tile, a 64-column chunk: the 64-cycle floor) at
    # 20 TFLOP/s / (2 x 128^2) per us, ramping from half rate: about 0.2 us. Its 48 KiB of HBM
    # traffic take longer: the DMA's start, and descriptors of 48 KiB / 3 tensors (two operands
    # and the result) / 128 partitions = 128 B, at 128 / (128 + dma_half_bytes) of what large
    # transfers sustain; plus the 2 us launch.
    hw = profile_numbers("trn2")
    share = hw.dma_efficiency * 128 / (128 + hw.dma_half_bytes)
    memory = hw.dma_fixed_us + 48 * 1024 / (hw.hbm_bytes_per_us * share)
    assert entry["total_device_time_us"] == round(hw.launch_us + memory, 4)
    assert entry["ops"]["aten::mm"]["bound"] == "fixed cost"
    assert entry["ops"]["aten::mm"]["count"] == 1 and entry["ops"]["aten::mm"]["flops"] == 2 * 64 ** 3
    assert entry["ops"]["aten::mm"]["share"] == 1.0
    assert baseline_file(pytester).read_text() == json.dumps(doc, indent=2, sort_keys=True) + "\n"

    before = baseline_file(pytester).read_bytes()
    result = record(pytester)  # unchanged code: byte-identical file
    result.stdout.fnmatch_lines(["baselines recorded: 1 tests; files changed: none (all unchanged)"])
    assert baseline_file(pytester).read_bytes() == before

    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"{NODE} *{us4(total_us(64))}*+0.0%*aten::mm (100%)*pass"])
    assert "baselines recorded" not in result.stdout.str()
    assert baseline_file(pytester).read_bytes() == before


def test_no_baseline_passes_and_says_so(pytester: pytest.Pytester):
    write_suite(pytester)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        f"{NODE} *-*new",
        f"{NODE}: no baseline for simulated:trn2 (passes); record it with pytest --neuron-baseline '{NODE}'",
    ])
    assert not (pytester.path / "baselines").exists()


def test_strict_fails_a_test_with_no_baseline(pytester: pytest.Pytester):
    write_suite(pytester)
    result = pytester.runpytest("--neuron-strict")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        f"*--neuron-strict: {NODE} was not compared (no baseline for simulated:trn2); "
        f"record it with pytest --neuron-baseline '{NODE}'*",
    ])
    record(pytester)
    pytester.runpytest("--neuron-strict").assert_outcomes(passed=1)


def test_recording_a_subset_leaves_other_entries_alone(pytester: pytest.Pytester):
    two_tests = WORK.format(marker="") + '''

@pytest.mark.neuron_profile
def test_other(work):
    work()
    work()
'''
    pytester.makepyfile(test_a=two_tests, test_b=two_tests)
    set_knobs(pytester, n=64)
    record(pytester).assert_outcomes(passed=4)
    a_file, b_file = baseline_file(pytester, "test_a"), baseline_file(pytester, "test_b")
    b_before = b_file.read_bytes()
    a_before = json.loads(a_file.read_text())
    assert sorted(a_before["tests"]) == ["test_a.py::test_other", "test_a.py::test_work"]

    set_knobs(pytester, n=512)
    record(pytester, "-k", "test_a and test_work").assert_outcomes(passed=1, deselected=3)
    a_after = json.loads(a_file.read_text())
    assert a_after["tests"]["test_a.py::test_other"] == a_before["tests"]["test_a.py::test_other"]
    assert {key: value for key, value in a_after["tests"]["test_a.py::test_work"]["simulated:trn2"].items()
            if key != "memory"} == expected(512)
    assert b_file.read_bytes() == b_before

    record(pytester, "test_b.py::test_other").assert_outcomes(passed=1)  # one test by node id
    b_after = json.loads(b_file.read_text())
    assert b_after["tests"]["test_b.py::test_work"] == json.loads(b_before)["tests"]["test_b.py::test_work"]
    assert b_after["tests"]["test_b.py::test_other"] != json.loads(b_before)["tests"]["test_b.py::test_other"]
    assert json.loads(a_file.read_text()) == a_after

    a_bytes = a_file.read_bytes()
    record(pytester, "test_b.py").assert_outcomes(passed=2)  # one file
    assert a_file.read_bytes() == a_bytes
    # the gate sees each test against its own entry: test_a::test_other still has n=64's
    result = pytester.runpytest()
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines([f"PERF REGRESSION test_a.py::test_other{REASON}"])


def test_other_hardware_gets_its_own_entry(pytester: pytest.Pytester):
    write_suite(pytester)
    record(pytester)
    trn2 = stored(pytester)
    result = pytester.runpytest("--neuron-hardware", "trn1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"{NODE}: no baseline for simulated:trn1 (passes)*"])
    record(pytester, "--neuron-hardware", "trn1")
    assert stored(pytester, variant="simulated:trn1") == expected(hardware="trn1")
    assert stored(pytester) == trn2
    # the marker picks the hardware too
    write_suite(pytester, marker="hardware='trn1'", n=512)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)  # 512 vs the trn1 entry of n=64
    result.stdout.fnmatch_lines(["device time regression on simulated:trn1 *"])


def test_incomparable_baseline_is_reported_not_compared(pytester: pytest.Pytester):
    write_suite(pytester)
    record(pytester)
    path = baseline_file(pytester)
    doc = json.loads(path.read_text())
    current = doc["tests"][NODE]["simulated:trn2"]["cost_model_version"]
    doc["tests"][NODE]["simulated:trn2"]["cost_model_version"] = "0-old"
    doc["tests"][NODE]["simulated:trn2"]["total_device_time_us"] /= 10  # would be a regression
    path.write_text(json.dumps(doc))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        f"{NODE} *-*incomparable",
        f"{NODE}: not compared: the baseline was recorded with cost-model version 0-old, this run "
        f"uses {current}; re-record it with `pytest --neuron-baseline` once the change is intended",
    ])
    result = pytester.runpytest("--neuron-strict")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*--neuron-strict: {NODE} was not compared (the baseline was recorded "
                                 "with cost-model version 0-old*"])
    doc["tests"][NODE]["simulated:trn2"]["cost_model_version"] = current
    doc["tests"][NODE]["simulated:trn2"]["torch_version"] = "1.0"
    path.write_text(json.dumps(doc))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*not compared: the baseline was recorded with torch version 1.0, *"])


# --- the gate in a test run ------------------------------------------------------------------------

def test_total_and_hotspot_slower_fails_with_a_table(pytester: pytest.Pytester):
    write_suite(pytester, n=64)
    record(pytester)
    before = baseline_file(pytester).read_bytes()
    old, new = total_us(64), total_us(512)
    set_knobs(pytester, n=512)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "test_work.py R*",
        f"*device time regression on simulated:trn2 (total {us4(old)} -> {us(new)}, {pct(old, new)}); "
        f"largest: aten::mm +{us(new - old)} ({pct(old, new)})",
        "*op * module *baseline*current*delta*threshold*reason",
        f"*(total) * - * {us4(old)} * {us(new)} * {pct(old, new)} * 10% * total device time",
        f"*aten::mm * - * {us4(old)} * {us(new)} * {pct(old, new)} * 10% * {GROWN}",
        f"*If this change is intended, update the baseline: pytest --neuron-baseline '{NODE}'",
        "*= neuron device-time profile =*",
        f"{NODE} *{us4(new)}*{pct(old, new)}*aten::mm (100%)*regression",
        f"PERF REGRESSION {NODE}{REASON}",
    ])
    assert "more calls" not in result.stdout.str()
    result = pytester.runpytest("-v")
    result.stdout.fnmatch_lines([f"{NODE} PERF REGRESSION*"])
    assert baseline_file(pytester).read_bytes() == before  # a plain run never writes baselines


def test_more_calls_of_a_hotspot_fails(pytester: pytest.Pytester):
    write_suite(pytester, n=1024)
    record(pytester)
    fused, split = total_us(1024), total_us(1024, split=True)
    assert fused < split < fused * 1.1  # the same TensorE cycles and a launch more: time alone would pass
    set_knobs(pytester, n=1024, split=True)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*aten::mm * - * 1 calls * 2 calls * +100.0% * 10% * "
        "1 -> 2 calls, each 2x smaller (same total work): still TensorE-bound",
    ])
    # the calls row only: no "slower" row (a row in us) for mm
    assert not [line for line in result.outlines if line.split()[:1] == ["aten::mm"] and " us " in line]
    assert "(total)" not in result.stdout.str()


def test_new_op_that_becomes_a_hotspot_fails(pytester: pytest.Pytester):
    write_suite(pytester, marker="threshold=100.0", n=64)  # total may grow 100x: only "new" is left
    record(pytester)
    now = work_ops(64, exp=256)
    exp_time = now["aten::exp"].us
    exp_share = exp_time / sum(op.us for op in now.values())
    set_knobs(pytester, n=64, exp=256)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        f"*aten::exp * - * 0.000 us * {us(exp_time)} * new * 10000% * "
        f"new op takes {exp_share:.0%} of the time",
    ])
    assert "(total)" not in result.stdout.str()


def test_improvement_passes_and_gives_the_update_command(pytester: pytest.Pytester):
    write_suite(pytester, n=512)
    record(pytester)
    old, new = total_us(512), total_us(64)
    set_knobs(pytester, n=64)
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        f"{NODE} *{us4(new)}*{pct(old, new)}*improved",
        "*- improvements -*",
        f"{NODE}: faster than its baseline",
        f"(total) * - * {us4(old)} * {us(new)} * {pct(old, new)} * 10% * total device time",
        f"aten::mm * - * {us4(old)} * {us(new)} * {pct(old, new)} * 10% * "
        "flops x0.002, bytes x0.016: fixed cost per call now dominates",
        f"Lock the gains in: pytest --neuron-baseline '{NODE}'",
    ])


def test_threshold_option_marker_and_ini(pytester: pytest.Pytester):
    write_suite(pytester, n=256)
    record(pytester)
    old, new = total_us(256), total_us(448)  # +75 % of the work, the fixed costs unchanged
    assert 0.5 < new / old - 1 < 0.9
    set_knobs(pytester, n=448)
    pytester.runpytest().assert_outcomes(failed=1)
    pytester.runpytest("--neuron-threshold", "90%").assert_outcomes(passed=1)
    pytester.runpytest("--neuron-threshold", "0.9").assert_outcomes(passed=1)
    pytester.runpytest("--neuron-threshold", "0.5").assert_outcomes(failed=1)
    pytester.makeini("[pytest]\nneuron_threshold = 90%\n")
    pytester.runpytest().assert_outcomes(passed=1)
    pytester.runpytest("--neuron-threshold", "5%").assert_outcomes(failed=1)  # the option wins
    write_suite(pytester, marker="threshold=0.1", n=448)  # the marker wins over both
    result = pytester.runpytest("--neuron-threshold", "90%")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*aten::mm * - * {us4(old)} * {us(new)} * {pct(old, new)} * 10% * "
                                 "flops x5.4, bytes x3.1: now TensorE-bound (was fixed cost)"])


def per_op_work(n: int) -> dict[str, float]:
    """Device time of test_per_op_thresholds's work on trn2, per op and in total."""
    hw = profile_numbers("trn2")
    times = {"aten::mm": mm_timing(n, 1024, 1024, hw).device_time_us,
             "aten::exp": exp_timing(1024 * 1024, hw).device_time_us}
    return {**times, "total": sum(times.values())}


def test_per_op_thresholds(pytester: pytest.Pytester):
    # mm grows beyond 2 % but within 10 %; the total grows beyond 1 % but within 10 %
    pytester.makepyfile(test_ops='''
        import json, pathlib, pytest, torch

        def size():
            path = pathlib.Path(__file__).parent / "knobs.json"
            return json.loads(path.read_text())["n"]

        @pytest.fixture
        def tensors():
            n = size()
            return torch.randn(n, 1024), torch.randn(1024, 1024), torch.randn(1024, 1024)

        def work(a, b, x):
            a @ b
            torch.exp(x)

        @pytest.mark.neuron_profile
        def test_default(tensors):
            work(*tensors)

        @pytest.mark.neuron_profile(ops={"aten::mm": 0.02})
        def test_tight(tensors):
            work(*tensors)

        @pytest.mark.neuron_profile(threshold=0.01, ops={"aten::mm": 0.5, "aten::exp": 0.5})
        def test_loose_op_but_total_still_gated(tensors):
            work(*tensors)
    ''')
    before, after = per_op_work(448), per_op_work(480)
    mm, total = (after[key] / before[key] - 1.0 for key in ("aten::mm", "total"))
    assert 0.02 < mm < 0.10 and 0.01 < total < 0.10  # the premise: only the tight limits trip
    set_knobs(pytester, n=448)
    record(pytester)
    set_knobs(pytester, n=480)
    result = pytester.runpytest("-rA")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*_ test_tight _*",
        f"*aten::mm * - * * {format_delta(mm)} * 2% * flops x1.1, bytes x1.0: still TensorE-bound",
        "*_ test_loose_op_but_total_still_gated _*",
        # the op behind the total's change is named, though its own (loose) threshold held
        f"*(total) * {format_delta(total)} * 1% * total device time; most of the change: aten::mm +*",
        "PASSED test_ops.py::test_default",
    ])
    text = result.stdout.str()
    tight = text[text.index("_ test_tight _"):]
    assert "(total)" not in tight.split("If this change is intended")[0]


def test_allow_expected_change(pytester: pytest.Pytester):
    write_suite(pytester, marker="allow={'aten::exp': 'bigger activation, see #42'}", n=64, exp=256)
    record(pytester)
    set_knobs(pytester, n=64, exp=1024)
    result = pytester.runpytest("--neuron-report", "report.json")
    result.assert_outcomes(passed=1)
    report = json.loads((pytester.path / "report.json").read_text())
    verdict = report["tests"][NODE]["verdict"]
    assert verdict["status"] == "pass"
    assert [(f["kind"], f["op"], f["reason"]) for f in verdict["allowed"]] == [
        ("allowed", "aten::exp", "bigger activation, see #42")]
    # without the allowance it is a regression; allowed changes are listed next to real ones
    write_suite(pytester, marker="", n=64, exp=1024)
    pytester.runpytest().assert_outcomes(failed=1)
    write_suite(pytester, marker="allow={'aten::exp': 'see #42'}", n=512, exp=1024)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*aten::mm*{GROWN}", "*allowed changes:*", "*", "*", "*aten::exp*see #42"])


def test_failure_table_names_the_module_path(pytester: pytest.Pytester):
    pytester.makepyfile(test_model='''
        import json, pathlib
        from collections import OrderedDict

        import pytest, torch
        from torch import nn

        @pytest.fixture
        def model():
            n = json.loads((pathlib.Path(__file__).parent / "knobs.json").read_text())["n"]
            inner = nn.Sequential(OrderedDict(proj=nn.Linear(n, n)))
            return nn.Sequential(OrderedDict(encoder=inner)), torch.randn(32, n)

        @pytest.mark.neuron_profile
        def test_model(model):
            net, x = model
            with torch.no_grad():
                net(x)
    ''')
    set_knobs(pytester, n=64)
    record(pytester)
    entry = stored(pytester, "test_model.py::test_model", name="test_model")
    assert list(entry["ops"]["aten::addmm"]["modules"]) == ["encoder.proj"]
    set_knobs(pytester, n=512)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["aten::addmm * encoder.proj * us * us * +* 10% * "
                                 "flops x64, bytes x36: fixed cost per call still dominates"])


# --- the fixture -------------------------------------------------------------------------------------

def test_fixture_profiles_only_its_region_and_is_gated(pytester: pytest.Pytester):
    pytester.makepyfile(test_region='''
        import json, pathlib, pytest, torch

        def test_region(neuron_profile):
            n = json.loads((pathlib.Path(__file__).parent / "knobs.json").read_text())["n"]
            a = torch.randn(n, n)
            torch.exp(torch.randn(512, 512))  # outside the region: not profiled
            with pytest.raises(RuntimeError, match="no region has run yet"):
                neuron_profile.result
            with neuron_profile:
                b = a @ a
            b.relu()  # outside again
            result = neuron_profile.result
            frame = result.to_dataframe()
            assert list(frame["name"]) == ["aten::mm"]
            assert frame["count"].tolist() == [1]
            assert result.total_device_time_us == pytest.approx(frame["device_time_us"].sum())
            pathlib.Path("total.txt").write_text(repr(result.total_device_time_us))
    ''')
    set_knobs(pytester, n=64)
    record(pytester).assert_outcomes(passed=1)
    entry = stored(pytester, "test_region.py::test_region", name="test_region")
    assert sorted(entry["ops"]) == ["aten::mm"]
    assert entry["total_device_time_us"] == round(float((pytester.path / "total.txt").read_text()), 4)
    assert entry == expected(64)
    set_knobs(pytester, n=512)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["test_region.py R*", f"*aten::mm*{GROWN}"])


def test_fixture_with_the_marker_and_several_regions(pytester: pytest.Pytester):
    pytester.makepyfile(test_regions='''
        import pytest, torch

        @pytest.mark.neuron_profile(threshold=0.5)
        def test_regions(neuron_profile):
            a = torch.randn(64, 64)
            with neuron_profile:
                a @ a
            torch.exp(torch.randn(512, 512))
            with neuron_profile:
                a @ a
            assert neuron_profile.result.to_dataframe()["count"].tolist() == [2]
    ''')
    record(pytester).assert_outcomes(passed=1)
    entry = stored(pytester, "test_regions.py::test_regions", name="test_regions")
    assert list(entry["ops"]) == ["aten::mm"] and entry["ops"]["aten::mm"]["count"] == 2


# --- failures inside the test --------------------------------------------------------------------------

def test_exception_in_the_profiled_region_is_a_normal_failure(pytester: pytest.Pytester):
    pytester.makepyfile(test_boom='''
        import pytest, torch

        @pytest.mark.neuron_profile
        def test_marked():
            torch.randn(64, 64) @ torch.randn(64, 64)
            raise ValueError("boom")

        def test_fixture(neuron_profile):
            with neuron_profile:
                torch.randn(64, 64) @ torch.randn(64, 64)
                raise KeyError("bang")

        @pytest.mark.neuron_profile
        def test_fine():
            torch.randn(64, 64) @ torch.randn(64, 64)
    ''')
    result = pytester.runpytest("--neuron-baseline", "-v")
    result.assert_outcomes(failed=2, passed=1)
    result.stdout.fnmatch_lines(["*test_marked FAILED*", "*test_fixture FAILED*", "*ValueError: boom",
                                 "*KeyError: 'bang'"])
    assert "PERF REGRESSION" not in result.stdout.str()
    doc = json.loads(baseline_file(pytester, "test_boom").read_text())
    assert list(doc["tests"]) == ["test_boom.py::test_fine"]


def test_bad_marker_arguments_fail_the_test_naming_them(pytester: pytest.Pytester):
    pytester.makepyfile(test_bad='''
        import pytest, torch

        @pytest.mark.neuron_profile(treshold=0.1)
        def test_typo():
            torch.ones(2) + 1

        @pytest.mark.neuron_profile(threshold="ten")
        def test_threshold_str():
            torch.ones(2) + 1

        @pytest.mark.neuron_profile(hardware="trn9")
        def test_hardware():
            torch.ones(2) + 1

        @pytest.mark.neuron_profile(ops=["aten::mm"])
        def test_ops():
            torch.ones(2) + 1

        @pytest.mark.neuron_profile(allow={"aten::mm": ""})
        def test_allow():
            torch.ones(2) + 1

        @pytest.mark.neuron_profile(rounds=0)
        def test_rounds():
            torch.ones(2) + 1

        @pytest.mark.neuron_profile(0.1)
        def test_positional():
            torch.ones(2) + 1

        @pytest.mark.neuron_profile(min_share=2)
        def test_fixture_user(neuron_profile):
            with neuron_profile:
                torch.ones(2) + 1
    ''')
    result = pytester.runpytest("--neuron-baseline")
    result.assert_outcomes(failed=8)
    result.stdout.fnmatch_lines_random([
        "*test_bad.py::test_typo: neuron_profile: unknown argument(s) treshold; valid: threshold, hardware, *",
        "*test_bad.py::test_threshold_str: neuron_profile threshold='ten': expected a relative change*",
        "*test_bad.py::test_hardware: neuron_profile hardware='trn9': unknown; valid choices: *trn2*",
        "*test_bad.py::test_ops: neuron_profile ops=*: expected a dict of per-op thresholds*",
        "*test_bad.py::test_allow: neuron_profile allow?'aten::mm'?='': no reason a person can read*",
        "*test_bad.py::test_rounds: neuron_profile rounds=0: expected a whole number >= 1*",
        "*test_bad.py::test_positional: @pytest.mark.neuron_profile takes keyword arguments only*",
        "*test_bad.py::test_fixture_user: neuron_profile min_share=2: expected a number between 0.0 and 1.0*",
    ])
    assert "Traceback" not in result.stdout.str()
    assert "During handling of the above exception" not in result.stdout.str()
    assert not baseline_file(pytester, "test_bad").exists()


# --- options ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--neuron-hardware", "trn9"],
     "*--neuron-hardware (ini neuron_hardware)='trn9': unknown; valid choices: h200, inf2, trn1, trn2, trn2-lnc1, trn3, trn3-lnc1*"),
    (["--neuron-backend", "tpu"], "*--neuron-backend (ini neuron_backend)='tpu': unknown; valid choices: simulated*"),
    (["--neuron-threshold", "ten"],
     "*--neuron-threshold (ini neuron_threshold)='ten': expected a relative change such as 0.05 or 5%*"),
    (["--neuron-threshold=-5%"], "*--neuron-threshold (ini neuron_threshold)='-5%': expected a relative change*"),
    (["--neuron-floor-us", "nan"], "*--neuron-floor-us (ini neuron_floor_us)='nan'*"),
])
def test_bad_option_values_are_usage_errors(pytester: pytest.Pytester, args, message):
    write_suite(pytester)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-neuronprof: {message[1:]}"])


@pytest.mark.parametrize("ini,message", [
    ("neuron_hardware = trn9", "*--neuron-hardware (ini neuron_hardware)='trn9': unknown; valid choices: *"),
    ("neuron_backend = tpu", "*--neuron-backend (ini neuron_backend)='tpu': unknown*"),
    ("neuron_threshold = lots", "*--neuron-threshold (ini neuron_threshold)='lots'*"),
])
def test_bad_ini_values_are_usage_errors(pytester: pytest.Pytester, ini, message):
    write_suite(pytester)
    pytester.makeini(f"[pytest]\n{ini}\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_ini_twins_of_the_options(pytester: pytest.Pytester):
    write_suite(pytester, n=64)
    pytester.makeini("""
        [pytest]
        neuron_baseline = true
        neuron_baseline_dir = perf/base
        neuron_hardware = trn1
        neuron_backend = simulated
        neuron_report = out/report.json
        neuron_trace_dir = out/traces
    """)
    record_run = pytester.runpytest()
    record_run.assert_outcomes(passed=1)
    path = pytester.path / "perf" / "base" / "test_work.json"
    doc = json.loads(path.read_text())
    assert list(doc["tests"][NODE]) == ["simulated:trn1"]
    assert not (pytester.path / "baselines").exists()
    assert json.loads((pytester.path / "out" / "report.json").read_text())["recorded"] == 1
    assert (pytester.path / "out" / "traces" / trace_file_name(NODE)).is_file()

    pytester.makeini("""
        [pytest]
        neuron_baseline_dir = perf/base
        neuron_hardware = trn1
        neuron_strict = true
    """)
    set_knobs(pytester, n=512)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*device time regression on simulated:trn1*"])
    set_knobs(pytester, n=64)
    pytester.runpytest().assert_outcomes(passed=1)
    result = pytester.runpytest("--neuron-hardware", "trn2")  # strict from the ini, no trn2 entry
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--neuron-strict: *no baseline for simulated:trn2*"])


def test_baseline_dir_option_is_relative_to_the_invocation_dir(pytester: pytest.Pytester):
    write_suite(pytester)
    sub = pytester.mkdir("sub")
    os.chdir(sub)  # pytester restores the working directory afterwards
    result = pytester.runpytest("--neuron-baseline", "--neuron-baseline-dir", "here", "--rootdir", str(pytester.path),
                                str(pytester.path / "test_work.py"))
    result.assert_outcomes(passed=1)
    assert (sub / "here" / "test_work.json").is_file()
    assert not (pytester.path / "baselines").exists()


def test_json_report_and_traces(pytester: pytest.Pytester):
    pytester.makepyfile(test_two=WORK.format(marker="") + '''

@pytest.mark.neuron_profile
def test_twice(work):
    work()
    work()
''')
    set_knobs(pytester, n=64)
    record(pytester)
    set_knobs(pytester, n=512)
    result = pytester.runpytest("--neuron-report", "reports/neuron.json", "--neuron-trace-dir", "traces")
    result.assert_outcomes(failed=2)
    report = json.loads((pytester.path / "reports" / "neuron.json").read_text())
    assert report["regressions"] == 2 and report["counts"] == {"regression": 2}
    assert sorted(report["tests"]) == ["test_two.py::test_twice", "test_two.py::test_work"]
    test = report["tests"]["test_two.py::test_twice"]
    assert test["current"]["total_device_time_us"] == round(2 * total_us(512), 4)
    assert test["current"]["ops"]["aten::mm"]["count"] == 2
    assert test["baseline"]["ops"]["aten::mm"]["count"] == 2
    lines = (pytester.path / "test_two.py").read_text().splitlines()
    decorator = lines.index("def test_twice(work):")  # 1-based line of the decorator above it
    assert test["location"] == ["test_two.py", decorator]
    assert [(f["kind"], f["op"], f["reason"]) for f in test["verdict"]["regressions"]] == [
        ("total", "(total)", "total device time"), ("slower", "aten::mm", GROWN)]
    assert test["verdict"]["regressions"][1]["threshold"] == 0.1
    traces = sorted(p.name for p in (pytester.path / "traces").iterdir())
    assert traces == sorted(trace_file_name(f"test_two.py::{name}") for name in ("test_twice", "test_work"))
    trace = json.loads((pytester.path / "traces" / traces[0]).read_text())
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert [e["name"] for e in kernels] == ["aten::mm", "aten::mm"]
    assert trace["otherData"]["hardware"] == "trn2"


# --- broken baseline files -----------------------------------------------------------------------------

BROKEN = {
    "not-json": "this is not JSON\n",
    "truncated": None,  # the recorded file cut in half
    "empty": "",
    "nan": None,  # the recorded file with a NaN
    "infinity": None,
    "schema": None,  # schema_version 99
    "wrong-types": None,  # a count that is a string
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
@pytest.mark.parametrize("mode", ["plain", "record"])
def test_broken_baseline_stops_the_run_and_is_never_overwritten(pytester: pytest.Pytester, kind, mode):
    write_suite(pytester)
    record(pytester)
    path = baseline_file(pytester)
    good = path.read_text()
    doc = json.loads(good)
    op = doc["tests"][NODE]["simulated:trn2"]["ops"]["aten::mm"]
    if kind == "truncated":
        text = good[: len(good) // 2]
    elif kind == "nan":
        text = good.replace(f'"share": {op["share"]}', '"share": NaN')
    elif kind == "infinity":
        text = good.replace(f'"device_time_us": {op["device_time_us"]}', '"device_time_us": Infinity')
    elif kind == "schema":
        text = good.replace(f'"schema_version": {SCHEMA_VERSION}', '"schema_version": 99')
    elif kind == "wrong-types":
        text = good.replace('"count": 1', '"count": "1"')
    else:
        text = BROKEN[kind]
    assert text != good
    path.write_text(text)
    set_knobs(pytester, n=128)  # would change the file if it were written
    result = pytester.runpytest(*(["--neuron-baseline"] if mode == "record" else []))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "ERROR: pytest-neuronprof: " in err
    assert "baselines/test_work.json" in err
    assert "git checkout -- baselines/test_work.json" in err or kind == "schema"
    assert "re-record with `pytest --neuron-baseline`" in err
    assert path.read_text() == text


# --- reports: status letter, summary, JUnit XML ----------------------------------------------------------

def test_junit_xml_properties(pytester: pytest.Pytester):
    pytester.makepyfile(test_mix=WORK.format(marker="") + '''

def test_unprofiled():
    pass
''')
    set_knobs(pytester, n=64)
    record(pytester)
    set_knobs(pytester, n=512)
    pytester.runpytest("--junitxml", "junit.xml").assert_outcomes(failed=1, passed=1)
    root = ET.parse(pytester.path / "junit.xml").getroot()
    cases = {case.get("name"): case for case in root.iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_work"].iter("property")}
    old, new = total_us(64), total_us(512)
    assert props == {"neuron_device_time_us": str(round(new, 3)),
                     # on the numbers as the baseline stores them (unchanged code: 0.0, not -2e-06)
                     "neuron_delta": str(round(round(new, 4) / round(old, 4) - 1, 6)),
                     "neuron_verdict": "regression"}
    assert cases["test_unprofiled"].find("properties") is None
    assert cases["test_work"].find("failure") is not None


# --- xdist ---------------------------------------------------------------------------------------------

XDIST_SUITE = WORK.format(marker="") + '''

@pytest.mark.neuron_profile
def test_twice(work):
    work()
    work()


@pytest.mark.neuron_profile
@pytest.mark.parametrize("k", [1, 3])
def test_param(work, k):
    for _ in range(k):
        work()
'''


@pytest.mark.slow  # starts a subprocess
def test_xdist_records_the_same_bytes_and_gates(pytester: pytest.Pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_x1=XDIST_SUITE, test_x2=XDIST_SUITE)
    set_knobs(pytester, n=64)
    serial = pytester.runpytest("--neuron-baseline", "-p", "no:xdist")
    serial.assert_outcomes(passed=8)
    files = {name: baseline_file(pytester, name).read_bytes() for name in ("test_x1", "test_x2")}
    for name in files:
        baseline_file(pytester, name).unlink()
    parallel = pytester.runpytest_subprocess("--neuron-baseline", "-n", "2")
    parallel.assert_outcomes(passed=8)
    assert {name: baseline_file(pytester, name).read_bytes() for name in files} == files
    assert parallel.stdout.str().count("neuron device-time profile") == 1
    parallel.stdout.fnmatch_lines(["baselines recorded: 8 tests; files changed: baselines/test_x1.json, "
                                   "baselines/test_x2.json"])

    set_knobs(pytester, n=512)
    gated = pytester.runpytest_subprocess("-n", "2", "--neuron-report", "report.json")
    gated.assert_outcomes(failed=8)
    assert gated.ret == pytest.ExitCode.TESTS_FAILED
    out = gated.stdout.str()
    assert out.count("neuron device-time profile") == 1
    assert out.count("regression\n") == 8  # eight rows in the one summary table
    gated.stdout.fnmatch_lines(["*R*", f"*aten::mm*{GROWN}"])
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["regressions"] == 8
    assert {name: baseline_file(pytester, name).read_bytes() for name in files} == files


def test_pytest_help_lists_every_option(pytester: pytest.Pytester) -> None:
    """`pytest --help` with the plugin installed: argparse %-formats option help, and a bare
    "10%" in one made it crash with ValueError."""
    from pytest_neuronprof.plugin.options import all_options

    result = pytester.runpytest("--help")
    assert result.ret == 0
    text = result.stdout.str()
    for flag, ini, _, _ in all_options():
        assert flag in text and ini in text
    assert "e.g. 0.1 or 10% (default" in " ".join(text.split())  # wrapped over lines
