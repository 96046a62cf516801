"""Device memory as baselines keep it and the gate judges it: a test's peak, what was resident
before it, and what is live at the peak grouped by what made it (``MemorySummary``); why a peak
moved, naming what is new or larger at the peak (``memory_reason``, ``peak_changes``); and what
would make a test that does not fit fit (``fit_suggestions``). Plain data, no torch, no I/O
(``device_memory`` reads a hardware profile).

What is live at the peak is kept as groups by origin (``PeakGroup``: the op and module that made
the tensors, their shape and dtype, with their count and bytes), the ``MAX_GROUPS_KEPT`` largest
(baseline schema 6, report version 5): 32 layers' weights of one shape are one group, and a
change that keeps two more K/V tensors alive at the peak shows as a group that is new or larger,
however small beside the weights. Entries of schema 5 (report version 4) kept the five largest
tensors instead (``PeakTensor``, ``at_peak``): they are still read, and compared as well as five
tensors allow (``baseline_groups``).

The simulated backend measures a region's memory from tensor lifetimes
(``costmodel/memory.py``); measured backends have none, and neither do entries recorded before
baseline schema version 5: such entries are never judged on memory.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..formatting import format_bytes
from ..safetext import clip
from .decode import Decoder

MAX_TENSORS_KEPT = 5  # the largest tensors at the peak an entry of schema 5 kept
MAX_GROUPS_KEPT = 50  # the groups of what is live at the peak an entry keeps (schema 6), largest first
MAX_GROUPS_IN_REASON = 2  # named in a finding's reason; the failure's table lists more
RESIDENT = "(resident)"  # the op named for a tensor alive before the region (weights, inputs)
MAX_TENSOR_CHARS = 60  # of one tensor's description in a reason
MAX_SHAPE_CHARS = 40  # of a shape in a reason ("[1,32,2048,128]")

Origin = tuple[str, str, tuple[int, ...], str]  # (op, module, shape, dtype): what made a tensor


@dataclass(frozen=True)
class PeakTensor:
    """One storage alive at the peak: its bytes, shape, dtype, the op that made it (``RESIDENT``
    for one alive before the region) and the module that ran that op ("" outside modules)."""

    bytes: int
    shape: tuple[int, ...]
    dtype: str
    op: str
    module: str

    @property
    def origin(self) -> tuple[str, str, tuple[int, ...], str]:
        """What identifies a tensor across runs: who made it, and its shape and dtype."""
        return (self.op, self.module, self.shape, self.dtype)

    def describe(self) -> str:
        """``aten::mm in mlp.up (bfloat16[8,4096], 64 KiB)``."""
        where = f" in {self.module}" if self.module else ""
        shape = ",".join(map(str, self.shape))
        return clip(f"{self.op}{where}", MAX_TENSOR_CHARS) + f" ({self.dtype}[{shape}], {format_bytes(self.bytes)})"

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "dtype": self.dtype, "module": self.module, "op": self.op,
                "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Any, check: Decoder, where: str) -> "PeakTensor":
        check.mapping(where, data)
        check.known_keys(where, data, ("bytes", "dtype", "module", "op", "shape"))
        return cls(check.whole(f"{where}.bytes", data.get("bytes")), _shape(check, where, data),
                   check.string(f"{where}.dtype", data.get("dtype")),
                   check.string(f"{where}.op", data.get("op")),
                   check.string(f"{where}.module", data.get("module")))


def _shape(check: Decoder, where: str, data: dict) -> tuple[int, ...]:
    return tuple(check.whole(f"{where}.shape[{i}]", n)
                 for i, n in enumerate(check.items(f"{where}.shape", data.get("shape"))))


def shape_text(shape: Sequence[int], dtype: str = "") -> str:
    """``bfloat16[1,32,2048,128]``; ``[4096]`` without a dtype; at most MAX_SHAPE_CHARS of
    the shape (a file may hold any)."""
    return f"{dtype}[{clip(','.join(map(str, shape)), MAX_SHAPE_CHARS)}]"


@dataclass(frozen=True)
class PeakGroup:
    """The tensors alive at the peak that one origin made: ``count`` storages of ``shape`` and
    ``dtype`` made by ``op`` (``RESIDENT`` for ones alive before the region) in ``module`` ("" outside
    modules, and for resident ones), ``bytes`` in all."""

    op: str
    module: str
    shape: tuple[int, ...]
    dtype: str
    count: int
    bytes: int

    @property
    def origin(self) -> Origin:
        return (self.op, self.module, self.shape, self.dtype)

    def describe(self, count: int | None = None, nbytes: int | None = None) -> str:
        """``2 x bfloat16[1,32,2048,128] from aten::cat in self_attn, 32 MiB`` (the count
        left out when it is 1); ``count`` and ``nbytes`` say another count and size of it (what
        was added)."""
        count = self.count if count is None else count
        nbytes = self.bytes if nbytes is None else nbytes
        where = f" in {self.module}" if self.module else ""
        made = "resident" if self.op == RESIDENT else f"from {clip(self.op + where, MAX_TENSOR_CHARS)}"
        times = f"{count} x " if count != 1 else ""
        return f"{times}{shape_text(self.shape, self.dtype)} {made}, {format_bytes(nbytes)}"

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "count": self.count, "dtype": self.dtype,
                "module": self.module, "op": self.op, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Any, check: Decoder, where: str) -> "PeakGroup":
        check.mapping(where, data)
        check.known_keys(where, data, ("bytes", "count", "dtype", "module", "op", "shape"))
        count = check.whole(f"{where}.count", data.get("count"))
        if count < 1:
            raise check.fail(f"{where}.count is {count}; a group has at least one tensor")
        return cls(check.string(f"{where}.op", data.get("op")),
                   check.string(f"{where}.module", data.get("module")),
                   _shape(check, where, data), check.string(f"{where}.dtype", data.get("dtype")),
                   count, check.whole(f"{where}.bytes", data.get("bytes")))

    @classmethod
    def of_tensors(cls, tensors: Iterable[PeakTensor]) -> tuple["PeakGroup", ...]:
        """Schema-5 tensors as groups (equal origins counted together), the most bytes first."""
        groups: dict[Origin, list[int]] = {}
        for t in tensors:
            group = groups.setdefault(t.origin, [0, 0])
            group[0] += 1
            group[1] += t.bytes
        return tuple(cls(*origin, count, nbytes) for origin, (count, nbytes)
                     in sorted(groups.items(), key=lambda item: (-item[1][1], item[0])))


@dataclass(frozen=True)
class MemorySummary:
    """A test's device memory: the peak of live bytes (resident ones included), the resident
    bytes (alive before the region: weights, inputs, optimizer state), what is live at the peak
    by origin (``live``, the MAX_GROUPS_KEPT largest groups; an entry of schema 5 has the five
    largest tensors in ``at_peak`` instead), and in graph execution SBUF's high-water mark and
    the bytes spilled to HBM."""

    peak_bytes: int
    resident_bytes: int
    at_peak: tuple[PeakTensor, ...] = ()  # schema 5 (report version 4): the 5 largest tensors
    sbuf_peak_bytes: int | None = None
    spilled_bytes: int | None = None
    live: tuple[PeakGroup, ...] = ()  # schema 6 (report version 5): groups by origin

    @property
    def allocated_bytes(self) -> int:
        """What the region allocated on top of the resident bytes, at the peak."""
        return self.peak_bytes - self.resident_bytes

    def groups(self) -> tuple[PeakGroup, ...]:
        """What is live at the peak by origin, the most bytes first: ``live``, or a schema-5
        entry's tensors as groups."""
        return self.live if self.live or not self.at_peak else PeakGroup.of_tensors(self.at_peak)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"peak_bytes": self.peak_bytes, "resident_bytes": self.resident_bytes}
        if self.at_peak:  # an entry read from a file of schema 5 keeps what it had
            data["at_peak"] = [t.to_json() for t in self.at_peak]
        if self.live or not self.at_peak:
            data["live"] = [g.to_json() for g in self.live]
        if self.sbuf_peak_bytes is not None:
            data["sbuf_peak_bytes"] = self.sbuf_peak_bytes
        if self.spilled_bytes is not None:
            data["spilled_bytes"] = self.spilled_bytes
        return data

    @classmethod
    def from_json(cls, data: Any, check: Decoder, where: str) -> "MemorySummary":
        check.mapping(where, data)
        check.known_keys(where, data, _KEYS)
        tensors = check.items(f"{where}.at_peak", data.get("at_peak", []))
        groups = check.items(f"{where}.live", data.get("live", []))
        if len(groups) > MAX_GROUPS_KEPT:
            raise check.fail(f"{where}.live has {len(groups)} groups; an entry keeps at most "
                             f"{MAX_GROUPS_KEPT}")
        peak = check.whole(f"{where}.peak_bytes", data.get("peak_bytes"))
        resident = check.whole(f"{where}.resident_bytes", data.get("resident_bytes"))
        if resident > peak:
            raise check.fail(f"{where}.resident_bytes ({resident}) is larger than its peak_bytes "
                             f"({peak}); the peak includes the resident bytes")
        return cls(
            peak, resident,
            tuple(PeakTensor.from_json(t, check, f"{where}.at_peak[{i}]") for i, t in enumerate(tensors)),
            check.whole(f"{where}.sbuf_peak_bytes", data["sbuf_peak_bytes"]) if "sbuf_peak_bytes" in data else None,
            check.whole(f"{where}.spilled_bytes", data["spilled_bytes"]) if "spilled_bytes" in data else None,
            tuple(PeakGroup.from_json(g, check, f"{where}.live[{i}]") for i, g in enumerate(groups)),
        )


