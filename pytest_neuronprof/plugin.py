"""pytest hooks of pytest-neuronprof: options, the marker, the fixture, and the wiring of the
profiler, the gate and the reports. Loading this module does not import torch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator

import pytest

from .errors import NeuronProfError

if TYPE_CHECKING:
    from .session import NeuronSession, Options

MARKER = "neuron_profile"
FIXTURE = "neuron_profile"
_session_key = pytest.StashKey["NeuronSession"]()
_result_key = pytest.StashKey[Any]()
_plan_key = pytest.StashKey[Any]()
_region_key = pytest.StashKey[Any]()
_rounds_key = pytest.StashKey[Any]()

_OPTIONS = (
    # (flag, ini name, ini type, help)
    ("--neuron-baseline", "neuron_baseline", "bool",
     "record or update the baselines of the profiled tests that run (they pass)"),
    ("--neuron-baseline-dir", "neuron_baseline_dir", "string",
     "directory of baseline files (default: baselines/ under the rootdir)"),
    ("--neuron-backend", "neuron_backend", "string",
     "profiler backend: simulated (default, exact), or measured by torch.profiler: cpu, cuda, "
     "neuron (needs torch_neuronx)"),
    ("--neuron-hardware", "neuron_hardware", "string",
     "hardware profile of the simulated backend (default: trn2); names the chip of the neuron backend"),
    ("--neuron-rounds", "neuron_rounds", "string",
     "measured backends: rounds per test, compared with the baseline's for significance "
     "(default: cpu 20, cuda 20, neuron 10; the simulated backend always runs once)"),
    ("--neuron-warmup", "neuron_warmup", "string",
     "measured backends: warmup rounds before them, not compared (default: cpu 3, cuda 5, neuron 3)"),
    ("--neuron-cpu-threads", "neuron_cpu_threads", "string",
     "cpu backend: torch's intra-op threads while a region is measured, 0 to leave them "
     "(default: 1, the steadiest on shared machines)"),
    ("--neuron-threshold", "neuron_threshold", "string",
     "relative increase that counts as a regression, e.g. 0.1 or 10% (default: 10%; 15% on the "
     "cpu backend)"),
    ("--neuron-floor-us", "neuron_floor_us", "string",
     "an increase must also exceed this many microseconds to count (default: 1.0)"),
    ("--neuron-strict", "neuron_strict", "bool", "fail profiled tests that have no baseline"),
    ("--neuron-report", "neuron_report", "string", "write a JSON report of the session here"),
    ("--neuron-trace-dir", "neuron_trace_dir", "string",
     "write a Chrome trace per profiled test into this directory"),
    ("--neuron-html", "neuron_html", "string",
     "write a self-contained HTML page of the session (index.html) into this directory"),
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("neuronprof", "device-time profiling and regression gate (pytest-neuronprof)")
    for flag, ini, kind, help_text in _OPTIONS:
        if kind == "bool":
            group.addoption(flag, action="store_true", default=None, dest=ini, help=help_text)
        else:
            group.addoption(flag, action="store", default=None, dest=ini, metavar="VALUE", help=help_text)
        parser.addini(ini, help=help_text, type=kind, default=None)


def _option(config: pytest.Config, name: str) -> tuple[Any, Path]:
    """An option's value and the folder a relative path in it is relative to."""
    value = config.getoption(name)
    if value is not None:
        return value, config.invocation_params.dir
    return config.getini(name), config.rootpath


def _path_option(config: pytest.Config, name: str, default: Path | None) -> Path | None:
    value, base = _option(config, name)
    return (base / value) if value else default


