"""The rows of the two tables that `neuronprof compare` prints and the Markdown summaries show:
per-test totals and per-op changes. One builder each; each renderer says how a verdict reads in
a cell (upper case in text, bold in Markdown) and lays the rows out (``terminal.text_table``,
``markdown.table``), escaping the cells its own way."""

from __future__ import annotations

from typing import Callable, Iterable

from ..formatting import format_delta, format_us
from ..gate.outcome import TestOutcome, op_changes

TOTALS_HEADERS = ["test", "variant", "baseline", "current", "delta", "verdict"]
OP_HEADERS = ["op", "engine", "module", "old", "new", "delta", "calls", "gate"]

Cell = Callable[[str], object]  # a verdict (or a node id) as one renderer writes it in a cell


def totals_rows(outcomes: Iterable[TestOutcome], verdict: Cell, test: Cell = str) -> list[list[object]]:
    """A row per test: its total device time before and after, and the gate's verdict."""
    return [[test(o.nodeid), o.current.variant,
             format_us(o.baseline.total_device_time_us) if o.baseline else "-",
             format_us(o.current.total_device_time_us), format_delta(o.delta), verdict(o.verdict.status)]
            for o in outcomes]


def op_rows(outcome: TestOutcome, verdict: Cell) -> list[list[object]]:
    """A row per op whose time or calls changed, largest change first; ``verdict`` writes what
    the gate flagged it ("regression", "improved", "allowed"; "" when nothing)."""
    return [[c.op, c.engine, c.module or "-", format_us(c.old_us) if c.old_count else "-",
             format_us(c.new_us) if c.new_count else "-", format_delta(c.delta), c.calls,
             verdict(c.flag)]
            for c in op_changes(outcome)]
