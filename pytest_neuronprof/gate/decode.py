"""Checked reading of JSON-decoded data into the gate's records (summaries, findings, outcomes):
one set of rules for baseline files, --neuron-report files and what xdist workers send.

A bad value raises the caller's error, made by ``fail(message)`` from a message that says where
the value is (``tests['t'][...].ops['aten::mm'].count should be a whole number, got 1.5``), so
each reader names its own file and fix.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, Callable, Collection

FLOAT_MAX = sys.float_info.max  # ints above it do not convert to float


class DuplicateKeyError(ValueError):
    """A JSON object with the same key twice: json.loads keeps the last one silently, so a bad
    merge that left two entries of one test would lose one of them unseen."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return result


def load_json(text: str, **kwargs: Any) -> Any:
    """json.loads that refuses duplicate keys (DuplicateKeyError, a ValueError)."""
    return json.loads(text, object_pairs_hook=_unique_keys, **kwargs)


class Decoder:
    def __init__(self, fail: Callable[[str], Exception]) -> None:
        self.fail = fail

    def expect(self, where: str, value: Any, kind: type | tuple[type, ...]) -> Any:
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(f"{where} should be {names}, got {type(value).__name__}")
        if isinstance(value, float) and not math.isfinite(value):
            raise self.fail(f"{where} is {value}")
        return value

    def string(self, where: str, value: Any) -> str:
        return self.expect(where, value, str)

    def mapping(self, where: str, value: Any) -> dict:
        return self.expect(where, value, dict)

    def items(self, where: str, value: Any) -> list:
        return self.expect(where, value, list)

    def number(self, where: str, value: Any, signed: bool = False) -> float:
        value = self.expect(where, value, (int, float))
        if value < 0 and not signed:
            raise self.fail(f"{where} is negative ({value})")
        if abs(value) > FLOAT_MAX:  # an int beyond float range: float() would raise OverflowError
            raise self.fail(f"{where} is too large")
        return float(value)

    def whole(self, where: str, value: Any) -> int:
        # int(1.5) would silently store a call count of 1: a fractional count is a broken file.
        number = self.number(where, value)
        if not number.is_integer():
            raise self.fail(f"{where} should be a whole number, got {value!r}")
        return int(number)

    def known_keys(self, where: str, data: dict, known: Collection[str]) -> None:
        """An unknown key is an error: a reader that dropped it would lose it on the next
        write. (A missing one shows as a value of the wrong type: None.)"""
        unknown = sorted(set(map(str, data)) - set(known))
        if unknown:
            raise self.fail(f"{where} has unknown key(s) {', '.join(map(repr, unknown))}")
