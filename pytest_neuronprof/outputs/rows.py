"""The rows of the two tables that `neuronprof compare` prints and the Markdown summaries show:
per-test totals and per-op changes; and what every output says of a test's device memory (its
peak, the largest tensors at it). One builder each; each renderer says how a verdict reads in
a cell (upper case in text, bold in Markdown) and lays the rows out (``terminal.text_table``,
``markdown.table``), escaping the cells its own way."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Iterable

from ..formatting import format_bytes, format_delta, format_us, relative_change
from ..gate.compare import MEMORY_KINDS, NOT_COMPARED
from ..gate.memory import MemorySummary
from ..gate.outcome import TestOutcome, op_changes

TOTALS_HEADERS = ["test", "variant", "baseline", "current", "delta", "verdict"]
OP_HEADERS = ["op", "engine", "module", "old", "new", "delta", "calls", "gate"]

Cell = Callable[[str], object]  # a verdict (or a node id) as one renderer writes it in a cell


def totals_rows(outcomes: Iterable[TestOutcome], verdict: Cell, test: Cell = str,
                memory: bool = False) -> list[list[object]]:
    """A row per test: its total device time before and after, with ``memory`` its peak
    (``peak_cell``), and the gate's verdict."""
    return [[test(o.nodeid), o.current.variant,
             format_us(o.baseline.total_device_time_us) if o.baseline else "-",
             format_us(o.current.total_device_time_us), format_delta(o.delta),
             *([peak_cell(o)] if memory else []), verdict(o.verdict.status)]
            for o in outcomes]


def totals_headers(memory: bool) -> list[str]:
    """TOTALS_HEADERS, with a peak column before the verdict when ``memory``."""
    return [*TOTALS_HEADERS[:-1], *([PEAK_HEADER] if memory else []), TOTALS_HEADERS[-1]]


ACCEPTED_HEADERS = ["op", "old", "new", "delta", "what changed", "reason"]
NO_REASON = "no reason given"


def accepted_reason(outcome: TestOutcome) -> str:
    """The reason a pull request gave for its changes of a test's entry, or NO_REASON."""
    return outcome.verdict.accepted_reason or NO_REASON


def accepted_rows(outcome: TestOutcome, reason: bool = True) -> list[list[str]]:
    """A row per change the pull request made to a test's entry (gated against a git ref):
    base -> its own entry, per op, with the reason it gave (``reason``: as a column, for
    tables of several tests; ACCEPTED_HEADERS[:-1] without)."""
    given = [accepted_reason(outcome)] if reason else []
    rows: list[list[str]] = []
    for finding in outcome.verdict.accepted:
        op, _, old, new, delta, _, why = finding.cells()
        rows.append([op, old, new, delta, why, *given])
    return rows


def op_rows(outcome: TestOutcome, verdict: Cell) -> list[list[object]]:
    """A row per op whose time or calls changed, largest change first; ``verdict`` writes what
    the gate flagged it ("regression", "improved", "allowed"; "" when nothing)."""
    return [[c.op, c.engine, c.module or "-", format_us(c.old_us) if c.old_count else "-",
             format_us(c.new_us) if c.new_count else "-", format_delta(c.delta), c.calls,
             verdict(c.flag)]
            for c in op_changes(outcome)]


# --- device memory ----------------------------------------------------------------------------

PEAK_HEADER = "peak"  # the column of a test's peak device memory in the totals tables
TENSOR_HEADERS = ["op", "module", "shape", "dtype", "bytes", "at baseline peak"]
TENSORS_TITLE = "largest tensors at the peak"


def has_memory(outcomes: Iterable[TestOutcome]) -> bool:
    """Some outcome measured its device memory (the simulated backend): the tables then have a
    peak column; measured backends, which never do, keep their layout."""
    return any(o.current.memory is not None for o in outcomes)


def peak_delta(outcome: TestOutcome) -> float | None:
    """Relative change of the peak, where both sides measured it and the test was compared
    (as ``TestOutcome.delta`` for the time); None otherwise."""
    baseline, new = outcome.baseline, outcome.current.memory
    if baseline is None or outcome.verdict.status in NOT_COMPARED:
        return None
    old = baseline.memory
    if old is None or new is None or not old.peak_bytes:
        return None
    return relative_change(old.peak_bytes, new.peak_bytes)


def peak_cell(outcome: TestOutcome) -> str:
    """``1.2 GiB (+25.0%)``: the peak, and its change where there is one; "-" when unknown."""
    memory = outcome.current.memory
    if memory is None:
        return "-"
    delta = peak_delta(outcome)
    return format_bytes(memory.peak_bytes) + (f" ({format_delta(delta)})" if delta is not None else "")


def memory_line(memory: MemorySummary) -> str:
    """``peak 1.2 GiB (resident 512 MiB, allocated 768 MiB); SBUF peak 20 MiB, spilled 3 MiB``
    (SBUF in graph execution only)."""
    line = (f"peak {format_bytes(memory.peak_bytes)} (resident {format_bytes(memory.resident_bytes)}, "
            f"allocated {format_bytes(memory.allocated_bytes)})")
    sbuf = [f"{label} {format_bytes(value)}" for label, value in
            (("SBUF peak", memory.sbuf_peak_bytes), ("spilled", memory.spilled_bytes)) if value is not None]
    return line + ("; " + ", ".join(sbuf) if sbuf else "")


def memory_finding(outcome: TestOutcome) -> bool:
    """The gate flagged the test's device memory: its peak grew, or it does not fit."""
    return any(f.kind in MEMORY_KINDS for f in outcome.verdict.regressions)


def tensor_rows(outcome: TestOutcome) -> list[list[object]]:
    """A row per tensor alive at the peak, largest first: the op and module that made it, its
    shape, dtype and bytes, and whether the baseline's peak had it too ("yes"; "new" when not,
    matched by who made it and its shape and dtype as ``gate.memory.memory_reason`` does; "-"
    when the baseline kept no tensors)."""
    memory = outcome.current.memory
    if memory is None:
        return []
    baseline = outcome.comparable_baseline
    old = baseline.memory if baseline is not None else None
    before = Counter(t.origin for t in old.at_peak) if old is not None and old.at_peak else None
    rows: list[list[object]] = []
    for tensor in memory.at_peak:
        seen = "-"
        if before is not None:
            seen = "yes" if before[tensor.origin] > 0 else "new"
            before[tensor.origin] -= 1
        rows.append([tensor.op, tensor.module or "-", f"[{','.join(map(str, tensor.shape))}]",
                     tensor.dtype, format_bytes(tensor.bytes), seen])
    return rows
