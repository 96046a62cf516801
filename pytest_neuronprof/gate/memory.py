"""Device memory as baselines keep it and the gate judges it: a test's peak, what was resident
before it, and the largest tensors alive at the peak (``MemorySummary``); and why a peak moved
(``memory_reason``). Plain data, no torch, no I/O.

The simulated backend measures a region's memory from tensor lifetimes
(``costmodel/memory.py``); measured backends have none, and neither do entries recorded before
baseline schema version 5: such entries are never judged on memory.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..formatting import format_bytes
from ..safetext import clip
from .decode import Decoder

MAX_TENSORS_KEPT = 5  # the largest tensors at the peak an entry keeps: what a failure names
RESIDENT = "(resident)"  # the op named for a tensor alive before the region (weights, inputs)
MAX_TENSOR_CHARS = 60  # of one tensor's description in a reason


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
        shape = tuple(check.whole(f"{where}.shape[{i}]", n)
                      for i, n in enumerate(check.items(f"{where}.shape", data.get("shape"))))
        return cls(check.whole(f"{where}.bytes", data.get("bytes")), shape,
                   check.string(f"{where}.dtype", data.get("dtype")),
                   check.string(f"{where}.op", data.get("op")),
                   check.string(f"{where}.module", data.get("module")))


@dataclass(frozen=True)
class MemorySummary:
    """A test's device memory: the peak of live bytes (resident ones included), the resident
    bytes (alive before the region: weights, inputs, optimizer state), the largest tensors at
    the peak, and in graph execution SBUF's high-water mark and the bytes spilled to HBM."""

    peak_bytes: int
    resident_bytes: int
    at_peak: tuple[PeakTensor, ...] = ()
    sbuf_peak_bytes: int | None = None
    spilled_bytes: int | None = None

    @property
    def allocated_bytes(self) -> int:
        """What the region allocated on top of the resident bytes, at the peak."""
        return self.peak_bytes - self.resident_bytes

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"peak_bytes": self.peak_bytes, "resident_bytes": self.resident_bytes,
                                "at_peak": [t.to_json() for t in self.at_peak]}
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
        )


_KEYS = frozenset({"peak_bytes", "resident_bytes", "at_peak", "sbuf_peak_bytes", "spilled_bytes"})


def summarize_memory(usage: Any) -> MemorySummary | None:
    """A ProfileResult's ``memory`` (costmodel.memory.MemoryUsage, or None) as an entry keeps it."""
    if usage is None:
        return None
    tensors = tuple(PeakTensor(int(t.bytes), tuple(int(n) for n in t.shape), str(t.dtype), str(t.op),
                               str(t.module_path))
                    for t in usage.at_peak[:MAX_TENSORS_KEPT])
    return MemorySummary(int(usage.peak_bytes), int(usage.resident_bytes), tensors,
                         usage.sbuf_peak_bytes, usage.spilled_bytes)


def memory_reason(old: MemorySummary, new: MemorySummary) -> str:
    """Why the peak moved, in a line: which part grew (resident: weights, inputs and optimizer
    state; allocated: what the region made) and, for a higher peak, the largest tensor at the
    peak that the baseline did not have there, e.g. ``allocated +512 MiB, resident +0 B; new at the peak:
    aten::mm in mlp.up (float32[4096,32768], 512 MiB)``."""
    parts = []
    resident = new.resident_bytes - old.resident_bytes
    allocated = new.allocated_bytes - old.allocated_bytes
    for label, change in (("resident", resident), ("allocated", allocated)):
        if change:
            parts.append(f"{label} {'+' if change > 0 else '-'}{format_bytes(abs(change))}")
    text = ", ".join(parts) or "same bytes"
    if new.peak_bytes <= old.peak_bytes:  # a lower peak: what grew is not the question
        return text
    before = Counter(t.origin for t in old.at_peak)
    for tensor in new.at_peak:  # largest first: the first one the baseline lacks
        if before[tensor.origin] > 0:
            before[tensor.origin] -= 1
            continue
        if old.at_peak:  # an entry without tensors (none kept) cannot say what is new
            return f"{text}; new at the peak: {tensor.describe()}"
        break
    return text
