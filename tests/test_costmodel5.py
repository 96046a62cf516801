"""Cost model 5 (issue 17, round 3): casts in a graph are the lane engines' own input and output
conversions, and a collective shares the DMA engines it streams through.

Times come from the loaded profiles (benchmarks/fit_trn.py may re-fit some of them), so each
test states the formula it checks; what is structural (which engine, what stays on chip, what
waits for what) is exact.
"""

from __future__ import annotations

import pytest
import torch

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel import Engine
from pytest_neuronprof.costmodel.graph import Node, schedule
from pytest_neuronprof.costmodel.profiles import load_hardware

BF16 = torch.bfloat16
MIB = 1024 * 1024


def profiled(fn, **config):
    with NeuronProfiler(NeuronConfig(modes=("device",), **config)) as prof:
        fn()
    return prof.result


def _rms_norm_then_product(rows: int, features: int):
    """A Llama-style RMS norm (float32 inside, as Hugging Face writes it) feeding a product."""
    x = torch.empty(rows, features, device="meta", dtype=BF16)
    gamma = torch.empty(features, device="meta", dtype=BF16)
    w = torch.empty(features, features, device="meta", dtype=BF16)

    def step():
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (gamma * h.to(BF16)) @ w

    return step


def test_a_cast_in_a_graph_is_the_lane_engines_own_conversion_and_keeps_the_chain_on_chip():
    """4096 x 4096: the float32 copies (64 MiB each) are larger than SBUF (24 MiB on trn2-lnc1).
    As DMA copies they broke the norm's fused group, so every float32 intermediate went to HBM
    and back; as VectorE's zero-overhead conversions they join it and nothing but x is read
    (the product's weight and result aside)."""
    result = profiled(_rms_norm_then_product(4096, 4096), hardware="trn2-lnc1", execution="graph")
    casts = [r for r in result.records if r.name == "aten::_to_copy"]
    assert len(casts) == 2 and all(r.engine == Engine.VECTOR.value for r in casts)
    assert all(r.compute_us == 0 for r in casts)  # no pass of their own
    norm = [r for r in result.records if r.name != "aten::mm"]
    # no float32 intermediate spilled; only the product's bfloat16 operand (32 MiB, more than
    # SBUF) goes through HBM
    assert [r.bytes_written for r in norm] == [0] * (len(norm) - 1) + [4096 * 4096 * 2]
    assert sum(r.bytes_read for r in norm) == pytest.approx(4096 * 4096 * 2, rel=0.01)  # x, once
    (product,) = [r for r in result.records if r.name == "aten::mm"]
    total = sum(r.device_time_us for r in result.records)
    # the norm's lane passes run before the product that reads all of it: the product's time
    # plus theirs, well under the old 2.0x of the product (HBM round trips of 64 MiB tensors)
    assert total < 1.35 * product.compute_us


def test_eager_execution_keeps_a_cast_a_copy_of_its_own():
    """Eager runs one kernel per op: a cast reads and writes HBM, on the DMA."""
    result = profiled(_rms_norm_then_product(512, 1024), hardware="trn2", execution="eager")
    casts = [r for r in result.records if r.name == "aten::_to_copy"]
    assert casts and all(r.engine == Engine.DMA.value and r.bytes_written > 0 for r in casts)


def test_a_cast_with_no_lane_work_beside_it_still_pays_its_traffic():
    """A region that only casts its input: nothing to fuse with, so it moves its bytes."""
    x = torch.empty(2048, 2048, device="meta", dtype=BF16)
    hw = load_hardware("trn2")
    result = profiled(lambda: x.to(torch.float32), hardware="trn2", execution="graph")
    (cast,) = result.records
    moved = 2048 * 2048 * (2 + 4)
    assert cast.bytes_read + cast.bytes_written == moved
    assert cast.device_time_us >= moved / hw.hbm_bytes_per_us  # at most the full bandwidth


def test_a_same_dtype_copy_is_still_a_dma_copy_in_a_graph():
    """Only a change of dtype is a conversion; a clone moves its bytes on the DMA."""
    x = torch.empty(256, 1024, device="meta", dtype=BF16)
    result = profiled(lambda: (x * 2).clone() * 3, hardware="trn2", execution="graph")
    (clone,) = [r for r in result.records if r.name == "aten::clone"]
    assert clone.engine == Engine.DMA.value


