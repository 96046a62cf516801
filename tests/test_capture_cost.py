"""What keeps the profiler's own cost low (issue 27, items 4 and 5) changes no number: calls shared
between regions, the graph schedule of an equal region, the collector held off while a region is
costed, the memory timeline's fast path, module names remembered between regions, and a plugin
that loads its session, the gate and the outputs only when a run has a profiled test."""

from __future__ import annotations

import gc
import random

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel import memory as device_memory
from pytest_neuronprof.profiler.backends import simulated
from pytest_neuronprof.profiler.backends.simulated import ARGS, CALL, FUNC, OUTPUTS

pytest_plugins = ["pytester"]
aten = torch.ops.aten
HOST = {"host_start_us", "cpu_time_us"}


def facts(result) -> list[dict]:
    """Every field of every record but the host times (which differ from run to run)."""
    return [{k: v for k, v in vars(r).items() if k not in HOST} for r in result.records]


def profiled(fn, **config):
    with NeuronProfiler(NeuronConfig(**config), keep_capture=True) as prof:
        fn()
    return prof


def region():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))
    x = torch.randn(4, 16)

    def step():
        a = model(x)
        torch.mul(a, 3)
        torch.mul(a, 3.0)
        torch.mul(a, True)
        torch.cat([a, a * 2.0], dim=0).sum(dim=[0], keepdim=True).sum().backward()
        a.detach().t().clone()
        a.detach().clone()
    return step


# -- calls shared between regions ------------------------------------------------------------------

def test_equal_calls_share_their_metadata_and_only_equal_ones_do():
    simulated.clear_cost_cache()
    raw = profiled(region())._backend.last_capture.raw
    costed = [op for op in raw if op[ARGS] is not None]
    assert all(op[CALL] is not None for op in costed)  # every call of this region has a key
    muls = [op for op in costed if op[FUNC] is aten.mul.Tensor and op[ARGS][1] in (3, 3.0, True)]
    # 3, 3.0 and True are equal in Python, not to the simulator: three calls, three metadata
    assert [type(op[ARGS][1]) for op in muls] == [int, float, bool]
    assert len({id(op[CALL]) for op in muls}) == 3
    # a transpose's copy reads by strides, a contiguous one does not: not one call
    clones = [op for op in costed if op[FUNC] is aten.clone.default]
    assert [op[ARGS][0].strides for op in clones] == [(1, 16), (16, 1)]
    assert clones[0][CALL] is not clones[1][CALL]
    # the same region again: the same calls, its records the same
    again = profiled(region())._backend.last_capture.raw
    assert [op[CALL] for op in again] == [op[CALL] for op in raw]


def test_records_are_the_same_from_a_cold_or_a_warm_cache():
    for execution in ("eager", "graph"):
        simulated.clear_cost_cache()
        cold = profiled(region(), execution=execution).result
        warm = profiled(region(), execution=execution).result
        simulated.clear_cost_cache()
        again = profiled(region(), execution=execution).result
        assert facts(cold) == facts(warm) == facts(again)
        assert cold.memory == warm.memory == again.memory


def test_a_call_without_a_key_is_costed_as_its_own():
    # A nested list has no key: its metadata is its own, and it is costed by its metadata.
    def step():
        torch.ops.aten.index.Tensor(torch.randn(4, 4), [torch.tensor([0, 1])])
        torch.randn(3, 4).nonzero()
    simulated.clear_cost_cache()
    prof = profiled(step)
    costed = [op for op in prof._backend.last_capture.raw if op[ARGS] is not None]
    assert costed and all(op[OUTPUTS] is not None for op in costed)
    simulated.clear_cost_cache()
    assert facts(prof.result) == facts(profiled(step).result)


