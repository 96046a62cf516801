"""Baseline files as they are at a git ref (``--neuron-baseline-ref origin/main``), read straight
from git's object store: nothing is checked out, the working tree is not touched.

A pull request that re-records its baselines would otherwise pass its own gate; gating against
the base branch's files makes every slower number a change someone has to accept
(gate/accepted.py). Reading is by ``git ls-tree`` (what files exist at the ref, their modes and
sizes) and ``git cat-file blob`` (their bytes): a link or a submodule at the ref is refused, a
file above the size limit is refused unread, as for files on disk.

Where git runs is never decided by data. A pull request controls the files under
``baselines/`` and the reports made from them, so a directory there can hold the layout of a
repository of its own (``HEAD``, ``config``, ``objects/``) that git would discover and obey:
its refs would replace the real base and its configuration could run programs. So the
repository is found once, from the project's root (pytest's rootdir, or a command's working
directory), with ``safe.bareRepository=explicit``, and accepted only when its git directory is
the work tree's own ``.git`` (or what a ``.git`` file there points to: worktrees, submodules);
every later call names ``--git-dir`` and ``--work-tree`` (``Repository.git``), and read-only
calls run with overrides that keep configured programs (signature checkers, textconv and
external diff drivers, fsmonitor hooks) from starting. Global configuration is kept
(``safe.directory`` lives there in container CI).

Errors name the option and the ref, and say how to fix them: a ref git does not know (in a
shallow clone: how to fetch it), a ref that is not a revision (control characters, whitespace,
a leading ``-``), a directory outside the repository, git not installed, no baseline files under
the directory at that ref, a baseline directory that is a submodule at that ref.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import unicodedata
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..defaults import DEFAULT_MAX_FILE_BYTES
from ..errors import BaselineError, ConfigError
from ..files import show_path
from ..formatting import format_si
from ..safetext import quoted
from .baseline import PLUGIN_SIZE_OPTION, BaselineStore, ProfileSummary

REF_OPTION = "--neuron-baseline-ref (ini neuron_baseline_ref)"


class NoBaselinesAtRef(ConfigError):
    """The ref has no baseline files under the directory (history: a commit that removed them)."""


_LINK_MODE, _SUBMODULE_MODE = "120000", "160000"
GIT_TIMEOUT_S = 120.0
# Variables that would make git use another repository than the one named on its command line.
_REPOSITORY_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_INDEX_FILE",
                         "GIT_NAMESPACE", "GIT_CEILING_DIRECTORIES", "GIT_DISCOVERY_ACROSS_FILESYSTEM")
# Read-only plumbing never needs a configured program: these keep each kind from starting.
READ_ONLY_CONFIG = ("-c", "core.fsmonitor=false", "-c", "log.showSignature=false",
                    "-c", "core.hooksPath=/dev/null")
_DISCOVER = ("-c", "safe.bareRepository=explicit")


def _git_executable(option: str) -> str:
    git = shutil.which("git")
    if git is None:
        raise ConfigError(f"{option}: git is not installed or not on PATH; it reads the "
                          "baseline files from git")
    return git


def _environment() -> dict[str, str]:
    # No pager, no prompts, plain output; no variable that names another repository.
    env = {k: v for k, v in os.environ.items() if k not in _REPOSITORY_VARIABLES}
    env.update(GIT_PAGER="cat", GIT_TERMINAL_PROMPT="0", LC_ALL="C", GIT_OPTIONAL_LOCKS="0")
    return env


def _run(args: list[str], cwd: Path, check: bool, option: str, shown: tuple[str, ...]) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run(args, cwd=cwd, capture_output=True, env=_environment(), timeout=GIT_TIMEOUT_S,
                            stdin=subprocess.DEVNULL)
    if check and result.returncode != 0:
        raise ConfigError(f"{option}: `git {' '.join(shown[:3])}` failed in {show_path(cwd)}: "
                          f"{result.stderr.decode(errors='replace').strip()[:300]}")
    return result


def check_ref(ref: str, option: str = REF_OPTION) -> str:
    """``ref`` when it can only be a revision (a branch, tag, commit or revision syntax such as
    ``HEAD~1`` or ``origin/main^``); ConfigError naming ``option`` for one that is empty, starts
    with ``-`` (git would read an option), or holds whitespace or control characters (it would
    reach logs and terminals as text of its own: a workflow command, an escape sequence)."""
    odd = next((c for c in ref if c.isspace() or unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp", "Cs")), None)
    if not ref or ref.startswith("-") or odd is not None:
        why = ("it is empty" if not ref else "it starts with '-'" if ref.startswith("-")
               else f"it holds {'whitespace' if odd and odd.isspace() else 'a control character'} "
                    f"(U+{ord(odd or ' '):04X})")
        raise ConfigError(f"{option}={quoted(ref)}: not a git revision ({why}); give a branch, tag "
                          "or commit, such as origin/main")
    return ref


@dataclass(frozen=True)
class Repository:
    """A git repository found from a trusted place (``find_repository``): every call names its
    git directory and work tree, so nothing is discovered again from a data directory."""

    git_dir: Path
    work_tree: Path

    def git(self, *args: str, check: bool = True, option: str = REF_OPTION,
            read_only: bool = True) -> subprocess.CompletedProcess[bytes]:
        """``git ARGS`` on this repository; errors (git missing, a failed command with
        ``check``) are ConfigErrors naming ``option``. ``read_only``: with READ_ONLY_CONFIG (a
        call that writes, such as ``worktree add``, keeps the repository's filters and hooks)."""
        git = _git_executable(option)
        command = [git, f"--git-dir={self.git_dir}", f"--work-tree={self.work_tree}",
                   *(READ_ONLY_CONFIG if read_only else ()), *args]
        return _run(command, self.work_tree, check, option, args)

    def relative(self, directory: Path, option: str = REF_OPTION) -> PurePosixPath:
        """``directory`` relative to the work tree, as git names paths (no parts: its top);
        ConfigError naming ``option`` when it is outside."""
        absolute = Path(os.path.realpath(directory))
        try:
            return PurePosixPath(absolute.relative_to(self.work_tree).as_posix())
        except ValueError:
            raise ConfigError(f"{option}: {show_path(directory)} is outside the git repository at "
                              f"{show_path(self.work_tree)}; git reads the baseline files of that "
                              "repository only") from None


def _own_git_dir(top: Path) -> Path | None:
    """The git directory the work tree ``top`` names itself: ``top/.git``, or where a ``.git``
    file there points (``gitdir: ...``, as worktrees and submodules have)."""
    dot_git = top / ".git"
    if dot_git.is_dir():
        return Path(os.path.realpath(dot_git))
    try:
        text = dot_git.read_text(encoding="utf-8", errors="replace") if dot_git.is_file() else ""
    except OSError:
        return None
    first = text.splitlines()[0] if text else ""
    if not first.startswith("gitdir:"):
        return None
    return Path(os.path.realpath(top / first[len("gitdir:"):].strip()))


def find_repository(start: Path, option: str = REF_OPTION) -> Repository:
    """The repository whose work tree holds ``start`` (the project's root), found by git with
    bare repositories refused, and accepted only when its git directory is the work tree's own
    (git before 2.38 ignores ``safe.bareRepository``: this check holds there). ConfigError naming
    ``option`` outside any repository, or when git found a repository that is not the work
    tree's own (a repository's layout committed as files, a ``GIT_DIR`` elsewhere)."""
    git = _git_executable(option)
    where = next((c for c in (start, *start.parents) if c.is_dir()), Path.cwd())
    found = _run([git, *_DISCOVER, *READ_ONLY_CONFIG, "rev-parse", "--show-toplevel", "--absolute-git-dir"],
                 where, False, option, ("rev-parse",))
    lines = found.stdout.decode("utf-8", "surrogateescape").splitlines()
    if found.returncode != 0 or len(lines) != 2 or not lines[0]:
        raise ConfigError(f"{option}: {show_path(start)} is not in a git repository; it reads "
                          "the baseline files from git: run it inside a clone")
    top, git_dir = Path(os.path.realpath(lines[0])), Path(os.path.realpath(lines[1]))
    if _own_git_dir(top) != git_dir:
        raise ConfigError(f"{option}: git found the repository {show_path(git_dir)} for "
                          f"{show_path(start)}, which is not the work tree's own .git "
                          f"({show_path(top / '.git')}); refusing to read baselines from it. Run "
                          "from the project's clone, without GIT_DIR set")
    return Repository(git_dir, top)


def resolve_commit(repository: Repository, ref: str, option: str = REF_OPTION) -> str:
    """The commit ``ref`` names (a branch, tag, remote branch, hash or revision syntax);
    ConfigError naming ``option``, the ref and how to fetch it when git does not know it."""
    check_ref(ref, option)
    found = repository.git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
                           check=False, option=option)
    if found.returncode == 0:
        return found.stdout.decode().strip()
    shallow = repository.git("rev-parse", "--is-shallow-repository", check=False,
                             option=option).stdout.decode().strip()
    remote, _, branch = ref.partition("/")
    fetch = (f"git fetch --no-tags origin {branch}:refs/remotes/origin/{branch}" if remote == "origin" and branch
             else f"git fetch origin {ref}")
    if shallow == "true":
        raise ConfigError(
            f"{option}={quoted(ref)}: this is a shallow clone and {quoted(ref)} is not in it; "
            f"fetch it (`{fetch}`), or clone with the history (GitHub Actions: actions/checkout with "
            "`fetch-depth: 0`)")
    raise ConfigError(f"{option}={quoted(ref)}: git does not know this ref; fetch it "
                      f"(`{fetch}`) or name a branch, tag or commit that exists")


