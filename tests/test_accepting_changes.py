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


def test_compare_and_show_read_a_git_ref_as_the_plugin_does(pytester: pytest.Pytester, monkeypatch, capsys):
    """Issue 26, item 5: `neuronprof compare main baselines` (REF: the ini's directory at REF;
    REF:DIR), `show REF`; a name that is neither a path nor a ref says so."""
    import shutil
    import subprocess

    from pytest_neuronprof.cli.commands import main

    if shutil.which("git") is None:
        pytest.skip("needs git")
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makepyfile(test_mm=SUITE)
    (pytester.path / "n.txt").write_text("64")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=pytester.path,
                       check=True, capture_output=True)

    git("init", "-q", "-b", "main")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    (pytester.path / "n.txt").write_text("1024")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()
    assert main(["compare", "main", "baselines"]) == 1
    out = capsys.readouterr().out
    assert "main (" in out and "):baselines" in out and "REGRESSION" in out
    assert main(["compare", "main:baselines", "baselines"]) == 1
    assert main(["show", "main"]) == 0
    assert "test_mm.py::test_mm" in capsys.readouterr().out
    assert main(["compare", "nope", "baselines"]) == 2
    err = capsys.readouterr().err
    assert "nope: no such file or directory, nor a git ref" in err and "git does not know this ref" in err
    assert main(["compare", "no such thing", "baselines"]) == 2
    assert "nor a git ref" in capsys.readouterr().err


def test_an_allowed_change_shows_its_reason_in_every_output(pytester: pytest.Pytester, monkeypatch):
    """Issue 26, item 3: allow= reasons in the terminal summary, the step summary and the
    comment, beside the numbers they cover."""
    pytester.makepyfile(test_mm=SUITE.replace("@pytest.mark.neuron_profile",
                                              '@pytest.mark.neuron_profile(allow={"(peak memory)": "KV cache for decode, #7"})'))
    (pytester.path / "n.txt").write_text("64")
    pytester.runpytest("-p", "no:cacheprovider", "--neuron-baseline").assert_outcomes(passed=1)
    (pytester.path / "n.txt").write_text("96")
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("-p", "no:cacheprovider", "--neuron-comment", "comment.md",
                                "--neuron-threshold", "1000%")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*- allowed by the marker -*", "test_mm.py::test_mm: allowed by its marker",
                                 "*(peak memory)*KV cache for decode, #7*"])
    for text in (summary.read_text(), (pytester.path / "comment.md").read_text()):
        assert "### Allowed by the marker" in text and "KV cache for decode, #7" in text


def test_compare_shows_a_change_with_a_reason_for_its_numbers_as_accepted(tmp_path, capsys):
    """Issue 26, item 5: a regression NEW's entry has a valid reason for passes `compare` (exit
    0), shown with its reason; the same numbers with a stale reason are a regression (exit 1)."""
    from pytest_neuronprof.cli.commands import main
    from pytest_neuronprof.gate.accepted import with_reason
    from pytest_neuronprof.gate.baseline import BaselineStore

    from test_baseline_ref import NODE, entry

    BaselineStore(tmp_path / "old").save([(NODE, entry(100.0))])
    BaselineStore(tmp_path / "new").save([(NODE, with_reason(entry(150.0), entry(100.0), "bigger MLP, #12"))])
    assert main(["compare", str(tmp_path / "old"), str(tmp_path / "new")]) == 0
    out = capsys.readouterr().out
    assert "accepted: NEW's entry gives the reason 'bigger MLP, #12' for these numbers" in out
    stale = with_reason(entry(200.0), with_reason(entry(150.0), entry(100.0), "bigger MLP, #12"), "")
    BaselineStore(tmp_path / "new").save([(NODE, stale)])
    assert main(["compare", str(tmp_path / "old"), str(tmp_path / "new"), "--format", "json"]) == 1
    assert "given for other numbers" in capsys.readouterr().out


def _repository_with_a_rerecorded_regression(pytester: pytest.Pytester) -> None:
    import subprocess

    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makepyfile(test_mm=SUITE)
    (pytester.path / "n.txt").write_text("64")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "base <b>numbers</b>"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=pytester.path,
                       check=True, capture_output=True)
    (pytester.path / "n.txt").write_text("1024")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)  # re-recorded, no reason


def test_every_output_names_the_base_and_the_last_line_is_the_next_step(pytester: pytest.Pytester, monkeypatch):
    """Issue 26, items 4 and 9."""
    import json
    import shutil

    if shutil.which("git") is None:
        pytest.skip("needs git")
    _repository_with_a_rerecorded_regression(pytester)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("--neuron-baseline-ref", "main", "--neuron-comment", "comment.md",
                                "--neuron-report", "report.json", "--neuron-html", "html")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert re.search(r"Gated against the baseline files at main \([0-9a-f]{12}: base <b>numbers</b>\)", out)
    failure = [line for line in out.split("test_mm _")[1].split("neuron device-time profile")[0].splitlines()
               if line.strip() and not line.startswith("=")]
    assert failure[-1] == ("This change re-recorded these numbers without a reason for them; give one (a "
                           "reviewer reads it in the diff): pytest --neuron-baseline --neuron-reason "
                           "'why it is slower' 'test_mm.py::test_mm'")
    # said once in the failure (the short test summary repeats a failure's text under CI=true)
    assert "update the baseline" not in out and "\n".join(failure).count("--neuron-reason") == 1
    for text in (summary.read_text(), (pytester.path / "comment.md").read_text()):
        assert re.search(r"Gated against the baseline files at `main` \(`[0-9a-f]{12}`: `base <b>numbers</b>`\)", text)
    assert "pytest --neuron-baseline --neuron-reason 'why it is slower' 'test_mm.py::test_mm'" in summary.read_text()
    page = (pytester.path / "html" / "index.html").read_text()
    assert "Gated against the baseline files at main (" in page and "base &lt;b&gt;numbers&lt;/b&gt;" in page
    base = json.loads((pytester.path / "report.json").read_text())["tests"]["test_mm.py::test_mm"]["base"]
    assert base["ref"] == "main" and len(base["commit"]) == 40 and base["subject"] == "base <b>numbers</b>"


def test_an_op_in_several_modules_is_shown_in_all_of_them():
    """Issue 27, item 3: one attribution everywhere: `neuronprof show` and the per-op tables
    list every module an op ran in (most time first), as the findings do."""
    from pytest_neuronprof.gate.summary import OpSummary

    op = OpSummary(2, 30.0, "Tensor", 0, 0, 1.0, modules={"mlp.up": 20.0, "mlp.down": 10.0})
    assert op.module == "mlp.up" and op.where() == "mlp.up, mlp.down"
    many = OpSummary(5, 50.0, "Tensor", 0, 0, 1.0, modules={f"m{i}": 10.0 + i for i in range(5)})
    assert many.where() == "m4, m3, m2, +2 more"
    assert OpSummary(1, 1.0, "Tensor", 0, 0, 1.0, "mlp").where() == "mlp"
