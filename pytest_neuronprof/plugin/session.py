"""The plugin's session: options, the baseline files, and each profiled test's fate, from its
plan to its verdict and the outputs. ``plugin/__init__.py`` holds the pytest hooks, each of which
hands off to a method here. The outputs are those ``outputs/registry.py`` lists: their paths are
checked at the start (``preflight.py``), and each is written per test or at the end, its errors
kept for the summary (``outputs/terminal.py``). Nothing here imports torch until a profiled test
runs."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Generator, Iterable, Sequence

import pytest

from ..errors import NeuronProfError
from ..files import os_reason, show_path
from ..defaults import DEFAULT_AUTO_CAST, RESIMULATED_BASE_VARIABLE
from ..formatting import record_command
from ..gate.baseline import BaselineStore, baseline_path
from ..gate.accepted import with_reason
from ..gate.compare import NOT_COMPARED, Status, Verdict, hotspots, uncompared, with_memory_limit
from ..gate.judge import judge
from ..gate.policy import marker_layer, resolve_policy
from ..gate.outcome import TestOutcome
from ..gate.summary import ProfileSummary, variant
from ..vocabulary import GRAPH
from ..outputs import registry
from ..outputs.registry import SessionOutput
from ..outputs.terminal import WriteLog, failure_section, not_compared_fix, write_summary
from ..outputs.trends import PROJECT_ROOT
from ..safetext import MAX_MESSAGE_CHARS, plain
from .locate import BaselineLocator
from .marker import MARKER, TestPlan, make_plan, unknown_op_names
from .options import Options
from .preflight import check_outputs, output_paths
from .regions import ProfileRegion, Rounds, representative

FIXTURE = "neuron_profile"
_result_key = pytest.StashKey[Any]()
_plan_key = pytest.StashKey[TestPlan]()
_region_key = pytest.StashKey[ProfileRegion]()
_rounds_key = pytest.StashKey[Rounds]()
_PROPERTIES = ("neuron_device_time_us", "neuron_delta", "neuron_verdict")
NOT_PROFILED = ("not profiled: it requests the neuron_profile fixture but never entered "
                "`with neuron_profile:`")
NOT_A_FUNCTION = ("not profiled: pytest did not run it as a test function the plugin profiles (a "
                  "unittest.TestCase method, or an item of another plugin); write it as a pytest "
                  "test function")


def is_partial(message: str) -> bool:
    """A verdict's message says its profile missed work handed to other threads."""
    return message.startswith(PARTIAL_PROFILE)


PARTIAL_PROFILE = "not fully profiled"  # profiler/threads.py's not_fully_profiled begins so


def junit_properties(outcomes: Sequence[TestOutcome]) -> list[tuple[str, object]]:
    """The JUnit properties of a test: device time, delta and verdict of its (first) chip,
    unsuffixed as a one-chip run has them; with several chips, also each chip's, suffixed
    with it (``neuron_verdict[h200]``), so a dashboard reads every chip of the test."""
    def one(outcome: TestOutcome, suffix: str = "") -> list[tuple[str, object]]:
        profiled = outcome.verdict.status != Status.NOT_PROFILED
        return [
            ("neuron_device_time_us" + suffix, round(outcome.current.total_device_time_us, 3) if profiled else ""),
            ("neuron_delta" + suffix, "" if outcome.delta is None else round(outcome.delta, 6)),
            ("neuron_verdict" + suffix, str(outcome.verdict.status)),
        ]

    properties = one(outcomes[0])
    if len(outcomes) > 1:
        for outcome in outcomes:
            properties += one(outcome, f"[{outcome.current.hardware}]")
    return properties


def is_neuron_property(name: str) -> bool:
    """One of ``junit_properties``' names, a chip's included."""
    return name.partition("[")[0] in _PROPERTIES


# The marker arguments that select a test's variant, as the re-record command's options name them
_VARIANT_ARGS = ("hardware", "execution", "auto_cast")


