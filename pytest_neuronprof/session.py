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
# (rounds, warmup) per backend when neither the marker nor an option says. The simulated
# backend is exact: one round, no warmup, always. Measured backends: warmup rounds absorb
# one-time costs (the profiler's own start-up, allocator growth, lazy init, compilation); the
# measured rounds feed the significance test, whose smallest p-value with r rounds a side is
# 1 / C(2r, r) (r = 5: 0.004), so at least min_measured_rounds(alpha) are required (5 at 0.01).
# Neuron: its documentation asks for 3+ warmup iterations before a profiled one.
DEFAULT_ROUNDS = {"simulated": (1, 0), "cpu": (20, 3), "cuda": (20, 5), "neuron": (10, 3)}
# The threshold when neither the marker nor an option says. CPU time on a shared machine
# drifts between sessions more than the 10 % that suits exact numbers: on 2 shared cores the
# per-op best rounds of unchanged code moved by up to 20-26 % between pytest sessions
# (benchmarks/noise.py), which significance and materiality absorbed at 15 %, not always at 10 %.
# cuda and neuron keep 10 %: device kernels do not share the host's noise (not measured here).
DEFAULT_THRESHOLDS = {"simulated": DEFAULT_THRESHOLD, "cpu": 0.15, "cuda": DEFAULT_THRESHOLD,
                      "neuron": DEFAULT_THRESHOLD}
DEFAULT_CPU_THREADS = 1  # the cpu backend measures single-threaded unless told otherwise


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
    rounds: int | None = None  # --neuron-rounds; None: the backend's default
    warmup: int | None = None  # --neuron-warmup; None: the backend's default
    cpu_threads: int | None = DEFAULT_CPU_THREADS  # --neuron-cpu-threads; None (0): unchanged

    @property
    def measured(self) -> bool:
        return self.backend != "simulated"


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


def parse_count(name: str, text: Any, minimum: int) -> int:
    """'10' -> 10; a whole number >= minimum, else ConfigError naming the option."""
    raw = str(text).strip()
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(f"{name}={text!r}: expected a whole number >= {minimum}")
    return value


def min_measured_rounds(alpha: float) -> int:
    """The fewest rounds a side with which a change can be significant at ``alpha``."""
    from .stats import smallest_p

    rounds = 1
    while smallest_p(rounds, rounds) >= alpha and rounds < 1000:
        rounds += 1
    return rounds


@dataclass
class TestPlan:
    """What to do for one profiled test, decided from its marker and the options."""

    hardware: str
    policy: GatePolicy
    rounds: int = 1  # measured rounds: the test body runs warmup + rounds times
    warmup: int = 0
    measured: bool = False  # a measured backend: per-round samples and the significance test


class ProfileRegion:
    """The ``neuron_profile`` fixture: ``with neuron_profile:`` profiles that region only.

    Several regions in one invocation of the test are concatenated into one result: one round.
    Under a measured backend the plugin invokes the test body once per round (warmup rounds
    included), and ``result`` is the current round's. ``backend`` names the session's backend,
    so that a test can skip what a measured backend cannot time (meta tensors)."""

    def __init__(self, make_profiler: Callable[[], Any], backend: str = DEFAULT_BACKEND) -> None:
        self._make_profiler = make_profiler
        self._profiler: Any = None
        self._results: list[Any] = []
        self.backend_version = ""
        self.backend = backend

    def begin_round(self) -> None:
        """Forget the regions of the previous round (the plugin calls this before each one)."""
        if self._profiler is not None:
            raise RuntimeError("neuron_profile: a region is still open at the start of a round")
        self._results = []

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


class Rounds:
    """Runs one profiled test for ``plan.warmup + plan.rounds`` invocations of its body and
    keeps the profile of each measured round (warmup rounds are profiled too, so that the
    profiler's own start-up is warm, and the result is dropped).

    Without the fixture each invocation is profiled whole; with it, each invocation's
    ``with neuron_profile:`` regions make that round (an invocation that enters none adds no
    round). ``begin()`` / ``end()`` go around each invocation; ``end()`` also runs when the body
    raises."""

    def __init__(self, plan: TestPlan, make_profiler: Callable[[], Any],
                 region: ProfileRegion | None = None) -> None:
        self.plan = plan
        self.total = plan.warmup + plan.rounds
        self._make_profiler = make_profiler
        self._region = region
        self._profiler: Any = None
        self.index = 0  # invocations begun
        self.results: list[Any] = []
        self.backend_version = ""

    def begin(self) -> None:
        if self._region is not None:
            self._region.begin_round()
        else:
            self._profiler = self._make_profiler()
            self._profiler.start()
        self.index += 1

    def end(self) -> None:
        keep = self.index > self.plan.warmup
        if self._region is not None:
            if not self._region.entered:
                return
            result, version = self._region.result, self._region.backend_version
        else:
            profiler, self._profiler = self._profiler, None
            if profiler is None:
                return
            result, version = profiler.stop(), profiler.backend_version
        if keep:
            self.results.append(result)
            self.backend_version = version


