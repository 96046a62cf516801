"""Issue 11: the gate never goes blind without saying so, and its outputs are never lost.

Each test reproduces one way a user's habits (another working directory, a path option in two
arguments, a typo in ``ops=``, a fixture never entered, a bad merge, pytest-benchmark,
pytest-rerunfailures, a long parametrize id, a read-only folder, a umask) turned the gate off or
lost an output, with a pytester run of a small suite.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]


pytestmark = pytest.mark.usefixtures("lean_inner_runs")


# n x n matmul; knobs.json next to the test file sets n (64 by default).
SUITE = '''
import json, pathlib, pytest, torch

def n():
    path = pathlib.Path(__file__).parent / "knobs.json"
    return json.loads(path.read_text())["n"] if path.exists() else 64

@pytest.mark.neuron_profile{marker}
def test_mm():
    a = torch.randn(n(), n())
    a @ a
'''


def suite(folder: Path, marker: str = "", name: str = "test_mm.py", n: int = 64) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(SUITE.format(marker=f"({marker})" if marker else ""))
    knobs(folder, n)
    return path


def knobs(folder: Path, n: int) -> None:
    (folder / "knobs.json").write_text(json.dumps({"n": n}))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*args)


# --- the rootdir moves, the baselines stay found ------------------------------------------------

def test_baselines_are_found_from_a_subdirectory_without_an_ini_file(pytester: pytest.Pytester,
                                                                       monkeypatch):
    """No ini file: `cd tests && pytest` made the rootdir tests/, keys became test_mm.py::...,
    and a +1000 % regression passed as "no baseline"."""
    tests = pytester.path / "tests"
    suite(tests)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "baselines" / "tests" / "test_mm.json").read_text())
    assert list(doc["tests"]) == ["tests/test_mm.py::test_mm"]
    knobs(tests, 512)
    monkeypatch.chdir(tests)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*device time regression on simulated:trn2*", "*aten::mm*flops x512*"])
    # recording from there updates the same entry, under the same key
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "baselines" / "tests" / "test_mm.json").read_text())
    assert list(doc["tests"]) == ["tests/test_mm.py::test_mm"]
    assert not (tests / "baselines").exists()
    monkeypatch.chdir(pytester.path)
    run(pytester).assert_outcomes(passed=1)


def test_a_path_option_in_two_arguments_does_not_move_the_baselines(pytester: pytest.Pytester,
                                                                      monkeypatch):
    """`--neuron-html ../perf-html` (an existing folder outside the project) moved pytest's rootdir
    to the parent folder: every test passed as "no baseline"."""
    project = pytester.path / "project"
    suite(project / "tests")
    (pytester.path / "perf-html").mkdir()
    (pytester.path / "shared").mkdir()
    monkeypatch.chdir(project)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    run(pytester, "--neuron-baseline", "--neuron-baseline-dir=../shared").assert_outcomes(passed=1)
    knobs(project / "tests", 512)
    result = run(pytester, "--neuron-html", "../perf-html")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*aten::mm*flops x512*"])
    result = run(pytester, "--neuron-baseline-dir", "../shared")
    result.assert_outcomes(failed=1)


def test_a_path_option_in_two_arguments_that_drops_the_ini_file_is_an_error(pytester: pytest.Pytester,
                                                                             monkeypatch):
    project = pytester.path / "project"
    suite(project / "tests")
    (project / "pytest.ini").write_text("[pytest]\nneuron_baseline_dir = perf/base\n")
    (pytester.path / "perf-html").mkdir()
    monkeypatch.chdir(project)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    assert (project / "perf" / "base" / "tests" / "test_mm.json").is_file()
    knobs(project / "tests", 512)
    result = run(pytester, "--neuron-html", "../perf-html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: pytest-neuronprof: --neuron-html ../perf-html: pytest took this existing path for a "
        "test path when it chose its rootdir (*), so it did not read *pytest.ini; "
        "write --neuron-html=../perf-html (one argument)"])
    run(pytester, "--neuron-html=../perf-html").assert_outcomes(failed=1)


def test_baseline_files_that_match_no_profiled_test_stop_the_run(pytester: pytest.Pytester):
    suite(pytester.path)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "test_mm.json"
    doc = json.loads(path.read_text())
    doc["tests"] = {"elsewhere/test_mm.py::test_mm": doc["tests"]["test_mm.py::test_mm"]}
    path.write_text(json.dumps(doc))
    result = run(pytester, "--neuron-report", "report.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*= neuron device-time profile =*"])  # the summary is still there
    result.stderr.fnmatch_lines([
        "ERROR: pytest-neuronprof: none of the 1 profiled tests has an entry in its baseline file, "
        "although baselines/test_mm.json holds 1 entry (e.g. 'elsewhere/test_mm.py::test_mm'): *"
        "looked up as 'test_mm.py::test_mm' in baselines/test_mm.json*"])
    assert (pytester.path / "report.json").is_file()


def test_a_new_test_module_is_not_a_misconfiguration(pytester: pytest.Pytester):
    """Issue 26, item 6: a module with no baseline file is new, run alone (a CI shard of new
    tests) or with others; a new test run alone in a module that has a file is not an error
    either (the run left the module's other tests out)."""
    suite(pytester.path)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    suite(pytester.path, name="test_new.py")
    alone = run(pytester, "test_new.py")
    assert alone.ret == pytest.ExitCode.OK, alone.stderr.str()
    alone.stdout.fnmatch_lines(["*test_new.py::test_mm*no baseline*"])
    assert "none of the" not in alone.stderr.str()
    together = run(pytester)
    assert together.ret == pytest.ExitCode.OK, together.stderr.str()
    (pytester.path / "test_mm.py").write_text((pytester.path / "test_mm.py").read_text()
                                              + "\n\n@pytest.mark.neuron_profile\ndef test_added():\n    test_mm()\n")
    added = run(pytester, "test_mm.py::test_added")
    assert added.ret == pytest.ExitCode.OK, added.stderr.str()
    assert run(pytester, "-k", "test_added").ret == pytest.ExitCode.OK


def test_baseline_files_only_for_modules_that_do_not_exist_stop_the_run(pytester: pytest.Pytester):
    suite(pytester.path / "old")
    run(pytester, "--neuron-baseline", "old").assert_outcomes(passed=1)
    (pytester.path / "old" / "test_mm.py").rename(pytester.path / "test_moved.py")
    result = run(pytester, "test_moved.py")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*none of the 1 profiled tests has an entry in its baseline file*"
                                 "'old/test_mm.py::test_mm'*"])


