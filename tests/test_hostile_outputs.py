"""Values from baseline and report files in every output (issue 15, items 1-5): they come from
pull requests, so none may start a GitHub Actions workflow command (``::`` at the start of a
line, ``##[`` anywhere), become Markdown or HTML markup, drive the terminal (ESC, BEL) or flood
the log. Each attack goes through `neuronprof compare` (text, json, markdown), `neuronprof
show`, and the plugin's failure table, session table, annotations and step summary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_neuronprof.cli import main
from pytest_neuronprof.gate.baseline import baseline_path, render_baseline
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof import safetext
from pytest_neuronprof.safetext import clip, guard_lines, no_commands, plain, visible

pytestmark = pytest.mark.usefixtures("lean_inner_runs")

TERMINAL = "\x1b]0;TITLE\x07\x1b[2J"  # sets the terminal's title, clears the screen
TORCH = "2.13\n::error::torch injected\n# heading <img src=x>"
NODEID = "t.py::t\n::error::nodeid injected"
TICKS = "t.py::ok``x"  # two backticks: a code span of one or two would end inside the id
OP = "aten::addmm\n::stop-commands::tok123"
IMG = "aten::gelu<img src=https://evil.invalid/px.png>"
LINK = "![x](https://evil.invalid/p.png)" + TERMINAL
MODULES = ("mod##[warning]x", "a\n::error file=INJECTED_py,line=1::x", "m``x``")
HUGE = 50_000_000  # characters of one module name

CONTROL = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")
OWN_ANNOTATIONS = ("::error file=", "::warning file=")


def assert_inert(text: str, annotations: int = 0, max_line: int = 1000) -> None:
    """No workflow command but the plugin's own annotations, no control character, no long line."""
    lines = text.split("\n")
    commands = [line for line in lines if line.lstrip().startswith("::")]
    assert all(line.startswith(OWN_ANNOTATIONS) for line in commands), commands
    assert len(commands) == annotations, commands
    assert "##[" not in text
    assert not CONTROL.search(text), CONTROL.search(text)
    longest = max((line for line in lines if not line.startswith(OWN_ANNOTATIONS)), key=len)
    assert len(longest) < max_line, longest[:300]


def assert_no_markup(md: str, headings: set[str]) -> None:
    """Markdown where every name is text: no image, link or tag, and no heading of its own."""
    assert not re.search(r"(?<!\\)<(?!/?(details|summary|code)>)", md), md
    assert "![" not in md and not re.search(r"(?<!\\)\]\(", md)
    assert {line.split(" ", 1)[0] for line in md.splitlines() if line.startswith("#")} <= headings


def hostile(torch: str = "2.13", factor: float = 1.0, huge: bool = False) -> ProfileSummary:
    ops = {OP: (80.0, 2, "Tensor"), IMG: (15.0, 1, "Scalar"), LINK: (5.0, 1, "Vector")}
    modules = (*MODULES[:2], "M" * HUGE if huge else MODULES[2])
    total = 100.0 * factor
    return ProfileSummary("simulated", "trn2", "1", torch, total, {
        name: OpSummary(count, us * factor, engine, 1000 * count, 4096, us / 100.0, module)
        for (name, (us, count, engine)), module in zip(ops.items(), modules)})


def write(directory: Path, tests: dict[str, ProfileSummary]) -> Path:
    for nodeid, s in tests.items():
        path = baseline_path(directory, nodeid)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_baseline({nodeid: {s.variant: s}}), encoding="utf-8")
    return directory


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    """OLD and NEW: NODEID regressed (its ops and modules hostile); TICKS has another torch."""
    old = write(tmp_path / "old", {NODEID: hostile()})
    write(tmp_path / "old" / "b", {TICKS: hostile()})
    new = write(tmp_path / "new", {NODEID: hostile(factor=1.5)})
    write(tmp_path / "new" / "b", {TICKS: hostile(torch=TORCH)})
    return old, new


def run(capsys: pytest.CaptureFixture[str], *argv: object) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- safetext: the last guard and the fast path ------------------------------------------------

