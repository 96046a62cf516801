"""Gating against a git ref (issue 19, item 1), the gate's side: baseline files read at a ref
without a checkout (gate/gitref.py), clear errors for unknown refs, shallow clones and refs
without baselines, and what a pull request's own re-recorded entries are (gate/accepted.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_neuronprof.errors import BaselineError, ConfigError
from pytest_neuronprof.gate.accepted import needs_reason
from pytest_neuronprof.gate.baseline import BaselineStore, render_baseline
from pytest_neuronprof.gate.compare import GatePolicy, Kind, Status, compare
from pytest_neuronprof.gate.gitref import RefBaselineStore, find_repository
from pytest_neuronprof.gate.judge import judge
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
NODE = "tests/test_mlp.py::test_step"


def entry(mm_us: float = 100.0, reason: str = "") -> ProfileSummary:
    mm = OpSummary(4, mm_us, "Tensor", 10**9, 10**6, round(mm_us / (mm_us + 20.0), 6), "mlp", bound="TensorE",
                   dtype="bfloat16")
    add = OpSummary(4, 20.0, "Vector", 0, 10**6, round(20.0 / (mm_us + 20.0), 6), "mlp", bound="VectorE",
                    dtype="bfloat16")
    return ProfileSummary("simulated", "trn2", "3", "2.13", mm_us + 20.0,
                          {"aten::mm": mm, "aten::add": add}, reason=reason)


def judged(base: ProfileSummary | None, own: ProfileSummary | None, run: ProfileSummary,
           policy: GatePolicy = GatePolicy()):
    """The verdict of ``run`` against ``base`` given the change's ``own`` entry (gate/judge.py)."""
    return judge(run, base, lambda marker: policy, own=own)


