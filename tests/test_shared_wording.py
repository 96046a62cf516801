"""Facts every output states, said the same way everywhere: which verdicts compared nothing, the
relative change, the counts per verdict, the re-record command, the ops costed by the fallback,
the totals and per-op tables (text and Markdown), each verdict's colour, a trace file's name."""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

import pytest

from pytest_neuronprof.cli import main
from pytest_neuronprof.errors import BaselineError
from pytest_neuronprof.formatting import delta_json, format_share, record_command, relative_change
from pytest_neuronprof.gate.baseline import TRACE_SUFFIX, BaselineStore, baseline_path, render_baseline
from pytest_neuronprof.gate.compare import NOT_COMPARED, Finding, Kind, Status, Verdict, incomparable_reason
from pytest_neuronprof.gate.outcome import OpChange
from pytest_neuronprof.gate.outcome import TestOutcome as Outcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import html
from pytest_neuronprof.outputs.github import annotation_lines as github_annotations
from pytest_neuronprof.outputs.json_report import json_report
from pytest_neuronprof.outputs.markdown import counts_line, outcomes_markdown
from pytest_neuronprof.outputs.terminal import failure_section, not_compared_line, notices, uncosted_text
from pytest_neuronprof.outputs.trace_files import trace_file_name


def summary(ops: dict[str, tuple[float, bool]], cost_model: str = "1") -> ProfileSummary:
    """Ops by name: (device time in us, costed by the fallback)."""
    total = sum(t for t, _ in ops.values())
    return ProfileSummary("simulated", "trn2", cost_model, "2.13", total, {
        name: OpSummary(1, t, "Vector", 0, 4096, round(t / total, 6), "m", uncosted=uncosted)
        for name, (t, uncosted) in ops.items()})


BASE = summary({"aten::mm": (100.0, False), "my::op": (20.0, True)})


def outcome(status: Status, nodeid: str = "t.py::test", baseline: ProfileSummary | None = BASE,
            current: ProfileSummary = BASE, message: str = "why") -> Outcome:
    return Outcome(nodeid, ("t.py", 3), Verdict(status, message=message), current, baseline)


# --- the relative change ---------------------------------------------------------------------

def test_every_delta_is_the_same_relative_change():
    assert relative_change(80.0, 112.0) == pytest.approx(0.4)
    assert relative_change(0.0, 0.0) == 0.0 and relative_change(0.0, 3.0) == math.inf
    finding = Finding(Kind.SLOWER, "aten::mm", "m", 80.0, 112.0, 0.1, "hotspot slower")
    change = OpChange("aten::mm", "Tensor", "m", 80.0, 112.0, 1, 1, "")
    grown = outcome(Status.REGRESSION, current=summary({"aten::mm": (130.0, False), "my::op": (20.0, True)}))
    assert finding.delta == change.delta == pytest.approx(0.4)
    assert grown.delta == pytest.approx(150 / 120 - 1)
    new = Finding(Kind.NEW, "aten::exp", "m", 0.0, 5.0, 0.1, "new op")
    assert new.delta == math.inf and new.to_json()["delta"] is None  # JSON has no infinity
    assert delta_json(0.1234567) == 0.123457 and delta_json(None) is None


# --- the verdicts that compared nothing --------------------------------------------------------

@pytest.mark.parametrize("status", list(Status))
def test_not_compared_is_one_set_every_output_reads(status: Status):
    o = outcome(status)
    skipped = status in (Status.NO_BASELINE, Status.INCOMPARABLE, Status.NOT_PROFILED, Status.NOT_GATED)
    judged = status in (Status.PASS, Status.REGRESSION, Status.IMPROVED, Status.DOES_NOT_FIT)
    assert (status in NOT_COMPARED) == skipped
    assert o.verdict.compared == o.compared == judged
    assert (o.delta is None) == skipped  # no change shown against a baseline it was not compared to
    warnings = [a for a in github_annotations([o]) if a.startswith("::warning")]
    assert len(warnings) == int(skipped)
    assert bool(not_compared_line([o])) == skipped
    assert ("### Not compared" in outcomes_markdown([o], "t")) == skipped


def test_a_not_compared_test_is_told_one_fix_everywhere():
    missing, unprofiled = outcome(Status.NO_BASELINE, baseline=None), outcome(Status.NOT_PROFILED)
    record = "record it with pytest --neuron-baseline 't.py::test'"
    profile = "put the code to profile in `with neuron_profile:`, or drop the fixture"
    for o, fix in ((missing, record), (unprofiled, profile)):
        (warning,) = github_annotations([o])
        assert warning.endswith(f"; {fix}") and notices([o], strict=False)[0].endswith(f"; {fix}")


# --- counts per verdict --------------------------------------------------------------------------

def test_counts_per_verdict_agree_in_every_output():
    outcomes = [outcome(Status.REGRESSION, "a.py::r1"), outcome(Status.REGRESSION, "a.py::r2"),
                outcome(Status.PASS, "a.py::p"), outcome(Status.NO_BASELINE, "a.py::n", baseline=None),
                outcome(Status.INCOMPARABLE, "a.py::i"), outcome(Status.INCOMPARABLE, "a.py::j")]
    assert counts_line(outcomes) == "**2 regressions**, 1 pass, 1 new, 2 incomparable"  # verdict words
    report = json.loads(json_report(outcomes))
    assert report["counts"] == {"regression": 2, "pass": 1, "no-baseline": 1, "incomparable": 2}
    assert report["regressions"] == 2 and report["recorded"] == 0
    assert not_compared_line(outcomes) == "3 of 6 profiled tests were not compared (2 incomparable, 1 no-baseline)"


# --- the re-record command ----------------------------------------------------------------------

