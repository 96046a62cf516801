"""``execution="graph"``: a profiled region costed as neuronx-cc compiles it, one graph.

The eager model runs one kernel per op, each with its launch, its inputs read from HBM and its
outputs written back. A compiled graph differs in these ways, each modelled here from the ops'
own work (their OpCosts) and the tensors they pass each other:

1. **One launch per region**, not one per op: the per-op launch cost is gone (the profile's
   ``graph_floor_us`` and ``graph_execution_us``, the fixed device and host cost of one
   execution, are reported beside the device time).
2. **Fusion**: an elementwise, activation or normalization op (VectorE / ScalarE) that consumes
   the output of a matrix product, a convolution or another such op joins its producer's group:
   the epilogue works on the producer's tiles on chip, so the intermediate never goes to HBM,
   and it runs on its own engine alongside its producer (pipelined). At inference, a batch norm
   after a convolution is folded into the convolution's weights by the compiler: it costs
   nothing. Elementwise nests from several producers merge (loop fusion, ``_groups``): a nest
   loads each tile once, applies scalar operators on its instructions' free operator slots
   (``_absorbed``), stores into an existing tensor a ``copy_`` names (``Node.store``), and
   writes back the final version of every tensor it updates in place (``_updated_in_place``).
3. **SBUF residency**: an intermediate that is not fused away stays in SBUF, with no HBM traffic,
   when it fits beside the other intermediates alive at the same time (capacity: the profile's
   ``sbuf_mib``, allocated greedily in the canonical order); otherwise it spills to HBM. Tensors
   the region does not consume (its results) are written to HBM. The schedule reports SBUF's
   high-water mark and the bytes spilled (device memory; no time depends on them). A copy of tensors kept on chip
   still moves them, SBUF to SBUF (``Node.on_chip_share``).
4. **Overlap**: ops run on their engines' queues along the dependency graph, in the canonical
   order: an op starts when its inputs are ready and its engines are free, so independent work
   on different engines overlaps; weight loads (tensors from outside the region) queue on the
   DMA ahead of the compute that needs them and stream in tile by tile. Collectives run on the
   collective cores' queue, apart from the compute engines, their buffers in HBM; while one
   runs, compute's transfers get their share of the DMA engines, which serve the collectives'
   rings and compute's round-robin per packet (``_SharedDma``; the runtime's
   compute-communication overlap page). TensorE work after a quiet window pays the array's
   throttling ramp (NeuronCore-v3/v4).
5. **Auto-cast**: what neuronx-cc's ``--auto-cast`` casts to bfloat16 runs at the bfloat16 rate
   (``execution.compiled``, applied to the ops' costs before they become nodes).

The canonical order is a topological order of the dataflow whose ties are broken by the ops'
content, never their position in the program (``_canonical_order``): the compiler schedules the
graph, not the source, so reordering independent work changes no charge, no residency and no
group.

Each op is charged the time it adds to the schedule's end (the makespan after it minus before
it): work hidden behind other engines costs nothing, and the charges add up to the region's
device time. Pure functions of the nodes: deterministic. ``execution.py`` builds the nodes of a
region's ops and turns the schedule into the placements the backend applies to its records.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..vocabulary import Engine
from .roofline import throttled_us

# Lane engines whose ops fuse into their producer's group.
_FUSIBLE = (Engine.VECTOR, Engine.SCALAR)
# Engines that anchor a group that epilogues can join.
_ANCHORS = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR)
# Arithmetic that, with a scalar operand, a lane engine instruction applies to its input on the
# way in (aws-neuron/aws-neuron-sdk@81ce03ae: nki/api/nki.isa.rst): ``tensor_scalar`` takes one
# tensor and two scalar operators, ``scalar_tensor_tensor`` computes (in0 op0 scalar) op1 in1,
# ScalarE's ``activation`` computes func(in * scale + bias). In a fused loop nest such an op is
# no pass of its own when the instruction of its reader has a scalar operator free for it, as
# ``alpha=`` of add_ and ``value=`` of addcmul_ are none.
_SCALAR_ARITHMETIC = frozenset({"aten::mul", "aten::mul_", "aten::add", "aten::add_", "aten::sub",
                                "aten::sub_", "aten::rsub", "aten::div", "aten::div_", "aten::neg",
                                "aten::neg_"})


@dataclass
class Node:
    """One op of the region, as the graph model sees it.

    busy: compute time per engine (the primary engine and any engine working alongside).
    read_bytes / write_bytes: the op's HBM transfers as eager costs them (strided reads
    priced); residency takes the on-chip parts away. The DMA's start is the graph's floor's.
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
    inputs: Sequence[tuple[int, int]] = ()
    outputs: Sequence[tuple[int, int]] = ()
    kind: str = ""  # OpCost.kind of TensorE ops ("matmul", "conv", "attention")
    folds: bool = False
    name: str = ""  # the op ("aten::mm"): part of its content key, so equal keys are equal ops
    dma_share: float = 1.0  # the share of the HBM bandwidth its transfers reach (their sizes)
    # A copy's share of that bandwidth for the bytes it moves within SBUF, when its tensors stay
    # on chip (a DMA from SBUF to SBUF); 0: moving on-chip data costs it nothing
    on_chip_share: float = 0.0
    # A copy of a tensor into an existing one of the same shape (``m.copy_(m_new)``, what
    # functionalization leaves of an in-place update): in a fused loop nest, the nest's store
    store: bool = False
    # Elements this op's layout transposes move through TensorE (identity products: the second
    # layout of a tensor contracted along two axes, a free-axis norm's output before a product;
    # execution.py), already in ``busy``: what the activity counts as transpose flops
    transposed: float = 0.0


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
    # What the engines and the DMA did for it (costmodel/activity.py): each engine's time from
    # ``start_us`` (absorbed ops none; TensorE's with its throttling ramp, ``throttled_us`` of it),
    # its transfers on the DMA queue as (start, end), the bytes of intermediates it spilled to
    # HBM (``spill_written``: its outputs that did not fit in SBUF) and read back from there
    # (``spill_read``), and the elements its layout transposes moved through TensorE.
    busy: dict[Engine, float] = field(default_factory=dict)
    throttled_us: float = 0.0
    transfers: tuple[tuple[float, float], ...] = ()
    spill_written: float = 0.0
    spill_read: float = 0.0
    transposed: float = 0.0