_KEYS = frozenset({"peak_bytes", "resident_bytes", "at_peak", "sbuf_peak_bytes", "spilled_bytes",
                   "live"})
LIVE_KEY = "live"  # what is live at the peak by origin: baseline.py refuses it in older files
LIVE_SCHEMA_VERSION = 6  # the first baseline schema with it (report version 5)


def summarize_memory(usage: Any) -> MemorySummary | None:
    """A ProfileResult's ``memory`` (costmodel.memory.MemoryUsage, or None) as an entry keeps it:
    the MAX_GROUPS_KEPT largest groups of what is live at the peak."""
    if usage is None:
        return None
    groups = tuple(PeakGroup(str(g.op), str(g.module_path), tuple(int(n) for n in g.shape),
                             str(g.dtype), int(g.count), int(g.bytes))
                   for g in getattr(usage, "live", ())[:MAX_GROUPS_KEPT])
    return MemorySummary(int(usage.peak_bytes), int(usage.resident_bytes), (),
                         usage.sbuf_peak_bytes, usage.spilled_bytes, groups)


# --- what changed at the peak ------------------------------------------------------------------

@dataclass(frozen=True)
class Known:
    """What a baseline says of the groups at its peak: their (count, bytes) by origin, and
    whether that is all of them (``complete``); where it is not (the largest groups or tensors
    only), an origin absent from it may have been there below ``floor`` bytes per tensor."""

    groups: dict[Origin, tuple[int, int]]
    complete: bool
    floor: float  # bytes per tensor below which an absent origin is not known to be absent
    # Schema 5: a resident tensor's shape was the view the capture first met it through (a
    # weight's transpose), so resident tensors are not matched (``before`` says None).
    residents_known: bool = True

    def before(self, group: PeakGroup) -> tuple[int, int] | None:
        """(count, bytes) of ``group``'s origin at the baseline's peak; (0, 0) when it was not
        there; None when that is not known."""
        if group.op == RESIDENT and not self.residents_known:
            return None
        found = self.groups.get(group.origin)
        if found is not None:
            return found
        if self.complete or group.bytes / group.count > self.floor:
            return (0, 0)
        return None


