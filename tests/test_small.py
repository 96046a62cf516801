"""Issue 11's "smaller things a user meets", and issue 10's "uncosted ops are invisible": each with
the run that showed it."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pytest_neuronprof.cli import main

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("lean_inner_runs")

# An op no cost formula knows: the simulated backend costs it by its bytes (the fallback).
_LIB = torch.library.Library("neuronprof_small", "DEF")
_LIB.define("twice(Tensor x) -> Tensor")
_LIB.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")

SUITE = '''
import json, pathlib, pytest, torch

def n():
    return json.loads((pathlib.Path(__file__).parent / "knobs.json").read_text())["n"]

@pytest.mark.neuron_profile
def test_mm():
    a = torch.randn(n(), n())
    a @ a
'''


def knobs(pytester: pytest.Pytester, n: int) -> None:
    (pytester.path / "knobs.json").write_text(json.dumps({"n": n}))


# --- tracebacks end at the test's line ------------------------------------------------------------

def test_plugin_frames_are_hidden_from_tracebacks(pytester: pytest.Pytester):
    pytester.makepyfile(test_err='''
        import pytest, torch

        @pytest.mark.neuron_profile
        def test_shapes():
            torch.randn(3, 4) @ torch.randn(5, 6)

        def test_nested(neuron_profile):
            with neuron_profile:
                with neuron_profile:
                    pass

        def test_result_first(neuron_profile):
            neuron_profile.result
    ''')
    result = pytester.runpytest()
    result.assert_outcomes(failed=3)
    out = result.stdout.str()
    for frame in ("simulated.py", "regions.py", "session.py", "__torch_dispatch__"):
        assert frame not in out, frame
    result.stdout.fnmatch_lines_random(["test_err.py:5: RuntimeError", "test_err.py:9: RuntimeError",
                                        "test_err.py:13: RuntimeError",
                                        "*regions cannot be nested*", "*no region has run yet*"])


# --- one parser per kind of value ----------------------------------------------------------------

def test_marker_percentages_and_floor_microseconds(pytester: pytest.Pytester):
    pytester.makepyfile(test_pct=SUITE.replace("@pytest.mark.neuron_profile",
                                               '@pytest.mark.neuron_profile(threshold="5%", min_share="50%")'))
    knobs(pytester, 64)
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    for value, message in (("x", "expected a time in microseconds such as 1.0"),
                           ("5%", "expected a time in microseconds such as 1.0")):
        result = pytester.runpytest(f"--neuron-floor-us={value}")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"*--neuron-floor-us (ini neuron_floor_us)='{value}': {message}*"])
    from pytest_neuronprof.plugin.marker import policy_from_marker
    from pytest_neuronprof.gate.compare import GatePolicy

    assert policy_from_marker(GatePolicy(), {"threshold": "5%"}).threshold == 0.05
    assert main(["compare", str(pytester.path / "baselines"), str(pytester.path / "baselines"),
                 "--floor-us", "5%"]) == 2


# --- the update command survives a shell ----------------------------------------------------------

def test_update_commands_survive_a_shell(pytester: pytest.Pytester):
    """The printed re-record command, split as a POSIX shell splits it (shlex), gives back
    exactly the node id, quotes, `$`, backticks and backslashes included; and it records."""
    pytester.makepyfile(test_q='''
        import pytest, torch

        @pytest.mark.neuron_profile
        @pytest.mark.parametrize("s", ["it's", 'say "hi"', "$HOME `x` \\\\n"])
        def test_q(s):
            torch.randn(8, 8) @ torch.randn(8, 8)
    ''')
    collected = pytester.runpytest("--collect-only", "-q", "-p", "no:randomly")
    nodeids = sorted(line for line in collected.stdout.lines if line.startswith("test_q.py::"))
    assert len(nodeids) == 3
    result = pytester.runpytest("-p", "no:randomly")
    commands = [line.split("record it with ", 1)[1] for line in result.stdout.lines if "record it with " in line]
    split = [shlex.split(command) for command in commands]
    assert [words[:2] for words in split] == [["pytest", "--neuron-baseline"]] * 3
    assert sorted(words[2] for words in split) == nodeids and {len(words) for words in split} == {3}
    for words in split:
        assert pytester.runpytest(*words[1:]).ret == 0
    doc = json.loads((pytester.path / "baselines" / "test_q.json").read_text())
    assert sorted(doc["tests"]) == nodeids


# --- neuronprof compare: the text agrees with the exit code --------------------------------------------

def test_compare_of_incomparable_input_does_not_read_as_a_verdict(tmp_path, capsys):
    from pytest_neuronprof.gate.baseline import render_baseline
    from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary

    def write(folder: Path, cost_model: str) -> None:
        summary = ProfileSummary("simulated", "trn2", cost_model, "2.13", 10.0,
                                 {"aten::mm": OpSummary(1, 10.0, "Tensor", 0, 0, 1.0, "up")})
        folder.mkdir()
        (folder / "test_a.json").write_text(render_baseline({"test_a.py::test": {"simulated:trn2": summary}}))

    write(tmp_path / "old", "1")
    write(tmp_path / "new", "2")
    assert main(["compare", str(tmp_path / "old"), str(tmp_path / "new")]) == 2
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    assert last.startswith("no verdict (exit 2): test_a.py::test [simulated:trn2] is not comparable")
    assert last.endswith("0 regressions in 0 compared test entries")


# --- the cpu backend's profiler noise -------------------------------------------------------------

@pytest.mark.slow  # starts a subprocess
def test_cpu_backend_failures_carry_no_usdt_lines(pytester: pytest.Pytester):
    pytester.makepyfile(test_cpu=SUITE)
    knobs(pytester, 16)
    pytester.runpytest("--neuron-baseline", "--neuron-backend", "cpu", "--neuron-rounds", "5",
                       "--neuron-warmup", "0").assert_outcomes(passed=1)
    knobs(pytester, 256)
    result = pytester.runpytest_subprocess("--neuron-backend", "cpu", "--neuron-rounds", "5",
                                           "--neuron-warmup", "0", "-rA")
    assert "USDT" not in result.stdout.str() + result.stderr.str()


# --- JUnit delta, HTML bars, long ids ----------------------------------------------------------------

def test_unchanged_code_has_a_junit_delta_of_zero(pytester: pytest.Pytester):
    pytester.makepyfile(test_mm=SUITE)
    for n in (48, 64, 96, 200):
        knobs(pytester, n)
        pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
        pytester.runpytest("--junitxml", "junit.xml").assert_outcomes(passed=1)
        assert 'name="neuron_delta" value="0.0"' in (pytester.path / "junit.xml").read_text(), n


def test_no_baseline_bars_for_an_incomparable_test(pytester: pytest.Pytester):
    pytester.makepyfile(test_mm=SUITE)
    knobs(pytester, 64)
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "test_mm.json"
    doc = json.loads(path.read_text())
    doc["tests"]["test_mm.py::test_mm"]["simulated:trn2"]["cost_model_version"] = "0-old"
    path.write_text(json.dumps(doc))
    pytester.runpytest("--neuron-html", "html").assert_outcomes(passed=1)
    page = (pytester.path / "html" / "index.html").read_text()
    assert 'class="bar baseline"' not in page and ">baseline</text>" not in page
    assert "Top ops (baseline not comparable)" in page


def test_long_ids_keep_the_session_table_narrow(pytester: pytest.Pytester):
    pytester.makepyfile(test_long='''
        import pytest, torch

        @pytest.mark.neuron_profile
        @pytest.mark.parametrize("n", [8], ids=["x" * 300])
        def test_long(n):
            torch.randn(n, n) @ torch.randn(n, n)
    ''')
    result = pytester.runpytest()
    lines = result.stdout.lines
    table = lines[lines.index(next(line for line in lines if line.startswith("test "))):][:3]
    assert max(len(line) for line in table) <= 160, table


# --- issue 10: ops costed by the fallback, in every output ------------------------------------------

UNCOSTED = '''
import pytest, torch

@pytest.mark.neuron_profile
def test_custom():
    x = torch.randn(256, 256)
    torch.ops.neuronprof_small.twice(x)
    x @ x
'''


def test_uncosted_ops_are_shown_in_every_output(pytester: pytest.Pytester, monkeypatch):
    pytester.makepyfile(test_custom=UNCOSTED)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("--neuron-baseline")
    result.stdout.fnmatch_lines(["test_custom.py::test_custom: costed by the fallback (not in the cost "
                                 "model): neuronprof_small::twice * us (*%); *% of the device time"])
    baseline = json.loads((pytester.path / "baselines" / "test_custom.json").read_text())
    assert baseline["tests"]["test_custom.py::test_custom"]["simulated:trn2"]["ops"][
        "neuronprof_small::twice"]["uncosted"] is True
    pytester.makepyfile(test_custom=UNCOSTED.replace("x @ x", "x @ x\n    x @ x"))
    result = pytester.runpytest("--neuron-report", "report.json", "--neuron-html", "html")
    result.assert_outcomes(failed=1)
    failure = result.stdout.str().split("If this change is intended")[0]
    assert "costed by the fallback (not in the cost model): neuronprof_small::twice" in failure
    report = json.loads((pytester.path / "report.json").read_text())
    uncosted = report["tests"]["test_custom.py::test_custom"]["uncosted"]
    assert uncosted["ops"] == ["neuronprof_small::twice"] and 0 < uncosted["share"] < 1
    # One sentence, one number format, in every output: the terminal's, the page's, the step
    # summary's (the name in a code span there), and the JSON's share to 0.1 %.
    sentence = next(line for line in result.stdout.lines
                    if line.startswith("test_custom.py::test_custom: costed")).split(": ", 1)[1]
    share = re.fullmatch(r".*; ([0-9.]+)% of the device time", sentence)
    assert share is not None and float(share[1]) == round(uncosted["share"] * 100, 1)
    page = (pytester.path / "html" / "index.html").read_text()
    assert f'<p class="uncosted message">{sentence}</p>' in page
    assert f"<td class=num>{share[1]}%</td>" in page  # the overview's uncosted column
    text = summary.read_text()
    assert "### Costed by the fallback" in text
    assert f"- `test_custom.py::test_custom`: {sentence.replace('neuronprof_small::twice', '`neuronprof_small::twice`')}" in text
