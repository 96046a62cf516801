"""The cost model: hardware profiles, the TensorE tile model, the roofline formula, and the work
(FLOPs, bytes, engine) the registry assigns to representative ATen ops.

Numbers are exact where the model is exact (cycle counts, FLOPs, bytes) and derived from the
loaded trn2 profile where they are times, so a test states the formula it checks.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from importlib import resources

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_neuronprof import HardwareProfileError
from pytest_neuronprof.costmodel import Engine, OpCost, TensorMeta, register_cost, register_free, unregister
from pytest_neuronprof.costmodel.registry import formula_for, op_cost
from pytest_neuronprof.costmodel.profiles import TensorEngine, available_hardware, load_hardware, parse_profile
from pytest_neuronprof.costmodel.roofline import ENGINE_BOUNDS, device_time, systolic_cycles, tensor_time_us
from pytest_neuronprof.errors import CostFormulaError, CostRegistrationError
from pytest_neuronprof.vocabulary import BOUND_FIXED, BOUND_HBM, BOUNDS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

BUNDLED = ("h200", "inf2", "trn1", "trn2", "trn2-lnc1", "trn3", "trn3-lnc1")
F32, BF16, I64 = torch.float32, torch.bfloat16, torch.int64


@pytest.fixture(scope="module")
def trn2():
    """One physical NeuronCore-v3 (LNC=1): the datasheet's numbers, with nothing doubled."""
    return load_hardware("trn2-lnc1")


def only(result, name: str):
    """The one record of op ``name`` in a result."""
    found = [r for r in result.records if r.name == name]
    assert len(found) == 1, [r.name for r in result.records]
    return found[0]


def share(hw, size: float) -> float:
    """The DMA share of HBM bandwidth at ``size`` bytes per partition, from the profile's numbers
    (the NKI DMA guide's curve: size / (size + dma_half_bytes), at most a chunk)."""
    size = min(size, hw.dma_chunk_bytes)
    return hw.dma_efficiency * size / (size + hw.dma_half_bytes)


def ramped(work_us: float, ramp_us: float) -> float:
    """TensorE work started at half rate, ramping linearly to full over ``ramp_us``."""
    if work_us >= 0.75 * ramp_us:
        return work_us + 0.25 * ramp_us
    return 2 * ramp_us * (math.sqrt(0.25 + work_us / ramp_us) - 0.5)


def unramped(time_us: float, ramp_us: float) -> float:
    """The TensorE work (at full rate) that takes ``time_us`` on a throttled array: ramped's inverse."""
    if time_us >= ramp_us:
        return time_us - 0.25 * ramp_us
    return 0.5 * time_us + 0.25 * time_us**2 / ramp_us


# --- hardware profiles -----------------------------------------------------------------------


def test_every_bundled_profile_loads():
    assert set(BUNDLED) <= set(available_hardware())
    for name in BUNDLED:
        hw = load_hardware(name)
        assert hw.name == name
        assert hw.cores_per_chip >= 1
        assert hw.launch_us > 0 and hw.hbm_gbps > 0
        assert hw.tensor.flops_per_us("float32") > 0
        assert hw.tensor.model in ("systolic", "roofline")


def test_trn2_profile_matches_the_public_numbers(trn2):
    # The Trainium2 docs: 8 NeuronCore-v3 per chip, 2.9 TB/s per chip, 128x128 TensorE at 79
    # TFLOP/s bf16, VectorE 256 elements (512 bf16) per cycle at 0.96 GHz, ScalarE and GpSimd
    # 128 per cycle at 1.2 GHz, 28 MiB SBUF per core.
    assert trn2.cores_per_chip == 8
    assert trn2.hbm_gbps * trn2.cores_per_chip == pytest.approx(2900.0)
    assert (trn2.tensor.partitions, trn2.tensor.moving_max, trn2.tensor.min_cycles) == (128, 512, 64)
    assert (trn2.tensor.tflops["bfloat16"], trn2.tensor.arrays, trn2.sbuf_mib) == (79.0, 1, 28.0)
    assert trn2.vector.rate("float32") == pytest.approx(256 * 960)
    assert trn2.vector.rate("bfloat16") == pytest.approx(512 * 960)
    assert trn2.scalar.rate("float32") == trn2.gpsimd.rate("float32") == pytest.approx(128 * 1200)


@pytest.mark.parametrize("lnc2, lnc1", [("trn2", "trn2-lnc1"), ("trn3", "trn3-lnc1")])
def test_the_default_logical_core_is_two_physical_cores(lnc2, lnc1):
    """trn2 and trn3 are the SDK's default logical core (LNC=2): twice one physical core's
    engines, bandwidth and SBUF, half as many cores per chip; every fitted value is the same."""
    two, one = load_hardware(lnc2), load_hardware(lnc1)
    assert two.cores_per_chip * 2 == one.cores_per_chip
    assert (two.tensor.arrays, one.tensor.arrays) == (2, 1)
    assert two.tensor.tflops == one.tensor.tflops  # per array; the arrays shard an op
    assert (two.hbm_gbps, two.sbuf_mib) == (2 * one.hbm_gbps, 2 * one.sbuf_mib)
    for engine in ("vector", "scalar", "gpsimd"):
        assert getattr(two, engine).rate("float32") == pytest.approx(2 * getattr(one, engine).rate("float32"))
        assert getattr(two, engine).rate("bfloat16") == pytest.approx(2 * getattr(one, engine).rate("bfloat16"))
    assert two.tensor.efficiency == one.tensor.efficiency
    assert (two.launch_us, two.graph_execution_us) == (one.launch_us, one.graph_execution_us)
    assert two.collectives.hop_us == one.collectives.hop_us


def _numeric_fields(table: dict, prefix: str = ""):
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            yield from _numeric_fields(value, f"{path}.")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield path


@pytest.mark.parametrize("name", BUNDLED)
def test_every_number_in_a_profile_cites_a_source(name):
    """Fails when someone adds a number to a hardware profile without a [sources] entry. An
    entry covers its field and everything below it ("tensor.tflops" covers every dtype rate)."""
    text = resources.files("pytest_neuronprof.costmodel").joinpath("hardware", f"{name}.toml").read_text("utf-8")
    data = tomllib.loads(text)
    sources = data.pop("sources", None)
    assert isinstance(sources, dict) and sources, f"{name}.toml has no [sources] table"
    missing = []
    for path in _numeric_fields(data):
        parts = path.split(".")
        prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
        if not any(isinstance(sources.get(p), str) and sources[p].strip() for p in prefixes):
            missing.append(path)
    assert not missing, f"{name}.toml: numbers without a [sources] entry: {missing}"