def baseline_groups(old: MemorySummary) -> Known | None:
    """What ``old`` says of its peak by origin; None when it kept nothing of it (an entry
    recorded with no tensor listed). A schema-5 entry kept its five largest tensors: an origin
    absent from them was not at its peak if its tensors are larger than the smallest kept; its
    resident tensors' shapes may be views' (``Known.residents_known``)."""
    if old.live:
        groups = {g.origin: (g.count, g.bytes) for g in old.live}
        complete = len(old.live) < MAX_GROUPS_KEPT
        floor = min(g.bytes / g.count for g in old.live)
        return Known(groups, complete, 0.0 if complete else floor)
    if old.at_peak:
        merged = PeakGroup.of_tensors(old.at_peak)
        complete = len(old.at_peak) < MAX_TENSORS_KEPT
        floor = min(t.bytes for t in old.at_peak)
        return Known({g.origin: (g.count, g.bytes) for g in merged}, complete,
                     0.0 if complete else floor, residents_known=False)
    return None


@dataclass(frozen=True)
class GroupChange:
    """A group live at the current peak against the baseline's: ``before`` (count, bytes) at
    its peak ((0, 0): not there), None when the baseline does not say."""

    group: PeakGroup
    before: tuple[int, int] | None

    @property
    def added(self) -> int:
        """Bytes more than at the baseline's peak (0 when unknown or not more)."""
        return max(self.group.bytes - self.before[1], 0) if self.before is not None else 0

    @property
    def new(self) -> bool:
        return self.before == (0, 0)

    def cell(self) -> str:
        """The "at baseline peak" cell: "yes" (the same), "new", "was 2" (another count),
        "was 16 MiB" (the same count, other bytes), "-" (not known)."""
        if self.before is None:
            return "-"
        count, nbytes = self.before
        if count == 0:
            return "new"
        if count != self.group.count:
            return f"was {count}"
        return "yes" if nbytes == self.group.bytes else f"was {format_bytes(nbytes)}"

    def describe(self) -> str:
        """A new group as ``PeakGroup.describe`` says it; a larger one as what was added, ``1 x
        float32[4096,1024] from aten::addmm in 0, 16 MiB (3 now)``."""
        if self.before is None or self.new:
            return self.group.describe()
        more = self.group.count - self.before[0]
        return f"{self.group.describe(max(more, 1), self.added)} ({self.group.count} now)"


