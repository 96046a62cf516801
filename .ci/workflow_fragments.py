"""The GitHub Actions workflows the docs show, as files a workflow linter can read.

    python .ci/workflow_fragments.py OUTDIR

Finds every ```yaml (or ```yml) block of README.md and docs/**/*.md, keeps those that are a
GitHub Actions workflow or a part of one (a `jobs:` mapping, jobs, or a list of steps), wraps
each part into a minimal workflow, and writes one file per block into OUTDIR, named after the
page and the block's first line (`docs-ci-reviewing.md-L9.yml`). Prints the files written on
stdout, and each yaml block it skipped (another CI's file, such as GitLab's) with the reason on
stderr, so nothing drops out of the lint unseen.

A part is wrapped in the context the docs put it in: the "Gate every pull request" workflow of
docs/ci/github-actions.md (`on: push / pull_request`, `permissions: contents: read`), under
`jobs:`, and steps in a job on `ubuntu-latest`. The block's own lines are kept as they are, so
a finding's line in the wrapped file is the block's line plus the header's (its first line
names the page and the line). .ci/run lints these files with zizmor and check-jsonschema;
tests/test_workflows.py imports this module for the same blocks.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```ya?ml[ \t]*$")
HEADER = """\
name: docs fragment
on:
  push:
  pull_request:
permissions:
  contents: read
jobs:
"""


@dataclass(frozen=True)
class Fragment:
    """One yaml block of a page: where it is, its text, and what kind of GitHub Actions YAML
    it is ("workflow", "jobs", "job", "steps"), or None with ``skip`` saying why."""

    page: str  # relative to the repository's root
    line: int  # the block's first line (after the fence), 1-based
    text: str
    kind: str | None
    skip: str = ""

    @property
    def filename(self) -> str:
        return f"{self.page.replace('/', '-')}-L{self.line}.yml"

    def wrapped(self) -> str:
        """The block as a whole workflow (the block itself when it is one)."""
        origin = f"# {self.page} line {self.line}, wrapped by .ci/workflow_fragments.py ({self.kind})\n"
        body = textwrap.dedent(self.text)
        if self.kind == "workflow":
            return origin + body
        if self.kind == "jobs":
            return origin + HEADER.removesuffix("jobs:\n") + body
        if self.kind == "job":
            return origin + HEADER + textwrap.indent(body, "  ")
        assert self.kind == "steps", self.kind
        return origin + HEADER + "  docs:\n    runs-on: ubuntu-latest\n    steps:\n" + textwrap.indent(body, "      ")


def _is_job(value: Any) -> bool:
    return isinstance(value, dict) and bool({"runs-on", "steps", "uses"} & set(value))


def _is_step(value: Any) -> bool:
    return isinstance(value, dict) and bool({"run", "uses"} & set(value))


def classify(text: str) -> tuple[str | None, str]:
    """(kind, "") for GitHub Actions YAML, (None, why) for anything else."""
    try:
        data = yaml.safe_load(textwrap.dedent(text))
    except yaml.YAMLError as error:
        return None, f"not YAML: {str(error).splitlines()[0]}"
    if isinstance(data, list):
        if data and all(_is_step(step) for step in data):
            return "steps", ""
        return None, "a list, but not of steps (`run:` or `uses:`)"
    if not isinstance(data, dict) or not data:
        return None, "not a mapping"
    # YAML 1.1 reads a bare `on:` key as True
    if "jobs" in data and ("on" in data or True in data):
        return "workflow", ""
    if set(data) == {"jobs"} and isinstance(data["jobs"], dict) and all(map(_is_job, data["jobs"].values())):
        return "jobs", ""
    if all(_is_job(job) for job in data.values()):
        return "job", ""
    return None, "no GitHub Actions jobs (`runs-on:` or `steps:`), e.g. another CI's file"


def pages(root: Path = ROOT) -> list[Path]:
    found = [root / "README.md"] if (root / "README.md").is_file() else []
    return found + sorted((root / "docs").rglob("*.md"))


def fragments(root: Path = ROOT) -> list[Fragment]:
    """Every yaml block of the pages, GitHub Actions or not, in page and line order."""
    out: list[Fragment] = []
    for page in pages(root):
        lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
        i = 0
        while i < len(lines):
            if FENCE.match(lines[i].strip()):
                start = i + 1
                end = next((j for j in range(start, len(lines)) if lines[j].strip().startswith("```")), len(lines))
                text = "".join(lines[start:end])
                kind, why = classify(text)
                out.append(Fragment(page.relative_to(root).as_posix(), start + 1, text, kind, why))
                i = end + 1
            else:
                i += 1
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python .ci/workflow_fragments.py OUTDIR", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    outdir.mkdir(parents=True, exist_ok=True)
    for fragment in fragments():
        if fragment.kind is None:
            print(f"skipped {fragment.page} line {fragment.line}: {fragment.skip}", file=sys.stderr)
            continue
        path = outdir / fragment.filename
        path.write_text(fragment.wrapped(), encoding="utf-8")
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
