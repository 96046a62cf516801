"""The GitHub Actions workflows, checked without GitHub (issue 25, items 2 and 7): the comment
workflow posts only to the pull request it looked up from the event, at the commit the run gated
(its scripts run here with a fake `gh`); no `${{ }}` expression is pasted into a `run:` script,
in the workflows the project ships or in those its docs show; the gate fails unless pytest wrote
the plugin's own report of the run. zizmor and check-jsonschema lint the same files in .ci/run."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML reads the workflow files (it comes with the docs extra's mkdocs)")

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"
MARKER = "<!-- pytest-neuronprof -->"
SHA = "a" * 40
NEWER_SHA = "b" * 40
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

needs_shell = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("jq") is None,
                                 reason="runs the workflows' scripts: needs bash and jq (both on GitHub's runners)")


def fragments_module() -> ModuleType:
    """.ci/workflow_fragments.py, which .ci/run uses to lint the docs' workflows."""
    spec = importlib.util.spec_from_file_location("workflow_fragments", ROOT / ".ci" / "workflow_fragments.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("workflow_fragments", module)
    spec.loader.exec_module(module)
    return module


def load(path: Path) -> dict[Any, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), path
    return data


def comment_job() -> dict[str, Any]:
    (job,) = load(WORKFLOWS / "neuronprof-comment.yml")["jobs"].values()
    return job


def lookup_step(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The step that finds the pull request: the one given the run's head commit."""
    found = [s for s in steps if s.get("env", {}).get("HEAD_SHA") == "${{ github.event.workflow_run.head_sha }}"]
    assert len(found) == 1, "no step of neuronprof-comment.yml looks up the pull request by the run's head commit"
    return found[0]


def all_runs(workflow: dict[Any, Any]) -> list[tuple[str, str]]:
    """(where, script) of every `run:` of every job's steps."""
    out = []
    for job_id, job in (workflow.get("jobs") or {}).items():
        for number, step in enumerate(job.get("steps") or [], 1):
            if "run" in step:
                out.append((f"job {job_id}, step {number} ({step.get('name', 'unnamed')})", str(step["run"])))
    return out


# --- running a step's script here ---------------------------------------------------------------

FAKE_GH = """#!{python}
# `gh` for the tests: logs each call (and a body file's text), answers from the environment.
import json, os, sys
args = sys.argv[1:]
call = {{"args": args}}
for arg in args:
    if arg.startswith("body=@"):
        call["body"] = open(arg[len("body=@"):], encoding="utf-8").read()
with open(os.environ["FAKE_GH_LOG"], "a", encoding="utf-8") as log:
    log.write(json.dumps(call) + "\\n")
url = next(a for a in args if a.startswith("repos/"))
if url.endswith("/pulls"):
    sys.stdout.write(open(os.environ["FAKE_PULLS"], encoding="utf-8").read())
elif "--jq" in args:  # the bot's comments with the marker, the filter applied
    sys.stdout.write(os.environ.get("FAKE_COMMENT_ID", ""))
else:
    sys.stdout.write("{{}}")
"""


class Runner:
    """Runs workflow steps' scripts the way Actions does (`bash -eo pipefail`), in a workspace,
    with their `env:` expressions evaluated from ``context`` (an expression it does not know
    fails the test: a step that starts reading something new must be looked at) and a fake
    `gh` on PATH."""

    def __init__(self, tmp_path: Path, context: dict[str, str]) -> None:
        self.workspace = tmp_path / "workspace"
        self.workspace.mkdir()
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        gh = self.bin / "gh"
        gh.write_text(FAKE_GH.format(python=sys.executable))
        gh.chmod(0o755)
        self.log = tmp_path / "gh.log"
        self.output = tmp_path / "github_output"
        self.output.touch()
        self.pulls = tmp_path / "pulls.json"
        self.pulls.write_text("[]")
        self.context = dict(context)
        self.tmp_path = tmp_path

    def expand(self, value: Any) -> str:
        return EXPRESSION.sub(lambda m: self.context[m.group(1)], str(value))

    def run(self, step: dict[str, Any], **extra: str) -> subprocess.CompletedProcess[str]:
        script = self.tmp_path / "step.sh"
        script.write_text(step["run"])
        env = {"PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(self.tmp_path),
               "GITHUB_OUTPUT": str(self.output), "FAKE_GH_LOG": str(self.log), "FAKE_PULLS": str(self.pulls)}
        env.update({key: self.expand(value) for key, value in (step.get("env") or {}).items()})
        env.update(extra)
        return subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)], cwd=self.workspace,
                              env=env, capture_output=True, text=True, timeout=60)

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def outputs(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.output.read_text().splitlines() if "=" in line)