def test_unknown_hardware_names_the_valid_choices():
    with pytest.raises(HardwareProfileError) as info:
        load_hardware("trn9")
    message = str(info.value)
    assert "'trn9'" in message
    for name in BUNDLED:
        assert name in message


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.pop("tensor"), "[tensor]"),
        (lambda d: d["tensor"].update(model="magic"), "tensor.model"),
        (lambda d: d.update(hbm_gbps=-1.0), "hbm_gbps"),
        (lambda d: d.update(launch_us=float("nan")), "launch_us"),
        (lambda d: d.update(launch_us="2"), "launch_us"),
        (lambda d: d["tensor"]["tflops"].pop("float32"), "float32"),
        (lambda d: d.pop("vector"), "[vector]"),
        (lambda d: d["scalar"].update(lanes=0), "[scalar]"),
        (lambda d: d["vector"].pop("lanes"), "vector.lanes"),
        (lambda d: d["gpsimd"].update(clock_ghz=-1.0), "gpsimd.clock_ghz"),
        (lambda d: d["tensor"]["tflops"].update(bfloat16=-79.0), "tensor.tflops.bfloat16"),
        (lambda d: d["tensor"].update(efficiency={"conv": "high"}), "tensor.efficiency.conv"),
        (lambda d: d["vector"].update(instruction_cycles="100"), "vector.instruction_cycles"),
        (lambda d: d.update(dma_half_bytes="256"), "dma_half_bytes"),
        (lambda d: d["collectives"].update(mesh_max_bytes=float("nan")), "collectives.mesh_max_bytes"),
        (lambda d: d["collectives"].update(torus=[4, 0]), "collectives.torus"),
        (lambda d: d["collectives"].update(torus="4x4"), "collectives.torus"),
        (lambda d: d["tensor"].update(partitions=0), "tensor.partitions"),
        (lambda d: d["tensor"].update(moving_max=0), "tensor.moving_max"),
    ],
)
def test_a_broken_profile_names_the_field(mutate, field):
    text = resources.files("pytest_neuronprof.costmodel").joinpath("hardware", "trn2.toml").read_text("utf-8")
    data = tomllib.loads(text)
    mutate(data)
    with pytest.raises(HardwareProfileError) as info:
        parse_profile(data, "custom.toml")
    assert "custom.toml" in str(info.value)
    assert field in str(info.value)


# --- the TensorE tile model --------------------------------------------------------------------

ARRAY = TensorEngine(model="systolic", tflops={"float32": 1.0}, efficiency={})  # 128, 512, 64


def test_systolic_one_full_tile_costs_its_moving_columns():
    assert systolic_cycles(128, 128, 128, ARRAY) == 128
    assert systolic_cycles(128, 128, 512, ARRAY) == 512


def test_systolic_contraction_dim_is_padded_to_128():
    assert systolic_cycles(128, 1, 128, ARRAY) == systolic_cycles(128, 128, 128, ARRAY) == 128
    assert systolic_cycles(128, 129, 128, ARRAY) == 2 * 128
    assert systolic_cycles(128, 1024, 128, ARRAY) == 8 * 128
    assert systolic_cycles(128, 1032, 128, ARRAY) == 9 * 128


def test_systolic_stationary_dim_is_padded_to_128():
    # 256 x 128 @ 128 x 1024: stationary m=256 is two tiles (2 x 1024 cycles); stationary n=1024 is
    # eight tiles of 256 moving columns (8 x 256): both 2048. 200 rows pad to 256 the same way.
    assert systolic_cycles(256, 128, 1024, ARRAY) == 2048
    assert systolic_cycles(200, 128, 1024, ARRAY) == min(2 * 1024, 8 * 200)


def test_systolic_instruction_floor_is_64_cycles():
    assert systolic_cycles(1, 1, 1, ARRAY) == 64
    assert systolic_cycles(128, 128, 1, ARRAY) == 64
    assert systolic_cycles(128, 128, 63, ARRAY) == 64
    assert systolic_cycles(128, 128, 64, ARRAY) == 64
    assert systolic_cycles(128, 128, 65, ARRAY) == 65


def test_systolic_moving_dim_is_split_into_512_column_chunks():
    # m=128 stationary (one tile); n moving. 1000 = 512 + 488; 1030 = 512 + 512 + 6 -> floor 64.
    assert systolic_cycles(128, 128, 1000, ARRAY) == 512 + 488
    assert systolic_cycles(128, 128, 1030, ARRAY) == 512 + 512 + 64
    # The other orientation would cost ceil(1030/128) = 9 stationary tiles x 128 = 1152 cycles.
    assert systolic_cycles(128, 128, 1030, ARRAY) < 9 * 128


def test_systolic_picks_the_cheaper_orientation():
    # 8 x 128 @ 128 x 1024. m stationary: one tile, 1024 moving columns = 1024 cycles.
    # n stationary: 8 tiles of 128, each moving 8 columns at the 64-cycle floor = 512 cycles.
    assert systolic_cycles(8, 128, 1024, ARRAY) == 512
    assert systolic_cycles(1024, 128, 8, ARRAY) == 512


def test_systolic_uses_the_profile_geometry():
    small = TensorEngine(model="systolic", tflops={"float32": 1.0}, efficiency={},
                         partitions=64, moving_max=256, min_cycles=32)
    assert systolic_cycles(1, 1, 1, small) == 32
    assert systolic_cycles(64, 65, 64, small) == 2 * 64
    assert systolic_cycles(64, 64, 300, small) == 256 + 44


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 3000), st.integers(1, 3000))
def test_systolic_bounds(m, k, n):
    cycles = systolic_cycles(m, k, n, ARRAY)
    assert cycles == systolic_cycles(n, k, m, ARRAY)  # orientation is the compiler's choice
    assert cycles >= 64
    # Never faster than the peak rate on the unpadded product, never slower than one instruction
    # per (128 x 128 x 64) block of the padded one.
    assert cycles * 128 * 128 >= m * k * n
    pad = lambda v, to: math.ceil(v / to) * to  # noqa: E731
    assert cycles <= math.ceil(k / 128) * math.ceil(min(m, n) / 128) * pad(max(m, n), 64)


def test_tensor_time_converts_cycles_at_the_peak_rate(trn2):
    # One cycle moves one column through the 128 x 128 array: 2 * 128 * 128 flops at peak.
    cost = op_cost("aten::mm", [TensorMeta((128, 128), BF16), TensorMeta((128, 128), BF16)], {},
                   [TensorMeta((128, 128), BF16)])
    assert cost.matmuls == ((1, 128, 128, 128),)
    cycles_per_us = 79.0e6 * trn2.tensor.efficiency["matmul"] / (2 * 128 * 128)
    assert tensor_time_us(cost, trn2.tensor) == pytest.approx(128 / cycles_per_us, rel=1e-12)


def test_roofline_tensor_model_uses_flops(trn2):
    h200 = load_hardware("h200")
    assert h200.tensor.model == "roofline"
    cost = OpCost(Engine.TENSOR, flops=10**9, dtype="bfloat16", kind="conv", matmuls=((1, 1, 1, 1),))
    expected = h200.tensor.fixed_us + 1e9 / (h200.tensor.tflops["bfloat16"] * 1e6 * h200.tensor.efficiency["conv"])
    assert tensor_time_us(cost, h200.tensor) == pytest.approx(expected, rel=1e-12)


# --- device time = launch + max(compute, memory) --------------------------------------------------


def test_device_time_of_a_compute_bound_lane_op(trn2):
    cost = OpCost(Engine.SCALAR, bytes_read=1000, bytes_written=1000, elements=1_536_000)
    t = device_time(cost, trn2)
    # 1.536 M elements on 128 lanes at 1.2 GHz: 10 us, in 6 instructions of at most 2048
    # elements per partition, each paying ScalarE's 200 cycles of static overhead.
    assert t.compute_us == pytest.approx(10.0 + 6 * trn2.scalar.instruction_cycles / 1200)
    # two tensors of 1000 B over 128 partitions: 7.8 B descriptors, deep in the overhead-bound part
    assert t.memory_us == pytest.approx(2000 / (362_500 * share(trn2, 1000 / 128)) + trn2.dma_fixed_us)
    assert t.launch_us == 2.0
    assert t.device_time_us == pytest.approx(2.0 + t.compute_us)
    assert (t.bound, t.peak_fraction) == ("ScalarE", pytest.approx(10.0 / t.device_time_us))