@dataclass
class GraphSchedule:
    placements: dict[int, Placement] = field(default_factory=dict)
    makespan_us: float = 0.0
    groups: dict[int, list[int]] = field(default_factory=dict)  # group -> node indices, if > 1
    # SBUF residency (device memory, not time): the most bytes of intermediates kept in SBUF at
    # once, and the bytes of intermediates that did not fit and went through HBM.
    sbuf_peak_bytes: int = 0
    spilled_bytes: int = 0
    # The nodes' indices (the ops' positions) in the canonical order the schedule placed them:
    # device memory follows the dataflow in it (memory.dataflow_usage)
    order: tuple[int, ...] = ()


def _dependencies(nodes: Sequence[Node]) -> tuple[dict[int, dict[int, int | None]],
                                                  dict[tuple[int, int | None], list[int]],
                                                  dict[int, set[int]]]:
    """Per node, the producer of each tensor it reads (None: from outside the region); per
    tensor version (tensor, producer) the nodes that read it; and per node the nodes that must
    run before it: its producers, and for each tensor it writes, the readers and the writer of
    the version it replaces (write-after-read and write-after-write). A tensor written again (in
    place) is a new version: readers after the rewrite read the new one. ``nodes`` in program
    order: the only order in which versions are defined."""
    current: dict[int, int] = {}
    deps: dict[int, dict[int, int | None]] = {}
    readers: dict[tuple[int, int | None], list[int]] = {}
    prior: dict[int, set[int]] = {}
    for node in nodes:
        inputs = deps[node.index] = {t: current.get(t) for t, _ in node.inputs}
        after = prior[node.index] = {p for p in inputs.values() if p is not None}
        for t, p in inputs.items():
            readers.setdefault((t, p), []).append(node.index)
        for t, _ in node.outputs:
            replaced = current.get(t)
            after.update(readers.get((t, replaced), ()))
            if replaced is not None:
                after.add(replaced)
            current[t] = node.index
        after.discard(node.index)  # an in-place op reads the version it replaces
    return deps, readers, prior