def test_guard_lines_leaves_no_command_and_no_control_character():
    text = "::a\n  ::b\n\u00a0\u2003::c\nok ##[w] \x1b[2J\tx\r::d\n::"
    guarded = guard_lines(text)
    assert guarded.split("\n") == ["\\::a", "  \\::b", "\u00a0\u2003\\::c", "ok ##\\[w] \\x1b[2J\\tx\\r::d", "\\::"]
    assert guard_lines("aten::mm  1.0 us\n  aten::add") == "aten::mm  1.0 us\n  aten::add"  # as it was


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    [" ::x", "##[x", "a" * 250, "\u2028", "\x1b[2J", "\u00a0::x"]))
def test_plain_fast_path_is_the_full_escaping(text: str):
    assert plain(text) == no_commands(visible(clip(text)))
    assert visible(text) == safetext._CONTROL.sub(safetext._escape_char, text)  # isprintable() skip


# --- item 1: `neuronprof compare` and `show` ---------------------------------------------------

@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_compare_prints_no_command_and_no_control_character(dirs, capsys, fmt):
    old, new = dirs
    code, out, err = run(capsys, "compare", old, new, "--format", fmt)
    assert code == 2  # TICKS is incomparable: another torch
    assert_inert(out)
    assert_inert(err)
    assert err.count("\n") == 1 and "torch injected" in err  # the message, on one line
    if fmt == "json":  # values exact for programs
        doc = json.loads(out)
        assert {t["nodeid"] for t in doc["tests"]} == {NODEID, TICKS}
        assert {op["op"] for t in doc["tests"] for op in t["ops"]} == {OP, IMG, LINK}
        assert MODULES[0] in {op["module"] for t in doc["tests"] for op in t["ops"]}
    else:  # values readable: a newline shows as \n (in Markdown text its backslash escaped)
        assert ("aten::addmm\\n" if fmt == "text" else "aten::addmm\\\\n") + "::stop-commands::tok123" in out
        assert "t.py::t\\n::error::nodeid injected" in out


@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_show_prints_no_command_and_no_control_character(dirs, capsys, fmt):
    _, new = dirs
    code, out, err = run(capsys, "show", new, "--format", fmt)
    assert (code, err) == (0, "")
    assert_inert(out)
    shown = {"text": "\\x1b]0;TITLE\\x07\\x1b[2J", "markdown": "\\\\x1b\\]0;TITLE\\\\x07\\\\x1b\\[2J"}
    assert shown[fmt] in out  # the escape sequences shown, not sent


def test_json_output_keeps_values_exact_without_a_legacy_command(dirs, capsys):
    _, new = dirs
    _, out, _ = run(capsys, "show", new, "--format", "json")
    assert "##[" not in out and "mod##\\u005bwarning]x" in out
    tests = json.loads(out)["tests"]
    assert MODULES[0] in tests[NODEID]["simulated:trn2"]["ops"][OP]["modules"]


# --- item 3: Markdown --------------------------------------------------------------------------

def test_compare_markdown_has_no_live_markup(dirs, capsys):
    old, new = dirs
    _, md, _ = run(capsys, "compare", old, new, "--format", "markdown")
    assert_no_markup(md, {"##", "###"})
    assert "``` t.py::ok``x ```" in md  # a fence longer than any run of backticks inside
    assert "\\<img src=https\\://evil.invalid/px.png>" in md


def test_compare_markdown_renders_names_as_text(dirs, capsys):
    markdown_it = pytest.importorskip("markdown_it")
    old, new = dirs
    _, md, _ = run(capsys, "compare", old, new, "--format", "markdown")
    page = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert "<img" not in page and "<a " not in page and "<h1" not in page
    assert "<code>t.py::ok``x</code>" in page and "<code>t.py::t\\n::error::nodeid injected</code>" in page
    assert "&lt;img src=https://evil.invalid/px.png&gt;" in page and "![x](https://evil.invalid/p.png)" in page


# --- item 5: unbounded echo --------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["text", "markdown"])
def test_a_50_mb_module_name_is_capped(tmp_path, capsys, fmt):
    path = write(tmp_path / "big", {NODEID: hostile(huge=True)})
    code, out, err = run(capsys, "show", path, "--format", fmt)
    assert (code, err) == (0, "")
    assert_inert(out)
    assert len(out) < 10_000 and f"\u2026 ({HUGE:,} characters)" in out