def read_options(config: pytest.Config) -> "Options":
    from .backends import BACKENDS
    from .costmodel.profiles import available_hardware
    from .gate import GatePolicy
    from .session import (DEFAULT_BACKEND, DEFAULT_CPU_THREADS, DEFAULT_FLOOR_US, DEFAULT_HARDWARE,
                          DEFAULT_THRESHOLDS, Options, parse_count, parse_threshold,
                          validate_choice)

    threshold, _ = _option(config, "neuron_threshold")
    floor, _ = _option(config, "neuron_floor_us")
    rounds, _ = _option(config, "neuron_rounds")
    warmup, _ = _option(config, "neuron_warmup")
    threads, _ = _option(config, "neuron_cpu_threads")
    backend = _option(config, "neuron_backend")[0] or DEFAULT_BACKEND
    hardware = _option(config, "neuron_hardware")[0] or DEFAULT_HARDWARE
    backend = validate_choice("--neuron-backend (ini neuron_backend)", backend, BACKENDS)
    threads = (parse_count("--neuron-cpu-threads (ini neuron_cpu_threads)", threads, 0)
               if threads not in (None, "") else DEFAULT_CPU_THREADS)
    return Options(
        record=bool(_option(config, "neuron_baseline")[0]),
        baseline_dir=_path_option(config, "neuron_baseline_dir", config.rootpath / "baselines"),
        backend=backend,
        hardware=validate_choice("--neuron-hardware (ini neuron_hardware)", hardware, available_hardware()),
        policy=GatePolicy(
            threshold=parse_threshold("--neuron-threshold (ini neuron_threshold)", threshold)
            if threshold not in (None, "") else DEFAULT_THRESHOLDS[backend],
            floor_us=parse_threshold("--neuron-floor-us (ini neuron_floor_us)", floor)
            if floor not in (None, "") else DEFAULT_FLOOR_US,
        ),
        strict=bool(_option(config, "neuron_strict")[0]),
        report=_path_option(config, "neuron_report", None),
        trace_dir=_path_option(config, "neuron_trace_dir", None),
        html=_path_option(config, "neuron_html", None),
        rounds=parse_count("--neuron-rounds (ini neuron_rounds)", rounds, 1)
        if rounds not in (None, "") else None,
        warmup=parse_count("--neuron-warmup (ini neuron_warmup)", warmup, 0)
        if warmup not in (None, "") else None,
        cpu_threads=threads or None,
    )


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(threshold=None, hardware=None, hotspots=None, min_share=None, ops=None, "
        "allow=None, rounds=None, warmup=None): profile this test's device time per op and fail "
        "it when a hotspot regresses against its baseline; rounds and warmup apply to measured "
        "backends (pytest-neuronprof)",
    )
    from .session import NeuronSession

    try:
        session = NeuronSession(read_options(config))
    except NeuronProfError as exc:
        raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None
    config.stash[_session_key] = session
    config.pluginmanager.register(NeuronProfPlugin(config, session), "neuronprof-session")


