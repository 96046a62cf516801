"""`neuronprof continuous` interrupted (issue 25, item 6): SIGINT or SIGTERM, to the command or
to its whole process group, while BASE records, stops the child pytest, removes the worktrees and
the temporary directory and ends with one line and exit 130 / 143; and the command lines it
prints can be copied into a shell (issue 29)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import pytest_neuronprof.cli.continuous as continuous_module
from pytest_neuronprof.cli.continuous import continuous

from test_baseline_ref import git

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

# The project's marked test writes its pid to $NP_STARTED, then waits (at most a minute) for
# $NP_RELEASE to exist: the signal is sent while the child pytest is recording BASE.
BLOCKING_TEST = """\
import os, time
from pathlib import Path

import pytest


@pytest.mark.neuron_profile
def test_waits():
    Path(os.environ["NP_STARTED"]).write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while not Path(os.environ["NP_RELEASE"]).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
"""

QUICK_TEST = """\
import pytest


@pytest.mark.neuron_profile
def test_quick():
    pass
"""


def project(where: Path, test: str) -> Path:
    """A committed git repository: pyproject.toml (the ini file) and tests/test_x.py."""
    (where / "tests").mkdir(parents=True)
    (where / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider"\n')
    (where / "tests" / "test_x.py").write_text(test)
    git(where, "init", "-q", "-b", "main")
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", "base")
    return where


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 90.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie not reaped yet counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1] != "Z"
    except OSError:
        return True


# The command with SIGINT not ignored, even where these tests run with it ignored (a background
# job, an xdist worker): a command keeps a signal ignored that was ignored when it started.
COMMAND = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
           "os.execv(sys.executable, [sys.executable, '-m', 'pytest_neuronprof', *sys.argv[1:]])")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "SIGTERM-to-group", "SIGINT-to-group", "SIGINT-twice"])
def test_a_signal_while_base_records_removes_the_worktrees_and_ends_with_one_line(tmp_path, how):
    """SIGTERM / SIGINT to the command only (forwarded to the child pytest), to its whole process
    group (the child got it too: a SIGINT is not sent twice), and Ctrl-C twice (no waiting)."""
    signum = signal.SIGINT if how.startswith("SIGINT") else signal.SIGTERM
    repo = project(tmp_path / "repo", BLOCKING_TEST)
    temp = tmp_path / "tmp"
    temp.mkdir()
    started, release = tmp_path / "started", tmp_path / "release"
    env = {**os.environ, "TMPDIR": str(temp), "NP_STARTED": str(started), "NP_RELEASE": str(release)}
    command = subprocess.Popen([sys.executable, "-c", COMMAND, "continuous", "HEAD", "--", "-q"],
                               cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # a process group to signal
    try:
        child = int(wait_for(lambda: started.exists() and started.read_text(), "the test to start at BASE"))
        bases = list(temp.glob("neuronprof-continuous-*/base"))
        assert len(bases) == 1 and str(bases[0]) in git(repo, "worktree", "list")
        sent = time.monotonic()
        if how.endswith("-to-group"):
            os.killpg(command.pid, signum)
        else:
            command.send_signal(signum)
        if how.endswith("-twice"):
            time.sleep(0.5)
            command.send_signal(signum)
        command.wait(timeout=60)
        took = time.monotonic() - sent
        orphaned = alive(child)  # today's code: the child pytest is still running
    finally:
        release.touch()  # an orphaned child pytest, if any, ends now (and closes the pipes)
        if command.poll() is None:
            command.kill()
    out, err = command.communicate(timeout=120)
    name = signal.Signals(signum).name
    assert command.returncode == 128 + signum, out + err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.splitlines()[-1] == (f"neuronprof continuous: interrupted ({name}) while recording HEAD; "
                                    "removed its worktree"), err
    assert sum("interrupted" in line for line in err.splitlines()) == 1
    assert git(repo, "worktree", "list").count("\n") == 0  # only the main worktree
    assert list(temp.glob("neuronprof-continuous-*")) == []  # the temporary directory is gone
    assert not orphaned
    assert git(repo, "status", "--porcelain") == ""
    if how in ("SIGINT", "SIGINT-to-group"):  # pytest ended its own run: one KeyboardInterrupt
        assert out.count("!! KeyboardInterrupt !!") == 1, out
    if how == "SIGINT-twice":  # the second one killed the child pytest: no waiting out the grace
        assert took < continuous_module.GRACE_S, took


def test_an_interruption_ends_in_one_line_and_restores_the_previous_handlers(tmp_path):
    """In process: a SIGTERM sent to itself as BASE's worktree is ready ends the command with
    143 before pytest starts; the handlers in place before are back afterwards."""
    repo = project(tmp_path / "repo", QUICK_TEST)
    seen: list[int] = []

    def mine(signum: int, frame: object) -> None:
        seen.append(signum)

    lines: list[str] = []

    def say(line: str) -> None:
        lines.append(line)
        if line.startswith("recording HEAD"):
            os.kill(os.getpid(), signal.SIGTERM)

    before = signal.signal(signal.SIGTERM, mine)
    sigint = signal.getsignal(signal.SIGINT)
    try:
        code = continuous("HEAD", None, ["-q"], say, cwd=repo)
        assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGINT) is sigint
    finally:
        signal.signal(signal.SIGTERM, before)
    assert code == 143, lines
    assert seen == []  # the command's handler took it, not the previous one
    assert lines[-1] == "interrupted (SIGTERM) while recording HEAD; removed its worktree"
    assert not any(line.startswith("$ ") for line in lines)  # pytest never started
    assert git(repo, "worktree", "list").count("\n") == 0


class Stop(Exception):
    """Raised by a ``say`` to end the command once BASE's worktree is ready, before pytest runs."""


