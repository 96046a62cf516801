"""Text from files in every output (issue 25, items 3 and 4).

3. A lone surrogate (``\\udfff``: valid in JSON as an escape, in no UTF-8 file or stream) in a
   baseline or report value is shown as its escape in every output (terminal, Markdown, HTML,
   annotations, the step summary, the comment, the JSON report) and never ends a run with a
   traceback; a recording keeps it, as JSON's escape, byte-stable.
4. A value placed in raw HTML inside Markdown (``<details><summary>``) is HTML-escaped: every
   Markdown output is rendered with GitHub's own renderer (cmark-gfm, unsafe mode: before
   GitHub's sanitizer) and no tag of the result may come from a value.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pytest_neuronprof.cli import main
from pytest_neuronprof.files import OutputError, atomic_write_text
from pytest_neuronprof.gate.baseline import baseline_path, render_baseline
from pytest_neuronprof.gate.compare import PEAK, Finding, Kind, Status, Verdict
from pytest_neuronprof.gate.memory import MemorySummary, PeakTensor
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs.comment import comment_body
from pytest_neuronprof.outputs.github import annotation_lines, step_summary
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.costmodel.recommendations import Recommendation
from pytest_neuronprof.costmodel.utilisation import Utilisation
from pytest_neuronprof.outputs import roofline_chart, why
from pytest_neuronprof.outputs.html import render_page
from pytest_neuronprof.outputs.json_report import json_report
from pytest_neuronprof.outputs.markdown import outcomes_markdown
from pytest_neuronprof.outputs.terminal import failure_section, session_table
from pytest_neuronprof.safetext import guard_lines, html_text, json_text, md_code, md_text, plain, quoted

pytest_plugins = ["pytester"]

SURROGATE = "\udfff"  # a lone low surrogate: what `"\udfff"` in a JSON file reads as
ESCAPED = "\\udfff"  # what every output shows for it
# The payload: a hardware that closed the <summary> and showed an image and a link.
SUMMARY_BREAKOUT = ('</summary></details><img src="//evil.example/p.png">'
                    '<a href="//evil.example/x">Approved</a>')
PAYLOADS = [
    SUMMARY_BREAKOUT,
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "</code></summary><b>bold</b>",
    "`<img src=x>`",
    "``</summary>``<br>",
    "&lt;img src=x&gt; &#60;b&#62;",
    "<https://evil.example/x>",
    "[Approved](https://evil.example/x)",
    "![p](https://evil.example/p.png)",
    "https://evil.example/x www.evil.example user@evil.example",
    "*em* _em_ ~~del~~ **strong**",
    "a | b | c",
    "x\n\n<img src=x>\n\n</details>",
    "<!-- c --><b>\udfff</b>\udc80",
]
ESCAPERS = [plain, quoted, md_text, md_code, html_text, guard_lines]  # one per kind of output


# --- item 3: safetext, one escaping per kind of output ------------------------------------------

@pytest.mark.parametrize("escape", ESCAPERS, ids=lambda f: f.__name__)
def test_every_escaping_shows_a_lone_surrogate_as_its_escape(escape):
    shown = escape(f"aten::s\udc80um ok {SURROGATE} end")
    shown.encode("utf-8")  # what every file and stream of the project writes
    assert "udc80" in shown and "udfff" in shown
    assert not re.search("[\ud800-\udfff]", shown)


@pytest.mark.parametrize("escape", ESCAPERS, ids=lambda f: f.__name__)
@given(text=st.text(st.characters(categories=["Cs"]) | st.characters(), max_size=40))
def test_no_escaping_leaves_a_character_utf_8_cannot_write(escape, text):
    escape(text).encode("utf-8")


def test_json_text_writes_a_raw_surrogate_as_json_s_escape():
    # json.dumps escapes it (ensure_ascii): a document made without that still writes, and
    # reads back as the same value.
    document = json.dumps({"op": f"aten::s{SURROGATE}um ##[x"}, ensure_ascii=False)
    printed = json_text(document)
    printed.encode("utf-8")
    assert ESCAPED in printed and "##[" not in printed
    assert json.loads(printed) == json.loads(document)


def test_atomic_write_never_crashes_on_a_surrogate(tmp_path):
    page = tmp_path / "page.html"
    atomic_write_text(page, f"<p>ok {SURROGATE} end</p>\n")
    assert page.read_bytes().decode("utf-8") == f"<p>ok {ESCAPED} end</p>\n"  # its escape, as text
    atomic_write_text(page, iter(["a\udc80", "b"]))  # pieces, as the large writers give them
    assert page.read_text(encoding="utf-8") == "a\\udc80b"
    assert [p.name for p in tmp_path.iterdir()] == ["page.html"]  # no temporary file left


def test_a_path_no_file_system_can_name_is_an_error_naming_it(tmp_path):
    path = tmp_path / f"out{SURROGATE}" / "page.html"
    with pytest.raises(OutputError) as refused:
        atomic_write_text(path, "text")
    assert str(refused.value).startswith(f"cannot write {path}")
    assert list(tmp_path.iterdir()) == []


# --- items 3 and 4: outcomes whose every string carries a payload ---------------------------------

@pytest.fixture(autouse=True)
def every_hardware_is_a_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every summary on trn2's profile, whatever its hardware's name: a hostile name is no
    bundled profile, and the outputs would leave out what needs one (the roofline, the change of
    utilisation, an op's share of its peak) where the harmless ones show it."""
    monkeypatch.setattr(roofline_chart, "profile_of", lambda summary: load_hardware("trn2"))
    monkeypatch.setattr(why, "_profile", lambda hardware: load_hardware("trn2"))


