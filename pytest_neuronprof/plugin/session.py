"""The plugin's session: options, the baseline files, and each profiled test's fate, from its
plan to its verdict and the outputs. ``plugin/__init__.py`` holds the pytest hooks, each of which
hands off to a method here. Nothing here imports torch until a profiled test runs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Generator, Iterable

import pytest

from ..errors import ConfigError, NeuronProfError
from ..files import OutputError, atomic_write_text, show_path
from ..gate.baseline import BaselineStore, baseline_path
from ..gate.compare import NOT_COMPARED, Status, Verdict, compare, hotspots
from ..gate.outcome import TestOutcome
from ..gate.summary import ProfileSummary, variant
from ..outputs.trace_files import trace_file_name
from .locate import BaselineLocator
from .marker import MARKER, TestPlan, make_plan, unknown_op_names
from .options import Options
from .regions import ProfileRegion, Rounds, representative

FIXTURE = "neuron_profile"
_result_key = pytest.StashKey[Any]()
_plan_key = pytest.StashKey[TestPlan]()
_region_key = pytest.StashKey[ProfileRegion]()
_rounds_key = pytest.StashKey[Rounds]()
_PROPERTIES = ("neuron_device_time_us", "neuron_delta", "neuron_verdict")
NOT_PROFILED = ("not profiled: it requests the neuron_profile fixture but never entered "
                "`with neuron_profile:`")


def is_profiled(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(item, "fixturenames", ())


def _inside(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def _probe(folder: Path, path: Path, option: str) -> None:
    """OutputError naming ``path`` when no file can be created in ``folder`` (read-only, full)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".neuronprof-probe-", dir=folder)
    except OSError as exc:
        raise OutputError(path, f"{option}: cannot create a file in {show_path(folder)} "
                                f"({exc.strerror or exc})", exc.errno) from None
    os.close(fd)
    os.unlink(probe)


