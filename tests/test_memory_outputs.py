"""Device memory shown everywhere time is (issue 18, item 1): the peak column of the session
table and the Markdown totals, the failure text (the peak's finding, a memory line and the
tensors live at the peak by origin, "new" where the baseline's peak did not have them), the JSON
report (version 5), the step summary, the GitHub annotation and the HTML page; and end to end, a
forward that keeps a big tensor alive fails with them while a harmless change passes."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_neuronprof.gate.compare import GatePolicy, Kind, Status, compare, uncompared
from pytest_neuronprof.gate.memory import MemorySummary, PeakGroup
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import github, html, json_report, markdown, rows, terminal
from pytest_neuronprof.outputs.json_report import REPORT_VERSION
from pytest_neuronprof.outputs.rows import TENSORS_TITLE

pytest_plugins = ["pytester"]

MiB = 2**20
GiB = 2**30
NODE = "tests/test_llama.py::test_step"
WEIGHT = PeakGroup("(resident)", "", (4096, 32768), "float32", 1, 512 * MiB)
ACT = PeakGroup("aten::mm", "layers.0.mlp.up", (8, 2048, 1024), "float32", 1, 64 * MiB)
# A module path read from a file: the outputs must show it as text, never as markup.
HOSTILE = PeakGroup("aten::cat", "kv<b>|cache", (8, 8192, 1024), "bfloat16", 1, 256 * MiB)

BASE_MEMORY = MemorySummary(GiB, 512 * MiB, live=(WEIGHT, ACT))
# 1.25 GiB: the cache is new at the peak, and a second activation of ACT's origin is too (the
# baseline's peak had one: its group is larger, "was 1").
GROWN_MEMORY = MemorySummary(GiB + 256 * MiB, 512 * MiB, (), 20 * MiB, 3 * MiB,
                             live=(WEIGHT, HOSTILE, replace(ACT, count=2, bytes=128 * MiB)))


def summary(memory: MemorySummary | None, time_us: float = 100.0, backend: str = "simulated") -> ProfileSummary:
    mm = OpSummary(4, time_us, "Tensor", 10**9, 10**6, 1.0, "mlp", bound="TensorE", dtype="float32")
    return ProfileSummary(backend, "trn2", "3", "2.13", time_us, {"aten::mm": mm}, memory=memory)


def outcome(base: ProfileSummary | None, current: ProfileSummary, policy: GatePolicy = GatePolicy(),
            nodeid: str = NODE) -> TestOutcome:
    verdict = (compare(base, current, policy) if base is not None
               else uncompared(current, policy, Status.NO_BASELINE, "no baseline"))
    return TestOutcome(nodeid, ("tests/test_llama.py", 7), verdict, current, base)


def grown() -> TestOutcome:
    return outcome(summary(BASE_MEMORY), summary(GROWN_MEMORY))


TRN2_LIMIT = GatePolicy(memory_limit=GiB, memory_limit_label="1 GiB per NeuronCore")


def too_big() -> TestOutcome:
    """A first run (no baseline) whose peak is above its device's memory."""
    return outcome(None, summary(GROWN_MEMORY), TRN2_LIMIT, nodeid="tests/test_llama.py::test_big")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("  ") if c.strip()]


# --- the terminal ------------------------------------------------------------------------------

def test_the_session_table_has_a_peak_column_with_its_change():
    timed = outcome(summary(None, backend="cpu"), summary(None, backend="cpu"), nodeid="t.py::test_cpu")
    text = terminal.session_table([grown(), too_big(), timed])
    lines = text.splitlines()
    assert cells(lines[0]) == ["test", "device time", "delta", "peak", "top hotspot", "verdict"]
    assert cells(lines[2]) == [NODE, "100.000 us", "+0.0%", "1.2 GiB (+25.0%)", "aten::mm (100%)", "regression"]
    assert cells(lines[3]) == ["tests/test_llama.py::test_big", "100.000 us", "-", "1.2 GiB",
                               "aten::mm (100%)", "does-not-fit"]
    assert cells(lines[4]) == ["t.py::test_cpu", "100.000 us", "+0.0%", "-", "aten::mm (100%)", "pass"]
    assert max(map(len, lines)) <= 120
    # A run where nothing measured memory (measured backends) keeps its layout.
    assert "peak" not in terminal.session_table([timed]).splitlines()[0]


