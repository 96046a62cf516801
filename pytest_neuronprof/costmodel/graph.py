"""``execution="graph"``: a profiled region costed as neuronx-cc compiles it, one graph.

The eager model runs one kernel per op, each with its launch, its inputs read from HBM and its
outputs written back. A compiled graph differs in four ways, each modelled here from the ops'
own work (their OpCosts) and the tensors they pass each other:

1. **One launch per region**, not one per op: the per-op launch cost is gone (the profile's
   ``graph_execution_us`` is the fixed cost of one execution, reported beside the device time).
2. **Fusion**: an elementwise, activation or normalization op (VectorE / ScalarE) that consumes
   the output of a matrix product, a convolution or another such op joins its producer's group:
   the epilogue works on the producer's tiles on chip, so the intermediate never goes to HBM,
   and it runs on its own engine alongside its producer (pipelined). At inference, a batch norm
   after a convolution is folded into the convolution's weights by the compiler: it costs
   nothing.
3. **SBUF residency**: an intermediate that is not fused away stays in SBUF, with no HBM traffic,
   when it fits beside the other intermediates alive at the same time (capacity: the profile's
   ``sbuf_mib``, allocated greedily in program order); otherwise it spills to HBM. Tensors the
   region does not consume (its results) are written to HBM.
4. **Overlap**: ops run on their engines' queues along the dependency graph, in program order:
   an op starts when its inputs are ready and its engines are free, so independent work on
   different engines overlaps; weight loads (tensors from outside the region) are prefetched on
   the DMA queue ahead of the compute that needs them.

5. **Auto-cast**: neuronx-cc casts float32 matrix products to bfloat16 by default (its
   ``--auto-cast matmult``), so float32 TensorE work runs at the bfloat16 rate (``auto_cast``).

Each op is charged the time it adds to the schedule's end (the makespan after it minus before
it): work hidden behind other engines costs nothing, and the charges add up to the region's
device time. Pure functions of the nodes: deterministic. ``execution.py`` builds the nodes of a
region's ops and turns the schedule into the placements the backend applies to its records.
"""

from __future__ import annotations

import dataclasses
import heapq
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from ..vocabulary import Engine
from .opcost import OpCost

# Lane engines whose ops fuse into their producer's group.
_FUSIBLE = (Engine.VECTOR, Engine.SCALAR)
# Engines that anchor a group that epilogues can join.
_ANCHORS = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR)


def auto_cast(cost: OpCost) -> OpCost:
    """A TensorE op as neuronx-cc compiles it by default: "By default, the Neuron Compiler will
    automatically cast FP32 matrix multiplication operations to BF16" (Neuron docs, Mixed
    Precision and Performance-accuracy Tuning (neuronx-cc)). Other engines keep the model's
    dtypes, and so does HBM traffic (the cast happens on chip)."""
    if cost.engine is Engine.TENSOR and cost.dtype == "float32":
        return dataclasses.replace(cost, dtype="bfloat16")
    return cost


@dataclass
class Node:
    """One op of the region, as the graph model sees it.

    busy: compute time per engine (the primary engine and any engine working alongside).
    read_us / write_us: the op's HBM transfers as eager costs them (strided reads priced), and
    fixed_us a fixed transfer cost (a DMA's set-up); residency takes the on-chip parts away.
    inputs / outputs: (tensor id, bytes) of the tensors it reads and writes; views resolved to
    the tensor they view. A tensor id names one storage for the whole region, never two: the
    simulated backend's capture-local storage numbers (profiler/backends/dataflow.py), not
    addresses, which a freed storage hands on. folds: an inference batch norm, folded into a
    convolution before it.
    """

    index: int
    engine: Engine
    busy: Mapping[Engine, float]
    read_bytes: float
    write_bytes: float
    fixed_us: float = 0.0
    inputs: Sequence[tuple[int, int]] = ()
    outputs: Sequence[tuple[int, int]] = ()
    kind: str = ""  # OpCost.kind of TensorE ops ("matmul", "conv", "attention")
    folds: bool = False


@dataclass
class Placement:
    """Where the schedule put one node."""

    start_us: float = 0.0
    duration_us: float = 0.0  # compute and transfers that could not be hidden
    charged_us: float = 0.0  # the makespan it added: its device time in graph mode
    compute_us: float = 0.0
    memory_us: float = 0.0  # HBM traffic left after fusion and residency
    group: int = -1  # the fused group (its first node's index); -1 when alone
    resident_read: float = 0.0  # bytes of its inputs and outputs that stayed on chip
    resident_written: float = 0.0


@dataclass
class GraphSchedule:
    placements: dict[int, Placement] = field(default_factory=dict)
    makespan_us: float = 0.0
    groups: dict[int, list[int]] = field(default_factory=dict)  # group -> node indices, if > 1


def _dependencies(nodes: Sequence[Node]) -> tuple[dict[int, dict[int, int | None]],
                                                  dict[tuple[int, int], list[int]]]:
    """Per node, the producer of each tensor it reads (None: from outside the region), and per
    tensor version (tensor, producer) the nodes that read it. A tensor written again (in place)
    is a new version: readers after the rewrite read the new one."""
    current: dict[int, int] = {}
    deps: dict[int, dict[int, int | None]] = {}
    readers: dict[tuple[int, int], list[int]] = {}
    for node in nodes:
        deps[node.index] = {t: current.get(t) for t, _ in node.inputs}
        for t, p in deps[node.index].items():
            if p is not None:
                readers.setdefault((t, p), []).append(node.index)
        for t, _ in node.outputs:
            current[t] = node.index
    return deps, readers


