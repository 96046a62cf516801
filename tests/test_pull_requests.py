"""Pull requests (issue 19), the outputs' side: changes accepted in this change in every output,
the pull-request comment (its marker, order and size limit), `neuronprof history`, `neuronprof
continuous`, the HTML trend chart and the workflow files."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_neuronprof.cli.commands import main
from pytest_neuronprof.gate.compare import GatePolicy, Status, Verdict, compare
from pytest_neuronprof.gate.judge import judge
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.outputs.comment import MARKER, MAX_COMMENT_CHARS, comment_body
from pytest_neuronprof.outputs.html import render_page, write_html
from pytest_neuronprof.outputs.json_report import json_report
from pytest_neuronprof.outputs.markdown import outcomes_markdown
from pytest_neuronprof.outputs.terminal import WriteLog, write_summary

from test_baseline_ref import NODE, entry, git, repo, write
from test_cli import assert_one_line_error, run
from test_session_outputs import Terminal

__all__ = ["repo"]  # test_baseline_ref's fixture: a main branch and a branch that re-records

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
REASON = "bigger MLP for quality, see #12"
ROOT = Path(__file__).resolve().parents[1]


def accepted_outcome(nodeid: str = NODE, reason: str = REASON, mm_us: float = 150.0) -> TestOutcome:
    """A test gated against the base (mm 100 us) whose pull request re-recorded mm at ``mm_us``
    with ``reason`` ("" none)."""
    base, own, run_ = entry(), entry(mm_us, reason=reason), entry(mm_us)
    verdict = judge(run_, base, lambda marker: GatePolicy(), own=own)
    return TestOutcome(nodeid, ("tests/test_mlp.py", 3), verdict, run_, base)


def improved_outcome(nodeid: str = "tests/test_mlp.py::test_fast") -> TestOutcome:
    return TestOutcome(nodeid, ("tests/test_mlp.py", 9), compare(entry(), entry(60.0), GatePolicy()),
                       entry(60.0), entry())


def regressed_outcome(nodeid: str = "tests/test_mlp.py::test_slow") -> TestOutcome:
    return TestOutcome(nodeid, ("tests/test_mlp.py", 20), compare(entry(), entry(200.0), GatePolicy()),
                       entry(200.0), entry())


def mixed() -> list[TestOutcome]:
    """An improvement, a change accepted with a reason, one without a reason (still a
    regression), a plain regression: in an order that is none of the outputs' orders."""
    return [improved_outcome(), accepted_outcome(), accepted_outcome("tests/test_mlp.py::test_noreason", ""),
            regressed_outcome()]


# --- the outcome carries what was accepted ------------------------------------------------------

def test_the_outcome_json_round_trip_keeps_the_accepted_changes_and_the_reason():
    outcome = accepted_outcome()
    assert outcome.verdict.status == Status.PASS and [f.op for f in outcome.verdict.accepted] == [
        "(total)", "aten::mm"]
    data = json.loads(json.dumps(outcome.to_json()))
    assert data["verdict"]["accepted_reason"] == REASON
    assert [(f["op"], f["baseline"], f["current"]) for f in data["verdict"]["accepted"]] == [
        ("(total)", 120.0, 170.0), ("aten::mm", 100.0, 150.0)]
    back = TestOutcome.from_json(data)
    assert back.verdict.accepted == outcome.verdict.accepted
    assert back.verdict.accepted_reason == REASON
    # a report written before --neuron-baseline-ref still reads: nothing accepted
    del data["verdict"]["accepted"], data["verdict"]["accepted_reason"]
    old = TestOutcome.from_json(data)
    assert old.verdict.accepted == () and old.verdict.accepted_reason == ""


# --- every output shows it: regressions, then accepted, then improvements -----------------------

