"""Where an execution mode puts a region's ops on the device and what it charges each: placements.

A profiler backend captures the ops of a region and costs each one alone (``registry.op_cost``,
``roofline.device_time``); how the ops run together is decided here, once per execution mode:

- ``eager_placements``: one kernel per op, one after the other, each charged its roofline time;
- ``graph_placements``: the region as one compiled graph (graph.py): builds its nodes from the
  ops' costs and dataflow, casts what neuronx-cc's ``--auto-cast`` casts (``compiled``), makes
  dtype casts the lane engines' own conversions (``_is_cast``), marks a ``copy_`` into an existing tensor as the store of the nest that computes its source (``_is_store``), folds inference batch norms into the convolution before them, adds the layout transposes a layer norm between matrix products and a tensor contracted along two axes (``second_layouts``) need, and charges each
  op what it adds to the schedule.

A placement holds the fields of an op's record that the mode decides, under the record's names;
the backend applies it to its records (profiler/backends/simulated.py). Pure functions of their
inputs: deterministic.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

from ..defaults import DEFAULT_AUTO_CAST
from ..vocabulary import (AUTO_CAST_ALL, AUTO_CAST_MATMULT, AUTO_CAST_NONE, BOUND_NONE, GRAPH,
                          Engine)
from .graph import GraphSchedule, Node, schedule
from .opcost import OpCost, TensorMeta, iter_tensors
from .profiles import HardwareProfile
from .registry import bind
from .roofline import (bound_of, collective_algorithm, device_time, dma_share_of, engine_busy,
                       peak_work, read_traffic, transpose_busy)

# Inference batch norms, which neuronx-cc folds into the convolution before them.
_BATCH_NORM_NO_TRAINING = "aten::_native_batch_norm_legit_no_training"
_BATCH_NORMS = frozenset({"aten::native_batch_norm", "aten::batch_norm",
                          "aten::_native_batch_norm_legit"})


# Norms that reduce along the free axis (VectorE's bn_stats needs a token's features there),
# while a matrix product wants the same features on the partitions, as its contraction: a
# layer norm between products costs a partition/free transpose of its output (the NKI
# performance guide, aws-neuron/aws-neuron-sdk@81ce03ae:nki/deep-dives/nki_perf_guide.rst,
# Opt #8: "linear_layer -> layernorm" needs a "PF-transpose", "most commonly lowered down to
# Tensor Engine"; its result leaves PSUM through ScalarE/VectorE, trainium2_arch.rst). An RMS
# norm needs none: its sum can run on TensorE along the partitions (the same section).
_FREE_AXIS_NORMS = frozenset({"aten::native_layer_norm", "aten::layer_norm"})

# TensorE takes both operands of a product with the contraction on the partitions
# (trainium_inferentia2_arch.rst: "TensorE requires both input tiles to have the contraction
# dimension K in the SBUF partition dimension"). A tensor that products contract along two
# axes, along its last (contiguous) one and along another, is needed in both layouts: a
# training step's activations (the forward product contracts their features, the weight
# gradient their tokens), its output gradients and its weights. One PF-transpose makes the
# second layout (nki_perf_guide.rst Opt #8: "most commonly lowered down to Tensor Engine"),
# shared by the products that contract along the other axis. Operand positions and the
# contracted dim of each, per product.
_CONTRACTED = {"aten::mm": ((0, -1), (1, -2)), "aten::bmm": ((0, -1), (1, -2)),
               "aten::addmm": ((1, -1), (2, -2)), "aten::baddbmm": ((1, -1), (2, -2))}


# A DMA from SBUF to SBUF reaches about half the DMA throughput a transfer from HBM does (the
# NKI DMA bandwidth guide, aws-neuron/aws-neuron-sdk@81ce03ae:nki/deep-dives/
# nki-dma-bandwidth-guide.rst: "SBUF2SBUF up to 50%"): what a copy or cast of tensors kept on
# chip costs in a graph.
SBUF_TO_SBUF_SHARE = 0.5

# A cast (a copy that changes only the dtype) in a graph is not a pass of its own: VectorE and
# ScalarE convert their inputs and outputs on the fly, "automatic zero-overhead input and
# output casting to and from FP32" (aws-neuron/aws-neuron-sdk@81ce03ae:
# nki/guides/architecture/trainium_inferentia2_arch.rst, Vector Engine), and a product's copy
# out of PSUM writes the dtype it is asked for. So a cast joins the lane engines' fused groups
# (graph.py) with no engine time of its own; its HBM traffic, if its tensors are not kept on
# chip, is charged as before.
_CASTS = frozenset({"aten::_to_copy"})


class OpPlacement(NamedTuple):
    """Where an execution puts one op on the device and what it charges it: the fields of the
    op's record that depend on the execution mode, named as the record names them. (Named
    tuples: one per op, made in a third of a frozen dataclass's time.)"""

    device_start_us: float
    launch_us: float = 0.0
    compute_us: float = 0.0
    memory_us: float = 0.0
    device_time_us: float = 0.0  # what the op is charged: its device time in this mode
    bound: str = BOUND_NONE  # what limits it: one of vocabulary.BOUNDS
    bytes_read: int = 0  # HBM traffic left (graph: after fusion and SBUF residency)
    bytes_written: int = 0
    group: int = -1  # graph execution: the fused group (its first op's index); -1 when alone
    peak_fraction: float = 0.0  # the share of its bound's peak it reaches (OpRecord's)
    engine: str = Engine.NONE.value  # the engine that runs it (graph: a cast's is VectorE's)
    algorithm: str = ""  # a collective's, as the chip's runtime picks it (roofline.collective_algorithm)