def _is_profiled(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(item, "fixturenames", ())


def _plan(item: pytest.Item) -> Any:
    """The test's plan from its marker; a bad marker argument fails the test, naming it."""
    plan = item.stash.get(_plan_key, None)
    if plan is None:
        marker = item.get_closest_marker(MARKER)
        if marker is not None and marker.args:
            pytest.fail(f"{item.nodeid}: @pytest.mark.{MARKER} takes keyword arguments only, "
                        f"got positional {marker.args!r}", pytrace=False)
        try:
            plan = item.config.stash[_session_key].plan(dict(marker.kwargs) if marker else {})
        except NeuronProfError as exc:
            problem = f"{item.nodeid}: {exc}"
        else:
            problem = None
        if problem is not None:  # failed outside the except block: no "During handling of..." chain
            pytest.fail(problem, pytrace=False)
        item.stash[_plan_key] = plan
    return plan


@pytest.fixture
def neuron_profile(request: pytest.FixtureRequest) -> Any:
    """``with neuron_profile:`` profiles that region only; ``neuron_profile.result`` is the
    ProfileResult. The test is gated against its baseline like a marked test."""
    from .session import ProfileRegion

    item = request.node
    session = item.config.stash[_session_key]
    region = ProfileRegion(lambda: session.make_profiler(_plan(item)), session.options.backend)
    item.stash[_region_key] = region
    return region


class NeuronProfPlugin:
    """The hooks that need session state; one instance per pytest run (and per xdist worker)."""

    def __init__(self, config: pytest.Config, session: "NeuronSession") -> None:
        self.config = config
        self.session = session
        self.worker = _is_worker(config)
        self.written: list[Path] = []

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        try:
            self.session.check_backend()
            if not self.worker:  # the controller checks the files once
                self.session.store.validate_all()
                self.session.prepare_output_dirs()
        except NeuronProfError as exc:
            raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        """Profile the test body; under a measured backend, run it warmup + rounds times.

        The first invocation is pytest's own (this wrapper's ``yield``); the others call the
        ``pytest_pyfunc_call`` hook again, so every round goes through the same hook chain
        (other plugins' wrappers, pytest's async and return-value checks) with the same
        fixture values: fixtures are set up once per test, the body runs once per round. Those
        inner calls pass straight through this wrapper (``_rounds_key`` is set)."""
        if not _is_profiled(pyfuncitem) or _rounds_key in pyfuncitem.stash:
            return (yield)
        from .session import Rounds

        plan = _plan(pyfuncitem)
        rounds = Rounds(plan, lambda: self.session.make_profiler(plan),
                        pyfuncitem.stash.get(_region_key, None))
        pyfuncitem.stash[_rounds_key] = rounds
        try:
            rounds.begin()
            try:
                outcome = yield
            finally:
                rounds.end()
            while rounds.index < rounds.total:
                rounds.begin()
                try:
                    pyfuncitem.ihook.pytest_pyfunc_call(pyfuncitem=pyfuncitem)
                finally:
                    rounds.end()
            return outcome
        finally:
            del pyfuncitem.stash[_rounds_key]
            if rounds.results:
                pyfuncitem.stash[_result_key] = (rounds.results, rounds.backend_version)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        captured = item.stash.get(_result_key, None) if call.when == "call" else None
        if captured is None:
            return report
        results, backend_version = captured
        from .session import representative

        self.session.write_trace(item.nodeid, representative(results))  # the median round
        if not report.passed:
            return report  # a failing test is not judged and records nothing
        path, line, _ = item.location
        outcome = self.session.judge(item.nodeid, (path, (line or 0) + 1), results, _plan(item),
                                     backend_version)
        report.neuronprof = outcome.to_json()  # travels to the xdist controller with the report
        properties = [
            ("neuron_device_time_us", round(outcome.current.total_device_time_us, 3)),
            ("neuron_delta", "" if outcome.delta is None else round(outcome.delta, 6)),
            ("neuron_verdict", outcome.verdict.status),
        ]
        item.user_properties.extend(properties)
        report.user_properties.extend(properties)
        if outcome.verdict.failed:
            from .report import failure_section

            report.outcome = "failed"
            report.longrepr = failure_section(outcome)
        else:
            message = self.session.strict_failure(outcome)
            if message:
                report.outcome = "failed"
                report.longrepr = message
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        data = getattr(report, "neuronprof", None)
        if report.when == "call" and report.failed and data and data["verdict"]["status"] == "regression":
            return "failed", "R", ("PERF REGRESSION", {"red": True})
        return None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "neuronprof", None)
        if data is not None and report.when == "call" and not self.worker:
            from .report import TestOutcome

            self.session.outcomes.append(TestOutcome.from_json(data))

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.worker:
            return
        try:
            self.written = self.session.finish()
        except NeuronProfError as exc:
            raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.worker or not self.session.outcomes:
            return
        from .report import improvements_text, notices, session_table

        outcomes = sorted(self.session.outcomes, key=lambda o: o.nodeid)
        tr = terminalreporter
        tr.write_sep("=", "neuron device-time profile")
        tr.write_line(session_table(outcomes))
        for line in notices(outcomes, self.session.options.strict):
            tr.write_line(line)
        text = improvements_text(outcomes)
        if text:
            tr.write_sep("-", "improvements")
            tr.write_line(text)
        if self.session.options.record:
            from .files import show_path

            changed = ", ".join(show_path(p) for p in self.written) or "none (all unchanged)"
            tr.write_line(f"baselines recorded: {len(outcomes)} tests; files changed: {changed}")
        from .github import publish  # GitHub Actions annotations and step summary; else nothing

        publish(outcomes, tr.write_line, self.config.rootpath)