def _groups(nodes: Sequence[Node], deps: Mapping[int, Mapping[int, int | None]]) -> dict[int, int]:
    """node index -> its group (the index of the group's first node)."""
    by_index = {n.index: n for n in nodes}
    group: dict[int, int] = {}
    for node in nodes:
        group[node.index] = node.index
        producers = sorted({p for p in deps[node.index].values() if p is not None})
        if not producers:
            continue
        latest = by_index[producers[-1]]
        if node.folds and latest.engine is Engine.TENSOR and latest.kind == "conv":
            group[node.index] = group[latest.index]
        elif node.engine in _FUSIBLE and latest.engine in _ANCHORS:
            group[node.index] = group[latest.index]
    return group


def schedule(nodes: Sequence[Node], hbm_bytes_per_us: float, sbuf_bytes: float) -> GraphSchedule:
    """The graph-mode schedule of ``nodes`` (in program order)."""
    deps, readers = _dependencies(nodes)
    group = _groups(nodes, deps)

    # Where each tensor version lives: fused away, resident in SBUF, or in HBM. The bytes are
    # the version's as written (an in-place write into a slice makes a slice-sized version).
    on_chip: dict[tuple[int, int | None], int] = {}  # (tensor, producer) -> bytes kept off HBM
    live: list[tuple[int, int]] = []  # heap of (last read, bytes) of SBUF residents
    used = 0
    for node in nodes:
        while live and live[0][0] < node.index:
            used -= heapq.heappop(live)[1]
        for t, nbytes in node.outputs:
            reading = readers.get((t, node.index), [])
            if not reading:
                continue  # a result of the region (or rewritten before it is read): to HBM
            if all(group[r] == group[node.index] for r in reading):
                on_chip[(t, node.index)] = nbytes  # fused: readers work on the producer's tiles
            elif used + nbytes <= sbuf_bytes:
                on_chip[(t, node.index)] = nbytes
                used += nbytes
                heapq.heappush(live, (max(reading), nbytes))

    result = GraphSchedule()
    free: dict[Engine, float] = {}
    dma_free = 0.0
    ends: dict[int, float] = {}
    starts: dict[int, float] = {}
    makespan = 0.0
    for node in nodes:
        inputs = deps[node.index]
        place = Placement(group=group[node.index])
        if node.folds and group[node.index] != node.index:  # folded into the convolution
            anchor = group[node.index]
            place.start_us = starts[anchor]
            result.placements[node.index] = place
            starts[node.index], ends[node.index] = starts[anchor], ends[anchor]
            continue
        # HBM traffic left: reads of on-chip tensors and writes of on-chip results are gone.
        resident_in = sum(min(nbytes, on_chip.get((t, inputs[t]), 0)) for t, nbytes in node.inputs)
        resident_out = sum(on_chip.get((t, node.index), 0) for t, _ in node.outputs)
        external = sum(nbytes for t, nbytes in node.inputs if inputs[t] is None)
        reads = max(0.0, node.read_bytes - resident_in)
        writes = max(0.0, node.write_bytes - resident_out)
        prefetch = min(reads, float(external))  # loads of weights and region inputs
        load_end = dma_free + prefetch / hbm_bytes_per_us
        dma_free = load_end
        ready = load_end
        producers = {p for p in inputs.values() if p is not None}
        for p in producers:
            # a fused producer streams its tiles: its epilogue starts with it
            ready = max(ready, starts[p] if group[p] == group[node.index] else ends[p])
        busy = {e: us for e, us in node.busy.items() if us > 0}
        for engine in busy:
            ready = max(ready, free.get(engine, 0.0))
        transfer = (reads - prefetch + writes) / hbm_bytes_per_us + node.fixed_us
        if transfer > 0:
            ready = max(ready, dma_free)
        compute = max(busy.values(), default=0.0)
        end = ready + max(compute, transfer)
        for p in producers:
            if group[p] == group[node.index]:
                end = max(end, ends[p])  # an epilogue cannot finish before its producer
        for engine, us in busy.items():
            free[engine] = ready + us
        if transfer > 0:
            dma_free = ready + transfer
        starts[node.index], ends[node.index] = ready, end
        before, makespan = makespan, max(makespan, end, dma_free)
        place.start_us, place.duration_us = ready, end - ready
        place.charged_us = makespan - before
        place.compute_us = compute
        place.memory_us = (reads + writes) / hbm_bytes_per_us + node.fixed_us
        place.resident_read, place.resident_written = resident_in, resident_out
        result.placements[node.index] = place
    result.makespan_us = makespan
    members: dict[int, list[int]] = {}
    for index, g in group.items():
        members.setdefault(g, []).append(index)
    result.groups = {g: sorted(m) for g, m in members.items() if len(m) > 1}
    for index, place in result.placements.items():
        if group[index] not in result.groups:
            place.group = -1
    return result
