"""Faults, on purpose: a recording killed with SIGKILL at several moments, and a file system that
refuses (read-only, missing, a file in the way, no space left).

The promise: every baseline file is always either its old content or its new content, never a
mix and never invalid; the next run passes; nothing half-written or temporary is left behind by
a run that fails; and every refusal is one error line naming the path.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from pytest_neuronprof import files
from pytest_neuronprof.files import OutputError, atomic_write_text
from pytest_neuronprof.gate import baseline
from pytest_neuronprof.gate.baseline import BaselineStore, parse_baseline_text
from pytest_neuronprof.errors import BaselineError, NeuronProfError
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary

pytest_plugins = ["pytester"]

LEAN = "-p no:hypothesispytest -p no:cacheprovider -p no:xdist"

# A module of profiled tests whose op count follows NEURONPROF_K: K=1 records the old
# baselines, K=2 new ones that differ in every entry.
MODULE = '''
import os

import pytest
import torch

K = int(os.environ.get("NEURONPROF_K", "1"))


@pytest.mark.neuron_profile
@pytest.mark.parametrize("i", range({tests}))
def test_op(i):
    x = torch.ones(4 + i % 3)
    for _ in range(K):
        x = x + i
'''

# Makes the session-end write observable: every fsync of the child sleeps, so a temp file
# exists for that long; and a progress file counts the tests run so far.
CONFTEST = '''
import os
import time

_delay = float(os.environ.get("NEURONPROF_SLOW_FSYNC", "0"))
if _delay:
    _fsync = os.fsync

    def _slow_fsync(fd):
        time.sleep(_delay)
        _fsync(fd)

    os.fsync = _slow_fsync

_done = 0


def pytest_runtest_logfinish(nodeid, location):
    global _done
    _done += 1
    if _done % 25 == 0 and os.environ.get("NEURONPROF_PROGRESS"):
        with open(os.environ["NEURONPROF_PROGRESS"], "w") as f:
            f.write(str(_done))
'''


def write_suite(root: Path, modules: int, tests: int) -> None:
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(CONFTEST)
    for m in range(modules):
        (root / f"test_m{m:02d}.py").write_text(MODULE.format(tests=tests))


def start(root: Path, *args: str, k: int = 1, slow_fsync: float = 0.0) -> subprocess.Popen:
    env = dict(os.environ, PYTEST_ADDOPTS=LEAN, NEURONPROF_K=str(k),
               NEURONPROF_SLOW_FSYNC=str(slow_fsync), NEURONPROF_PROGRESS=str(root / "progress"))
    (root / "progress").unlink(missing_ok=True)
    log = open(root / "log.txt", "w")
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", *args], cwd=root, env=env,
                            stdout=log, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, root: Path) -> str:
    proc.wait(180)
    out = (root / "log.txt").read_text()
    assert proc.returncode == 0, out
    return out


def kill_when(proc: subprocess.Popen, ready: Callable[[], bool], timeout: float = 120) -> None:
    """SIGKILL ``proc`` as soon as ``ready()``; fails if it ended or timed out first."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert proc.poll() is None, "the run ended before the moment to kill it came"
        assert time.monotonic() < deadline, "the moment to kill the run never came"
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL


def files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.glob("*.json"))}


def temps(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if not p.name.endswith(".json"))


# --- kill -9 ------------------------------------------------------------------------------------