def test_sdpa_on_meta_with_a_wider_value_costs_the_same_cold_and_warm():
    def step():
        q = torch.randn(2, 4, 64, 32, device="meta", requires_grad=True)
        k = torch.randn(2, 4, 64, 32, device="meta", requires_grad=True)
        v = torch.randn(2, 4, 64, 64, device="meta", requires_grad=True)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        assert out.shape == (2, 4, 64, 64)
        out.sum().backward()
    simulated.clear_cost_cache()
    cold = profiled(step).result
    assert facts(cold) == facts(profiled(step).result)


# -- graph execution ---------------------------------------------------------------------------------

def test_an_equal_region_reuses_its_schedule_and_another_does_not():
    simulated.clear_cost_cache()
    first = profiled(region(), execution="graph")
    assert len(simulated._GRAPHS) == 1
    second = profiled(region(), execution="graph")
    assert len(simulated._GRAPHS) == 1 and facts(first.result) == facts(second.result)

    def other():
        nn.Linear(16, 8)(torch.randn(2, 16))
    profiled(other, execution="graph")
    assert len(simulated._GRAPHS) == 2
    # another chip of the same capture is a schedule of its own, the same from a cold cache
    on_trn1 = second.result_for("trn1")
    assert len(simulated._GRAPHS) == 3
    simulated.clear_cost_cache()
    assert facts(on_trn1) == facts(first.result_for("trn1"))


def test_the_collector_is_held_off_while_a_region_is_costed_and_left_as_it_was(monkeypatch):
    seen = []
    schedule = simulated.graph_execution

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return schedule(*args, **kwargs)
    monkeypatch.setattr(simulated, "graph_execution", watched)
    simulated.clear_cost_cache()
    assert gc.isenabled()
    profiled(region(), execution="graph")
    assert seen == [False] and gc.isenabled()
    gc.disable()
    try:
        simulated.clear_cost_cache()
        profiled(region(), execution="graph")
        assert seen == [False, False] and not gc.isenabled()  # a caller's own choice is kept
    finally:
        gc.enable()


# -- the memory timeline -----------------------------------------------------------------------------

def reference_timeline(storages, frees, ops):
    """The timeline, peak and peak index as memory_usage computed them op by op."""
    resident = sum(n for p, n, _, _ in storages if p == device_memory.RESIDENT)
    change = [0] * ops
    for position, nbytes, _, _ in storages:
        if position != device_memory.RESIDENT:
            change[position] += nbytes
    for position, number in frees:
        if position < ops:
            change[position] -= storages[number][1]
    live = peak = resident
    peak_index = device_memory.RESIDENT
    timeline = [(device_memory.RESIDENT, resident)]
    for position, delta in enumerate(change):
        if delta:
            live += delta
            timeline.append((position, live))
            if live > peak:
                peak, peak_index = live, position
    return tuple(timeline), peak, peak_index


@pytest.mark.parametrize("seed", range(300))
def test_the_memory_timeline_is_the_one_op_by_op(seed):
    rng = random.Random(seed)
    ops = rng.randint(0, 30)
    storages = [(rng.choice([-1, *range(ops)]) if ops else -1, rng.choice([0, 8, 64, 64, 4096]),
                 (rng.randint(1, 4),), torch.float32) for _ in range(rng.randint(0, 20))]
    frees = [(rng.randint(max(0, p + 1), ops + 1), k) for k, (p, *_) in enumerate(storages)
             if rng.random() < 0.7]
    rng.shuffle(frees)
    usage = device_memory.memory_usage(storages, frees, ops, lambda k: (f"aten::op{k}", "m"))
    timeline, peak, peak_index = reference_timeline(storages, frees, ops)
    assert (usage.timeline, usage.peak_bytes, usage.peak_index) == (timeline, peak, peak_index)
    groups = [device_memory.LiveGroup(g.op, g.module_path, g.shape, g.dtype, g.count, g.bytes)
              for g in usage.live]  # made by __init__: equal, hashed and laid out alike
    assert groups == list(usage.live) and [hash(g) for g in groups] == [hash(g) for g in usage.live]
    assert [list(vars(g)) for g in groups] == [list(vars(g)) for g in usage.live]
    assert sorted(usage.live, key=lambda g: (-g.bytes, g.op, g.module_path, g.shape, g.dtype)) \
        == list(usage.live)