def test_the_failure_text_shows_the_peak_and_the_tensors_new_at_it():
    text = terminal.failure_section(grown())
    lines = text.splitlines()
    assert lines[0] == "device memory regression on simulated:trn2 (peak 1 GiB -> 1.2 GiB, +25.0%)"
    assert cells(lines[4])[:6] == ["(peak memory)", "-", "1 GiB", "1.2 GiB", "+25.0%", "5%"]
    assert cells(lines[4])[6] == (
        "allocated +256 MiB; new at the peak: bfloat16[8,8192,1024] from aten::cat in kv<b>|cache, "
        "256 MiB; more at the peak: float32[8,2048,1024] from aten::mm in layers.0.mlp.up, 64 MiB (2 now)")
    start = lines.index(f"{TENSORS_TITLE}:")
    assert lines[start - 1] == ("peak 1.2 GiB (resident 512 MiB, allocated 768 MiB); "
                                "SBUF peak 20 MiB, spilled 3 MiB")
    assert cells(lines[start + 1]) == ["op", "module", "shape", "dtype", "count", "bytes", "at baseline peak"]
    assert [cells(line) for line in lines[start + 3:start + 6]] == [  # new or larger first
        ["aten::cat", "kv<b>|cache", "[8,8192,1024]", "bfloat16", "1", "256 MiB", "new"],
        ["aten::mm", "layers.0.mlp.up", "[8,2048,1024]", "float32", "2", "128 MiB", "was 1"],
        ["(resident)", "-", "[4096,32768]", "float32", "1", "512 MiB", "yes"]]
    assert lines[-1] == f"If this change is intended, update the baseline: pytest --neuron-baseline '{NODE}'"


def test_a_test_that_does_not_fit_fails_without_a_baseline_and_is_told_how_to_fix_it():
    o = too_big()
    assert o.verdict.status == Status.DOES_NOT_FIT and [f.kind for f in o.verdict.regressions] == [Kind.FIT]
    text = terminal.failure_section(o)
    lines = text.splitlines()
    assert lines[0] == "does not fit in device memory on simulated:trn2 (peak 1.2 GiB, limit 1 GiB)"
    assert "does not fit on trn2: 1.2 GiB peak, 1 GiB per NeuronCore" in lines[4]
    assert f"{TENSORS_TITLE}:" in lines
    tensors = lines[lines.index(f"{TENSORS_TITLE}:") + 3:][:3]
    assert [cells(line)[-1] for line in tensors] == ["-"] * 3  # no baseline to say what is new
    assert "update the baseline" not in text  # a new baseline would not make it fit
    # what would fit: bfloat16 (its float32 tensors halved), a limit of at least the peak (and
    # no other chip: the limit, 1 GiB, is not trn2's own memory)
    assert lines[-1] == rows.fit_text(o) == (
        "It does not fit in 1 GiB per NeuronCore (peak 1.2 GiB): in bfloat16 "
        "(model.to(torch.bfloat16)) its peak would be about 960 MiB, which fits (float32 is "
        "640 MiB of what is live at the peak); or set a limit of at least its peak: "
        '@pytest.mark.neuron_profile(memory_limit="2 GiB"). Re-recording its baseline does not '
        "change its limit.")


def test_a_time_regression_keeps_its_headline_and_adds_the_memory_when_that_grew_too():
    o = outcome(summary(BASE_MEMORY), summary(GROWN_MEMORY, time_us=150.0))
    lines = terminal.failure_section(o).splitlines()
    assert lines[0] == ("device time regression on simulated:trn2 (total 100.000 us -> 150.000 us, "
                        "+50.0%); largest: aten::mm +50.000 us (+50.0%)")
    assert f"{TENSORS_TITLE}:" in lines
    only_time = outcome(summary(BASE_MEMORY), summary(BASE_MEMORY, time_us=150.0))
    assert f"{TENSORS_TITLE}:" not in terminal.failure_section(only_time)


