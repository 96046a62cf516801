"""The JSON report (--neuron-report): every profiled test's totals, per-op numbers, verdict and
reasons, for CI dashboards and `neuronprof show / compare / report`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping

from ..files import atomic_write_text
from ..gate.compare import Status
from ..gate.outcome import TestOutcome, status_counts
from ..safetext import json_text

# 2: ops carry their time per module ("modules", as baseline schema version 3), findings the
# modules whose time changed, tests their baseline key and directory and the ops costed by the
# fallback ("uncosted"), and the status "not-profiled". 3: ops carry their bound and dtype (as
# baseline schema version 4), summaries their auto-cast. 4: summaries carry their device memory
# ("memory": peak, resident bytes, the largest tensors at the peak; as baseline schema version
# 5), findings may be "memory" or "does-not-fit" (in bytes). 5: the verdict "does-not-fit" (the
# peak of device memory above the test's limit, with or without a baseline; counted in
# "does_not_fit" beside "regressions"), findings "replaced" (an op that no longer runs and the new
# ops in its modules) and in order of impact (the total, then the device time each adds or
# removes, then the peak), and a summary's memory keeps what is live at the peak by origin
# ("live": op, module, shape, dtype, count and bytes of the 50 largest groups; as baseline schema
# version 6) instead of the five largest tensors ("at_peak", still read). 6: a collective's op
# carries its "ranks", "link_bytes" and "algorithm" (as baseline schema version 7). `neuronprof`
# reads versions 1 to 6.
REPORT_VERSION = 6
READABLE_REPORT_VERSIONS = (1, 2, 3, 4, 5, 6)
MODULES_REPORT_VERSION = 2  # the first whose ops carry their time per module


def report_key(outcome: TestOutcome, several: bool) -> str:
    """An outcome's key in the report's ``tests``: its node id; ``"nodeid [variant]"`` for each of
    the outcomes of a test the run costed on several chips (``several``: the test has more than
    one). Readers take the test and variant from the entry itself."""
    return f"{outcome.nodeid} [{outcome.current.variant}]" if several else outcome.nodeid


def json_report(outcomes: Iterable[TestOutcome]) -> str:
    outcomes = list(outcomes)
    counts = status_counts(outcomes)
    per_test = Counter(o.nodeid for o in outcomes)
    document = {
        "report_version": REPORT_VERSION,
        "counts": dict(sorted(counts.items())),
        "regressions": counts.get(Status.REGRESSION, 0),
        "does_not_fit": counts.get(Status.DOES_NOT_FIT, 0),
        "recorded": counts.get(Status.RECORDED, 0),
        "tests": {report_key(o, per_test[o.nodeid] > 1): o.to_json()
                  for o in sorted(outcomes, key=lambda o: o.nodeid)},
    }
    # No indent: json's C encoder only runs without it (5 s -> 0.3 s for 2,000 tests).
    # json_text: the values stay exact, and a `cat` of the file in a CI log starts no command.
    return json_text(json.dumps(document, sort_keys=True)) + "\n"


def write_report(path: Path, outcomes: Iterable[TestOutcome], paths: Mapping[str, Path]) -> None:
    """--neuron-report at the session's end (its entry in ``outputs/registry.py``)."""
    atomic_write_text(path, json_report(outcomes))
