"""BaselineStore: per-op device-time baselines as JSON files users commit.

One file per test module, mirroring its path (``tests/test_mlp.py`` ->
``baselines/tests/test_mlp.json``), keyed by test node id, then by variant
(``"simulated:trn2"``), so numbers of different backends or chips never meet.

Files are deterministic (sorted keys, fixed rounding, no timestamps): re-recording unchanged
code leaves them byte-identical.

Schema versions: 1 holds exact (simulated) entries, each op with the one module where it spent
most of its time; 2 adds the optional per-round ``samples`` of measured backends (cpu, cuda,
neuron); 3 replaces each op's ``module`` by ``modules``, its device time per module path (so a
failure names the modules whose time changed), and adds the optional ``recomputed`` (calls that
activation checkpointing re-ran) and ``uncosted`` (costed by the fallback). Files are written as
version 3; versions 1 and 2 are read as they are (their ops' time all in their one module) and
become version 3 when re-recorded. A pytest-neuronprof that predates a version refuses (rather
than misreads) a file that has it. Writes hold a file lock while they re-read, merge and replace
the file atomically, so parallel writers (xdist, sharded CI jobs) never lose or half-write an
entry. A file that does not validate (duplicate keys and unknown keys included, at every level)
stops the run with an error naming it; it is never overwritten.

Only baseline files are baselines: a ``--neuron-report`` or a Chrome trace left in the directory
(an output path inside it is refused up front) is not read as one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import BaselineError
from ..files import atomic_write_text, show_path
from .decode import Decoder, DuplicateKeyError, load_json
from .summary import ProfileSummary

SCHEMA_VERSION = 3  # the newest this module reads, and the one it writes
SAMPLES_SCHEMA_VERSION = 2  # the first with per-round samples (measured backends)
MODULES_SCHEMA_VERSION = 3  # the first with each op's time per module
READABLE_VERSIONS = (1, 2, 3)
TRACE_SUFFIX = ".trace.json"  # outputs.trace_files' names: never baseline files
LOCK_TIMEOUT_S = 60.0
_FIX = ("restore it from version control (`git checkout -- {path}`), or delete it and re-record "
        "with `pytest --neuron-baseline`")


def baseline_path(baseline_dir: Path, nodeid: str) -> Path:
    """The file holding ``nodeid``'s entries: the test module's path with .json."""
    module = nodeid.split("::", 1)[0]
    relative = Path(module).with_suffix(".json")
    if relative.is_absolute() or ".." in relative.parts:
        relative = Path(*[p for p in relative.parts if p not in ("..", relative.anchor)])
    return baseline_dir / relative


def lock_path(path: Path) -> Path:
    """The lock guarding ``path``: in the temp folder, so no lock files land among the baselines
    users commit. An OS lock (fcntl / msvcrt) is freed when its holder dies: no stale locks."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]
    folder = Path(tempfile.gettempdir()) / "pytest-neuronprof-locks"
    folder.mkdir(exist_ok=True)
    return folder / f"{digest}.lock"


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a valid number in a baseline")


def _fail(path: Path, problem: str) -> BaselineError:
    shown = show_path(path)
    return BaselineError(f"broken baseline file {shown}: {problem}; {_FIX.format(path=shown)}")


def _parse_summary(check: Decoder, where: str, data: Any, version: int) -> ProfileSummary:
    if isinstance(data, dict) and "samples" in data and version < SAMPLES_SCHEMA_VERSION:
        raise check.fail(f"{where} has per-round samples, which need schema_version "
                         f"{SAMPLES_SCHEMA_VERSION} (the file says {version})")
    return ProfileSummary.from_json(data, check, where, legacy=version < MODULES_SCHEMA_VERSION)


def _load(path: Path, text: str) -> Any:
    if not text.strip():
        raise _fail(path, "the file is empty")
    try:
        return load_json(text, parse_constant=_reject_constant)
    except DuplicateKeyError as exc:
        raise _fail(path, f"{exc} (two entries where one belongs, as a merge that kept both sides "
                          "leaves them: the last one would win unseen)") from None
    except (json.JSONDecodeError, ValueError) as exc:
        raise _fail(path, f"not valid JSON ({exc})") from None
    except RecursionError:  # json's C decoder on deeply nested arrays (fuzzing found it)
        raise _fail(path, "not valid JSON (nested too deeply)") from None


def is_other_output(path: Path, data: Any) -> bool:
    """A file of the plugin's other outputs (a --neuron-report, a Chrome trace) that was left in
    a baseline directory: not a baseline file, so not read as one."""
    if path.name.endswith(TRACE_SUFFIX):
        return True
    return isinstance(data, dict) and "schema_version" not in data and (
        "report_version" in data or "traceEvents" in data)


def parse_baseline_text(path: Path, text: str) -> dict[str, dict[str, ProfileSummary]]:
    """Validate a baseline file's text: {nodeid: {variant: ProfileSummary}}."""
    return _parse_document(path, _load(path, text))