def pull(number: int, repo: str, branch: str, sha: str) -> dict[str, Any]:
    return {"number": number, "head": {"ref": branch, "sha": sha, "repo": {"full_name": repo}}}


# A fork whose branch is called like the base's, and whose owner has a second fork (other name)
# with a pull request from a branch of the same name: only the run's repository counts.
EVENT = {
    "github.token": "ghs_fake",
    "github.repository": "owner/project",
    "github.event.workflow_run.head_repository.full_name": "mallory/project",
    "github.event.workflow_run.head_repository.owner.login": "mallory",
    "github.event.workflow_run.head_branch": "main",
    "github.event.workflow_run.head_sha": SHA,
    "github.event.workflow_run.id": "777",
}


# --- the comment workflow: where it posts ------------------------------------------------------

def test_the_comment_workflow_takes_the_pull_request_from_the_event_never_from_the_artifact():
    job = comment_job()
    steps = job["steps"]
    # of the artifact (the fork's), only the body is read
    read = {m for _, script in all_runs({"jobs": {"comment": job}}) for m in re.findall(r"neuron-comment/([\w.-]+)", script)}
    assert read == {"comment.md"}, f"a step reads {sorted(read - {'comment.md'})} from the artifact"
    lookup = lookup_step(steps)
    assert lookup.get("id"), "the lookup's result is read as a step output"
    env = lookup["env"]
    assert env["HEAD_REPO"] == "${{ github.event.workflow_run.head_repository.full_name }}"
    assert env["HEAD_OWNER"] == "${{ github.event.workflow_run.head_repository.owner.login }}"
    assert env["HEAD_BRANCH"] == "${{ github.event.workflow_run.head_branch }}"
    # the lookup runs before the artifact exists here, and reads nothing of it
    download = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("actions/download-artifact@"))
    assert steps.index(lookup) < download
    assert "neuron-comment" not in json.dumps(lookup)
    # the head-commit check: the pull request's head must be the run's commit
    assert '$HEAD_SHA' in lookup["run"] and ".head.sha" in lookup["run"]
    # every comment URL is the looked-up number's
    post = steps[-1]
    targets = re.findall(r"issues/\$\{?(\w+)\}?/comments", post["run"])
    assert targets, "the posting step writes to no issue"
    for variable in targets:
        assert post["env"][variable] == f"${{{{ steps.{lookup['id']}.outputs.number }}}}"
    for step in steps[download:]:
        assert step["if"] == f"steps.{lookup['id']}.outputs.number != ''"  # nothing found: nothing posted


@needs_shell
def test_the_lookup_finds_the_forks_own_pull_request_at_the_runs_commit(tmp_path):
    runner = Runner(tmp_path, EVENT)
    runner.pulls.write_text(json.dumps([
        pull(7, "mallory/project-2", "main", SHA),  # the same owner's other fork: not this run
        pull(42, "mallory/project", "main", SHA),
        pull(43, "eve/project", "main", SHA),  # what the real API's `head` filter leaves out anyway
    ]))
    result = runner.run(lookup_step(comment_job()["steps"]))
    assert result.returncode == 0, result.stderr
    assert runner.outputs() == {"number": "42"}
    (call,) = runner.calls()
    assert call["args"][:4] == ["api", "--method", "GET", "repos/owner/project/pulls"]
    assert "head=mallory:main" in call["args"] and "state=open" in call["args"]


@needs_shell
@pytest.mark.parametrize(("pulls", "notice"), [
    ([pull(42, "mallory/project", "main", NEWER_SHA)], "a newer push superseded this run"),
    ([], "no open pull request"),
    ([pull(42, "mallory/project", "main", SHA), pull(44, "mallory/project", "main", SHA)],
     "2 open pull requests have head"),
])
def test_the_lookup_posts_nothing_and_passes_when_no_single_pull_request_is_at_the_runs_commit(tmp_path, pulls,
                                                                                                notice):
    runner = Runner(tmp_path, EVENT)
    runner.pulls.write_text(json.dumps(pulls))
    result = runner.run(lookup_step(comment_job()["steps"]))
    assert result.returncode == 0, result.stderr  # skipped, not failed
    assert runner.outputs() == {}
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("::")]
    assert line.startswith("::notice::") and notice in line and "nothing posted" in line