class GraphOp(NamedTuple):
    """One costed op of a region, as graph execution needs it: its cost, its call (op and
    argument metadata, for the decisions that depend on arguments) and the storage numbers of
    the tensors it reads and writes, in the order ``iter_tensors`` gives their metadata (reads:
    arguments, then keyword arguments)."""

    cost: OpCost
    op: Any  # the OpOverload
    args: list[Any]
    kwargs: dict[str, Any]
    outputs: list[Any]
    reads: Sequence[int]
    writes: Sequence[int]


def compiled(cost: OpCost, hw: HardwareProfile, auto_cast: str) -> OpCost:
    """An op as neuronx-cc compiles it with ``--auto-cast auto_cast``: "matmult" casts float32
    matrix products to bfloat16, "all" every float32 operation, "none" nothing (the Neuron docs,
    neuronx-cc's --auto-cast and "Mixed Precision and Performance-accuracy Tuning"). The cast
    happens on chip: HBM traffic keeps the model's dtypes. A GPU profile's kernels are not
    neuronx-cc's: nothing changes."""
    if auto_cast == AUTO_CAST_NONE or hw.gpu is not None or cost.dtype != "float32":
        return cost
    if auto_cast == AUTO_CAST_ALL or (auto_cast == AUTO_CAST_MATMULT and cost.engine is Engine.TENSOR):
        return dataclasses.replace(cost, dtype="bfloat16")
    return cost


def eager_placements(costs: Sequence[OpCost | None], hw: HardwareProfile) -> list[OpPlacement]:
    """Eager execution on ``hw``: each op's cost timed by the roofline, one kernel after the
    other, in the model's own dtypes (eager kernels ignore --auto-cast: NeuronConfig). A free
    op (cost None) takes no time, at the point of the queue it was issued."""
    placements, clock = [], 0.0
    for cost in costs:
        if cost is None:
            placements.append(OpPlacement(device_start_us=clock))
            continue
        timing = device_time(cost, hw)
        placements.append(OpPlacement(
            device_start_us=clock, launch_us=timing.launch_us, compute_us=timing.compute_us,
            memory_us=timing.memory_us, device_time_us=timing.device_time_us, bound=timing.bound,
            bytes_read=cost.bytes_read, bytes_written=cost.bytes_written,
            peak_fraction=timing.peak_fraction, engine=cost.engine.value,
            algorithm=collective_algorithm(cost, hw)))
        clock += timing.device_time_us
    return placements