@pytest.mark.slow
def test_sigkill_at_any_moment_of_a_recording_leaves_each_file_old_or_new(tmp_path: Path):
    modules, tests = 20, 15  # 300 profiled tests, one baseline file per module
    write_suite(tmp_path, modules, tests)
    base = tmp_path / "baselines"
    finish(start(tmp_path, "--neuron-baseline", k=1), tmp_path)
    old = files(base)
    assert len(old) == modules

    def progress() -> int:
        try:
            return int((tmp_path / "progress").read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def changed() -> int:
        return sum(1 for name, data in files(base).items() if data != old[name])

    moments = {
        "during start-up": lambda: True,
        "half-way through the tests": lambda: progress() >= 150,
        "half-way through the writes": lambda: changed() >= modules // 2,
        "writing the first file": lambda: any(n.startswith(".test_m00.json.") for n in os.listdir(base)),
    }
    after: dict[str, dict[str, bytes]] = {}
    for moment, ready in moments.items():
        for name, data in old.items():  # each attempt starts from the old baselines
            (base / name).write_bytes(data)
        kill_when(start(tmp_path, "--neuron-baseline", k=2, slow_fsync=0.05), ready)
        after[moment] = files(base)
        assert sorted(after[moment]) == sorted(old), moment  # no file lost, none added
        for name, data in after[moment].items():  # each one valid
            parse_baseline_text(base / name, data.decode())
    # Debris: the temp file the last kill interrupted (and maybe one of the mid-write kill's)
    left = temps(base)
    assert any(n.startswith(".test_m00.json.") for n in left), left
    assert all(n.startswith(".test_m") and n.endswith(".tmp") for n in left), left

    # The next run records everything and leaves no debris of the killed ones; the one after
    # gates against what it wrote, and passes.
    out = finish(start(tmp_path, "--neuron-baseline", k=2), tmp_path)
    assert "300 passed" in out
    new = files(base)
    assert all(new[name] != old[name] for name in old)
    assert temps(base) == []
    for moment, state in after.items():
        mixed = {name: "new" if data == new[name] else "old" if data == old[name] else "MIXED"
                 for name, data in state.items()}
        assert "MIXED" not in mixed.values(), (moment, mixed)
        if moment == "half-way through the writes":
            assert set(mixed.values()) == {"old", "new"}, mixed  # the kill did land mid-write
        else:
            assert set(mixed.values()) == {"old"}, (moment, mixed)
    out = finish(start(tmp_path, k=2), tmp_path)
    assert "300 passed" in out and "regression" not in out


# --- the file system ------------------------------------------------------------------------------

NODE = "tests/test_mlp.py::test_forward"


def summary(scale: float = 1.0) -> ProfileSummary:
    return ProfileSummary("simulated", "trn2", "1", "2.13", 10.0 * scale,
                          {"aten::mm": OpSummary(2, 10.0 * scale, "Tensor", 100, 200, 1.0, "mlp")})


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[BaselineStore, Path, bytes]:
    store = BaselineStore(tmp_path / "baselines")
    store.save([(NODE, summary())])
    path = store.path_for(NODE)
    return store, path, path.read_bytes()


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0


class _HalfWriter:
    """A file handle that writes half of what it is given, then finds the disk full."""

    def __init__(self, handle):
        self._handle = handle

    def write(self, text: str) -> int:
        self._handle.write(text[: len(text) // 2])
        self._handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._handle.close()


# A full disk is said as one: "No space left on device" alone read as a bug of the tool.
DISK_FULL = f"{os.strerror(errno.ENOSPC)} (the disk is full: free some space, then run again)"


def _fail_at(monkeypatch: pytest.MonkeyPatch, step: str) -> str:
    """Make one step of atomic_write_text fail the way a full, read-only or broken disk does;
    returns the reason the user should see."""
    if step == "write (disk full half-way)":
        real = os.fdopen
        monkeypatch.setattr(baseline.os, "fdopen", lambda *a, **k: _HalfWriter(real(*a, **k)))
        return DISK_FULL
    code = {"create the temp file (read-only)": errno.EACCES, "fsync": errno.EIO,
            "replace": errno.ENOSPC}[step]

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code))

    target = {"create the temp file (read-only)": (baseline.tempfile, "mkstemp"),
              "fsync": (baseline.os, "fsync"), "replace": (baseline.os, "replace")}[step]
    monkeypatch.setattr(*target, fail)
    return DISK_FULL if code == errno.ENOSPC else os.strerror(code)


STEPS = ["create the temp file (read-only)", "write (disk full half-way)", "fsync", "replace"]


@pytest.mark.parametrize("step", STEPS)
def test_a_failing_write_names_the_file_and_leaves_the_old_content(recorded, monkeypatch, step):
    store, path, before = recorded
    fds = open_fds()
    reason = _fail_at(monkeypatch, step)
    with pytest.raises(BaselineError) as info:
        store.save([(NODE, summary(2.0))])
    assert str(info.value) == f"cannot write baseline file {path}: {reason}"
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert temps(path.parent) == []  # no temp file left
    assert open_fds() == fds  # and no file descriptor
    assert store.save([(NODE, summary(2.0))]) == [path]  # the next save just works


@pytest.mark.parametrize("step", STEPS)
def test_atomic_write_raises_an_error_of_the_project_that_is_still_an_oserror(tmp_path, monkeypatch, step):
    path = tmp_path / "reports" / "neuron.json"
    atomic_write_text(path, "old\n")
    reason = _fail_at(monkeypatch, step)
    with pytest.raises(OutputError) as info:
        atomic_write_text(path, "new\n")
    assert isinstance(info.value, NeuronProfError) and isinstance(info.value, OSError)
    assert str(info.value) == f"cannot write {path}: {reason}" and info.value.strerror == reason
    monkeypatch.undo()
    assert path.read_text() == "old\n" and temps(path.parent) == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root ignores permission bits; the read-only case is exercised by "
                           "test_a_failing_write_names_the_file_and_leaves_the_old_content[create "
                           "the temp file (read-only)], which raises the PermissionError a "
                           "read-only directory gives")
def test_a_read_only_baseline_directory(recorded):
    store, path, before = recorded
    path.parent.chmod(0o555)
    try:
        with pytest.raises(BaselineError, match=f"cannot write baseline file {path}: Permission denied"):
            store.save([(NODE, summary(2.0))])
        assert path.read_bytes() == before and temps(path.parent) == []
    finally:
        path.parent.chmod(0o755)


def test_a_file_where_the_baseline_directory_should_be(tmp_path):
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    for directory in (blocker, blocker / "below"):
        with pytest.raises(BaselineError) as info:
            BaselineStore(directory).validate_all()
        assert str(info.value) == (f"baseline directory {directory}: {blocker} is a file, not a "
                                   "directory; point --neuron-baseline-dir (ini neuron_baseline_dir) "
                                   "at a directory")
    assert BaselineStore(tmp_path / "missing" / "deeper").validate_all() == 0  # missing is fine


