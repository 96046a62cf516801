"""Execution modes as the cost model decides them (costmodel/execution.py: placements) and as the
simulated backend applies them: the capture read by name, records built by name, a capture
retimed on another profile or mode."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel.execution import (GraphOp, OpPlacement, eager_placements,
                                                   folds_into_convolution, graph_placements)
from pytest_neuronprof.costmodel.opcost import OpCost, TensorMeta
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.profiler.backends.simulated import (ARGS, END, FLOW, FUNC, KWARGS, OUTPUTS,
                                                           PATH, PHASE, SCOPE, START)
from pytest_neuronprof.profiler.result import OpRecord
from pytest_neuronprof.vocabulary import Engine

RECORD_FIELDS = {f.name for f in dataclasses.fields(OpRecord)}
aten = torch.ops.aten


def captured(fn, execution="eager", hardware="trn2"):
    """The result and the kept capture of one region."""
    with NeuronProfiler(NeuronConfig(hardware=hardware, execution=execution)) as prof:
        prof._backend.keep_capture = True
        fn()
    return prof.result, prof._backend.last_capture


def test_a_placement_names_only_fields_of_a_record():
    # The backend applies a placement to a record field by field, by name.
    assert set(OpPlacement._fields) <= RECORD_FIELDS


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_the_capture_holds_each_fact_of_an_op_under_its_name(execution):
    model = nn.Sequential(nn.Linear(4, 3))
    x = torch.randn(2, 4)

    def region():
        with torch.profiler.record_function("outer"), torch.no_grad():
            model(x)
    _, capture = captured(region, execution)
    (addmm,) = [op for op in capture.raw if op[FUNC] is aten.addmm.default]
    assert (addmm[PATH], addmm[SCOPE], addmm[PHASE]) == ("0", "outer", False)
    assert [a.shape for a in addmm[ARGS]] == [(3,), (2, 4), (4, 3)]  # bias, input, weight.t()
    assert addmm[KWARGS] == {}
    assert [o.shape for o in addmm[OUTPUTS]] == [(2, 3)]
    assert 0 < addmm[START] <= addmm[END]
    if execution == "eager":
        assert addmm[FLOW] is None
    else:
        reads, writes = addmm[FLOW]
        assert len(reads) == 3 and len(writes) == 1 and writes[0] not in reads
    (transpose,) = [op for op in capture.raw if op[FUNC] is aten.t.default]
    assert transpose[ARGS] is None and transpose[FLOW] is None  # a free op: its name and place


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_every_record_has_exactly_the_fields_of_an_op_record(execution):
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU())
    result, capture = captured(lambda: model(torch.randn(4, 8)).sum().backward(), execution)
    retimed = capture.retime(load_hardware("trn1"), execution)
    for record in [*result.records, *retimed]:
        assert set(vars(record)) == RECORD_FIELDS, record.name
    assert {r.engine for r in result.records} >= {"-", "Tensor"}  # free and costed ops both


def test_eager_execution_runs_one_op_after_the_other_and_free_ops_take_no_time():
    hw = load_hardware("trn2")
    copy = OpCost(Engine.DMA, bytes_read=1 << 20, bytes_written=1 << 20)
    # A DMA copy: its launch, its transfers and the DMA set-up (no compute); two tensors of 1 MiB
    # over 128 partitions: 8 KiB descriptors, at size / (size + dma_half_bytes) of what large
    # transfers sustain.
    size = (1 << 20) / 128
    share = hw.dma_efficiency * size / (size + hw.dma_half_bytes)
    one = hw.launch_us + (2 << 20) / (hw.hbm_bytes_per_us * share) + hw.dma_fixed_us
    first, free, second = eager_placements([copy, None, copy], hw)
    assert (first.device_start_us, free.device_start_us, second.device_start_us) == (0.0, one, one)
    assert first.device_time_us == pytest.approx(one)
    assert (free.device_time_us, free.bound, free.bytes_read) == (0.0, "none", 0)
    # 2 MiB at peak is 2.9 us: less than the launch, the DMA's start and the share lost
    assert (second.bound, second.bytes_read, second.bytes_written) == ("fixed cost", 1 << 20, 1 << 20)
    assert second.peak_fraction == pytest.approx((2 << 20) / hw.hbm_bytes_per_us / one)


def _matmul(dtype: str) -> OpCost:
    n = 2048
    itemsize = 4 if dtype == "float32" else 2
    return OpCost(Engine.TENSOR, flops=2 * n**3, bytes_read=2 * n * n * itemsize,
                  bytes_written=n * n * itemsize, matmuls=((1, n, n, n),), dtype=dtype)


def _graph_op(cost: OpCost, op=aten.mm.default, reads=(1, 2), writes=(3,), args=None) -> GraphOp:
    meta = TensorMeta((2048, 2048), torch.float32)
    return GraphOp(cost=cost, op=op, args=args if args is not None else [meta, meta], kwargs={},
                   outputs=[meta], reads=list(reads), writes=list(writes))


@pytest.mark.parametrize("hardware, cast", [("trn2", True), ("trn1", True), ("h200", False)])
def test_a_neuron_graph_casts_float32_products_to_bfloat16_and_a_gpu_graph_does_not(hardware, cast):
    """neuronx-cc --auto-cast=matmult casts them; the default since Neuron 2.27 (none) does not."""
    hw = load_hardware(hardware)
    (fp32,) = graph_placements([_graph_op(_matmul("float32"))], hw, auto_cast="matmult")
    (bf16,) = graph_placements([_graph_op(_matmul("bfloat16"))], hw, auto_cast="matmult")
    assert (fp32.compute_us == pytest.approx(bf16.compute_us)) is cast
    (uncast,) = graph_placements([_graph_op(_matmul("float32"))], hw)
    assert uncast.compute_us > 3 * bf16.compute_us  # the fp32 rate: a quarter of bf16's
    assert fp32.launch_us == 0.0  # one launch for the whole graph, not one per op


def test_a_graph_leaves_free_ops_alone_and_takes_fused_traffic_off_the_records():
    hw = load_hardware("trn2")
    relu = OpCost(Engine.VECTOR, bytes_read=2048 * 2048 * 4, bytes_written=2048 * 2048 * 4,
                  elements=2048 * 2048)
    meta = TensorMeta((2048, 2048), torch.float32)
    product, free, epilogue = graph_placements(
        [_graph_op(_matmul("float32")), None,
         _graph_op(relu, aten.relu.default, reads=(3,), writes=(4,), args=[meta])], hw)
    assert free is None
    assert product.group == epilogue.group == 0
    assert (product.bytes_written, epilogue.bytes_read) == (0, 0)  # the product never left the chip
    assert epilogue.bytes_written == relu.bytes_written  # the region's result goes to HBM


def test_only_a_batch_norm_at_inference_folds_into_a_convolution():
    x, c = TensorMeta((8, 16, 32, 32), torch.float32), TensorMeta((16,), torch.float32)
    norm = [x, c, c, c, c]
    assert folds_into_convolution(aten._native_batch_norm_legit_no_training.default, [*norm, 0.1, 1e-5], {})
    assert folds_into_convolution(aten.native_batch_norm.default, [*norm, False, 0.1, 1e-5], {})
    assert not folds_into_convolution(aten.native_batch_norm.default, [*norm, True, 0.1, 1e-5], {})
    assert not folds_into_convolution(aten.relu.default, [x], {})


@pytest.mark.parametrize("train", [False, True])
def test_a_graph_folds_an_inference_batch_norm_into_its_convolution_and_a_training_one_not(train):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8)).train(train)
    x = torch.randn(2, 3, 16, 16)
    result, _ = captured(lambda: model(x), "graph")
    conv = next(r for r in result.records if r.module_path == "0" and r.engine != "-")
    norm = next(r for r in result.records if "batch_norm" in r.name)
    assert norm.group == conv.index  # folded, or a VectorE epilogue of the convolution
    if train:  # statistics of the batch: work of its own
        assert norm.compute_us > 0
    else:  # in the convolution's weights: no work at all
        assert (norm.compute_us, norm.memory_us, norm.device_time_us) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_a_capture_retimed_on_another_profile_is_what_a_region_there_records(execution):
    model = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 64))
    x = torch.randn(32, 64)

    def region():
        with torch.no_grad():
            model(x)
    _, capture = captured(region, execution, "trn2")
    direct, _ = captured(region, execution, "trn1")
    fields = lambda r: (r.name, r.device_start_us, r.device_time_us, r.launch_us,  # noqa: E731
                        r.bytes_read, r.bytes_written, r.bound, r.group)
    costed = lambda records: [fields(r) for r in records if r.engine != "-"]  # noqa: E731
    assert costed(capture.retime(load_hardware("trn1"), execution)) == costed(direct.records)
    assert costed(direct.records) != costed(capture.records)  # trn1 is not trn2


def test_an_eager_capture_cannot_be_retimed_as_a_graph():
    _, capture = captured(lambda: torch.randn(4, 4) @ torch.randn(4, 4))
    with pytest.raises(ValueError, match="eager mode: it has no dataflow"):
        capture.retime(load_hardware("trn2"), "graph")
