"""Why an op got slower (or faster): one short line from what both baseline entries keep.

``why(old, new)`` reads two ``OpSummary`` entries of the same op, before -> after, and says what
changed and which limit binds, for example

    flops x1.0, bytes x2.0, float32 (was bfloat16): TensorE at the fp32 rate
    12 -> 96 calls, each 8x smaller: fixed cost per call now dominates

Rules, in this order (the changes before the colon, the limit after it):
- calls: ``a -> b calls`` with the work of each call (flops, or bytes for ops without flops)
  ``each Nx smaller`` / ``each Nx larger`` / ``same work each``; the totals then go unsaid;
- same calls: ``flops xR`` and ``bytes xR`` when they changed by more than 5 %; the other one
  is shown as well (``flops x1.0``) when it is known on both sides, for contrast;
- ``float32 (was bfloat16)`` when the dtype changed; ``engine Vector (was Tensor)`` when the
  engine did; ``now costed by its formula (was the bytes fallback)`` and the reverse;
- the limit: ``TensorE at the fp32 rate`` when TensorE-bound and the dtype changed;
  ``fixed cost per call now dominates`` when it became fixed-cost-bound (``... still
  dominates`` when it was); ``now HBM-bound (was TensorE)`` when the bound changed otherwise;
  ``still HBM-bound`` when it did not; ``HBM-bound`` when the bound before is unknown;
- nothing it keeps changed: ``same work, slower schedule`` in graph execution (what overlaps it
  changed), ``same work, other shapes`` in eager execution, ``hotspot slower`` on measured
  backends (their evidence, p-value and rounds, follows in the finding), which name no limit:
  bounds are the cost model's.
In graph execution an op's bytes are its HBM traffic once fused epilogues and SBUF-resident
intermediates stay on chip (a fused copy moves none), not its work: there they are named ``HBM
bytes`` and never stand for the work of a call (``each Nx smaller``, ``same work each``); only
flops do (``work_bytes``).
A collective says first what it moved, its group, its bytes over the links and the algorithm
(``8 ranks, 56 MiB over NeuronLink (was 28 MiB), ring, float32 (was bfloat16): still
collective-bound``): its bytes are the links', so its HBM ``bytes xR`` go unsaid.
Unknown fields ("" in files recorded before schema version 4) are left out, never shown as "".
At most ``MAX_REASON_CHARS``: the least telling changes (the last ones) are dropped to fit.
"""

from __future__ import annotations

from ..formatting import format_bytes
from ..safetext import clip
from ..vocabulary import BOUND_FIXED, BOUND_NONE, BOUND_TENSOR, GRAPH
from .summary import OpSummary

CHANGED = 0.05  # a ratio further than this from 1 is a change (rounding and tiling noise is less)
MAX_REASON_CHARS = 100  # one line in a table cell; aim is 70
_FREE_ENGINE = "-"
# Short names of the dtypes TensorE has a rate for (the hardware profiles' fp32/bf16/fp8 rates).
_RATE_NAMES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16",
               "float8_e4m3fn": "fp8", "float8_e5m2": "fp8"}


def why(old: OpSummary, new: OpSummary, *, execution: str = "", measured: bool = False,
        note: str = "") -> str:
    """What changed between two entries of one op and which limit binds now (rules above).
    ``execution``: the profile's ("eager", "graph"); ``measured``: a measured backend's
    summaries; ``note`` follows the first change ("12 -> 96 calls, each 8x smaller (a lost
    fusion?)")."""
    if new.count == 0:
        return "no longer called"
    if old.count == 0:
        return "newly called"
    slower = new.device_time_us > old.device_time_us
    parts = _changes(old, new, execution)
    limit = "" if measured else _limit(old, new)  # bounds are the cost model's: simulated only
    if new.collective:
        parts = [_moved(old, new), *(p for p in parts if not p.startswith(("bytes x", "HBM bytes x", "flops x")))]
    if not parts:
        if measured:
            parts = ["hotspot slower" if slower else "hotspot faster"]
        elif execution == GRAPH:
            parts = [f"same work, {'slower' if slower else 'faster'} schedule"]
        else:
            parts = ["same work, other shapes"]
    if note:
        parts[0] += f" {note}"
    while True:
        text = ", ".join(parts) + (f": {limit}" if limit else "")
        if len(text) <= MAX_REASON_CHARS or len(parts) == 1:
            break
        parts = parts[:-1]
    if len(text) > MAX_REASON_CHARS:
        # one part too long: a dtype from a hostile file. clip's note "… (9,999,999 characters)"
        # takes at most 24 characters for anything a baseline file holds.
        text = clip(text, MAX_REASON_CHARS - 24)
    return text


def work_bytes(execution: str) -> bool:
    """Whether an op's bytes measure its work in ``execution``: in eager execution every op
    reads and writes HBM; in graph execution they are what is left of that once on-chip
    residency and fusion take their part (a fused copy moves none), so they say nothing of
    how much work a call does."""
    return execution != GRAPH


