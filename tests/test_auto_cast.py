"""neuronx-cc's --auto-cast (issue 17, item 4): NeuronConfig(auto_cast=...), what it changes in
graph execution (float32 matrix products or all float32 work billed at the bfloat16 rate), that
eager execution ignores it, and the plugin's option, ini key, marker argument and variant."""

from __future__ import annotations

import json
from typing import Callable

import pytest
import torch
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.defaults import DEFAULT_AUTO_CAST
from pytest_neuronprof.errors import ConfigError
from pytest_neuronprof.profiler.result import ProfileResult

pytest_plugins = ["pytester"]
N = 2048  # a matrix product large enough to be TensorE-bound in float32 and in bfloat16 on trn2


def profiled(fn: Callable[[], object], execution: str = "graph",
             auto_cast: str = DEFAULT_AUTO_CAST, hardware: str = "trn2") -> ProfileResult:
    config = NeuronConfig(hardware=hardware, execution=execution, auto_cast=auto_cast)
    with torch.no_grad(), NeuronProfiler(config) as prof:
        fn()
    return prof.result


def linear(dtype: torch.dtype) -> Callable[[], object]:
    layer = nn.Linear(N, N, bias=False, device="meta", dtype=dtype)
    x = torch.empty(N, N, device="meta", dtype=dtype)
    return lambda: layer(x)


def costed(result: ProfileResult) -> list[tuple]:
    return [(r.name, r.device_time_us, r.compute_us, r.memory_us, r.bound, r.bytes_read,
             r.bytes_written) for r in result.records if r.engine != "-"]


# --- NeuronConfig ------------------------------------------------------------------------------

def test_the_default_is_the_compilers_since_neuron_2_27():
    assert DEFAULT_AUTO_CAST == "none"
    assert NeuronConfig().auto_cast == "none"
    for choice in ("none", "matmult", "all"):
        assert NeuronConfig(auto_cast=choice).auto_cast == choice


@pytest.mark.parametrize("bad", ["matmul", "bf16", "", None, 1])
def test_an_unknown_auto_cast_is_a_config_error_listing_the_choices(bad):
    with pytest.raises(ConfigError) as info:
        NeuronConfig(auto_cast=bad)
    assert f"NeuronConfig auto_cast={bad!r}: unknown" in str(info.value)
    assert "none, matmult, all" in str(info.value)


# --- graph execution ---------------------------------------------------------------------------

def test_a_float32_linear_in_graph_mode_runs_at_the_float32_rate_unless_cast():
    hw = load_hardware("trn2")
    none = profiled(linear(torch.float32), auto_cast="none")
    matmult = profiled(linear(torch.float32), auto_cast="matmult")
    cast_all = profiled(linear(torch.float32), auto_cast="all")
    (mm_none,), (mm_cast,), (mm_all,) = ([r for r in res.records if r.engine == "Tensor"]
                                        for res in (none, matmult, cast_all))
    assert (none.auto_cast, matmult.auto_cast, cast_all.auto_cast) == ("none", "matmult", "all")
    # TensorE-bound both ways, so the product's time follows TensorE's rate: float32 against
    # bfloat16 (20 against 79 TFLOP/s on a NeuronCore-v3).
    assert mm_cast.compute_us > mm_cast.memory_us
    ratio = hw.tensor.flops_per_us("bfloat16") / hw.tensor.flops_per_us("float32")
    assert mm_none.compute_us / mm_cast.compute_us == pytest.approx(ratio, rel=0.05)
    assert mm_none.device_time_us > 3 * mm_cast.device_time_us
    assert none.total_device_time_us > 3 * matmult.total_device_time_us
    # The cast happens on chip: HBM traffic keeps the model's float32.
    assert (mm_none.bytes_read, mm_none.bytes_written) == (mm_cast.bytes_read, mm_cast.bytes_written)
    assert mm_all.compute_us == mm_cast.compute_us  # "all" casts the product too


def test_a_bfloat16_model_is_the_same_under_every_auto_cast():
    results = [profiled(linear(torch.bfloat16), auto_cast=a) for a in ("none", "matmult", "all")]
    assert costed(results[0]) == costed(results[1]) == costed(results[2])
    assert costed(results[0])  # it did cost something


