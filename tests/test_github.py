"""GitHub Actions output: ::error annotations (format, escaping, file and line) and the step
summary, printed by the xdist controller only and only under Actions."""

from __future__ import annotations

import re

import pytest

from pytest_neuronprof.gate import compare as gate
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import github

SUITE = '''
import pathlib

import pytest
import torch

HERE = pathlib.Path(__file__).parent


def reps(name):
    return int((HERE / f"{name}.txt").read_text())


@pytest.mark.neuron_profile
def test_mm():
    a = torch.randn(64, 64)
    for _ in range(reps("mm")):
        a @ a


@pytest.mark.neuron_profile
def test_other():
    a = torch.randn(64, 64)
    for _ in range(reps("other")):
        a @ a
'''
BAD_PERCENT = re.compile(r"%(?![0-9A-F]{2})")


def summary(mm_us: float, mm_calls: int = 1) -> ProfileSummary:
    ops = {"aten::mm": OpSummary(mm_calls, mm_us, "Tensor", 1, 1, 0.0, "model.proj"),
           "aten::add": OpSummary(1, 10.0, "Vector", 1, 1, 0.0, "")}
    total = mm_us + 10.0
    ops = {n: OpSummary(o.count, o.device_time_us, o.engine, 1, 1, o.device_time_us / total, o.module)
           for n, o in ops.items()}
    return ProfileSummary("simulated", "trn2", "1", "2.13", total, ops)


def outcome(nodeid: str = "tests/test_a.py::test_a", location: tuple[str, int] = ("tests/test_a.py", 12),
            new: ProfileSummary | None = None) -> report.TestOutcome:
    old, new = summary(90.0), new or summary(180.0)
    return TestOutcome(nodeid, location, gate.compare(old, new, gate.GatePolicy()), new, old)


# --- format and escaping ----------------------------------------------------------------------

def test_escaping_follows_githubs_rules():
    assert github.escape_data("50% \r\n::x, y:z") == "50%25 %0D%0A::x, y:z"
    assert github.escape_property("50% \r\n::x, y:z") == "50%25 %0D%0A%3A%3Ax%2C y%3Az"


def test_annotation_names_file_line_op_and_fix():
    line = github.annotation(outcome(), "tests/test_a.py")
    assert line == (
        "::error file=tests/test_a.py,line=12,title=device-time regression%3A test_a::"
        "tests/test_a.py::test_a: device time +90.0%25 on simulated:trn2 (100.000 us -> 190.000 us); "
        "aten::mm in model.proj +100.0%25 (90.000 us -> 180.000 us, threshold 10%25); "
        "if intended, update the baseline: pytest --neuron-baseline 'tests/test_a.py::test_a'")


def test_annotation_escapes_odd_test_ids_and_stays_one_line():
    nodeid = "tests/t.py::test_p[a,b:c%\nd]"
    line = github.annotation(outcome(nodeid, ("tests/t,x.py", 3), summary(180.0, 4)), "tests/t,x.py")
    assert "\n" not in line and "\r" not in line
    head, message = line.split("::", 2)[1:]  # properties hold no "::": ':' is escaped there
    assert head == ("error file=tests/t%2Cx.py,line=3,"
                    "title=device-time regression%3A test_p[a%2Cb%3Ac%25\\nd]")  # a newline shown
    assert not BAD_PERCENT.search(line)
    assert "1 -> 4 calls, each 4x smaller (same total work)" in message


def test_annotations_only_for_regressions_and_relative_to_the_workspace(tmp_path):
    root = tmp_path / "repo" / "python"
    improved = outcome("tests/test_b.py::test_b", ("tests/test_b.py", 5), summary(40.0))
    lines = github.annotation_lines([improved, outcome()], root, {"GITHUB_WORKSPACE": str(tmp_path / "repo")})
    assert len(lines) == 1
    assert lines[0].startswith("::error file=python/tests/test_a.py,line=12,")
    # Outside the workspace (or without one) the path stays as pytest gave it.
    assert github.annotation_lines([outcome()], root, {})[0].startswith("::error file=tests/test_a.py,")


def test_publish_does_nothing_outside_actions(tmp_path):
    printed: list[str] = []
    summary_file = tmp_path / "summary.md"
    for env in ({}, {"GITHUB_ACTIONS": "false", "GITHUB_STEP_SUMMARY": str(summary_file)}):
        github.publish([outcome()], printed.append, tmp_path, env)
    assert printed == [] and not summary_file.exists()


