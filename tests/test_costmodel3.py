"""Cost model 3 (issue 17): each mechanism that sets a Trainium op's time, one test each.

Every time is derived from the loaded profile's numbers (benchmarks/fit_trn.py may re-fit some
of them), so a test states the formula it checks; what is structural (instruction counts,
algorithm steps, which engine runs an op, what bounds it) is exact.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel import Engine, OpCost, TensorMeta
from pytest_neuronprof.costmodel.execution import (GraphOp, execution_overhead_us, graph_placements,
                                                   second_layouts)
from pytest_neuronprof.costmodel.formulas.attention import visited_keys
from pytest_neuronprof.costmodel.graph import Node, schedule
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.costmodel.registry import op_cost
from pytest_neuronprof.costmodel.roofline import (collective_us, device_time, dma_share,
                                                  dma_share_of, engine_busy, lane_time_us,
                                                  systolic_cycles, tensor_time_us, throttled_us,
                                                  transfer_us, transpose_busy)
from pytest_neuronprof.vocabulary import BOUND_FIXED, BOUND_HBM, BOUND_TENSOR, GRAPH

TRAINIUM = ("inf2", "trn1", "trn2", "trn2-lnc1", "trn3", "trn3-lnc1")
BF16, F32 = torch.bfloat16, torch.float32
KIB, MIB = 1024, 1024 * 1024


Spec = tuple[tuple[int, ...], torch.dtype]  # a tensor's (shape, dtype)


def cost_of(op: str, inputs: list[Spec], outputs: list[Spec], *extra: object) -> OpCost:
    """The registered cost of ``op`` on tensors of these (shape, dtype), then ``extra`` args."""
    return op_cost(op, [*(TensorMeta(s, d) for s, d in inputs), *extra], {},
                   [TensorMeta(s, d) for s, d in outputs])


def mm(m: int, k: int, n: int, dtype: torch.dtype = BF16) -> OpCost:
    return cost_of("aten::mm", [((m, k), dtype), ((k, n), dtype)], [((m, n), dtype)])


def profiled(fn, **config):
    with NeuronProfiler(NeuronConfig(**config)) as prof:
        fn()
    return prof.result


# --- TensorE: the array's geometry, no fitted efficiency; the throttled array's ramp ---------------


@pytest.mark.parametrize("name", TRAINIUM)
def test_tensore_time_is_the_array_geometry_at_the_documented_peak(name):
    hw = load_hardware(name)
    assert set(hw.tensor.efficiency.values()) <= {1.0}  # nothing fitted between the shape and the time
    cost = mm(2048, 2048, 2048)
    # one array: stationary 128 x 128 tiles of a 2048^2 operand (16 x 16), moving tiles of 512 columns
    # (4 per row of tiles), each instruction 512 cycles
    tensor = dataclasses.replace(hw.tensor, arrays=1)
    assert systolic_cycles(2048, 2048, 2048, tensor) == 16 * 16 * 4 * 512
    cycles_per_us = hw.tensor.tflops["bfloat16"] * 1e6 / (2 * 128 * 128)
    arrays = hw.tensor.arrays  # a logical core shards the product over its physical cores' arrays
    assert tensor_time_us(cost, hw.tensor) == pytest.approx(16 * 16 * 4 * 512 / arrays / cycles_per_us)


def test_each_matmul_instruction_pays_its_columns_its_floor_and_its_fixed_cycles():
    tensor = dataclasses.replace(load_hardware("trn1").tensor, instruction_cycles=30)
    floor = tensor.min_cycles
    # 128 x 128 @ 128 x 1000: one stationary tile, moving chunks of 512 and 488 columns
    assert systolic_cycles(128, 128, 1000, tensor) == (512 + 30) + (488 + 30)
    # a sliver of 8 columns still pays the minimum initiation interval
    assert systolic_cycles(128, 128, 8, tensor) == max(floor, 8) + 30
    # a partial contraction tile pays for the whole array: k = 129 is two passes
    assert systolic_cycles(128, 129, 512, tensor) == 2 * (512 + 30)


def test_the_throttled_ramp_starts_at_half_rate_and_costs_a_quarter_of_its_length_at_most():
    ramp = load_hardware("trn2").tensor.warmup_us
    assert ramp > 0
    assert throttled_us(0.0, ramp) == 0.0
    short = throttled_us(0.01 * ramp, ramp)  # almost all of it at half rate: about twice as long
    assert 1.95 * 0.01 * ramp < short < 2 * 0.01 * ramp
    t = throttled_us(0.5 * ramp, ramp)  # inside the ramp: half rate rising linearly
    assert 0.5 * t + 0.25 * t * t / ramp == pytest.approx(0.5 * ramp)
    assert throttled_us(0.75 * ramp, ramp) == pytest.approx(ramp)  # the ramp's own work
    assert throttled_us(10 * ramp, ramp) == pytest.approx(10.25 * ramp)
    assert throttled_us(10.0, 0.0) == 10.0  # no throttling


@pytest.mark.parametrize("name", TRAINIUM)
def test_an_eager_product_pays_the_ramp_on_trn2_and_trn3_only(name):
    hw = load_hardware(name)
    cost = mm(512, 512, 512)
    work = tensor_time_us(cost, hw.tensor)
    t = device_time(cost, hw)
    if name.startswith(("trn2", "trn3")):
        assert hw.tensor.warmup_us > 0
        assert t.compute_us == pytest.approx(throttled_us(work, hw.tensor.warmup_us))
        assert t.compute_us > work
    else:  # NeuronCore-v2 does not throttle
        assert (hw.tensor.warmup_us, t.compute_us) == (0.0, work)


def _tensor_gap_tensor(gap_us: float, warmup_us: float) -> float:
    """The makespan of two 10 us products with a GpSimd op of ``gap_us`` between them."""
    nodes = [Node(index=0, engine=Engine.TENSOR, busy={Engine.TENSOR: 10.0}, read_bytes=0,
                  write_bytes=0, inputs=[(1, 0)], outputs=[(2, 0)]),
             Node(index=1, engine=Engine.GPSIMD, busy={Engine.GPSIMD: gap_us}, read_bytes=0,
                  write_bytes=0, inputs=[(2, 0)], outputs=[(3, 0)]),
             Node(index=2, engine=Engine.TENSOR, busy={Engine.TENSOR: 10.0}, read_bytes=0,
                  write_bytes=0, inputs=[(3, 0)], outputs=[(4, 0)])]
    return schedule(nodes, 1000.0, 1e12, warmup_us).makespan_us


def test_a_graph_pays_the_ramp_only_after_tensore_was_quiet_for_warmup_us():
    ramp = load_hardware("trn2").tensor.warmup_us
    ramped = throttled_us(10.0, ramp)  # 10 us of work on a quiet array
    assert ramped > 10.0
    # the first product starts on a quiet array; the second after a quiet gap of 1.5 ramps pays
    # again, after half a ramp it does not
    assert _tensor_gap_tensor(1.5 * ramp, ramp) == pytest.approx(ramped + 1.5 * ramp + ramped)
    assert _tensor_gap_tensor(0.5 * ramp, ramp) == pytest.approx(ramped + 0.5 * ramp + 10.0)
    assert _tensor_gap_tensor(1.5 * ramp, 0.0) == pytest.approx(20.0 + 1.5 * ramp)  # trn1


# --- lane engines: instructions with fixed cycles and an issue floor; fast modes --------------------


@pytest.mark.parametrize("engine", ["vector", "scalar", "gpsimd"])
def test_lane_instructions_pay_their_static_overhead_and_their_issue_floor(engine):
    lanes = getattr(load_hardware("trn2-lnc1"), engine)
    per_us = lanes.clock_ghz * 1e3
    assert lanes.instruction_cycles > 0 and lanes.min_cycles > 0 and lanes.free_max > 0
    # one element: one instruction, its fixed cycles and at least its minimum issue interval
    assert lanes.instructions(1) == 1
    assert lane_time_us(1, lanes) == pytest.approx((lanes.instruction_cycles + lanes.min_cycles) / per_us)
    # 2^30 elements: instructions of at most free_max elements on each of the 128 partitions
    huge = 2**30
    count = -(-huge // (lanes.partitions * lanes.free_max))
    assert lanes.instructions(huge) == count
    assert lane_time_us(huge, lanes) == pytest.approx(
        count * lanes.instruction_cycles / per_us + huge / lanes.rate("float32"))
    # a kernel's tiling can fix smaller instructions (flash attention: a 512-key block)
    assert lanes.instructions(huge, 512) == huge // (lanes.partitions * 512)
    assert lane_time_us(huge, lanes, free=512) > lane_time_us(huge, lanes)
    assert lane_time_us(0, lanes) == 0.0


def test_fast_lanes_serve_one_input_bfloat16_instructions_not_two_input_ones():
    hw = load_hardware("trn2")
    vector = hw.vector
    assert vector.fast_lanes > vector.lanes
    n = 1 << 24
    x = ((n,), BF16)
    scale = cost_of("aten::mul", [x], [x], 2.0)  # x * 2: tensor_scalar, one input
    add = cost_of("aten::add", [x, x], [x])  # tensor_tensor: two inputs
    assert (scale.operands, add.operands) == (1, 2)
    per_us = vector.clock_ghz * 1e3
    count = vector.instructions(n)
    assert engine_busy(scale, hw)[Engine.VECTOR] == pytest.approx(
        count * vector.instruction_cycles / per_us + n / (vector.fast_lanes * per_us))
    # two inputs stream through the plain lanes: twice the elements, no fast mode
    assert engine_busy(add, hw)[Engine.VECTOR] == pytest.approx(
        vector.instructions(2 * n) * vector.instruction_cycles / per_us + 2 * n / (vector.lanes * per_us))
    # float32 has no fast mode at all
    assert vector.rate("float32", 1) == vector.rate("bfloat16", 2) == vector.lanes * per_us


# --- DMA: efficiency by transfer size, strided runs, the DMA's start ---------------------------------


def test_dma_share_follows_the_transfer_size_per_partition():
    hw = load_hardware("trn2")
    efficiency, half = hw.dma_efficiency, hw.dma_half_bytes
    shares = {size: dma_share(size, hw) for size in (64, 256, 4 * KIB)}
    for size, got in shares.items():
        assert got == pytest.approx(efficiency * size / (size + half))
    # the NKI DMA guide: under 256 B per partition overhead-bound, 2-4 KiB near the peak
    assert shares[64] / efficiency < 0.5 <= shares[256] / efficiency < 0.9 < shares[4 * KIB] / efficiency
    # a large tensor moves in chunks: more bytes per partition reach no higher share
    assert dma_share(MIB, hw) == dma_share(hw.dma_chunk_bytes, hw)


@pytest.mark.parametrize("dtype, run", [(BF16, 2), (F32, 4)])
def test_a_transposed_copy_moves_element_runs_and_is_far_slower_than_a_contiguous_one(dtype, run):
    hw = load_hardware("trn2")
    n = 1024
    moved = n * n * run
    transposed = op_cost("aten::clone", [TensorMeta((n, n), dtype, (1, n))], {}, [TensorMeta((n, n), dtype)])
    plain = op_cost("aten::clone", [TensorMeta((n, n), dtype)], {}, [TensorMeta((n, n), dtype)])
    assert (transposed.read_run_bytes, plain.read_run_bytes) == (run, 0)
    size = 2 * moved / 2 / 128  # two tensors over 128 partitions: whole chunks
    assert transfer_us(plain, hw) == pytest.approx(2 * moved / (hw.hbm_bytes_per_us * dma_share(size, hw)))
    assert transfer_us(transposed, hw) == pytest.approx(
        moved / (hw.hbm_bytes_per_us * dma_share(run, hw)) + moved / (hw.hbm_bytes_per_us * dma_share(size, hw)))
    assert device_time(transposed, hw).device_time_us > 10 * device_time(plain, hw).device_time_us


@pytest.mark.parametrize("cost", [mm(8, 8, 8), cost_of("aten::exp", [((8,), F32)], [((8,), F32)]),
                                  cost_of("aten::add", [((8,), F32), ((8,), F32)], [((8,), F32)])])
def test_every_eager_op_pays_the_dma_start_on_top_of_its_transfers(cost):
    hw = load_hardware("trn2")
    assert hw.dma_fixed_us > 0
    assert device_time(cost, hw).memory_us == pytest.approx(transfer_us(cost, hw) + hw.dma_fixed_us)


def test_graph_traffic_moves_at_each_nodes_own_dma_share():
    hw = load_hardware("trn2")
    small = ((16, 16), F32)  # 1 KiB tensors: 8 B per partition, far below full bandwidth
    cost = cost_of("aten::exp", [small], [small])
    meta = TensorMeta(*small)
    (place,) = graph_placements([GraphOp(cost=cost, op=torch.ops.aten.exp.default, args=[meta],
                                         kwargs={}, outputs=[meta], reads=[1], writes=[2])], hw)
    assert dma_share_of(cost, hw) < 0.1 * hw.dma_efficiency
    assert place.memory_us == pytest.approx(2 * 1024 / (hw.hbm_bytes_per_us * dma_share_of(cost, hw)))
    # a one-op graph pays the graph's floor once, beside its ops, not per op
    assert execution_overhead_us(hw, GRAPH) == hw.graph_execution_us + hw.graph_floor_us


# --- collectives: the runtime's algorithm by message size, hops within and between nodes -------------


# steps per phase of a collective over p ranks: (ranks, message) -> steps
# trn2 has 4 ranks (logical cores) per chip. Mesh: one step between chips, one within a chip;
# halving-doubling: ceil(log2 chips) steps between chips, one within; ring: p - 1. The sizes
# the runtime switches at are the docs' for 64 ranks, scaled to the group (the chunk each rank
# owns): 8 ranks run 16 MiB as a ring (RDH up to 56 MB x 8 / 64 = 7 MB).
TRN2_STEPS = {(2, KIB): 1, (8, KIB): 2, (64, KIB): 2,
              (2, 16 * MIB): 1, (8, 16 * MIB): 7, (64, 16 * MIB): 5,
              (2, 256 * MIB): 1, (8, 256 * MIB): 7, (64, 256 * MIB): 63}
# Hops of an all-reduce phase where they differ from its steps: Mesh's routed step between chips
TRN2_HOPS = {(64, KIB): 5}


def _all_reduce(ranks: int, buffer: int) -> OpCost:
    """An all-reduce of ``buffer`` bytes over ``ranks``, as formulas/collectives.py costs it
    (tests/test_collectives.py checks that): a reduce-scatter and an all-gather, each rank
    sending (p - 1) / p of the buffer in each."""
    return OpCost(Engine.COLLECTIVE, link_bytes=2 * (ranks - 1) * buffer // ranks, ranks=ranks, phases=2)


@pytest.mark.parametrize("name", ["trn2", "trn1"])
@pytest.mark.parametrize("ranks, message", sorted(TRN2_STEPS))
def test_the_runtime_picks_mesh_rhd_or_ring_by_message_size(name, ranks, message):
    hw = load_hardware(name)
    links = hw.collectives
    if name == "trn2":
        assert KIB < links.mesh_max_bytes <= 16 * MIB <= links.rhd_max_bytes < 256 * MIB
        steps = TRN2_STEPS[(ranks, message)]
    else:  # NeuronCore-v2's runtime: rings at every size
        assert (links.mesh_max_bytes, links.rhd_max_bytes) == (0.0, 0.0)
        steps = ranks - 1
    assert links.steps(ranks, message, load_hardware(name).cores_per_chip) == steps
    cost = _all_reduce(ranks, message)
    # 64 ranks are two trn1 instances (32 ranks each): hierarchical, within each instance and
    # between them on 1/32 of the buffer (test_a_group_larger_than_an_instance_...)
    if links.crosses_nodes(ranks):
        assert collective_us(cost, hw) == pytest.approx(_hierarchical(links, ranks, message, hw.cores_per_chip))
        return
    # Mesh's step between trn2's 16 chips is routed 4 hops across the 4 x 4 torus (2 chips: 1)
    hops = TRN2_HOPS.get((ranks, message), steps) if name == "trn2" else steps
    assert collective_us(cost, hw) == pytest.approx(
        2 * hops * links.hop_us + cost.link_bytes / (links.bus_gbps * 1e3))


def _hierarchical(links, ranks: int, message: int, per_chip: int) -> float:
    """An all-reduce across X instances of Y ranks (the inter-node collectives page): within
    each instance over the whole buffer, between the instances over 1 / Y of it, both phases."""
    instances = -(-ranks // links.ranks_per_node)
    local = ranks // instances
    share = message / local
    inside = links.latency_us(local, message, per_chip) + (local - 1) / local * message / (links.bus_gbps * 1e3)
    between = (links.steps(instances, share) * links.node_hop_us
               + (instances - 1) / instances * share / (links.node_bus_gbps * 1e3))
    return 2 * (inside + between)


def test_a_mesh_step_between_chips_pays_its_farthest_route():
    """Mesh writes to every other chip in one step, routed through the chips between: the step
    ends when the farthest write lands, 2 hops per ring of 4 chips of trn2's 4 x 4 torus."""
    links = load_hardware("trn2").collectives
    assert links.torus == (4, 4)
    assert [links.route_hops(chips) for chips in (1, 2, 3, 4, 8, 16)] == [0, 1, 2, 2, 3, 4]
    assert dataclasses.replace(links, torus=()).route_hops(16) == 1  # no torus: one hop
    # 64 ranks (16 chips), 1 KiB: a step within the chip and 4 routed hops, per phase
    assert links.latency_us(64, KIB, 4) == pytest.approx(5 * links.hop_us)
    # Halving-doubling exchanges with neighbours: its steps stay one hop each
    assert links.latency_us(64, 16 * MIB, 4) == pytest.approx(5 * links.hop_us)
    # nccom-test.rst: a 32-rank 1 KiB all-gather over trn1.32xlarge's 16-chip torus takes
    # 6.16-6.19 us (time:avg); routed Mesh with the fitted hop gives 5.8 us
    trn1 = dataclasses.replace(load_hardware("trn1").collectives, mesh_max_bytes=1e6, torus=(4, 4))
    assert trn1.latency_us(32, KIB, 2) == pytest.approx(6.16, rel=0.1)


