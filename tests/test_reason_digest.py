"""A reason accepts the numbers it was given for, no others (issue 26, item 1): end to end in a
git repository with a base branch and a change branch, gated with --neuron-baseline-ref; and
the recording rule on its own (gate/accepted.py's ``with_reason``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_neuronprof.gate.accepted import STALE, STALE_REASON, fix_sentence, with_reason
from pytest_neuronprof.gate.compare import GatePolicy, Status
from pytest_neuronprof.gate.judge import judge
from pytest_neuronprof.gate.summary import numbers_digest

from test_baseline_ref import entry, git

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
REASON = "eager attention, see #42"

TESTS = """
    import pytest, torch

    def size(name):
        return int(open(name).read())

    @pytest.mark.neuron_profile
    def test_a():
        n = size("a.txt")
        torch.randn(n, n) @ torch.randn(n, n)

    @pytest.mark.neuron_profile
    def test_b():
        n = size("b.txt")
        torch.randn(n, n) @ torch.randn(n, n)
"""


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=root,
                          capture_output=True, text=True)


def _entries(root: Path) -> dict[str, dict]:
    tests = json.loads((root / "baselines" / "test_x.json").read_text())["tests"]
    return {node.split("::")[1]: variants["simulated:trn2"] for node, variants in tests.items()}


def _sizes(root: Path, a: int, b: int) -> None:
    (root / "a.txt").write_text(str(a))
    (root / "b.txt").write_text(str(b))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "test_x.py").write_text(textwrap.dedent(TESTS).lstrip())
    _sizes(root, 256, 256)
    git(root, "init", "-q", "-b", "main")
    assert _pytest(root, "--neuron-baseline").returncode == 0
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "checkout", "-q", "-b", "feature")
    return root


@needs_git
def test_a_reason_covers_exactly_the_numbers_it_was_given_for(project):
    # test_a regresses and is accepted with a reason: written into test_a's entry only
    _sizes(project, 512, 256)
    assert _pytest(project, "--neuron-baseline", "--neuron-reason", REASON).returncode == 0
    entries = _entries(project)
    assert entries["test_a"]["reason"] == REASON and entries["test_a"]["reason_for"]
    assert "reason" not in entries["test_b"]  # its numbers did not change
    git(project, "commit", "-qam", "accept a")
    gated = _pytest(project, "--neuron-baseline-ref", "main")
    assert gated.returncode == 0, gated.stdout

    # test_b regresses and is re-recorded plainly: the reason of test_a does not cover it
    _sizes(project, 512, 512)
    assert _pytest(project, "--neuron-baseline").returncode == 0
    assert "reason" not in _entries(project)["test_b"]
    gated = _pytest(project, "--neuron-baseline-ref", "main")
    assert gated.returncode == 1
    assert "test_x.py::test_b" in gated.stdout and "accepted in this change without a reason" in gated.stdout

    # test_a regresses again and is re-recorded plainly: its old reason covers nothing
    _sizes(project, 1024, 256)
    assert _pytest(project, "--neuron-baseline").returncode == 0
    entries = _entries(project)
    assert entries["test_a"]["reason"] == REASON  # kept (nothing is lost), for the old numbers
    gated = _pytest(project, "--neuron-baseline-ref", "main", "-k", "test_a")
    assert gated.returncode == 1, gated.stdout
    assert gated.stdout.count("its reason was given for other numbers") >= 1  # per row, short
    assert "The reason on this entry was given for other numbers: give one for these" in gated.stdout

    # a new reason for the new numbers accepts them; re-recording unchanged numbers with another
    # reason writes nothing into the entry
    assert _pytest(project, "--neuron-baseline", "-k", "test_a", "--neuron-reason", "bigger again").returncode == 0
    assert _entries(project)["test_a"]["reason"] == "bigger again"
    assert _pytest(project, "--neuron-baseline-ref", "main", "-k", "test_a").returncode == 0
    before = (project / "baselines" / "test_x.json").read_bytes()
    assert _pytest(project, "--neuron-baseline", "-k", "test_a", "--neuron-reason", "other").returncode == 0
    assert (project / "baselines" / "test_x.json").read_bytes() == before


def test_with_reason_writes_where_numbers_moved_or_the_reason_is_stale():
    old, slower = entry(100.0), entry(150.0)
    fresh = with_reason(slower, old, REASON)
    assert (fresh.reason, fresh.reason_for) == (REASON, numbers_digest(slower))
    assert fresh.reason_given_for_these_numbers is True
    # unchanged numbers and a matching reason: untouched, whatever --neuron-reason says
    assert with_reason(slower, fresh, "another") == fresh
    # unchanged numbers and no reason: no reason is needed, none is written
    assert with_reason(old, old, REASON).reason == ""
    # re-recorded with other numbers and no new reason: kept, bound to the old numbers
    stale = with_reason(entry(200.0), fresh, "")
    assert stale.reason == REASON and stale.reason_given_for_these_numbers is False
    # a schema-5 reason (no digest) re-recorded with other numbers is bound to the old ones
    legacy = replace(old, reason="old reason")
    assert with_reason(slower, legacy, "").reason_given_for_these_numbers is False
    # a stale reason on unchanged numbers is replaced by --neuron-reason
    assert with_reason(entry(200.0), stale, "new").reason_given_for_these_numbers is True


def test_a_stale_reason_accepts_nothing_and_says_so():
    base, own = entry(100.0), with_reason(entry(200.0), with_reason(entry(150.0), entry(100.0), REASON), "")
    verdict = judge(entry(200.0), base, lambda marker: GatePolicy(), own=own)
    assert verdict.status == Status.REGRESSION
    assert verdict.accepted_reason == ""
    assert all(f.reason.endswith(STALE) for f in verdict.regressions)
    assert fix_sentence(verdict).startswith(STALE_REASON[:1].upper() + STALE_REASON[1:])
    valid = with_reason(entry(200.0), entry(100.0), REASON)
    verdict = judge(entry(200.0), base, lambda marker: GatePolicy(), own=valid)
    assert verdict.status == Status.PASS and verdict.accepted_reason == REASON