def _changes(old: OpSummary, new: OpSummary, execution: str = "") -> list[str]:
    parts: list[str] = []
    label = "bytes" if work_bytes(execution) else "HBM bytes"
    if new.count != old.count:
        parts.append(f"{old.count} -> {new.count} calls{_per_call(old, new, execution)}")
    else:
        flops, nbytes = _changed(old.flops, new.flops), _changed(old.bytes, new.bytes)
        if flops or (nbytes and old.flops and new.flops):
            parts.append(f"flops {_ratio(old.flops, new.flops)}")
        if nbytes or (flops and old.bytes and new.bytes):
            parts.append(f"{label} {_ratio(old.bytes, new.bytes)}")
    if old.dtype and new.dtype and old.dtype != new.dtype:
        parts.append(f"{new.dtype} (was {old.dtype})")
    if (old.engine and new.engine and old.engine != new.engine
            and _FREE_ENGINE not in (old.engine, new.engine)):
        parts.append(f"engine {new.engine} (was {old.engine})")
    if old.uncosted != new.uncosted:
        parts.append("now the bytes fallback (was costed by its formula)" if new.uncosted
                     else "now costed by its formula (was the bytes fallback)")
    return parts


def _moved(old: OpSummary, new: OpSummary) -> str:
    """What a collective moved, against before where that changed: ``8 ranks, 56 MiB over
    NeuronLink (was 28 MiB), ring (was rdh)``."""
    known = old.collective  # an entry of schema 7 or later: its ranks, bytes and algorithm
    ranks = f"{new.ranks} rank{'s' if new.ranks != 1 else ''}"
    if known and old.ranks != new.ranks:
        ranks += f" (was {old.ranks})"
    if "+" in new.algorithm:
        links = "over NeuronLink and the network between instances"
    else:
        links = "over NeuronLink" if new.algorithm else "over the links"
    moved = f"{format_bytes(new.link_bytes)} {links}"
    if known and old.link_bytes != new.link_bytes:
        moved += f" (was {format_bytes(old.link_bytes)})"
    text = f"{ranks}, {moved}"
    if new.algorithm:
        text += f", {new.algorithm}"
        if known and old.algorithm and old.algorithm != new.algorithm:
            text += f" (was {old.algorithm})"
    return text


def _limit(old: OpSummary, new: OpSummary) -> str:
    """Which limit binds now, against before where that is known."""
    bound, before = new.bound, old.bound
    if not bound or bound == BOUND_NONE:  # unknown, or free: nothing binds
        return ""
    if (bound == BOUND_TENSOR and new.dtype and old.dtype and new.dtype != old.dtype
            and new.dtype in _RATE_NAMES):
        return f"TensorE at the {_RATE_NAMES[new.dtype]} rate"
    if not before:
        return _bound_word(bound)
    if bound == before:
        return ("fixed cost per call still dominates" if bound == BOUND_FIXED
                else f"still {_bound_word(bound)}")
    if bound == BOUND_FIXED:
        return "fixed cost per call now dominates"
    return f"now {_bound_word(bound)} (was {_bound_word(before, bare=True)})"


def _bound_word(bound: str, bare: bool = False) -> str:
    """``HBM-bound``; ``HBM`` when ``bare`` (in "(was ...)")."""
    if bound == BOUND_NONE:  # only ever the bound before: free ops have no limit to name
        return "free"
    if bound == BOUND_FIXED:
        return "fixed cost" if bare else "fixed-cost-bound"  # "fixed-cost-bound": old unknown
    return bound if bare else f"{bound}-bound"


def _changed(old: int, new: int) -> bool:
    if old == 0 or new == 0:
        return old != new
    return abs(new / old - 1.0) > CHANGED


def _ratio(old: int, new: int) -> str:
    """``x2.0``, ``x0.5``; ``0 -> 1.2e+06`` when the old side was 0."""
    if old == 0:
        return f"0 -> {new:.2g}"
    return f"x{_number(new / old)}"


def _number(value: float) -> str:
    """One decimal where that says it (x2.0, x0.5), two digits below 0.1, none from 10."""
    if value >= 10:
        return f"{value:.0f}"
    if value >= 0.1:
        return f"{value:.1f}"
    return f"{value:.2g}"


def _per_call(old: OpSummary, new: OpSummary, execution: str = "") -> str:
    """", each 8x smaller" by flops per call (bytes for ops without flops, where bytes are work:
    ``work_bytes``); "" when unknown."""
    if old.flops and new.flops:
        before, after = old.flops / old.count, new.flops / new.count
    elif old.bytes and new.bytes and work_bytes(execution):
        before, after = old.bytes / old.count, new.bytes / new.count
    else:
        return ""
    factor = after / before
    if abs(factor - 1.0) <= CHANGED:
        return ", same work each"
    if factor < 1.0:
        return f", each {_times(1.0 / factor)}x smaller"
    return f", each {_times(factor)}x larger"


def _times(value: float) -> str:
    """8 for 8.0, 2.5, 12."""
    return f"{value:.2g}" if value < 10 else f"{value:.0f}"
