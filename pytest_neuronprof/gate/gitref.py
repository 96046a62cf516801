"""Baseline files as they are at a git ref (``--neuron-baseline-ref origin/main``), read straight
from git's object store: nothing is checked out, the working tree is not touched.

A pull request that re-records its baselines would otherwise pass its own gate; gating against
the base branch's files makes every slower number a change someone has to accept
(gate/accepted.py). Reading is by ``git ls-tree`` (what files exist at the ref, their modes and
sizes) and ``git cat-file blob`` (their bytes): a link or a submodule at the ref is refused, a
file above the size limit is refused unread, as for files on disk.

Errors name the option and the ref, and say how to fix them: a ref git does not know (in a
shallow clone: how to fetch it), a directory outside any git repository, git not installed, no
baseline files under the directory at that ref.
"""

from __future__ import annotations

import os
import shutil
import subprocess
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


def run_git(cwd: Path, *args: str, check: bool = True,
            option: str = REF_OPTION) -> subprocess.CompletedProcess[bytes]:
    """``git ARGS`` in ``cwd``; errors (git missing, a failed command with ``check``) are
    ConfigErrors naming ``option``, the option or command that asked for git."""
    git = shutil.which("git")
    if git is None:
        raise ConfigError(f"{option}: git is not installed or not on PATH; it reads the "
                          "baseline files from git")
    # No pager, no prompts, no local config that rewrites output: plain plumbing.
    env = {**os.environ, "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"}
    result = subprocess.run([git, *args], cwd=cwd, capture_output=True, env=env,
                            timeout=GIT_TIMEOUT_S)
    if check and result.returncode != 0:
        raise ConfigError(f"{option}: `git {' '.join(args[:3])}` failed in {show_path(cwd)}: "
                          f"{result.stderr.decode(errors='replace').strip()[:300]}")
    return result


def _existing(path: Path) -> Path:
    """The directory itself or its nearest existing ancestor (git runs there)."""
    for candidate in (path, *path.parents):
        if candidate.is_dir():
            return candidate
    return Path.cwd()


def repository_root(directory: Path, option: str = REF_OPTION) -> Path:
    """The top of the git work tree holding ``directory``; ConfigError naming ``option``
    outside any."""
    found = run_git(_existing(directory), "rev-parse", "--show-toplevel", check=False, option=option)
    if found.returncode != 0:
        raise ConfigError(f"{option}: {show_path(directory)} is not in a git repository; it reads "
                          "the baseline files from git: run it inside a clone")
    return Path(found.stdout.decode().strip())


def resolve_commit(root: Path, ref: str, option: str = REF_OPTION) -> str:
    """The commit ``ref`` names (a branch, tag, remote branch or hash); ConfigError naming
    ``option``, the ref and how to fetch it when git does not know it."""
    if not ref or ref.startswith("-") or "\x00" in ref:
        raise ConfigError(f"{option}={quoted(ref)}: expected a branch, tag or commit, such as "
                          "origin/main")
    found = run_git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
                    check=False, option=option)
    if found.returncode == 0:
        return found.stdout.decode().strip()
    shallow = run_git(root, "rev-parse", "--is-shallow-repository", check=False,
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
    """The baseline files under ``directory`` as they are at git ref ``ref``: read only.

    ``load`` and ``validate_all`` work as on disk, reading each file's blob at the ref;
    ``save`` refuses (a run gated against a ref records into the working tree's store)."""

    def __init__(self, directory: str | os.PathLike[str], ref: str,
                 max_bytes: int = DEFAULT_MAX_FILE_BYTES, size_option: str = PLUGIN_SIZE_OPTION) -> None:
        super().__init__(directory, max_bytes, size_option)
        self.ref = ref
        # Absolute and free of links, as git names the work tree, so that paths compare.
        absolute = Path(os.path.realpath(self.directory))
        self.root = Path(os.path.realpath(repository_root(absolute)))
        self.commit = resolve_commit(self.root, ref)
        # the directory as git names it, relative to the repository (no parts: its top)
        self._prefix = PurePosixPath(absolute.relative_to(self.root).as_posix())
        self._blobs = self._list()
        if not any(name.endswith(".json") for name in self._blobs):
            raise NoBaselinesAtRef(
                f"{REF_OPTION}={quoted(ref)}: there are no baseline files under "
                f"{show_path(self.directory)} at {quoted(ref)} ({self.commit[:12]}); record them "
                "on that branch first, or run without the option")

    def _list(self) -> dict[str, tuple[str, str, int]]:
        """Path (relative to the repository) -> (mode, object, size) of every blob under the
        directory at the commit."""
        args = ["ls-tree", "-r", "-l", "-z", "--full-tree", self.commit]
        if self._prefix.parts:
            args += ["--", str(self._prefix)]
        listing = run_git(self.root, *args).stdout
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
        return bytearray(run_git(self.root, "cat-file", "blob", obj).stdout)

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

    def save(self, entries: Any) -> list[Path]:
        raise BaselineError(f"the baseline files at {self.ref} are read only: record into the "
                            "working tree (run --neuron-baseline without --neuron-baseline-ref)")
