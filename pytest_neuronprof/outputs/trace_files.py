"""Where a test's Chrome trace goes in --neuron-trace-dir: the plugin writes it there and the
HTML page links to it."""

from __future__ import annotations

import hashlib
import re

READABLE = 80  # characters of the node id kept in the name; file names stay far below 255 bytes


def trace_file_name(nodeid: str) -> str:
    """``test_x.py_test_y-<12 hex>.trace.json``: the readable part is the node id cut to
    READABLE safe characters; the hash of the whole id makes the name unique per test ("a b" and
    "a_b" once wrote one file, a 300-character id a name too long to create)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_.")[:READABLE]
    digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}-{digest}.trace.json"