def hostile_outcomes(text: Callable[[str], str]) -> list[TestOutcome]:
    """Outcomes of every status and section (regressions with modules, a memory finding and
    tensors at the peak, accepted changes with a reason, improvements, tests not compared,
    ops costed by the fallback, a test on two chips), each string ``text(label)``."""
    op1, op2, mod1, mod2 = text("aten::mm"), text("aten::add"), text("model.up"), text("model.down")

    def summary(hardware: str, factor: float, peak: int) -> ProfileSummary:
        ops = {op1: OpSummary(2, 80.0 * factor, "Tensor", 1000, 4096, 0.8, mod1,
                              modules={mod1: 60.0 * factor, mod2: 20.0 * factor}),
               op2: OpSummary(1, 20.0, "Vector", 10, 64, 0.2, mod2, uncosted=True)}
        memory = MemorySummary(peak, 1024, (PeakTensor(peak - 1024, (8, 16), text("bfloat16"), op1, mod1),))
        return ProfileSummary("simulated", hardware, "5", text("2.13"), 80.0 * factor + 20.0, ops,
                              memory=memory, reason=text("entry reason"))

    hardware = text("h200")
    slower = Finding(Kind.SLOWER, op1, mod1, 80.0, 120.0, 0.1, text("hotspot grew"),
                     ((mod1, 60.0, 90.0), (mod2, 20.0, 30.0)))
    memory = Finding(Kind.MEMORY, PEAK, "", 4096, 8192, 0.1, text("memory grew"))
    faster = Finding(Kind.FASTER, op1, mod2, 80.0, 40.0, 0.1, text("got faster"))
    regressed = Verdict(Status.REGRESSION, regressions=(slower, memory), accepted=(faster,),
                        accepted_reason=text("accepted reason"))
    location = (text("tests/test_a.py"), 3)
    # why it is slow: a recommendation whose every string is a value of a report file
    found = Utilisation(text("eager"), total_time_us=140.0, hbm_bytes_per_us=725e3, model_flops=1e6,
                        model_peak_us=12.0, active_us={"Tensor": 70.0, text("DMA"): 20.0},
                        elements={op2: 1024.0})
    advice = (Recommendation(text("low_model_flops"), text("Low Model FLOPS"), text("model FLOPs are 17%"),
                             text("Ensure instructions use the entire tensor engine"), 58.0, (op1,), 1,
                             (mod1, mod2), 0, text("aws-neuron/aws-neuron-sdk@81ce03ae:x.rst")),)
    return [
        TestOutcome(text("tests/test_a.py::test_a[p]"), location, regressed,
                    summary(hardware, 1.5, 8192), summary(hardware, 1.0, 4096), utilisation=found,
                    recommendations=advice),
        TestOutcome(text("tests/test_a.py::test_a[p]"), location, Verdict(Status.PASS),
                    summary("trn2", 1.0, 4096), summary("trn2", 1.0, 4096)),
        TestOutcome(text("tests/test_a.py::test_b"), location,
                    Verdict(Status.IMPROVED, improvements=(faster,)),
                    summary(hardware, 0.5, 4096), summary(hardware, 1.0, 4096)),
        TestOutcome(text("tests/test_a.py::test_c"), location,
                    Verdict(Status.NO_BASELINE, message=text("no baseline for simulated:trn2 at origin/main")),
                    summary("trn2", 1.0, 4096), None),
        TestOutcome(text("tests/test_a.py::test_d"), location,
                    Verdict(Status.INCOMPARABLE, message=text("torch version changed")),
                    summary(hardware, 1.0, 4096), summary(hardware, 1.0, 4096)),
    ]


