"""How numbers read, everywhere: device times, relative changes, thresholds, shares, sizes; and
the one command that re-records baselines, which the gate's messages and every output name."""

from __future__ import annotations

import math

from .safetext import plain

RECORD_OPTION = "--neuron-baseline"
MAX_COMMAND_ID_CHARS = 1000  # a node id in a command to copy: longer than a cell, still capped


def relative_change(old: float, new: float) -> float:
    """``new / old - 1``: what every delta shows; inf for something new (0 -> more), 0.0 for
    0 -> 0."""
    if old == 0:
        return math.inf if new > 0 else 0.0
    return new / old - 1.0


def delta_json(delta: float | None) -> float | None:
    """A relative change as JSON has it: 6 decimals; null for none, or for something new (inf)."""
    return None if delta is None or math.isinf(delta) else round(delta, 6)


def format_us(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3f} s"
    if value >= 1e3:
        return f"{value / 1e3:.3f} ms"
    return f"{value:.3f} us"


def format_delta(delta: float | None) -> str:
    if delta is None:
        return "-"
    if math.isinf(delta):
        return "new"
    return f"{delta * 100:+.1f}%"


def format_fraction(value: float) -> str:
    """A threshold or share as a percentage: 0.1 -> '10%', 0.025 -> '2.5%' (:g, not :.0f, which
    printed a per-op threshold of 0.025 as '2%' and 0.005 as '0%')."""
    return f"{value * 100:g}%"


def format_share(share: float) -> str:
    """A share of the device time in a sentence, to 0.1 %: 0.12345 -> '12.3%', 0.5 -> '50%'."""
    return format_fraction(round(share, 3))


def format_si(value: float, unit: str) -> str:
    """1.38e6, 'B' -> '1.38 MB'; 0 -> '-'."""
    if value == 0:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def format_bytes(value: float) -> str:
    """A size in binary units, as device memory is quoted: 0 -> '0 B', 1536 -> '1.5 KiB',
    25769803776 -> '24 GiB', 33500000000 -> '31.2 GiB'."""
    size, unit = float(value), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(round(size, 1)) < 1024 or unit == "TiB":
            break
        size /= 1024
    text = f"{size:.1f}".rstrip("0").rstrip(".") if unit != "B" else f"{size:.0f}"
    return f"{text} {unit}"


def shell_quote(text: str) -> str:
    """``text`` as one POSIX shell word, whatever it holds."""
    return "'" + text.replace("'", "'\\''") + "'"


def record_command(*nodeids: str) -> str:
    """The command that re-records these tests' baselines (all of them when none is given),
    ready to paste into a shell."""
    return " ".join([f"pytest {RECORD_OPTION}",
                     *(shell_quote(plain(n, MAX_COMMAND_ID_CHARS)) for n in nodeids)])
