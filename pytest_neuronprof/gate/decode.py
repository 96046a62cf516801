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

from ..safetext import MAX_MESSAGE_CHARS, MAX_VALUE_CHARS, quoted

FLOAT_MAX = sys.float_info.max  # ints above it do not convert to float
_KEYS_SHOWN = 5  # unknown keys named in one error; the rest are counted
# A problem's share of a whole message (safetext.MAX_MESSAGE_CHARS), leaving room for the file
# named before it and the fix after it.
_PROBLEM_CHARS = MAX_MESSAGE_CHARS - MAX_VALUE_CHARS


class DuplicateKeyError(ValueError):
    """A JSON object with the same key twice: json.loads keeps the last one silently, so a bad
    merge that left two entries of one test would lose one of them unseen."""

    def __init__(self, key: str) -> None:
        super().__init__(f"duplicate key {quoted(key)}")
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


def json_decoder(**kwargs: Any) -> json.JSONDecoder:
    """The decoder ``load_json(text, **kwargs)`` decodes with, for a document decoded a part at
    a time (``raw_decode``): json shares equal keys within one call only, this one across its
    calls too, so the parts keep one string per distinct key (op names, module paths), as a
    document decoded whole does (a quarter of the memory of a large baseline's records)."""
    keys: dict[str, str] = {}

    def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        shared = keys.setdefault
        result = {shared(key, key): value for key, value in pairs}
        return result if len(result) == len(pairs) else _unique_keys(pairs)  # raises

    return json.JSONDecoder(object_pairs_hook=unique_keys, **kwargs)


def _bounded(problem: str) -> str:
    """A problem of at most about _PROBLEM_CHARS: its middle cut where a reader put a whole
    value in it (an op name in a ``where``, repr'd but not capped, on paths read per op where
    quoting costs), keeping the start (where) and the end (what is wrong)."""
    if len(problem) <= _PROBLEM_CHARS:
        return problem
    half = _PROBLEM_CHARS // 2
    return f"{problem[:half]}\u2026 ({len(problem):,} characters) \u2026{problem[-half:]}"


class Decoder:
    def __init__(self, fail: Callable[[str], Exception]) -> None:
        self.fail: Callable[[str], Exception] = lambda problem: fail(_bounded(problem))

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
            shown = ", ".join(map(quoted, unknown[:_KEYS_SHOWN]))
            more = f" and {len(unknown) - _KEYS_SHOWN:,} more" if len(unknown) > _KEYS_SHOWN else ""
            raise self.fail(f"{where} has unknown key(s) {shown}{more}")