def benign(label: str) -> str:
    return label


class Tags(HTMLParser):
    """Every tag, attribute and comment of a page, counted."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.counts: Counter[tuple] = Counter()
        self.feed(page)
        self.close()

    def handle_starttag(self, tag: str, attrs: list) -> None:
        # attribute names, not values: the page's anchors are made of node ids (slugs)
        self.counts[("<", tag, tuple(name for name, _ in attrs))] += 1

    def handle_endtag(self, tag: str) -> None:
        self.counts[("</", tag)] += 1

    def handle_comment(self, data: str) -> None:
        self.counts[("<!--", data)] += 1

    def handle_decl(self, decl: str) -> None:
        self.counts[("<!", decl)] += 1


# The tags cmark-gfm makes of the project's own Markdown and the raw HTML it writes.
MARKDOWN_TAGS = {"h2", "h3", "p", "ul", "li", "table", "thead", "tbody", "tr", "th", "td", "code",
                 "strong", "em", "pre", "details", "summary"}


def github_html(markdown: str) -> str:
    """``markdown`` as GitHub renders it before its sanitizer."""
    cmarkgfm = pytest.importorskip(
        "cmarkgfm", reason="GitHub's Markdown renderer (cmarkgfm, in the dev extra) renders the outputs")
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def assert_tags_only_from_the_project(hostile: str, harmless: str, markdown: bool = True) -> None:
    """``hostile`` (an output of hostile values) has exactly the tags ``harmless`` (the same
    output of plain values) has: no tag, attribute or comment came from a value."""
    if markdown:
        hostile, harmless = github_html(hostile), github_html(harmless)
    tags = Tags(hostile).counts
    assert tags == Tags(harmless).counts, sorted(set(tags) ^ set(Tags(harmless).counts), key=str)
    if markdown:
        assert {key[1] for key in tags if key[0] in ("<", "</")} <= MARKDOWN_TAGS
    for live in ("<img", "<script", "<a ", "<b>", "<br", "mailto:", "href=\"http"):
        assert hostile.count(live) == harmless.count(live), live  # a value's are text: &lt;img


def markdown_outputs(outcomes: list[TestOutcome]) -> dict[str, str]:
    """Each Markdown the plugin writes from these outcomes (and what `compare --format markdown`
    writes around them)."""
    only_old = [(outcomes[0].nodeid, outcomes[0].current.variant)]
    return {"step summary": step_summary(outcomes), "comment": comment_body(outcomes),
            "compare": outcomes_markdown(outcomes, "Device-time changes", per_op=True,
                                         only_old=only_old, update=False)}


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_tag_of_the_rendered_markdown_comes_from_a_value(payload):
    hostile = markdown_outputs(hostile_outcomes(lambda label: label + payload))
    harmless = markdown_outputs(hostile_outcomes(benign))
    for name, text in hostile.items():
        text.encode("utf-8")
        assert_tags_only_from_the_project(text, harmless[name])


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_tag_of_the_html_page_comes_from_a_value(payload, monkeypatch):
    # Every summary on trn2's roofline, whatever its hardware's name: a hostile name is no
    # bundled profile, and the page would have no roofline where the harmless one has one.
    page = render_page(hostile_outcomes(lambda label: label + payload))
    page.encode("utf-8")
    assert_tags_only_from_the_project(page, render_page(hostile_outcomes(benign)), markdown=False)


MARKUP = st.lists(st.sampled_from(["<", ">", "/", "&", '"', "'", "=", "`", "*", "_", "~", "[", "]",
                                   "(", ")", "!", "|", "\\", ":", "@", ".", " ", "\n", "#", "-",
                                   "img", "a href", "src", "script", "summary", "details", "code",
                                   "www", "https", "//", "&lt;", SURROGATE, "\udc80", "\x1b"]),
                  max_size=12).map("".join)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payload=MARKUP)
def test_no_tag_comes_from_any_markup_in_a_value(payload):
    hostile = markdown_outputs(hostile_outcomes(lambda label: label + payload))
    harmless = markdown_outputs(hostile_outcomes(benign))
    for name, text in hostile.items():
        assert_tags_only_from_the_project(text, harmless[name])


def test_the_summary_line_escapes_the_hardware_as_html():
    # A variant in <details><summary> (an HTML block: Markdown's backslashes are text there).
    outcomes = hostile_outcomes(lambda label: label + SUMMARY_BREAKOUT if label == "h200" else label)
    text = comment_body(outcomes)
    summaries = [line for line in text.splitlines() if line.startswith("<details><summary>")]
    assert summaries and all(line.endswith("</summary>") and line.count("<") == 5 for line in summaries), summaries
    assert "[h200&lt;/summary&gt;&lt;/details&gt;&lt;img src=&quot;//evil.example/p.png&quot;&gt;" in text


def test_terminal_and_annotations_show_surrogates_as_escapes():
    outcomes = hostile_outcomes(lambda label: label + f" \udc80{SURROGATE}")
    texts = [session_table(outcomes), failure_section(outcomes[0], outcomes[:2]),
             *annotation_lines(outcomes)]
    for text in texts:
        text.encode("utf-8")
    assert "aten::mm \\udc80\\udfff" in texts[1]


def test_the_json_report_keeps_a_surrogate_exact_and_writes(tmp_path):
    outcomes = hostile_outcomes(lambda label: label + SURROGATE)
    report = json_report(outcomes)
    report.encode("ascii")  # json's escape: any reader gets the value back
    assert "aten::mm\\udfff" in report
    back = json.loads(report)["tests"]
    assert f"tests/test_a.py::test_c{SURROGATE}" in back
    path = tmp_path / "r.json"
    atomic_write_text(path, report)
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(report)


# --- the commands, on files that hold payloads --------------------------------------------------

def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def write_report(path: Path, outcomes: list[TestOutcome]) -> Path:
    path.write_text(json_report(outcomes), encoding="utf-8")
    return path


@pytest.mark.parametrize("payload", [SUMMARY_BREAKOUT, f"<b>{SURROGATE}</b>\udc80"])
def test_comment_and_show_of_a_hostile_report(tmp_path, capsys, payload):
    report = write_report(tmp_path / "r.json", hostile_outcomes(lambda label: label + payload))
    harmless = write_report(tmp_path / "h.json", hostile_outcomes(benign))
    for argv in (["comment"], ["show", "--format", "markdown"]):
        code, out, err = run(capsys, *argv, report)
        assert (code, err) == (0, "")
        _, expected, _ = run(capsys, *argv, harmless)
        assert_tags_only_from_the_project(out, expected)
    for fmt in ("text", "json"):
        code, out, err = run(capsys, "show", "--format", fmt, report)
        assert (code, err) == (0, "")
    code, out, err = run(capsys, "comment", report, "-o", tmp_path / "c.md")
    assert (code, err) == (0, "") and (tmp_path / "c.md").read_text(encoding="utf-8")
    code, out, err = run(capsys, "report", report, "-o", tmp_path / "page")
    assert (code, err) == (0, "")
    page = (tmp_path / "page" / "index.html").read_text(encoding="utf-8")
    assert "<img" not in page and "<b>" not in page


def write_dir(directory: Path, summaries: dict[str, list[ProfileSummary]]) -> Path:
    for nodeid, variants in summaries.items():
        path = baseline_path(directory, nodeid)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_baseline({nodeid: {s.variant: s for s in variants}}), encoding="utf-8")
    return directory


def compare_dirs(root: Path, text: Callable[[str], str]) -> tuple[Path, Path]:
    """OLD and NEW baseline directories of one test on two chips (one a payload): the op whose
    name and modules are payloads regressed, the other did not change."""
    outcomes = hostile_outcomes(text)
    first, second = outcomes[0], outcomes[1]
    nodeid = "tests/test_a.py::test_a" + text("")  # the key's test file stays a test file
    old = write_dir(root / "old", {nodeid: [first.baseline, second.baseline]})
    new = write_dir(root / "new", {nodeid: [first.current, second.current]})
    return old, new


@pytest.mark.parametrize("payload", [SUMMARY_BREAKOUT, "<img src=x>`</summary>`", f"<b>{SURROGATE}\udc80",
                                     "\x1b]0;title\x07\x1b[2J"])
def test_compare_of_hostile_baselines(tmp_path, capsys, payload):
    old, new = compare_dirs(tmp_path / "hostile", lambda label: label + payload)
    harmless = compare_dirs(tmp_path / "harmless", benign)
    for by in ("test", "chip"):
        code, out, err = run(capsys, "compare", old, new, "--format", "markdown", "--by", by)
        assert code == 1 and "Traceback" not in err  # the test regressed on the hostile chip
        _, expected, _ = run(capsys, "compare", *harmless, "--format", "markdown", "--by", by)
        assert_tags_only_from_the_project(out, expected)
    for by in ("test", "chip"):  # the chips head the columns of `--by chip`
        for fmt in ("text", "json"):
            code, out, err = run(capsys, "compare", old, new, "--format", fmt, "--by", by)
            assert code == 1 and "Traceback" not in err
            out.encode("utf-8")
            assert "\x1b" not in out and not re.search("[\ud800-\udfff]", out)


# --- item 3 end to end: a plain gate run and a recording ------------------------------------------

SUITE = '''
import json, pathlib, pytest, torch
from torch import nn

HERE = pathlib.Path(__file__).parent


class Fan(nn.Module):
    """A Linear per name of names.json, each as wide as knobs.json says."""

    def __init__(self):
        super().__init__()
        widths = json.loads((HERE / "knobs.json").read_text())
        for name in json.loads((HERE / "names.json").read_text()):
            self.add_module(name, nn.Linear(64, widths.get(name, 64)))

    def forward(self, x):
        return [m(x) for m in self.children()]


def test_fan(neuron_profile):
    model, x = Fan(), torch.randn(512, 64)
    with torch.no_grad(), neuron_profile:
        model(x)
'''
MODULE = f"s\udc80x{SURROGATE}"  # torch takes any name without a "."


@pytest.mark.usefixtures("lean_inner_runs")  # inner runs: no hypothesis, cache, CI output
def test_a_gate_run_with_surrogates_writes_every_output(pytester: pytest.Pytester,
                                                        monkeypatch: pytest.MonkeyPatch, capsys):
    pytester.makepyfile(test_fan=SUITE)
    (pytester.path / "names.json").write_text(json.dumps([MODULE, "plain"]))
    (pytester.path / "knobs.json").write_text("{}")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    path = pytester.path / "baselines" / "test_fan.json"
    recorded = path.read_bytes()
    assert b'"s\\udc80x\\udfff"' in recorded  # JSON's escape: the name exactly, in ASCII
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    assert path.read_bytes() == recorded  # re-recording the same code: no diff

    # The baseline from a pull request: a reason and an op name holding lone surrogates.
    data = json.loads(recorded)
    entry = data["tests"]["test_fan.py::test_fan"]["simulated:trn2"]
    entry["reason"] = f"ok {SURROGATE} end"
    entry["ops"]["aten::s\udc80um"] = entry["ops"]["aten::addmm"]
    path.write_text(json.dumps(data))
    (pytester.path / "knobs.json").write_text(json.dumps({MODULE: 512}))  # MODULE's op grows
    summary = pytester.path / "summary.md"
    summary.write_text("")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("--color=no", "--neuron-report", "r.json", "--neuron-html", "page",
                                "--neuron-comment", "c.md")
    result.assert_outcomes(failed=1)
    out = "\n".join(result.outlines + result.errlines)
    assert "Traceback" not in out and "INTERNALERROR" not in out and "NOT written" not in out
    assert "s\\udc80x\\udfff" in out  # the regressed module, in the failure and the annotation
    assert any(line.startswith("::error file=") for line in result.outlines)

    outputs = {name: (pytester.path / name).read_bytes().decode("utf-8")  # strict: valid UTF-8
               for name in ("r.json", "page/index.html", "c.md", "summary.md")}
    assert "aten::s\\udc80um" in outputs["page/index.html"]
    report = json.loads(outputs["r.json"])["tests"]["test_fan.py::test_fan"]
    assert report["baseline"]["reason"] == f"ok {SURROGATE} end"  # exact: the report reads back
    assert "aten::s\udc80um" in report["baseline"]["ops"]

    # `neuronprof` reads the same files (capsys: a strict UTF-8 stdout, as a terminal's).
    capsys.readouterr()
    for argv in (["show", "baselines"], ["show", "--format", "markdown", "baselines"],
                 ["show", "r.json"], ["comment", "r.json"], ["report", "r.json", "-o", "page2"]):
        code, out, err = run(capsys, *argv)
        assert (code, err) == (0, ""), (argv, out, err)
        assert "udc80" in out or argv[0] == "report", argv
    assert "aten::s\\udc80um" in (pytester.path / "page2" / "index.html").read_text(encoding="utf-8")

    for name in ("c.md", "summary.md"):  # as a reader sees them
        assert "s\\udc80x\\udfff" in github_html(outputs[name]), name
    assert "aten::s\\udc80um" in github_html(outputs["c.md"])