def representative(results: list[Any]) -> Any:
    """The round whose total device time is the (lower) median: what traces show."""
    order = sorted(range(len(results)), key=lambda i: (results[i].total_device_time_us, i))
    return results[order[(len(order) - 1) // 2]]


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
        if not self.options.measured:
            return TestPlan(hardware=hardware, policy=policy)  # exact: one round, no warmup
        default_rounds, default_warmup = DEFAULT_ROUNDS[self.options.backend]
        rounds = marker_kwargs.get("rounds", self.options.rounds or default_rounds)
        warmup = marker_kwargs.get("warmup", self.options.warmup if self.options.warmup is not None
                                   else default_warmup)
        fewest = min_measured_rounds(policy.alpha)
        if rounds < fewest:
            source = "neuron_profile rounds" if "rounds" in marker_kwargs else "--neuron-rounds"
            raise ConfigError(
                f"{source}={rounds}: the {self.options.backend} backend needs at least {fewest} "
                f"rounds for a change to be significant at alpha={policy.alpha:g} (with {rounds}, "
                "no regression could ever be called)")
        return TestPlan(hardware=hardware, policy=policy, rounds=rounds, warmup=warmup, measured=True)

    def make_profiler(self, plan: TestPlan) -> Any:
        from .config import NeuronConfig
        from .profiler import NeuronProfiler

        threads = self.options.cpu_threads if self.options.backend == "cpu" else None
        return NeuronProfiler(NeuronConfig(hardware=plan.hardware), backend=self.options.backend,
                              threads=threads)

    def check_backend(self) -> None:
        """ConfigError when this machine cannot run the session's backend (no CUDA GPU, no
        torch_neuronx): said once at the start, not by every test."""
        if self.options.backend in ("cuda", "neuron"):
            from .backends.measured import check_available

            check_available(self.options.backend)

    def summarize(self, nodeid: str, results: list[Any], plan: TestPlan, backend_version: str) -> tuple[Any, Any]:
        """(current summary, baseline or None). Measured rounds keep per-round samples of the
        ops the gate weighs: the current hotspots, and when comparing, the baseline's too."""
        import torch

        from .gate import hotspots
        from .summary import summarize_rounds

        first = results[0]
        baseline = self.store.load(nodeid, f"{first.backend}:{first.hardware}")
        if not plan.measured:
            return summarize_rounds(results, backend_version, torch.__version__), baseline

        def sample_ops(summary: Any) -> set[str]:
            names = set(hotspots(summary, plan.policy))
            if baseline is not None and not self.options.record:
                names |= set(hotspots(baseline, plan.policy))
            return names

        return summarize_rounds(results, backend_version, torch.__version__, sample_ops), baseline

    def judge(self, nodeid: str, location: tuple[str, int], results: Any, plan: TestPlan,
              backend_version: str) -> TestOutcome:
        """Summarize a test's profile (one result, or one per round) and compare it with its
        baseline (or mark it recorded)."""
        if not isinstance(results, (list, tuple)):
            results = [results]
        current, baseline = self.summarize(nodeid, list(results), plan, backend_version)
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

    def prepare_output_dirs(self) -> None:
        """Create --neuron-trace-dir and --neuron-html up front: one that cannot be created is a
        usage error at the start, not a failure inside a test's report hook."""
        from .files import OutputError

        for option, folder in (("--neuron-trace-dir", self.options.trace_dir),
                               ("--neuron-html", self.options.html)):
            if folder is None:
                continue
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OutputError(folder, f"cannot create the {option} folder "
                                          f"({exc.strerror or exc})", exc.errno) from None

    def write_trace(self, nodeid: str, result: Any) -> Path | None:
        """Write a test's trace; a failure (disk full, ...) is a warning, never a lost verdict."""
        if self.options.trace_dir is None:
            return None
        path = self.options.trace_dir / trace_file_name(nodeid)
        try:
            result.export_chrome_trace(path)
        except OSError as exc:
            import warnings

            warnings.warn(f"pytest-neuronprof: could not write the trace {path}: "
                          f"{exc.strerror or exc}", stacklevel=2)
            return None
        return path

    def finish(self) -> list[Path]:
        """Session end (controller only): write recorded baselines and the JSON report."""
        from .files import atomic_write_text
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