def test_a_smaller_peak_is_an_improvement_said_as_such():
    shrunk = outcome(summary(GROWN_MEMORY), summary(BASE_MEMORY), nodeid="t.py::test_mem")
    both = outcome(summary(GROWN_MEMORY, time_us=200.0), summary(BASE_MEMORY), nodeid="t.py::test_both")
    assert shrunk.verdict.status == Status.IMPROVED
    lines = terminal.improvements_text([shrunk, both]).splitlines()
    assert lines[0] == "t.py::test_mem: a lower peak of device memory than its baseline"
    assert cells(lines[3])[:5] == ["(peak memory)", "-", "1.2 GiB", "1 GiB", "-20.0%"]
    assert "t.py::test_both: faster, with a lower peak, than its baseline" in lines


# --- Markdown and the step summary ---------------------------------------------------------------

def test_the_step_summary_has_the_peak_column_and_the_tensors_of_a_test_whose_memory_failed():
    passed = outcome(summary(BASE_MEMORY), summary(BASE_MEMORY), nodeid="tests/test_llama.py::test_ok")
    text = github.step_summary([grown(), passed])
    assert "| test " in text
    totals = text[text.index("### Per-test totals"):].splitlines()
    assert [c.strip() for c in totals[2].strip("|").split("|")] == [
        "test", "variant", "baseline", "current", "delta", "peak", "verdict"]
    assert f"| `{NODE}` | simulated:trn2 | 100.000 us | 100.000 us | +0.0%   | 1.2 GiB (+25.0%) |" in text
    assert "| 1 GiB (+0.0%)    |" in text
    # the regression's row in the findings table, in bytes
    assert "| (peak memory) | -        | 1 GiB      | 1.2 GiB   | +25.0%  | 5%" in text
    details = text[text.index("<details><summary>Device memory: "):]
    assert details.startswith(f"<details><summary>Device memory: <code>{NODE}</code> (peak 1.2 GiB (+25.0%))")
    assert "peak 1.2 GiB (resident 512 MiB, allocated 768 MiB); SBUF peak 20 MiB, spilled 3 MiB" in details
    assert "| aten::cat  | kv\\<b>\\|cache   | \\[8,8192,1024\\] | bfloat16 | 1       | 256 MiB | new " in details
    assert "kv<b>" not in text  # the module path stays text (escaped everywhere)
    assert text.count("<details>") == 1  # the test that passed has none


def test_the_compare_markdown_puts_the_tensors_under_the_per_op_details():
    o = outcome(summary(BASE_MEMORY), summary(GROWN_MEMORY, time_us=150.0))
    text = markdown.outcomes_markdown([o], "t", per_op=True)
    details = text[text.index("<details><summary>Per-op changes: "):text.index("</details>")]
    assert "| aten::mm | Tensor   | mlp      | 100.000 us | 150.000 us | +50.0%  | 4       | **regression** |" in details
    assert f"{TENSORS_TITLE.capitalize()}:" in details and "| new " in details


def test_markdown_without_memory_keeps_its_totals_layout():
    timed = outcome(summary(None, backend="cpu"), summary(None, backend="cpu"))
    text = markdown.outcomes_markdown([timed, grown()], "t")
    assert "| peak " in text and "| -                |" in text  # a cpu row in a mixed table
    assert "| peak " not in markdown.outcomes_markdown([timed], "t")


# --- GitHub annotations ----------------------------------------------------------------------------

def test_the_annotation_of_a_memory_regression_names_the_peak_change():
    (line,) = github.annotation_lines([grown()])
    assert line.startswith("::error file=tests/test_llama.py,line=7,title=device-memory regression%3A test_step::")
    message = line.split("::", 2)[2]
    assert message.startswith(f"{NODE}: device memory regression on simulated:trn2 "
                              "(peak 1 GiB -> 1.2 GiB, +25.0%25); (peak memory) +25.0%25 "
                              "(1 GiB -> 1.2 GiB, threshold 5%25): allocated +256 MiB; new at the peak")