def _collective_then_product(weight_bytes: int, collective_us: float):
    """A decode step's shape: an all-reduce, then a product that reads its result and a weight
    from HBM (tensor 3), as graph.schedule sees them."""
    reduce = Node(index=0, engine=Engine.COLLECTIVE, busy={Engine.COLLECTIVE: collective_us},
                  read_bytes=0, write_bytes=0, inputs=[(1, 8192)], outputs=[(2, 8192)])
    product = Node(index=1, engine=Engine.TENSOR, busy={Engine.TENSOR: 1.0},
                   read_bytes=weight_bytes + 8192, write_bytes=0,
                   inputs=[(2, 8192), (3, weight_bytes)], outputs=[(4, 8192)], kind="matmul")
    return reduce, product


def test_a_collective_shares_the_dma_so_the_next_weights_load_at_a_seventeenth_meanwhile():
    """The DMA engines serve compute's transfers and the collectives' rings round-robin, one
    packet of each at a time, compute's 4 KiB against the collectives' 64 KiB
    (compute-comm-overlap.rst): while an all-reduce runs, the next weights load at 4/68 of
    their pace, then at their own. What a collective reads and writes lives in HBM: the product
    loads the all-reduce's result."""
    hbm = 400.0  # bytes per us
    weight, reduce_us = 40_000, 100.0
    share = load_hardware("trn2").collectives.compute_dma_share
    assert share == pytest.approx(4096 / (4096 + 65536))
    ran = schedule(_collective_then_product(weight, reduce_us), hbm, 24 * MIB, compute_dma_share=share)
    load_us, result_us = weight / hbm, 8192 / hbm
    assert ran.placements[1].start_us >= reduce_us  # it reads the all-reduce's result
    # the weight's load: reduce_us * share of it during the all-reduce, the rest after; then
    # the all-reduce's result, from HBM
    loaded = reduce_us + (load_us - reduce_us * share)
    assert ran.makespan_us == pytest.approx(loaded + result_us, rel=1e-9)
    # without the collective's packets in the way (a share of 1) the load hides behind it
    alone = schedule(_collective_then_product(weight, reduce_us), hbm, 24 * MIB)
    assert alone.makespan_us == pytest.approx(max(load_us, reduce_us) + result_us, rel=1e-9)
    # a weight needed before the all-reduce loads ahead of it, at its own pace; the all-reduce
    # waits for the product's result to be in HBM
    first = Node(index=0, engine=Engine.TENSOR, busy={Engine.TENSOR: 1.0}, read_bytes=weight,
                 write_bytes=8192, inputs=[(3, weight)], outputs=[(1, 8192)], kind="matmul")
    reduce = Node(index=1, engine=Engine.COLLECTIVE, busy={Engine.COLLECTIVE: reduce_us},
                  read_bytes=0, write_bytes=0, inputs=[(1, 8192)], outputs=[(2, 8192)])
    ahead = schedule([first, reduce], hbm, 24 * MIB, compute_dma_share=share)
    assert ahead.placements[1].start_us == pytest.approx(load_us + result_us, rel=1e-9)
    assert ahead.makespan_us == pytest.approx(load_us + result_us + reduce_us, rel=1e-9)


def test_an_op_that_pays_a_layout_transpose_keeps_its_own_engine():
    """The transposes' TensorE and VectorE work is added to a product's busy engines; the
    product still runs on TensorE (and so anchors its epilogues), in its placement too."""
    from pytest_neuronprof.costmodel import TensorMeta
    from pytest_neuronprof.costmodel.execution import GraphOp, graph_placements
    from pytest_neuronprof.costmodel.registry import op_cost

    def product(a: TensorMeta, b: TensorMeta, reads: list[int], write: int) -> GraphOp:
        out = TensorMeta((a.shape[0], b.shape[1]), BF16)
        return GraphOp(cost=op_cost("aten::mm", [a, b], {}, [out]), op=torch.ops.aten.mm.default,
                       args=[a, b], kwargs={}, outputs=[out], reads=reads, writes=[write])

    x = TensorMeta((256, 768), BF16, (768, 1))
    forward = product(x, TensorMeta((768, 768), BF16, (1, 768)), [1, 2], 3)
    weight_grad = product(TensorMeta((768, 256), BF16, (1, 768)), x, [4, 1], 5)
    placed = graph_placements([forward, weight_grad], load_hardware("inf2"))
    assert [p.engine for p in placed] == [Engine.TENSOR.value, Engine.TENSOR.value]
