"""Issue 15 item 13: work in other threads is captured, or said to be missing.

A marked test that ran its model through ThreadPoolExecutor recorded only the main thread's ops
(44 us), a regression inside the pool passed at +0.0 %, and ``result.notes`` carried the same
note whether or not a thread did anything. Now the work a region hands to other threads
(``ThreadPoolExecutor.submit``/``map``, ``threading.Thread.start``) is captured and spliced in
where it was handed over; modules that run during the region on a thread no capture covers
make the test "not fully profiled": incomparable in every output, a failure under
--neuron-strict, never recorded.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.profiler import threads as region_threads

pytest_plugins = ["pytester"]


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def ops(result: Any) -> list[tuple[str, str, float]]:
    """(op, module, device time) of each costed op: what baselines are made of."""
    return [(r.name, r.module_path, round(r.device_time_us, 6)) for r in result.records
            if r.device_time_us > 0]


@pytest.fixture
def net() -> torch.nn.Module:
    return model()


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(4, 32)


# --- captured: the pool, a thread, in a deterministic order --------------------------------------

def test_a_model_run_through_a_thread_pool_is_captured_as_if_run_on_the_test_thread(net, x):
    """Before: only aten::mul was recorded; the Linear layers on the pool's thread were not."""
    with NeuronProfiler() as alone:
        y = x * 2
        net(y)
    with NeuronProfiler() as pooled:
        y = x * 2
        with ThreadPoolExecutor(2) as pool:
            pool.submit(net, y).result()
    assert ops(pooled.result) == ops(alone.result)
    assert [name for name, _, _ in ops(pooled.result)].count("aten::addmm") == 2
    assert pooled.result.total_device_time_us == pytest.approx(alone.result.total_device_time_us)
    assert pooled.result.notes == [] and pooled.result.uncaptured == []


def test_a_pool_made_before_the_region_is_captured_too(net, x):
    """Tasks are handed off at submit, so pool threads that already run carry the capture."""
    with ThreadPoolExecutor(1) as pool:
        pool.submit(lambda: None).result()  # the worker thread exists before the region
        with NeuronProfiler() as prof:
            pool.submit(net, x).result()
    assert [name for name, _, _ in ops(prof.result)] == ["aten::addmm", "aten::relu", "aten::addmm"]
    assert {module for _, module, _ in ops(prof.result)} == {"0", "1", "2"}


def test_a_thread_started_in_the_region_is_captured(net, x):
    with NeuronProfiler() as prof:
        thread = threading.Thread(target=net, args=(x,))
        thread.start()
        thread.join()
        torch.ones(2) + 1
    assert [name for name, _, _ in ops(prof.result)] == [
        "aten::addmm", "aten::relu", "aten::addmm", "aten::ones", "aten::add"]
    assert "run" not in vars(thread)  # the Thread object does not keep the region's capture


def test_handed_over_work_has_a_host_track_of_its_own_in_the_trace(net, x, tmp_path):
    """Its ops overlap the main thread's in host time: on one track they broke the nesting."""
    with NeuronProfiler() as prof:
        torch.ones(2) + 1
        with ThreadPoolExecutor(1) as pool:
            pool.submit(net, x).result()
    assert [(r.name, r.thread) for r in prof.result.records if r.device_time_us > 0] == [
        ("aten::ones", 0), ("aten::add", 0), ("aten::addmm", 1), ("aten::relu", 1), ("aten::addmm", 1)]
    prof.export_chrome_trace(tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 1}
    assert tracks == {1: "main", 2: "handed-over work 1"}
    assert {e["name"]: e["tid"] for e in events if e.get("cat") == "cpu_op"} == {
        "aten::ones": 1, "aten::add": 1, "aten::t": 2, "aten::addmm": 2, "aten::relu": 2}