def _updated_in_place(nodes: Sequence[Node], deps: Mapping[int, Mapping[int, int | None]]
                      ) -> set[tuple[int, int]]:
    """The (tensor, writer) versions that must reach HBM whoever reads them in the region: the
    final version of each tensor that lived before the region (an op read it from outside) and
    that the region rewrote (in place: ``p.addcdiv_``, ``m.mul_``, ``v.copy_(v_new)``). Its
    storage outlives the region, so the write is a result, even when ops of the region also
    read the new version on chip. ``nodes`` in program order."""
    last: dict[int, int] = {}
    outside: set[int] = set()
    for node in nodes:
        outside.update(t for t, p in deps[node.index].items() if p is None)
        for t, _ in node.outputs:
            last[t] = node.index
    return {(t, w) for t, w in last.items() if t in outside}


def _tensor_operands(node: Node) -> int:
    """The tensors an op streams through its engine (a 0-dim or one-element tensor is a scalar)."""
    return sum(1 for _, nbytes in node.inputs if nbytes > 8)


def _free_scalars(reader: Node) -> int:
    """Scalar operators the instruction of ``reader`` has free for a scalar op feeding it: an
    activation's scale and bias (ScalarE) two; a tensor_scalar's second operator (one tensor) or
    scalar_tensor_tensor's op0 (two) one; an op of three tensors (addcmul_, addcdiv_: a product
    and an accumulate, the accumulate's scalar its ``value``) none."""
    if reader.engine is Engine.SCALAR:
        return 2
    return 1 if _tensor_operands(reader) <= 2 else 0


def _absorbed(nodes: Sequence[Node], group: Mapping[int, int],
              readers: Mapping[tuple[int, int | None], list[int]],
              stored: set[tuple[int, int]]) -> set[int]:
    """The scalar ops (``_SCALAR_ARITHMETIC`` on one tensor: ``m * b1``, ``m.mul_(b1)``,
    ``x + eps``) that the instruction of their only reader, a lane op of the same fused group,
    applies on the way in (``_free_scalars``; an op that carries absorbed ones brings them
    along): no engine time of their own. ``nodes`` in canonical order."""
    by_index = {n.index: n for n in nodes}
    taken: dict[int, int] = {}  # reader -> scalar operators it applies for others
    absorbed: set[int] = set()
    for node in nodes:
        if node.engine is not Engine.VECTOR or node.name not in _SCALAR_ARITHMETIC \
                or len(node.outputs) != 1 or _tensor_operands(node) != 1:
            continue
        version = (node.outputs[0][0], node.index)
        reading = set(readers.get(version, ()))
        if len(reading) != 1 or version in stored:
            continue
        reader = by_index.get(next(iter(reading)))
        if reader is None or reader.engine not in _FUSIBLE or group[reader.index] != group[node.index]:
            continue
        load = 1 + taken.get(node.index, 0)  # its own operator and those it applies for others
        if taken.get(reader.index, 0) + load <= _free_scalars(reader):
            taken[reader.index] = taken.get(reader.index, 0) + load
            absorbed.add(node.index)
    return absorbed


def _content(node: Node) -> tuple:
    """What a node is, apart from where it sits in the program: equal for interchangeable ops."""
    busy = tuple(node.busy.items())  # (Engine, us): an Engine compares as its name
    return (node.engine.value, node.name, node.kind, node.folds,
            tuple(sorted(busy)) if len(busy) > 1 else busy, node.read_bytes, node.write_bytes,
            tuple([b for _, b in node.inputs]), tuple([b for _, b in node.outputs]))


def _rank(described: list[tuple[tuple, int]], key: dict[int, int], first: int) -> int:
    """key[node] = first + the rank of its description among ``described`` ((description,
    node) pairs): equal descriptions, equal keys; hash-free and exact. Returns the next free key."""
    described.sort()
    previous: tuple | None = None
    for description, i in described:
        if description != previous:
            first, previous = first + 1, description
        key[i] = first
    return first + 1


def _layered_keys(level: Sequence[int], describe: Callable[[int, dict[int, int]], tuple]
                  ) -> dict[int, int]:
    """Structural keys of nodes 0..n-1, level by level: ``describe`` may use the keys of lower
    levels, which are ready when it is called; a deeper level's keys are all larger."""
    levels: dict[int, list[int]] = {}
    for i, lv in enumerate(level):
        levels.setdefault(lv, []).append(i)
    key: dict[int, int] = {}
    first = 0
    for lv in sorted(levels):
        first = _rank([(describe(i, key), i) for i in levels[lv]], key, first)
    return key


