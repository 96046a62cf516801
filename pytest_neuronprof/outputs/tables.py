"""Tables of text cells in tabulate's "simple" (terminal) and "github" (Markdown) formats, the
same text tabulate writes, fast for large tables.

tabulate infers every cell's type and strips ANSI codes even with ``disable_numparse``: on a
large baseline that was most of `neuronprof show`'s time (8 cells an op, a million ops). Cells of printable ASCII
(what ``safetext`` leaves of almost every name) are laid out here directly; any other table (wide
or combining characters, whose width tabulate measures its own way) goes to tabulate itself.
"""

from __future__ import annotations

from typing import Any, Sequence

from tabulate import tabulate

_GAP = 2  # tabulate's MIN_PADDING: a column is at least as wide as its header plus this


def _fast(rows: list[list[Any]], headers: list[str], fmt: str) -> str | None:
    """The table, or None when tabulate has to write it."""
    if fmt not in ("simple", "github") or any(len(row) != len(headers) for row in rows):
        return None
    try:
        text = "".join(headers) + "".join(map("".join, rows))
    except TypeError:  # a cell that is not a str
        return None
    if not (text.isascii() and text.isprintable()):
        return None
    cells = [[c.strip() for c in row] for row in rows]  # tabulate strips cells, not headers
    columns = list(zip(*cells)) if cells else [()] * len(headers)
    widths = [max(len(h) + _GAP, max(map(len, column), default=0))
              for h, column in zip(headers, columns)]
    pads = ["{:%d}" % w for w in widths]  # left-aligned: str.format pads strings on the right
    if fmt == "simple":
        template, rule = "  ".join(pads), "  ".join("-" * w for w in widths)
        lines = [template.format(*row).rstrip() for row in [headers, *cells]]
    else:
        template = "| " + " | ".join(pads) + " |"
        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
        lines = [template.format(*row) for row in [headers, *cells]]
    lines.insert(1, rule)
    return "\n".join(lines)


def grid(rows: Sequence[Sequence[object]], headers: Sequence[str], fmt: str) -> str:
    """``tabulate(rows, headers, tablefmt=fmt, disable_numparse=True)``, the same text."""
    table = [list(row) for row in rows]
    names = list(headers)
    fast = _fast(table, names, fmt)
    return fast if fast is not None else tabulate(table, headers=names, tablefmt=fmt,
                                                  disable_numparse=True)