def test_an_input_bound_engine_streams_every_operand(trn2):
    # VectorE takes 256 fp32 input elements per cycle: adding two tensors streams both.
    one = OpCost(Engine.VECTOR, elements=245_760, operands=1)
    two = OpCost(Engine.VECTOR, elements=245_760, operands=2)
    # 245760 / (256 * 960 per us), one instruction (at most 128 x 2048 elements) of 100 cycles
    assert device_time(one, trn2).compute_us == pytest.approx(1.0 + 100 / 960)
    assert device_time(two, trn2).compute_us == pytest.approx(2.0 + 2 * 100 / 960)  # 2 instructions
    assert load_hardware("h200").vector.input_bound is False


def test_device_time_of_a_memory_bound_lane_op(trn2):
    cost = OpCost(Engine.VECTOR, bytes_read=3_625_000, bytes_written=3_625_000, elements=128)
    t = device_time(cost, trn2)
    # 7.25 MB at 362.5 GB/s, in descriptors of a chunk (8 KiB per partition), plus the DMA's start
    assert t.memory_us == pytest.approx(20.0 / share(trn2, 8192) + trn2.dma_fixed_us)
    # one instruction of 128 elements: its minimum issue interval (64 cycles) and 100 fixed cycles
    assert t.compute_us == pytest.approx((100 + 64) / 960)
    assert t.device_time_us == pytest.approx(2.0 + t.memory_us)
    assert (t.bound, t.peak_fraction) == ("HBM", pytest.approx(20.0 / t.device_time_us))


def test_device_time_of_dma_is_its_traffic_plus_a_fixed_cost(trn2):
    t = device_time(OpCost(Engine.DMA, bytes_read=362_500, bytes_written=362_500), trn2)
    assert t.compute_us == 0.0
    # 725 KB over two tensors of 128 partitions: 2832 B descriptors
    assert t.memory_us == pytest.approx(2.0 / share(trn2, 362_500 / 128) + trn2.dma_fixed_us)
    assert t.device_time_us == pytest.approx(trn2.launch_us + t.memory_us)
    # the launch, the DMA's start and its 2.8 KB descriptors' overhead outweigh the 2 us at peak
    assert (t.bound, t.peak_fraction) == (BOUND_FIXED, pytest.approx(2.0 / t.device_time_us))


def test_overlapped_engines_run_alongside_and_the_busiest_sets_the_time(trn2):
    base = OpCost(Engine.SCALAR, elements=153_600)
    busier = OpCost(Engine.SCALAR, elements=153_600, overlapped=((Engine.VECTOR, 737_280),))
    assert device_time(base, trn2).compute_us == pytest.approx(1.0 + 200 / 1200)  # one instruction
    # VectorE: 3 us of work in 3 instructions of 100 cycles; not added to ScalarE's
    assert device_time(busier, trn2).compute_us == pytest.approx(3.0 + 3 * 100 / 960)


