"""Git runs where the project says, never where the data says (issue 25, items 1 and 5).

A pull request controls the files under ``baselines/`` and every report made from them. Here it
commits, under ``baselines/``, the layout of a repository of its own: ``HEAD``, a ``config``
(``core.bare = false``, ``core.worktree = .``, signatures shown by a committed ``x.sh``),
``objects/`` and ``refs/remotes/origin/main`` pointing at a signed commit whose tree holds a
re-recorded (regressed) baseline. Git discovering the repository from the baseline directory
would gate against that planted "origin/main" and run ``x.sh``. The gate must still fail the
regression against the real base, and nothing planted may run: in the gate run (with
``--neuron-html``, whose trend charts read the history), ``neuronprof history`` and
``neuronprof report``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_neuronprof.errors import BaselineError, ConfigError
from pytest_neuronprof.gate.gitref import RefBaselineStore, check_ref, find_repository

from test_baseline_ref import entry, git, write

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

PROJECT = {
    "pyproject.toml": """
        [tool.pytest.ini_options]
        addopts = "-p no:cacheprovider"
    """,
    "test_x.py": """
        import pytest, torch

        N = int(open("size.txt").read())

        @pytest.mark.neuron_profile
        def test_mm():
            torch.randn(N, N) @ torch.randn(N, N)
    """,
}


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=root, capture_output=True, text=True)


def _neuronprof(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_neuronprof", *args], cwd=root, capture_output=True,
                          text=True)


def _planted_repository(baselines: Path, regressed: bytes, marker: Path) -> None:
    """Write into ``baselines`` a repository's layout whose HEAD and origin/main are a commit
    with a ``gpgsig`` header holding ``regressed`` as ``test_x.json``, configured to show
    signatures with the committed ``x.sh`` (which touches ``marker``)."""
    work = baselines.parent / "planted-src"
    work.mkdir()
    git(work, "init", "-q", "-b", "main")
    (work / "test_x.json").write_bytes(regressed)
    git(work, "add", "-A")
    tree = git(work, "write-tree")
    signed = (f"tree {tree}\nauthor t <t@t> 1700000000 +0000\ncommitter t <t@t> 1700000000 +0000\n"
              "gpgsig -----BEGIN PGP SIGNATURE-----\n \n iQEzBAABCAAdFiEE\n -----END PGP SIGNATURE-----\n"
              "\nplanted\n")
    commit = subprocess.run(["git", "hash-object", "-t", "commit", "-w", "--stdin"], cwd=work, input=signed,
                            capture_output=True, text=True, check=True).stdout.strip()
    git(work, "update-ref", "refs/heads/main", commit)
    git(work, "update-ref", "refs/remotes/origin/main", commit)
    dot_git = work / ".git"
    for name in ("HEAD", "objects", "refs"):
        source = dot_git / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, baselines / name)
    (baselines / "config").write_text(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
        "[log]\n\tshowSignature = true\n[gpg]\n\tprogram = ./x.sh\n")
    script = baselines / "x.sh"
    script.write_text(f"#!/bin/sh\ntouch '{marker}'\nexit 1\n")
    script.chmod(0o755)
    shutil.rmtree(work)


def _based(tmp_path: Path, size: int) -> Path:
    """The project, its product ``size`` x ``size`` recorded on main as origin/main, checked out
    on a branch `feature`."""
    root = tmp_path / "project"
    root.mkdir()
    for name, text in PROJECT.items():
        (root / name).write_text(textwrap.dedent(text).lstrip())
    (root / "size.txt").write_text(str(size))
    git(root, "init", "-q", "-b", "main")
    recorded = _pytest(root, "--neuron-baseline")
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    git(root, "update-ref", "refs/remotes/origin/main", "HEAD")
    git(root, "checkout", "-q", "-b", "feature")
    return root


@pytest.fixture
def attacked(tmp_path: Path) -> tuple[Path, Path]:
    """(the pull request's clone, the file ``x.sh`` would create): main records a 64x64 product
    as origin/main; the pull request makes it 256x256, re-records, and plants the repository."""
    root = _based(tmp_path, 64)
    (root / "size.txt").write_text("256")
    rerecorded = _pytest(root, "--neuron-baseline")
    assert rerecorded.returncode == 0, rerecorded.stdout + rerecorded.stderr
    marker = tmp_path / "planted-code-ran"
    _planted_repository(root / "baselines", (root / "baselines" / "test_x.json").read_bytes(), marker)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "slower, re-recorded, and a repository under baselines/")
    assert "baselines/objects" in git(root, "ls-files")  # committed as plain files
    return root, marker


def test_planted_repository_neither_replaces_the_base_nor_runs(attacked, tmp_path):
    root, marker = attacked
    gated = _pytest(root, "--neuron-baseline-ref", "origin/main", "--neuron-html", "html",
                    "--neuron-report", "report.json")
    out = gated.stdout + gated.stderr
    assert gated.returncode == 1, out
    assert "device time regression" in out and "accepted in this change without a reason" in out
    assert (root / "html" / "index.html").is_file()
    history = _neuronprof(root, "history", "--dir", "baselines")
    assert history.returncode == 0, history.stderr
    assert "test_x.py::test_mm [simulated:trn2]" in history.stdout and "planted" not in history.stdout
    report = json.loads((root / "report.json").read_text())
    for test in report["tests"].values():  # a report naming that directory (it does already)
        test["baseline_dir"] = str(root / "baselines")
    (tmp_path / "r.json").write_text(json.dumps(report))
    page = _neuronprof(root, "report", str(tmp_path / "r.json"), "-o", str(tmp_path / "page"))
    assert page.returncode == 0, page.stderr
    # started from inside the planted directory, git refuses it as a bare repository
    inside = _neuronprof(root / "baselines", "history", "--dir", ".")
    assert inside.returncode == 2 and "not in a git repository" in inside.stderr
    assert not marker.exists(), "a program configured by the pull request's files ran"


def test_only_the_work_trees_own_git_directory_is_accepted(tmp_path, monkeypatch):
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    git(plain, "init", "-q", "-b", "main")
    assert find_repository(plain / "sub").work_tree == plain.resolve()
    # GIT_DIR pointing elsewhere would make git use another repository: ignored
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert find_repository(plain).git_dir == (plain / ".git").resolve()
    monkeypatch.delenv("GIT_DIR")
    # a linked worktree's .git file names its git directory: accepted
    write(plain, entry())
    git(plain, "add", "-A")
    git(plain, "commit", "-q", "-m", "base")
    git(plain, "worktree", "add", "-q", str(tmp_path / "linked"))
    linked = find_repository(tmp_path / "linked")
    assert linked.work_tree == (tmp_path / "linked").resolve() and "worktrees" in linked.git_dir.parts
    assert RefBaselineStore(tmp_path / "linked" / "baselines", "main", linked).validate_all() == 1
    # a bare repository as a folder of files is never discovered
    bare = tmp_path / "bare.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    with pytest.raises(ConfigError, match="not in a git repository"):
        find_repository(bare)


def test_a_baseline_directory_in_a_submodule_is_a_named_error(tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "-b", "main")
    (sub / "tests").mkdir()
    (sub / "tests" / "test_mlp.json").write_text("{}")
    git(sub, "add", "-A")
    git(sub, "commit", "-q", "-m", "baselines")
    top = tmp_path / "top"
    top.mkdir()
    git(top, "init", "-q", "-b", "main")
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "baselines")
    git(top, "commit", "-q", "-m", "baselines as a submodule")
    with pytest.raises(BaselineError, match="inside the submodule 'baselines'"):
        RefBaselineStore(top / "baselines", "main", find_repository(top))


@pytest.mark.parametrize("ref", ["origin/main\n::error file=t.py,line=1::Security scan failed",
                                 "main\x1b[31m", " --output=x", "--output=x", "origin/main --output=x",
                                 "main\u202e", "", "ma in"])
def test_a_ref_that_is_not_a_revision_is_refused_before_git_runs(ref):
    with pytest.raises(ConfigError, match="not a git revision") as raised:
        check_ref(ref)
    message = str(raised.value)
    assert "\n" not in message and "\x1b" not in message and "\u202e" not in message


@pytest.mark.parametrize("ref", ["HEAD~1", "origin/main^", "v1.2.3", "feature/x-y", "main@{1}", "a" * 40])
def test_revision_syntax_stays_allowed(ref):
    assert check_ref(ref) == ref


def test_a_ref_from_the_ini_file_is_refused_with_one_line(pytester):
    pytester.makeini("[pytest]\nneuron_baseline_ref = origin/main\n    ::error::x\n")
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret != 0
    text = result.stdout.str() + result.stderr.str()
    assert "not a git revision (it holds whitespace" in text
    assert not any(line.lstrip().startswith("::error") for line in text.splitlines())


# --- configuration is part of the change (item 7) ------------------------------------------------

@pytest.fixture
def configured(tmp_path: Path) -> Path:
    """main records a 256x256 product as origin/main with the default settings, then a branch
    `feature` (where the tests make the product 512x512: a regression, not re-recorded)."""
    return _based(tmp_path, 256)


def _configure(root: Path, *lines: str) -> None:
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n" + "".join(f"{line}\n" for line in lines))


@pytest.mark.parametrize("settings", [('addopts = "-p no:cacheprovider"', 'neuron_threshold = "1000%"'),
                                      ('addopts = "-p no:cacheprovider --neuron-threshold=1000%"',),
                                      ('addopts = "-p no:cacheprovider --neuron-hardware=h200"',),
                                      ('addopts = "-p no:cacheprovider"', "neuron_strict = false",
                                       'neuron_baseline_dir = "elsewhere"')])
def test_settings_a_change_makes_do_not_decide_its_own_verdict(configured, settings):
    (configured / "size.txt").write_text("512")
    _configure(configured, *settings)
    gated = _pytest(configured, "--neuron-baseline-ref", "origin/main")
    out = gated.stdout + gated.stderr
    assert gated.returncode == 1, out
    assert "device time regression on simulated:trn2" in out
    assert "verdict-deciding setting(s) otherwise than origin/main" in out
    assert "give a reason in the ini file (neuron_config_reason = why)" in out


def test_the_jobs_own_command_line_decides(configured):
    (configured / "size.txt").write_text("512")
    lenient = _pytest(configured, "--neuron-baseline-ref", "origin/main", "--neuron-threshold=1000%",
                      "--neuron-memory-threshold=1000%")
    assert lenient.returncode == 0, lenient.stdout
    assert "otherwise than" not in lenient.stdout


def test_a_settings_change_alone_fails_until_it_has_a_reason(configured):
    _configure(configured, 'addopts = "-p no:cacheprovider"', 'neuron_threshold = "50%"')
    gated = _pytest(configured, "--neuron-baseline-ref", "origin/main")
    assert gated.returncode == 1, gated.stdout
    assert "neuron_threshold (not set) -> '50%'" in gated.stdout
    _configure(configured, 'addopts = "-p no:cacheprovider"', 'neuron_threshold = "50%"',
               'neuron_config_reason = "noisy chip, see #9"')
    explained = _pytest(configured, "--neuron-baseline-ref", "origin/main")
    assert explained.returncode == 0, explained.stdout
    assert "accepted in this change, reason: noisy chip, see #9" in explained.stdout
    # the same settings at the base are no change at all
    git(configured, "commit", "-q", "-am", "settings")
    git(configured, "update-ref", "refs/remotes/origin/main", "HEAD")
    again = _pytest(configured, "--neuron-baseline-ref", "origin/main")
    assert again.returncode == 0 and "otherwise than" not in again.stdout