def test_the_annotation_of_a_test_that_does_not_fit_says_so_with_no_baseline():
    (line,) = github.annotation_lines([too_big()])
    message = line.split("::", 2)[2]
    assert line.startswith("::error file=tests/test_llama.py,line=7,title=does not fit in device "
                           "memory%3A test_big::")
    assert message.startswith("tests/test_llama.py::test_big: does not fit in device memory on "
                              "simulated:trn2 (peak 1.2 GiB, limit 1 GiB); ")
    assert ("(peak memory): does not fit on trn2: 1.2 GiB peak, 1 GiB per NeuronCore" in message)
    assert message.endswith(rows.fit_text(too_big()).replace("%", "%25"))
    assert "update the baseline" not in message


def test_the_annotation_keeps_the_memory_finding_among_many_time_findings():
    many = {f"aten::op{i}": OpSummary(1, 25.0, "Vector", 0, 10**6, 0.25, "m") for i in range(4)}
    base = replace(summary(BASE_MEMORY), ops=many)
    slower = {name: replace(op, device_time_us=50.0) for name, op in many.items()}
    current = replace(summary(GROWN_MEMORY, time_us=200.0), ops=slower)
    (line,) = github.annotation_lines([outcome(base, current)])
    assert "(peak memory) +25.0%25 (1 GiB -> 1.2 GiB" in line
    assert line.count(" -> 50.000 us") == 2  # two of the four slower ops, and the peak


# --- HTML --------------------------------------------------------------------------------------------

def test_the_html_page_shows_each_test_s_peak_and_tensors_escaped():
    page = html.render_page([grown(), too_big()])
    assert "<th class=num>peak</th>" in page
    assert "<td class=num>1.2 GiB (+25.0%)</td>" in page
    assert "<h3>Device memory: peak 1.2 GiB (+25.0%)</h3>" in page
    assert ('<p class="meta memory">baseline: peak 1 GiB (resident 512 MiB, allocated 512 MiB)</p>'
            in page)
    assert re.search(r"<tr><td>aten::cat</td><td>kv&lt;b&gt;\|cache</td><td>\[8,8192,1024\]</td>"
                     r"<td>bfloat16</td><td( class=num)?>1</td><td( class=num)?>256 MiB</td><td>new</td></tr>",
                     page)
    assert "kv<b>" not in page


# --- the JSON report --------------------------------------------------------------------------------

def test_the_json_report_carries_memory_on_both_sides_and_reads_back(tmp_path: Path):
    from pytest_neuronprof.cli.inputs import _report_outcomes

    doc = json.loads(json_report.json_report([grown()]))
    assert doc["report_version"] == REPORT_VERSION == 6
    test = doc["tests"][NODE]
    assert test["current"]["memory"]["peak_bytes"] == GiB + 256 * MiB
    assert test["current"]["memory"]["sbuf_peak_bytes"] == 20 * MiB
    assert test["baseline"]["memory"]["peak_bytes"] == GiB
    assert "at_peak" not in test["current"]["memory"]  # version 5: by origin
    assert test["current"]["memory"]["live"][1] == {
        "bytes": 256 * MiB, "count": 1, "dtype": "bfloat16", "module": "kv<b>|cache", "op": "aten::cat",
        "shape": [8, 8192, 1024]}
    assert [(f["kind"], f["baseline"], f["current"]) for f in test["verdict"]["regressions"]] == [
        ("memory", GiB, GiB + 256 * MiB)]
    (read,) = _report_outcomes(tmp_path / "r.json", doc)
    assert read.current.memory == GROWN_MEMORY and read.baseline is not None
    assert read.baseline.memory == BASE_MEMORY
    assert terminal.failure_section(read) == terminal.failure_section(grown())


# --- end to end ---------------------------------------------------------------------------------------

@pytest.fixture
def lean(monkeypatch: pytest.MonkeyPatch) -> None:
    """As tests/test_plugin.py's inner runs: no hypothesis plugin, no GitHub environment."""
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:cacheprovider")
    for name in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        monkeypatch.delenv(name, raising=False)


