"""Where a test's baseline lives, and under which key: independent of the directory pytest was
started in and of the rootdir it guessed.

pytest's node ids are relative to its rootdir, and without an ini file the rootdir is a guess
from the command line (``cd tests && pytest`` makes it ``tests/``; an option value that is an
existing folder moves it up). Keyed by node ids, every baseline then went unfound and every test
passed as "no baseline". So a test's key is its file's path relative to a folder found from the
file itself, then the rest of its node id (``tests/test_mlp.py::test_forward[bf16]``):

- with an ini file (pytest.ini, pyproject.toml, tox.ini, setup.cfg: the project's root), relative
  to the ini file's folder; the baseline directory is ``--neuron-baseline-dir`` (relative to the
  working directory), ini ``neuron_baseline_dir`` (relative to the ini file) or ``baselines/``
  next to the ini file;
- without one, ``--neuron-baseline-dir`` or else the nearest ``baselines/`` folder found walking
  up from the test file (as snapshot plugins find theirs; not above a folder that marks a project
  root, nor above the home folder), else ``baselines/`` under the rootdir, where recording creates
  it; keys are relative to the folder that holds the baseline directory.

A test file outside those folders keeps pytest's node id as its key. At the session's end,
``check_matched`` says when none of the profiled tests found its entry in baseline files that
hold entries (a key that moved).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..defaults import DEFAULT_BASELINE_DIR, DEFAULT_MAX_FILE_BYTES
from ..errors import NeuronProfError
from ..files import show_path
from ..gate.baseline import BaselineStore, baseline_path
from ..gate.compare import Status
from ..gate.outcome import TestOutcome
from ..outputs.hints import record_hint
from ..safetext import quoted

# A folder with one of these is a project's root: the search for baselines/ stops there.
PROJECT_MARKERS = (".git", ".hg", "pyproject.toml", "setup.py", "setup.cfg", "tox.ini", "pytest.ini",
                   ".pytest.ini", "pytest.toml")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def find_baseline_dir(start: Path, name: str = DEFAULT_BASELINE_DIR) -> Path | None:
    """The nearest ``name`` folder in ``start`` or above it, up to a project's root or the home
    folder (inclusive); None when there is none."""
    home = Path.home()
    for folder in (start, *start.parents):
        if (folder / name).is_dir():
            return folder / name
        if folder == home or any((folder / marker).exists() for marker in PROJECT_MARKERS):
            return None
    return None


@dataclass(frozen=True)
class Stale:
    """A baseline entry no test produced, in the file of a module that ran in full."""

    path: Path  # its baseline file
    key: str
    variant: str
    sibling: TestOutcome  # a test of the same module that ran (its directory and variant options)


@dataclass
class BaselineLocator:
    """Turns a test (its file and node id) into (baseline directory, key); one per session."""

    explicit: Path | None  # --neuron-baseline-dir or ini neuron_baseline_dir, absolute
    ini_dir: Path | None  # the folder of the ini file pytest read
    rootdir: Path
    max_bytes: int = DEFAULT_MAX_FILE_BYTES  # a larger baseline file is refused unread
    _dirs: dict[Path, Path] = field(default_factory=dict)  # test file's folder -> baseline dir
    _stores: dict[Path, BaselineStore] = field(default_factory=dict)

    def directory(self, test_dir: Path) -> Path:
        """The baseline directory of the tests in ``test_dir``."""
        found = self._dirs.get(test_dir)
        if found is None:
            if self.explicit is not None:
                found = self.explicit
            elif self.ini_dir is not None:
                found = self.ini_dir / DEFAULT_BASELINE_DIR
            else:
                found = find_baseline_dir(test_dir) or self.rootdir / DEFAULT_BASELINE_DIR
            self._dirs[test_dir] = found
        return found

    def anchor(self, test_file: Path, directory: Path) -> Path | None:
        """The folder a test file's key is relative to, or None (pytest's node id)."""
        if self.ini_dir is not None and _inside(test_file, self.ini_dir):
            return self.ini_dir
        if _inside(test_file, directory.parent):
            return directory.parent
        if self.ini_dir is None:  # --neuron-baseline-dir outside: the folder holding both
            common = Path(os.path.commonpath([test_file, directory]))
            if common.parent != common:  # not the filesystem's root
                return common
        return None

    def locate(self, test_file: Path, nodeid: str) -> tuple[Path, str]:
        """(baseline directory, key) of the test ``nodeid`` defined in ``test_file``."""
        test_file = test_file.resolve()
        directory = self.directory(test_file.parent)
        anchor = self.anchor(test_file, directory)
        if anchor is None or "::" not in nodeid:
            return directory, nodeid
        return directory, f"{test_file.relative_to(anchor).as_posix()}::{nodeid.split('::', 1)[1]}"

    def source_root(self, test_file: Path) -> Path:
        """The folder the files a test's profile names (where a compiled graph's function is
        defined, a graph break's line) are stored relative to: the one its key is relative to,
        else the rootdir pytest's node ids are relative to. Not the working directory: a
        baseline recorded from ``examples/`` gates the same from the repository's root."""
        test_file = test_file.resolve()
        return self.anchor(test_file, self.directory(test_file.parent)) or self.rootdir

    def store(self, directory: Path) -> BaselineStore:
        store = self._stores.get(directory)
        if store is None:
            store = self._stores[directory] = BaselineStore(directory, self.max_bytes)
        return store

    def known_dirs(self, starts: list[Path]) -> list[Path]:
        """The baseline directories known before any test runs: the explicit one, or those found
        from the test paths given on the command line (for checks at the session's start)."""
        if self.explicit is not None:
            return [self.explicit]
        if self.ini_dir is not None:
            return [self.ini_dir / DEFAULT_BASELINE_DIR]
        return sorted({self.directory(start if start.is_dir() else start.parent) for start in starts})

    def check_matched(self, outcomes: list[TestOutcome], fully_ran: Callable[[TestOutcome], bool]) -> None:
        """Baseline files out of step with the tests, which would pass everything silently, are
        an error: a module that ran in full (``fully_ran``: none of its tests deselected or left
        out by node ids) has a baseline file but none of its profiled tests has an entry in it;
        or no module that ran has a file while the directory holds files only for test modules
        that do not exist (a moved tree, a wrong --neuron-baseline-dir). A module with no file
        is new: its tests pass with "no baseline", run alone or with others."""
        if not outcomes:
            return
        by_file: dict[Path, list[TestOutcome]] = {}
        for o in outcomes:
            by_file.setdefault(baseline_path(Path(o.baseline_dir), o.baseline_key), []).append(o)
        any_file = False
        for path, tests in by_file.items():
            if not path.is_file():
                continue
            any_file = True
            entries = self.store(Path(tests[0].baseline_dir)).read_file(path)
            # an entry for another variant (other hardware) is a match
            if entries and not any(o.baseline_key in entries for o in tests) and all(map(fully_ran, tests)):
                self._out_of_step(tests, [path], list(entries))
        if any_file or any(o.verdict.status != Status.NO_BASELINE for o in outcomes):
            return
        dirs = sorted({Path(o.baseline_dir) for o in outcomes})
        keys = [key for directory in dirs if directory.is_dir()
                for path in self.store(directory).files()
                for key in self.store(directory).read_file(path)]
        if keys and not any(self._module_exists(key, directory) for key in keys for directory in dirs):
            self._out_of_step(outcomes, dirs, keys)

    def stale(self, outcomes: list[TestOutcome], fully_ran: Callable[[TestOutcome], bool]) -> list[Stale]:
        """The baseline entries no test of the run produced, in the files of modules that ran in
        full (``fully_ran``), of the variants the run costed for that module (an entry of another
        chip or mode is never stale: the run did not look at it). syrupy's unused snapshots."""
        by_file: dict[Path, list[TestOutcome]] = {}
        for o in outcomes:
            by_file.setdefault(baseline_path(Path(o.baseline_dir), o.baseline_key), []).append(o)
        found = []
        for path, tests in sorted(by_file.items()):
            if not path.is_file() or not all(map(fully_ran, tests)):
                continue
            produced = {(o.baseline_key, o.current.variant) for o in tests}
            costed = {o.current.variant for o in tests}
            entries = self.store(Path(tests[0].baseline_dir)).read_file(path)
            found += [Stale(path, key, variant, tests[0]) for key, variants in sorted(entries.items())
                      for variant in sorted(variants) if variant in costed and (key, variant) not in produced]
        return found

    def _module_exists(self, key: str, directory: Path) -> bool:
        """Whether the test module a baseline key names exists, relative to any folder keys are
        relative to (the ini file's, the baseline directory's parent, the rootdir)."""
        module = key.split("::", 1)[0]
        return any((anchor / module).is_file()
                   for anchor in (self.ini_dir, directory.parent, self.rootdir) if anchor is not None)

    def _out_of_step(self, outcomes: list[TestOutcome], where: list[Path], keys: list[str]) -> None:
        first = outcomes[0]
        looked = baseline_path(Path(first.baseline_dir), first.baseline_key)
        raise NeuronProfError(
            f"none of the {len(outcomes)} profiled tests has an entry in its baseline file, although "
            f"{', '.join(show_path(d) for d in where)} holds {len(keys)} entr{'y' if len(keys) == 1 else 'ies'} "
            f"(e.g. {quoted(keys[0])}): {first.nodeid} was looked up as {quoted(first.baseline_key)} in "
            f"{show_path(looked)}{' (and so on)' if len(outcomes) > 1 else ''}. If the tests are new, "
            f"record them with {record_hint(outcomes[:3], outcomes)}"
            f"{' ...' if len(outcomes) > 3 else ''}; if the baselines were recorded under other keys "
            "(another layout, another --neuron-baseline-dir), point --neuron-baseline-dir (ini "
            "neuron_baseline_dir) at the right directory or re-record them")