def test_the_terminal_summary_lists_the_accepted_changes_with_their_reason_before_improvements():
    terminal = Terminal()
    write_summary(terminal, mixed(), WriteLog(), strict=False, rootdir=Path("."))
    text = "\n".join(terminal.lines)
    assert text.index("--- accepted in this change") < text.index("--- improvements")
    section = text[text.index("--- accepted in this change"):text.index("--- improvements")]
    # the one still failing (no reason) first, then the one accepted with its reason
    assert section.index("test_noreason") < section.index("test_step")
    assert f"{NODE}: accepted in this change, reason: {REASON}" in section
    assert "tests/test_mlp.py::test_noreason: accepted in this change, reason: no reason given" in section
    row = next(line for line in section.splitlines() if line.startswith("aten::mm"))
    assert row.split()[:9] == ["aten::mm", "100.000", "us", "150.000", "us", "+50.0%", "150.000", "us", "same"]
    assert "120.000 us  170.000 us  +41.7%" in section


def test_the_json_report_carries_the_accepted_changes():
    report = json.loads(json_report(mixed()))
    verdict = report["tests"][NODE]["verdict"]
    assert verdict["accepted_reason"] == REASON
    assert [(f["op"], f["delta"]) for f in verdict["accepted"]] == [("(total)", pytest.approx(50 / 120)),
                                                                     ("aten::mm", 0.5)]
    assert "accepted" not in report["tests"]["tests/test_mlp.py::test_fast"]["verdict"]  # as before


def test_the_markdown_has_an_accepted_section_after_the_regressions():
    text = outcomes_markdown(mixed(), "Neuron")
    assert text.index("### Regressions") < text.index("### Accepted in this change") < text.index("### Improvements")
    section = text[text.index("### Accepted in this change"):text.index("### Improvements")]
    assert re.search(r"\| `tests/test_mlp.py::test_step` +\| aten::mm +\| 100\.000 us +\| 150\.000 us +"
                     r"\| \+50\.0% .*\| bigger MLP for quality, see #12 +\|", section)
    assert re.search(r"`tests/test_mlp.py::test_noreason` +\| \(total\) .*\| no reason given +\|", section)


def test_the_html_page_shows_the_accepted_changes_in_the_test_section():
    page = render_page(mixed())
    start = page.index('id="t-')  # the sections, after the overview
    section = page[page.index("test_step</code>", start):]
    section = section[:section.index("</section>")]
    assert '<p class="accepted-reason">reason: bigger MLP for quality, see #12</p>' in section
    assert "<td>aten::mm</td><td class=num>100.000 us</td><td class=num>150.000 us</td><td class=num>+50.0%</td>" in section
    noreason = page[page.index("test_noreason</code>", start):]
    noreason = noreason[:noreason.index("</section>")]
    assert noreason.index("<h3>Regressions</h3>") < noreason.index("<h3>Accepted in this change</h3>")
    assert "reason: no reason given" in noreason


# --- the pull-request comment -----------------------------------------------------------------

def test_the_comment_starts_with_the_marker_and_lists_regressions_accepted_improvements_not_compared():
    outcomes = mixed() + [TestOutcome("tests/test_new.py::test_new", ("tests/test_new.py", 1),
                                      Verdict(Status.NO_BASELINE, message="no baseline for simulated:trn2"),
                                      entry(), None)]
    body = comment_body(outcomes)
    lines = body.splitlines()
    assert lines[0] == MARKER
    # verdicts as every table says them: the accepted pass is "accepted", no baseline "new"
    assert lines[1] == ("### Neuron device time: **2 regressions**, 1 accepted, 1 improved, 1 new, "
                        "1 of the failed with changes accepted in this change")
    order = [body.index(h) for h in ("### Regressions", "### Accepted in this change", "### Improvements",
                                     "### Not compared", "### Per-op changes")]
    assert order == sorted(order)
    assert "- `tests/test_new.py::test_new` [simulated:trn2]: no baseline for simulated:trn2" in body
    # per-op tables folded, the regressed tests' first
    summaries = re.findall(r"<details><summary>Per-op changes: <code>([^<]*)</code>", body)
    assert summaries[:2] == ["tests/test_mlp.py::test_noreason", "tests/test_mlp.py::test_slow"]
    assert set(summaries) == {o.nodeid for o in mixed()}
    assert body.count("<details>") == body.count("</details>") == 4
    assert "not shown" not in body and len(body) < 10_000