@pytest.mark.parametrize("nodeid", ["t.py::test", "t.py::test[it's]", 't.py::t[$HOME `x` \\n "q"]'])
def test_the_record_command_is_one_shell_word_per_test(nodeid: str):
    assert shlex.split(record_command(nodeid)) == ["pytest", "--neuron-baseline", nodeid]
    assert record_command() == "pytest --neuron-baseline"


def test_every_message_that_says_re_record_names_the_same_command(tmp_path: Path):
    command = f"`{record_command()}`"
    reason = incomparable_reason(BASE, summary({"aten::mm": (1.0, False)}, cost_model="2"))
    assert reason is not None and command in reason
    broken = baseline_path(tmp_path, "t.py::test")
    broken.write_text("{", encoding="utf-8")
    with pytest.raises(BaselineError) as error:
        BaselineStore(tmp_path).read_file(broken)
    assert command in str(error.value)


def test_merge_of_a_report_names_the_record_command(tmp_path: Path, capsys):
    report = tmp_path / "report.json"
    report.write_text(json_report([outcome(Status.PASS)]), encoding="utf-8")
    assert main(["merge", str(tmp_path / "out"), str(report)]) == 2
    assert f"as recorded with `{record_command()}`" in capsys.readouterr().err


# --- the ops costed by the fallback ---------------------------------------------------------------

def test_uncosted_ops_read_the_same_in_every_output():
    regressed = outcome(Status.REGRESSION, current=summary({"aten::mm": (150.0, False), "my::op": (20.0, True)}))
    # 20 of 170 us: 11.7647 % of the device time, said to 0.1 % everywhere
    sentence = ("costed by the fallback (not in the cost model): {} 20.000 us (11.8%); "
                "11.8% of the device time")
    assert uncosted_text(regressed.current) == sentence.format("my::op")
    assert sentence.format("my::op") in failure_section(regressed)
    assert f"- `t.py::test`: {sentence.format('`my::op`')}" in outcomes_markdown([regressed], "t")
    page = html.render_page([regressed])
    assert f'<p class="uncosted message">{sentence.format("my::op")}</p>' in page
    assert "<td class=num>11.8%</td>" in page  # the overview's column
    share = json.loads(json_report([regressed]))["tests"]["t.py::test"]["uncosted"]["share"]
    assert format_share(share) == "11.8%"
    assert uncosted_text(summary({"aten::mm": (1.0, False)})) == ""  # every op costed: nothing said


# --- the totals and per-op tables: one builder, text and Markdown ----------------------------------

def _write(directory: Path, s: ProfileSummary) -> str:
    nodeid = "tests/test_m.py::test_m"
    path = baseline_path(directory, nodeid)
    path.parent.mkdir(parents=True)
    path.write_text(render_baseline({nodeid: {s.variant: s}}), encoding="utf-8")
    return str(directory)


def _text_rows(text: str, first: str) -> list[list[str]]:
    """The rows of the text tables that start with ``first`` (not the lines that name a test)."""
    rows = [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip().startswith(first)]
    return [[c.lower() for c in row] for row in rows if len(row) > 1]


def _markdown_rows(text: str, first: str, width: int) -> list[list[str]]:
    """The rows of ``width`` cells that start with ``first`` (not the findings' rows)."""
    rows = [[c.strip().strip("`*").lower() for c in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith((f"| {first}", f"| `{first}"))]
    return [row for row in rows if len(row) == width]


def test_compare_prints_the_same_tables_as_text_and_markdown(tmp_path: Path, capsys):
    old = _write(tmp_path / "old", BASE)
    new = _write(tmp_path / "new", summary({"aten::mm": (140.0, False), "my::op": (20.0, True)}))
    assert main(["compare", old, new]) == 1
    text = capsys.readouterr().out
    assert main(["compare", old, new, "--format", "markdown"]) == 1
    markdown = capsys.readouterr().out
    totals = ["tests/test_m.py::test_m", "simulated:trn2", "120.000 us", "160.000 us", "+33.3%", "regression"]
    assert _text_rows(text, "tests/") == [totals]
    assert _markdown_rows(markdown, "tests/", len(totals)) == [totals]
    op = ["aten::mm", "vector", "m", "100.000 us", "140.000 us", "+40.0%", "1", "regression"]
    assert _text_rows(text, "aten::mm") == [op] and _markdown_rows(markdown, "aten::mm", len(op)) == [op]


# --- each verdict's colour ----------------------------------------------------------------------

@pytest.mark.parametrize("status", list(Status))
def test_every_verdict_has_one_colour_for_its_section_and_badge(status: Status):
    color = html.STATUS_COLORS[status]
    assert re.fullmatch(r"#[0-9a-f]{6}", color)
    rules = re.findall(rf"(section\.test|\.verdict)\.{re.escape(status)}\{{[a-z-]+:(#[0-9a-f]{{6}})\}}", html._CSS)
    assert sorted(rules) == [(".verdict", color), ("section.test", color)]


# --- a trace file's name --------------------------------------------------------------------------

def test_trace_files_are_named_with_the_suffix_the_baseline_store_skips(tmp_path: Path):
    name = trace_file_name("t.py::test[a b]")
    assert name.endswith(".trace.json") and TRACE_SUFFIX == ".trace.json"
    assert html.render_page([outcome(Status.PASS, "t.py::test[a b]")]).count(
        f'id="t-{name[:-len(".trace.json")]}"') == 1
    store = BaselineStore(tmp_path)
    for file in (tmp_path / name, tmp_path / "t.json"):
        file.write_text('{"tests": 1}', encoding="utf-8")  # no baseline file's content
    assert store.read_file(tmp_path / name) == {}  # skipped by its suffix
    with pytest.raises(BaselineError):
        store.read_file(tmp_path / "t.json")  # the same text under another name: a broken baseline