@pytest.mark.parametrize("name", ["trn2", "trn1"])
def test_a_group_larger_than_an_instance_pays_the_network(name):
    links = load_hardware(name).collectives
    inside, across = links.ranks_per_node, 2 * links.ranks_per_node
    assert not links.crosses_nodes(inside) and links.crosses_nodes(across)
    cost = _all_reduce(across, 256 * MIB)
    hw = load_hardware(name)
    assert collective_us(cost, hw) == pytest.approx(_hierarchical(links, across, 256 * MIB, hw.cores_per_chip))
    assert links.node_hop_us > links.hop_us and links.node_bus_gbps < links.bus_gbps
    # hierarchical, not one flat ring over every rank at the network's rate: far less time
    flat = 2 * (across - 1) * links.node_hop_us + cost.link_bytes / (links.node_bus_gbps * 1e3)
    assert collective_us(cost, hw) < flat / 5


def test_a_wait_tensor_hands_on_the_collectives_result_in_a_graph():
    """Under FakeTensorMode wait_tensor returns its tensor in a storage of its own; on the device
    it is the collective's result, so its reader waits for the collective (dataflow.alias)."""
    if not dist.is_available():
        pytest.skip("torch.distributed is not built")
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=8)
    try:
        group = dist.group.WORLD
        functional = torch.ops._c10d_functional
        with FakeTensorMode():
            x = torch.randn(64, 4096, dtype=BF16)

            def layer():
                return functional.wait_tensor(functional.all_reduce(x, "sum", group.group_name)) * 2

            result = profiled(layer, execution="graph")
    finally:
        dist.destroy_process_group()
    (reduce,) = [r for r in result.records if r.engine == "Collective"]
    (scale,) = [r for r in result.records if r.name == "aten::mul"]
    assert reduce.compute_us > 0
    # the VectorE op reads what the all-reduce wrote: it starts after it, not alongside
    assert scale.device_start_us >= reduce.device_start_us + reduce.compute_us
    assert scale.device_time_us > 0  # and so it adds to the makespan