def test_html_page_and_json_report_hold_names_as_text():
    from pytest_neuronprof.gate.compare import GatePolicy, compare
    from pytest_neuronprof.gate.outcome import TestOutcome
    from pytest_neuronprof.outputs.html import render_page
    from pytest_neuronprof.outputs.json_report import json_report

    old, new = hostile(), hostile(factor=1.5, huge=True)
    outcome = TestOutcome(NODEID, ("t.py", 1), compare(old, new, GatePolicy()), new, old)
    page = render_page([outcome])
    assert len(page) < 100_000 and not CONTROL.search(page)  # 50 MB of module name capped
    assert "<img" not in page and "&lt;img src=https://evil.invalid/px.png&gt;" in page
    assert "\\x1b]0;TITLE\\x07\\x1b[2J" in page
    report = json_report([outcome])
    assert "##[" not in report and json.loads(report)["tests"][NODEID]["current"]["ops"][OP]["modules"]


# --- item 2 and 4: the plugin's failure table, session table, annotations, step summary ---------

SUITE = '''
import json, pathlib, pytest, torch
from torch import nn

HERE = pathlib.Path(__file__).parent
NAMES = json.loads((HERE / "names.json").read_text())


class Fan(nn.Module):
    """One Linear per (hostile) name; knobs.json gives a name a wider one."""

    def __init__(self, names):
        super().__init__()
        widths = json.loads((HERE / "knobs.json").read_text())
        for name in names:
            self.add_module(name, nn.Linear(64, widths.get(name, 64)))

    def forward(self, x):
        return [m(x) for m in self.children()]


def run(names, neuron_profile):
    model, x = Fan(names), torch.randn(512, 64)
    with torch.no_grad(), neuron_profile:
        model(x)


def test_a(neuron_profile):
    run(NAMES["a"], neuron_profile)


def test_b(neuron_profile):
    run(NAMES["b"], neuron_profile)


@pytest.mark.neuron_profile
def test_torch():
    a = torch.randn(64, 64)
    a @ a


@pytest.mark.neuron_profile(ops={"nothing": 0.2})  # names no op: the failure lists the ops
def test_ops():
    a = torch.randn(64, 64)
    a @ a
'''
PLUGIN_NAMES = {  # torch refuses a "." in a module's name
    "a": ["a\n::error file=INJECTED_py,line=1::x", TERMINAL, "B" * 1_000_000],
    "b": ["w##[warning]x", "<img src=https://evil/px_png>", "![x](https://evil/p_png)``"],
}


def test_plugin_outputs_print_no_injected_command(pytester: pytest.Pytester,
                                                  monkeypatch: pytest.MonkeyPatch):
    pytester.makepyfile(test_hostile=SUITE)
    (pytester.path / "names.json").write_text(json.dumps(PLUGIN_NAMES))
    (pytester.path / "knobs.json").write_text("{}")
    pytester.runpytest("--neuron-baseline", "-k", "not test_ops").assert_outcomes(passed=3)
    # Each module of test_a and test_b grows (by different amounts: all three are named).
    grow = {name: 128 * (i + 2) for names in PLUGIN_NAMES.values() for i, name in enumerate(names)}
    (pytester.path / "knobs.json").write_text(json.dumps(grow))
    path = pytester.path / "baselines" / "test_hostile.json"
    data = json.loads(path.read_text())
    torch_entry = data["tests"]["test_hostile.py::test_torch"]["simulated:trn2"]
    data["tests"]["test_hostile.py::test_ops"] = {"simulated:trn2": {
        **torch_entry, "ops": {OP: op for op in torch_entry["ops"].values()}}}
    torch_entry["torch_version"] = TORCH
    path.write_text(json.dumps(data))
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))

    result = pytester.runpytest("--color=no", "--neuron-strict")  # test_torch fails, with why
    result.assert_outcomes(failed=4)
    out = "\n".join(result.outlines + result.errlines)
    assert_inert(out, annotations=3, max_line=2000)  # two ::error, one ::warning
    assert "names no op of this test's profile or baseline; its ops are aten::addmm\\n::stop" in out
    assert "a\\n::error file=INJECTED_py,line=1::x" in out and "\\x1b]0;TITLE\\x07\\x1b[2J" in out
    assert "w##\\[warning]x" in out and "torch injected" in out
    assert "\u2026 (1,000,000 characters)" in out
    annotations = [line for line in result.outlines if line.startswith(OWN_ANNOTATIONS)]
    assert all("%0A" not in line and len(line) < 4000 for line in annotations), annotations

    md = summary.read_text()
    assert_no_markup(md, {"##", "###"})
    assert "##[" not in md and not CONTROL.search(md)
    assert "\\<img src=https\\://evil/px\\_png>" in md