def _canonical_order(nodes: Sequence[Node], deps: Mapping[int, Mapping[int, int | None]],
                     prior: Mapping[int, set[int]], hbm_bytes_per_us: float) -> list[Node]:
    """The nodes in an order the graph alone decides, never their program order (the compiler
    schedules the dataflow, not the source): so that reordering independent work changes no
    charge.

    A topological order (producers, and the anti-dependencies of in-place writes, first) that
    takes, among the ops ready to go, the one that could start first with unlimited engines
    (its t-level: the longest chain of eager times above it). An op that reads nothing the
    region made (a weight's cast, a region input's first op) goes just in time: as late as its
    earliest consumer allows, as program order places it, rather than all at the start. Ties
    go by structural keys, hash-free: the rank of (content, producers' keys and which of their
    outputs it reads) among the ops of its depth, computed from the sources down, and the rank
    of (content, consumers' keys and the operand each reads) among the ops of its height, from
    the results up; so only ops with equal content, producers and consumers tie, and those are
    interchangeable. O(n log n)."""
    # Nodes by position k in program order (a topological order of the dataflow), lists for
    # speed. One pass: per node, each input's (producer, which of its outputs), or (-1, -1) from
    # outside the region; its depth; its t-level (sources count 0 here, placed after).
    n = len(nodes)
    at = {node.index: k for k, node in enumerate(nodes)}
    fed: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    consumers: list[list[tuple[int, int, int]]] = [[] for _ in range(n)]  # (output, reader, arg)
    depth = [0] * n
    ready_at = [0.0] * n
    eager_us = [0.0] * n
    slots: dict[tuple[int, int], int] = {}  # (tensor, writer) -> which output of the writer
    sources: list[int] = []
    for k, node in enumerate(nodes):
        inputs, feeds = deps[node.index], fed[k]
        d, ready = 0, 0.0
        for operand, (t, _) in enumerate(node.inputs):
            p = inputs[t]
            if p is None:
                feeds.append((-1, -1))
                continue
            out = slots[(t, p)]
            p = at[p]
            feeds.append((p, out))
            consumers[p].append((out, k, operand))
            if depth[p] >= d:
                d = depth[p] + 1
            if depth[p] and ready_at[p] + eager_us[p] > ready:
                ready = ready_at[p] + eager_us[p]
        depth[k], ready_at[k] = d, ready
        if not d:
            sources.append(k)
        for out, (t, _) in enumerate(node.outputs):
            slots[(t, node.index)] = out
        busy = max(node.busy.values(), default=0.0)
        memory = (node.read_bytes + node.write_bytes) / hbm_bytes_per_us
        eager_us[k] = max(busy, memory)
    for k in sources:  # just in time for its first consumer
        first = min([ready_at[c] for _, c, _ in consumers[k]], default=0.0)
        ready_at[k] = max(0.0, first - eager_us[k])
    height = [0] * n
    for k in range(n - 1, -1, -1):
        for _, c, _ in consumers[k]:
            if height[c] >= height[k]:
                height[k] = height[c] + 1

    # Structural keys: from the sources down, and from the results up.
    described = [_content(node) for node in nodes]
    ranks = {c: r for r, c in enumerate(sorted(set(described)))}  # few distinct ops
    content = [ranks[c] for c in described]

    def fed_by(k: int, key: dict[int, int]) -> tuple:
        return (content[k], *[(-1, -1) if p < 0 else (key[p], out) for p, out in fed[k]])

    def feeding(k: int, key: dict[int, int]) -> tuple:
        return (content[k], *sorted([(out, key[c], operand) for out, c, operand in consumers[k]]))

    up, down = _layered_keys(depth, fed_by), _layered_keys(height, feeding)

    # Kahn's algorithm on a heap: (t-level, structural keys, position); the position only
    # separates interchangeable ops, in whichever order: they are charged alike.
    waiting = [0] * n
    followers: list[list[int]] = [[] for _ in range(n)]
    for node in nodes:
        k = at[node.index]
        for p in prior[node.index]:
            followers[at[p]].append(k)
            waiting[k] += 1
    heap = [(ready_at[k], up[k], down[k], k) for k in range(n) if not waiting[k]]
    heapq.heapify(heap)
    order: list[Node] = []
    while heap:
        k = heapq.heappop(heap)[3]
        order.append(nodes[k])
        for f in followers[k]:
            waiting[f] -= 1
            if not waiting[f]:
                heapq.heappush(heap, (ready_at[f], up[f], down[f], f))
    return order


