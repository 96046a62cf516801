"""The pytest side of pytest-neuronprof: hooks only, each handing off to the session
(``plugin/session.py``). Loading this module does not import torch."""

from __future__ import annotations

from typing import Any, Generator

import pytest

from ..errors import NeuronProfError
from ..gate.compare import Status
from .marker import MARKER_SIGNATURE
from .base_config import options_at_base
from .options import DISABLE_VARIABLE, add_options, disabled, read_options
from .session import NeuronSession

_session_key = pytest.StashKey[NeuronSession]()
_disabled_key = pytest.StashKey[bool]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER_SIGNATURE}: profile this test's device time per op and fail it when a hotspot "
        "regresses against its baseline; rounds and warmup apply to measured backends "
        "(pytest-neuronprof)",
    )
    if disabled(config):  # the off switch: the marker stays registered, the fixture does nothing
        config.stash[_disabled_key] = True
        config.pluginmanager.register(DisabledPlugin(), "neuronprof-session")
        return
    try:
        options = read_options(config)
        base = None
        if options.baseline_ref is not None:  # verdicts decided by the base's settings
            options, repository, base = options_at_base(config, options)
        session = NeuronSession(options, worker=hasattr(config, "workerinput"))
        if base is not None:
            session.at_base(repository, base)
    except NeuronProfError as exc:
        raise pytest.UsageError(f"pytest-neuronprof: {exc}") from None
    # -k, -m and the options that deselect by cache leave tests of any module out (an xdist
    # controller sees no deselection of its own)
    session.narrowed(everywhere=any(config.getoption(name, None) for name in
                                    ("keyword", "markexpr", "deselect", "lf", "stepwise")),
                     files=[config.invocation_params.dir / str(arg).split("::", 1)[0]
                            for arg in config.args if "::" in str(arg)])
    config.stash[_session_key] = session
    config.pluginmanager.register(NeuronProfPlugin(config, session), "neuronprof-session")


@pytest.fixture
def neuron_profile(request: pytest.FixtureRequest) -> Any:
    """``with neuron_profile:`` profiles that region only; ``neuron_profile.result`` is the
    ProfileResult. The test is gated against its baseline like a marked test."""
    if request.config.stash.get(_disabled_key, False):
        return NotProfiled()
    return request.config.stash[_session_key].region(request.node)


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

    def pytest_sessionstart(self, session: pytest.Session) -> None:
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
        chips = data if isinstance(data, list) else [data] if data else []  # one dict per chip
        if report.when == "call" and report.failed and any(
                d["verdict"]["status"] == Status.REGRESSION for d in chips):
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
        self.session.finish(NeuronSession.stop_reason(session, exitstatus))
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
