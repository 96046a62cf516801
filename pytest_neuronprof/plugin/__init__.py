"""The pytest side of pytest-neuronprof: hooks only, each handing off to the session
(``plugin/session.py``). Loading this module does not import torch, nor the session, the gate
or the outputs: a run whose options ask for nothing before its first profiled test makes its
session when collection finds one (``DeferredSession``), and a run without one never loads them
(an installed plugin costs a suite without marked tests its options and little else)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator

import pytest

from ..errors import NeuronProfError
from ..profiler.value_reads import explained_value_reads
from .distributed import DistributedPlugin
from .marker import MARKER, MARKER_SIGNATURE
from .options import (DISABLE_VARIABLE, Options, add_options, baseline_ref, device_alias, disabled,
                      disabled_by_environment, job_test_paths, read_options)

if TYPE_CHECKING:
    from .session import NeuronSession

_session_key = pytest.StashKey["NeuronSession"]()
_disabled_key = pytest.StashKey[bool]()
_backend_key = pytest.StashKey[str]()  # the run's backend, once the options are read
FIXTURE = "neuron_profile"  # the fixture below (plugin/session.py names it too)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER_SIGNATURE}: profile this test's device time per op and fail it when a hotspot "
        "regresses against its baseline; rounds and warmup apply to measured backends "
        "(pytest-neuronprof)",
    )
    _device_alias(config)  # before the off switch: --neuron-disable leaves the device on
    config.pluginmanager.register(ValueReads(), "neuronprof-value-reads")
    # the marker's world_size=: each test's simulated process group, profiled or not
    config.pluginmanager.register(DistributedPlugin(lambda: config.stash.get(_backend_key, None)),
                                  "neuronprof-distributed")
    try:
        off = switched_off(config)
    except NeuronProfError as exc:
        raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None
    if off:  # the off switch: the marker stays registered, the fixture does nothing
        config.stash[_disabled_key] = True
        config.pluginmanager.register(DisabledPlugin(), "neuronprof-session")
        return
    # -k, -m and the options that deselect by cache leave tests of any module out (an xdist
    # controller sees no deselection of its own)
    narrowed = dict(everywhere=any(config.getoption(name, None) for name in
                                   ("keyword", "markexpr", "deselect", "lf", "stepwise")),
                    files=[config.invocation_params.dir / str(arg).split("::", 1)[0]
                           for arg in config.args if "::" in str(arg)])
    try:
        options = read_options(config)
        config.stash[_backend_key] = options.backend
        base = repository = None
        if options.baseline_ref is not None:  # verdicts decided by the base's settings
            from .base_config import options_at_base, refuse_runs_of_nothing

            refuse_runs_of_nothing(config)

            options, repository, base = options_at_base(config, options)
        if can_wait(config, options):
            config.pluginmanager.register(DeferredSession(config, options, narrowed),
                                          "neuronprof-session")
            return
        session = new_session(config, options, narrowed, repository, base)
    except NeuronProfError as exc:
        raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None
    config.pluginmanager.register(NeuronProfPlugin(config, session), "neuronprof-session")


def switched_off(config: pytest.Config) -> bool:
    """The off switch (options.disabled). Gated against a ref, the ini part is the base's, not
    the working tree's: a change cannot turn its own gate off (base_config.disabled_at_base)."""
    ref = baseline_ref(config)
    if ref is None or disabled_by_environment():
        return disabled(config)
    from .base_config import disabled_at_base  # git: only for a run gated against a ref

    return disabled_at_base(config, ref)


def new_session(config: pytest.Config, options: Options, narrowed: dict[str, Any],
                repository: Any = None, base: Any = None) -> NeuronSession:
    """The run's session, kept in the config's stash. Raises NeuronProfError."""
    from .session import NeuronSession

    session = NeuronSession(options, worker=hasattr(config, "workerinput"))
    session.job_paths = job_test_paths(config)
    if base is not None:
        session.at_base(repository, base)
    session.narrowed(**narrowed)
    config.stash[_session_key] = session
    return session


def can_wait(config: pytest.Config, options: Options) -> bool:
    """Whether the session can be made when the run meets its first profiled test, not at its
    start: nothing the session does at the start or the end concerns a run without one, unless
    the options ask for it. Not when they record baselines (stale entries are removed at the
    end), gate against a ref (the base's settings are judged), write an output (a report of no
    tests is a report), name a backend that needs a device (checked at the start), nor on an
    xdist controller (its workers collect the tests, it judges and writes what they report)."""
    if options.record or options.baseline_ref is not None or options.output_paths \
            or options.facts.requires:
        return False
    controller = not hasattr(config, "workerinput") and (
        getattr(config.option, "numprocesses", None) or getattr(config.option, "dist", "no") != "no")
    return not controller


def is_profiled(item: pytest.Item) -> bool:
    """A test with the marker or the fixture (as plugin/session.py's ``is_profiled``)."""
    return item.get_closest_marker(MARKER) is not None or FIXTURE in getattr(item, "fixturenames", ())


def session_of(config: pytest.Config) -> NeuronSession:
    """The run's session: made and started now if it was waiting for its first profiled test."""
    session = config.stash.get(_session_key, None)
    if session is None:
        waiting = config.pluginmanager.get_plugin("neuronprof-session")
        assert isinstance(waiting, DeferredSession), waiting
        session = waiting.start()
    return session


