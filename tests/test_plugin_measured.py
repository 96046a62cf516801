"""The plugin on measured backends, with pytester: rounds and warmup, samples in baselines, the
statistical gate, no comparison across backends or hardware, usage errors.

Most suites here run the real cpu backend with a conftest that replaces torch.profiler's
output by controlled timings (``FAKE_TIMINGS``): an ``aten::mm`` whose time comes from
knobs.json, times a deterministic per-round noise, so a recorded baseline and a later run
differ exactly as a test wants. One test runs the real profiler end to end.
"""

from __future__ import annotations

import json

import pytest
import torch._inductor  # noqa: F401  (torch.profiler's first start imports it: ~800 modules)

from pytest_neuronprof.outputs.trace_files import trace_file_name


pytest_plugins = ["pytester"]
# The short test summary shows a failed test's message after its node id (" - device time
# regression ...") from pytest 9; before, where the report's longrepr is a string, as the
# plugin's is, the line ends at the node id.
REASON = " - device time regression*" if pytest.version_tuple >= (9,) else ""


pytestmark = pytest.mark.usefixtures("lean_inner_runs")


FAKE_TIMINGS = '''
"""Controlled timings for the cpu backend: torch.profiler's events are replaced by one
aten::mm (knobs.json: mm_us, noise, phase) and one aten::add of 100 us per round."""
import json
import pathlib

import pytest
from torch.autograd.profiler_util import EventList, FunctionEvent

from pytest_neuronprof.profiler.backends.measured import MeasuredBackend

HERE = pathlib.Path(__file__).parent
ROUND = [0]


def knobs():
    path = HERE / "knobs.json"
    return json.loads(path.read_text()) if path.exists() else {}


class FakeProfiler:
    def start(self):
        pass

    def stop(self):
        pass

    def events(self):
        k = knobs()
        i = ROUND[0] + k.get("phase", 0)
        ROUND[0] += 1
        noise = k.get("noise", 0.05) * (((i * 7) % 11) - 5) / 5  # -noise .. +noise
        mm = k.get("mm_us", 1000.0) * (1 + noise)
        add = 100.0 * (1 + noise)
        events = EventList([
            FunctionEvent(id=1, name="aten::mm", thread=1, start_us=0.0, end_us=mm, stack=[], input_shapes=[]),
            FunctionEvent(id=2, name="aten::add", thread=1, start_us=mm, end_us=mm + add, stack=[], input_shapes=[]),
        ])
        events._build_tree()
        return events


@pytest.fixture(autouse=True)
def controlled_timings(monkeypatch):
    monkeypatch.setattr(MeasuredBackend, "_make_profiler", lambda self: FakeProfiler())
'''

SUITE = '''
import pathlib

import pytest

HERE = pathlib.Path(__file__).parent


def bump(name):
    path = HERE / name
    path.write_text(str(int(path.read_text()) + 1 if path.exists() else 1))


@pytest.fixture
def setup_once():
    bump("fixture_calls.txt")


@pytest.mark.neuron_profile{marker}
def test_work(setup_once):
    bump("body_calls.txt")
'''

NODE = "test_work.py::test_work"


def write_suite(pytester: pytest.Pytester, marker: str = "", **knobs) -> None:
    pytester.makeconftest(FAKE_TIMINGS)
    pytester.makepyfile(test_work=SUITE.format(marker=f"({marker})" if marker else ""))
    set_knobs(pytester, **knobs)


def set_knobs(pytester: pytest.Pytester, **knobs) -> None:
    (pytester.path / "knobs.json").write_text(json.dumps(knobs))


def calls(pytester: pytest.Pytester, name: str) -> int:
    path = pytester.path / name
    count = int(path.read_text()) if path.exists() else 0
    path.unlink(missing_ok=True)
    return count


def baseline(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "baselines" / "test_work.json").read_text())


def cpu_variant() -> str:
    from pytest_neuronprof.profiler.backends.measured import cpu_hardware

    return f"cpu:{cpu_hardware(1)}"


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("--neuron-backend", "cpu", *args)