@needs_shell
def test_a_hostile_branch_name_is_data_to_the_lookup(tmp_path):
    branch = 'main$(touch pwned)";touch pwned2;"`touch pwned3`'
    runner = Runner(tmp_path, {**EVENT, "github.event.workflow_run.head_branch": branch})
    runner.pulls.write_text(json.dumps([pull(42, "mallory/project", branch, SHA)]))
    result = runner.run(lookup_step(comment_job()["steps"]))
    assert result.returncode == 0, result.stderr
    assert runner.outputs() == {"number": "42"}
    assert f"head=mallory:{branch}" in runner.calls()[0]["args"]
    assert not list(runner.workspace.glob("pwned*")) and not list(tmp_path.glob("pwned*"))


@needs_shell
@pytest.mark.parametrize("existing", ["", "9001"])
def test_the_comment_goes_to_the_looked_up_pull_request_whatever_the_artifact_says(tmp_path, existing):
    steps = comment_job()["steps"]
    lookup = lookup_step(steps)
    runner = Runner(tmp_path, {**EVENT, f"steps.{lookup['id']}.outputs.number": "42"})
    artifact = runner.workspace / "neuron-comment"
    artifact.mkdir()
    body = f"{MARKER}\n### Neuron device time: **1 regression**\n$(touch pwned) `x` ${{{{ github.token }}}}\n"
    (artifact / "comment.md").write_text(body)
    (artifact / "pr-number").write_text("1\n")  # the fork's choice: ignored
    result = runner.run(steps[-1], FAKE_COMMENT_ID=existing)
    assert result.returncode == 0, result.stderr
    listed, written = runner.calls()
    assert listed["args"][:3] == ["api", "--paginate", "repos/owner/project/issues/42/comments"]
    if existing:
        assert written["args"][:4] == ["api", "--method", "PATCH", "repos/owner/project/issues/comments/9001"]
    else:
        assert written["args"][:4] == ["api", "--method", "POST", "repos/owner/project/issues/42/comments"]
    assert written["body"] == body  # the file, as it is: data, never run
    assert not any("/issues/1/" in " ".join(call["args"]) for call in runner.calls())
    assert not list(runner.workspace.glob("pwned*"))


@needs_shell
def test_a_body_without_the_marker_is_not_posted(tmp_path):
    steps = comment_job()["steps"]
    runner = Runner(tmp_path, {**EVENT, f"steps.{lookup_step(steps)['id']}.outputs.number": "42"})
    (runner.workspace / "neuron-comment").mkdir()
    (runner.workspace / "neuron-comment" / "comment.md").write_text("this PR was approved by @security-team\n")
    result = runner.run(steps[-1])
    assert result.returncode == 1 and "does not start with" in result.stdout
    assert runner.calls() == []


# --- no expression pasted into a script --------------------------------------------------------

def workflow_files() -> list[tuple[str, dict[Any, Any]]]:
    """(name, parsed) of every shipped workflow and every workflow the docs show (wrapped)."""
    shipped = [(f".github/workflows/{p.name}", load(p)) for p in sorted(WORKFLOWS.glob("*.y*ml"))]
    shown = [(f"{f.page} line {f.line}", yaml.safe_load(f.wrapped())) for f in fragments_module().fragments()
             if f.kind is not None]
    return shipped + shown


def test_no_run_script_of_a_shipped_or_documented_workflow_has_an_expression_in_its_text():
    files = workflow_files()
    assert len([name for name, _ in files if name.startswith("docs/")]) >= 4  # the docs' workflows are read
    pasted = [f"{name}: {where}: " + ", ".join(f"${{{{ {e} }}}}" for e in EXPRESSION.findall(script))
              for name, workflow in files for where, script in all_runs(workflow) if "${{" in script]
    assert pasted == [], "pass these through `env:` instead:\n" + "\n".join(pasted)


def test_the_docs_workflow_blocks_are_found_and_wrapped_into_whole_workflows():
    found = fragments_module().fragments()
    kinds = {(f.page, f.kind) for f in found}
    assert {("docs/ci/github-actions.md", "workflow"), ("docs/ci/reviewing.md", "job"),
            ("docs/ci/sharded.md", "jobs"), ("docs/ci/sharded.md", "workflow")} <= kinds
    gitlab = [f for f in found if f.page == "docs/ci/pull-requests.md"]
    assert [f.kind for f in gitlab] == [None] and "another CI" in gitlab[0].skip
    for fragment in found:
        if fragment.kind is None:
            continue
        workflow = yaml.safe_load(fragment.wrapped())
        assert workflow["jobs"] and (True in workflow or "on" in workflow), fragment.filename
        assert all(job.get("runs-on") and job.get("steps") for job in workflow["jobs"].values())
        # the block's own lines, unchanged, in the file the linters read
        assert all(line.strip() in fragment.wrapped() for line in fragment.text.splitlines())


