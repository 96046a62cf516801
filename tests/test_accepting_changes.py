"""Accepting a change means accepting those numbers (issue 26): the hint for a chip with no
baseline re-records only that chip (item 2), stale entries are reported only for modules that
ran in full (item 8)."""

from __future__ import annotations

import re
import shlex

import pytest

SUITE = '''
import json, pathlib, pytest, torch

def n():
    return int((pathlib.Path(__file__).parent / "n.txt").read_text())

@pytest.mark.neuron_profile
def test_mm():
    torch.randn(n(), 256) @ torch.randn(256, 256)
'''


def test_the_hint_for_a_missing_chip_never_re_records_a_chip_that_failed(pytester: pytest.Pytester):
    pytester.makepyfile(test_mm=SUITE)
    (pytester.path / "n.txt").write_text("64")
    pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline").assert_outcomes(passed=1)
    (pytester.path / "n.txt").write_text("1024")  # a trn2 regression
    result = pytester.runpytest("-p", "no:cacheprovider", "--neuron-hardware", "trn2,h200")
    result.assert_outcomes(failed=1)
    line = next(line for line in result.stdout.lines if "no baseline for simulated:h200" in line)
    command = line.split("record it with ", 1)[1]
    assert "--neuron-hardware h200 " in command and "trn2" not in command
    # running the hint records h200 only: trn2 still fails
    args = shlex.split(command)
    assert args[:2] == ["pytest", "--neuron-baseline"]
    pytester.runpytest("-p", "no:cacheprovider", *args[1:]).assert_outcomes(passed=1)
    again = pytester.runpytest("-p", "no:cacheprovider", "--neuron-hardware", "trn2,h200")
    again.assert_outcomes(failed=1)
    assert re.search(r"regression on simulated:trn2", again.stdout.str())


TWO = '''
import pytest, torch

@pytest.mark.neuron_profile
def test_a():
    torch.randn(64, 64) @ torch.randn(64, 64)

@pytest.mark.neuron_profile
def test_{second}():
    torch.randn(64, 128) @ torch.randn(128, 64)
'''


def test_entries_no_test_produced_are_reported_only_for_modules_that_ran_in_full(pytester: pytest.Pytester):
    pytester.makepyfile(test_m=TWO.format(second="b"))
    pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline").assert_outcomes(passed=2)
    pytester.makepyfile(test_m=TWO.format(second="renamed"))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["1 baseline entry no test produced (a test renamed or removed): "
                                 "test_m.py::test_b [simulated:trn2]; remove it by re-recording the "
                                 "module: pytest --neuron-baseline 'test_m.py'"])
    # a module that did not run in full: nothing is said, nothing is removed
    for narrowed in (["-k", "test_a"], ["test_m.py::test_a"]):
        partial = pytester.runpytest("-p", "no:cacheprovider", *narrowed)
        assert "no test produced" not in partial.stdout.str()
    other_chip = pytester.runpytest("-p", "no:cacheprovider", "--neuron-hardware", "h200")
    assert "no test produced" not in other_chip.stdout.str()  # trn2's entries were not looked at
    pytester.makepyfile(test_m=TWO.format(second="renamed").replace(
        "def test_a", "@pytest.mark.skip(reason='x')\ndef test_a"))
    assert "no test produced" not in pytester.runpytest("-p", "no:cacheprovider").stdout.str()
    # re-recording the module removes it, and says so
    pytester.makepyfile(test_m=TWO.format(second="renamed"))
    recorded = pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline", "test_m.py")
    recorded.stdout.fnmatch_lines(["removed 1 baseline entry no test produced: test_m.py::test_b [simulated:trn2]"])
    text = (pytester.path / "baselines" / "test_m.json").read_text()
    assert "test_b" not in text and "test_renamed" in text
    clean = pytester.runpytest("-p", "no:cacheprovider")
    assert "no test produced" not in clean.stdout.str()
