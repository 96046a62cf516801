"""Large JSON documents, fast: ``dumps`` writes exactly what ``json.dumps(value, indent=2,
sort_keys=True, allow_nan=False)`` writes (baseline files must stay byte-stable, so this is a
faster way to the same bytes, not a format of its own), and ``gc_paused`` keeps the garbage
collector out of decoding and writing them.

With ``indent``, the json module does not use its C encoder: every token goes through a chain
of Python generators (about 30 µs per op of a baseline file: 35 s for a million ops). Here dicts
and lists of plain JSON values (exact ``str``, ``int``, ``float``, ``bool``, ``None``; ``str``
keys) are written by one loop each, scalars by the encoder's own C string escaping and
``float.__repr__``; anything else (a tuple, a non-string key, an unsupported type, a
non-finite float) goes to ``json.dumps`` itself, indented to its depth, so the output and the
errors are always json's own. (A cyclic value is a RecursionError here: none is ever written.)
"""

from __future__ import annotations

import contextlib
import gc
import json
from json.encoder import encode_basestring_ascii
from typing import Any, Callable, Iterator

_INDENT = "  "


def _dumps(value: Any) -> str:
    """The reference: json's own encoder (also for its errors, e.g. a NaN or a set)."""
    return json.dumps(value, indent=2, sort_keys=True, allow_nan=False)


def _float(value: float) -> str:
    if value - value != 0.0:  # inf or nan: json raises its own ValueError
        return _dumps(value)
    return float.__repr__(value)


_SCALARS: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii,
    int: int.__repr__,
    float: _float,
    bool: {True: "true", False: "false"}.__getitem__,
    type(None): lambda _: "null",
}


class Deferred:
    """A value made only when ``dumps`` writes it, and dropped right after: the parts of a large
    document need not all exist at once (a baseline file of a million ops is 700 MB of dicts)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


class Rendered:
    """A value whose text its owner writes itself: ``render(pad)`` must be exactly what ``dumps``
    writes for the value at the indentation ``pad`` (a baseline's ops, a million of them in a
    large file, written without a dict per op: ``OpSummary.rendered``)."""

    __slots__ = ("render",)

    def __init__(self, render: Callable[[str], str]) -> None:
        self.render = render


def encode_at(value: Any, pad: str) -> str:
    """``dumps(value)`` as written at the indentation ``pad`` (the lines after its first start
    with it): what a ``Rendered`` value falls back to."""
    return _encode(value, pad)


def _encode(value: Any, pad: str) -> str:
    """``value`` at the indentation ``pad`` (the lines after its first start with it)."""
    kind = type(value)
    if kind is Deferred:
        return _encode(value.make(), pad)
    if kind is Rendered:
        return value.render(pad)
    scalar = _SCALARS.get(kind)
    if scalar is not None:
        return scalar(value)
    inner = pad + _INDENT
    parts: list[str] = []
    if kind is dict:
        if not value:
            return "{}"
        for key in value:
            if type(key) is not str:  # json turns 1, 1.5, True, None keys into strings
                return _dumps(value).replace("\n", "\n" + pad)
        for key in sorted(value):
            item = value[key]
            write = _SCALARS.get(type(item))
            parts.append(f"{encode_basestring_ascii(key)}: "
                         f"{write(item) if write is not None else _encode(item, inner)}")
        return "{\n" + inner + (",\n" + inner).join(parts) + "\n" + pad + "}"
    if kind is list:
        if not value:
            return "[]"
        for item in value:
            write = _SCALARS.get(type(item))
            parts.append(write(item) if write is not None else _encode(item, inner))
        return "[\n" + inner + (",\n" + inner).join(parts) + "\n" + pad + "]"
    if isinstance(value, (str, int, float)):  # a subclass (an enum): json writes its value
        return _SCALARS[str if isinstance(value, str) else int if isinstance(value, int) else float](value)
    # A tuple, a dict subclass, an unknown type: json's own text (or its error), at this depth.
    # Newlines only ever separate tokens in it (strings escape theirs), so re-indenting is safe.
    return _dumps(value).replace("\n", "\n" + pad)


def dumps(value: Any) -> str:
    """``json.dumps(value, indent=2, sort_keys=True, allow_nan=False)``, the same text (each
    ``Deferred`` written as the value it makes)."""
    with gc_paused():
        return _encode(value, "")


def _chunks(value: Any, pad: str, depth: int) -> Iterator[str]:
    """``_encode(value, pad)`` in pieces: the dicts and lists of the top ``depth`` levels item by
    item, each value below them as one string."""
    kind = type(value)
    if kind is Deferred and depth > 0:
        yield from _chunks(value.make(), pad, depth)
        return
    if depth <= 0 or (kind is not dict and kind is not list) or not value or (
            kind is dict and any(type(key) is not str for key in value)):
        yield _encode(value, pad)  # a scalar, an empty container, json's own fallback
        return
    inner = pad + _INDENT
    separator = ",\n" + inner
    if kind is dict:
        yield "{\n" + inner
        for i, key in enumerate(sorted(value)):
            yield f"{separator if i else ''}{encode_basestring_ascii(key)}: "
            yield from _chunks(value[key], inner, depth - 1)
        yield "\n" + pad + "}"
    else:
        yield "[\n" + inner
        for i, item in enumerate(value):
            if i:
                yield separator
            yield from _chunks(item, inner, depth - 1)
        yield "\n" + pad + "]"


def iterdumps(value: Any, depth: int = 3) -> Iterator[str]:
    """``dumps(value)`` as a sequence of strings (joined, the same text; an error raised where
    ``dumps`` raises it): the containers of the top ``depth`` levels item by item, so a large
    document (a baseline file of a million ops, `neuronprof show --format json`) is written as
    it is made and never exists whole. The collector is paused while each piece is made."""
    pieces = _chunks(value, "", depth)
    while True:
        with gc_paused():
            piece = next(pieces, None)
        if piece is None:
            return
        yield piece


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a large document is decoded or written: both
    allocate millions of containers and no cycles, and each burst of allocations set off
    collections that rescanned everything made so far (a third of the time of a large file)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
