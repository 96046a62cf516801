"""The profiled code misbehaving, on purpose: nested profilers, threads, torch.compile inside the
region, and a region of very many ops held to a memory budget.

(An exception inside the region is tests/test_plugin.py's
test_exception_in_the_profiled_region_is_a_normal_failure and tests/test_profiler.py's
test_an_exception_in_the_region_stops_capture.)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import warnings

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.gate.summary import summarize

pytest_plugins = ["pytester"]


def names(result) -> list[str]:
    return [r.name for r in result.records]


def op_counts(result) -> dict[str, int]:
    return {name: op.count for name, op in summarize(result, "v", torch.__version__).ops.items()}


@pytest.fixture(autouse=True)
def no_mode_left_behind():
    """Every test here must leave the thread's dispatch-mode stack as it found it."""
    before = list(_get_current_dispatch_mode_stack())
    yield
    assert list(_get_current_dispatch_mode_stack()) == before


# --- nested profilers ----------------------------------------------------------------------------

def test_nested_profilers_both_record_and_the_outer_sees_the_inner_ops():
    """Documented behaviour: each profiler records every op issued while it runs, so an outer
    one sees the inner region's ops too, with the same device times; each keeps its own
    hardware."""
    a = torch.randn(64, 64)
    with NeuronProfiler(NeuronConfig(hardware="trn2")) as outer:
        b = a + 1
        with NeuronProfiler(NeuronConfig(hardware="trn1")) as inner:
            c = b @ b
            torch.relu(c)
        b * 2
    assert names(inner.result) == ["aten::mm", "aten::relu"]
    assert names(outer.result) == ["aten::add", "aten::mm", "aten::relu", "aten::mul"]
    with NeuronProfiler(NeuronConfig(hardware="trn1")) as alone:
        torch.relu(b @ b)
    assert [r.device_time_us for r in inner.result.records] == [r.device_time_us for r in alone.result.records]
    assert inner.result.hardware == "trn1" and outer.result.hardware == "trn2"
    with NeuronProfiler(NeuronConfig(hardware="trn2")) as same:
        torch.relu(b @ b)
    assert [r.device_time_us for r in outer.result.records[1:3]] == [r.device_time_us for r in same.result.records]


def test_nested_module_paths_are_the_same_in_both():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Sequential(torch.nn.ReLU()))
    with NeuronProfiler() as outer:
        with NeuronProfiler() as inner:
            model(torch.randn(2, 8))
    paths = {(r.name, r.module_path) for r in inner.result.records}
    assert ("aten::addmm", "0") in paths and ("aten::relu", "1.0") in paths
    assert {(r.name, r.module_path) for r in outer.result.records} >= paths


def test_stopping_an_outer_profiler_first_is_refused_and_both_stay_stoppable():
    """Exiting the outer profiler's dispatch mode while an inner one runs would pop the inner
    mode instead: the inner lost its capture and the outer kept capturing for the rest of the
    process. Now the out-of-order stop raises and changes nothing."""
    outer = NeuronProfiler().start()
    inner = NeuronProfiler().start()
    torch.ones(2) + 1
    with pytest.raises(RuntimeError, match="stop nested profilers innermost first"):
        outer.stop()
    torch.ones(2) * 2
    assert names(inner.stop()) == ["aten::ones", "aten::add", "aten::ones", "aten::mul"]
    assert names(outer.stop()) == ["aten::ones", "aten::add", "aten::ones", "aten::mul"]


def test_a_profiler_stopped_inside_a_foreign_mode_is_refused():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    prof = NeuronProfiler().start()
    mode = Passthrough()
    mode.__enter__()
    try:
        with pytest.raises(RuntimeError, match="another TorchDispatchMode"):
            prof.stop()
    finally:
        mode.__exit__(None, None, None)
    assert prof.stop().records == []


def test_a_marked_test_with_its_own_profiler_inside(pytester: pytest.Pytester):
    """Under the plugin: the test's own NeuronProfiler nests inside the plugin's; both record,
    and the baseline holds every op of the test."""
    pytester.makepyfile(test_nest='''
        import pytest, torch
        from pytest_neuronprof import NeuronProfiler

        @pytest.mark.neuron_profile
        def test_nested():
            a = torch.randn(32, 32)
            with NeuronProfiler() as mine:
                a @ a
            torch.exp(a)
            assert [r.name for r in mine.result.records] == ["aten::mm"]
    ''')
    result = pytester.runpytest("--neuron-baseline", "-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    result.assert_outcomes(passed=1)
    import json

    doc = json.loads((pytester.path / "baselines" / "test_nest.json").read_text())
    ops = doc["tests"]["test_nest.py::test_nested"]["simulated:trn2"]["ops"]
    assert sorted(ops) == ["aten::exp", "aten::mm", "aten::randn"]


# --- threads -------------------------------------------------------------------------------------

# Work handed to other threads is captured: tests/test_threads.py.

def test_a_model_running_on_another_thread_does_not_disturb_module_paths():
    """Module hooks are global: a model running on another thread during the region pushed
    and popped the tracker's stack from both threads. Paths came out as
    '0.Sequential.2.Sequential.0...' and the stack grew without bound."""
    mine = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    theirs = torch.nn.Sequential(torch.nn.Identity(), torch.nn.Sequential(torch.nn.Linear(8, 8)))
    stop = threading.Event()

    def background():
        y = torch.randn(2, 8)
        while not stop.is_set():
            theirs(y)

    thread = threading.Thread(target=background)
    x = torch.randn(2, 8)
    thread.start()
    try:
        with NeuronProfiler() as prof:
            for _ in range(300):
                mine(x)
    finally:
        stop.set()
        thread.join()
    with NeuronProfiler() as alone:
        mine(x)
    assert {(r.name, r.module_path) for r in prof.result.records} == {
        (r.name, r.module_path) for r in alone.result.records}
    assert {r.module_path for r in prof.result.records} == {"0", "1"}


def test_stopping_on_another_thread_is_refused_and_the_profiler_stays_stoppable():
    prof = NeuronProfiler().start()
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(RuntimeError, prof.stop)))
    thread.start()
    thread.join()
    assert "stopped on the thread that started it" in str(errors[0].value)
    torch.ones(1) + 1
    assert names(prof.stop()) == ["aten::ones", "aten::add"]