def test_the_comment_is_cut_to_githubs_limit_from_the_end_with_a_line_that_says_what_was_cut():
    outcomes = [regressed_outcome(f"tests/test_mlp.py::test_slow[{i:04d}]") for i in range(100)]
    outcomes += [TestOutcome(f"tests/test_new.py::test_new[{i:04d}]", ("tests/test_new.py", 1),
                             Verdict(Status.NO_BASELINE, message="no baseline"), entry(), None)
                 for i in range(600)]
    body = comment_body(outcomes)
    assert MAX_COMMENT_CHARS - 1_000 < len(body) <= MAX_COMMENT_CHARS and body.splitlines()[0] == MARKER
    last = body.rstrip().splitlines()[-1]
    # the per-op tables went first (all 100), then the tests not compared, from the end
    listed = body.count("- `tests/test_new.py::test_new[")
    assert body.count("<details>") == 0
    assert last == (f"_... not shown: {600 - listed} more tests not compared, 100 more per-op tables; "
                    "the full report is in the job's artifact._")
    assert 0 < listed < 600 and "test_new[0000]" in body  # the first ones kept
    assert body.count("| `tests/test_mlp.py::test_slow[") == 200  # every regression row (total and mm)
    # a tighter limit cuts regression rows last, and every cut is counted
    small = comment_body(outcomes, limit=5_000)
    assert len(small) <= 5_000
    rows = small.count("| `tests/test_mlp.py::test_slow[")
    assert 0 < rows < 200 and "### Not compared" not in small
    assert small.rstrip().endswith(f"_... not shown: {200 - rows} more regression rows, 600 more tests not "
                                   "compared, 100 more per-op tables; the full report is in the job's artifact._")


def test_neuronprof_comment_writes_the_same_body_from_a_report(tmp_path, capsys):
    outcomes = mixed()
    report = tmp_path / "report.json"
    report.write_text(json_report(outcomes))
    code, out, err = run(capsys, "comment", report, "-o", tmp_path / "comment.md")
    assert (code, err) == (0, "")
    assert (tmp_path / "comment.md").read_text() == comment_body(outcomes)
    code, out, _ = run(capsys, "comment", report)
    assert code == 0 and out == comment_body(outcomes)
    code, _, err = run(capsys, "comment", tmp_path)
    assert code == 2
    assert_one_line_error(err, "takes a --neuron-report file")