SUITE = '''
import pytest, torch

@pytest.mark.neuron_profile
def test_a():
    torch.ones(8) + 1
'''


@pytest.fixture
def lean(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:cacheprovider")


@pytest.mark.parametrize("record", [False, True], ids=["gate", "record"])
@pytest.mark.parametrize("where", ["afile", "afile/below"])
def test_plugin_a_file_as_baseline_dir_is_one_error_line(pytester: pytest.Pytester, lean, record, where):
    """Before: an INTERNALERROR traceback from the first test that read a baseline (gate),
    or from the write (record)."""
    pytester.makepyfile(test_a=SUITE)
    (pytester.path / "afile").write_text("not a directory")
    result = pytester.runpytest("--neuron-baseline-dir", where, *(["--neuron-baseline"] if record else []))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: pytest-neuronprof: baseline directory {where}: afile is a "
                                 "file, not a directory; point --neuron-baseline-dir *"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert (pytester.path / "afile").read_text() == "not a directory"


def test_plugin_a_missing_baseline_dir_is_created_when_recording(pytester: pytest.Pytester, lean):
    pytester.makepyfile(test_a=SUITE)
    gate = pytester.runpytest("--neuron-baseline-dir", "not/yet/there")
    gate.assert_outcomes(passed=1)
    gate.stdout.fnmatch_lines(["*test_a.py::test_a: no baseline for simulated:trn2 (passes)*"])
    assert not (pytester.path / "not").exists()  # gating writes nothing
    pytester.runpytest("--neuron-baseline", "--neuron-baseline-dir", "not/yet/there").assert_outcomes(passed=1)
    assert (pytester.path / "not" / "yet" / "there" / "test_a.json").is_file()


def test_plugin_disk_full_while_recording_is_one_error_line(pytester: pytest.Pytester, lean, monkeypatch):
    pytester.makepyfile(test_a=SUITE)
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "test_a.json"
    before = path.read_bytes()
    # Another size, not only other bytes: pytest < 9.2 takes its cached rewritten test module as
    # fresh while the source's size and mtime (whole seconds) match, and ran the old test here.
    pytester.makepyfile(test_a=SUITE.replace("torch.ones(8) + 1", "torch.ones(8) * 3.0"))
    _fail_at(monkeypatch, "write (disk full half-way)")  # the inner run is in this process
    result = pytester.runpytest("--neuron-baseline")
    monkeypatch.undo()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-neuronprof: cannot write baseline file *test_a.json: "
                                 + DISK_FULL])
    assert "Traceback" not in result.stderr.str()
    assert path.read_bytes() == before and temps(path.parent) == []


def test_plugin_an_unwritable_report_is_one_error_line(pytester: pytest.Pytester, lean):
    """Before: the OSError of --neuron-report's write escaped pytest_sessionfinish as a
    traceback."""
    pytester.makepyfile(test_a=SUITE)
    (pytester.path / "afile").write_text("not a directory")
    result = pytester.runpytest("--neuron-report", "afile/report.json")
    assert "test_a.py" not in result.stdout.str()  # refused before any test ran (issue 11, item 9)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-neuronprof: cannot write afile/report.json: cannot "
                                 "create its folder afile (File exists)"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_plugin_an_unwritable_trace_dir_is_one_error_line(pytester: pytest.Pytester, lean):
    pytester.makepyfile(test_a=SUITE)
    (pytester.path / "afile").write_text("not a directory")
    result = pytester.runpytest("--neuron-trace-dir", "afile")
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    result.stderr.fnmatch_lines(["ERROR: pytest-neuronprof: *afile*"])


def test_a_broken_lock_folder_is_a_baseline_error(tmp_path, monkeypatch):
    """The lock lives in the temp folder; when that cannot be created the error names the
    file being written instead of escaping as a bare OSError."""
    monkeypatch.setattr(baseline.tempfile, "gettempdir", lambda: str(tmp_path / "afile"))
    (tmp_path / "afile").write_text("not a directory")
    with pytest.raises(BaselineError, match="cannot write baseline file .*test_mlp.json"):
        BaselineStore(tmp_path / "baselines").save([(NODE, summary())])


def test_stale_temp_files_of_a_killed_writer_are_removed_under_the_lock(recorded):
    """A writer killed between mkstemp and os.replace leaves '.name.XXXX.tmp'; the next save of
    that file removes it (it holds the lock every live writer holds while its temp exists), and
    leaves other files' temp files alone."""
    store, path, _ = recorded
    stale = path.parent / f".{path.name}.k1ll3d.tmp"
    stale.write_text('{"schema_version": 1, "te')
    other = path.parent / ".test_other.json.abcd.tmp"
    other.write_text("{")
    store.save([(NODE, summary())])  # unchanged content: nothing written, debris still cleared
    assert not stale.exists() and other.exists()
    assert json.loads(path.read_text())["tests"][NODE]