def at(directory: Path, ref: str, **kwargs) -> RefBaselineStore:
    """The store of ``directory`` at ``ref``, in the repository that holds it."""
    return RefBaselineStore(directory, ref, find_repository(Path(os.path.abspath(directory))), **kwargs)


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull}
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def write(repo: Path, summary: ProfileSummary) -> Path:
    path = repo / "baselines" / "tests" / "test_mlp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_baseline({NODE: {summary.variant: summary}}))
    return path


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository whose main has a baseline of 100 us, then a branch that re-records it."""
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")
    write(root, entry())
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "checkout", "-q", "-b", "feature")
    write(root, entry(150.0))
    git(root, "commit", "-q", "-am", "slower, re-recorded")
    return root


def test_the_store_reads_the_file_as_it_is_at_the_ref_without_touching_the_tree(repo):
    before = (repo / "baselines/tests/test_mlp.json").read_bytes()
    base = at(repo / "baselines", "main").load(NODE, "simulated:trn2")
    assert base == entry()
    assert BaselineStore(repo / "baselines").load(NODE, "simulated:trn2") == entry(150.0)
    assert (repo / "baselines/tests/test_mlp.json").read_bytes() == before
    assert git(repo, "status", "--porcelain") == ""
    # a commit hash and HEAD~1 name the same files; validate_all reads every file at the ref
    sha = git(repo, "rev-parse", "main")
    assert at(repo / "baselines", sha).load(NODE, "simulated:trn2") == entry()
    store = at(repo / "baselines", "HEAD~1")
    assert store.validate_all() == 1 and store.load(NODE, "simulated:trn2") == entry()


def test_a_relative_directory_from_a_subfolder_works(repo, monkeypatch):
    (repo / "tests").mkdir()
    monkeypatch.chdir(repo / "tests")
    assert at(Path("../baselines"), "main").load(NODE, "simulated:trn2") == entry()


def test_unknown_ref_says_how_to_fetch_it(repo):
    with pytest.raises(ConfigError, match=r"git does not know this ref; fetch it \(`git fetch --no-tags "
                                          r"origin nope:refs/remotes/origin/nope`\)"):
        at(repo / "baselines", "origin/nope")
    with pytest.raises(ConfigError, match="not a git revision"):
        at(repo / "baselines", "--output=/tmp/x")


def test_a_shallow_clone_says_it_is_shallow_and_how_to_fetch(repo, tmp_path):
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "feature", f"file://{repo}", str(shallow))
    with pytest.raises(ConfigError, match=r"shallow clone.*fetch-depth: 0"):
        at(shallow / "baselines", "origin/main")


def test_a_ref_without_baseline_files_is_an_error(repo):
    git(repo, "checkout", "-q", "--orphan", "empty")
    git(repo, "rm", "-rq", "--cached", ".")
    (repo / "README").write_text("x")
    git(repo, "add", "README")
    git(repo, "commit", "-q", "-m", "nothing")
    with pytest.raises(ConfigError, match="no baseline files under .*baselines at 'empty'"):
        at(repo / "baselines", "empty")


def test_outside_a_repository_is_an_error(tmp_path):
    (tmp_path / "b").mkdir()
    with pytest.raises(ConfigError, match="is not in a git repository"):
        at(tmp_path / "b", "main")


def test_a_link_at_the_ref_is_refused_and_a_broken_file_is_named_with_the_ref(repo):
    link = repo / "baselines" / "tests" / "test_link.json"
    link.symlink_to("/etc/passwd")
    broken = repo / "baselines" / "tests" / "test_broken.json"
    broken.write_text("{")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "bad files")
    store = at(repo / "baselines", "HEAD")
    with pytest.raises(BaselineError, match="HEAD:baselines/tests/test_link.json is a symbolic link"):
        store.load("tests/test_link.py::t", "simulated:trn2")
    with pytest.raises(BaselineError, match=r"at HEAD \([0-9a-f]{12}\): .*test_broken.json"):
        store.load("tests/test_broken.py::t", "simulated:trn2")


def test_a_file_above_the_size_limit_is_refused_unread(repo):
    store = at(repo / "baselines", "main", max_bytes=100)
    with pytest.raises(BaselineError, match="main:baselines/tests/test_mlp.json: .* above the limit"):
        store.load(NODE, "simulated:trn2")


def test_the_store_at_a_ref_is_read_only(repo):
    with pytest.raises(BaselineError, match="read only"):
        at(repo / "baselines", "main").save([(NODE, entry())])


# --- accepted in this change --------------------------------------------------------------------

def test_a_rerecorded_regression_without_a_reason_fails_and_says_how_to_give_one():
    base, own, run = entry(), entry(150.0), entry(150.0)
    verdict = judged(base, own, run)
    assert verdict.accepted_reason == ""
    assert [(f.kind, f.op) for f in verdict.accepted if f.current > f.baseline] == [
        (Kind.TOTAL, "(total)"), (Kind.SLOWER, "aten::mm")]
    assert verdict.status == Status.REGRESSION
    # each finding says so once; the command that gives a reason is the failure's last line
    assert all(f.reason.endswith("; accepted in this change without a reason") for f in verdict.regressions)
    assert needs_reason(verdict)
    assert verdict.accepted == compare(base, own, GatePolicy()).regressions


def test_a_reason_new_in_this_change_accepts_the_recorded_regression():
    base, own = entry(), entry(150.0, reason="bigger MLP for quality, see #12")
    verdict = judged(base, own, entry(150.0))
    assert verdict.status == Status.PASS and verdict.regressions == ()
    assert verdict.accepted_reason == "bigger MLP for quality, see #12"
    assert [f.op for f in verdict.accepted] == ["(total)", "aten::mm"]


def test_a_reason_already_at_the_base_does_not_cover_a_new_regression():
    base = entry(reason="old reason")
    own = entry(150.0, reason="old reason")
    verdict = judged(base, own, entry(150.0))
    assert verdict.status == Status.REGRESSION
    assert "the reason the base already had" in verdict.regressions[0].reason


def test_a_regression_the_change_did_not_record_fails_even_with_a_reason():
    """The pull request re-recorded the add, with a reason, but the run's mm is slower too."""
    base = entry()
    own = replace(entry(), reason="add got slower, fine", total_device_time_us=125.0,
                  ops={**entry().ops, "aten::add": replace(entry().ops["aten::add"], device_time_us=25.0)})
    run = replace(entry(150.0), ops={**entry(150.0).ops,
                                     "aten::add": replace(entry().ops["aten::add"], device_time_us=25.0)})
    verdict = judged(base, own, run)
    assert verdict.status == Status.REGRESSION
    assert "aten::mm" in [f.op for f in verdict.regressions]