def _groups(nodes: Sequence[Node], deps: Mapping[int, Mapping[int, int | None]],
            position: Mapping[int, int]) -> dict[int, int]:
    """node index -> its group (the index of the group's first node in canonical order).
    ``nodes`` in canonical order (``position``: index -> place in it): an op joins the group of
    its producer that runs last in it.

    Loop fusion: a lane op (VectorE / ScalarE) that combines several producers also merges the
    groups of its other lane producers that hold no matrix product, elementwise loop nests over
    the same tiles, into its own: neuronx-cc "turns the optimized graph ... into a series of
    loop nests and performs layout, tiling and loop fusion" (aws-neuron/aws-neuron-sdk@81ce03ae:
    nki/index.rst), one tile loaded, every op of the nest applied, one store
    (nki/deep-dives/nki_perf_guide.rst, "if we fuse the operators"). So ``a * b1 + g * c``
    (two nests from region inputs) or an in-place update chain (``m.mul_(b1).add_(g)`` beside
    ``v.mul_(b2).addcmul_(g, g)``, both read by ``p.addcdiv_``) is one group, whichever branch
    the canonical order runs last. Two groups that each hold a product are never merged: a
    product's epilogue is the tiling of that product."""
    by_index = {n.index: n for n in nodes}
    parent: dict[int, int] = {}  # union-find over node indexes; a root stands for its group
    size: dict[int, int] = {}
    name: dict[int, int] = {}  # root -> the group's first node in canonical order
    product: dict[int, bool] = {}  # root -> whether the group holds a matrix product (TensorE)

    def find(x: int) -> int:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def merge(a: int, b: int) -> int:
        a, b = find(a), find(b)
        if a == b:
            return a
        if size[a] < size[b]:
            a, b = b, a
        parent[b] = a
        size[a] += size[b]
        name[a] = min(name[a], name[b], key=position.__getitem__)
        product[a] = product[a] or product[b]
        return a

    for node in nodes:
        i = node.index
        parent[i], size[i], name[i], product[i] = i, 1, i, node.engine is Engine.TENSOR
        producers = {p for p in deps[i].values() if p is not None}
        if not producers:
            continue
        latest = by_index[max(producers, key=position.__getitem__)]
        if node.folds and latest.engine is Engine.TENSOR and latest.kind == "conv":
            merge(latest.index, i)
            continue
        if node.engine not in _FUSIBLE and not node.store:
            continue
        if latest.engine in _ANCHORS:
            merge(latest.index, i)
        for p in producers:
            if by_index[p].engine in _FUSIBLE and find(p) != find(i) and not product[find(p)]:
                merge(p, i)
    return {i: name[find(i)] for i in parent}


class _SharedDma:
    """Compute's DMA queue beside the collectives' rings (compute-comm-overlap.rst: the DMA
    engines serve the collectives' rings and compute's round-robin, a packet of each at a time):
    while a collective runs (``windows``, one after another on the CC queue), compute's
    transfers advance at ``share`` of their pace; otherwise at their own. A transfer's pace is
    set by the collectives placed when it is queued."""

    __slots__ = ("share", "windows")

    def __init__(self, share: float) -> None:
        self.share = share
        self.windows: list[tuple[float, float]] = []  # (start, end) of each collective, in order

    def end(self, start: float, work_us: float) -> float:
        """When ``work_us`` of transfers at their own pace, queued at ``start``, are done."""
        if work_us <= 0:
            return start
        at = start
        for begin, finish in self.windows:
            if finish <= at:
                continue
            if begin > at:
                if at + work_us <= begin:
                    return at + work_us
                work_us -= begin - at
                at = begin
            slowed = (finish - at) * self.share  # the work that fits in the rest of the window
            if work_us <= slowed:
                return at + work_us / self.share
            work_us -= slowed
            at = finish
        return at + work_us


