"""Concurrency, on purpose: two pytest processes recording into the same baseline directory at
once, xdist with four workers, and a lock whose holder was killed.

The promise: whatever runs at the same time, the baseline files end byte-identical to a serial
recording (nothing lost, nothing duplicated), and a lock never outlives its holder (it is an OS
lock, freed when the process dies), so a killed run cannot hang the next one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_neuronprof.gate import baseline
from pytest_neuronprof.gate.baseline import BaselineStore, lock_path, parse_baseline_text
from pytest_neuronprof.errors import BaselineError
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary

pytest_plugins = ["pytester"]

LEAN = "-p no:hypothesispytest -p no:cacheprovider"

MODULE = '''
import pytest
import torch


@pytest.mark.neuron_profile
@pytest.mark.parametrize("i", range(8))
def test_a(i):
    torch.ones(4 + i) * i


@pytest.mark.neuron_profile
@pytest.mark.parametrize("i", range(8))
def test_b(i):
    torch.ones(2, 4 + i).sum()
'''

# Runs given a barrier folder wait there for each other before their session-end writes, and
# every fsync sleeps: the writes of two runs overlap for sure.
CONFTEST = '''
import os
import time

import pytest

_delay = float(os.environ.get("NEURONPROF_SLOW_FSYNC", "0"))
if _delay:
    _fsync = os.fsync

    def _slow_fsync(fd):
        time.sleep(_delay)
        _fsync(fd)

    os.fsync = _slow_fsync


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    barrier = os.environ.get("NEURONPROF_BARRIER")
    if barrier and not hasattr(session.config, "workerinput"):
        open(os.path.join(barrier, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 60
        while len(os.listdir(barrier)) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
'''

MODULES = [f"test_c{m}.py" for m in range(6)]


def write_suite(root: Path) -> None:
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(CONFTEST)
    for name in MODULES:
        (root / name).write_text(MODULE)


def start(root: Path, *args: str, slow_fsync: float = 0.0, barrier: Path | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTEST_ADDOPTS=LEAN, NEURONPROF_SLOW_FSYNC=str(slow_fsync),
               NEURONPROF_BARRIER=str(barrier or ""))
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "--neuron-baseline", *args],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen) -> str:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    return out


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*"))}


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """The suite, and every test of it recorded by one plain run."""
    root = tmp_path_factory.mktemp("suite")
    write_suite(root)
    out = finish(start(root, "-p", "no:xdist", "--neuron-baseline-dir", "serial"))
    assert f"{len(MODULES) * 16} passed" in out
    recorded = files(root / "serial")
    assert sorted(recorded) == [m.replace(".py", ".json") for m in MODULES]
    return root, recorded


@pytest.mark.slow
def test_two_processes_recording_overlapping_modules_at_once(serial):
    """Run A records test_a of modules 1-4 and all of module 5, run B test_b of modules 1-4,
    into the same directory at the same time: they wait for each other before writing, then
    both write modules 1-4 in the same order, each file with entries the other lacks. Each file
    must hold the union, once, byte for byte what a serial recording holds. (With the lock
    taken out, B's write of a file replaced A's: half the entries were lost.)"""
    root, recorded = serial
    barrier = root / "barrier"
    barrier.mkdir()
    shared = ("--neuron-baseline-dir", "shared", "-p", "no:xdist")
    a = start(root, *shared, *[f"test_c{m}.py::test_a" for m in range(1, 5)], "test_c5.py",
              slow_fsync=0.05, barrier=barrier)
    b = start(root, *shared, *[f"test_c{m}.py::test_b" for m in range(1, 5)],
              slow_fsync=0.05, barrier=barrier)
    assert "48 passed" in finish(a)
    assert "32 passed" in finish(b)
    assert files(root / "shared") == {n: d for n, d in recorded.items() if n != "test_c0.json"}


@pytest.mark.slow
def test_xdist_with_four_workers_records_what_a_serial_run_does(serial):
    pytest.importorskip("xdist")
    root, recorded = serial
    out = finish(start(root, "-n", "4", "--neuron-baseline-dir", "parallel"))
    assert f"{len(MODULES) * 16} passed" in out
    assert files(root / "parallel") == recorded


# --- a lock whose holder died ---------------------------------------------------------------------

NODE = "tests/test_mlp.py::test_forward"
HOLD = '''
import sys, time
from pathlib import Path
from filelock import FileLock
from pytest_neuronprof.gate.baseline import lock_path

lock = FileLock(str(lock_path(Path(sys.argv[1]))))
lock.acquire()
print("locked", flush=True)
time.sleep(600)
'''


def summary(scale: float = 1.0) -> ProfileSummary:
    return ProfileSummary("simulated", "trn2", "1", "2.13", 10.0 * scale,
                          {"aten::mm": OpSummary(2, 10.0 * scale, "Tensor", 100, 200, 1.0, "mlp")})


def hold_lock(path: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


@pytest.mark.slow  # starts a subprocess
def test_a_lock_held_by_a_live_process_blocks_with_an_error_naming_it(tmp_path, monkeypatch):
    store = BaselineStore(tmp_path / "baselines")
    path = store.path_for(NODE)
    holder = hold_lock(path)
    try:
        monkeypatch.setattr(baseline, "LOCK_TIMEOUT_S", 0.3)
        with pytest.raises(BaselineError) as info:
            store.save([(NODE, summary())])
        assert str(info.value) == (f"timed out after 0 s waiting for the lock {lock_path(path)} "
                                   f"(guarding {path}) held by another process")
        assert not path.exists()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow  # starts a subprocess
def test_a_lock_whose_holder_was_killed_does_not_hang_the_next_recording(pytester: pytest.Pytester,
                                                                         monkeypatch):
    """Hold the lock of a baseline file in another process, SIGKILL it, then record: the lock
    file stays behind (stale file) but the OS released the lock with its holder."""
    monkeypatch.setenv("PYTEST_ADDOPTS", LEAN)
    pytester.makepyfile(test_locked='''
        import pytest, torch

        @pytest.mark.neuron_profile
        def test_one():
            torch.ones(8) + 1
    ''')
    path = pytester.path / "baselines" / "test_locked.json"
    holder = hold_lock(path)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert holder.returncode == -signal.SIGKILL
    assert lock_path(path).exists()  # what a killed process leaves: the file, not the lock
    # A lock still held would time out (5 s, not 60) and end the session with a usage error;
    # no wall-clock assertion, which a loaded CI machine could break.
    monkeypatch.setattr(baseline, "LOCK_TIMEOUT_S", 5.0)
    result = pytester.runpytest("--neuron-baseline")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert list(parse_baseline_text(path, path.read_text())) == ["test_locked.py::test_one"]