# --- per-op settings that name nothing -----------------------------------------------------------

def test_marker_ops_and_allow_that_name_no_op_fail_the_test(pytester: pytest.Pytester):
    suite(pytester.path, marker='ops={"mm": 0.01}')
    (pytester.path / "test_allow.py").write_text(SUITE.format(
        marker='(allow={"aten::rellu": "new activation"})').replace("test_mm", "test_allow"))
    result = run(pytester, "--neuron-baseline")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines_random([
        "*test_mm.py::test_mm: neuron_profile ops: 'mm' names no op of this test's profile or "
        "baseline; did you mean 'aten::mm'?*",
        "*test_allow.py::test_allow: neuron_profile allow: 'aten::rellu' names no op of this "
        "test's profile or baseline*",
    ])
    assert not (pytester.path / "baselines").exists()
    suite(pytester.path, marker='ops={"aten::mm": 0.01}')
    run(pytester, "--neuron-baseline", "test_mm.py").assert_outcomes(passed=1)


# --- a fixture that never profiles -------------------------------------------------------------

FIXTURE_NEVER_ENTERED = '''
import torch

def test_forgot(neuron_profile):
    a = torch.randn(64, 64)
    a @ a
'''


def test_a_fixture_never_entered_is_reported_and_fails_under_strict(pytester: pytest.Pytester):
    pytester.makepyfile(test_forgot=FIXTURE_NEVER_ENTERED)
    result = run(pytester, "--neuron-report", "report.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "test_forgot.py::test_forgot *not-profiled",
        "test_forgot.py::test_forgot: not profiled: it requests the neuron_profile fixture but never "
        "entered `with neuron_profile:` (passes)*",
    ])
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["tests"]["test_forgot.py::test_forgot"]["verdict"]["status"] == "not-profiled"
    result = run(pytester, "--neuron-strict")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--neuron-strict: test_forgot.py::test_forgot was not compared "
                                 "(not profiled: *"])


