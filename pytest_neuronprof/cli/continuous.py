"""`neuronprof continuous BASE [HEAD] [-- PYTEST ARGS]`: gate a tree against a base with no
stored baselines at all.

The simulated backend is deterministic, so a base is as good re-simulated as recorded: the
marked tests run at BASE in a temporary git worktree (``git worktree add --detach``, nothing in
the user's tree changes), recording into a temporary directory; then the tests of HEAD (a second
worktree) or of the current working tree (no HEAD) run gated against it. One run each, no
reruns. The exit code is the gated run's (0 pass, 1 a regression). Both runs use the
pytest-neuronprof installed here, so the cost model is the same on both sides.

Keys: a test's baseline key is its file's path relative to the project's ini file
(plugin/locate.py), the same in the worktree and in the tree, so the project needs an ini file
(pytest.ini, pyproject.toml, tox.ini or setup.cfg); the worktree runs from the same folder,
relative to the repository's top, as the command was started in.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

from ..defaults import RESIMULATED_BASE_VARIABLE
from ..errors import ConfigError
from ..gate.gitref import Repository, find_repository, resolve_commit

COMMAND = "neuronprof continuous"  # what errors name
RECORD = "--neuron-baseline"
DIRECTORY = "--neuron-baseline-dir"
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A SIGINT the child pytest may have got too (Ctrl-C signals the process group): its time to end
# its run (2-5 s seen: pytest's summary, the plugin's outputs) before the command forwards one.
GRACE_S = 10.0
STOP_S = 10.0  # a signal forwarded to the child pytest: its time to stop before it is killed


def _worktree(repository: Repository, commit: str, where: Path) -> Path:
    # read_only=False: the checkout keeps the repository's filters (LFS needs them)
    repository.git("worktree", "add", "--detach", "--quiet", str(where), commit, option=COMMAND,
                   read_only=False)
    return where


def _remove_worktree(repository: Repository, where: Path) -> None:
    repository.git("worktree", "remove", "--force", str(where), check=False, option=COMMAND, read_only=False)
    repository.git("worktree", "prune", check=False, option=COMMAND, read_only=False)


class _Interrupted(BaseException):
    """Raised by the command's SIGINT / SIGTERM handler where the command is (usually waiting
    for pytest); a BaseException, so that no ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Interruptions:
    """SIGINT and SIGTERM while the command runs (installed by ``with``, the previous handlers
    put back on leaving). Released, the first signal raises _Interrupted; held (at first, while
    a worktree is checked out, while a child starts, and during the cleanup) it is only noted,
    so that git finishes or undoes its checkout (a killed ``git worktree add`` leaves a worktree
    locked "initializing", which neither remove nor prune touches) and the cleanup is not cut
    short. A second signal while the child pytest is being stopped kills it."""

    def __init__(self, doing: str) -> None:
        self.doing = doing  # "recording origin/main": what an interruption interrupted
        self.received: int | None = None
        self.held = True
        self.stopping: subprocess.Popen[bytes] | None = None
        self.removed = 0  # worktrees removed by the cleanup
        self.left: list[Path] = []  # worktrees the cleanup could not remove
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Interruptions:
        if threading.current_thread() is threading.main_thread():  # signal.signal raises elsewhere
            for signum in SIGNALS:
                previous = signal.getsignal(signum)
                if previous is signal.SIG_IGN:  # ignored where the command started (nohup): stays so
                    continue
                self._previous[signum] = previous
                signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, previous in self._previous.items():
            # None: a handler not set from Python, which cannot be put back
            signal.signal(signum, signal.SIG_DFL if previous is None else previous)

    def _handle(self, signum: int, frame: object) -> None:
        if self.received is None:
            self.received = signum
            if not self.held:
                self.held = True
                raise _Interrupted(signum)
        elif self.stopping is not None:
            self.stopping.kill()  # asked twice: no more waiting

    def hold(self, doing: str | None = None) -> None:
        self.held = True
        if doing is not None and self.received is None:
            self.doing = doing

    def release(self, doing: str | None = None) -> None:
        """Raises _Interrupted for a signal noted while held."""
        if self.received is not None:
            raise _Interrupted(self.received)
        if doing is not None:
            self.doing = doing
        self.held = False

    def message(self) -> str:
        assert self.received is not None
        if self.left:
            done = (f"could not remove {', '.join(map(str, self.left))}: see `git worktree list` and "
                    "`git worktree remove --force`")
        elif self.removed:
            done = "removed its worktree" + ("s" if self.removed > 1 else "")
        else:
            done = "no worktree to remove"
        return f"interrupted ({signal.Signals(self.received).name}) while {self.doing}; {done}"


def _wait(child: subprocess.Popen[bytes], seconds: float) -> int | None:
    try:
        return child.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