def graph_placements(ops: Sequence[GraphOp | None], hw: HardwareProfile,
                     auto_cast: str = DEFAULT_AUTO_CAST) -> list[OpPlacement | None]:
    """``graph_execution``'s placements."""
    return graph_execution(ops, hw, auto_cast)[0]


def _along_last(meta: TensorMeta, dim: int) -> bool:
    """Whether a product contracts ``meta`` along its contiguous axis (stride 1)."""
    if meta.strides is None:
        return dim % len(meta.shape) == len(meta.shape) - 1
    return meta.strides[dim] == 1


def second_layouts(ops: Sequence[GraphOp | None]) -> dict[int, list[tuple[int, int]]]:
    """Per op index, the transposes it makes (storage, elements): for each tensor that products
    contract both along its contiguous axis and along another (``_CONTRACTED``), the products
    that contract it along the other axis share one transpose of it. A layer norm's output is
    left out: it already pays its transpose (``_FREE_AXIS_NORMS``)."""
    normalized = {t for op in ops if op is not None and op.op._schema.name in _FREE_AXIS_NORMS
                  for t in op.writes[:1]}
    axes: dict[int, set[bool]] = {}
    readers: dict[int, list[tuple[int, int]]] = {}
    for index, op in enumerate(ops):
        if op is None or op.op._schema.name not in _CONTRACTED:
            continue
        metas = list(iter_tensors(op.args))
        for position, dim in _CONTRACTED[op.op._schema.name]:
            if position >= len(metas) or position >= len(op.reads) or metas[position].shape[dim] <= 1:
                continue
            storage, last = op.reads[position], _along_last(metas[position], dim)
            axes.setdefault(storage, set()).add(last)
            if not last:
                readers.setdefault(storage, []).append((index, metas[position].numel))
    made: dict[int, list[tuple[int, int]]] = {}
    for storage, kinds in axes.items():
        if len(kinds) < 2 or storage in normalized:
            continue
        for index, numel in readers[storage]:
            made.setdefault(index, []).append((len(readers[storage]), numel))
    return made


