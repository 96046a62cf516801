"""The JSON report (--neuron-report): every profiled test's totals, per-op numbers, verdict and
reasons, for CI dashboards and `neuronprof show / compare / report`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, Mapping

from ..files import atomic_write_text
from ..gate.compare import Status
from ..gate.outcome import TestOutcome, status_counts
from ..safetext import json_text

# 2: ops carry their time per module ("modules", as baseline schema version 3), findings the
# modules whose time changed, tests their baseline key and directory and the ops costed by the
# fallback ("uncosted"), and the status "not-profiled". 3: ops carry their bound and dtype (as
# baseline schema version 4), summaries their auto-cast. `neuronprof` reads versions 1 to 3.
REPORT_VERSION = 3
READABLE_REPORT_VERSIONS = (1, 2, 3)
MODULES_REPORT_VERSION = 2  # the first whose ops carry their time per module


def json_report(outcomes: Iterable[TestOutcome]) -> str:
    outcomes = list(outcomes)
    counts = status_counts(outcomes)
    document = {
        "report_version": REPORT_VERSION,
        "counts": dict(sorted(counts.items())),
        "regressions": counts.get(Status.REGRESSION, 0),
        "recorded": counts.get(Status.RECORDED, 0),
        "tests": {o.nodeid: o.to_json() for o in sorted(outcomes, key=lambda o: o.nodeid)},
    }
    # No indent: json's C encoder only runs without it (5 s -> 0.3 s for 2,000 tests).
    # json_text: the values stay exact, and a `cat` of the file in a CI log starts no command.
    return json_text(json.dumps(document, sort_keys=True)) + "\n"


def write_report(path: Path, outcomes: Iterable[TestOutcome], paths: Mapping[str, Path]) -> None:
    """--neuron-report at the session's end (its entry in ``outputs/registry.py``)."""
    atomic_write_text(path, json_report(outcomes))
