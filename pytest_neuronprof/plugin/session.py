"""The plugin's session: options, the baseline store, and each profiled test's fate, from its
plan to its verdict and the outputs. ``plugin/__init__.py`` holds the pytest hooks, each of which
hands off to a method here. Nothing here imports torch until a profiled test runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Generator

import pytest

from ..errors import NeuronProfError
from ..files import OutputError, atomic_write_text, show_path
from ..gate.baseline import BaselineStore
from ..gate.compare import NOT_COMPARED, Status, Verdict, compare, hotspots
from ..gate.outcome import TestOutcome
from ..outputs.trace_files import trace_file_name
from .marker import MARKER, TestPlan, make_plan
from .options import Options
from .regions import ProfileRegion, Rounds, representative

FIXTURE = "neuron_profile"
_result_key = pytest.StashKey[Any]()
_plan_key = pytest.StashKey[TestPlan]()
_region_key = pytest.StashKey[ProfileRegion]()
_rounds_key = pytest.StashKey[Rounds]()


def is_profiled(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(item, "fixturenames", ())


class NeuronSession:
    """One per pytest run (and per xdist worker; only the controller writes outputs)."""

    def __init__(self, options: Options, worker: bool = False) -> None:
        self.options = options
        self.worker = worker
        self.store = BaselineStore(options.baseline_dir)
        self.outcomes: list[TestOutcome] = []
        self.written: list[Path] = []

    # -- session start ---------------------------------------------------------------------

    def start(self) -> None:
        """Check what can be checked before any test runs: the backend, and (once, on the
        controller) the baseline files and the output folders."""
        self.check_backend()
        if not self.worker:
            self.store.validate_all()
            self.prepare_output_dirs()

    def check_backend(self) -> None:
        """ConfigError when this machine cannot run the session's backend (no CUDA GPU, no
        torch_neuronx): said once at the start, not by every test."""
        if self.options.backend in ("cuda", "neuron"):
            from ..profiler.backends.measured import check_available

            check_available(self.options.backend)

    def prepare_output_dirs(self) -> None:
        """Create --neuron-trace-dir and --neuron-html up front: one that cannot be created is a
        usage error at the start, not a failure inside a test's report hook."""
        for option, folder in (("--neuron-trace-dir", self.options.trace_dir),
                               ("--neuron-html", self.options.html)):
            if folder is None:
                continue
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OutputError(folder, f"cannot create the {option} folder "
                                          f"({exc.strerror or exc})", exc.errno) from None

    # -- one test ----------------------------------------------------------------------------

    def plan(self, item: pytest.Item) -> TestPlan:
        """The test's plan from its marker; a bad marker argument fails the test, naming it."""
        plan = item.stash.get(_plan_key, None)
        if plan is None:
            marker = item.get_closest_marker(MARKER)
            if marker is not None and marker.args:
                pytest.fail(f"{item.nodeid}: @pytest.mark.{MARKER} takes keyword arguments only, "
                            f"got positional {marker.args!r}", pytrace=False)
            try:
                plan = make_plan(self.options, dict(marker.kwargs) if marker else {})
            except NeuronProfError as exc:
                problem = f"{item.nodeid}: {exc}"
            else:
                problem = None
            if problem is not None:  # failed outside the except: no "During handling of..." chain
                pytest.fail(problem, pytrace=False)
            item.stash[_plan_key] = plan
        return plan

    def make_profiler(self, plan: TestPlan) -> Any:
        from ..profiler.config import NeuronConfig
        from ..profiler.profiler import NeuronProfiler

        threads = self.options.cpu_threads if self.options.backend == "cpu" else None
        return NeuronProfiler(NeuronConfig(hardware=plan.hardware), backend=self.options.backend,
                              threads=threads)

    def region(self, item: pytest.Item) -> ProfileRegion:
        """The ``neuron_profile`` fixture's value for ``item``."""
        region = ProfileRegion(lambda: self.make_profiler(self.plan(item)), self.options.backend)
        item.stash[_region_key] = region
        return region

    def profile_call(self, item: pytest.Function) -> Generator[None, Any, Any]:
        """The body of the ``pytest_pyfunc_call`` wrapper: profile the test body; under a
        measured backend, run it warmup + rounds times.

        The first invocation is pytest's own (the wrapper's ``yield``); the others call the
        ``pytest_pyfunc_call`` hook again, so every round goes through the same hook chain
        (other plugins' wrappers, pytest's async and return-value checks) with the same fixture
        values: fixtures are set up once per test, the body runs once per round. Those inner
        calls pass straight through the wrapper (``_rounds_key`` is set)."""
        if not is_profiled(item) or _rounds_key in item.stash:
            return (yield)
        plan = self.plan(item)
        rounds = Rounds(plan, lambda: self.make_profiler(plan), item.stash.get(_region_key, None))
        item.stash[_rounds_key] = rounds
        try:
            rounds.begin()
            try:
                outcome = yield
            finally:
                rounds.end()
            while rounds.index < rounds.total:
                rounds.begin()
                try:
                    item.ihook.pytest_pyfunc_call(pyfuncitem=item)
                finally:
                    rounds.end()
            return outcome
        finally:
            del item.stash[_rounds_key]
            if rounds.results:
                item.stash[_result_key] = (rounds.results, rounds.backend_version)

    def finish_test(self, item: pytest.Item, call: pytest.CallInfo[None],
                    report: pytest.TestReport) -> None:
        """The ``pytest_runtest_makereport`` step: judge a profiled test that passed and turn
        it into a failure with the gate's table when it regressed (a failing test is not judged
        and records nothing)."""
        captured = item.stash.get(_result_key, None) if call.when == "call" else None
        if captured is None:
            return
        results, backend_version = captured
        self.write_trace(item.nodeid, representative(results))  # the median round
        if not report.passed:
            return
        path, line, _ = item.location
        outcome = self.judge(item.nodeid, (path, (line or 0) + 1), results, self.plan(item),
                             backend_version)
        report.neuronprof = outcome.to_json()  # travels to the xdist controller with the report
        properties = [
            ("neuron_device_time_us", round(outcome.current.total_device_time_us, 3)),
            ("neuron_delta", "" if outcome.delta is None else round(outcome.delta, 6)),
            ("neuron_verdict", str(outcome.verdict.status)),
        ]
        item.user_properties.extend(properties)
        report.user_properties.extend(properties)
        if outcome.verdict.failed:
            from ..outputs.terminal import failure_section

            report.outcome = "failed"
            report.longrepr = failure_section(outcome)
        else:
            message = self.strict_failure(outcome)
            if message:
                report.outcome = "failed"
                report.longrepr = message

    def collect(self, report: pytest.TestReport) -> None:
        """Keep the outcome a test's report carries (from this process or an xdist worker)."""
        data = getattr(report, "neuronprof", None)
        if data is not None and report.when == "call" and not self.worker:
            self.outcomes.append(TestOutcome.from_json(data))

    def summarize(self, nodeid: str, results: list[Any], plan: TestPlan,
                  backend_version: str) -> tuple[Any, Any]:
        """(current summary, baseline or None). Measured rounds keep per-round samples of the
        ops the gate weighs: the current hotspots, and when comparing, the baseline's too."""
        import torch

        from ..gate.summary import summarize_rounds

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
            verdict = Verdict(Status.RECORDED)
        elif baseline is None:
            verdict = Verdict(Status.NO_BASELINE, message=f"no baseline for {current.variant}")
        else:
            verdict = compare(baseline, current, plan.policy)
        return TestOutcome(nodeid, location, verdict, current, baseline)

    def strict_failure(self, outcome: TestOutcome) -> str | None:
        """Under --neuron-strict, a test with no (comparable) baseline fails with this message."""
        if not self.options.strict or outcome.verdict.status not in NOT_COMPARED:
            return None
        from ..outputs.terminal import update_command

        why = outcome.verdict.message
        return (f"--neuron-strict: {outcome.nodeid} was not compared ({why}); "
                f"record its baseline with {update_command(outcome.nodeid)}")

    def write_trace(self, nodeid: str, result: Any) -> Path | None:
        """Write a test's trace; a failure (disk full, ...) is a warning, never a lost verdict."""
        if self.options.trace_dir is None:
            return None
        from ..profiler.trace import write_chrome_trace

        path = self.options.trace_dir / trace_file_name(nodeid)
        try:
            write_chrome_trace(result, path)
        except OSError as exc:
            import warnings

            warnings.warn(f"pytest-neuronprof: could not write the trace {path}: "
                          f"{exc.strerror or exc}", stacklevel=2)
            return None
        return path

    # -- session end ---------------------------------------------------------------------------

    def finish(self) -> None:
        """Session end (controller only): write recorded baselines, the JSON report, the page."""
        if self.worker:
            return
        if self.options.record:
            self.written += self.store.save(
                (o.nodeid, o.current) for o in self.outcomes if o.verdict.status == Status.RECORDED)
        if self.options.report is not None:
            from ..outputs.json_report import json_report

            atomic_write_text(self.options.report, json_report(self.outcomes))
        if self.options.html is not None:
            from ..outputs.html import write_html

            write_html(self.options.html, self.outcomes, self.options.trace_dir)

    def terminal_summary(self, terminalreporter: Any, rootpath: Path) -> None:
        if self.worker or not self.outcomes:
            return
        from ..outputs.github import publish
        from ..outputs.terminal import improvements_text, notices, session_table

        outcomes = sorted(self.outcomes, key=lambda o: o.nodeid)
        tr = terminalreporter
        tr.write_sep("=", "neuron device-time profile")
        tr.write_line(session_table(outcomes))
        for line in notices(outcomes, self.options.strict):
            tr.write_line(line)
        text = improvements_text(outcomes)
        if text:
            tr.write_sep("-", "improvements")
            tr.write_line(text)
        if self.options.record:
            changed = ", ".join(show_path(p) for p in self.written) or "none (all unchanged)"
            tr.write_line(f"baselines recorded: {len(outcomes)} tests; files changed: {changed}")
        publish(outcomes, tr.write_line, rootpath)  # GitHub Actions output; elsewhere nothing
