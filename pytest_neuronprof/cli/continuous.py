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

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from ..errors import ConfigError
from ..gate.gitref import repository_root, resolve_commit, run_git

COMMAND = "neuronprof continuous"  # what errors name
RECORD = "--neuron-baseline"
DIRECTORY = "--neuron-baseline-dir"


def _worktree(root: Path, commit: str, where: Path) -> Path:
    run_git(root, "worktree", "add", "--detach", "--quiet", str(where), commit, option=COMMAND)
    return where


def _remove_worktree(root: Path, where: Path) -> None:
    run_git(root, "worktree", "remove", "--force", str(where), check=False, option=COMMAND)
    run_git(root, "worktree", "prune", check=False, option=COMMAND)


def _pytest(cwd: Path, args: Sequence[str], say: Callable[[str], None]) -> int:
    command = [sys.executable, "-m", "pytest", *args]
    say(f"$ (cd {cwd} && {' '.join(command[1:])})")
    return subprocess.run(command, cwd=cwd).returncode


def continuous(base: str, head: str | None, pytest_args: Sequence[str],
               say: Callable[[str], None], cwd: Path | None = None) -> int:
    """Record BASE's marked tests into a temporary directory, then gate HEAD (or the working
    tree) against it; returns the gated run's exit code. ConfigError for an unknown ref or a
    folder outside git; 2 when recording BASE failed (nothing to gate against)."""
    here = (cwd or Path.cwd()).resolve()
    root = repository_root(here, option=COMMAND).resolve()
    within = here.relative_to(root)
    base_commit = resolve_commit(root, base, option=f"{COMMAND} BASE")
    head_commit = resolve_commit(root, head, option=f"{COMMAND} HEAD") if head else None
    if any(a == RECORD or a.startswith((DIRECTORY, "--neuron-baseline-ref")) for a in pytest_args):
        raise ConfigError(f"{COMMAND}: leave {RECORD}, {DIRECTORY} and "
                          "--neuron-baseline-ref out of the pytest arguments; the command sets them")
    with tempfile.TemporaryDirectory(prefix="neuronprof-continuous-") as temp:
        baselines = Path(temp) / "baselines"
        worktrees: list[Path] = []
        try:
            worktrees.append(_worktree(root, base_commit, Path(temp) / "base"))
            say(f"recording {base} ({base_commit[:12]}) into a temporary directory")
            recorded = _pytest(worktrees[0] / within, [*pytest_args, RECORD, f"{DIRECTORY}={baselines}"], say)
            if recorded not in (0, 5) or not baselines.is_dir():  # 5: no tests collected
                say(f"recording {base} failed (pytest exit code {recorded}): nothing to gate against")
                return 2
            tree, label = here, "the working tree"
            if head_commit is not None:
                worktrees.append(_worktree(root, head_commit, Path(temp) / "head"))
                tree, label = worktrees[-1] / within, f"{head} ({head_commit[:12]})"
            say(f"gating {label} against {base}")
            return _pytest(tree, [*pytest_args, f"{DIRECTORY}={baselines}"], say)
        finally:
            for worktree in worktrees:
                _remove_worktree(root, worktree)