@pytest.mark.slow
def test_the_plugin_writes_the_comment_with_neuron_comment(pytester):
    pytester.makepyfile(test_it="""
        import pytest, torch

        @pytest.mark.neuron_profile
        def test_mm():
            torch.randn(64, 64) @ torch.randn(64, 64)
    """)
    result = pytester.runpytest("--neuron-comment", "out/comment.md", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    body = (pytester.path / "out" / "comment.md").read_text()
    assert body.splitlines()[:2] == [MARKER, "### Neuron device time: 1 new"]
    assert "- `test_it.py::test_mm` [simulated:trn2]: no baseline for simulated:trn2" in body


# --- history -----------------------------------------------------------------------------------

@needs_git
def test_history_prints_each_commit_that_changed_a_test(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)  # the repository is the working directory's
    base, head = git(repo, "rev-parse", "main")[:10], git(repo, "rev-parse", "HEAD")[:10]
    code, out, err = run(capsys, "history", "--dir", repo / "baselines")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"{NODE} [simulated:trn2]: 2 changes"
    assert re.match(rf"  {base}  \d{{4}}-\d\d-\d\d  base +120\.000 us +-$", lines[3])
    assert re.match(rf"  {head}  \d{{4}}-\d\d-\d\d  slower, re-recorded +170\.000 us +\+41\.7%$", lines[4])
    code, out, _ = run(capsys, "history", "test_step", "--op", "aten::mm", "--dir", repo / "baselines")
    assert code == 0 and re.search(r"170\.000 us +\+41\.7% +150\.000 us +\+50\.0%$", out.splitlines()[4])
    code, out, _ = run(capsys, "history", "--since", "main", "--dir", repo / "baselines", "--format", "json")
    points = json.loads(out)["tests"][0]["points"]
    assert [(p["commit"][:10], p["subject"], p["total_us"], p["delta"] is not None) for p in points] == [
        (base, "base", 120.0, False), (head, "slower, re-recorded", 170.0, True)]
    code, out, _ = run(capsys, "history", "no_such_test", "--dir", repo / "baselines")
    assert code == 0 and out == "no baseline entry changed in the commits read\n"


@needs_git
def test_history_errors_are_one_line_and_exit_2(repo, tmp_path, capsys, monkeypatch):
    code, _, err = run(capsys, "history", "--repo", repo, "--dir", repo / "baselines", "--since", "nope")
    assert code == 2
    assert_one_line_error(err, "--since='nope': git does not know this ref")
    (tmp_path / "plain").mkdir()
    monkeypatch.chdir(tmp_path / "plain")
    code, _, err = run(capsys, "history", "--dir", tmp_path / "plain")
    assert code == 2
    assert_one_line_error(err, "not in a git repository")
    # a directory outside the working directory's repository is not read from another one
    code, _, err = run(capsys, "history", "--repo", repo, "--dir", tmp_path / "plain")
    assert code == 2
    assert_one_line_error(err, "is outside the git repository at")


# --- the HTML trend chart ----------------------------------------------------------------------

@needs_git
def test_the_html_page_draws_each_tests_history_with_the_last_change_marked(repo, tmp_path):
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--ff-only", "feature")
    write(repo, entry(130.0))
    git(repo, "commit", "-q", "-am", "a bit faster")
    head = git(repo, "rev-parse", "HEAD")
    outcome = TestOutcome(NODE, ("tests/test_mlp.py", 3), compare(entry(130.0), entry(130.0), GatePolicy()),
                          entry(130.0), entry(130.0), key=NODE, baseline_dir=str(repo / "baselines"))
    page = write_html(tmp_path / "html", [outcome], project_root=repo).read_text()
    assert "<script" not in page and "Device time over the baseline's history" in page
    svg = re.search(r'<svg class="chart trend-chart".*?</svg>', page)
    assert svg is not None
    points = [tuple(map(float, p.split(","))) for p in
              re.search(r'<polyline [^>]*points="([^"]*)"', svg.group(0)).group(1).split()]
    # 120 -> 170 -> 150 us: three points, the highest drawn highest (smallest y)
    assert len(points) == 3 and points[1][1] < points[2][1] < points[0][1]
    last = re.search(r'<circle class="last-change"[^>]*><title>([^<]*)</title>', svg.group(0))
    assert last is not None and last.group(1).startswith(f"{head[:10]} ") and "150.000 us: a bit faster" in last.group(1)
    # outside a git repository: no chart, no error
    plain_outcome = replace(outcome, baseline_dir=str(tmp_path / "nogit"))
    assert "trend-chart" not in write_html(tmp_path / "html2", [plain_outcome], project_root=repo).read_text()
    assert "trend-chart" not in write_html(tmp_path / "html3", [outcome], project_root=tmp_path).read_text()


# --- continuous ---------------------------------------------------------------------------------

def test_continuous_takes_pytest_arguments_after_the_double_dash(monkeypatch):
    seen: dict[str, Any] = {}

    def fake(base: str, head: str | None, args: list[str], say: Any) -> int:
        seen.update(base=base, head=head, args=args)
        return 1

    monkeypatch.setattr("pytest_neuronprof.cli.continuous.continuous", fake)
    assert main(["continuous", "origin/main", "--", "-k", "mlp", "tests/x.py"]) == 1
    assert seen == {"base": "origin/main", "head": None, "args": ["-k", "mlp", "tests/x.py"]}
    assert main(["continuous", "v1", "HEAD", "--", "-x"]) == 1
    assert seen == {"base": "v1", "head": "HEAD", "args": ["-x"]}


def test_continuous_outside_git_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "continuous", "HEAD~1")
    assert code == 2
    assert_one_line_error(err, "not in a git repository")


