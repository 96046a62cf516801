"""The JSON report (--neuron-report): every profiled test's totals, per-op numbers, verdict and
reasons, for CI dashboards and `neuronprof show / compare / report`."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Mapping

from ..defaults import run_identity
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
# version 6) instead of the five largest tensors ("at_peak", still read). 6: summaries carry
# their marker's policy ("policy", as baseline schema version 7; left out when none), a
# collective's op its "ranks", "link_bytes" and "algorithm" (as baseline schema version 7),
# findings may be "policy" (a marker argument that gates less than the base's), a verdict may be
# "stale" (gated against a base, the run does not hold what the change recorded), the status
# "not-gated" (an entry of the base that no test of the run produced), and the report says which
# plugin and run wrote it ("plugin"); each test carries why it is slow, by Neuron Explorer's
# Summary page: "utilisation" (the simulated backend's: mfu_estimated_percent,
# hfu_estimated_percent, mbu_estimated_percent, each engine's *_active_time_percent,
# dma_active_time_percent, dma_transfer_average_bytes and the sums behind them; null on measured
# backends) and "recommendations" (Explorer's rules that apply, the most device time at stake
# first, at most 4; [] when none does), and "marker_selects" (the variant options its marker sets,
# left out when none). `neuronprof` reads versions 1 to 6.
REPORT_VERSION = 6
READABLE_REPORT_VERSIONS = (1, 2, 3, 4, 5, 6)
MODULES_REPORT_VERSION = 2  # the first whose ops carry their time per module
POLICY_REPORT_VERSION = 6  # the first whose summaries carry their marker's policy


def report_key(outcome: TestOutcome, several: bool) -> str:
    """An outcome's key in the report's ``tests``: its node id; ``"nodeid [variant]"`` for each of
    the outcomes of a test the run costed on several chips (``several``: the test has more than
    one); ``"nodeid [variant] (not gated)"`` for an entry of the base no test produced, which may
    share its id with a test of the run (a file that became a link). Readers take the test and
    variant from the entry itself."""
    if outcome.verdict.status == Status.NOT_GATED:
        return f"{outcome.nodeid} [{outcome.current.variant}] (not gated)"
    return f"{outcome.nodeid} [{outcome.current.variant}]" if several else outcome.nodeid


PLUGIN_NAME = "pytest-neuronprof"


def plugin_version() -> str:
    """The installed pytest-neuronprof's version ("unknown" when run from a tree not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PLUGIN_NAME)
    except PackageNotFoundError:
        return "unknown"


def plugin_block() -> dict[str, str]:
    """Who wrote the report, and in which CI run (``defaults.run_identity``): what `neuronprof
    check-report` checks."""
    return {"name": PLUGIN_NAME, "version": plugin_version(), "run": run_identity()}


def json_report(outcomes: Iterable[TestOutcome]) -> str:
    outcomes = list(outcomes)
    counts = status_counts(outcomes)
    per_test = Counter(o.nodeid for o in outcomes if o.verdict.status != Status.NOT_GATED)
    document = {
        "report_version": REPORT_VERSION,
        "plugin": plugin_block(),
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