def test_rounds_run_the_body_and_samples_go_into_the_baseline(pytester: pytest.Pytester):
    write_suite(pytester)
    run(pytester, "--neuron-baseline", "--neuron-rounds", "6", "--neuron-warmup", "2").assert_outcomes(passed=1)
    assert (calls(pytester, "fixture_calls.txt"), calls(pytester, "body_calls.txt")) == (1, 8)
    doc = baseline(pytester)
    assert doc["schema_version"] == 7
    entry = doc["tests"][NODE][cpu_variant()]
    assert (entry["backend"], entry["cost_model_version"]) == ("cpu", "measured-1")
    samples = entry["samples"]
    assert samples["rounds"] == 6 and sorted(samples["ops"]) == ["aten::add", "aten::mm"]
    # rounds 2..7 of the noise sequence (the two warmup rounds are dropped)
    noise = [0.05 * (((i * 7) % 11) - 5) / 5 for i in range(2, 8)]
    assert samples["ops"]["aten::mm"] == [round(1000 * (1 + n), 3) for n in noise]
    assert entry["ops"]["aten::mm"]["device_time_us"] == round(1000 * (1 + min(noise)), 4)
    assert entry["ops"]["aten::mm"]["count"] == 1  # calls per round, not per session

    # the backend's defaults: 20 rounds after 3 warmup; the marker wins over the options
    run(pytester).assert_outcomes(passed=1)
    assert calls(pytester, "body_calls.txt") == 23
    write_suite(pytester, marker="rounds=5, warmup=0")
    run(pytester, "--neuron-rounds", "9", "--neuron-warmup", "4").assert_outcomes(passed=1)
    assert calls(pytester, "body_calls.txt") == 5
    # the simulated backend is exact: one round whatever the marker says
    pytester.runpytest().assert_outcomes(passed=1)
    assert calls(pytester, "body_calls.txt") == 1


def test_noise_passes_and_a_significant_slowdown_fails(pytester: pytest.Pytester):
    write_suite(pytester, noise=0.05)
    run(pytester, "--neuron-baseline", "--neuron-rounds", "8").assert_outcomes(passed=1)
    set_knobs(pytester, noise=0.05, phase=5)  # other rounds of the same noise
    result = run(pytester, "--neuron-rounds", "8")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"{NODE} * pass"])

    set_knobs(pytester, mm_us=1300.0, noise=0.05, phase=3)  # aten::mm 30 % slower
    result = run(pytester, "--neuron-rounds", "8")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "test_work.py R*",
        f"*device time regression on {cpu_variant()} *",
        "*(total) * - * 15% * total device time (p=*, 8 vs 8 rounds)",
        "*aten::mm * 15% * hotspot slower (p=*, 8 vs 8 rounds)",
        f"PERF REGRESSION {NODE}{REASON}",
    ])
    # the same 30 % inside noise of +-60 %: beyond the threshold, not significant: passes
    write_suite(pytester, noise=0.6)
    run(pytester, "--neuron-baseline", "--neuron-rounds", "8").assert_outcomes(passed=1)
    set_knobs(pytester, mm_us=1300.0, noise=0.6, phase=4)
    run(pytester, "--neuron-rounds", "8").assert_outcomes(passed=1)


def test_fixture_regions_make_one_round_per_invocation(pytester: pytest.Pytester):
    pytester.makeconftest(FAKE_TIMINGS)
    pytester.makepyfile(test_region='''
        import pathlib
        import pytest, torch

        INVOCATIONS = []

        def test_region(neuron_profile):
            INVOCATIONS.append(neuron_profile.backend)
            with neuron_profile:
                torch.ones(4) + 1
            with neuron_profile:
                torch.ones(4) + 1
            # this round's two regions only, each with the controlled mm and add
            assert neuron_profile.result.to_dataframe().set_index("name")["count"].to_dict() == {
                "aten::mm": 2, "aten::add": 2}
            pathlib.Path("invocations.txt").write_text(str(len(INVOCATIONS)) + " " + INVOCATIONS[0])
    ''')
    run(pytester, "--neuron-baseline", "--neuron-rounds", "5", "--neuron-warmup", "1").assert_outcomes(passed=1)
    assert (pytester.path / "invocations.txt").read_text() == "6 cpu"
    entry = json.loads((pytester.path / "baselines" / "test_region.json").read_text())
    samples = entry["tests"]["test_region.py::test_region"][cpu_variant()]["samples"]
    assert samples["rounds"] == 5 and len(samples["ops"]["aten::mm"]) == 5