# A block whose forward runs x * 2 (4 MiB), exp of it, sin of that; and sin and cos of a small
# tensor. ``keep`` keeps x * 2 alive on the module past its last use (a tensor kept alive too
# long: 4 MiB more at the peak); ``{a}``/``{b}`` name the small results, ``{first}``/``{second}``
# order their ops: renaming and reordering them is the harmless change.
BLOCK = '''
import json, pathlib, pytest, torch

KNOBS = pathlib.Path(__file__).with_name("knobs.json")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.keep = json.loads(KNOBS.read_text()).get("keep", False) if KNOBS.exists() else False

    def forward(self, x, small):
        {first}
        {second}
        doubled = x * 2
        if self.keep:
            self.saved = doubled
        y = torch.exp(doubled)
        del doubled
        return torch.sin(y), {a} + {b}


@pytest.fixture
def inputs():
    return Block(), torch.randn(1024, 1024), torch.randn(8, 8)


@pytest.mark.neuron_profile
def test_block(inputs):
    block, x, small = inputs
    block(x, small)
'''


def write_block(pytester: pytest.Pytester, a: str = "a", b: str = "b", swap: bool = False, keep: bool = False) -> None:
    ops = [f"{a} = torch.sin(small)", f"{b} = torch.cos(small)"]
    first, second = reversed(ops) if swap else ops
    pytester.makepyfile(test_block=BLOCK.format(first=first, second=second, a=a, b=b))
    (pytester.path / "knobs.json").write_text(json.dumps({"keep": keep}))


def test_a_tensor_kept_alive_fails_with_the_tensors_table_and_a_harmless_change_passes(
        pytester: pytest.Pytester, lean: None):
    write_block(pytester)
    assert pytester.runpytest("--neuron-baseline").ret == 0
    write_block(pytester, a="sines", b="cosines", swap=True)  # renamed, two small ops reordered
    result = pytester.runpytest("--neuron-report", "r.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_block.py::test_block * 12 MiB (+0.0%) * pass"])
    write_block(pytester, keep=True)
    result = pytester.runpytest("--neuron-report", "r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "device memory regression on simulated:trn2 (peak 12 MiB -> 16 MiB, +33.3%)",
        "(peak memory) * 12 MiB * 16 MiB * +33.3% * 5% * allocated +4 MiB; new at the peak: "
        "float32[[]1024,1024] from aten::mul in Block, 4 MiB",
        "peak 16 MiB (resident 4 MiB, allocated 12 MiB)",
        f"{TENSORS_TITLE}:",
        "op * module * shape * dtype * count * bytes * at baseline peak",
        "*",
        "aten::mul * Block * [[]1024,1024[]] * float32 * 1 * 4 MiB * new",
        "(resident) * - * [[]1024,1024[]] * float32 * 1 * 4 MiB * yes",
        "*If this change is intended, update the baseline: pytest --neuron-baseline 'test_block.py::test_block'",
        "*= neuron device-time profile =*",
        "*peak*",
        "*",
        "test_block.py::test_block * 16 MiB (+33.3%) * regression",
    ])
    report = json.loads((pytester.path / "r.json").read_text())["tests"]["test_block.py::test_block"]
    small = 4 * 8 * 8 * 4  # float32 [8,8]: small, its sin and cos, and their sum, at the peak
    assert (report["baseline"]["memory"]["peak_bytes"], report["current"]["memory"]["peak_bytes"]) == (
        12 * MiB + small, 16 * MiB + small)


def test_a_peak_over_the_marker_s_memory_limit_fails_on_its_first_run(pytester: pytest.Pytester, lean: None):
    write_block(pytester)
    path = pytester.path / "test_block.py"
    path.write_text(path.read_text().replace("@pytest.mark.neuron_profile\n",
                                             '@pytest.mark.neuron_profile(memory_limit="10 MiB")\n'))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "does not fit in device memory on simulated:trn2 (peak 12 MiB, limit 10 MiB)",
        "(peak memory) * 10 MiB * 12 MiB * +20.0% * 0% * does not fit on trn2: 12 MiB peak, memory_limit=10 MiB",
        f"{TENSORS_TITLE}:",
    ])
    # what would fit: a limit of at least its peak; the marker's limit is no chip's memory
    assert ('It does not fit in memory_limit=10 MiB (peak 12 MiB): in bfloat16 '
            in result.stdout.str())
    assert 'memory_limit="13 MiB")' in result.stdout.str()  # 12 MiB and 1 KiB, rounded up and "hardware=" not in result.stdout.str()
    assert "update the baseline" not in result.stdout.str()