def graph_execution(ops: Sequence[GraphOp | None], hw: HardwareProfile,
                    auto_cast: str = DEFAULT_AUTO_CAST
                    ) -> tuple[list[OpPlacement | None], GraphSchedule]:
    """Graph execution on ``hw`` (graph.py): each op's time is what it adds to the schedule of
    the whole graph, its traffic what is left of it once fused epilogues and SBUF-resident
    intermediates stay on chip. ``ops`` in program order, None for free ops (views share their
    base's storage, allocations write nothing): they are not in the graph, and their placement
    is None (the backend keeps their records as they are). Also the schedule, for what it says
    of SBUF beside the placements (its high-water mark and spilled bytes)."""
    nodes: list[Node] = []
    costs: dict[int, OpCost] = {}
    products_read = {t for op in ops if op is not None and op.cost.engine is Engine.TENSOR
                     for t in op.reads}
    transposes = second_layouts(ops) if hw.gpu is None else {}
    for index, op in enumerate(ops):
        if op is None:
            continue
        cost = costs[index] = compiled(op.cost, hw, auto_cast)
        metas = [*iter_tensors(op.args), *iter_tensors(op.kwargs.values())]
        runs_on = cost.engine
        busy = engine_busy(cost, hw)
        if hw.gpu is None and _is_cast(op, metas):
            runs_on, busy = Engine.VECTOR, {}
        made = transposes.get(index, [])  # (ops sharing it, elements) per transpose it makes
        if hw.gpu is None and op.op._schema.name in _FREE_AXIS_NORMS and op.writes \
                and op.writes[0] in products_read:
            made = [(1, next(iter_tensors(op.outputs)).numel)]  # a norm is not a product
        for sharers, numel in made:
            for engine, us in transpose_busy(numel, hw).items():
                busy[engine] = busy.get(engine, 0.0) + us / sharers
        transposed = sum(numel / sharers for sharers, numel in made)
        nodes.append(Node(
            index=index, engine=runs_on, busy=busy,
            read_bytes=read_traffic(cost, hw), write_bytes=cost.bytes_written,
            inputs=list(zip(op.reads, (m.nbytes for m in metas))),
            outputs=list(zip(op.writes, (m.nbytes for m in iter_tensors(op.outputs)))),
            kind=cost.kind, folds=folds_into_convolution(op.op, op.args, op.kwargs),
            name=op.op._schema.name, dma_share=dma_share_of(cost, hw),
            on_chip_share=SBUF_TO_SBUF_SHARE if runs_on is Engine.DMA and hw.gpu is None else 0.0,
            store=hw.gpu is None and _is_store(op, metas), transposed=transposed))
    planned = schedule(nodes, hw.hbm_bytes_per_us, hw.sbuf_mib * 2**20, hw.tensor.warmup_us,
                       hw.collectives.compute_dma_share)
    placed = planned.placements
    nodes_by_index = {node.index: node for node in nodes}
    placements: list[OpPlacement | None] = []
    for index, op in enumerate(ops):
        place = placed.get(index)
        if op is None or place is None:
            placements.append(None)
            continue
        read = max(0, op.cost.bytes_read - place.resident_read)
        written = max(0, op.cost.bytes_written - place.resident_written)
        busy = {engine: us for engine, us in nodes_by_index[index].busy.items() if us > 0}
        bound, fraction = bound_of(busy, place.memory_us,
                                   peak_work(costs[index], hw, read, written), place.duration_us)
        placements.append(OpPlacement(
            device_start_us=place.start_us, compute_us=place.compute_us,
            memory_us=place.memory_us, device_time_us=place.charged_us, group=place.group,
            bound=bound, bytes_read=int(read), bytes_written=int(written),
            peak_fraction=fraction, engine=nodes_by_index[index].engine.value,
            algorithm=collective_algorithm(costs[index], hw)))
    return placements, planned


def _is_cast(op: GraphOp, metas: Sequence[TensorMeta]) -> bool:
    """Whether ``op`` only changes its input's dtype: the same shape out, another dtype."""
    if op.op._schema.name not in _CASTS or not metas:
        return False
    out = next(iter_tensors(op.outputs), None)
    return out is not None and out.shape == metas[0].shape and out.dtype != metas[0].dtype


def _is_store(op: GraphOp, metas: Sequence[TensorMeta]) -> bool:
    """Whether ``op`` copies a tensor into an existing one of the same shape (``copy_``): what
    functionalization makes of an in-place update (``m.copy_(m * b1 + g * c)``), and what a
    compiled graph does as the store of the loop nest that computes the source (graph.py)."""
    return (op.op._schema.name == "aten::copy_" and len(metas) >= 2
            and metas[0].shape == metas[1].shape)


def execution_overhead_us(hw: HardwareProfile, execution: str) -> float:
    """The fixed cost of running a region in ``execution`` mode beside its ops' device time: in
    graph mode one graph execution's, on the host and runtime side (the profile's
    ``graph_execution_us``) and on the device (``graph_floor_us``); nothing in eager mode (each
    op's launch is in its own time)."""
    return hw.graph_execution_us + hw.graph_floor_us if execution == GRAPH else 0.0


def folds_into_convolution(op: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    """An inference batch norm: neuronx-cc folds it into the convolution before it."""
    name = op._schema.name
    if name == _BATCH_NORM_NO_TRAINING:
        return True
    if name in _BATCH_NORMS:
        return not bind(op, args, kwargs).get("training", True)
    return False