# --- duplicate keys --------------------------------------------------------------------------

def test_duplicate_keys_in_a_baseline_file_are_a_broken_file(pytester: pytest.Pytester):
    suite(pytester.path)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "test_mm.json"
    entry = json.dumps(json.loads(path.read_text())["tests"]["test_mm.py::test_mm"])
    stale = json.loads(entry)
    stale["simulated:trn2"]["total_device_time_us"] *= 100  # the side of the merge that loses
    path.write_text('{"schema_version": 3, "tests": {"test_mm.py::test_mm": %s, '
                    '"test_mm.py::test_mm": %s}}' % (entry, json.dumps(stale)))
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-neuronprof: broken baseline file baselines/test_mm.json: "
                                 "duplicate key 'test_mm.py::test_mm'*git checkout*"])


# --- pytest-benchmark ------------------------------------------------------------------------

def test_the_benchmark_fixture_in_a_profiled_test_is_refused(pytester: pytest.Pytester, monkeypatch):
    pytest.importorskip("pytest_benchmark")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark turns off under xdist
    pytester.makepyfile(test_bench='''
        import pytest, torch

        @pytest.mark.neuron_profile
        def test_bench(benchmark):
            a = torch.randn(64, 64)
            benchmark(lambda: a @ a)
    ''')
    result = run(pytester, "--neuron-baseline")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_bench.py::test_bench: pytest-benchmark's `benchmark` fixture "
                                 "runs the code a number of times it calibrates on wall-clock time*"])
    assert not (pytester.path / "baselines").exists()
    # with benchmarking disabled, benchmark() calls the code once: the profile is that call
    run(pytester, "--neuron-baseline", "--benchmark-disable").assert_outcomes(passed=1)
    entry = json.loads((pytester.path / "baselines" / "test_bench.json").read_text())
    assert entry["tests"]["test_bench.py::test_bench"]["simulated:trn2"]["ops"]["aten::mm"]["count"] == 1


# --- not-compared tests in CI ------------------------------------------------------------------

def test_not_compared_tests_are_annotated_and_counted(pytester: pytest.Pytester, monkeypatch):
    suite(pytester.path)
    summary = pytester.path / "step-summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = run(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "1 of 1 profiled tests was not compared (1 no-baseline)*",
        "::warning file=test_mm.py,line=*,title=device time not compared%3A test_mm::test_mm.py::test_mm: "
        "no baseline for simulated:trn2*pytest --neuron-baseline 'test_mm.py::test_mm'",
    ])
    text = summary.read_text()
    assert "### Not compared" in text and "`test_mm.py::test_mm` [simulated:trn2]: no baseline" in text


# --- outputs inside the baseline directory ------------------------------------------------------

def test_outputs_inside_the_baseline_dir_are_refused_and_stray_ones_ignored(pytester: pytest.Pytester):
    suite(pytester.path)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    for option in ("--neuron-report=baselines/report.json", "--neuron-trace-dir=baselines/traces",
                   "--neuron-html=baselines"):
        result = run(pytester, option)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, option
        result.stderr.fnmatch_lines([f"ERROR: pytest-neuronprof: {option.split('=')[0]} *is inside the "
                                     "baseline directory baselines*"])
    # a report and a trace that an older version wrote there are not baselines
    run(pytester, "--neuron-report=report.json", "--neuron-trace-dir=traces").assert_outcomes(passed=1)
    (pytester.path / "report.json").rename(pytester.path / "baselines" / "report.json")
    trace = next((pytester.path / "traces").iterdir())
    trace.rename(pytester.path / "baselines" / trace.name)
    run(pytester).assert_outcomes(passed=1)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)


# --- file names of traces --------------------------------------------------------------------