@needs_git
@pytest.mark.slow
def test_continuous_gates_the_working_tree_against_a_base_with_no_stored_baselines(tmp_path):
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider"\n')
    (project / "tests" / "test_mm.py").write_text(
        "import pytest, torch\nfrom size import N\n\n@pytest.mark.neuron_profile\n"
        "def test_mm():\n    torch.ones(N, 256) @ torch.ones(256, 256)\n")
    (project / "tests" / "size.py").write_text("N = 128\n")
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "base")

    def continuous(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest_neuronprof", "continuous", *args],
                              cwd=project, capture_output=True, text=True, timeout=300)

    (project / "tests" / "size.py").write_text("N = 1024\n")  # the working tree: 8x the rows
    slower = continuous("HEAD", "--", "-q")
    assert slower.returncode == 1, slower.stdout + slower.stderr
    assert "device time regression on simulated:trn2" in slower.stdout
    assert "recording HEAD" in slower.stderr and "gating the working tree against HEAD" in slower.stderr
    # the gated run names the base it re-simulated and never suggests --neuron-baseline (issue 26)
    assert re.search(r"Gated against the tests re-simulated at HEAD \([0-9a-f]{12}: base\)", slower.stdout)
    assert "--neuron-baseline" not in slower.stdout and "nothing to re-record" in slower.stdout
    assert git(project, "status", "--porcelain") == "M tests/size.py"  # the tree as it was
    assert git(project, "worktree", "list").count("\n") == 0  # the temporary worktrees are gone
    same = continuous("HEAD", "HEAD", "--", "-q")  # HEAD against itself: deterministic, equal
    assert same.returncode == 0, same.stdout + same.stderr
    assert "1 passed" in same.stdout


# --- the workflow files ---------------------------------------------------------------------------

