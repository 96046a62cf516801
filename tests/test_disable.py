"""The off switch (issue 26, item 7): --neuron-disable, ini neuron_disable, NEURONPROF_DISABLE=1.
Marked tests run, unprofiled and ungated; the fixture is a no-op; the marker stays registered
(--strict-markers passes); the summary says profiling was off."""

from __future__ import annotations

import pytest

SUITE = '''
import pytest, torch

@pytest.mark.neuron_profile
def test_marked():
    torch.randn(8, 8) @ torch.randn(8, 8)

def test_fixture(neuron_profile):
    with neuron_profile:
        torch.randn(8, 8) @ torch.randn(8, 8)
    assert neuron_profile.result is None
'''


@pytest.mark.parametrize("how", ["option", "ini", "environment"])
def test_disabled_runs_marked_tests_unprofiled_and_ungated(pytester: pytest.Pytester, monkeypatch, how):
    pytester.makepyfile(test_it=SUITE)
    args = ["--strict-markers", "-p", "no:cacheprovider", "--neuron-report", "report.json"]
    if how == "option":
        args.append("--neuron-disable")
    elif how == "ini":
        pytester.makeini("[pytest]\nneuron_disable = true\n")
    else:
        monkeypatch.setenv("NEURONPROF_DISABLE", "1")
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*profiling was off*marked tests ran unprofiled and ungated*"])
    assert not (pytester.path / "baselines").exists() and not (pytester.path / "report.json").exists()


def test_without_the_switch_the_fixture_profiles(pytester: pytest.Pytester, monkeypatch):
    monkeypatch.setenv("NEURONPROF_DISABLE", "0")
    pytester.makepyfile(test_it=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)  # the fixture's result is a profile
    assert "profiling was off" not in result.stdout.str()