class DeferredSession:
    """A run whose session waits for its first profiled test (``can_wait``): when collection
    finds one (or a test first asks for the ``neuron_profile`` fixture), the session is made
    and started as ``NeuronProfPlugin`` starts it, its baseline files validated before any test
    runs, and ``NeuronProfPlugin`` takes over; a run without one never makes it."""

    def __init__(self, config: pytest.Config, options: Options, narrowed: dict[str, Any]) -> None:
        self.config = config
        self.options = options
        self.narrowed = narrowed
        self.deselected: list[Path] = []  # test files some of whose tests were deselected
        self.plugin: NeuronProfPlugin | None = None

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.extend(item.path for item in items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.plugin is None and any(is_profiled(item) for item in session.items):
            self.start()
        if self.plugin is not None:
            self.plugin.pytest_collection_finish(session)

    def start(self) -> NeuronSession:
        """The session, made, started and handed to NeuronProfPlugin (once)."""
        if self.plugin is None:
            try:
                session = new_session(self.config, self.options, self.narrowed)
                session.narrowed(files=self.deselected)
            except NeuronProfError as exc:
                raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None
            plugin = NeuronProfPlugin(self.config, session)
            plugin.pytest_sessionstart(None)
            self.plugin = plugin
            self.config.pluginmanager.register(plugin, "neuronprof-session-started")
        return self.plugin.session


def _device_alias(config: pytest.Config) -> None:
    """--neuron-device-alias: the simulated neuron device, on for the whole session before any
    test module is imported (or why it stays off); the session header says which."""
    backend = device_alias(config)
    if backend is None:
        return
    from ..profiler.neuron_device import session_alias  # imports torch: only when asked

    try:
        line = session_alias(backend)
    except NeuronProfError as exc:
        raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None
    config.pluginmanager.register(HeaderLine(line), "neuronprof-device-alias")


class HeaderLine:
    """A line of the session header (pytest's first lines)."""

    def __init__(self, line: str) -> None:
        self.line = line

    def pytest_report_header(self) -> str:
        return f"pytest-neuronprof: {self.line}"


class ValueReads:
    """A test that reads a value of a tensor that has none fails with ValueReadError naming the
    line and what to do: torch's bare error for a read on meta is turned into it (the simulated
    neuron device raises its own). Every test, profiled or not: nothing runs unless it raises."""

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        with explained_value_reads():
            return (yield)


@pytest.fixture
def neuron_profile(request: pytest.FixtureRequest) -> Any:
    """``with neuron_profile:`` profiles that region only; ``neuron_profile.result`` is the
    ProfileResult. The test is gated against its baseline like a marked test."""
    if request.config.stash.get(_disabled_key, False):
        return NotProfiled()
    return session_of(request.config).region(request.node)


class NotProfiled:
    """The ``neuron_profile`` fixture under --neuron-disable: its region runs the code, unprofiled."""

    result = None  # no profile was taken

    def __enter__(self) -> "NotProfiled":
        return self

    def __exit__(self, *exc: object) -> None:
        return None


class DisabledPlugin:
    """Under --neuron-disable: only the summary's line that says profiling was off."""

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep("=", "neuron device-time profile")
        terminalreporter.write_line(f"profiling was off (--neuron-disable, ini neuron_disable or "
                                    f"{DISABLE_VARIABLE}=1): marked tests ran unprofiled and ungated")


class NeuronProfPlugin:
    """The hooks that need the session; one instance per pytest run (and per xdist worker)."""

    def __init__(self, config: pytest.Config, session: NeuronSession) -> None:
        self.config = config
        self.session = session

    def pytest_sessionstart(self, session: pytest.Session | None) -> None:
        try:
            self.session.start()
        except NeuronProfError as exc:
            raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        return (yield from self.session.profile_call(pyfuncitem))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item,
                                  call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        report = yield
        self.session.finish_test(item, call, report)
        return report

    def pytest_report_teststatus(self, report: pytest.TestReport, config: pytest.Config) -> Any:
        data = getattr(report, "neuronprof", None)
        if not data:
            return None
        from ..gate.compare import Status

        chips = data if isinstance(data, list) else [data]  # one dict per chip
        statuses = {d["verdict"]["status"] for d in chips}
        if report.when == "call" and report.failed and Status.DOES_NOT_FIT in statuses:
            return "failed", "M", ("DOES NOT FIT", {"red": True})  # M: memory
        if report.when == "call" and report.failed and Status.REGRESSION in statuses:
            return "failed", "R", ("PERF REGRESSION", {"red": True})
        return None

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.session.narrowed(files=[item.path for item in items])

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.session.collected(session.items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.session.collect(report)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.session.finished_ids.add(nodeid)  # a test Ctrl-C stopped never gets here

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        # each output on its own; what failed is raised at unconfigure
        self.session.finish(self.session.stop_reason(session, exitstatus))
        if self.session.unexplained_settings() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # like a regression without a reason

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        self.session.terminal_summary(terminalreporter, self.config.rootpath)

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # After the summary and every other output: an output that could not be written ends
        # the run as a usage error naming it, without having taken the others with it.
        errors = self.session.end_errors()
        if errors:
            raise pytest.UsageError(*(f"pytest-neuronprof: {e}" for e in errors))