# --- in a pytest run --------------------------------------------------------------------------

def record_then_change(pytester: pytest.Pytester) -> None:
    """Record test_mm with 1 matmul and test_other with 3; then make it 3 and 1."""
    pytester.makepyfile(test_gh=SUITE)
    (pytester.path / "mm.txt").write_text("1")
    (pytester.path / "other.txt").write_text("3")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=2)
    (pytester.path / "mm.txt").write_text("3")
    (pytester.path / "other.txt").write_text("1")


def test_under_actions_annotation_and_step_summary(pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch):
    record_then_change(pytester)
    summary_file = pytester.path / "step_summary.md"
    summary_file.write_text("# an earlier step\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    monkeypatch.setenv("GITHUB_WORKSPACE", str(pytester.path.parent))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)

    errors = [line for line in result.outlines if line.startswith("::")]
    assert len(errors) == 1
    # pytest reports a decorated test at its first decorator: the 1-based line above the def.
    line = (pytester.path / "test_gh.py").read_text().splitlines().index("def test_mm():")
    assert errors[0].startswith(f"::error file={pytester.path.name}/test_gh.py,line={line},"
                                "title=device-time regression%3A test_mm::test_gh.py::test_mm: device time +")
    assert "aten::mm: 1 -> 3 calls, same work each: fixed cost per call still dominates" in errors[0]
    assert errors[0].endswith("pytest --neuron-baseline 'test_gh.py::test_mm'")
    assert not BAD_PERCENT.search(errors[0])

    text = summary_file.read_text()
    assert text.startswith("# an earlier step\n## Neuron device-time profile (pytest-neuronprof)\n")
    assert "**1 regression**, 1 improved" in text
    sections = re.split(r"^### ", text, flags=re.M)[1:]
    assert [s.splitlines()[0] for s in sections] == [
        "Regressions", "Improvements", "Why it is slow", "Per-test totals", "Updating the baselines"]
    regressions, improvements, why, totals, update = sections
    assert "`test_gh.py::test_mm`: utilisation MFU" in why  # what changed in utilisation
    assert "| `test_gh.py::test_mm` | aten::mm" in regressions
    assert "1 -> 3 calls, same work each: fixed cost per call still dominates" in regressions
    assert "| `test_gh.py::test_other` | aten::mm" in improvements
    assert "3 -> 1 calls, same work each: fixed cost per call still dominates" in improvements
    rows = [line for line in totals.splitlines() if line.startswith("| `")]
    assert [r.split("|")[-2].strip() for r in rows] == ["**regression**", "improved"]
    assert "pytest --neuron-baseline 'test_gh.py::test_mm' 'test_gh.py::test_other'" in update


def test_outside_actions_nothing_is_printed(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    record_then_change(pytester)
    summary_file = pytester.path / "step_summary.md"
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    assert not [line for line in result.outlines if line.startswith("::")]
    assert not summary_file.exists()


@pytest.mark.slow  # starts a subprocess
def test_xdist_controller_prints_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    record_then_change(pytester)
    summary_file = pytester.path / "step_summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    # One worker is enough to split controller from worker (two only add a torch import).
    result = pytester.runpytest_subprocess("-n", "1", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    assert len([line for line in result.outlines if line.startswith("::error ")]) == 1
    assert summary_file.read_text().count("## Neuron device-time profile") == 1


def test_step_summary_of_a_large_suite_stays_small():
    """GitHub drops a step summary over 1 MiB: passing tests beyond the cap are counted, not listed;
    regressions always are."""
    same = summary(90.0)
    passing = [TestOutcome(f"tests/test_{i:04d}.py::test_x", (f"tests/test_{i:04d}.py", 1),
                                  gate.Verdict("pass"), same, same) for i in range(2000)]
    text = github.step_summary(passing + [outcome("tests/test_zzz.py::test_slow")])
    totals = text.split("### Per-test totals")[1]
    rows = [line for line in totals.splitlines() if line.startswith("| `")]
    assert len(rows) == github.MAX_SUMMARY_ROWS and "| `tests/test_zzz.py::test_slow` |" in rows[-1]
    assert "1801 more tests that passed are not listed here." in totals
    assert "pytest --neuron-baseline 'tests/test_zzz.py::test_slow'" in text
    assert len(text.encode()) < 100_000
