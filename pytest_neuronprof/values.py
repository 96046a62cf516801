"""Parsing what users type (options, ini values, marker arguments, command-line arguments): one
parser per kind of value, the same everywhere, each raising a ConfigError that names the option."""

from __future__ import annotations

import math
from typing import Any, Sequence

from .errors import ConfigError


def parse_threshold(name: str, text: Any) -> float:
    """'0.05', '5%' -> 0.05."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}={text!r}: expected a relative change such as 0.05 or 5%")
    return value


def validate_choice(name: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ConfigError(f"{name}={value!r}: unknown; valid choices: {', '.join(choices)}")
    return value


def parse_count(name: str, text: Any, minimum: int) -> int:
    """'10' -> 10; a whole number >= minimum, else ConfigError naming the option."""
    raw = str(text).strip()
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"{name}={text!r}: expected a whole number >= {minimum}")
    return value