def test_a_steps_block_is_wrapped_into_a_job(tmp_path):
    module = fragments_module()
    text = "- uses: actions/checkout@v4\n- run: echo hi\n"
    assert module.classify(text) == ("steps", "")
    workflow = yaml.safe_load(module.Fragment("docs/x.md", 3, text, "steps").wrapped())
    assert workflow["jobs"]["docs"]["steps"] == [{"uses": "actions/checkout@v4"}, {"run": "echo hi"}]
    assert workflow["permissions"] == {"contents": "read"}
    assert module.classify("neuronprof:\n  script:\n    - pytest\n")[0] is None
    assert module.main([str(tmp_path / "out")]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        f.filename for f in module.fragments() if f.kind is not None)


# --- the gate fails when the plugin did not run ------------------------------------------------

def gate_steps() -> list[dict[str, Any]]:
    return load(WORKFLOWS / "neuronprof.yml")["jobs"]["examples"]["steps"]


def pytest_steps(steps: list[dict[str, Any]]) -> list[int]:
    found = [i for i, s in enumerate(steps) if "pytest" in s.get("run", "") and "--neuron-report neuron-report.json" in s["run"]]
    assert found
    return found


@needs_shell
def test_the_gate_fails_unless_the_plugin_wrote_its_own_report_of_this_run(tmp_path, monkeypatch):
    """Issue 34, item 3: not a file size, `neuronprof check-report` (a missing file, an empty one,
    another tool's, a report of another run all fail the job; the plugin's own passes)."""
    from pytest_neuronprof.outputs.json_report import json_report

    steps = gate_steps()
    after = steps[max(pytest_steps(steps)) + 1:]
    checks = [s for s in after if "neuronprof check-report neuron-report.json" in s.get("run", "")]
    assert len(checks) == 2, "a step after pytest checks the report, on a push and on a pull request"
    assert all("!cancelled()" in check["if"] for check in checks)  # also after a failed pytest
    pull_request = next(check for check in checks if "== 'pull_request'" in check["if"])
    assert '--base "origin/$BASE_REF"' in pull_request["run"]
    push = next(check for check in checks if check is not pull_request)
    runner = Runner(tmp_path, {})
    on_path = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               "NEURONPROF_RUN_ID": "run-2"}
    assert runner.run(push, **on_path).returncode == 2  # no file
    report = runner.workspace / "neuron-report.json"
    for other in ("", '{"tests": {}}', '<?xml version="1.0"?><testsuites/>'):  # --junitxml's
        report.write_text(other)
        result = runner.run(push, **on_path)
        assert result.returncode == 2 and "is not the plugin's report of this run" in result.stderr
    monkeypatch.setenv("NEURONPROF_RUN_ID", "run-1")
    report.write_text(json_report([]))  # the plugin's own report, of another run
    result = runner.run(push, **on_path)
    assert result.returncode == 2 and "written in run 'run-1', this is run run-2" in result.stderr
    result = runner.run(push, **{**on_path, "NEURONPROF_RUN_ID": "run-1"})
    assert result.returncode == 0, result.stderr
    assert "report of this run (run-1): 0 profiled tests; 0 failed" in result.stdout


@needs_shell
def test_a_report_committed_by_the_pull_request_is_removed_before_pytest(tmp_path):
    steps = gate_steps()
    before = [s for s in steps[:min(pytest_steps(steps))] if "neuron-report.json" in s.get("run", "")]
    assert before, "a report in the checkout would pass the check after pytest"
    runner = Runner(tmp_path, {})
    (runner.workspace / "neuron-report.json").write_text('{"tests": {}}')
    (runner.workspace / "neuron-comment").mkdir()
    (runner.workspace / "neuron-comment" / "comment.md").write_text(MARKER + "\nold\n")
    for step in before:
        assert runner.run(step).returncode == 0
    assert not (runner.workspace / "neuron-report.json").exists()
    assert not (runner.workspace / "neuron-comment").exists()
