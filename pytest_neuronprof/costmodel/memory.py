"""Device memory of a region: the peak of live bytes, from the lifetimes of its tensors' storages.

The simulated backend's capture (profiler/backends/dataflow.py, ``StorageLifetimes``) names each
storage it meets once, in the order it meets them, with its bytes (the storage's ``nbytes()``,
not a view's), the shape and dtype of the tensor it first saw in it, and where it came from:

- made by the op at position ``p`` (an op's output in a storage the capture had not seen);
- resident (position ``RESIDENT``): alive before the region and read by one of its ops
  (weights, inputs, optimizer state), counted from the region's start;

and each free as ``(position, storage)``: the storage died after op ``position - 1`` ended and
before op ``position``'s outputs were counted (a weakref callback on the UntypedStorage, which
PyTorch keeps as one Python object for the storage's whole life). Views share their storage and
in-place ops write into one already counted, so neither allocates anything.

``memory_usage`` turns that into a ``MemoryUsage``: the live bytes right after each op (resident
bytes still alive, plus storages made at or before it and not freed before the next op), their
highest point, the largest storages alive there, and everything alive there grouped by what made
it (``LiveGroup``: op, module, shape and dtype, with the count and bytes of its storages). Bytes right after an op are the high points
of the region: between two ops the program can only free. Pure and deterministic: storages are
named by capture-local numbers and ops by position, never by address or id, so equal code gives
equal numbers.

What the capture sees, and what it leaves out:

- The free callback fires on ``meta`` tensors and under ``FakeTensorMode`` as on CPU (checked
  on torch 2.13: a FakeTensor's storage is a meta storage, preserved and freed like any other;
  tests/test_memory_tracking.py), so full-size models simulated without memory have peaks.
- Tensors made and freed inside one op that the mode does not see decomposed are not seen; a
  composite op's decomposition is (each op of it is captured).
- Work handed to other threads (profiler/threads.py) is left out: its ops are spliced into the
  records, but the storages they make are not tracked (a tensor made there and read later by
  the region's own thread counts as resident).
- A storage's bytes are its ``nbytes()`` when first met: ``resize_`` later is not followed.
  Storages of tensors kept alive only by a reference cycle are freed when the garbage
  collector runs, as on a device. Tensors without a storage (sparse, wrapper subclasses) are
  not counted; one made by ``torch.tensor()`` in the region (its ``lift_fresh`` is not an op
  of the capture) counts as resident once an op reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from itertools import accumulate, compress
from typing import Any, Callable, NamedTuple, Sequence

RESIDENT = -1  # the position of a storage alive before the region
RESIDENT_OP = "(resident)"
AT_PEAK = 10  # storages listed at the peak


@dataclass(frozen=True)
class LiveGroup:
    """The storages alive at the peak that one origin made: the same op in the same module,
    with the same shape and dtype (a layer's K and V cache of one shape are one group; the
    resident weights of one shape and dtype are one group)."""

    op: str  # as LiveTensor.op
    module_path: str
    shape: tuple[int, ...]
    dtype: str
    count: int
    bytes: int  # of all of them


@dataclass(frozen=True)
class LiveTensor:
    """One storage alive at the peak."""

    bytes: int
    shape: tuple[int, ...]
    dtype: str  # torch dtype name without "torch.", e.g. "bfloat16"
    op: str  # the op that made it, "aten::mm"; "(resident)" for a tensor alive before the region
    module_path: str  # the module whose forward/backward made it ("" outside modules, resident)


@dataclass(frozen=True)
class MemoryUsage:
    """Device memory of a region (see the module)."""

    peak_bytes: int  # resident + allocated bytes alive at the highest point of the region
    resident_bytes: int  # bytes of storages alive before the region that its ops used
    peak_index: int  # OpRecord.index of the op after which the peak was reached (-1: the start)
    # the largest storages alive at the peak, largest first (equal sizes by op, module, shape)
    at_peak: tuple[LiveTensor, ...]
    # (OpRecord.index, live bytes right after that op), only where it changes; first (-1, resident)
    timeline: tuple[tuple[int, int], ...]
    sbuf_peak_bytes: int | None = None  # graph execution: SBUF high-water mark of the schedule
    spilled_bytes: int | None = None  # graph execution: intermediates that went to HBM
    # Every storage alive at the peak, grouped by origin: the most bytes first, ties by origin
    live: tuple[LiveGroup, ...] = ()


def _frozen_maker(cls: type) -> Callable[..., Any]:
    """A function that makes an instance of the frozen dataclass ``cls`` from its fields' values
    in order, as its __init__ does (each field set in order into the instance's dict, so equal,
    hashed, printed and pickled alike) in half the time: __init__ sets each field through
    object.__setattr__ (a frozen class's own refuses). Built from the class's fields only."""
    names = [f.name for f in fields(cls)]
    assert all(name.isidentifier() for name in names)
    lines = [f"def make({', '.join(names)}):", "    made = new(cls)", "    own = made.__dict__"]
    lines += [f"    own[{name!r}] = {name}" for name in names]
    lines.append("    return made")
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from the field names only
    return namespace["make"]


# LiveGroup(...) and LiveTensor(...) with their fields in order, for the many a region makes.
_live_group = _frozen_maker(LiveGroup)
_live_tensor = _frozen_maker(LiveTensor)


class Storage(NamedTuple):
    """A storage as the capture met it: where it came from (``RESIDENT`` or the position of
    the op that made it), its bytes, and the shape and dtype of its first tensor. The capture
    hands plain tuples in this order (a tuple of ints and a torch.dtype as shape and dtype: the
    dtype made a name for the few listed at the peak only)."""

    position: int
    nbytes: int
    shape: Sequence[int]
    dtype: Any  # "bfloat16", or a torch.dtype


def memory_usage(storages: Sequence[tuple[int, int, Sequence[int], Any]],
                 frees: Sequence[tuple[int, int]], ops: int,
                 made_by: Callable[[int], tuple[str, str]]) -> MemoryUsage:
    """The region's MemoryUsage from its storages (indexed by their numbers), their frees
    ((position, number), in the order they happened), its number of ops and
    ``made_by(position)``: the op name and module path of the op at ``position``. Frees after
    the last op (position ``ops``) change no op's bytes: they are left out."""
    resident = 0
    change = [0] * ops  # per op: bytes it made, less bytes freed after the op before it
    for position, nbytes, _, _ in storages:
        if position == RESIDENT:
            resident += nbytes
        else:
            change[position] += nbytes
    freed_at = [ops] * len(storages)  # frees after the last op change no op's bytes
    for position, number in frees:
        if position < ops:
            freed_at[number] = position
            change[position] -= storages[number][1]
    # Live bytes after each op; the timeline has the ops that change them. The peak is reached
    # first where the running total first takes its highest value (an op that changes it).
    totals = list(accumulate(change, initial=resident))
    del totals[0]
    timeline = [(RESIDENT, resident), *zip(compress(range(ops), change), compress(totals, change))]
    peak, peak_index = resident, RESIDENT
    highest = max(totals, default=resident)
    if highest > resident:
        peak, peak_index = highest, totals.index(highest)
    alive = [number for number, s in enumerate(storages) if s[0] <= peak_index < freed_at[number]]
    return _usage(storages, alive, made_by, peak, resident, peak_index, timeline)


def _usage(storages: Sequence[tuple[int, int, Sequence[int], Any]], numbers: Sequence[int],
           made_by: Callable[[int], tuple[str, str]], peak: int, resident: int, peak_index: int,
           timeline: Sequence[tuple[int, int]]) -> MemoryUsage:
    """The MemoryUsage whose peak ``peak`` (after the op at ``peak_index``) the storages
    ``numbers`` make up: the largest of them listed, all of them grouped by origin."""
    alive = sorted((-storages[number][1], number) for number in numbers)
    # Storages of equal size are listed by what they are (op, module, shape, dtype), not by when
    # they were made: independent ops issued in another order list the same tensors in the same
    # order, and the same ones make the cut.
    candidates = alive[:AT_PEAK]
    if len(alive) > AT_PEAK:
        cut = candidates[-1][0]
        candidates += [entry for entry in alive[AT_PEAK:] if entry[0] == cut]
    listed = []
    for negative, number in candidates:
        position, _, shape, dtype = storages[number]
        op, path = (RESIDENT_OP, "") if position == RESIDENT else made_by(position)
        listed.append((negative, op, path, tuple(shape), str(dtype).replace("torch.", "")))
    listed.sort()
    at_peak = [_live_tensor(-negative, shape, dtype, op, path)
               for negative, op, path, shape, dtype in listed[:AT_PEAK]]
    return MemoryUsage(peak_bytes=peak, resident_bytes=resident, peak_index=peak_index,
                       at_peak=tuple(at_peak), timeline=tuple(timeline),
                       live=live_groups(storages, [number for _, number in alive], made_by))


def dataflow_usage(storages: Sequence[tuple[int, int, Sequence[int], Any]],
                   frees: Sequence[tuple[int, int]], order: Sequence[int],
                   touches: Callable[[int], Sequence[int]], names: Sequence[int],
                   made_by: Callable[[int], tuple[str, str]]) -> MemoryUsage:
    """Device memory of a region run as one compiled graph: a buffer lives from the first op
    that writes or reads it to the last one, in the graph's canonical order (``order``: the
    positions of its scheduled ops, as costmodel/graph.py orders them), whatever Python held.
    Naming two locals in a SwiGLU keeps ``up`` alive in Python until the function returns; in
    the graph it is freed after the product that reads it, as the compiler frees it. The order
    is the dataflow's, never the source's, so the peak does not depend on the order of
    independent ops, as the graph's time does not.

    The storages are those of ``memory_usage``; ``frees`` (Python's) only say which buffers the
    region's own code dropped: the others are its results (or resident), alive to its end.
    ``touches(position)``: the storages an op reads and writes, by the numbers ``names`` gives
    each storage (the graph's own names for them, dataflow.StorageIdentity's). A buffer no
    scheduled op touches (an allocation nobody used) counts only when it outlives the region,
    from its last op on. Positions in the result are the ops' (``peak_index``, ``timeline``)."""
    steps = len(order)
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    for rank, position in enumerate(order):
        for name in touches(position):
            first.setdefault(name, rank)
            last[name] = rank
    freed = {number for _, number in frees}
    change = [0] * (steps + 1)  # per step: bytes it makes, less bytes freed after the one before
    resident = 0
    spans: list[tuple[int, int]] = []  # (first step, last step) of each storage; -1: before the region
    for number, (position, nbytes, _, _) in enumerate(storages):
        name = names[number]
        start = -1 if position == RESIDENT else first.get(name)
        if start is None:  # no scheduled op made or read it
            start = steps - 1
            if number in freed or steps == 0:
                spans.append((0, -1))  # never alive
                continue
        end = last.get(name, start) if number in freed else steps - 1
        spans.append((start, end))
        if start < 0:
            resident += nbytes
        else:
            change[start] += nbytes
        if end < steps - 1:
            change[end + 1] -= nbytes
    totals = list(accumulate(change[:steps], initial=resident))[1:]
    timeline = [(RESIDENT, resident), *((order[k], totals[k]) for k in range(steps) if change[k])]
    peak, peak_step = resident, -1
    highest = max(totals, default=resident)
    if highest > resident:
        peak, peak_step = highest, totals.index(highest)
    alive = [number for number, (start, end) in enumerate(spans) if start <= peak_step <= end]
    return _usage(storages, alive, made_by, peak, resident,
                  order[peak_step] if peak_step >= 0 else RESIDENT, timeline)


def live_groups(storages: Sequence[tuple[int, int, Sequence[int], Any]], alive: Sequence[int],
                made_by: Callable[[int], tuple[str, str]]) -> tuple[LiveGroup, ...]:
    """The storages numbered ``alive`` grouped by origin (op and module that made each, shape,
    dtype): the most bytes first, ties by origin, so that the order never depends on the order
    the ops ran in. One pass; each dtype named once."""
    groups: dict[tuple[str, str, tuple[int, ...], str], list[int]] = {}  # origin -> [count, bytes]
    names: dict[Any, str] = {}
    resident = (RESIDENT_OP, "")
    for number in alive:
        position, nbytes, shape, dtype = storages[number]
        name = names.get(dtype)
        if name is None:
            name = names[dtype] = str(dtype).replace("torch.", "")
        origin = (*(resident if position == RESIDENT else made_by(position)), tuple(shape), name)
        group = groups.get(origin)
        if group is None:
            groups[origin] = [1, nbytes]
        else:
            group[0] += 1
            group[1] += nbytes
    # The most bytes first, ties by origin: origins are distinct, so no tie goes further.
    ordered = sorted([(-nbytes, origin, count) for origin, (count, nbytes) in groups.items()])
    return tuple([_live_group(op, path, shape, name, count, -negative)
                  for negative, (op, path, shape, name), count in ordered])


def concatenate(usages: Sequence[MemoryUsage], offsets: Sequence[int]) -> MemoryUsage:
    """One MemoryUsage of several regions run one after another, the k-th region's op indexes
    shifted by ``offsets[k]``: the highest of their peaks (its ops shifted; its tensors and
    live groups with it), the largest
    resident bytes, the timelines joined (a region's start, shifted onto the previous region's
    last op, is left out where that op has an entry of its own), SBUF's high-water mark the
    highest and the spilled bytes summed."""
    best = max(range(len(usages)), key=lambda k: (usages[k].peak_bytes, -k))
    timeline: list[tuple[int, int]] = []
    for usage, offset in zip(usages, offsets):
        for index, live in usage.timeline:
            index += offset
            if not timeline or (index > timeline[-1][0] and live != timeline[-1][1]):
                timeline.append((index, live))
    sbuf = [u.sbuf_peak_bytes for u in usages if u.sbuf_peak_bytes is not None]
    spilled = [u.spilled_bytes for u in usages if u.spilled_bytes is not None]
    peak = usages[best]
    return replace(peak, resident_bytes=max(u.resident_bytes for u in usages),
                   peak_index=peak.peak_index + offsets[best],  # -1: after the op before
                   at_peak=peak.at_peak,
                   timeline=tuple(timeline), sbuf_peak_bytes=max(sbuf) if sbuf else None,
                   spilled_bytes=sum(spilled) if spilled else None)