def elementwise_chain(dtype: torch.dtype = torch.float32) -> Callable[[], None]:
    def work() -> None:
        # VectorE work whose intermediates stay in SBUF inside the graph
        x = torch.empty(4096, 4096, device="meta", dtype=dtype)
        y = x * 2.0
        y = y + 1.0
        y = y * y
        y = y - 3.0
    return work


def _tensor_inputs(record) -> int:
    return sum(1 for shape in record.input_shapes if shape)


def test_all_casts_float32_elementwise_work_and_matmult_does_not():
    none = profiled(elementwise_chain(), auto_cast="none")
    matmult = profiled(elementwise_chain(), auto_cast="matmult")
    cast_all = profiled(elementwise_chain(), auto_cast="all")
    bf16 = profiled(elementwise_chain(torch.bfloat16), auto_cast="none")
    assert costed(none) == costed(matmult)  # not TensorE work: matmult leaves it alone
    ops = [(m, a, b) for m, a, b in zip(matmult.records, cast_all.records, bf16.records)
           if m.engine == "Vector"]
    assert [m.name for m, _, _ in ops] == ["aten::mul", "aten::add", "aten::mul", "aten::sub"]
    # "all": each op computes at the bfloat16 rate, with the model's float32 HBM traffic.
    assert [a.compute_us for _, a, _ in ops] == [b.compute_us for _, _, b in ops]
    assert [a.bytes_read + a.bytes_written for _, a, _ in ops] == \
        [m.bytes_read + m.bytes_written for m, _, _ in ops]
    # VectorE's bfloat16 mode (twice the elements per cycle for one-input instructions such as
    # y = x * 2.0) makes it faster; nothing gets slower.
    # (y * 2.0 itself rides on its reader's free scalar slot in a graph: no pass of its own)
    scaled, cast, _ = next(op for op in ops if op[0].compute_us > 0 and _tensor_inputs(op[0]) == 1)
    assert cast.compute_us < scaled.compute_us
    assert all(a.compute_us <= m.compute_us for m, a, _ in ops)
    # fused into one loop nest, the chain is bound by its float32 HBM traffic: no slower
    assert cast_all.total_device_time_us <= matmult.total_device_time_us


def test_a_gpu_profile_ignores_auto_cast():
    none = profiled(linear(torch.float32), auto_cast="none", hardware="h200")
    matmult = profiled(linear(torch.float32), auto_cast="matmult", hardware="h200")
    assert costed(none) == costed(matmult)


# --- eager execution ignores it ----------------------------------------------------------------

@pytest.mark.parametrize("work", [linear(torch.float32), elementwise_chain()])
def test_eager_execution_keeps_the_models_dtypes_whatever_auto_cast_says(work):
    # TorchNeuron compiles each eager op itself, with the model's dtypes (NeuronConfig's
    # docstring has the sources): no auto-cast, and the result keeps the default so that no
    # eager variant names it. The eager costs cached per profile are shared by every value.
    results = [profiled(work, execution="eager", auto_cast=a) for a in ("matmult", "all", "none")]
    assert costed(results[0]) == costed(results[1]) == costed(results[2])
    assert [r.auto_cast for r in results] == [DEFAULT_AUTO_CAST] * 3


def test_a_capture_retimed_in_graph_mode_takes_its_auto_cast():
    work = linear(torch.float32)
    with torch.no_grad(), NeuronProfiler(NeuronConfig(execution="graph")) as prof:
        prof._backend.keep_capture = True
        work()
    capture, hw = prof._backend.last_capture, load_hardware("trn2")
    direct = profiled(linear(torch.float32), auto_cast="matmult")
    retimed = capture.retime(hw, "graph", auto_cast="matmult")
    assert [r.device_time_us for r in retimed] == [r.device_time_us for r in direct.records]
    assert [r.device_time_us for r in capture.retime(hw, "graph")] == \
        [r.device_time_us for r in prof.result.records]  # the default: none
    assert sum(r.device_time_us for r in retimed) < prof.result.total_device_time_us