def test_work_is_placed_where_it_was_handed_over_whichever_thread_finishes_first():
    """Threads interleave differently from run to run; the profile's order must not."""
    def slow() -> None:
        time.sleep(0.05)
        torch.ones(3).exp()

    def fast() -> None:
        torch.ones(3).log()

    with NeuronProfiler() as prof:
        torch.zeros(2) + 1
        with ThreadPoolExecutor(2) as pool:
            first, second = pool.submit(slow), pool.submit(fast)
            second.result()  # fast has run, slow is still asleep
            torch.zeros(2) * 3
            first.result()
    names = [r.name for r in prof.result.records]
    assert names == ["aten::zeros", "aten::add", "aten::ones", "aten::exp", "aten::ones",
                     "aten::log", "aten::zeros", "aten::mul"]


def test_work_handed_over_by_a_handed_over_thread_is_captured(net, x):
    def outer() -> None:
        with ThreadPoolExecutor(1) as pool:
            pool.submit(net, x).result()

    with NeuronProfiler() as prof:
        thread = threading.Thread(target=outer)
        thread.start()
        thread.join()
    assert [name for name, _, _ in ops(prof.result)] == ["aten::addmm", "aten::relu", "aten::addmm"]


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_profiles_with_threads_are_identical_from_run_to_run(net, x, execution):
    def run() -> list[tuple[Any, ...]]:
        with NeuronProfiler(NeuronConfig(execution=execution)) as prof:
            h = x * 2
            with ThreadPoolExecutor(3) as pool:
                outs = list(pool.map(lambda i: net(h + i), range(3)))
            torch.stack(outs).sum()
        return [(r.index, r.name, r.module_path, r.bytes, r.device_time_us, r.group)
                for r in prof.result.records]

    first = run()
    assert len(first) > 12
    assert all(run() == first for _ in range(3))


def test_a_thread_that_outlives_the_region_records_nothing_after_it_and_nothing_leaks():
    go, done = threading.Event(), threading.Event()

    def late() -> None:
        torch.ones(2).exp()
        go.wait(5)
        torch.ones(2).log()  # after the region's end
        done.set()

    with NeuronProfiler() as prof:
        thread = threading.Thread(target=late)
        thread.start()
        time.sleep(0.05)
    go.set()
    thread.join()
    assert done.is_set()
    names = [r.name for r in prof.result.records]
    assert "aten::log" not in names and "aten::exp" in names
    assert ThreadPoolExecutor.submit is region_threads._original_submit
    assert threading.Thread.start is region_threads._original_start


# --- not captured: said, never silent --------------------------------------------------------------

def test_modules_run_by_pool_work_submitted_before_the_region_are_reported(net, x):
    """Before: nothing said the profile was missing the pool's work. (A thread started before
    the region, the plugin test's server below, is the other case.)"""
    go = threading.Event()

    def later() -> torch.Tensor:
        go.wait(10)
        return net(x)

    with ThreadPoolExecutor(1, thread_name_prefix="early") as pool:
        future = pool.submit(later)  # handed over before the region: not under its capture
        with NeuronProfiler() as prof:
            go.set()
            future.result()
            torch.ones(2) + 1
    assert prof.result.uncaptured == ["'early_0' ran Sequential"]
    assert [r.name for r in prof.result.records] == ["aten::ones", "aten::add"]
    assert len(prof.result.notes) == 1
    assert prof.result.notes[0].startswith("not fully profiled")
    assert "'early_0' ran Sequential" in prof.result.notes[0]


def test_a_thread_running_its_own_profiler_is_not_reported(net, x):
    """Two regions at once on two threads: each captures its own; neither misses anything."""
    started, finished = threading.Event(), threading.Event()
    results = []

    def other() -> None:
        with NeuronProfiler() as prof:
            started.set()
            for _ in range(5):
                net(x)
            finished.wait(5)
        results.append(prof.result)

    thread = threading.Thread(target=other)
    thread.start()
    started.wait(5)
    with NeuronProfiler() as mine:
        net(x)
    finished.set()
    thread.join()
    assert mine.result.uncaptured == [] and results[0].uncaptured == []


# --- the plugin ------------------------------------------------------------------------------------

