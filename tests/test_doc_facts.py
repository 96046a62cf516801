"""Facts the documentation states about the code, checked against the code so they cannot drift
(issue 29): every baseline schema version and JSON report version a page names, and the README's
command that builds the documentation site.

A version a page names is either the current one (gate/baseline.py SCHEMA_VERSION,
outputs/json_report.py REPORT_VERSION: "This is schema version N", "`report_version` N") or
said to be a past one ("before schema version 4", "from schema version 2", "files of schema
versions 1 to 5"): a bare mention of an older number reads as the current format, and is what
went stale when the constants moved."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from pytest_neuronprof.gate.baseline import SCHEMA_VERSION
from pytest_neuronprof.outputs.json_report import REPORT_VERSION

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md"] + [p for p in (ROOT / "docs").rglob("*.md")])

_RANGE = r"(\d+)(?:\s*(?:-|to|and)\s*(\d+))?"
MENTIONS = {
    "baseline schema": (re.compile(rf"\bschema(?:[ _]versions?)?\s+{_RANGE}", re.I), SCHEMA_VERSION),
    "report version": (re.compile(rf"\breport[ _]versions?`?\s+{_RANGE}", re.I), REPORT_VERSION),
}
# What makes a mention one of the past: the words just before it, in the same clause.
PAST = re.compile(r"\b(?:before|from|since|until|after|older than|up to|(?:files|entries|reports) of|"
                  r"recorded with|written with|read as)\s+(?:the\s+)?(?:baseline\s+|json\s+)?`?$", re.I)


def mentions(text: str) -> list[tuple[str, int, int, int | None, bool]]:
    """(kind, line, number, end of a range or None, said to be past) of each version mention."""
    found = []
    for kind, (pattern, _) in MENTIONS.items():
        for match in pattern.finditer(text):
            before = re.split(r"[.;:()]\s", text[max(0, match.start() - 60):match.start()])[-1]
            line = text.count("\n", 0, match.start()) + 1
            end = int(match.group(2)) if match.group(2) else None
            found.append((kind, line, int(match.group(1)), end, bool(PAST.search(before))))
    return found


def test_the_mention_finder_tells_current_from_past():
    text = ("This is schema version 6; files of schema versions 1 to 5 are read. A baseline recorded "
            "before schema version 4 has no bound (from schema version 2). JSON report (`report_version` 5; "
            "x) (baseline schema 5; files of schema 1-4 are read)")
    assert [m[2:] for m in mentions(text)] == [
        (6, None, False), (1, 5, True), (4, None, True), (2, None, True), (5, None, False),
        (1, 4, True), (5, None, False)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_version_a_page_names_is_the_codes_current_one_or_said_to_be_past(page: Path):
    wrong = []
    for kind, line, number, end, past in mentions(page.read_text(encoding="utf-8")):
        current = MENTIONS[kind][1]
        if past:
            if max(number, end or number) > current:
                wrong.append(f"line {line}: {kind} {number}{f'-{end}' if end else ''} is newer than the "
                             f"code's {current}")
        elif number != current or end is not None:
            wrong.append(f"line {line}: {kind} {number} reads as the current one, the code's is {current} "
                         f"(say it is a past one: 'before', 'from', 'files of' ...)")
    assert wrong == [], f"{page.relative_to(ROOT)}: " + "; ".join(wrong)


def test_the_guide_says_which_schema_version_baselines_have():
    text = (ROOT / "docs" / "guide" / "recording.md").read_text(encoding="utf-8")
    assert f"This is schema version {SCHEMA_VERSION};" in text


def test_the_readme_builds_the_docs_with_the_virtual_environment_and_says_where_the_site_is():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Documentation"):]
    commands = [c for c in re.findall(r"`([^`]+)`", section) if "mkdocs" in c and "build" in c]
    assert commands, "the README's Documentation section has no command that builds the site"
    for command in commands:
        for part in command.split("&&"):
            words = shlex.split(part)
            # the virtual environment's pip and interpreter, never whatever is first on PATH
            assert words[0].startswith(".venv/bin/"), command
        assert "python -m mkdocs build --strict" in command
    site = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["site_dir"]
    assert f"`{site.rstrip('/')}/`" in section  # where the site is written, as mkdocs.yml says