def test_trace_names_are_bounded_and_unique(pytester: pytest.Pytester):
    pytester.makepyfile(test_ids='''
        import pytest, torch

        @pytest.mark.neuron_profile
        @pytest.mark.parametrize("n", [8, 16, 32], ids=["x" * 300, "a b", "a_b"])
        def test_ids(n):
            torch.randn(n, n) @ torch.randn(n, n)
    ''')
    result = run(pytester, "--neuron-trace-dir", "traces", "--neuron-html", "html")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*= neuron device-time profile =*"])
    names = sorted(p.name for p in (pytester.path / "traces").iterdir())
    assert len(names) == 3 and all(len(name) <= 128 for name in names)
    page = (pytester.path / "html" / "index.html").read_text()
    links = {href for href in re.findall(r'href="([^"]+)"', page) if href.endswith(".trace.json")}
    assert len(links) == 3 and {Path(link).name for link in links} == set(names)


# --- outputs written independently, checked up front -----------------------------------------------

def test_a_failed_baseline_write_loses_no_other_output(pytester: pytest.Pytester, monkeypatch):
    suite(pytester.path)
    from pytest_neuronprof import files
    from pytest_neuronprof.gate import baseline

    def read_only(path, text):
        raise files.OutputError(Path(path), "Read-only file system", 30)

    monkeypatch.setattr(baseline, "atomic_write_text", read_only)  # the baseline writer only
    result = run(pytester, "--neuron-baseline", "--neuron-report", "report.json", "--neuron-html", "html")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["*= neuron device-time profile =*", "test_mm.py::test_mm *recorded"])
    result.stderr.fnmatch_lines(["ERROR: pytest-neuronprof: cannot write baseline file *test_mm.json: "
                                 "*Read-only file system*"])
    assert json.loads((pytester.path / "report.json").read_text())["recorded"] == 1
    assert (pytester.path / "html" / "index.html").is_file()


def test_an_unwritable_report_path_is_refused_before_any_test_runs(pytester: pytest.Pytester):
    suite(pytester.path)
    (pytester.path / "afile").write_text("not a folder")
    (pytester.path / "adir").mkdir()
    for value, why in (("afile/report.json", "cannot create its folder afile"),
                       ("adir", "is a directory")):
        result = run(pytester, "--neuron-report", value)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        assert "test_mm.py" not in result.stdout.str()  # no test ran
        result.stderr.fnmatch_lines([f"ERROR: pytest-neuronprof: *{value}*{why}*"])


# --- file modes -------------------------------------------------------------------------------

@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_files_get_the_mode_of_the_umask(pytester: pytest.Pytester, umask):
    suite(pytester.path)
    old = os.umask(umask)
    try:
        run(pytester, "--neuron-baseline", "--neuron-report", "report.json", "--neuron-html", "html",
            "--neuron-trace-dir", "traces").assert_outcomes(passed=1)
    finally:
        os.umask(old)
    written = [pytester.path / "baselines" / "test_mm.json", pytester.path / "report.json",
               pytester.path / "html" / "index.html", *(pytester.path / "traces").iterdir()]
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {oct(0o666 & ~umask)}


# --- unknown top-level keys ------------------------------------------------------------------

def test_an_unknown_top_level_key_is_a_broken_file(pytester: pytest.Pytester):
    suite(pytester.path)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "test_mm.json"
    doc = json.loads(path.read_text())
    doc["notes"] = "kept by hand"
    path.write_text(json.dumps(doc))
    result = run(pytester, "--neuron-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: pytest-neuronprof: broken baseline file baselines/test_mm.json: "
                                 "the top level has unknown key(s) 'notes'*"])
    assert json.loads(path.read_text())["notes"] == "kept by hand"


# --- pytest-rerunfailures --------------------------------------------------------------------

def test_a_rerun_test_counts_once(pytester: pytest.Pytester):
    pytest.importorskip("pytest_rerunfailures")
    suite(pytester.path)
    run(pytester, "--neuron-baseline").assert_outcomes(passed=1)
    knobs(pytester.path, 512)
    result = run(pytester, "--reruns", "2", "--neuron-report", "report.json", "--junitxml", "junit.xml")
    assert {k: v for k, v in result.parseoutcomes().items() if k in ("failed", "rerun")} == {
        "failed": 1, "rerun": 2}
    assert result.stdout.str().count("test_mm.py::test_mm  ") == 1  # one row in the summary table
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["counts"] == {"regression": 1} and report["regressions"] == 1
    junit = (pytester.path / "junit.xml").read_text()  # one <testcase> per run, as junitxml writes
    assert junit.count('name="neuron_verdict"') == junit.count("<testcase ") == 3  # no piling up