SUITE = '''
import json, pathlib, queue, threading
from concurrent.futures import ThreadPoolExecutor

import pytest, torch

COPIES = json.loads((pathlib.Path(__file__).parent / "knobs.json").read_text())["copies"]
torch.manual_seed(0)
NET = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU())


def work(x):
    y = NET(x)
    for _ in range(COPIES):
        y = y.clone()
    return y


@pytest.mark.neuron_profile
def test_pool():
    x = torch.randn(32, 64)
    with ThreadPoolExecutor(2) as pool:
        pool.submit(work, x).result()


@pytest.mark.neuron_profile
def test_thread():
    x = torch.randn(32, 64)
    thread = threading.Thread(target=work, args=(x,))
    thread.start()
    thread.join()


@pytest.fixture
def server():
    jobs, results = queue.Queue(), queue.Queue()

    def serve():
        while (job := jobs.get()) is not None:
            results.put(work(job))

    thread = threading.Thread(target=serve, name="server")
    thread.start()
    yield jobs, results
    jobs.put(None)
    thread.join()


@pytest.mark.neuron_profile
def test_server(server):
    jobs, results = server
    jobs.put(torch.randn(32, 64))
    results.get(timeout=10)
'''


@pytest.fixture
def suite(pytester: pytest.Pytester, lean_inner_runs: None) -> pytest.Pytester:
    pytester.makepyfile(test_threads_suite=SUITE)
    copies(pytester, 1)
    return pytester


def copies(pytester: pytest.Pytester, n: int) -> None:
    (pytester.path / "knobs.json").write_text(json.dumps({"copies": n}))


CAPTURED = ("test_threads_suite.py::test_pool", "test_threads_suite.py::test_thread")


def test_a_regression_inside_a_thread_pool_or_a_thread_fails_the_test(suite):
    """Before: +0.0 %, passed, with 20 more copies on the pool's thread."""
    suite.runpytest("--neuron-baseline", *CAPTURED).assert_outcomes(passed=2)
    doc = json.loads((suite.path / "baselines" / "test_threads_suite.json").read_text())
    for test in ("test_pool", "test_thread"):
        recorded = doc["tests"][f"test_threads_suite.py::{test}"]["simulated:trn2"]["ops"]
        assert {"aten::addmm", "aten::relu", "aten::clone"} <= set(recorded)
        assert recorded["aten::addmm"]["modules"] == {"0": recorded["aten::addmm"]["device_time_us"]}
    suite.runpytest(*CAPTURED).assert_outcomes(passed=2)
    copies(suite, 20)
    result = suite.runpytest(*CAPTURED)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*aten::clone*1 -> 20 calls, same work each*"])


def test_uncaptured_work_is_said_in_every_output_and_fails_under_strict(suite, monkeypatch):
    summary = suite.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = suite.runpytest("-k", "server", "--neuron-report", "report.json",
                             "--neuron-html", "html")
    result.assert_outcomes(passed=1)
    why = "not fully profiled: modules ran on other threads during the region*'server' ran Sequential*"
    result.stdout.fnmatch_lines([f"*test_server*not compared: {why}",
                                 f"::warning file=test_threads_suite.py*{why}"])
    report = json.loads((suite.path / "report.json").read_text())
    verdict = report["tests"]["test_threads_suite.py::test_server"]["verdict"]
    assert verdict["status"] == "incomparable"
    assert verdict["message"].startswith("not fully profiled")
    assert "not fully profiled" in summary.read_text()
    assert "not fully profiled" in (suite.path / "html" / "index.html").read_text()
    strict = suite.runpytest("-k", "server", "--neuron-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*--neuron-strict*test_server was not compared (not fully profiled*"])


def test_a_partial_profile_is_never_recorded(suite):
    result = suite.runpytest("--neuron-baseline")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["baselines recorded: 2 tests*"])
    doc = json.loads((suite.path / "baselines" / "test_threads_suite.json").read_text())
    assert sorted(doc["tests"]) == ["test_threads_suite.py::test_pool",
                                    "test_threads_suite.py::test_thread"]