def peak_changes(old: MemorySummary | None, new: MemorySummary) -> list[GroupChange]:
    """Each group live at ``new``'s peak against ``old``'s (None: no comparable baseline): those
    new or larger at the peak first, the most bytes added first, then the others, the most
    bytes first (ties by origin)."""
    known = baseline_groups(old) if old is not None else None
    changes = [GroupChange(g, known.before(g) if known is not None else None) for g in new.groups()]
    return sorted(changes, key=lambda c: (-c.added, -c.group.bytes, c.group.origin))


MAX_MODULES_NAMED = 2  # of the modules of a merged group, in a reason


@dataclass(frozen=True)
class MergedChange:
    """Groups at the peak that differ only in their module (the same op, shape and dtype, and
    the same standing against the baseline's peak: new, larger, the same): 32 layers' caches
    are one line, with their total, not one layer's."""

    changes: tuple[GroupChange, ...]

    @property
    def first(self) -> GroupChange:
        return self.changes[0]

    @property
    def added(self) -> int:
        return sum(c.added for c in self.changes)

    @property
    def count(self) -> int:
        return sum(c.group.count for c in self.changes)

    @property
    def bytes(self) -> int:
        return sum(c.group.bytes for c in self.changes)

    @property
    def new(self) -> bool:
        return self.first.new

    def modules(self, limit: int = MAX_MODULES_NAMED) -> str:
        """``model.layers.0, model.layers.1, +30 more`` ("" outside modules)."""
        paths = [c.group.module for c in self.changes if c.group.module]
        shown = ", ".join(clip(path, MAX_TENSOR_CHARS) for path in paths[:limit])
        return shown + (f", +{len(paths) - limit} more" if len(paths) > limit else "")

    def describe(self) -> str:
        """One group as ``GroupChange.describe`` says it; several as their total: ``64 x
        bfloat16[1,32,8193,128] from aten::cat in 32 modules (model.layers.0.self_attn,
        model.layers.1.self_attn, +30 more), 3 GiB``."""
        if len(self.changes) == 1:
            return self.first.describe()
        group = self.first.group
        where = f" in {len(self.changes)} modules ({self.modules()})"
        made = "resident" if group.op == RESIDENT else f"from {clip(group.op, MAX_TENSOR_CHARS)}{where}"
        if self.first.before is None or self.new:
            return f"{self.count} x {shape_text(group.shape, group.dtype)} {made}, {format_bytes(self.bytes)}"
        more = sum(c.group.count - (c.before or (0, 0))[0] for c in self.changes)
        return (f"{max(more, 1)} x {shape_text(group.shape, group.dtype)} {made}, "
                f"{format_bytes(self.added)} ({self.count} now)")


