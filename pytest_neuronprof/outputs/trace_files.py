"""Where a test's Chrome trace goes in --neuron-trace-dir: the plugin writes it there and the
HTML page links to it."""

from __future__ import annotations

import re


def trace_file_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_") + ".trace.json"