def marker_selects(item: pytest.Item) -> tuple[str, ...]:
    """Which of its variant's options a test's marker sets (the command that re-records it needs
    none of them: outputs/hints.py)."""
    marker = item.get_closest_marker(MARKER)
    return tuple(arg for arg in _VARIANT_ARGS if marker is not None and arg in marker.kwargs)


def is_profiled(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(item, "fixturenames", ())


class NeuronSession:
    """One per pytest run (and per xdist worker; only the controller writes outputs)."""

    def __init__(self, options: Options, worker: bool = False,
                 outputs: Sequence[SessionOutput] | None = None) -> None:
        self.options = options
        # outputs/registry.py's list (as it is now: the one options.py declared the options of)
        self.outputs = registry.SESSION_OUTPUTS if outputs is None else outputs
        self.worker = worker
        explicit = options.baseline_dir.resolve() if options.baseline_dir is not None else None
        self.locator = BaselineLocator(explicit, options.ini_dir, options.rootdir.resolve(),
                                       options.baseline_max_bytes)
        self._validated: set[Path] = set()
        self._ref_stores: dict[Path, BaselineStore] = {}  # --neuron-baseline-ref: per directory
        self._repository: Any = None  # the project's git repository (gate/gitref.py), found once
        self.base_settings: Any = None  # --neuron-baseline-ref: the base's settings (base_config.py)
        # by (node id, variant): one per chip of a test (--neuron-hardware trn2,h200); a test that
        # pytest-rerunfailures runs again counts once, as its last run
        self.outcomes: dict[tuple[str, str], TestOutcome] = {}
        self._variants: dict[str, list[str]] = {}  # node id -> its variants in ``outcomes``
        self.paths = output_paths(options, self.outputs)  # those whose option is given, with their path
        # what the end wrote and not, for the summary (with what became of --neuron-reason)
        self.log = WriteLog(record=options.record, reason=options.reason)
        self.test_errors: dict[SessionOutput, list[str]] = {}  # per-test files not written here
        self.errors: list[str] = []  # outputs that failed at the end; raised once pytest is done
        # A run stopped early (Ctrl-C, -x) records the tests that finished: which did not is said
        self.profiled_ids: list[str] | None = None  # collected here (not on an xdist controller)
        self.narrowed_everywhere = False  # -k, -m: tests of any module may be left out
        self.narrowed_files: set[Path] = set()  # test files some of whose tests are left out
        # test files (as pytest's locations name them) with a test skipped, failed or errored
        self.partial_files: set[str] = set()
        self.stale: list[Any] = []  # baseline entries no test produced (plugin/locate.py's Stale)
        self.stale_lines: list[str] = []  # those a recording removed, as the summary names them
        self.not_gated: list[TestOutcome] = []  # against a ref: the base's entries no test produced
        # the test paths the CI job gave (its command line, PYTEST_ADDOPTS; none: the folder it
        # ran in), not the change's testpaths or addopts: what the base's entries are listed for
        self.job_paths: tuple[Path, ...] = options.test_paths
        self.finished_ids: set[str] = set()

    # -- session start ---------------------------------------------------------------------

    def start(self) -> None:
        """Check what can be checked before any test runs: the backend, and (once, on the
        controller) the baseline files and every output path."""
        self.check_backend()
        if not self.worker:
            known = self.locator.known_dirs(list(self.options.test_paths))
            for directory in known:
                self.store(directory)
                self.gate_store(directory)
            check_outputs(self.paths, known)

    def check_backend(self) -> None:
        """ConfigError when this machine cannot run the session's backend (no CUDA GPU, no
        torch_neuronx): said once at the start, not by every test."""
        if self.options.facts.requires:
            from ..profiler.backends.measured import check_available

            check_available(self.options.backend)

    def store(self, directory: Path) -> BaselineStore:
        """The store of a baseline directory; every file in it is validated the first time it
        is used, so a broken file stops the run whichever test meets it first."""
        store = self.locator.store(directory)
        if directory not in self._validated:
            self._validated.add(directory)
            store.validate_all()
        return store

    def gate_store(self, directory: Path) -> BaselineStore:
        """The store a run is gated against: the directory's files as they are at
        --neuron-baseline-ref (validated once, like the working tree's), else ``store``."""
        ref = self.options.baseline_ref
        if ref is None:
            return self.store(directory)
        store = self._ref_stores.get(directory)
        if store is None:
            from ..gate.gitref import RefBaselineStore

            store = self._ref_stores[directory] = RefBaselineStore(
                directory, ref, self.repository(), self.options.baseline_max_bytes)
            store.validate_all()
        return store

    def at_base(self, repository: Any, base: Any) -> None:
        """Gated against a ref: the repository found for it, and the base's settings (what this
        change changes of them is said in the summary)."""
        self._repository, self.base_settings = repository, base

    def unexplained_settings(self) -> bool:
        """This change sets verdict-deciding settings otherwise than the base, with no reason."""
        return not self.worker and self.base_settings is not None and self.base_settings.unexplained

    def repository(self) -> Any:
        """The project's git repository, found once from pytest's rootdir (never from a
        baseline directory, which a pull request's files could make a repository of its own)."""
        if self._repository is None:
            from ..gate.gitref import find_repository

            self._repository = find_repository(self.options.rootdir)
        return self._repository

    # -- one test ----------------------------------------------------------------------------

    def plan(self, item: pytest.Item) -> TestPlan:
        """The test's plan from its marker; a bad marker argument fails the test, naming it."""
        known = item.stash.get(_plan_key, None)
        if known is not None:
            return known
        marker = item.get_closest_marker(MARKER)
        if marker is not None and marker.args:
            pytest.fail(f"{item.nodeid}: @pytest.mark.{MARKER} takes keyword arguments only, "
                        f"got positional {marker.args!r}", pytrace=False)
        try:
            plan = make_plan(self.options, dict(marker.kwargs) if marker else {})
        except NeuronProfError as exc:
            problem = f"{item.nodeid}: {exc}"
        else:
            item.stash[_plan_key] = plan
            return plan
        pytest.fail(problem, pytrace=False)  # outside the except: no "During handling of..." chain

    def make_profiler(self, plan: TestPlan) -> Any:
        from ..profiler.config import NeuronConfig
        from ..profiler.profiler import NeuronProfiler

        threads = self.options.cpu_threads if self.options.facts.threads else None
        # several chips: the capture is kept, to cost it on the others (regions.stop_on_chips)
        return NeuronProfiler(NeuronConfig(hardware=plan.hardware, execution=plan.execution,
                                           auto_cast=plan.auto_cast),
                              backend=self.options.backend, threads=threads,
                              keep_capture=bool(plan.chips))

    def region(self, item: pytest.Item) -> ProfileRegion:
        """The ``neuron_profile`` fixture's value for ``item``."""
        region = ProfileRegion(lambda: self.make_profiler(self.plan(item)), self.options.backend,
                               lambda: self.plan(item).chips)
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
                item.stash[_result_key] = (rounds.by_chip, rounds.backend_version)

    def finish_test(self, item: pytest.Item, call: pytest.CallInfo[None],
                    report: pytest.TestReport) -> None:
        """The ``pytest_runtest_makereport`` step: judge a profiled test that passed and turn
        it into a failure with the gate's table when it regressed (a failing test is not judged
        and records nothing). A test that requested the fixture and never entered a region is
        reported as not profiled. A test costed on several chips is judged on each, against each
        chip's own baseline, and fails when one of them fails."""
        if call.when != "call" or not is_profiled(item):
            return
        if _plan_key not in item.stash:  # pytest never called it as a test function
            if report.passed:
                self.attach(item, report, self.not_profiled(item, NOT_A_FUNCTION))
            return
        captured = item.stash.get(_result_key, None)
        if captured is None:
            if report.passed:
                self.attach(item, report, self.not_profiled(item))
            return
        by_chip, backend_version = captured
        first = next(iter(by_chip.values()))
        for results in by_chip.values():  # the median round; each chip's trace named with its variant
            shown = representative(results)
            chip = variant(shown.backend, shown.hardware, shown.execution, shown.auto_cast)
            self.write_test_files(item.nodeid if len(by_chip) == 1 else f"{item.nodeid} [{chip}]", shown)
        if not report.passed:
            return
        try:
            outcomes = [self.judge(item, results, backend_version) for results in by_chip.values()]
        except NeuronProfError as exc:  # a broken baseline file met by this test: stop the run
            raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None
        marker = item.get_closest_marker(MARKER)
        known = {r.name for result in first for r in result.records}
        for outcome in outcomes:
            known |= set(outcome.baseline.ops) if outcome.baseline is not None else set()
        problem = unknown_op_names(dict(marker.kwargs) if marker else {}, known)
        if problem is not None:
            report.outcome = "failed"
            report.longrepr = f"{item.nodeid}: {plain(problem, MAX_MESSAGE_CHARS)}"  # names baseline ops
            return
        self.attach(item, report, outcomes)

    def not_profiled(self, item: pytest.Item, why: str = NOT_PROFILED) -> list[TestOutcome]:
        """One outcome per chip of the test: it entered no region (``why``), with the baseline
        entry it had (a test that lost its profile loses its gate: ``lost_gate``)."""
        directory, key = self.locator.locate(item.path, item.nodeid)
        plan = self.plan(item)
        outcomes = []
        for chip in plan.chips or (plan.hardware,):
            current = ProfileSummary(self.options.backend, chip, "", "", 0.0, execution=plan.execution,
                                     auto_cast=plan.auto_cast if plan.execution == GRAPH else DEFAULT_AUTO_CAST)
            baseline = self.gate_store(directory).load(key, current.variant)
            outcomes.append(self.with_base(TestOutcome(item.nodeid, self.location(item),
                                                       Verdict(Status.NOT_PROFILED, message=why),
                                                       current, baseline, key, str(directory),
                                                       marker_selects=marker_selects(item))))
        return outcomes

    @staticmethod
    def location(item: pytest.Item) -> tuple[str, int]:
        path, line, _ = item.location
        return path, (line or 0) + 1

    def attach(self, item: pytest.Item, report: pytest.TestReport, outcomes: list[TestOutcome]) -> None:
        """Hang the outcomes on the report (they travel to the xdist controller with it: one
        outcome's JSON, or a list of them for several chips), set the JUnit properties (once,
        however often the test ran) and fail the test if it must: with a section per chip that
        failed."""
        data = [o.to_json() for o in outcomes]
        report.neuronprof = data[0] if len(data) == 1 else data  # type: ignore[attr-defined]  # pytest keeps extra attributes
        properties = junit_properties(outcomes)
        for kept in (item.user_properties, report.user_properties):
            kept[:] = [p for p in kept if not is_neuron_property(p[0])] + properties
        failures = [failure_section(o, outcomes) if o.verdict.failed else self.unjudged_failure(o, outcomes)
                    for o in outcomes]
        if any(failures):
            report.outcome = "failed"
            report.longrepr = "\n\n".join(f for f in failures if f)
            if hasattr(report, "wasxfail"):  # a slower test is no expected failure (xfail)
                del report.wasxfail

    def collect(self, report: pytest.TestReport) -> None:
        """Keep the outcome a test's report carries (from this process or an xdist worker); a
        test run again (pytest-rerunfailures) counts once, as its last run."""
        data = getattr(report, "neuronprof", None)
        if (report.skipped or (report.failed and data is None)) and not self.worker:
            self.partial_files.add(report.location[0])  # a test that produced no entry
        if data is not None and report.when == "call" and not self.worker:
            outcomes = [TestOutcome.from_json(d) for d in (data if isinstance(data, list) else [data])]
            for earlier in self._variants.pop(report.nodeid, ()):  # a rerun's earlier run
                self.outcomes.pop((report.nodeid, earlier), None)
            for outcome in outcomes:
                self.outcomes[(outcome.nodeid, outcome.current.variant)] = outcome
                self._variants.setdefault(outcome.nodeid, []).append(outcome.current.variant)

    def summarize(self, results: list[Any], plan: TestPlan, backend_version: str,
                  store: BaselineStore, key: str, root: str | None = None) -> tuple[Any, Any]:
        """(current summary, baseline or None). Measured rounds keep per-round samples of the
        ops the gate weighs: the current hotspots, and when comparing, the baseline's too.
        ``root``: the folder the test's key is relative to, which the files that compiled graphs
        name are relative to as well (locate.BaselineLocator.source_root)."""
        import torch

        from ..gate.summary import summarize_rounds

        first = results[0]
        baseline = store.load(key, variant(first.backend, first.hardware, first.execution,
                                           first.auto_cast))
        if not plan.measured:
            return summarize_rounds(results, backend_version, torch.__version__, root=root), baseline

        def sample_ops(summary: Any) -> set[str]:
            names = set(hotspots(summary, plan.policy))
            if baseline is not None and not self.options.record:
                names |= set(hotspots(baseline, plan.policy))
            return names

        return summarize_rounds(results, backend_version, torch.__version__, sample_ops,
                                root=root), baseline

    def judge(self, item: pytest.Item, results: Any, backend_version: str) -> TestOutcome:
        """Summarize a test's profile (one result, or one per round) and compare it with its
        baseline (or mark it recorded)."""
        if not isinstance(results, (list, tuple)):
            results = [results]
        plan = self.plan(item)
        directory, key = self.locator.locate(item.path, item.nodeid)
        current, baseline = self.summarize(list(results), plan, backend_version,
                                           self.gate_store(directory), key,
                                           str(self.locator.source_root(item.path)))
        current = replace(current, policy=plan.marker_policy)  # recorded with the numbers

        def policy_for(marker: Any) -> Any:  # the options' settings, this marker on top
            return with_memory_limit(resolve_policy(self.options.backend, self.options.policy_overrides,
                                                    marker_layer(marker or {})),
                                     current.hardware, current.backend)

        uncaptured = sorted({thread for result in results for thread in result.uncaptured})
        if uncaptured:  # a partial profile: neither recorded nor compared, said in every output
            from ..profiler.threads import not_fully_profiled

            verdict = Verdict(Status.INCOMPARABLE, message=not_fully_profiled(uncaptured))
        elif self.options.record:
            named = not self.selected_all(item.path)
            current = with_reason(current, baseline, self.options.reason, named)
            verdict = uncompared(current, policy_for(current.policy), Status.RECORDED)
        else:
            where = f" at {self.options.baseline_ref}" if self.options.baseline_ref else ""
            # against a ref, the change's own entry: what it accepted, and with what reason
            own = (self.store(directory).load(key, current.variant)
                   if self.options.baseline_ref is not None else None)
            verdict = judge(current, baseline, policy_for, own=own,
                            missing=f"no baseline for {current.variant}{where}")
        shown = representative(results)  # the median round: the one whose trace is written
        return self.with_base(TestOutcome(item.nodeid, self.location(item), verdict, current, baseline,
                                          key, str(directory), utilisation=shown.utilisation,
                                          recommendations=tuple(shown.recommendations()),
                                          marker_selects=marker_selects(item)))

    def with_base(self, outcome: TestOutcome) -> TestOutcome:
        """The outcome with the base it was gated against (--neuron-baseline-ref), which every
        output names."""
        base = self.base_settings
        if base is not None:
            return replace(outcome, base_ref=base.ref, base_commit=base.commit, base_subject=base.subject)
        resimulated = os.environ.get(RESIMULATED_BASE_VARIABLE, "")
        if resimulated:  # the run `neuronprof continuous` gates
            ref, commit, subject = (resimulated.split("\n") + ["", ""])[:3]
            return replace(outcome, base_ref=ref, base_commit=commit, base_subject=subject,
                           base_resimulated=True)
        return outcome

    def unjudged_failure(self, outcome: TestOutcome, siblings: Sequence[TestOutcome] = ()) -> str | None:
        """The message a test that was not judged fails with, or None when it passes: a test
        with a baseline entry that this run did not profile, or only in part, fails (its entry
        would stop being gated unseen: a fixture requested through ``usefixtures`` and never
        entered, a unittest method, work on threads the capture cannot follow); under
        --neuron-strict, any test with no (comparable) baseline. ``siblings``: its outcomes on
        every chip, re-recorded together."""
        if outcome.verdict.status not in NOT_COMPARED:
            return None
        why = plain(outcome.verdict.message, MAX_MESSAGE_CHARS)  # may quote a baseline's values
        if outcome.baseline is not None and (outcome.verdict.status == Status.NOT_PROFILED
                                             or is_partial(outcome.verdict.message)):
            where = f" at {plain(self.options.baseline_ref)}" if self.options.baseline_ref else ""
            return (f"{plain(outcome.nodeid)} has a baseline entry for {plain(outcome.current.variant)}"
                    f"{where}, but this run did not profile it ({why}): its numbers would no longer be "
                    "gated. Profile it again, or remove its entry by re-recording its module")
        if not self.options.strict:
            return None
        return (f"--neuron-strict: {outcome.nodeid} was not compared ({why}); "
                f"{not_compared_fix(outcome, siblings)}")

    def write_test_files(self, nodeid: str, result: Any) -> None:
        """Write a test's file of each per-test output (its trace); a failure (disk full, ...)
        is a warning, never a lost verdict, and one line of the summary."""
        for output, folder in self.paths.items():
            if output.test_file is None or output.write_test is None:
                continue
            path = output.test_file(folder, nodeid)
            try:
                output.write_test(result, path)
            except OSError as exc:
                import warnings

                message = f"could not write the {output.name} {show_path(path)}: {os_reason(exc)}"
                self.test_errors.setdefault(output, []).append(message)
                warnings.warn(f"pytest-neuronprof: {message}", stacklevel=2)

    # -- session end ---------------------------------------------------------------------------

    def collected(self, items: Iterable[pytest.Item]) -> None:
        self.profiled_ids = [item.nodeid for item in items if is_profiled(item)]

    def narrowed(self, everywhere: bool = False, files: Iterable[Path] = ()) -> None:
        """The run leaves tests out: of every module (``-k``, ``-m``), or of these test files
        (node ids on the command line, deselected items)."""
        self.narrowed_everywhere |= everywhere
        self.narrowed_files |= {Path(f).resolve() for f in files}

    def selected_all(self, test_file: Path) -> bool:
        """The run selected every test of ``test_file`` (no node ids, -k, -m or deselection)."""
        return not self.narrowed_everywhere and Path(test_file).resolve() not in self.narrowed_files

    def fully_ran(self, outcome: TestOutcome) -> bool:
        """Every test of the outcome's module was selected and ran to a verdict (none skipped,
        failed or errored): the module's baseline entries can be judged as a whole."""
        if self.log.stopped:  # Ctrl-C, -x: tests that never started produced nothing
            return False
        test_file = self.options.rootdir / outcome.location[0]
        return self.selected_all(test_file) and outcome.location[0] not in self.partial_files

    @staticmethod
    def stop_reason(session: pytest.Session, exitstatus: int) -> str | None:
        """Why the run ended before every collected test finished (Ctrl-C, -x), or None."""
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return "interrupted"
        reason = session.shouldfail or session.shouldstop  # "stopping after 1 failures" (-x)
        if not reason:
            return None
        return reason if isinstance(reason, str) else "stopped"

    def finish(self, stopped: str | None = None) -> None:
        """Session end (controller only): write recorded baselines, then each output written at
        the end (the JSON report, the page), each on its own, so that one that fails loses no other; what failed is raised once pytest
        has printed its summary (``end_errors``). A run ``stopped`` early (Ctrl-C, -x) writes
        every test that finished, and the summary says which did not."""
        if self.worker:
            return
        self.log.stopped = stopped
        if self.profiled_ids is not None:
            self.log.unfinished = [n for n in self.profiled_ids if n not in self.finished_ids]
        outcomes = self.sorted_outcomes()
        if self.options.record:
            self.record(outcomes)
        self.not_gated = self._output_value(lambda: self.entries_not_gated(outcomes)) or []
        reported = self.reported_outcomes()
        by_flag = {str(output.flag): path for output, path in self.paths.items()}
        by_flag[PROJECT_ROOT] = self.options.rootdir
        for output, path in self.paths.items():
            if output.write is not None:
                write = output.write
                self._output(lambda: write(path, reported, by_flag), output=True)
        for output, failed in self.test_errors.items():
            more = len(failed) - 1
            self.log.not_written.append(failed[0] + (f" (and {more} more {output.name}s)" if more else ""))
        if not self.options.record:
            self._output(lambda: self.locator.check_matched(outcomes, self.fully_ran))
            self.stale = self.locator.stale(outcomes, self.fully_ran)

    def sorted_outcomes(self) -> list[TestOutcome]:
        """By node id; a test's chips in the order they were listed."""
        return sorted(self.outcomes.values(), key=lambda o: o.nodeid)

    def reported_outcomes(self) -> list[TestOutcome]:
        """What every output lists: the tests' outcomes, and the base's entries no test gated."""
        return sorted([*self.outcomes.values(), *self.not_gated], key=lambda o: o.nodeid)

    def entries_not_gated(self, outcomes: list[TestOutcome]) -> list[TestOutcome]:
        """Gated against a ref: each entry of the base's files that no test of this run produced
        (a test renamed, removed, skipped or deselected, by the change's own ``addopts`` too),
        for the modes the run costed (backend, execution, auto-cast) and in the test files the
        run was given, as an outcome with the status ``not-gated``: every output lists it, so no
        base entry stops being gated unseen. A chip a test no longer runs on counts too."""
        if self.options.baseline_ref is None or self.worker:
            return []
        produced = {(o.baseline_dir, o.baseline_key, o.current.variant) for o in outcomes}
        ran = {(o.baseline_dir, o.baseline_key) for o in outcomes}
        modes = {(o.current.backend, o.current.execution, o.current.auto_cast) for o in outcomes}
        modes.add((self.options.backend, self.options.execution, self.options.auto_cast))
        found = []
        for directory, store in sorted(self._ref_stores.items()):
            for path in store.files():
                for key, variants in sorted(store.read_file(path).items()):
                    module = self.module_of(key, directory)
                    if module is None:
                        continue
                    for name, entry in sorted(variants.items()):
                        # a test that ran loses any variant it no longer produces (its marker's
                        # chip or mode changed); one that did not, those of the modes costed
                        if (str(directory), key, name) in produced or (
                                (str(directory), key) not in ran
                                and (entry.backend, entry.execution, entry.auto_cast) not in modes):
                            continue
                        message = (f"in the baseline files at {self.options.baseline_ref}, but no "
                                   "test of this run produced it (a test renamed, removed, skipped "
                                   "or deselected): it is not gated")
                        found.append(self.with_base(TestOutcome(
                            key, (module, 0), Verdict(Status.NOT_GATED, message=message),
                            ProfileSummary(entry.backend, entry.hardware, "", "", 0.0,
                                           execution=entry.execution, auto_cast=entry.auto_cast),
                            entry, key, str(directory))))
        return found

    def module_of(self, key: str, directory: Path) -> str | None:
        """The test file a baseline key of ``directory`` names, relative to the rootdir, when the
        CI job gave the run that file (``job_paths``: it is under one of them, existing or not,
        as its path reads: a link to a file elsewhere is where it is); else None."""
        # keys are relative to the ini file's folder, else to the baseline directory's (locate.py)
        anchor = self.options.ini_dir or directory.parent
        module = Path(os.path.abspath(anchor / key.split("::", 1)[0]))
        if not any(module == start or start in module.parents for start in self.job_paths):
            return None
        try:
            return module.relative_to(os.path.abspath(self.options.rootdir)).as_posix()
        except ValueError:
            return module.as_posix()

    def record(self, outcomes: list[TestOutcome]) -> None:
        """Write the recorded tests' baselines one file at a time, so that a file that cannot
        be written (disk full) costs only its own tests; the summary counts them."""
        by_file: dict[tuple[str, Path], list[TestOutcome]] = {}
        for o in outcomes:
            if o.verdict.status == Status.RECORDED:
                path = baseline_path(Path(o.baseline_dir), o.baseline_key)
                by_file.setdefault((o.baseline_dir, path), []).append(o)
        # entries no test produced, of modules that ran in full: removed (syrupy's --snapshot-update)
        removals: dict[tuple[str, Path], list[tuple[str, str]]] = {}
        for stale in self.locator.stale(outcomes, self.fully_ran):
            removals.setdefault((stale.sibling.baseline_dir, stale.path), []).append((stale.key, stale.variant))
            by_file.setdefault((stale.sibling.baseline_dir, stale.path), [])
        for (directory, path), recorded in sorted(by_file.items()):
            store = self.locator.store(Path(directory))
            removed = removals.get((directory, path), [])
            if not self._output(lambda: self.log.changed.extend(store.save(
                    ((o.baseline_key, o.current) for o in recorded), remove=removed)), output=True):
                self.log.unwritten_tests += len({o.nodeid for o in recorded})  # tests, not chips
            else:
                self.stale_lines += [f"{plain(key)} [{plain(variant)}]" for key, variant in removed]

    def _output_value(self, make: Any) -> Any:
        """``make()``, or None when it failed (its error kept for the end, as ``_output``'s)."""
        made: list[Any] = []
        return made[0] if self._output(lambda: made.append(make())) else None

    def _output(self, write: Any, output: bool = False) -> bool:
        """Run ``write``; False when it failed, its error kept for the end (and for the
        summary's list of what was not written, when it is an ``output``)."""
        try:
            write()
        except (NeuronProfError, OSError) as exc:
            self.errors.append(str(exc))
            if output:
                self.log.not_written.append(str(exc))
            return False
        return True

    def end_errors(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors

    def terminal_summary(self, terminalreporter: Any, rootpath: Path) -> None:
        """The summary (``outputs/terminal.py``), ending with each output's part of it (GitHub
        Actions annotations)."""
        if self.worker:
            return
        publishers = [output.summary for output in self.outputs if output.summary is not None]
        write_summary(terminalreporter, self.reported_outcomes(), self.log, self.options.strict, rootpath,
                      publishers)
        for line in self.base_settings.summary_lines() if self.base_settings is not None else ():
            terminalreporter.write_line(line, red=self.base_settings.unexplained)
        for line in self.stale_summary():
            terminalreporter.write_line(line)

    def stale_summary(self) -> list[str]:
        """What the summary says of baseline entries no test produced (renamed or removed tests,
        in modules that ran in full): removed by this recording, or how to remove them."""
        if self.stale_lines:
            return [f"removed {len(self.stale_lines)} baseline entr{'y' if len(self.stale_lines) == 1 else 'ies'} "
                    f"no test produced: {', '.join(self.stale_lines)}"]
        if not self.stale:
            return []
        from ..outputs.hints import variant_options

        names = [f"{plain(s.key)} [{plain(s.variant)}]" for s in self.stale]
        modules = list(dict.fromkeys(s.sibling.location[0] for s in self.stale))
        options = " ".join(variant_options([self.stale[0].sibling]))
        command = record_command(*modules).replace(" --neuron-baseline", f" --neuron-baseline {options}".rstrip(), 1)
        return [f"{len(names)} baseline entr{'y' if len(names) == 1 else 'ies'} no test produced (a test "
                f"renamed or removed): {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}; remove "
                f"{'it' if len(names) == 1 else 'them'} by re-recording the module{'s' if len(modules) > 1 else ''}: {command}"]
