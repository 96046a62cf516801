"""BaselineStore: per-op device-time baselines as JSON files users commit.

One file per test module, mirroring its path (``tests/test_mlp.py`` ->
``baselines/tests/test_mlp.json``), keyed by test node id, then by variant
(``"simulated:trn2"``), so numbers of different backends or chips never meet.

Files are deterministic (sorted keys, fixed rounding, no timestamps): re-recording unchanged
code leaves them byte-identical.

Schema versions: 1 holds exact (simulated) entries; 2 adds the optional per-round ``samples``
of measured backends (cpu, cuda, neuron). A file is written with the lowest version that holds
what it contains, so files of simulated entries stay version 1, byte for byte, and a
pytest-neuronprof that predates samples refuses (rather than misreads) a file that has them. Writes hold a file lock while they re-read, merge and replace
the file atomically, so parallel writers (xdist, sharded CI jobs) never lose or half-write an
entry. A file that does not validate stops the run with an error naming it; it is never
overwritten.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import BaselineError
from .files import OutputError, atomic_write_text, show_path  # noqa: F401  (also imported from here)
from .summary import OpSummary, ProfileSummary, RoundSamples

SCHEMA_VERSION = 2  # the newest this module reads and writes
SAMPLES_SCHEMA_VERSION = 2  # the first with per-round samples (measured backends)
READABLE_VERSIONS = (1, 2)
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


def _expect(path: Path, where: str, value: Any, kind: type | tuple[type, ...]) -> Any:
    if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise _fail(path, f"{where} should be {names}, got {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise _fail(path, f"{where} is {value}")
    return value


def _number(path: Path, where: str, value: Any) -> float:
    value = _expect(path, where, value, (int, float))
    if value < 0:
        raise _fail(path, f"{where} is negative ({value})")
    if value > _MAX:  # an int beyond float range: float() raised OverflowError (fuzzing found it)
        raise _fail(path, f"{where} is too large")
    return float(value)


def _whole(path: Path, where: str, value: Any) -> int:
    # int(1.5) would silently store a call count of 1: a fractional count is a broken file.
    number = _number(path, where, value)
    if not number.is_integer():
        raise _fail(path, f"{where} should be a whole number, got {value!r}")
    return int(number)


_OP_KEYS = frozenset({"count", "device_time_us", "engine", "flops", "bytes", "share", "module"})
_INF = float("inf")
_MAX = sys.float_info.max  # ints above it do not convert to float


def _parse_op_fast(op: Any) -> OpSummary | None:
    """The common, valid case without per-field error bookkeeping (2,000 tests x 30 ops parse in
    a fraction of a second); None sends the entry to the checks that explain what is wrong."""
    if type(op) is not dict or op.keys() != _OP_KEYS:
        return None
    count, time_us, flops, nbytes, share = (op["count"], op["device_time_us"], op["flops"],
                                            op["bytes"], op["share"])
    if (type(count) is int and type(flops) is int and type(nbytes) is int
            and type(time_us) in (int, float) and type(share) in (int, float)
            and type(op["engine"]) is str and type(op["module"]) is str
            and 0 <= count <= _MAX and 0 <= flops <= _MAX and 0 <= nbytes <= _MAX
            and 0 <= time_us <= _MAX and 0 <= share <= _MAX):
        return OpSummary(count, float(time_us), op["engine"], flops, nbytes, float(share), op["module"])
    return None


def _parse_op(path: Path, at: str, op: Any) -> OpSummary:
    _expect(path, at, op, dict)
    return OpSummary(
        count=_whole(path, f"{at}.count", op.get("count")),
        device_time_us=_number(path, f"{at}.device_time_us", op.get("device_time_us")),
        engine=_expect(path, f"{at}.engine", op.get("engine"), str),
        flops=_whole(path, f"{at}.flops", op.get("flops")),
        bytes=_whole(path, f"{at}.bytes", op.get("bytes")),
        share=_number(path, f"{at}.share", op.get("share")),
        module=_expect(path, f"{at}.module", op.get("module"), str),
    )


_SUMMARY_KEYS = frozenset({"backend", "hardware", "cost_model_version", "torch_version",
                           "total_device_time_us", "ops"})
_SAMPLES_KEYS = frozenset({"rounds", "total_device_time_us", "ops"})


def _series(path: Path, where: str, value: Any, rounds: int) -> tuple[float, ...]:
    values = _expect(path, where, value, list)
    if len(values) != rounds:
        raise _fail(path, f"{where} has {len(values)} values, expected one per round ({rounds})")
    return tuple(_number(path, f"{where}[{i}]", v) for i, v in enumerate(values))


def _parse_samples(path: Path, where: str, data: Any, ops: Mapping[str, OpSummary]) -> RoundSamples:
    _expect(path, where, data, dict)
    if data.keys() != _SAMPLES_KEYS:
        raise _fail(path, f"{where} should have exactly the keys {', '.join(sorted(_SAMPLES_KEYS))}, "
                          f"got {', '.join(sorted(map(str, data))) or 'none'}")
    rounds = _whole(path, f"{where}.rounds", data["rounds"])
    if rounds < 1:
        raise _fail(path, f"{where}.rounds is {rounds}, expected at least 1")
    total = _series(path, f"{where}.total_device_time_us", data["total_device_time_us"], rounds)
    ops_data = _expect(path, f"{where}.ops", data["ops"], dict)
    samples = {}
    for name, values in ops_data.items():
        if name not in ops:
            raise _fail(path, f"{where}.ops has samples of {name!r}, which is not among the entry's ops")
        samples[name] = _series(path, f"{where}.ops[{name!r}]", values, rounds)
    return RoundSamples(total, samples)


def _parse_summary(path: Path, where: str, data: Any, version: int = SCHEMA_VERSION) -> ProfileSummary:
    _expect(path, where, data, dict)
    unknown = sorted(set(map(str, data)) - _SUMMARY_KEYS - {"samples"})
    if unknown:
        raise _fail(path, f"{where} has unknown key(s) {', '.join(map(repr, unknown))}")
    if "samples" in data and version < SAMPLES_SCHEMA_VERSION:
        raise _fail(path, f"{where} has per-round samples, which need schema_version "
                          f"{SAMPLES_SCHEMA_VERSION} (the file says {version})")
    ops_data = _expect(path, f"{where}.ops", data.get("ops"), dict)
    ops = {name: _parse_op_fast(op) or _parse_op(path, f"{where}.ops[{name!r}]", op)
           for name, op in ops_data.items()}
    return ProfileSummary(
        backend=_expect(path, f"{where}.backend", data.get("backend"), str),
        hardware=_expect(path, f"{where}.hardware", data.get("hardware"), str),
        cost_model_version=_expect(path, f"{where}.cost_model_version", data.get("cost_model_version"), str),
        torch_version=_expect(path, f"{where}.torch_version", data.get("torch_version"), str),
        total_device_time_us=_number(path, f"{where}.total_device_time_us", data.get("total_device_time_us")),
        ops=ops,
        samples=_parse_samples(path, f"{where}.samples", data["samples"], ops) if "samples" in data else None,
    )


def parse_baseline_text(path: Path, text: str) -> dict[str, dict[str, ProfileSummary]]:
    """Validate a baseline file's text: {nodeid: {variant: ProfileSummary}}."""
    if not text.strip():
        raise _fail(path, "the file is empty")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise _fail(path, f"not valid JSON ({exc})") from None
    except RecursionError:  # json's C decoder on deeply nested arrays (fuzzing found it)
        raise _fail(path, "not valid JSON (nested too deeply)") from None
    _expect(path, "the top level", data, dict)
    version = data.get("schema_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise BaselineError(
            f"baseline file {show_path(path)} has schema_version {version!r}; this "
            f"pytest-neuronprof reads schema_version {SCHEMA_VERSION} and older "
            f"({', '.join(map(str, READABLE_VERSIONS))}): upgrade pytest-neuronprof "
            f"if the file is newer, or {_FIX.format(path=show_path(path))}")
    tests = _expect(path, "tests", data.get("tests"), dict)
    parsed: dict[str, dict[str, ProfileSummary]] = {}
    for nodeid, variants in tests.items():
        _expect(path, f"tests[{nodeid!r}]", variants, dict)
        parsed[nodeid] = {variant: _parse_summary(path, f"tests[{nodeid!r}][{variant!r}]", entry, version)
                          for variant, entry in variants.items()}
    return parsed


def schema_version_for(tests: Mapping[str, Mapping[str, ProfileSummary]]) -> int:
    """The lowest schema version that holds these entries: 1 unless one has samples."""
    has_samples = any(s.samples is not None for variants in tests.values() for s in variants.values())
    return SAMPLES_SCHEMA_VERSION if has_samples else 1


def render_baseline(tests: Mapping[str, Mapping[str, ProfileSummary]]) -> str:
    document = {
        "schema_version": schema_version_for(tests),
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
        text = self._read_text(path)
        return {} if text is None else parse_baseline_text(path, text)

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