def _parse_document(path: Path, data: Any) -> dict[str, dict[str, ProfileSummary]]:
    check = Decoder(lambda problem: _fail(path, problem))
    check.mapping("the top level", data)
    version = data.get("schema_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise BaselineError(
            f"baseline file {show_path(path)} has schema_version {version!r}; this "
            f"pytest-neuronprof reads schema_version {SCHEMA_VERSION} and older "
            f"({', '.join(map(str, READABLE_VERSIONS))}): upgrade pytest-neuronprof "
            f"if the file is newer, or {_FIX.format(path=show_path(path))}")
    check.known_keys("the top level", data, ("schema_version", "tests"))
    tests = check.mapping("tests", data.get("tests"))
    parsed: dict[str, dict[str, ProfileSummary]] = {}
    for nodeid, variants in tests.items():
        check.mapping(f"tests[{nodeid!r}]", variants)
        parsed[nodeid] = {variant: _parse_summary(check, f"tests[{nodeid!r}][{variant!r}]", entry, version)
                          for variant, entry in variants.items()}
    return parsed


def render_baseline(tests: Mapping[str, Mapping[str, ProfileSummary]]) -> str:
    document = {
        "schema_version": SCHEMA_VERSION,
        "tests": {nodeid: {variant: summary.to_json() for variant, summary in sorted(variants.items())}
                  for nodeid, variants in sorted(tests.items())},
    }
    return json.dumps(document, indent=2, sort_keys=True, allow_nan=False) + "\n"


def _stale_temp_files(folders: Iterable[Path]) -> dict[Path, list[Path]]:
    """Temp files atomic_write_text left behind in ``folders`` (a writer killed mid-write),
    by the file they were to replace. Each folder is listed once per save."""
    pattern = re.compile(r"\.(.+\.json)\.[^.]+\.tmp")
    stale: dict[Path, list[Path]] = {}
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            match = pattern.fullmatch(name)
            if match:
                stale.setdefault(folder / match.group(1), []).append(folder / name)
    return stale


class BaselineStore:
    """Reads and writes the baseline files under one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._cache: dict[Path, dict[str, dict[str, ProfileSummary]]] = {}

    def path_for(self, nodeid: str) -> Path:
        return baseline_path(self.directory, nodeid)

    @staticmethod
    def _read_text(path: Path) -> str | None:
        if path.is_dir():
            raise BaselineError(f"baseline path {path} is a directory, expected a JSON file")
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except UnicodeDecodeError:
            raise _fail(path, "not UTF-8 text") from None
        except OSError as exc:
            raise BaselineError(f"cannot read baseline file {path}: {exc.strerror}") from None

    def read_file(self, path: Path) -> dict[str, dict[str, ProfileSummary]]:
        """The entries of one file ({} when it does not exist, or is another output's file)."""
        text = self._read_text(path)
        if text is None:
            return {}
        data = _load(path, text)
        return {} if is_other_output(path, data) else _parse_document(path, data)

    def validate_all(self) -> int:
        """Read every baseline file under the directory; a broken one raises BaselineError.
        Returns how many files were read."""
        if not self.directory.is_dir():
            # A file in its place (or above it) stopped the run only when a test read or wrote
            # a baseline, as an INTERNALERROR; say so up front, naming it.
            for above in (self.directory, *self.directory.parents):
                if above.exists():
                    if not above.is_dir():
                        raise BaselineError(
                            f"baseline directory {show_path(self.directory)}: "
                            f"{show_path(above)} is a file, not a directory; point "
                            "--neuron-baseline-dir (ini neuron_baseline_dir) at a directory")
                    break
            return 0
        files = sorted(self.directory.rglob("*.json"))
        for path in files:
            self._cache[path] = self.read_file(path)
        return len(files)

    def load(self, nodeid: str, variant: str) -> ProfileSummary | None:
        """The stored summary of ``nodeid`` for ``variant``, or None. Files are read once."""
        path = self.path_for(nodeid)
        if path not in self._cache:
            self._cache[path] = self.read_file(path)
        return self._cache[path].get(nodeid, {}).get(variant)

    def save(self, entries: Iterable[tuple[str, ProfileSummary]]) -> list[Path]:
        """Record entries, merging with what each file holds now; returns files changed."""
        from filelock import FileLock, Timeout

        by_file: dict[Path, list[tuple[str, ProfileSummary]]] = {}
        for nodeid, summary in entries:
            by_file.setdefault(self.path_for(nodeid), []).append((nodeid, summary))
        changed = []
        stale = _stale_temp_files({path.parent for path in by_file})
        for path, items in sorted(by_file.items()):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BaselineError(f"cannot create baseline directory {path.parent}: "
                                    f"{exc.strerror}") from None
            try:
                lock = FileLock(str(lock_path(path)), timeout=LOCK_TIMEOUT_S)
                with lock:
                    # Every live writer of path holds this lock while its temp file exists:
                    # those still here were left by a writer killed mid-write (kill -9).
                    for leftover in stale.get(path, ()):
                        try:
                            leftover.unlink()
                        except FileNotFoundError:
                            pass
                    # Re-read under the lock: another process may have written since we loaded.
                    old_text = self._read_text(path)
                    tests = {} if old_text is None else parse_baseline_text(path, old_text)
                    for nodeid, summary in items:
                        tests.setdefault(nodeid, {})[summary.variant] = summary
                    text = render_baseline(tests)
                    if text != old_text:
                        atomic_write_text(path, text)
                        changed.append(path)
                    # Cache what the file now says (rounded), as a fresh read would see it.
                    self._cache[path] = parse_baseline_text(path, text)
            except Timeout:
                raise BaselineError(f"timed out after {LOCK_TIMEOUT_S:.0f} s waiting for the lock "
                                    f"{lock_path(path)} (guarding {path}) held by another process") from None
            except OSError as exc:
                raise BaselineError(f"cannot write baseline file {path}: {exc.strerror or exc}") from None
        return changed