def test_an_unchanged_entry_is_no_acceptance():
    base = entry()
    verdict = compare(base, entry(150.0), GatePolicy())
    assert judged(base, entry(), entry(150.0)) == verdict
    assert judged(base, None, entry(150.0)) == verdict


def test_an_improvement_recorded_in_this_change_is_listed_and_passes():
    base, own = entry(), entry(60.0)
    verdict = judged(base, own, entry(60.0))
    assert verdict.status == Status.IMPROVED
    assert [f.kind for f in verdict.accepted] == [Kind.FASTER, Kind.FASTER]


def test_a_reason_is_written_and_read_back_and_capped(tmp_path):
    own = entry(150.0, reason="bigger MLP, #12")
    text = render_baseline({NODE: {own.variant: own}})
    assert json.loads(text)["tests"][NODE]["simulated:trn2"]["reason"] == "bigger MLP, #12"
    path = tmp_path / "tests" / "test_mlp.json"
    path.parent.mkdir()
    path.write_text(text)
    assert BaselineStore(tmp_path).load(NODE, "simulated:trn2") == own
    path.write_text(text.replace("bigger MLP, #12", "x" * 501))
    with pytest.raises(BaselineError, match="reason has 501 characters; at most 500"):
        BaselineStore(tmp_path).load(NODE, "simulated:trn2")


# --- history ------------------------------------------------------------------------------------

def test_history_lists_each_change_oldest_first_with_commit_date_and_subject(repo):
    from pytest_neuronprof.gate.history import history

    write(repo, entry(150.0))  # unchanged numbers in a new commit: no new point
    (repo / "README").write_text("x")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "docs only")
    write(repo, entry(90.0))
    git(repo, "commit", "-q", "-am", "faster mm")
    points = history(find_repository(repo), repo / "baselines")
    assert [(p.subject, p.total_us) for p in points] == [
        ("base", 120.0), ("slower, re-recorded", 170.0), ("faster mm", 110.0)]
    assert all(len(p.commit) == 40 and len(p.date) == 10 for p in points)
    with_op = history(find_repository(repo), repo / "baselines", test="test_step", op="aten::mm")
    assert [p.op_us for p in with_op] == [100.0, 150.0, 90.0]
    assert history(find_repository(repo), repo / "baselines", test="no_such_test") == []
    # --since: the entry as the ref has it first (issue 26, item 5), so the first change has a delta
    since = history(find_repository(repo), repo / "baselines", since="main")
    assert [(p.subject, p.since) for p in since] == [("base", True), ("slower, re-recorded", False),
                                                     ("faster mm", False)]
    with pytest.raises(ConfigError, match="git does not know this ref"):
        history(find_repository(repo), repo / "baselines", since="nope")


def test_history_shows_a_reason_given_in_a_later_commit_on_the_numbers_it_accepts(repo, capsys):
    """The two-commit flow the gate's hint leads to (issue 36, item 7): a plain re-record
    (``slower, re-recorded``), then ``--neuron-reason`` in a commit of its own, which changes no
    number: the reason is shown on the re-record's point, with the commit that gave it."""
    from pytest_neuronprof.cli import main
    from pytest_neuronprof.gate.accepted import with_reason
    from pytest_neuronprof.gate.history import history

    recorded = entry(150.0)
    write(repo, with_reason(recorded, recorded, "bigger batches, #12", named=True))
    git(repo, "commit", "-q", "-am", "give the reason")
    reason_commit = git(repo, "rev-parse", "HEAD")
    points = history(find_repository(repo), repo / "baselines", since="main")
    assert [(p.subject, p.reason, p.reason_commit) for p in points] == [
        ("base", "", ""), ("slower, re-recorded", "bigger batches, #12", reason_commit)]
    # a reason given for other numbers (stale) is not put on these
    write(repo, replace(entry(150.0), reason="for the old numbers", reason_for="0" * 16))
    git(repo, "commit", "-q", "-am", "a stale reason")
    assert history(find_repository(repo), repo / "baselines")[-1].reason == "bigger batches, #12"
    assert main(["history", "--repo", str(repo), "--dir", str(repo / "baselines"), "--since", "main"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "slower, re-recorded" in line)
    assert f"bigger batches, #12 (given in {reason_commit[:10]})" in row