def _stop(child: subprocess.Popen[bytes], signum: int, interruptions: _Interruptions) -> None:
    """Stop the child pytest after the command got ``signum``. Sent to the whole process group
    (Ctrl-C at a terminal, `timeout`, a runner that signals the group), the child got it too,
    and which it was cannot be told: a SIGINT first has GRACE_S to end pytest's run on its own,
    since a second one would cut pytest's own ending short with a traceback. Then (at once for
    SIGTERM, which ends a process outright) the signal is forwarded; STOP_S later, or at a
    second signal to the command, the child is killed."""
    interruptions.stopping = child
    try:
        if signum == signal.SIGINT:
            _wait(child, GRACE_S)
        if child.poll() is None:
            try:
                child.send_signal(signum)
            except ValueError:  # Windows sends no SIGINT to a process
                child.terminate()
            if _wait(child, STOP_S) is None:
                child.kill()
                child.wait()
    finally:
        interruptions.stopping = None


def _pytest(cwd: Path, args: Sequence[str], say: Callable[[str], None], interruptions: _Interruptions,
            env: dict[str, str] | None = None) -> int:
    command = [sys.executable, "-m", "pytest", *args]
    say(f"$ (cd {shlex.quote(str(cwd))} && {shlex.join(command)})")  # can be copied into a shell
    interruptions.hold()  # a signal while the child starts is raised once there is a child to stop
    child = subprocess.Popen(command, cwd=cwd, env=env)
    try:
        interruptions.release()
        return child.wait()
    except BaseException as exc:
        interruptions.hold()
        signum = exc.signum if isinstance(exc, _Interrupted) else (
            signal.SIGINT if isinstance(exc, KeyboardInterrupt) else signal.SIGTERM)
        _stop(child, signum, interruptions)
        raise


def continuous(base: str, head: str | None, pytest_args: Sequence[str],
               say: Callable[[str], None], cwd: Path | None = None) -> int:
    """Record BASE's marked tests into a temporary directory, then gate HEAD (or the working
    tree) against it; returns the gated run's exit code. ConfigError for an unknown ref or a
    folder outside git; 2 when recording BASE failed (nothing to gate against). SIGINT or
    SIGTERM (to the command or its process group) stops the child pytest, removes the
    worktrees and the temporary directory, says what was interrupted and returns 130 / 143."""
    with _Interruptions(f"checking out {base}") as interruptions:
        try:
            code = _continuous(base, head, pytest_args, say, cwd, interruptions)
        except BaseException:  # _Interrupted, or git's error after the group's signal stopped it
            if interruptions.received is None:
                raise
        if interruptions.received is not None:  # also one noted during the cleanup
            say(interruptions.message())
            return 128 + interruptions.received
        return code


def _continuous(base: str, head: str | None, pytest_args: Sequence[str], say: Callable[[str], None],
                cwd: Path | None, interruptions: _Interruptions) -> int:
    """continuous(), held from the start (see _Interruptions)."""
    here = (cwd or Path.cwd()).resolve()
    repository = find_repository(here, option=COMMAND)
    within = repository.relative(here, option=COMMAND)
    base_commit = resolve_commit(repository, base, option=f"{COMMAND} BASE")
    head_commit = resolve_commit(repository, head, option=f"{COMMAND} HEAD") if head else None
    if any(a == RECORD or a.startswith((DIRECTORY, "--neuron-baseline-ref")) for a in pytest_args):
        raise ConfigError(f"{COMMAND}: leave {RECORD}, {DIRECTORY} and "
                          "--neuron-baseline-ref out of the pytest arguments; the command sets them")
    with tempfile.TemporaryDirectory(prefix="neuronprof-continuous-") as temp:
        baselines = Path(temp) / "baselines"
        worktrees: list[Path] = []
        try:
            worktrees.append(_worktree(repository, base_commit, Path(temp) / "base"))
            interruptions.release(f"recording {base}")
            say(f"recording {base} ({base_commit[:12]}) into a temporary directory")
            recorded = _pytest(worktrees[0] / within, [*pytest_args, RECORD, f"{DIRECTORY}={baselines}"], say,
                               interruptions)
            if recorded not in (0, 5) or not baselines.is_dir():  # 5: no tests collected
                say(f"recording {base} failed (pytest exit code {recorded}): nothing to gate against")
                return 2
            tree, label = here, "the working tree"
            if head_commit is not None:
                interruptions.hold(f"checking out {head}")
                worktrees.append(_worktree(repository, head_commit, Path(temp) / "head"))
                tree, label = worktrees[-1] / within, f"{head} ({head_commit[:12]})"
            interruptions.release(f"gating {label} against {base}")
            say(f"gating {label} against {base}")
            subject = repository.git("log", "-1", "--no-show-signature", "--format=%s", base_commit,
                                     check=False, option=COMMAND).stdout.decode("utf-8", "replace").strip()
            # every output of the gated run names the base, and none suggests --neuron-baseline
            env = {**os.environ, RESIMULATED_BASE_VARIABLE: f"{base}\n{base_commit}\n{subject}"}
            return _pytest(tree, [*pytest_args, f"{DIRECTORY}={baselines}"], say, interruptions, env)
        finally:
            interruptions.hold("cleaning up")  # a signal now is noted: the cleanup finishes
            for worktree in worktrees:
                _remove_worktree(repository, worktree)
                if worktree.exists():  # git refused (an old git and a submodule): the files go,
                    shutil.rmtree(worktree, ignore_errors=True)  # then prune drops the entry
                    _remove_worktree(repository, worktree)
            interruptions.left = [worktree for worktree in worktrees if worktree.exists()]
            interruptions.removed = len(worktrees) - len(interruptions.left)