class NeuronSession:
    """One per pytest run (and per xdist worker; only the controller writes outputs)."""

    def __init__(self, options: Options, worker: bool = False) -> None:
        self.options = options
        self.worker = worker
        explicit = options.baseline_dir.resolve() if options.baseline_dir is not None else None
        self.locator = BaselineLocator(explicit, options.ini_dir, options.rootdir.resolve())
        self._validated: set[Path] = set()
        # by node id: a test that pytest-rerunfailures runs again counts once, as its last run
        self.outcomes: dict[str, TestOutcome] = {}
        self.written: list[Path] = []
        self.errors: list[str] = []  # outputs that failed at the end; raised once pytest is done

    # -- session start ---------------------------------------------------------------------

    def start(self) -> None:
        """Check what can be checked before any test runs: the backend, and (once, on the
        controller) the baseline files and every output path."""
        self.check_backend()
        if not self.worker:
            known = self.locator.known_dirs(list(self.options.test_paths))
            for directory in known:
                self.store(directory)
            self.check_outputs(known)

    def check_backend(self) -> None:
        """ConfigError when this machine cannot run the session's backend (no CUDA GPU, no
        torch_neuronx): said once at the start, not by every test."""
        if self.options.backend in ("cuda", "neuron"):
            from ..profiler.backends.measured import check_available

            check_available(self.options.backend)

    def check_outputs(self, baseline_dirs: Iterable[Path]) -> None:
        """Every output path, checked before any test runs: none inside a baseline directory
        (only baseline files are baselines), folders created, each writable. A path that
        cannot be written is a usage error now, not a lost output after the whole run."""
        outputs = [("--neuron-report", self.options.report), ("--neuron-trace-dir", self.options.trace_dir),
                   ("--neuron-html", self.options.html)]
        for option, path in outputs:
            for directory in baseline_dirs:
                if path is not None and _inside(path, directory):
                    raise ConfigError(f"{option} {show_path(path)} is inside the baseline directory "
                                      f"{show_path(directory)}, where only baseline files belong; "
                                      "write it elsewhere")
        for option, folder in outputs[1:]:
            if folder is None:
                continue
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OutputError(folder, f"cannot create the {option} folder "
                                          f"({exc.strerror or exc})", exc.errno) from None
            _probe(folder, folder, option)
        report = self.options.report
        if report is not None:
            if report.is_dir():
                raise OutputError(report, "it is a directory; give --neuron-report (ini neuron_report) "
                                          "a file name")
            try:
                report.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OutputError(report, f"cannot create its folder {show_path(report.parent)} "
                                          f"({exc.strerror or exc})", exc.errno) from None
            _probe(report.parent, report, "--neuron-report")

    def store(self, directory: Path) -> BaselineStore:
        """The store of a baseline directory; every file in it is validated the first time it
        is used, so a broken file stops the run whichever test meets it first."""
        store = self.locator.store(directory)
        if directory not in self._validated:
            self._validated.add(directory)
            store.validate_all()
        return store

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
        return NeuronProfiler(NeuronConfig(hardware=plan.hardware, execution=plan.execution),
                              backend=self.options.backend, threads=threads)

    def region(self, item: pytest.Item) -> ProfileRegion:
        """The ``neuron_profile`` fixture's value for ``item``."""
        region = ProfileRegion(lambda: self.make_profiler(self.plan(item)), self.options.backend)
        item.stash[_region_key] = region
        return region

    @staticmethod
    def refuse_benchmark(item: pytest.Item) -> None:
        """pytest-benchmark's ``benchmark`` fixture calls the code as many times as fit its
        wall-clock calibration: profiled, the device time would follow that count (10.1 ms, then
        7.0 ms, reported as an improvement). Refused, unless benchmarking is disabled
        (``--benchmark-disable``: one call)."""
        bench = getattr(item, "funcargs", {}).get("benchmark")
        if bench is None or not type(bench).__module__.startswith("pytest_benchmark"):
            return
        if getattr(bench, "disabled", False):
            return
        pytest.fail(f"{item.nodeid}: pytest-benchmark's `benchmark` fixture runs the code a number "
                    "of times it calibrates on wall-clock time, so the profiled device time would "
                    "change from run to run; profile the code in a test without `benchmark`, or run "
                    "with --benchmark-disable (benchmark() then calls it once)", pytrace=False)

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
        if _result_key in item.stash:  # a rerun (pytest-rerunfailures) starts afresh
            del item.stash[_result_key]
        plan = self.plan(item)
        self.refuse_benchmark(item)
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
        and records nothing). A test that requested the fixture and never entered a region is
        reported as not profiled."""
        if call.when != "call" or not is_profiled(item) or _plan_key not in item.stash:
            return
        captured = item.stash.get(_result_key, None)
        if captured is None:
            if report.passed:
                self.attach(item, report, self.not_profiled(item))
            return
        results, backend_version = captured
        self.write_trace(item.nodeid, representative(results))  # the median round
        if not report.passed:
            return
        try:
            outcome = self.judge(item, results, backend_version)
        except NeuronProfError as exc:  # a broken baseline file met by this test: stop the run
            raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None
        marker = item.get_closest_marker(MARKER)
        known = {r.name for result in results for r in result.records}
        known |= set(outcome.baseline.ops) if outcome.baseline is not None else set()
        problem = unknown_op_names(dict(marker.kwargs) if marker else {}, known)
        if problem is not None:
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid}: {problem}"
            return
        self.attach(item, report, outcome)

    def not_profiled(self, item: pytest.Item) -> TestOutcome:
        directory, key = self.locator.locate(item.path, item.nodeid)
        current = ProfileSummary(self.options.backend, self.plan(item).hardware, "", "", 0.0)
        return TestOutcome(item.nodeid, self.location(item), Verdict(Status.NOT_PROFILED, message=NOT_PROFILED),
                           current, None, key, str(directory))

    @staticmethod
    def location(item: pytest.Item) -> tuple[str, int]:
        path, line, _ = item.location
        return path, (line or 0) + 1

    def attach(self, item: pytest.Item, report: pytest.TestReport, outcome: TestOutcome) -> None:
        """Hang the outcome on the report (it travels to the xdist controller with it), set the
        JUnit properties (once, however often the test ran) and fail the test if it must."""
        report.neuronprof = outcome.to_json()
        profiled = outcome.verdict.status != Status.NOT_PROFILED
        properties = [
            ("neuron_device_time_us", round(outcome.current.total_device_time_us, 3) if profiled else ""),
            ("neuron_delta", "" if outcome.delta is None else round(outcome.delta, 6)),
            ("neuron_verdict", str(outcome.verdict.status)),
        ]
        for kept in (item.user_properties, report.user_properties):
            kept[:] = [p for p in kept if p[0] not in _PROPERTIES] + properties
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
        """Keep the outcome a test's report carries (from this process or an xdist worker); a
        test run again (pytest-rerunfailures) counts once, as its last run."""
        data = getattr(report, "neuronprof", None)
        if data is not None and report.when == "call" and not self.worker:
            outcome = TestOutcome.from_json(data)
            self.outcomes.pop(outcome.nodeid, None)
            self.outcomes[outcome.nodeid] = outcome

    def summarize(self, results: list[Any], plan: TestPlan, backend_version: str,
                  store: BaselineStore, key: str) -> tuple[Any, Any]:
        """(current summary, baseline or None). Measured rounds keep per-round samples of the
        ops the gate weighs: the current hotspots, and when comparing, the baseline's too."""
        import torch

        from ..gate.summary import summarize_rounds

        first = results[0]
        baseline = store.load(key, variant(first.backend, first.hardware, first.execution))
        if not plan.measured:
            return summarize_rounds(results, backend_version, torch.__version__), baseline

        def sample_ops(summary: Any) -> set[str]:
            names = set(hotspots(summary, plan.policy))
            if baseline is not None and not self.options.record:
                names |= set(hotspots(baseline, plan.policy))
            return names

        return summarize_rounds(results, backend_version, torch.__version__, sample_ops), baseline

    def judge(self, item: pytest.Item, results: Any, backend_version: str) -> TestOutcome:
        """Summarize a test's profile (one result, or one per round) and compare it with its
        baseline (or mark it recorded)."""
        if not isinstance(results, (list, tuple)):
            results = [results]
        plan = self.plan(item)
        directory, key = self.locator.locate(item.path, item.nodeid)
        current, baseline = self.summarize(list(results), plan, backend_version, self.store(directory), key)
        if self.options.record:
            verdict = Verdict(Status.RECORDED)
        elif baseline is None:
            verdict = Verdict(Status.NO_BASELINE, message=f"no baseline for {current.variant}")
        else:
            verdict = compare(baseline, current, plan.policy)
        return TestOutcome(item.nodeid, self.location(item), verdict, current, baseline, key,
                           str(directory))

    def strict_failure(self, outcome: TestOutcome) -> str | None:
        """Under --neuron-strict, a test with no (comparable) baseline fails with this message."""
        if not self.options.strict or outcome.verdict.status not in NOT_COMPARED:
            return None
        from ..outputs.terminal import update_command

        why = outcome.verdict.message
        fix = ("profile the code with `with neuron_profile:`, or drop the fixture"
               if outcome.verdict.status == Status.NOT_PROFILED
               else f"record its baseline with {update_command(outcome.nodeid)}")
        return f"--neuron-strict: {outcome.nodeid} was not compared ({why}); {fix}"

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
        """Session end (controller only): write recorded baselines, the JSON report and the page,
        each on its own, so that one that fails loses no other; what failed is raised once pytest
        has printed its summary (``end_errors``)."""
        if self.worker:
            return
        outcomes = sorted(self.outcomes.values(), key=lambda o: o.nodeid)
        if self.options.record:
            by_dir: dict[str, list[TestOutcome]] = {}
            for o in outcomes:
                if o.verdict.status == Status.RECORDED:
                    by_dir.setdefault(o.baseline_dir, []).append(o)
            for directory, recorded in sorted(by_dir.items()):
                self._output(lambda: self.written.extend(self.locator.store(Path(directory)).save(
                    (o.baseline_key, o.current) for o in recorded)))
        if self.options.report is not None:
            from ..outputs.json_report import json_report

            report = self.options.report
            self._output(lambda: atomic_write_text(report, json_report(outcomes)))
        if self.options.html is not None:
            from ..outputs.html import write_html

            html, traces = self.options.html, self.options.trace_dir
            self._output(lambda: write_html(html, outcomes, traces))
        if not self.options.record:
            self._output(lambda: self.check_matched(outcomes))

    def _output(self, write: Any) -> None:
        try:
            write()
        except (NeuronProfError, OSError) as exc:
            self.errors.append(str(exc))

    def check_matched(self, outcomes: list[TestOutcome]) -> None:
        """Baseline files that none of the profiled tests finds an entry in are a sign of a key
        that moved (another rootdir, another layout): said as an error, not a silent pass."""
        if not outcomes or any(o.verdict.status != Status.NO_BASELINE for o in outcomes):
            return
        for o in outcomes:  # an entry for another variant (other hardware) is a match
            if o.baseline_key in self.locator.store(Path(o.baseline_dir)).read_file(
                    baseline_path(Path(o.baseline_dir), o.baseline_key)):
                return
        dirs = sorted({Path(o.baseline_dir) for o in outcomes})
        keys = [key for directory in dirs if directory.is_dir()
                for path in sorted(directory.rglob("*.json"))
                for key in self.locator.store(directory).read_file(path)]
        if not keys:
            return
        from ..outputs.terminal import update_command

        first = outcomes[0]
        looked = baseline_path(Path(first.baseline_dir), first.baseline_key)
        raise NeuronProfError(
            f"none of the {len(outcomes)} profiled tests has an entry in its baseline file, although "
            f"{', '.join(show_path(d) for d in dirs)} holds {len(keys)} entr{'y' if len(keys) == 1 else 'ies'} "
            f"(e.g. {keys[0]!r}): {first.nodeid} was looked up as {first.baseline_key!r} in "
            f"{show_path(looked)}{' (and so on)' if len(outcomes) > 1 else ''}. If the tests are new, "
            f"record them with {update_command(*(o.nodeid for o in outcomes[:3]))}"
            f"{' ...' if len(outcomes) > 3 else ''}; if the baselines were recorded under other keys "
            "(another layout, another --neuron-baseline-dir), point --neuron-baseline-dir (ini "
            "neuron_baseline_dir) at the right directory or re-record them")

    def end_errors(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors

    def terminal_summary(self, terminalreporter: Any, rootpath: Path) -> None:
        if self.worker or not self.outcomes:
            return
        from ..outputs.github import publish
        from ..outputs.terminal import improvements_text, not_compared_line, notices, session_table, uncosted_lines

        outcomes = sorted(self.outcomes.values(), key=lambda o: o.nodeid)
        tr = terminalreporter
        tr.write_sep("=", "neuron device-time profile")
        tr.write_line(session_table(outcomes))
        for line in [not_compared_line(outcomes), *notices(outcomes, self.options.strict),
                     *uncosted_lines(outcomes)]:
            if line:
                tr.write_line(line)
        text = improvements_text(outcomes)
        if text:
            tr.write_sep("-", "improvements")
            tr.write_line(text)
        if self.options.record:
            changed = ", ".join(show_path(p) for p in self.written) or "none (all unchanged)"
            recorded = sum(o.verdict.status == Status.RECORDED for o in outcomes)
            tr.write_line(f"baselines recorded: {recorded} tests; files changed: {changed}")
        publish(outcomes, tr.write_line, rootpath)  # GitHub Actions output; elsewhere nothing
