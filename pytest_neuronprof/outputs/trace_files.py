"""Where a test's Chrome trace goes in --neuron-trace-dir: the plugin writes it there and the
HTML page links to it (and names the test's section after it)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from ..gate.baseline import TRACE_SUFFIX  # the baseline store skips these files by it

FLAG = "--neuron-trace-dir"
READABLE = 80  # characters of the node id kept in the name; file names stay far below 255 bytes


def trace_stem(nodeid: str) -> str:
    """``test_x.py_test_y-<12 hex>``: the readable part is the node id cut to READABLE safe
    characters; the hash of the whole id makes it unique per test ("a b" and "a_b" once wrote
    one file, a 300-character id a name too long to create)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_.")[:READABLE]
    digest = hashlib.sha256(nodeid.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}-{digest}"


def trace_file_name(nodeid: str) -> str:
    """``test_x.py_test_y-<12 hex>.trace.json``."""
    return trace_stem(nodeid) + TRACE_SUFFIX


def trace_path(folder: Path, nodeid: str) -> Path:
    """A test's trace file in ``folder`` (its entry in ``outputs/registry.py``)."""
    return folder / trace_file_name(nodeid)


def write_trace(result: Any, path: Path) -> None:
    """Write a test's Chrome trace (a ProfileResult) to ``path``."""
    from ..profiler.trace import write_chrome_trace

    write_chrome_trace(result, path)
