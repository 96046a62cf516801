"""A recording that stops early (Ctrl-C, -x) and outputs that cannot be written (a full disk):
the summary says what was written and what was not, and each error names its real cause.

Before: Ctrl-C mid-recording left a baseline file with 17 new entries and 3 old ones and said
nothing of it; on a full disk the summary said "files changed: none (all unchanged)" above the
error, one unwritable file cost the other files of its directory, and the HTML page's error
told users to give --neuron-html a directory when they had.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from pytest_neuronprof import files
from pytest_neuronprof.errors import ConfigError
from pytest_neuronprof.outputs import html
from pytest_neuronprof.outputs.trace_files import trace_file_name

pytest_plugins = ["pytester"]

DISK_FULL = f"{os.strerror(errno.ENOSPC)} (the disk is full: free some space, then run again)"

# K changes every entry; the test whose index is STOP raises KeyboardInterrupt, which is what
# pytest's SIGINT handler raises on Ctrl-C; FAIL fails one test (for -x).
SUITE = '''
import os

import pytest
import torch


@pytest.mark.neuron_profile
@pytest.mark.parametrize("i", range(20))
def test_op(i):
    if i == int(os.environ.get("NEURONPROF_STOP", "-1")):
        raise KeyboardInterrupt
    assert i != int(os.environ.get("NEURONPROF_FAIL", "-1"))
    x = torch.ones(4)
    for _ in range(int(os.environ.get("NEURONPROF_K", "1"))):
        x = x + i
'''

ONE = '''
import pytest, torch

@pytest.mark.neuron_profile
def test_one():
    torch.ones({n}) + 1
'''


@pytest.fixture(autouse=True)
def lean_inner_runs(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:cacheprovider -p no:randomly")
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)


# Exact lines below: fnmatch reads a pattern with "*" in it, and "[17]" in it as a class.
RECORDED_NOTE = "every test that finished and passed was recorded"
KEPT = "profiled tests that did not finish keep their old baselines"


def entries(path: Path) -> dict[str, object]:
    return json.loads(path.read_text())["tests"]


@pytest.fixture
def recorded(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """test_f3.py's 20 tests recorded with K=1; K=2 from then on (every entry changes)."""
    pytester.makepyfile(test_f3=SUITE)
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=20)
    monkeypatch.setenv("NEURONPROF_K", "2")
    return entries(pytester.path / "baselines" / "test_f3.json")


def stopped_lines(reason: str, recorded: int, unfinished: list[int]) -> list[str]:
    shown = ", ".join(f"test_f3.py::test_op[{i}]" for i in unfinished[:5]) + (", ..." if len(unfinished) > 5 else "")
    changed = "baselines/test_f3.json" if recorded else "none (all unchanged)"
    return [f"baselines recorded: {recorded} tests; files changed: {changed}",
            f"recording stopped early ({reason}): {RECORDED_NOTE}; {KEPT}: {len(unfinished)} ({shown})"]


@pytest.mark.parametrize("env, options, reason, kept, unfinished", [
    ({"NEURONPROF_STOP": "17"}, [], "interrupted", [17, 18, 19], [17, 18, 19]),
    ({"NEURONPROF_STOP": "0"}, [], "interrupted", list(range(20)), list(range(20))),
    ({"NEURONPROF_FAIL": "18"}, ["-x"], "stopping after 1 failures", [18, 19], [19]),
], ids=["ctrl-c mid-run", "ctrl-c in the first test", "-x"])
def test_a_recording_stopped_early_writes_what_finished_and_names_what_did_not(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, recorded: dict[str, object],
        env: dict[str, str], options: list[str], reason: str, kept: list[int], unfinished: list[int]) -> None:
    """KeyboardInterrupt raised in a test is what pytest's SIGINT handler raises on Ctrl-C;
    in process, the outer run must not take it as its own (no_reraise_ctrlc)."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    result = pytester.runpytest_inprocess("--neuron-baseline", *options, no_reraise_ctrlc=True)
    after = entries(pytester.path / "baselines" / "test_f3.json")
    assert {k for k in after if after[k] == recorded[k]} == {f"test_f3.py::test_op[{i}]" for i in kept}
    result.stdout.fnmatch_lines(stopped_lines(reason, 20 - len(kept), unfinished))


def test_a_complete_recording_says_nothing_of_stopping(pytester: pytest.Pytester, recorded: dict[str, object]) -> None:
    result = pytester.runpytest("--neuron-baseline")
    result.assert_outcomes(passed=20)
    assert "stopped early" not in result.stdout.str()


def disk_full_for(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    """os.replace into a file with one of these names finds the disk full, as the last step of
    atomic_write_text does on a full disk; other files are written."""
    real = os.replace

    def replace(src: str, dst: str) -> None:
        if Path(dst).name in names:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(src, dst)

    monkeypatch.setattr(files.os, "replace", replace)


def test_disk_full_while_recording_says_which_files_were_and_were_not_written(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_a=ONE.format(n=8), test_b=ONE.format(n=8))
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=2)
    base = pytester.path / "baselines"
    before = {name: (base / name).read_bytes() for name in ("test_a.json", "test_b.json")}
    # Other sizes (see test_faults: pytest < 9.2 may reuse the cached rewritten module)
    pytester.makepyfile(test_a=ONE.format(n=16), test_b=ONE.format(n=160))
    disk_full_for(monkeypatch, "test_a.json")
    result = pytester.runpytest("--neuron-baseline")
    monkeypatch.undo()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (base / "test_a.json").read_bytes() == before["test_a.json"]
    assert (base / "test_b.json").read_bytes() != before["test_b.json"]  # not lost with test_a's
    result.stdout.fnmatch_lines([
        "baselines recorded: 2 tests; files changed: baselines/test_b.json; NOT written: 1 of the 2 "
        "(they keep their old baselines)",
        f"NOT written: cannot write baseline file *test_a.json: {DISK_FULL}",
    ])
    assert "all unchanged" not in result.stdout.str()
    result.stderr.fnmatch_lines([f"ERROR: pytest-neuronprof: cannot write baseline file *test_a.json: {DISK_FULL}"])


def test_disk_full_for_the_report_the_page_and_the_traces_is_said_in_the_summary(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_a=ONE.format(n=8))
    trace = trace_file_name("test_a.py::test_one")
    disk_full_for(monkeypatch, "report.json", html.PAGE_NAME, trace)
    result = pytester.runpytest("--neuron-report", "report.json", "--neuron-html", "page",
                                "--neuron-trace-dir", "traces", "-W", "ignore::UserWarning")
    monkeypatch.undo()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines([
        f"NOT written: cannot write report.json: {DISK_FULL}",
        f"NOT written: cannot write the HTML page page/index.html: {DISK_FULL}",
        f"NOT written: could not write the trace traces/{trace}: {DISK_FULL}",
    ])
    assert "a directory" not in result.stdout.str() + result.stderr.str()


def test_the_html_error_suggests_a_directory_only_when_a_file_is_in_the_way(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "page"
    folder.mkdir()
    disk_full_for(monkeypatch, html.PAGE_NAME)
    with pytest.raises(ConfigError) as full:
        html.write_html(folder, [])
    monkeypatch.undo()
    assert str(full.value) == f"cannot write the HTML page {folder / html.PAGE_NAME}: {DISK_FULL}"
    blocker = tmp_path / "taken"
    blocker.write_text("")
    with pytest.raises(ConfigError, match="give --neuron-html .* a directory$"):
        html.write_html(blocker, [])