# --- attention, grouped convolutions, int8 -------------------------------------------------------------


def test_a_causal_flash_kernel_visits_more_than_half_of_the_blocks_and_fewer_than_all():
    assert visited_keys(4096, 4096, False) == 32 * 4096  # 32 query blocks of 128, every key
    causal = visited_keys(4096, 4096, True)
    # per query block, the key blocks of 512 up to the diagonal's
    assert causal == sum(min(4096, -(-(q + 128) // 512) * 512) for q in range(0, 4096, 128))
    assert 0.5 * 32 * 4096 < causal < 32 * 4096
    hw = load_hardware("trn2")
    q = TensorMeta((1, 8, 4096, 128), BF16)
    full = op_cost("aten::_scaled_dot_product_flash_attention", [q, q, q, 0.0, False], {}, [q])
    masked = op_cost("aten::_scaled_dot_product_flash_attention", [q, q, q, 0.0, True], {}, [q])
    assert masked.flops == full.flops // 2  # the logical work (the GPU model reads it) halves
    ratio = tensor_time_us(masked, hw.tensor) / tensor_time_us(full, hw.tensor)
    assert ratio == pytest.approx(causal / (32 * 4096), rel=0.02)  # the array's work does not
    assert 0.5 < ratio < 1.0
    # P^T goes through the array: more array products than the two logical ones
    assert len(full.array_products) == 3 and len(full.matmuls) == 2


def test_a_depthwise_convolution_runs_on_vectore_and_a_dense_one_on_tensore():
    hw = load_hardware("trn2")
    x = ((1, 64, 56, 56), BF16)
    out = [((1, 64, 56, 56), BF16)]
    args = (None, [1, 1], [1, 1], [1, 1], False, [0, 0])  # bias, stride, padding, dilation, ...
    depthwise = cost_of("aten::convolution", [x, ((64, 1, 3, 3), BF16)], out, *args, 64)
    dense = cost_of("aten::convolution", [x, ((64, 64, 3, 3), BF16)], out, *args, 1)
    assert depthwise.elements == 64 * 56 * 56 * 9  # one multiply-accumulate per tap and output
    assert dense.elements == 0
    busy = engine_busy(depthwise, hw)
    assert list(busy) == [Engine.VECTOR]
    assert busy[Engine.VECTOR] == pytest.approx(lane_time_us(2 * depthwise.elements, hw.vector, "bfloat16", 2))
    assert busy[Engine.VECTOR] < tensor_time_us(depthwise, hw.tensor)
    # a dense one on TensorE, its results copied out of PSUM on VectorE alongside
    assert sorted(engine_busy(dense, hw)) == [Engine.TENSOR, Engine.VECTOR]


def test_a_convolution_runs_one_product_per_tap_contracting_only_its_input_channels():
    hw = load_hardware("inf2")
    args = (None, [2, 2], [3, 3], [1, 1], False, [0, 0], 1)  # bias, stride, padding, ...
    stem = cost_of("aten::convolution", [((8, 3, 224, 224), BF16), ((64, 3, 7, 7), BF16)],
                   [((8, 64, 112, 112), BF16)], *args)
    positions = 8 * 112 * 112
    assert stem.matmuls == ((1, 64, 3 * 49, positions),)  # the work: an implicit GEMM
    assert stem.array_products == ((1, 64, 3, positions),) and stem.taps == 49
    cycles_per_us = 92e6 / (2 * 128 * 128)
    # 49 taps of a 3-deep contraction, each padded to the array's 128 rows; the implicit GEMM's
    # 147-deep contraction would pad to 2 tiles: 24.5x fewer cycles
    per_tap = systolic_cycles(64, 3, positions, hw.tensor)
    assert tensor_time_us(stem, hw.tensor) == pytest.approx(49 * per_tap / cycles_per_us)
    assert 49 * per_tap == pytest.approx(24.5 * systolic_cycles(64, 147, positions, hw.tensor))
    # 128 input channels or more fill the array: per tap costs what the implicit GEMM does
    wide = cost_of("aten::convolution", [((8, 256, 14, 14), BF16), ((256, 256, 3, 3), BF16)],
                   [((8, 256, 14, 14), BF16)], None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert tensor_time_us(wide, hw.tensor) == pytest.approx(
        systolic_cycles(256, 9 * 256, 8 * 14 * 14, hw.tensor) / cycles_per_us)
    # backward: the data and weight gradients, each one product per tap
    grads = cost_of("aten::convolution_backward",
                    [((8, 64, 112, 112), BF16), ((8, 3, 224, 224), BF16), ((64, 3, 7, 7), BF16)],
                    [((8, 3, 224, 224), BF16), ((64, 3, 7, 7), BF16)],
                    None, [2, 2], [3, 3], [1, 1], False, [0, 0], 1, [True, True, False])
    assert grads.array_products == ((1, 3, 64, positions), (1, 64, positions, 3)) and grads.taps == 49


@pytest.mark.parametrize("name", TRAINIUM)
def test_every_product_copies_its_results_out_of_psum_on_vectore(name):
    hw = load_hardware(name)
    product = mm(1024, 768, 3072)
    busy = engine_busy(product, hw)
    # 1024 x 3072 float32 results, in PSUM-bank-sized copies of 512 elements per partition
    assert busy[Engine.VECTOR] == pytest.approx(lane_time_us(1024 * 3072, hw.vector, "float32", 1, 512))
    assert busy[Engine.VECTOR] < busy[Engine.TENSOR]  # alongside: a large product hides it
    assert device_time(product, hw).bound in ("TensorE", "HBM")
    # a convolution's taps accumulate in PSUM: each output leaves it once
    conv = cost_of("aten::convolution", [((8, 64, 56, 56), BF16), ((64, 64, 3, 3), BF16)],
                   [((8, 64, 56, 56), BF16)], None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    assert engine_busy(conv, hw)[Engine.VECTOR] == pytest.approx(
        lane_time_us(8 * 64 * 56 * 56, hw.vector, "float32", 1, 512))


def _layer_norm_record(then_product: bool):
    lin1, lin2, norm = torch.nn.Linear(768, 768), torch.nn.Linear(768, 768), torch.nn.LayerNorm(768)
    x = torch.randn(256, 768)

    def block():
        h = norm(lin1(x))
        return lin2(h) if then_product else h

    with torch.inference_mode():
        result = profiled(block, hardware="inf2", execution=GRAPH)
    return next(r for r in result.records if "layer_norm" in r.name)


def test_a_layer_norm_between_products_pays_a_transpose_through_tensore_in_a_graph():
    hw = load_hardware("inf2")
    between, last = _layer_norm_record(True), _layer_norm_record(False)
    # its output goes to a product: a PF-transpose on TensorE (256 x 768 = 12 blocks of 128 x
    # 128) and the copy of the transposed result out of PSUM on VectorE, beside its own work
    transpose = 12 * 128 / (92e6 / (2 * 128 * 128))
    assert transpose == pytest.approx(0.547, abs=1e-3)
    evacuation = lane_time_us(256 * 768, hw.vector, "float32", 1, 512)
    assert between.compute_us == pytest.approx(last.compute_us + evacuation)
    assert between.compute_us > last.compute_us + transpose


def test_int8_products_run_at_the_int8_rate_where_a_profile_has_one():
    int8 = torch.int8
    for name in TRAINIUM:
        hw = load_hardware(name)
        ratio = (tensor_time_us(mm(2048, 2048, 2048, int8), hw.tensor)
                 / tensor_time_us(mm(2048, 2048, 2048), hw.tensor))
        rate = hw.tensor.tflops.get("int8", hw.tensor.tflops["bfloat16"])
        assert ratio == pytest.approx(hw.tensor.tflops["bfloat16"] / rate), name
    trn1 = load_hardware("trn1").tensor.tflops
    assert trn1["int8"] / trn1["bfloat16"] > 2.0  # trn1's documented int8 rate: twice bf16's


# --- bound and peak fraction; auto-cast; fused Adam ----------------------------------------------------


def test_what_bounds_an_op_and_how_close_to_its_peak():
    with torch.device("meta"):
        a = torch.empty(4096, 4096, dtype=BF16)
        small = torch.empty(8)
        big = torch.empty(25 * MIB)  # 100 MiB of float32

    def work():
        a @ a
        small + small
        F.silu(big)

    hw = load_hardware("trn2")
    records = {r.name: r for r in profiled(work, hardware="trn2").records}
    product, add, silu = records["aten::mm"], records["aten::add"], records["aten::silu"]
    assert product.bound == BOUND_TENSOR and product.peak_fraction > 0.9
    assert add.bound == BOUND_FIXED and add.peak_fraction < 0.01
    assert silu.bound == BOUND_HBM
    # the share of HBM's peak: its bytes at hbm_gbps over its device time
    assert silu.peak_fraction == pytest.approx(
        (silu.bytes_read + silu.bytes_written) / hw.hbm_bytes_per_us / silu.device_time_us)


def test_auto_cast_defaults_to_none_and_eager_ignores_it():
    # two tensors: a @ a would contract a along both axes, which needs a transpose too
    a, b = torch.empty(1024, 1024, device="meta"), torch.empty(1024, 1024, device="meta")
    times = {}
    for execution in ("eager", "graph"):
        for cast in (None, "matmult"):
            config = {"execution": execution, "hardware": "trn1", **({"auto_cast": cast} if cast else {})}
            result = profiled(lambda: a @ b, **config)
            times[execution, cast] = result.records[0].compute_us
            # what was applied: eager kernels are not compiled with --auto-cast
            assert result.auto_cast == (cast if cast and execution == "graph" else "none")
    assert NeuronConfig().auto_cast == "none"  # neuronx-cc's default since Neuron 2.27
    assert times["eager", None] == times["eager", "matmult"]
    tflops = load_hardware("trn1").tensor.tflops
    fp32_rate = tflops["bfloat16"] / tflops["float32"]  # graph mode bills float32 at its own rate
    assert times["graph", None] / times["graph", "matmult"] == pytest.approx(fp32_rate)


def test_fused_adamw_is_four_two_input_vector_and_two_scalar_instructions_per_element():
    hw = load_hardware("trn2")
    n = 1 << 20
    params = [TensorMeta((n,), F32)]
    cost = op_cost("aten::_fused_adamw_", [params, params, params, params, params], {}, [])
    assert (cost.engine, cost.elements, cost.operands) == (Engine.VECTOR, 4 * n, 2)
    assert cost.overlapped == ((Engine.SCALAR, 2 * n),)
    busy = engine_busy(cost, hw)
    assert busy[Engine.VECTOR] == pytest.approx(lane_time_us(2 * 4 * n, hw.vector, "float32", 2))
    assert busy[Engine.SCALAR] == pytest.approx(lane_time_us(2 * n, hw.scalar, "float32", 1))
    assert math.isclose(device_time(cost, hw).compute_us, max(busy.values()))


def _product(op: str, a: TensorMeta, b: TensorMeta, reads: list[int], write: int) -> GraphOp:
    out = TensorMeta((a.shape[0], b.shape[1]), BF16)
    cost = op_cost(op, [a, b], {}, [out])
    return GraphOp(cost=cost, op=torch.ops.aten.mm.default, args=[a, b], kwargs={},
                   outputs=[out], reads=reads, writes=[write])


def test_a_tensor_that_products_contract_along_two_axes_pays_one_transpose_in_a_graph():
    """A training step's activation x [256, 768] (storage 1): the forward product contracts its
    features (contiguous), the weight gradient its tokens (x read as is, grad^T x): TensorE
    takes the contraction on the partitions, so the second layout costs a PF-transpose."""
    hw = load_hardware("inf2")
    x = TensorMeta((256, 768), BF16, (768, 1))
    w_t = TensorMeta((768, 768), BF16, (1, 768))  # W^T: a view of W [out, in]
    grad_t = TensorMeta((768, 256), BF16, (1, 768))  # dY^T: a view of dY [256, 768]
    forward = _product("aten::mm", x, w_t, [1, 2], 3)
    weight_grad = _product("aten::mm", grad_t, x, [4, 1], 5)
    assert second_layouts([forward, weight_grad]) == {1: [(1, 256 * 768)]}
    # inference: x contracted along its features only, h likewise: no second layout
    h = TensorMeta((256, 768), BF16, (768, 1))
    assert second_layouts([forward, _product("aten::mm", h, w_t, [3, 2], 6)]) == {}
    # the weight gradient's TensorE work grows by the transpose: 12 blocks of 128 x 128
    alone = graph_placements([None, weight_grad], hw)[1]
    paired = graph_placements([forward, weight_grad], hw)[1]
    transpose = transpose_busy(256 * 768, hw)
    assert transpose[Engine.TENSOR] == pytest.approx(12 * 128 / (92e6 / (2 * 128 * 128)))
    busy = engine_busy(weight_grad.cost, hw)  # its own work: TensorE, and VectorE's PSUM copies
    assert alone.compute_us == pytest.approx(max(busy.values()))
    assert paired.compute_us == pytest.approx(max(busy[engine] + transpose[engine] for engine in busy))
    assert paired.compute_us > alone.compute_us
    # two weight gradients of the same x (Q and K projections) share one transpose
    other = _product("aten::mm", grad_t, x, [7, 1], 8)
    assert second_layouts([forward, weight_grad, other]) == {1: [(2, 256 * 768)], 2: [(2, 256 * 768)]}