def test_concatenated_results_keep_their_auto_cast():
    one = profiled(linear(torch.float32), auto_cast="matmult")
    assert ProfileResult.concatenate([one, one]).auto_cast == "matmult"


# --- the plugin: option, ini key, marker argument, variant -------------------------------------

TEST_FILE = """
import pytest, torch

def work():  # a TensorE-bound product, on meta tensors: costed by shape, nothing computed
    layer = torch.nn.Linear(2048, 2048, bias=False, device="meta")
    with torch.no_grad():
        layer(torch.empty(2048, 2048, device="meta"))

@pytest.mark.neuron_profile(execution="graph")
def test_graph():
    work()

@pytest.mark.neuron_profile(execution="graph", auto_cast="all")
def test_graph_all():
    work()

@pytest.mark.neuron_profile
def test_eager():
    work()
"""


def variants(pytester: pytest.Pytester) -> dict[str, dict[str, dict]]:
    data = json.loads((pytester.path / "baselines" / "test_cast.json").read_text())
    return {nodeid.split("::")[1]: entries for nodeid, entries in data["tests"].items()}


def test_the_ini_key_the_option_over_it_and_the_marker_over_both(pytester):
    pytester.makepyfile(test_cast=TEST_FILE)
    pytester.makeini("[pytest]\nneuron_auto_cast = matmult\n")
    pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline").assert_outcomes(passed=3)
    recorded = variants(pytester)
    assert set(recorded["test_graph"]) == {"simulated:trn2:graph:auto-cast=matmult"}  # the ini's
    assert set(recorded["test_graph_all"]) == {"simulated:trn2:graph:auto-cast=all"}  # the marker's
    assert set(recorded["test_eager"]) == {"simulated:trn2"}  # eager: not part of its variant
    cast = recorded["test_graph"]["simulated:trn2:graph:auto-cast=matmult"]
    assert cast["auto_cast"] == "matmult"
    assert "auto_cast" not in recorded["test_eager"]["simulated:trn2"]

    # The option wins over the ini key: the default, unnamed in the variant and in the entry.
    pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline",
                       "--neuron-auto-cast", "none").assert_outcomes(passed=3)
    recorded = variants(pytester)
    assert set(recorded["test_graph"]) == {"simulated:trn2:graph",
                                           "simulated:trn2:graph:auto-cast=matmult"}
    assert set(recorded["test_graph_all"]) == {"simulated:trn2:graph:auto-cast=all"}
    assert set(recorded["test_eager"]) == {"simulated:trn2"}
    uncast = recorded["test_graph"]["simulated:trn2:graph"]
    assert "auto_cast" not in uncast
    # float32 products at the float32 rate: about 4x the cast ones on trn2's TensorE (the
    # product's own time: the weight's initialisation, written back to HBM, is not cast)
    assert uncast["ops"]["aten::mm"]["device_time_us"] > 3 * cast["ops"]["aten::mm"]["device_time_us"]
    assert recorded["test_graph_all"]["simulated:trn2:graph:auto-cast=all"][
        "total_device_time_us"] <= cast["total_device_time_us"]

    # Each variant gates against its own entry: both runs pass against what they recorded.
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=3)
    pytester.runpytest("-p", "no:cacheprovider", "--neuron-auto-cast=none").assert_outcomes(passed=3)


def test_a_bad_auto_cast_option_or_marker_argument_names_itself(pytester):
    pytester.makepyfile(test_bad="""
import pytest

@pytest.mark.neuron_profile(execution="graph", auto_cast="bf16")
def test_x():
    pass
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--neuron-auto-cast", "matmul")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--neuron-auto-cast (ini neuron_auto_cast)='matmul': unknown; "
                                 "valid choices: none, matmult, all*"])
    pytester.makeini("[pytest]\nneuron_auto_cast = fp8\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--neuron-auto-cast (ini neuron_auto_cast)='fp8': unknown*"])
    pytester.makeini("[pytest]\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*neuron_profile auto_cast='bf16': unknown; "
                                 "valid choices: none, matmult, all*"])


def test_the_option_and_the_marker_argument_are_documented(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["*--neuron-auto-cast=VALUE*", "*neuron_auto_cast*"])
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["*neuron_profile(*auto_cast=None*"])