def schedule(nodes: Sequence[Node], hbm_bytes_per_us: float, sbuf_bytes: float,
             tensor_warmup_us: float = 0.0, compute_dma_share: float = 1.0) -> GraphSchedule:
    """The graph-mode schedule of ``nodes`` (given in program order, which defines the tensors'
    versions; they are placed, kept in SBUF and charged in the canonical order).
    ``tensor_warmup_us``: TensorE's throttling ramp (NeuronCore-v3/v4), paid by TensorE work
    that starts after the array was quiet for that long. ``compute_dma_share``: the share of
    the DMA compute's transfers get while a collective runs (profiles.Collectives)."""
    deps, readers, prior = _dependencies(nodes)
    stored = _updated_in_place(nodes, deps)
    nodes = _canonical_order(nodes, deps, prior, hbm_bytes_per_us)
    position = {n.index: k for k, n in enumerate(nodes)}
    group = _groups(nodes, deps, position)
    # A collective's CC cores move its buffers between HBM and the links through DMA rings of
    # their own: what it reads and writes lives in HBM, never in SBUF (its producer writes it
    # there, its readers load it).
    communicating = {n.index for n in nodes if n.engine is Engine.COLLECTIVE}

    # Where each tensor version lives: fused away, resident in SBUF, or in HBM. The bytes are
    # the version's as written (an in-place write into a slice makes a slice-sized version).
    on_chip: dict[tuple[int, int | None], int] = {}  # (tensor, producer) -> bytes kept off HBM
    spills: dict[tuple[int, int | None], int] = {}  # (tensor, producer) -> bytes spilled to HBM
    live: list[tuple[int, int]] = []  # heap of (last read's position, bytes) of SBUF residents
    used = sbuf_peak = spilled = 0
    absorbed = _absorbed(nodes, group, readers, stored)
    for here, node in enumerate(nodes):
        while live and live[0][0] < here:
            used -= heapq.heappop(live)[1]
        for t, nbytes in node.outputs:
            reading = readers.get((t, node.index), [])
            if not reading:
                continue  # a result of the region (or rewritten before it is read): to HBM
            if communicating and (node.index in communicating
                                  or any(r in communicating for r in reading)):
                continue  # a collective's buffer: in HBM
            if all(group[r] == group[node.index] for r in reading):
                on_chip[(t, node.index)] = nbytes  # fused: readers work on the producer's tiles
            elif used + nbytes <= sbuf_bytes:
                on_chip[(t, node.index)] = nbytes
                used += nbytes
                sbuf_peak = max(sbuf_peak, used)
                heapq.heappush(live, (max(position[r] for r in reading), nbytes))
            else:
                spilled += nbytes
                spills[(t, node.index)] = nbytes

    result = GraphSchedule(sbuf_peak_bytes=sbuf_peak, spilled_bytes=spilled,
                           order=tuple(node.index for node in nodes))
    free: dict[Engine, float] = {}
    dma_free = 0.0
    dma = _SharedDma(compute_dma_share)
    ends: dict[int, float] = {}
    starts: dict[int, float] = {}
    makespan = 0.0
    loaded: set[tuple[int, int, int | None]] = set()  # (group, tensor, producer) in SBUF tiles
    streaming: dict[int, float] = {}  # group -> when its lane ops' loads began
    sizes: dict[int, int] = {}
    for g in group.values():
        sizes[g] = sizes.get(g, 0) + 1
    for node in nodes:
        inputs = deps[node.index]
        place = Placement(group=group[node.index])
        if node.folds and group[node.index] != node.index:  # folded into the convolution
            anchor = group[node.index]
            place.start_us = starts[anchor]
            result.placements[node.index] = place
            starts[node.index], ends[node.index] = starts[anchor], ends[anchor]
            continue
        bandwidth = hbm_bytes_per_us * node.dma_share
        if node.index in communicating:
            # The CC cores run it, apart from the compute engines, one collective after the
            # other (one stream), once its inputs are in HBM; its own rings move its buffers.
            # Compute's transfers meanwhile get their share of the DMA (_SharedDma).
            ready = max([free.get(Engine.COLLECTIVE, 0.0),
                         *(ends[p] for p in inputs.values() if p is not None)])
            links = max(node.busy.values(), default=0.0)
            hbm = (node.read_bytes + node.write_bytes) / bandwidth
            end = ready + max(links, hbm)
            place.busy = {e: us for e, us in node.busy.items() if us > 0}
            free[Engine.COLLECTIVE] = end
            if end > ready:
                dma.windows.append((ready, end))
            starts[node.index], ends[node.index] = ready, end
            before, makespan = makespan, max(makespan, end, dma_free)
            place.start_us, place.duration_us = ready, end - ready
            place.charged_us = makespan - before
            place.compute_us, place.memory_us = links, hbm
            result.placements[node.index] = place
            continue
        # HBM traffic left: reads of on-chip tensors and writes of on-chip results are gone, but
        # for the final version of a tensor updated in place, which outlives the region in HBM.
        # A lane op of a fused loop nest reads a tile another lane op of the nest (or an earlier
        # operand of its own) already loaded from SBUF: one load per tile.
        joined = sizes[group[node.index]] > 1
        lane = node.engine in _FUSIBLE or (node.store and joined)
        resident_in = external = 0
        for k, (t, nbytes) in enumerate(node.inputs):
            version = inputs[t]
            kept = min(nbytes, on_chip.get((t, version), 0))
            # (a store's destination, its first operand, is written, not read)
            if lane and kept < nbytes and not (node.store and k == 0):
                key = (group[node.index], t, version)
                if key in loaded:
                    kept = nbytes
                else:
                    loaded.add(key)
            resident_in += kept
            if version is None:
                external += nbytes - kept
            elif (t, version) in spills:  # an intermediate that did not fit: read back from HBM
                place.spill_read += nbytes - kept
        resident_out = sum(on_chip.get((t, node.index), 0) for t, _ in node.outputs
                           if (t, node.index) not in stored)
        reads = max(0.0, node.read_bytes - resident_in)
        writes = max(0.0, node.write_bytes - resident_out)
        # Loads of weights and region inputs queue on the DMA ahead of the compute that needs
        # them, and stream in tile by tile: the op starts once its load has started and ends
        # no sooner than the load.
        # The lane ops of a fused loop nest load their tiles interleaved, one tile of each input
        # per iteration: such an op starts once the nest's loads have started, not its own.
        prefetch = min(reads, float(external))
        ready = 0.0
        load_end = 0.0
        transfers: list[tuple[float, float]] = []
        if prefetch > 0:
            ready = dma_free
            if lane and joined:
                ready = streaming.setdefault(group[node.index], dma_free)
            load_end = dma.end(dma_free, prefetch / bandwidth)
            transfers.append((dma_free, load_end))
            dma_free = load_end
        producers = {p for p in inputs.values() if p is not None}
        for p in producers:
            # a fused producer streams its tiles: its epilogue starts with it
            ready = max(ready, starts[p] if group[p] == group[node.index] else ends[p])
        busy = {e: us for e, us in node.busy.items() if us > 0 and node.index not in absorbed}
        if Engine.TENSOR in busy and tensor_warmup_us > 0:
            quiet = ready - free.get(Engine.TENSOR, -tensor_warmup_us)
            if quiet >= tensor_warmup_us:  # the array was quiet: it starts throttled
                full = busy[Engine.TENSOR]
                busy[Engine.TENSOR] = throttled_us(full, tensor_warmup_us)
                place.throttled_us = busy[Engine.TENSOR] - full
        for engine in busy:
            ready = max(ready, free.get(engine, 0.0))
        # The rest of its traffic (intermediates from HBM, results) follows on the queue.
        transfer = (reads - prefetch + writes) / bandwidth
        if node.on_chip_share > 0 and not lane:  # a copy whose tensors stay on chip moves them
            transfer += max(resident_in, resident_out) / (bandwidth * node.on_chip_share)
        transfer_end = dma.end(max(ready, dma_free), transfer) if transfer > 0 else 0.0
        if transfer > 0:
            transfers.append((max(ready, dma_free), transfer_end))
        compute = max(busy.values(), default=0.0)
        end = max(ready + compute, load_end, transfer_end)
        for p in producers:
            if group[p] == group[node.index]:
                end = max(end, ends[p])  # an epilogue cannot finish before its producer
        for engine, us in busy.items():
            free[engine] = ready + us
        if transfer > 0:
            dma_free = transfer_end
        starts[node.index], ends[node.index] = ready, end
        before, makespan = makespan, max(makespan, end, dma_free)
        place.start_us, place.duration_us = ready, end - ready
        place.charged_us = makespan - before
        place.compute_us = compute
        place.memory_us = (reads + writes) / bandwidth
        place.resident_read, place.resident_written = resident_in, resident_out
        place.busy, place.transfers, place.transposed = busy, tuple(transfers), node.transposed
        place.spill_written = sum(spills.get((t, node.index), 0) for t, _ in node.outputs)
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