# --- torch.compile inside the region ---------------------------------------------------------------

def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


BACKENDS = ["eager", "aot_eager",
            pytest.param("inductor", marks=pytest.mark.skipif(shutil.which("cc") is None,
                                                              reason="inductor needs a C compiler"))]


@pytest.mark.parametrize("backend", BACKENDS)
def test_torch_compile_inside_the_region_profiles_the_eager_ops(backend):
    """Dynamo steps aside while a (non-infra) dispatch mode is active, so compiled code runs
    eagerly under the profiler and the profile is the eager op sequence, module paths and all
    (no '_orig_mod.' from the OptimizedModule wrapper). Without _skip_dynamo_in_dispatch,
    dynamo compiled the capture hot path itself: graph breaks, recompile-limit warnings."""
    import torch._dynamo

    model, x = _model(), torch.randn(8, 16)
    with NeuronProfiler() as eager:
        model(x).sum().backward()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):  # the first call and a cached one
            model.zero_grad()
            with NeuronProfiler() as prof:
                compiled(x).sum().backward()
            assert op_counts(prof.result) == op_counts(eager.result)
            assert [(r.name, r.module_path) for r in prof.result.records] == [
                (r.name, r.module_path) for r in eager.result.records]
    dynamo_noise = [str(w.message) for w in caught
                    if "Dynamo" in str(w.message) or "recompile" in str(w.message)]
    assert dynamo_noise == []
    assert "_orig_mod" not in repr({r.module_path for r in prof.result.records})


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_warmed_up_outside_the_region_still_profiles_the_eager_ops(backend):
    import torch._dynamo

    def f(a):
        return torch.sin(a) @ a + 1

    x = torch.randn(8, 8)
    with NeuronProfiler() as eager:
        f(x)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend=backend)
    compiled(x)  # compiled outside any region
    with NeuronProfiler() as prof:
        out = compiled(x)
    assert names(prof.result) == names(eager.result) == ["aten::sin", "aten::mm", "aten::add"]
    assert torch.allclose(out, f(x))


def test_torch_compile_fullgraph_inside_the_region_fails_clearly():
    """fullgraph=True promises a compiled graph; under a dispatch mode dynamo compiles nothing,
    so torch raises its own RuntimeError saying so (before the fix it was dynamo's Unsupported
    error about time.perf_counter_ns, deep in the profiler). Before torch 2.13 torch says
    nothing (2.12: a UserWarning) and the function runs eagerly, profiled as such."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(lambda a: torch.sin(a) + 1, backend="eager", fullgraph=True)
    x = torch.randn(4)
    with NeuronProfiler() as prof:
        if torch.__version__ >= (2, 13):
            with pytest.raises(RuntimeError, match="fullgraph=True found no compiled frames"):
                compiled(x)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                out = compiled(x)
    if torch.__version__ < (2, 13):
        assert names(prof.result) == ["aten::sin", "aten::add"]
        assert torch.allclose(out, torch.sin(x) + 1)


@pytest.mark.slow  # starts a subprocess
def test_profiling_does_not_import_dynamo():
    """The reason _should_skip_dynamo is overridden: torch._dynamo costs ~1 s to import."""
    code = ("import sys, torch\nfrom pytest_neuronprof import NeuronProfiler\n"
            "with NeuronProfiler() as p:\n    torch.ones(4) @ torch.ones(4)\n"
            "assert [r.name for r in p.result.records] == ['aten::ones', 'aten::ones', 'aten::dot']\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# --- many ops: a memory budget ----------------------------------------------------------------------

# Measured with benchmarks/memory_per_op.py (1,000,000 ops of x.add_(1) on a 1-element meta
# tensor, torch 2.13, CPython 3.11, device-memory tracking on): 685 bytes per op held during the
# region, 1,069 at the peak of stop() (the raw tuples and the OpRecords built from them), 405 kept
# in the result. The budget is twice that, so a regression that doubles the footprint fails;
# docs/guarantees.md has them.
MEASURED = {"capture": 685, "peak": 1069, "result": 405}
OPS = 20_000


def _memory_benchmark():
    """benchmarks/memory_per_op.py, the one measurement both the docs' figures and this
    budget come from (benchmarks/ is not a package: load it by path)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "memory_per_op.py"
    spec = importlib.util.spec_from_file_location("memory_per_op", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_bytes_per_op_stay_within_twice_the_measured_figures():
    per_op = _memory_benchmark().measure(OPS, "meta")
    over = {k: round(v) for k, v in per_op.items() if v > 2 * MEASURED[k]}
    assert not over, f"bytes per op {per_op} exceed twice the measured {MEASURED}"
    # ... and nothing of the tensors is kept: a region on real tensors frees them
    assert per_op["result"] < 1000