def test_no_comparison_across_backends_or_hardware(pytester: pytest.Pytester):
    write_suite(pytester)
    run(pytester, "--neuron-baseline", "--neuron-rounds", "5").assert_outcomes(passed=1)
    cpu_entry = baseline(pytester)["tests"][NODE][cpu_variant()]
    result = pytester.runpytest()  # simulated: the cpu entry is not its baseline
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"{NODE}: no baseline for simulated:trn2 (passes)*"])
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    doc = baseline(pytester)
    assert sorted(doc["tests"][NODE]) == sorted([cpu_variant(), "simulated:trn2"])
    assert doc["tests"][NODE][cpu_variant()] == cpu_entry
    assert "samples" not in doc["tests"][NODE]["simulated:trn2"]
    # two threads are other hardware: its own variant, no baseline yet
    result = run(pytester, "--neuron-rounds", "5", "--neuron-cpu-threads", "2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"{NODE}: no baseline for {cpu_variant()[:-len('1threads')]}2threads (passes)*"])
    # and a much slower cpu run compares with the cpu entry only
    set_knobs(pytester, mm_us=3000.0)
    run(pytester, "--neuron-rounds", "5").assert_outcomes(failed=1)
    pytester.runpytest().assert_outcomes(passed=1)  # simulated: unchanged work, exact numbers


@pytest.mark.parametrize("args,message", [
    (["--neuron-rounds", "0"], "*--neuron-rounds (ini neuron_rounds)='0': expected a whole number >= 1*"),
    (["--neuron-warmup", "two"], "*--neuron-warmup (ini neuron_warmup)='two': expected a whole number >= 0*"),
    (["--neuron-cpu-threads", "-1"], "*--neuron-cpu-threads (ini neuron_cpu_threads)='-1'*"),
    (["--neuron-backend", "neuron"], "*the neuron backend needs TorchNeuron (torch_neuronx), which is not installed*"),
])
def test_bad_measured_options_are_usage_errors(pytester: pytest.Pytester, args, message):
    write_suite(pytester)
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-neuronprof: {message[1:]}"])


def test_cuda_without_a_gpu_is_a_usage_error(pytester: pytest.Pytester):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    write_suite(pytester)
    result = pytester.runpytest("--neuron-backend", "cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-neuronprof: the cuda backend needs a CUDA GPU*"])


def test_too_few_rounds_for_significance_fail_the_test_naming_them(pytester: pytest.Pytester):
    write_suite(pytester, marker="rounds=3")
    result = run(pytester, "--neuron-baseline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*neuron_profile rounds=3: the cpu backend needs at least 5 rounds "
                                 "for a change to be significant at alpha=0.01*"])
    pytester.makeini("[pytest]\nneuron_rounds = 4\nneuron_backend = cpu\n")
    write_suite(pytester)
    pytester.runpytest().stdout.fnmatch_lines(["*--neuron-rounds=4: the cpu backend needs at least 5*"])


def test_ini_twins_and_the_cpu_threshold_default(pytester: pytest.Pytester):
    write_suite(pytester)
    pytester.makeini("[pytest]\nneuron_backend = cpu\nneuron_rounds = 5\nneuron_warmup = 0\n")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    assert calls(pytester, "body_calls.txt") == 5
    set_knobs(pytester, mm_us=1120.0)  # +12 % (total +11 %): within the cpu backend's 15 %
    pytester.runpytest().assert_outcomes(passed=1)
    pytester.runpytest("--neuron-threshold", "5%").assert_outcomes(failed=1)


@pytest.mark.slow  # starts a subprocess
def test_xdist_workers_send_samples_to_the_controller(pytester: pytest.Pytester):
    pytest.importorskip("xdist")
    pytester.makeconftest(FAKE_TIMINGS)
    plain = "import pytest\n\n@pytest.mark.neuron_profile\ndef {name}():\n    pass\n"
    pytester.makepyfile(test_work=plain.format(name="test_work"), test_other=plain.format(name="test_other"))
    result = pytester.runpytest_subprocess("--neuron-backend", "cpu", "--neuron-rounds", "5",
                                           "--neuron-baseline", "-n", "2")
    result.assert_outcomes(passed=2)
    for name, node in (("test_work", NODE), ("test_other", "test_other.py::test_other")):
        doc = json.loads((pytester.path / "baselines" / f"{name}.json").read_text())
        assert doc["tests"][node][cpu_variant()]["samples"]["rounds"] == 5


def test_real_cpu_profiler_end_to_end(pytester: pytest.Pytester):
    """No fakes: the cpu backend times a matmul with torch.profiler, round by round."""
    pytester.makepyfile(test_real='''
        import pytest, torch

        @pytest.fixture
        def a():
            return torch.randn(96, 96)

        @pytest.mark.neuron_profile(rounds=5, warmup=1)
        def test_real(a):
            a @ a
    ''')
    result = run(pytester, "--neuron-baseline", "--neuron-report", "report.json")
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "baselines" / "test_real.json").read_text())
    entry = doc["tests"]["test_real.py::test_real"][cpu_variant()]
    assert entry["ops"]["aten::mm"]["count"] == 1 and entry["ops"]["aten::mm"]["engine"] == "CPU"
    assert entry["samples"]["rounds"] == 5 and all(v > 0 for v in entry["samples"]["ops"]["aten::mm"])
    # a generous threshold: this checks the wiring, not this machine's noise
    result = run(pytester, "--neuron-threshold", "500%", "--neuron-trace-dir", "traces")
    result.assert_outcomes(passed=1)
    trace = json.loads((pytester.path / "traces" / trace_file_name("test_real.py::test_real")).read_text())
    tracks = [e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name" and e["pid"] == 2]
    assert tracks[-1] == "CPU"
    kernels = [e for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    assert "aten::mm" in [e["name"] for e in kernels]  # every op has CPU time: each is a "kernel"
    assert {e["tid"] for e in kernels} == {len(tracks)}  # all on the CPU track
