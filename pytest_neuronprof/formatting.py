"""How numbers read, everywhere: device times, relative changes, thresholds, sizes."""

from __future__ import annotations

import math


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


def format_si(value: float, unit: str) -> str:
    """1.38e6, 'B' -> '1.38 MB'; 0 -> '-'."""
    if value == 0:
        return "-"
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}"