def test_the_workflows_gate_pull_requests_against_the_base_and_post_the_comment_safely():
    yaml = pytest.importorskip("yaml")
    gate = yaml.safe_load((ROOT / ".github/workflows/neuronprof.yml").read_text())
    post = yaml.safe_load((ROOT / ".github/workflows/neuronprof-comment.yml").read_text())
    steps = gate["jobs"]["examples"]["steps"]
    assert steps[0]["uses"].startswith("actions/checkout@") and steps[0]["with"]["fetch-depth"] == 0
    on_pr = [s for s in steps if "== 'pull_request'" in str(s.get("if", ""))]
    run_pr = next(s for s in on_pr if "run" in s and "pytest" in s["run"])
    assert "github.event_name == 'pull_request'" in run_pr["if"]
    assert run_pr["env"]["BASE_REF"] == "${{ github.base_ref }}"
    assert '--neuron-baseline-ref "origin/$BASE_REF"' in run_pr["run"]
    assert "--neuron-comment neuron-comment/comment.md" in run_pr["run"]
    assert "${{" not in run_pr["run"]  # nothing interpolated into the script's text
    push = next(s for s in steps if s.get("if") == "github.event_name != 'pull_request'")
    assert "--neuron-baseline-ref" not in push["run"] and "--neuron-report" in push["run"]
    # no pull-request number in the artifact: the posting workflow finds it from the event
    # (tests/test_workflows.py)
    assert not any("pr-number" in s.get("run", "") for s in steps)
    upload = next(s for s in on_pr if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "neuron-comment" and upload["with"]["path"] == "neuron-comment/"
    assert gate["permissions"] == {"contents": "read"}
    # the posting workflow: after this one, from the default branch, with the write token, and
    # running nothing of the pull request's
    trigger = post[True]["workflow_run"]  # YAML reads `on:` as True
    assert trigger["workflows"] == [gate["name"]] and trigger["types"] == ["completed"]
    assert post["permissions"] == {} and post["jobs"]["comment"]["permissions"]["pull-requests"] == "write"
    job = post["jobs"]["comment"]
    assert job["if"] == "github.event.workflow_run.event == 'pull_request'"
    uses = [s.get("uses", "") for s in job["steps"]]
    assert not any(u.startswith("actions/checkout") for u in uses)
    download = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/download-artifact@"))
    assert download["with"]["name"] == "neuron-comment" and download["with"]["path"] == "neuron-comment"
    script = job["steps"][-1]["run"]
    assert f"marker='{MARKER}'" in script and "body=neuron-comment/comment.md" in script


# --- end to end: --neuron-baseline-ref in a pytest run ------------------------------------------

@needs_git
@pytest.mark.slow
def test_a_rerecorded_regression_fails_against_the_base_until_the_change_gives_a_reason(pytester):
    pytester.makefile(".toml", pyproject='[tool.pytest.ini_options]\naddopts = "-p no:cacheprovider"\n')
    pytester.makepyfile(test_mm="""
        from pathlib import Path
        import pytest, torch

        @pytest.mark.neuron_profile
        def test_mm():
            n = int(Path(__file__).with_name("n.txt").read_text())
            torch.ones(n, 256) @ torch.ones(256, 256)
    """)
    (pytester.path / "n.txt").write_text("128")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    git(pytester.path, "init", "-q", "-b", "main")
    git(pytester.path, "add", "-A")
    git(pytester.path, "commit", "-q", "-m", "base")
    (pytester.path / "n.txt").write_text("1024")  # 8x the rows: slower
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)  # re-recorded, no reason

    failed = pytester.runpytest("--neuron-baseline-ref", "HEAD", "--neuron-comment", "comment.md")
    failed.assert_outcomes(failed=1)
    text = failed.stdout.str()
    assert "accepted in this change without a reason" in text and "--neuron-reason" in text
    failed.stdout.fnmatch_lines(["*accepted in this change ---*",
                                 "test_mm.py::test_mm: accepted in this change, reason: no reason given"])
    body = (pytester.path / "comment.md").read_text()
    assert body.splitlines()[1].startswith("### Neuron device time: **1 regression**")
    assert "### Accepted in this change" in body and "no reason given" in body

    # the whole suite re-recorded with a reason: numbers unchanged since the last recording, so
    # no entry takes it; named as the failure's hint names it, the test's entry does
    pytester.runpytest("--neuron-baseline", "--neuron-reason", "bigger batch, see #7").assert_outcomes(passed=1)
    assert "reason" not in (pytester.path / "baselines" / "test_mm.json").read_text()
    pytester.runpytest("--neuron-baseline", "--neuron-reason", "bigger batch, see #7",
                       "test_mm.py::test_mm").assert_outcomes(passed=1)
    passed = pytester.runpytest("--neuron-baseline-ref", "HEAD", "--neuron-report", "report.json")
    passed.assert_outcomes(passed=1)
    passed.stdout.fnmatch_lines(["test_mm.py::test_mm: accepted in this change, reason: bigger batch, see #7",
                                 "(total) *+*%*"])
    test = json.loads((pytester.path / "report.json").read_text())["tests"]["test_mm.py::test_mm"]
    verdict = test["verdict"]
    assert verdict["status"] == "pass" and verdict["accepted_reason"] == "bigger batch, see #7"
    # base -> the pull request's entry: the base's total, and this run's (what it recorded)
    total = next(f for f in verdict["accepted"] if f["op"] == "(total)")
    assert total["baseline"] == test["baseline"]["total_device_time_us"]
    assert total["current"] == test["current"]["total_device_time_us"] > 1.2 * total["baseline"]
    mm = next(f for f in verdict["accepted"] if f["op"] == "aten::mm")
    assert mm["current"] > 1.5 * mm["baseline"]  # 8x the rows of the matmul