# -- module paths ------------------------------------------------------------------------------------

def test_a_module_moved_between_regions_takes_its_new_name():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.Linear(4, 4)

        def forward(self, x):
            for name in ("first", "second"):
                if hasattr(self, name):
                    x = getattr(self, name)(x)
            return x
    net = Net()
    x = torch.randn(2, 4)
    with NeuronProfiler() as prof:
        net(x)
    assert {r.module_path for r in prof.result.records if r.name == "aten::addmm"} == {"first"}
    net.second = net.first
    del net.first
    with NeuronProfiler() as prof:
        net(x)
    assert {r.module_path for r in prof.result.records if r.name == "aten::addmm"} == {"second"}


# -- the plugin in a suite without profiled tests ------------------------------------------------------

def test_the_trace_option_is_the_trace_module_s():
    from pytest_neuronprof.outputs import registry, trace_files
    from pytest_neuronprof.plugin import FIXTURE
    from pytest_neuronprof.plugin import session

    assert registry.TRACE_FLAG == trace_files.FLAG
    assert FIXTURE == session.FIXTURE


PLAIN = "def test_plain():\n    assert 1 + 1 == 2\n"
LOADED = '''
import sys

def test_what_the_plugin_loaded():
    loaded = sorted(m for m in sys.modules if m.startswith("pytest_neuronprof."))
    print("LOADED", " ".join(loaded))
    assert "torch" not in sys.modules
'''


@pytest.mark.slow
def test_a_suite_without_profiled_tests_loads_no_session_gate_or_output(pytester: pytest.Pytester):
    pytester.makepyfile(test_loaded=LOADED)
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    line = next(line for line in result.outlines if "LOADED " in line)
    loaded = set(line.split("LOADED ", 1)[1].split())
    for heavy in ("pytest_neuronprof.plugin.session", "pytest_neuronprof.gate.compare",
                  "pytest_neuronprof.gate.baseline", "pytest_neuronprof.outputs.html",
                  "pytest_neuronprof.outputs.terminal", "pytest_neuronprof.costmodel.profiles",
                  "pytest_neuronprof.profiler.backends.simulated"):
        assert heavy not in loaded


BROKEN_SUITE = '''
import pytest, torch

@pytest.mark.neuron_profile
def test_profiled():
    torch.ones(4, 4) @ torch.ones(4, 4)
'''


def test_a_broken_baseline_file_stops_a_run_with_a_profiled_test_only(pytester: pytest.Pytester):
    pytester.makepyfile(test_profiled=BROKEN_SUITE, test_plain=PLAIN)
    (pytester.path / "baselines").mkdir()
    (pytester.path / "baselines" / "test_profiled.json").write_text("this is not JSON\n")
    # the profiled test collected: the file stops the run before any test runs
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "baselines/test_profiled.json" in result.stderr.str()
    # no profiled test collected (deselected by name): nothing reads the baseline files
    result = pytester.runpytest("-p", "no:cacheprovider", "test_plain.py")
    result.assert_outcomes(passed=1)
    # ... unless the options ask for the session's end: an output of the run
    result = pytester.runpytest("-p", "no:cacheprovider", "test_plain.py",
                                "--neuron-report", "report.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


FIXTURE_LATE = '''
import torch

def test_asks_for_the_fixture_late(request):
    region = request.getfixturevalue("neuron_profile")
    with region:
        torch.ones(8, 8) @ torch.ones(8, 8)
    assert region.result.total_device_time_us > 0
'''


def test_a_test_that_asks_for_the_fixture_late_starts_the_session(pytester: pytest.Pytester):
    pytester.makepyfile(test_late=FIXTURE_LATE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