def test_the_handlers_are_installed_only_while_the_command_runs_and_not_over_an_ignored_signal(tmp_path):
    repo = project(tmp_path / "repo", QUICK_TEST)
    during: list[Any] = []

    def say(line: str) -> None:
        during.append((signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))
        raise Stop

    def mine(signum: int, frame: object) -> None:
        raise AssertionError("not called")

    previous = {signum: signal.signal(signum, mine) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        with pytest.raises(Stop):
            continuous("HEAD", None, ["-q"], say, cwd=repo)
        (sigint, sigterm), = during
        assert sigint == sigterm and callable(sigint) and sigint is not mine  # the command's
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
        # ignored where the command started (nohup, a background job): it stays ignored
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with pytest.raises(Stop):
            continuous("HEAD", None, ["-q"], say, cwd=repo)
        assert callable(during[-1][0]) and during[-1][0] is not mine and during[-1][1] is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    # outside the main thread (where signal.signal raises) it runs without handlers
    failure: list[BaseException] = []

    def in_thread() -> None:
        try:
            continuous("HEAD", None, ["-q"], say, cwd=repo)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failure.append(exc)

    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(60)
    assert [type(exc) for exc in failure] == [Stop]
    assert git(repo, "worktree", "list").count("\n") == 0


@pytest.mark.slow
def test_the_printed_command_lines_can_be_copied_into_a_shell(tmp_path):
    """The `$` lines show the interpreter and quote each argument: run in a shell, the gating
    line runs the same pytest (here the folder has a space and an argument has one too)."""
    repo = project(tmp_path / "my repo", QUICK_TEST)
    lines: list[str] = []
    assert continuous("HEAD", None, ["-k", "quick or slow", "-q"], lines.append, cwd=repo) == 0
    commands = [line[2:] for line in lines if line.startswith("$ ")]
    assert len(commands) == 2, lines
    record, gate = commands
    words = shlex.split(gate.removeprefix("(").removesuffix(")"))
    assert words[:7] == ["cd", str(repo), "&&", sys.executable, "-m", "pytest", "-k"]
    assert words[7:9] == ["quick or slow", "-q"] and words[9].startswith("--neuron-baseline-dir=")
    words = shlex.split(record.removeprefix("(").removesuffix(")"))
    assert words[0] == "cd" and words[1].endswith("/base") and words[2] == "&&"
    assert words[3:10] == [sys.executable, "-m", "pytest", "-k", "quick or slow", "-q", "--neuron-baseline"]
    assert words[10].startswith("--neuron-baseline-dir=")
    # copied into a shell (the temporary baseline directory is gone by now: a test with no
    # baseline passes, and says so)
    copied = subprocess.run(["sh", "-c", gate], capture_output=True, text=True, timeout=120)
    assert copied.returncode == 0, copied.stdout + copied.stderr
    assert re.search(r"\b1 passed\b", copied.stdout), copied.stdout