def merged_changes(changes: Sequence[GroupChange]) -> list[MergedChange]:
    """``changes`` with the groups that differ only in their module merged (``MergedChange``),
    as ``peak_changes`` orders groups: the most bytes added first, then the most bytes."""
    merged: dict[tuple[Any, ...], list[GroupChange]] = {}
    for c in changes:
        g = c.group
        merged.setdefault((g.op, g.shape, g.dtype, c.cell()), []).append(c)
    found = [MergedChange(tuple(members)) for members in merged.values()]
    return sorted(found, key=lambda m: (-m.added, -m.bytes, m.first.group.origin))


def memory_reason(old: MemorySummary, new: MemorySummary) -> str:
    """Why the peak moved, in a line: which part grew (resident: weights, inputs and optimizer
    state; allocated: what the region made) and, for a higher peak, what is new or larger at the
    peak by origin, the most bytes added first (MAX_GROUPS_IN_REASON of them; the failure's
    table lists them all), e.g. ``allocated +32 MiB; new at the peak: bfloat16[1,32,2048,128]
    from aten::add in self_attn, 16 MiB; bfloat16[2048,4096] from aten::mm in
    self_attn.v_proj, 16 MiB``."""
    parts = []
    resident = new.resident_bytes - old.resident_bytes
    allocated = new.allocated_bytes - old.allocated_bytes
    for label, change in (("resident", resident), ("allocated", allocated)):
        if change:
            parts.append(f"{label} {'+' if change > 0 else '-'}{format_bytes(abs(change))}")
    text = ", ".join(parts) or "same bytes"
    if new.peak_bytes <= old.peak_bytes:  # a lower peak: what grew is not the question
        return text
    # the groups that differ only in their module as one, with their total (32 layers' caches)
    grown = merged_changes([c for c in peak_changes(old, new) if c.added > 0])
    named = grown[:MAX_GROUPS_IN_REASON]
    for label, new_ones in (("new at the peak", True), ("more at the peak", False)):
        said = [c.describe() for c in named if c.new == new_ones]
        if said:
            text += f"; {label}: " + "; ".join(said)
    left = grown[MAX_GROUPS_IN_REASON:]
    if left:
        text += f"; {len(left)} more, +{format_bytes(sum(c.added for c in left))}"
    return text


# --- does it fit? ------------------------------------------------------------------------------

# Bytes per element of the dtypes bfloat16 (2 bytes) could replace (``to(torch.bfloat16)``).
_WIDE_DTYPES = {"float32": 4, "float64": 8}


def device_memory(hardware: str) -> tuple[int, str] | None:
    """(bytes, label) of one core's device memory on the hardware profile ``hardware``,
    e.g. ``(25769803776, "24 GiB per NeuronCore")``; None for a profile this version does not
    know. What a test must fit in unless its marker sets ``memory_limit``."""
    from ..costmodel.profiles import available_hardware, load_hardware

    if hardware not in available_hardware():
        return None
    profile = load_hardware(hardware)
    per = "per NeuronCore" if "NeuronCore" in profile.description else "per device"
    return profile.hbm_bytes_per_core, f"{format_bytes(profile.hbm_bytes_per_core)} {per}"


