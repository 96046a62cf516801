"""Parsing what users type (options, ini values, marker arguments, command-line arguments): one
parser per kind of value, the same everywhere, each raising a ConfigError that names the option.

A value may come as text (an option, an ini value, a `neuronprof` argument) or as a Python value
(a marker argument): ``threshold=0.05`` and ``threshold="5%"`` mean the same wherever they are
written."""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any, Sequence

from .errors import ConfigError


def _number(value: Any, percent: bool = False) -> float:
    """A finite float from an int, a float or their text ('5%' too when ``percent``); nan if not."""
    if isinstance(value, bool):
        return math.nan
    if isinstance(value, (int, float)):
        try:  # an int too large for a float (10**400) raises OverflowError
            return float(value)
        except OverflowError:
            return math.nan
    if not isinstance(value, str):
        return math.nan
    raw = value.strip()
    scale = 1.0
    if percent and raw.endswith("%"):
        raw, scale = raw[:-1], 0.01
    try:
        number = float(raw) * scale
    except ValueError:
        return math.nan
    return number if math.isfinite(number) else math.nan


def parse_fraction(name: str, value: Any, high: float | None = None) -> float:
    """A relative value (a threshold, a share): 0.05, '0.05' and '5%' are all 0.05. At least 0,
    at most ``high`` when given."""
    number = _number(value, percent=True)
    if not number >= 0 or (high is not None and number > high):
        if high is None:
            raise ConfigError(f"{name}={value!r}: expected a relative change such as 0.05 or 5%")
        raise ConfigError(f"{name}={value!r}: expected a number between 0.0 and {float(high)} "
                          f"(or a percentage up to {high:.0%}; 0.05 means 5 %)")
    return number


def parse_microseconds(name: str, value: Any) -> float:
    """A time in microseconds, at least 0: 1.0 or '1.0' (a percentage is no time)."""
    number = _number(value)
    if not number >= 0:
        raise ConfigError(f"{name}={value!r}: expected a time in microseconds such as 1.0 (>= 0)")
    return number


def parse_count(name: str, value: Any, minimum: int) -> int:
    """10 or '10' -> 10; a whole number >= minimum, else ConfigError naming the option."""
    if isinstance(value, int) and not isinstance(value, bool):
        number: int | None = value
    elif isinstance(value, str) and value.strip().lstrip("+-").isdecimal():
        # isdecimal, not isdigit: int() refuses digits that are not decimal ("²")
        number = int(value.strip())
    else:
        number = None
    if number is None or number < minimum:
        raise ConfigError(f"{name}={value!r}: expected a whole number >= {minimum}")
    return number


def validate_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"{name}={value!r}: unknown; valid choices: {', '.join(choices)}")
    return value


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmg]i?b?|b)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6,
               "mib": 2**20, "g": 10**9, "gb": 10**9, "gib": 2**30}


def parse_size(name: str, value: Any) -> int:
    """A size in bytes, at least 1: 1000000, '1000000', '512MB' (10**6 bytes a MB), '256MiB'
    (2**20 bytes a MiB), '1.5GB'; else ConfigError naming the option."""
    if isinstance(value, int) and not isinstance(value, bool):
        number: float = value
    else:
        match = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
        unit = (match.group(2) or "").lower() if match else ""
        number = float(match.group(1)) * _SIZE_UNITS[unit] if match and unit in _SIZE_UNITS else 0
    if not 1 <= number < 2**63:
        raise ConfigError(f"{name}={value!r}: expected a size such as 512MB, 256MiB or a number "
                          "of bytes (at least 1)")
    return int(number)


# A reason a person can read (every place a reason comes from: --neuron-reason, the ini's
# neuron_config_reason, a baseline entry's "reason", a marker's allow= values): once whitespace,
# control (Cc), format (Cf: zero-width spaces and joiners, bidi marks, tag characters) and filler
# characters are left out, at least this many letters or digits remain. Fillers are characters
# Unicode files as letters or symbols that fonts draw as nothing: the Hangul fillers (Lo), the
# blank Braille pattern (So) and the Mongolian vowel separator.
MIN_REASON_CHARS = 2  # "#7", "ok": short, but a reviewer reads them
_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u180e")


def reason_problem(text: str) -> str | None:
    """Why ``text`` is no reason a person can read (None: it is one). Letters and digits count;
    marks, punctuation and symbols do not (a reason of dots or emoji says nothing)."""
    count = 0
    for char in text:
        if char in _FILLERS:
            continue
        if unicodedata.category(char)[0] in "LN":
            count += 1
            if count >= MIN_REASON_CHARS:
                return None
    if not text.strip():
        return "it is empty"
    return (f"it has {count} letter{'s' if count != 1 else ''} or digit{'s' if count != 1 else ''} "
            f"a person can read (at least {MIN_REASON_CHARS}, once whitespace, control, format and "
            "filler characters are left out)")