def test_free_ops_cost_nothing(trn2):
    t = device_time(OpCost(Engine.NONE, bytes_read=10**9), trn2)
    assert (t.device_time_us, t.launch_us, t.bound) == (0.0, 0.0, "none")


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.DMA]),
    st.integers(0, 10**9), st.integers(0, 10**9), st.integers(0, 10**8),
    st.sampled_from(BUNDLED),
)
def test_device_time_formula_holds_everywhere(engine, read, written, elements, hw_name):
    hw = load_hardware(hw_name)
    matmuls = ((1, 64, 64, max(1, elements // 4096)),) if engine is Engine.TENSOR else ()
    cost = OpCost(engine, flops=2 * 64 * 64 * matmuls[0][3] if matmuls else 0, bytes_read=read,
                  bytes_written=written, elements=elements, matmuls=matmuls, dtype="bfloat16")
    t = device_time(cost, hw)
    assert t.launch_us == hw.launch_us
    assert t.device_time_us == t.launch_us + max(t.compute_us, t.memory_us)
    limit = ENGINE_BOUNDS[engine] if t.compute_us > t.memory_us else BOUND_HBM
    if t.compute_us == t.memory_us == 0.0:  # a GPU op with nothing to do: only its launch
        assert t.bound == "none"
    else:
        assert t.bound in (limit, BOUND_FIXED)
    assert 0.0 <= t.peak_fraction <= 1.0
    assert t.device_time_us > 0


@pytest.mark.parametrize("rows, features", [(16, 64), (8192, 4096)])
def test_every_recorded_op_obeys_the_formula(profile, trn2, rows, features):
    x = torch.empty(rows, features, device="meta")
    lin = torch.nn.Linear(features, features, device="meta")

    def fn():
        y = F.gelu(lin(x))
        torch.cat([y, y]).softmax(-1).sum()

    result = profile(fn, hardware=trn2.name)
    bounds = {r.name: r.bound for r in result.records if r.engine != "-"}
    if rows == 16:  # kilobytes: the launch and the DMA's start outweigh every op's work
        assert set(bounds.values()) == {BOUND_FIXED}
    else:
        assert bounds["aten::addmm"] == "TensorE"
        assert bounds["aten::gelu"] == bounds["aten::cat"] == bounds["aten::sum"] == "HBM"
    for r in result.records:
        if r.engine == "-":
            assert (r.device_time_us, r.bound) == (0.0, "none")
            continue
        assert r.launch_us == trn2.launch_us
        # every op pays the DMA's start; its bytes move at most at dma_efficiency of HBM's peak
        floor = trn2.dma_fixed_us + r.bytes / (trn2.hbm_bytes_per_us * trn2.dma_efficiency)
        assert r.memory_us > floor
        if rows > 16:  # megabytes per tensor: every descriptor a full chunk
            assert r.memory_us == pytest.approx(
                trn2.dma_fixed_us + r.bytes / (trn2.hbm_bytes_per_us * share(trn2, 8192)), rel=1e-12)
        assert r.device_time_us == pytest.approx(r.launch_us + max(r.compute_us, r.memory_us), rel=1e-12)
        assert r.bound in BOUNDS and 0.0 < r.peak_fraction <= 1.0


# --- exact FLOPs and bytes of representative ops ---------------------------------------------------


def test_mm_flops_bytes_and_time(profile, trn2):
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    r = only(profile(lambda: a @ b, hardware=trn2.name), "aten::mm")
    assert (r.engine, r.flops, r.bytes_read, r.bytes_written) == ("Tensor", 2 * 8 * 16 * 4, (128 + 64) * 4, 32 * 4)
    # 8 x 16 @ 16 x 4 fp32: one instruction at the 64-cycle floor, at 20 TFLOP/s fp32, started
    # on a quiet (throttled) array that ramps from half rate over warmup_us.
    work = 64 / (20e6 / (2 * 128 * 128))
    assert r.compute_us == pytest.approx(ramped(work, trn2.tensor.warmup_us))
    assert work < r.compute_us < 2 * work
    # the DMA's start outweighs both: a fixed cost
    assert r.device_time_us == pytest.approx(trn2.launch_us + r.memory_us)
    assert r.bound == BOUND_FIXED


def test_addmm_counts_the_bias_read(profile):
    bias, a, b = torch.randn(4), torch.randn(8, 16), torch.randn(16, 4)
    r = only(profile(lambda: torch.addmm(bias, a, b)), "aten::addmm")
    assert (r.engine, r.flops, r.bytes_read, r.bytes_written) == ("Tensor", 1024, (4 + 128 + 64) * 4, 32 * 4)


def test_bmm_flops_and_bytes(profile):
    a, b = torch.randn(3, 8, 16), torch.randn(3, 16, 4)
    r = only(profile(lambda: torch.bmm(a, b)), "aten::bmm")
    assert (r.engine, r.flops, r.bytes_read, r.bytes_written) == ("Tensor", 2 * 3 * 8 * 16 * 4, 3 * (128 + 64) * 4, 3 * 32 * 4)


def test_conv2d_with_stride_and_groups(profile):
    x, w, bias = torch.randn(2, 4, 10, 10), torch.randn(6, 2, 3, 3), torch.randn(6)
    r = only(profile(lambda: F.conv2d(x, w, bias, stride=2, padding=1, groups=2)), "aten::convolution")
    # out [2, 6, 5, 5]: per output element Cin/groups * 3 * 3 = 18 multiply-adds.
    assert r.engine == "Tensor"
    assert r.flops == 2 * (2 * 6 * 5 * 5) * 18
    assert r.bytes_read == (2 * 4 * 10 * 10 + 6 * 2 * 3 * 3 + 6) * 4
    assert r.bytes_written == 2 * 6 * 5 * 5 * 4


def test_conv_cost_as_implicit_gemm():
    # Per group: Cout/groups x (Cin/groups * window) @ (Cin/groups * window) x output positions.
    cost = op_cost("aten::convolution",
                   [TensorMeta((2, 4, 10, 10), F32), TensorMeta((6, 2, 3, 3), F32), None,
                    [2, 2], [0, 0], [1, 1], False, [0, 0], 2],
                   {}, [TensorMeta((2, 6, 4, 4), F32)])
    assert cost.matmuls == ((2, 3, 18, 32),)
    assert cost.flops == 2 * 2 * 3 * 18 * 32
    assert cost.kind == "conv"


def test_sdpa_flops_and_causal_halves_the_work(profile):
    q, k, v = torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4), torch.randn(1, 2, 8, 4)
    full = only(profile(lambda: F.scaled_dot_product_attention(q, k, v)),
                "aten::_scaled_dot_product_flash_attention")
    causal = only(profile(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
                  "aten::_scaled_dot_product_flash_attention")
    # S = Q K^T and O = P V: 2 products of 2 heads x 8 x 4 x 8, 2 flops per multiply-add.
    assert full.flops == 2 * (2 * 2 * 8 * 4 * 8)
    assert causal.flops == full.flops // 2
    assert full.engine == causal.engine == "Tensor"
    # reads q, k, v; writes the output and the fp32 logsumexp [1, 2, 8].
    assert (full.bytes_read, full.bytes_written) == (3 * 64 * 4, 64 * 4 + 16 * 4)
    assert (causal.bytes_read, causal.bytes_written) == (full.bytes_read, full.bytes_written)


def test_sdpa_keeps_scalar_engine_busy_alongside():
    q = TensorMeta((1, 2, 8, 4), F32)
    cost = op_cost("aten::_scaled_dot_product_flash_attention_for_cpu", [q, q, q, 0.0, True], {}, [q])
    # a flash kernel visits whole key blocks: 8 queries (one block of 128) see all 8 keys even
    # under the causal mask (the diagonal's block), exp per score on ScalarE, max and sum on VectorE
    assert cost.overlapped == ((Engine.SCALAR, 2 * 8 * 8), (Engine.VECTOR, 2 * 2 * 8 * 8))
    assert cost.lane_free == 512  # one lane instruction per key block
    assert cost.kind == "attention"


def test_softmax_streams_through_scalar_engine(profile):
    x = torch.randn(8, 16)
    r = only(profile(lambda: x.softmax(-1)), "aten::_softmax")
    assert (r.engine, r.flops, r.bytes_read, r.bytes_written) == ("Scalar", 0, 512, 512)
    cost = op_cost("aten::_softmax", [TensorMeta((8, 16), F32), -1, False], {}, [TensorMeta((8, 16), F32)])
    # exp on ScalarE; the row max and the normalizing multiply (2 passes) on VectorE alongside.
    assert cost.elements == 128
    assert cost.overlapped == ((Engine.VECTOR, 256),)


def test_layer_norm_bytes_and_passes(profile):
    ln = torch.nn.LayerNorm(16)
    x = torch.randn(8, 16)
    r = only(profile(lambda: ln(x)), "aten::native_layer_norm")
    # reads x, weight, bias; writes y and the fp32 mean and rstd per row.
    assert (r.engine, r.flops) == ("Vector", 0)
    assert r.bytes_read == (128 + 16 + 16) * 4
    assert r.bytes_written == (128 + 8 + 8) * 4
    cost = op_cost("aten::native_layer_norm", [TensorMeta((8, 16), F32), [16], None, None, 1e-5], {},
                   [TensorMeta((8, 16), F32), TensorMeta((8, 1), F32), TensorMeta((8, 1), F32)])
    assert cost.elements == 3 * 128  # statistics, normalize, affine


@pytest.mark.parametrize("rows", [10, 100_000])
def test_embedding_reads_only_the_gathered_rows(profile, rows):
    table = torch.empty(rows, 64, device="meta")
    idx = torch.zeros(3, dtype=I64, device="meta")
    r = only(profile(lambda: F.embedding(idx, table)), "aten::embedding")
    assert r.engine == "GpSimd"
    assert r.bytes_read == 3 * 64 * 4 + 3 * 8  # three rows and three int64 indices
    assert r.bytes_written == 3 * 64 * 4


def test_index_select_on_an_integer_table_reads_only_the_picked_elements(profile):
    # Regression: the gather formula used to treat every non-float tensor as an index, so an
    # integer table (token ids) counted as read in full.
    ids = torch.arange(100_000)
    idx = torch.tensor([1, 2, 3])
    r = only(profile(lambda: ids.index_select(0, idx)), "aten::index_select")
    assert (r.bytes_read, r.bytes_written) == (3 * 8 + 3 * 8, 3 * 8)


def test_add_with_broadcasting_reads_each_input_once(profile):
    a, b = torch.randn(8, 16), torch.randn(16)
    r = only(profile(lambda: a + b), "aten::add")
    assert (r.engine, r.bytes_read, r.bytes_written) == ("Vector", (128 + 16) * 4, 128 * 4)
    cost = op_cost("aten::add", [TensorMeta((8, 16), F32), TensorMeta((16,), F32)], {}, [TensorMeta((8, 16), F32)])
    assert cost.elements == 128  # one element operation per output element


def test_dtype_cast_is_a_dma_of_both_sizes(profile, trn2):
    x = torch.randn(8, 16)
    r = only(profile(lambda: x.to(torch.bfloat16), hardware=trn2.name), "aten::_to_copy")
    assert (r.engine, r.flops, r.bytes_read, r.bytes_written) == ("DMA", 0, 128 * 4, 128 * 2)
    # two tensors of 128 elements over 128 partitions: 3 B descriptors on average
    assert r.device_time_us == pytest.approx(
        trn2.launch_us + trn2.dma_fixed_us + 128 * 6 / (trn2.hbm_bytes_per_us * share(trn2, 128 * 6 / 2 / 128)))


def test_data_dependent_output_sizes_are_costed_per_call(profile):
    x = torch.randn(1000)
    few = torch.zeros(1000, dtype=torch.bool)
    few[:10] = True
    every = torch.ones(1000, dtype=torch.bool)
    result = profile(lambda: (x.masked_select(few), x.masked_select(every)))
    written = [r.bytes_written for r in result.records if r.name == "aten::masked_select"]
    assert written == [10 * 4, 1000 * 4]


def test_in_place_ops_write_their_first_argument():
    x = TensorMeta((8, 16), F32)
    cost = op_cost("aten::add_.Tensor", [x, TensorMeta((16,), F32)], {}, [])
    assert (cost.engine, cost.bytes_written, cost.elements) == (Engine.VECTOR, 512, 128)


# --- unknown ops ----------------------------------------------------------------------------------


def test_geqrf_is_a_real_op_the_registry_does_not_know():
    assert formula_for(torch.ops.aten.geqrf.default) is None
    assert hasattr(torch.ops.aten, "geqrf")


# An op of the test's own library that has no cost formula: a + b, as an unknown op.
_LIB = torch.library.Library("neuronprof_test", "FRAGMENT")
_LIB.define("mystery(Tensor self, Tensor other, *, int k=3) -> Tensor")
_LIB.impl("mystery", lambda self, other, k=3: self + other, "CompositeExplicitAutograd")
_LIB.define("scale(Tensor x, float factor) -> Tensor")
_LIB.impl("scale", lambda x, factor: x * factor, "CompositeExplicitAutograd")
MYSTERY = torch.ops.neuronprof_test.mystery


def test_unknown_ops_are_costed_by_bytes_on_vector_and_listed(profile, trn2):
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    result = profile(lambda: (MYSTERY(a, b), a + b))
    r = only(result, "neuronprof_test::mystery")
    assert (r.engine, r.costed) == ("Vector", False)
    assert (r.bytes_read, r.bytes_written) == (2 * 4096 * 4, 4096 * 4)
    assert r.device_time_us > trn2.launch_us  # never free
    assert r.device_time_us == pytest.approx(only(result, "aten::add").device_time_us)
    assert result.uncosted_ops == ["neuronprof_test::mystery"]
    assert result.summary()["uncosted_ops"] == ["neuronprof_test::mystery"]


def test_a_formula_that_raises_is_a_bug_named_with_its_op_not_an_uncosted_op():
    with pytest.raises(CostFormulaError, match=r"the cost formula mm of aten::mm raised IndexError") as info:
        op_cost("aten::mm", [TensorMeta((4,), F32), 3], {}, [TensorMeta((4,), F32)])
    assert isinstance(info.value.__cause__, IndexError)


# --- the registry -----------------------------------------------------------------------------------


def test_formulas_get_their_arguments_by_schema_name_with_defaults():
    seen = {}

    @register_cost(MYSTERY)
    def mystery_cost(self, other, *, outputs, **rest):
        seen.update(self=self, other=other, outputs=outputs, rest=rest)
        return OpCost(Engine.VECTOR, elements=self.numel)

    try:
        a = TensorMeta((4, 4), F32)
        cost = op_cost(MYSTERY.default, [a, a], {}, [a])
        assert cost.elements == 16 and cost.costed
        assert seen == {"self": a, "other": a, "outputs": [a], "rest": {"k": 3}}  # default filled in
        # an out= argument is left out: it is the output
        op_cost(torch.ops.aten.mm.out, [a, a], {"out": a}, [a])
        conv = op_cost(torch.ops.aten.convolution.default,
                       [TensorMeta((1, 2, 5, 5), F32), TensorMeta((4, 2, 3, 3), F32), None,
                        [1, 1], [0, 0], [1, 1], False, [0, 0], 1], {}, [TensorMeta((1, 4, 3, 3), F32)])
        assert conv.matmuls == ((1, 4, 18, 9),)
    finally:
        unregister(MYSTERY)


def test_registration_refuses_what_is_not_an_op_and_ops_that_have_a_formula():
    with pytest.raises(CostRegistrationError, match="'aten::rellu' is not an op torch knows"):
        register_cost("aten::rellu")
    with pytest.raises(CostRegistrationError, match="is not an op"):
        register_cost(len)
    with pytest.raises(CostRegistrationError, match="aten::mm has a cost formula already; pass replace=True"):
        register_cost(torch.ops.aten.mm)
    with pytest.raises(CostRegistrationError, match="aten::empty has a cost formula already"):
        register_free("aten::empty")
    assert formula_for(torch.ops.aten.mm.default) is not None  # a refused registration changes nothing


# What a fresh interpreter's registry holds after importing only the modules named (then the
# registry itself, and nothing else): every op with its formula's name and kernel, the free ops,
# and whether a user's formula for aten.mm is refused (the built-in one is there before it).
_REGISTRY_AFTER = """
import importlib, json, sys
for name in sys.argv[1:]:
    importlib.import_module(name)
from pytest_neuronprof.costmodel import registry as r
from pytest_neuronprof.errors import CostRegistrationError
held = {"costed": sorted(f"{r._name(op)} {getattr(f, '__qualname__', f)} {r._KERNELS.get(op)}"
                         for op, f in r._FORMULAS.items()),
        "free": sorted(map(r._name, r._FREE))}
try:
    r.register_cost("aten::mm")(lambda **_: None)
    held["refused"] = False
except CostRegistrationError:
    held["refused"] = True
print(json.dumps(held))
"""


def _registry_after(*first: str) -> dict:
    import json
    import subprocess

    done = subprocess.run([sys.executable, "-c", _REGISTRY_AFTER, *first], capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout)


@pytest.mark.slow  # starts a subprocess
def test_the_registry_holds_every_builtin_formula_whatever_was_imported_first():
    alone = _registry_after("pytest_neuronprof.costmodel.registry")
    assert alone["refused"]
    costed = {line.split()[0]: line for line in alone["costed"]}
    for op in ("aten::mm", "aten::convolution", "aten::_scaled_dot_product_flash_attention_for_cpu",
               "aten::relu", "aten::native_layer_norm", "aten::index_put", "aten::clone",
               "aten::upsample_bilinear2d", "_c10d_functional::all_reduce", "aten::_foreach_add"):
        assert op in costed, op
    assert costed["aten::_scaled_dot_product_flash_attention_for_cpu"].endswith(
        " aten::_scaled_dot_product_flash_attention")
    assert {"aten::empty", "_c10d_functional::wait_tensor"} <= set(alone["free"])
    # Family modules, the capture backend and the old import path first: the same registry.
    after_others = _registry_after("pytest_neuronprof.costmodel.formulas.foreach",
                                   "pytest_neuronprof.costmodel.formulas.pooling",
                                   "pytest_neuronprof.costmodel.roofline",
                                   "pytest_neuronprof.profiler.backends.simulated")
    assert after_others == alone
    assert len(alone["costed"]) > 700


def test_a_users_custom_op_is_costed_by_its_registered_formula(profile):
    @register_cost(torch.ops.neuronprof_test.scale)
    def scale_cost(x, factor, *, outputs, **_):
        return OpCost(Engine.SCALAR, bytes_read=x.nbytes, bytes_written=outputs[0].nbytes,
                      elements=x.numel)

    try:
        x = torch.randn(64, 64)
        r = only(profile(lambda: torch.ops.neuronprof_test.scale(x, 2.0)), "neuronprof_test::scale")
        assert (r.engine, r.costed, r.bytes_read, r.bytes_written) == ("Scalar", True, 4096 * 4, 4096 * 4)
    finally:
        unregister(torch.ops.neuronprof_test.scale)


def test_an_op_that_returns_no_tensor_but_reads_tensors_is_not_free(profile):
    a = torch.randn(64, 64)
    result = profile(lambda: torch.equal(a, a.clone()))
    r = only(result, "aten::equal")
    assert (r.engine, r.bytes_read, r.costed) == ("Vector", 2 * 4096 * 4, True)
    assert r.device_time_us > 0


def test_host_side_queries_that_return_no_tensor_are_free(profile):
    q = torch.randn(1, 2, 8, 4)
    result = profile(lambda: torch.ops.aten._fused_sdp_choice(q, q, q))  # SDPA's kernel choice
    r = only(result, "aten::_fused_sdp_choice")
    assert (r.engine, r.device_time_us) == ("-", 0.0)


# --- scaling on trn2 ------------------------------------------------------------------------------


def _mm_record(profile, m, k, n, dtype=BF16, hardware="trn2-lnc1"):
    a = torch.empty(m, k, dtype=dtype, device="meta")
    b = torch.empty(k, n, dtype=dtype, device="meta")
    return only(profile(lambda: a @ b, hardware=hardware), "aten::mm")


def test_mm_twice_as_large_in_each_dim_costs_8x(profile, trn2):
    small = _mm_record(profile, 2048, 2048, 2048)
    large = _mm_record(profile, 4096, 4096, 4096)
    assert small.bound == large.bound == "TensorE"
    assert large.peak_fraction > small.peak_fraction > 0.9
    # Multiples of 128 and 512: no padding, so the tile model's cycles scale by exactly 8 (the
    # throttled array's ramp, a quarter of warmup_us, is paid once by each).
    ramp = 0.25 * trn2.tensor.warmup_us
    assert large.compute_us - ramp == pytest.approx(8 * (small.compute_us - ramp), rel=1e-12)
    # The fixed 2 us launch is added once to each, so the whole-op ratio sits just below 8:
    # 8 * (1 - launch / small) = 7.93 at these sizes; 1.5 % covers it and nothing else.
    ratio = large.device_time_us / small.device_time_us
    assert 8 * (1 - 0.015) <= ratio <= 8
    assert ratio == pytest.approx((trn2.launch_us + 8 * small.compute_us - 7 * ramp) / small.device_time_us)


def test_fp32_mm_costs_about_4x_bf16(profile, trn2):
    bf16 = _mm_record(profile, 2048, 2048, 2048, BF16)
    fp32 = _mm_record(profile, 2048, 2048, 2048, torch.float32)
    assert bf16.bound == fp32.bound == "TensorE"
    # fp32 takes 4 passes (the NKI guide: a quarter of the bf16 rate); the profile says 79 vs 20
    # TFLOP/s, a 3.95x ratio of the work beyond the throttled array's ramp.
    ramp = 0.25 * trn2.tensor.warmup_us
    assert (fp32.compute_us - ramp) / (bf16.compute_us - ramp) == pytest.approx(79.0 / 20.0, rel=1e-12)
    ratio = fp32.device_time_us / bf16.device_time_us
    assert 3.85 <= ratio <= 4.0  # the shared 2 us launch pulls it slightly below 3.95


def test_padding_the_contraction_dim_past_a_tile_costs_at_least_10_percent(profile, trn2):
    aligned = _mm_record(profile, 2048, 1024, 2048)
    padded = _mm_record(profile, 2048, 1032, 2048)
    assert aligned.bound == padded.bound == "TensorE"  # the array's time, not the weights' load
    # K = 1032 pads to 1152 = 9 tiles instead of 8: +12.5 % TensorE cycles for +0.8 % of the work.
    ramp = 0.25 * trn2.tensor.warmup_us
    assert padded.compute_us - ramp == pytest.approx((aligned.compute_us - ramp) * 9 / 8, rel=1e-12)
    assert padded.flops / aligned.flops == pytest.approx(1032 / 1024)
    assert padded.device_time_us >= 1.10 * aligned.device_time_us


def test_small_mm_is_memory_or_launch_bound_not_compute_scaled(profile, trn2):
    tiny = _mm_record(profile, 1, 1, 1)
    # the 64-cycle floor at the bf16 rate, at the throttled array's half rate and ramping; the
    # copy of its one result out of PSUM (VectorE: 100 cycles of overhead + the 64-cycle minimum
    # at 0.96 GHz) takes longer, alongside
    tensor = ramped(64 / (79e6 / (2 * 128 * 128)), trn2.tensor.warmup_us)
    assert tiny.compute_us == pytest.approx(max(tensor, 164 / 960)) == pytest.approx(0.1708333)
    assert tiny.device_time_us == pytest.approx(trn2.launch_us + tiny.memory_us)  # the DMA's start
    assert tiny.bound == BOUND_FIXED


def test_work_is_the_same_on_every_profile_and_time_is_not(profile):
    records = {hw: _mm_record(profile, 512, 512, 512, hardware=hw) for hw in BUNDLED}
    work = {(r.engine, r.flops, r.bytes_read, r.bytes_written) for r in records.values()}
    assert work == {("Tensor", 2 * 512**3, 2 * 512 * 512 * 2, 512 * 512 * 2)}
    times = {hw: r.device_time_us for hw, r in records.items()}
    assert times["trn1"] == times["inf2"]  # same NeuronCore-v2
    assert len({times["trn1"], times["trn2"], times["trn3"], times["h200"]}) == 4


# --- what real models run: slices written, layouts, complex, sparse, the long tail ---------------


def test_a_kv_cache_write_costs_the_token_written_not_the_cache(profile):
    cache = torch.zeros(1, 32, 4096, 128, dtype=BF16, device="meta")
    token = torch.zeros(1, 32, 1, 128, dtype=BF16, device="meta")
    pos = torch.tensor([7], device="meta")
    def write():
        cache.index_copy_(2, pos, token)
        cache[:, :, pos] = token  # index_put_

    result = profile(write)
    for name in ("aten::index_copy_", "aten::index_put_"):
        r = only(result, name)
        assert r.bytes_written == token.nbytes  # one token of 32 heads, not the 32 MiB cache
        assert r.bytes_read == token.nbytes + 8  # the token and its int64 position
    functional = op_cost("aten::index_copy", [TensorMeta(cache.shape, BF16), 2, TensorMeta((1,), I64),
                                              TensorMeta(token.shape, BF16)], {}, [TensorMeta(cache.shape, BF16)])
    assert functional.bytes_written == cache.nbytes + token.nbytes  # out of place: the copy, then the write


def test_scatter_add_reads_and_writes_the_indexed_elements(profile):
    x = torch.zeros(1000, 64)
    idx = torch.zeros(10, 64, dtype=I64)
    src = torch.ones(500, 64)
    r = only(profile(lambda: x.scatter_add_(0, idx, src)), "aten::scatter_add_")
    written = 10 * 64 * 4
    assert r.bytes_written == written  # only the 640 elements the index names
    assert r.bytes_read == 10 * 64 * 8 + written + written  # indices, the taken src, and the old values


def test_a_transposed_copy_reads_in_one_element_runs_and_pays_a_descriptor_each(profile):
    x = torch.empty(1024, 1024, device="meta")
    transposed = only(profile(lambda: x.t().contiguous()), "aten::clone")
    plain = only(profile(lambda: x.clone()), "aten::clone")
    kept = only(profile(lambda: x.t().clone()), "aten::clone")  # preserve_format: a dense copy
    assert transposed.bytes_read == plain.bytes_read == kept.bytes_read == 1024 * 1024 * 4
    cost = op_cost("aten::clone", [TensorMeta((1024, 1024), F32, (1, 1024))], {},
                   [TensorMeta((1024, 1024), F32, (1024, 1))])
    assert cost.read_run_bytes == 4
    assert op_cost("aten::clone", [TensorMeta((1024, 1024), F32, (1024, 1))], {},
                   [TensorMeta((1024, 1024), F32, (1024, 1))]).read_run_bytes == 0
    # Trainium's DMA moves a strided read's runs, one 4-byte descriptor each (deep in the
    # overhead-bound part of the DMA guide's curve); the write is contiguous, in whole chunks.
    hw = load_hardware("trn2")
    moved = 1024 * 1024 * 4
    assert device_time(cost, hw).memory_us == pytest.approx(
        moved / (hw.hbm_bytes_per_us * share(hw, 4)) + moved / (hw.hbm_bytes_per_us * share(hw, 8192))
        + hw.dma_fixed_us)
    assert transposed.device_time_us > 10 * plain.device_time_us
    assert plain.device_time_us == kept.device_time_us


def test_a_complex_product_is_four_real_ones(profile):
    a = torch.empty(256, 256, dtype=torch.complex64, device="meta")
    real = torch.empty(256, 256, dtype=F32, device="meta")
    c = only(profile(lambda: a @ a), "aten::mm")
    r = only(profile(lambda: real @ real), "aten::mm")
    assert c.flops == 4 * r.flops
    ramp = load_hardware("trn2").tensor.warmup_us  # the profile fixture's default hardware
    assert unramped(c.compute_us, ramp) == pytest.approx(4 * unramped(r.compute_us, ramp))
    assert c.bytes_read == 2 * r.bytes_read  # 8-byte elements


def test_a_sparse_product_reads_its_stored_elements_and_the_rows_they_pick(profile):
    i = torch.tensor([list(range(10)), list(range(10))])
    sparse = torch.sparse_coo_tensor(i, torch.ones(10), (4096, 4096), check_invariants=True).coalesce()
    dense = torch.randn(4096, 64)
    r = only(profile(lambda: torch.mm(sparse, dense)), "aten::mm")
    assert r.engine == "Vector" and r.flops == 2 * 10 * 64
    assert r.bytes_read == 10 * (4 + 2 * 8) + 10 * 64 * 4  # values + COO indices, 10 dense rows
    dense_cost = only(profile(lambda: torch.mm(sparse.to_dense(), dense)), "aten::mm")
    assert r.device_time_us < dense_cost.device_time_us / 10


@pytest.mark.parametrize("call, name", [
    (lambda x: torch.isin(x, x[:5]), "aten::isin"),
    (lambda x: torch.floor_divide(x, 3), "aten::floor_divide"),
    (lambda x: torch.fft.rfft(x.float()), "aten::_fft_r2c"),
    (lambda x: x.new_ones(4, 4), "aten::new_ones"),
    (lambda x: F.max_pool2d(x.float().view(1, 1, 8, 8), 2), "aten::max_pool2d_with_indices"),
    (lambda x: F.adaptive_avg_pool2d(x.float().view(1, 1, 8, 8), 1), "aten::mean"),
    (lambda x: F.interpolate(x.float().view(1, 1, 8, 8), scale_factor=2), "aten::upsample_nearest2d"),
    (lambda x: torch.atan2(x.float(), x.float()), "aten::atan2"),
])
def test_ops_real_models_run_are_costed(profile, call, name):
    x = torch.arange(64)
    result = profile(lambda: call(x))
    assert only(result, name).costed
    assert result.uncosted_ops == []


def test_gradients_of_views_write_the_input_sized_gradient(profile):
    x = torch.randn(4, 8, 16, requires_grad=True)
    result = profile(lambda: (x[:, 2:5].sum() + x[:, 1].sum()).backward())
    for name in ("aten::slice_backward", "aten::select_backward"):
        r = only(result, name)
        assert (r.engine, r.costed, r.bytes_written) == ("DMA", True, 4 * 8 * 16 * 4)
    assert result.uncosted_ops == []


# --- the GPU model (h200: a roofline profile with a [gpu] table) ---------------------------------
#
# Numbers come from the loaded h200 profile, so that a refit (benchmarks/fit_h200.py --write)
# keeps these tests true: they check the physics, not the fitted values.

from pytest_neuronprof.costmodel import roofline  # noqa: E402


@pytest.fixture(scope="module")
def h200():
    hw = load_hardware("h200")
    assert hw.gpu is not None and hw.tensor.model == "roofline"
    return hw


def test_only_the_gpu_profile_has_a_gpu_table():
    assert [name for name in BUNDLED if load_hardware(name).gpu is not None] == ["h200"]


def test_gpu_geometry_is_ignored_by_the_trainium_profiles(trn2):
    plain = OpCost(Engine.SCALAR, bytes_read=4096, bytes_written=4096, elements=1 << 20)
    rows = OpCost(Engine.SCALAR, bytes_read=4096, bytes_written=4096, elements=1 << 20,
                  rows=64, row_len=1 << 14, row_kernel="softmax")
    assert device_time(plain, trn2) == device_time(rows, trn2)


def _one_tile_gemm(hw, batch, m, n, k, tile=(128, 256)):
    k_tile = hw.gpu.gemm_k_tile_bytes // 2
    rate = 790e6 * hw.tensor.efficiency["matmul"] / hw.gpu.sms
    return roofline.gemm_us(batch, m, n, -(-k // k_tile), k_tile, 2, rate, hw.gpu, (tile,),
                            hw.gpu.l2_gbps * 1e3, hw.launch_us)


def test_gemm_tiles_run_in_waves_over_the_sms(h200):
    sms = h200.gpu.sms
    full = _one_tile_gemm(h200, sms, 128, 256, 4096)  # one tile per SM: one wave
    assert _one_tile_gemm(h200, sms + 1, 128, 256, 4096) == pytest.approx(2 * full, rel=1e-12)
    assert _one_tile_gemm(h200, 2 * sms, 128, 256, 4096) == pytest.approx(2 * full, rel=1e-12)
    # a tile's step: its tensor-core work, its operand loads or the latency floor, whichever is slowest
    step = max(2 * 128 * 256 * 64 / (790e6 * h200.tensor.efficiency["matmul"] / sms),
               (128 + 256) * 64 * 2 / (h200.gpu.feed_gbps_per_sm * 1e3), h200.gpu.kstep_us)
    assert full == pytest.approx(4096 // 64 * step + 128 * 256 * 2 / (h200.gpu.feed_gbps_per_sm * 1e3))


def test_gemm_tiles_quantize_the_output_and_the_contraction(h200):
    sms = h200.gpu.sms
    # 129 columns need two 128-wide tiles, like 256 do
    assert _one_tile_gemm(h200, sms // 2, 128, 129, 1024, (128, 128)) == \
        pytest.approx(_one_tile_gemm(h200, sms // 2, 128, 256, 1024, (128, 128)), rel=1e-12)
    # K = 1032 takes 17 steps of 64, one more than K = 1024
    aligned = _one_tile_gemm(h200, sms, 128, 256, 1024)
    padded = _one_tile_gemm(h200, sms, 128, 256, 1032)
    epilogue = 128 * 256 * 2 / (h200.gpu.feed_gbps_per_sm * 1e3)
    assert (padded - epilogue) / (aligned - epilogue) == pytest.approx(17 / 16, rel=1e-12)


def test_few_output_tiles_split_the_contraction(h200):
    # 256 x 8192 @ 8192 x 256: 4 tiles of 128 x 128 for 132 SMs; splitting K fills them
    rate = 790e6 * h200.tensor.efficiency["matmul"] / h200.gpu.sms
    tiles = ((128, 128),)
    split = roofline.gemm_us(1, 256, 256, 128, 64, 2, rate, h200.gpu, tiles, h200.gpu.l2_gbps * 1e3,
                             h200.launch_us)
    whole = 128 * max(2 * 128 * 128 * 64 / rate, 256 * 64 * 2 / (h200.gpu.feed_gbps_per_sm * 1e3),
                      h200.gpu.kstep_us)
    assert split < 0.5 * whole


def _mlp_forward_us(profile, hidden):
    x = torch.empty(4096, 1024, dtype=BF16, device="meta")
    w1, b1 = torch.empty(hidden, 1024, dtype=BF16, device="meta"), torch.empty(hidden, dtype=BF16, device="meta")
    w2, b2 = torch.empty(1024, hidden, dtype=BF16, device="meta"), torch.empty(1024, dtype=BF16, device="meta")
    result = profile(lambda: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2), hardware="h200")
    return result.total_device_time_us


def test_an_mlp_one_tile_column_wider_is_much_slower_on_h200(profile):
    # Issue 10: on a real H200, widening the hidden layer of this MLP from 128 to 136 made the
    # forward 21 % slower (tiles and waves); FLOPs grow by 6 %.
    ratio = _mlp_forward_us(profile, 136) / _mlp_forward_us(profile, 128)
    assert 1.12 <= ratio <= 1.35
    assert _mlp_forward_us(profile, 256) >= _mlp_forward_us(profile, 192) >= _mlp_forward_us(profile, 136)


def test_a_row_wise_kernel_gives_each_row_an_sm(h200):
    def softmax(rows, cols=32000):
        return OpCost(Engine.SCALAR, bytes_read=rows * cols * 2, bytes_written=rows * cols * 2,
                      elements=rows * cols, dtype="bfloat16", rows=rows, row_len=cols,
                      row_kernel="softmax")

    sms, rate = h200.gpu.sms, h200.gpu.row_elements_per_us
    t64, t_sms, t_more = (device_time(softmax(r), h200).compute_us for r in (64, sms, sms + 1))
    assert t64 == t_sms == pytest.approx(32000 / rate)  # 64 rows leave half the SMs idle
    assert t_more == pytest.approx(2 * t_sms)  # one more row than SMs: a second row on one SM


def test_layer_norm_few_long_rows_wait_on_memory_round_trips(h200):
    # 128 threads x 4 elements per round, a pass for the statistics and one to normalize
    cost = OpCost(Engine.VECTOR, bytes_read=64 * 32000 * 2, bytes_written=64 * 32000 * 2,
                  elements=3 * 64 * 32000, dtype="bfloat16", rows=64, row_len=32000, row_kernel="norm")
    assert roofline.rowwise_us(cost, h200.gpu, True) == pytest.approx(
        max(32000 / h200.gpu.row_elements_per_us, math.ceil(32000 / 512) * 2 * h200.gpu.row_step_us))
    assert roofline.rowwise_us(cost, h200.gpu, True) > 2 * 32000 / h200.gpu.row_elements_per_us


def test_row_geometry_of_softmax_norms_and_reductions():
    x = TensorMeta((64, 8, 32000), BF16)
    sm = op_cost("aten::_softmax", [x, -1, False], {}, [x])
    assert (sm.rows, sm.row_len, sm.row_kernel) == (512, 32000, "softmax")
    assert op_cost("aten::_softmax", [x, 1, False], {}, [x]).rows == 0  # not along the last dim
    ln = op_cost("aten::native_layer_norm", [x, [8, 32000], None, None, 1e-5], {},
                 [x, TensorMeta((64, 1, 1), F32), TensorMeta((64, 1, 1), F32)])
    assert (ln.rows, ln.row_len, ln.row_kernel) == (64, 8 * 32000, "norm")
    s = op_cost("aten::sum.dim_IntList", [x, [-1]], {}, [TensorMeta((64, 8), BF16)])
    assert (s.rows, s.row_len, s.row_kernel) == (512, 32000, "reduce")
    assert op_cost("aten::maximum", [x, x], {}, [x]).rows == 0


def test_a_reduction_streams_its_input_then_a_tree(h200):
    n = 1 << 26  # 128 MiB of fp32 rows: more than L2
    cost = OpCost(Engine.VECTOR, bytes_read=4 * n, bytes_written=4 * (n // 1024), elements=n,
                  dtype="float32", rows=n // 1024, row_len=1024, row_kernel="reduce")
    t = device_time(cost, h200)
    stream = (cost.bytes_read + cost.bytes_written) / (h200.hbm_bytes_per_us * h200.gpu.stream_fraction)
    assert t.device_time_us == pytest.approx(h200.launch_us + h200.gpu.reduce_us + stream)


def test_a_working_set_that_fits_in_l2_runs_at_l2_bandwidth(h200):
    l2 = h200.gpu.l2_mib * 1024 * 1024

    def add(numel_bytes):
        return device_time(OpCost(Engine.VECTOR, bytes_read=2 * numel_bytes, bytes_written=numel_bytes,
                                  elements=numel_bytes // 4), h200)

    small, large = int(l2 / 4), int(l2)  # 3/4 of L2; 3x L2
    assert add(small).memory_us == pytest.approx(3 * small / (h200.gpu.l2_gbps * 1e3))
    assert add(large).memory_us == pytest.approx(3 * large / h200.hbm_bytes_per_us)
    assert h200.gpu.l2_gbps * 1e3 > h200.hbm_bytes_per_us


def test_a_transposing_copy_pays_a_sector_per_element(profile, h200):
    x = torch.empty(4096, 4096, device="meta")
    r = only(profile(lambda: x.t().contiguous(), hardware="h200"), "aten::clone")
    numel = 4096 * 4096
    sectors = numel * h200.strided_granule_bytes + 4 * numel  # one granule per read, writes whole
    assert r.memory_us == pytest.approx(max(8 * numel / h200.hbm_bytes_per_us,
                                            sectors / (h200.gpu.l2_gbps * 1e3)))
    plain = only(profile(lambda: x.clone(), hardware="h200"), "aten::clone")
    assert r.device_time_us > 3 * plain.device_time_us


def test_conv_pads_each_filter_taps_channels_to_the_k_tile(h200):
    def conv(cin):
        x, w = TensorMeta((16, cin, 224, 224), BF16), TensorMeta((64, cin, 7, 7), BF16)
        return op_cost("aten::convolution", [x, w, None, [2, 2], [3, 3], [1, 1], False, [0, 0], 1],
                       {}, [TensorMeta((16, 64, 112, 112), BF16)])

    three, full = conv(3), conv(h200.gpu.conv_k_tile_bytes // 2)
    assert three.channels == 3 and full.flops > 10 * three.flops
    # the main loop costs the same: 3 channels take a whole 32-channel K step per tap
    assert roofline._gemm_compute_us(three, h200, h200.gpu) == \
        pytest.approx(roofline._gemm_compute_us(full, h200, h200.gpu), rel=1e-12)
    # 64 output channels fill half of cuDNN's 128-wide channel tile: 128 cost the same main loop
    wide = op_cost("aten::convolution", [TensorMeta((16, 32, 56, 56), BF16), TensorMeta((128, 32, 3, 3), BF16),
                                         None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1],
                   {}, [TensorMeta((16, 128, 56, 56), BF16)])
    narrow = op_cost("aten::convolution", [TensorMeta((16, 32, 56, 56), BF16), TensorMeta((64, 32, 3, 3), BF16),
                                           None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1],
                     {}, [TensorMeta((16, 64, 56, 56), BF16)])
    assert roofline._gemm_compute_us(narrow, h200, h200.gpu)[0] == \
        pytest.approx(roofline._gemm_compute_us(wide, h200, h200.gpu)[0], rel=1e-12)


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["gpu"].pop("sms"), "gpu.sms"),
    (lambda d: d["gpu"].update(l2_gbps=0), "gpu.l2_gbps"),
    (lambda d: d["gpu"].update(row_elements_per_us=-1.0), "gpu.row_elements_per_us"),
    (lambda d: d.update(gpu=3), "[gpu]"),
])
def test_a_broken_gpu_table_names_the_field(mutate, field):
    text = resources.files("pytest_neuronprof.costmodel").joinpath("hardware", "h200.toml").read_text("utf-8")
    data = tomllib.loads(text)
    mutate(data)
    with pytest.raises(HardwareProfileError) as info:
        parse_profile(data, "custom.toml")
    assert field in str(info.value)