class RefBaselineStore(BaselineStore):
    """The baseline files under ``directory`` as they are at git ref ``ref`` of ``repository``:
    read only.

    ``load`` and ``validate_all`` work as on disk, reading each file's blob at the ref;
    ``save`` refuses (a run gated against a ref records into the working tree's store)."""

    def __init__(self, directory: str | os.PathLike[str], ref: str, repository: Repository,
                 max_bytes: int = DEFAULT_MAX_FILE_BYTES, size_option: str = PLUGIN_SIZE_OPTION,
                 commit: str | None = None) -> None:
        super().__init__(directory, max_bytes, size_option)
        self.ref = ref
        self.repository = repository
        self.commit = commit or resolve_commit(repository, ref)
        # the directory as git names it, relative to the repository (no parts: its top)
        self._prefix = repository.relative(self.directory)
        self._refuse_submodule()
        self._blobs = self._list()
        if not any(name.endswith(".json") for name in self._blobs):
            raise NoBaselinesAtRef(
                f"{REF_OPTION}={quoted(ref)}: there are no baseline files under "
                f"{show_path(self.directory)} at {quoted(ref)} ({self.commit[:12]}); record them "
                "on that branch first, or run without the option")

    def _refuse_submodule(self) -> None:
        """A baseline directory that is (inside) a submodule at the commit holds no files of this
        repository: git would show a commit object, not the baselines. A named error."""
        parts = self._prefix.parts
        if not parts:
            return
        paths = [str(PurePosixPath(*parts[:i])) for i in range(1, len(parts) + 1)]
        listing = self.repository.git("ls-tree", "-z", "--full-tree", self.commit, "--", *paths).stdout
        for line in listing.split(b"\x00"):
            meta, _, name = line.partition(b"\t")
            if meta.split()[:1] == [_SUBMODULE_MODE.encode()]:
                raise BaselineError(
                    f"{REF_OPTION}={quoted(self.ref)}: the baseline directory {show_path(self.directory)} "
                    f"is inside the submodule {quoted(name.decode('utf-8', 'replace'))} at that ref "
                    f"({self.commit[:12]}); keep the baseline files in the repository itself, not "
                    "in a submodule")

    def _list(self) -> dict[str, tuple[str, str, int]]:
        """Path (relative to the repository) -> (mode, object, size) of every blob under the
        directory at the commit."""
        args = ["ls-tree", "-r", "-l", "-z", "--full-tree", self.commit]
        if self._prefix.parts:
            args += ["--", str(self._prefix)]
        listing = self.repository.git(*args).stdout
        blobs: dict[str, tuple[str, str, int]] = {}
        for line in listing.split(b"\x00"):
            if not line:
                continue
            meta, _, name = line.partition(b"\t")
            mode, _, obj, size = meta.split()  # mode, type, object, size
            blobs[name.decode("utf-8", "surrogateescape")] = (
                mode.decode(), obj.decode(), int(size) if size.isdigit() else 0)
        return blobs

    def _relative(self, path: Path) -> str:
        """``path`` (under the store's directory, as path_for and files name them) as git names
        it: relative to the repository, with slashes."""
        return str(self._prefix / Path(path).relative_to(self.directory).as_posix())

    def where(self, path: Path) -> str:
        """How errors name a file at the ref: ``origin/main:baselines/tests/test_x.json``."""
        return f"{self.ref}:{self._relative(path)}"

    def blob(self, path: Path) -> str | None:
        """The git object of ``path`` at the ref (None: no such file there): equal objects are
        equal files, which ``neuronprof history`` parses once."""
        entry = self._blobs.get(self._relative(path))
        return entry[1] if entry is not None else None

    def _read_bytes(self, path: Path) -> bytearray | None:
        entry = self._blobs.get(self._relative(path))
        if entry is None:
            return None
        mode, obj, size = entry
        if mode in (_LINK_MODE, _SUBMODULE_MODE):
            raise BaselineError(f"baseline file {self.where(path)} is "
                                f"{'a symbolic link' if mode == _LINK_MODE else 'a submodule'} at "
                                "that ref, not a file; baseline files are plain JSON files")
        if size > self.max_bytes:
            raise BaselineError(f"baseline file {self.where(path)}: {format_si(size, 'B')} is above "
                                f"the limit of {format_si(self.max_bytes, 'B')} ({self.size_option})")
        return bytearray(self.repository.git("cat-file", "blob", obj).stdout)

    def files(self) -> list[Path]:
        below = len(self._prefix.parts)
        return sorted(self.directory.joinpath(*PurePosixPath(name).parts[below:])
                      for name in self._blobs if name.endswith(".json"))

    def read_file(self, path: Path, *args: Any, **kwargs: Any) -> dict[str, dict[str, ProfileSummary]]:
        try:
            return super().read_file(path, *args, **kwargs)
        except BaselineError as exc:
            if str(exc).startswith(f"baseline file {self.ref}:"):
                raise
            raise BaselineError(f"at {self.ref} ({self.commit[:12]}): {exc}") from None

    def save(self, entries: Any, remove: Any = ()) -> list[Path]:
        raise BaselineError(f"the baseline files at {self.ref} are read only: record into the "
                            "working tree (run --neuron-baseline without --neuron-baseline-ref)")
