"""Session-wide state of the plugin: options, the baseline store, and each profiled test's fate.

``plugin.py`` holds the pytest hooks and calls into this; nothing here imports torch until a
profiled test runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import ConfigError
from .gate import (INCOMPARABLE, NO_BASELINE, RECORDED, GatePolicy, Verdict, compare,
                   policy_from_marker)
from .report import TestOutcome

DEFAULT_BACKEND = "simulated"
DEFAULT_HARDWARE = "trn2"
DEFAULT_THRESHOLD = 0.10
DEFAULT_FLOOR_US = 1.0


@dataclass(frozen=True)
class Options:
    record: bool
    baseline_dir: Path
    backend: str
    hardware: str
    policy: GatePolicy
    strict: bool
    report: Path | None
    trace_dir: Path | None
    html: Path | None = None  # --neuron-html: directory of the session's HTML page


def parse_threshold(name: str, text: Any) -> float:
    """'0.05', '5%' -> 0.05."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}={text!r}: expected a relative change such as 0.05 or 5%")
    return value


def validate_choice(name: str, value: str, choices: list[str] | tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"{name}={value!r}: unknown; valid choices: {', '.join(choices)}")
    return value


@dataclass
class TestPlan:
    """What to do for one profiled test, decided from its marker and the options."""

    hardware: str
    policy: GatePolicy


class ProfileRegion:
    """The ``neuron_profile`` fixture: ``with neuron_profile:`` profiles that region only.

    Several regions in one test are concatenated into one result."""

    def __init__(self, make_profiler: Callable[[], Any]) -> None:
        self._make_profiler = make_profiler
        self._profiler: Any = None
        self._results: list[Any] = []
        self.backend_version = ""

    def __enter__(self) -> "ProfileRegion":
        if self._profiler is not None:
            raise RuntimeError("neuron_profile regions cannot be nested")
        self._profiler = self._make_profiler()
        self._profiler.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        profiler, self._profiler = self._profiler, None
        self._results.append(profiler.stop())
        self.backend_version = profiler.backend_version

    @property
    def entered(self) -> bool:
        return bool(self._results)

    @property
    def result(self) -> Any:
        """The ProfileResult of the regions so far."""
        from .result import ProfileResult

        if not self._results:
            raise RuntimeError("neuron_profile.result: no region has run yet; "
                               "use `with neuron_profile:` around the code to profile")
        return ProfileResult.concatenate(self._results)


def trace_file_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid).strip("_") + ".trace.json"


class NeuronSession:
    def __init__(self, options: Options) -> None:
        from .baseline import BaselineStore

        self.options = options
        self.store = BaselineStore(options.baseline_dir)
        self.outcomes: list[TestOutcome] = []

    def plan(self, marker_kwargs: dict[str, Any]) -> TestPlan:
        """Raises ConfigError naming a bad marker argument."""
        from .costmodel.profiles import available_hardware

        policy = policy_from_marker(self.options.policy, marker_kwargs)
        hardware = marker_kwargs.get("hardware", self.options.hardware)
        validate_choice("neuron_profile hardware", hardware, available_hardware())
        return TestPlan(hardware=hardware, policy=policy)

    def make_profiler(self, plan: TestPlan) -> Any:
        from .config import NeuronConfig
        from .profiler import NeuronProfiler

        return NeuronProfiler(NeuronConfig(hardware=plan.hardware), backend=self.options.backend)

    def judge(self, nodeid: str, location: tuple[str, int], result: Any, plan: TestPlan,
              backend_version: str) -> TestOutcome:
        """Summarize a test's profile and compare it with its baseline (or mark it recorded)."""
        import torch

        from .summary import summarize

        current = summarize(result, backend_version, torch.__version__)
        baseline = self.store.load(nodeid, current.variant)
        if self.options.record:
            verdict = Verdict(RECORDED)
        elif baseline is None:
            verdict = Verdict(NO_BASELINE, message=f"no baseline for {current.variant}")
        else:
            verdict = compare(baseline, current, plan.policy)
        return TestOutcome(nodeid, location, verdict, current, baseline)

    def strict_failure(self, outcome: TestOutcome) -> str | None:
        """Under --neuron-strict, a test with no (comparable) baseline fails with this message."""
        if not self.options.strict or outcome.verdict.status not in (NO_BASELINE, INCOMPARABLE):
            return None
        from .report import update_command

        why = outcome.verdict.message
        return (f"--neuron-strict: {outcome.nodeid} was not compared ({why}); "
                f"record its baseline with {update_command(outcome.nodeid)}")

    def write_trace(self, nodeid: str, result: Any) -> Path | None:
        if self.options.trace_dir is None:
            return None
        path = self.options.trace_dir / trace_file_name(nodeid)
        result.export_chrome_trace(path)
        return path

    def finish(self) -> list[Path]:
        """Session end (controller only): write recorded baselines and the JSON report."""
        from .baseline import atomic_write_text
        from .report import json_report

        written: list[Path] = []
        if self.options.record:
            written += self.store.save(
                (o.nodeid, o.current) for o in self.outcomes if o.verdict.status == RECORDED)
        if self.options.report is not None:
            atomic_write_text(self.options.report, json_report(self.outcomes))
        if self.options.html is not None:
            from .html import write_html

            write_html(self.options.html, self.outcomes, self.options.trace_dir)
        return written