def limit_at_least(peak: int) -> str:
    """A memory_limit a peak fits in, in whole GiB (whole MiB under 1 GiB): ``30 GiB``."""
    unit, size = ("GiB", 2**30) if peak >= 2**30 else ("MiB", 2**20)
    return f"{max(math.ceil(peak / size), 1)} {unit}"


@dataclass(frozen=True)
class FitSuggestions:
    """What would make a test's peak fit its limit (``fit_suggestions``)."""

    narrow_peak: int | None  # its peak about, with its float32 (float64) tensors at the peak in bfloat16
    wide_bytes: int  # the bytes of those tensors at the peak (of the groups kept)
    chips: tuple[tuple[str, str], ...]  # (profile, "36 GiB per NeuronCore") with room for the peak
    limit: str  # a memory_limit of at least the peak ("30 GiB")
    # With the test's group of ranks known (its collectives'): (the tensor-parallel degree at
    # which each core's share of the peak fits, that share about), or (0, the share at the most
    # ranks one instance holds) when none within an instance does; None: no group known.
    tensor_parallel: tuple[int, int] | None = None


def tensor_parallel_fit(peak: int, ranks: int, limit: int, most: int) -> tuple[int, int]:
    """(the smallest tensor-parallel degree of the form ``ranks`` x 2^k, or ``most`` itself,
    at most ``most`` (the ranks one instance holds; 0: 2^20), at which each core's share of
    ``peak``, measured at ``ranks``, is at most ``limit``; that share), assuming the tensors at
    the peak shard with the degree (weights and a tensor-parallel layer's activations do;
    replicated activations do not: an estimate from below). (0, the share at the most ranks)
    when none fits."""
    ranks = max(ranks, 1)
    whole, most = peak * ranks, most or 1 << 20
    degrees = [ranks << k for k in range(1, 64) if ranks << k <= most]
    if most > ranks and most % ranks == 0 and most not in degrees:
        degrees.append(most)
    for degree in sorted(degrees):
        if -(-whole // degree) <= limit:
            return degree, -(-whole // degree)
    return 0, -(-whole // max(degrees, default=ranks))


def fit_suggestions(memory: MemorySummary, hardware: str, limit: int,
                    ranks: int = 0) -> FitSuggestions:
    """What would fit a peak above ``limit`` on ``hardware``: the same tensors in bfloat16
    (estimated from the groups live at the peak: float32 halved, float64 quartered), the
    hardware profiles whose memory per core holds the peak (only where the limit is
    ``hardware``'s own memory: a marker's memory_limit does not move with the chip), a
    memory_limit of at least the peak, and with the test's group of ``ranks`` known (0: not),
    the tensor-parallel degree at which each core's share would fit (``tensor_parallel_fit``,
    within one of ``hardware``'s instances)."""
    from ..costmodel.profiles import available_hardware, load_hardware

    wide = sum(g.bytes for g in memory.groups() if g.dtype in _WIDE_DTYPES)
    saved = sum(g.bytes - g.bytes * 2 // _WIDE_DTYPES[g.dtype] for g in memory.groups()
                if g.dtype in _WIDE_DTYPES)
    chips: list[tuple[int, str, str]] = []
    own = device_memory(hardware)
    if own is not None and own[0] == limit:
        for name in available_hardware():
            found = device_memory(name)
            if name != hardware and found is not None and found[0] >= memory.peak_bytes:
                chips.append((found[0], name, found[1]))
    parallel = None
    if ranks >= 1 and hardware in available_hardware():
        parallel = tensor_parallel_fit(memory.peak_bytes, ranks, limit,
                                       load_hardware(hardware).collectives.ranks_per_node)
    return FitSuggestions(memory.peak_bytes - saved if wide else None, wide,
                          tuple((name, label) for _, name, label in sorted(chips)),
                          limit_at_least(memory.peak_bytes), parallel)
