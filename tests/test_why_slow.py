"""Why it is slow, where people read it (issue 36): the failure's line of what changed in
utilisation and its recommendations, the JSON report's ``utilisation`` and ``recommendations``,
`neuronprof show`, the verdict said in a word everywhere (accepted, allowed, new, does-not-fit),
one row per op, a replaced op's modules, what became of --neuron-reason, the page's trace links,
a memory finding's merged groups, the graph trace's DMA queue and the re-record hint of a test
whose chips its marker picks."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import report_page_scenario as scenario
from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.cli import main
from pytest_neuronprof.cli.render import compare_text, summary_rows
from pytest_neuronprof.costmodel.profiles import load_hardware
from pytest_neuronprof.costmodel.recommendations import Recommendation
from pytest_neuronprof.gate.decode import Decoder
from pytest_neuronprof.gate.compare import Finding, GatePolicy, Kind, Status, Verdict, compare
from pytest_neuronprof.gate.memory import MemorySummary, PeakGroup, memory_reason
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import html, markdown
from pytest_neuronprof.outputs.json_report import REPORT_VERSION
from pytest_neuronprof.outputs.rows import accepted_rows, finding_rows, verdict_word
from pytest_neuronprof.outputs.terminal import failure_section, session_table
from pytest_neuronprof.outputs.trace_files import trace_file_name
from pytest_neuronprof.outputs.why import change_line, changed_ops, failure_recommendations
from pytest_neuronprof.profiler.trace import trace_events

pytest_plugins = ["pytester"]

SUITE = '''
import json
import pathlib

import pytest
import torch

HERE = pathlib.Path(__file__).parent


@pytest.mark.neuron_profile{marker}
def test_mm():
    k = json.loads((HERE / "knobs.json").read_text())
    a = torch.randn(1024, 1024, dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, dtype=torch.bfloat16)
    for part in range(k["split"]):  # the same product in k["split"] slices of its rows
        a[part * 1024 // k["split"]:(part + 1) * 1024 // k["split"]] @ b
'''


@pytest.fixture(autouse=True)
def lean(lean_inner_runs: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # the slices' tensors change the peak: the memory gate has its own tests
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:cacheprovider "
                       "--neuron-memory-threshold=100000%")


def suite(pytester: pytest.Pytester, split: int = 1, marker: str = "") -> None:
    pytester.makepyfile(test_mm=SUITE.format(marker=marker))
    knobs(pytester, split)


def knobs(pytester: pytest.Pytester, split: int) -> None:
    (pytester.path / "knobs.json").write_text(json.dumps({"split": split}))


# --- a real failure -------------------------------------------------------------------------------

def test_a_failure_says_what_changed_in_utilisation_and_the_recommendation_it_brought(pytester):
    """One 1024^3 product made 64 of 16 rows each: the same work, in kernels dominated by their
    launch. The failure says so before its table (MFU down, time bound by a fixed cost) and
    names Explorer's rule about the op that changed; the report carries both."""
    suite(pytester)
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    knobs(pytester, 64)
    result = pytester.runpytest("--neuron-report", "report.json")
    result.assert_outcomes(failed=1)
    lines = result.stdout.lines
    head = next(i for i, line in enumerate(lines) if line.startswith("device time regression on simulated:trn2"))
    change = lines[head + 1]
    before, after = (float(v) for v in re.findall(r"MFU ([\d.]+)% -> ([\d.]+)%", change)[0])
    assert change.startswith("utilisation: MFU ") and after < before / 4
    assert re.search(r"time bound by .*fixed cost [\d.]+% -> 100%", change), change
    # one row: its time and its calls (in the failure: under CI=true the short summary repeats it)
    failure = result.stdout.str().split("short test summary info")[0].splitlines()
    assert sum(line.startswith("aten::mm ") for line in failure) == 1
    advice = lines[lines.index("why it is slow (Neuron Explorer's rules that name the ops that changed):") + 1]
    assert advice.startswith("- Kernels dominated by their fixed cost (eager: one NEFF per op): ")
    assert "aten::mm" in advice and "glossary.rst" in advice
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["report_version"] == REPORT_VERSION
    test = report["tests"]["test_mm.py::test_mm"]
    assert test["utilisation"]["mfu_estimated_percent"] == pytest.approx(after, abs=0.6)
    assert test["recommendations"][0]["rule"] == "fixed_cost"
    assert test["recommendations"][0]["ops"][0] == "aten::mm"  # the most time at stake first
    # one big product is not bound by its fixed cost: the rule is gone from its list
    knobs(pytester, 1)
    pytester.runpytest("--neuron-report", "again.json").assert_outcomes(passed=1)
    again = json.loads((pytester.path / "again.json").read_text())["tests"]["test_mm.py::test_mm"]
    assert "fixed_cost" not in [r["rule"] for r in again["recommendations"]]
    assert again["utilisation"]["mfu_estimated_percent"] == pytest.approx(before, abs=0.6)  # as recorded


def test_neuronprof_show_prints_the_utilisation_and_recommendations_of_a_report(pytester, capsys):
    suite(pytester, 64)
    pytester.runpytest("--neuron-report", "report.json").assert_outcomes(passed=1)
    assert main(["show", str(pytester.path / "report.json")]) == 0
    out = capsys.readouterr().out
    assert "test_mm.py::test_mm [simulated:trn2]: utilisation: MFU " in out
    assert re.search(r"mfu_estimated_percent\s+[\d.]+%\s+model FLOPs", out)
    assert "- Kernels dominated by their fixed cost" in out


def test_show_gives_each_ops_bound_and_the_share_of_its_peak_it_reaches(pytester, capsys):
    suite(pytester)
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    assert main(["show", str(pytester.path / "baselines")]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if line.strip().startswith("op "))
    assert header.split()[-3:] == ["bound", "of", "peak"]
    row = next(line.split() for line in out.splitlines() if line.strip().startswith("aten::mm"))
    entry = json.loads(next((pytester.path / "baselines").rglob("*.json")).read_text())
    mm = entry["tests"]["test_mm.py::test_mm"]["simulated:trn2"]["ops"]["aten::mm"]
    # 2 x 1024^3 FLOPs at bf16's 79 TFLOP/s on each of the logical core's two arrays
    share = mm["flops"] / (79e6 * 2) / mm["device_time_us"]
    assert row[-2:] == ["TensorE", f"{round(share, 3) * 100:g}%"]


def test_an_entry_keeps_no_element_counts_so_a_lane_ops_share_of_its_peak_is_not_said():
    hbm = OpSummary(1, 10.0, "DMA", 0, 7_250_000, 0.5, "", bound="HBM", dtype="float32")
    lane = OpSummary(1, 10.0, "Vector", 0, 4096, 0.5, "", bound="VectorE", dtype="float32")
    summary = ProfileSummary("simulated", "trn2", "7", "2.13", 20.0, {"aten::copy_": hbm, "aten::add": lane})
    rows = {row[0]: row[-2:] for row in summary_rows(summary)}
    assert rows == {"aten::copy_": ["HBM", "100%"], "aten::add": ["VectorE", "-"]}  # 7.25 MB at 725 GB/s


# --- accepted, allowed, new and does-not-fit, said everywhere -------------------------------------------

def allowed_outcome() -> TestOutcome:
    base = scenario.profile()
    slower = replace(base, ops={**base.ops, "aten::gelu": replace(base.ops["aten::gelu"], device_time_us=30.0)},
                     total_device_time_us=base.total_device_time_us + 30.0 - base.ops["aten::gelu"].device_time_us)
    verdict = compare(base, slower, GatePolicy(allow={"aten::gelu": "a wider activation, #7"}))
    return TestOutcome("tests/test_b.py::test_allowed", ("tests/test_b.py", 1), verdict, slower, base)


def test_every_table_says_the_verdict_in_a_word():
    outcomes = [*scenario.outcomes(), allowed_outcome()]
    words = {o.nodeid: verdict_word(o) for o in outcomes if o.current.hardware == "trn2"}
    assert words == {scenario.UNCHANGED: "pass", scenario.ACCEPTED: "accepted", scenario.CHIPS: "pass",
                     scenario.NEW: "new", scenario.REGRESSED: "regression", scenario.TOO_BIG: "does-not-fit",
                     "tests/test_b.py::test_allowed": "allowed"}
    # the terminal's session table
    rows = {line.split()[0]: line.split()[-1] for line in session_table(outcomes).splitlines()[2:]}
    for nodeid, word in words.items():
        assert rows[nodeid] == word, nodeid
    # `neuronprof compare` (a failure in capitals) and Markdown (in bold)
    comparison = type("C", (), {"outcomes": outcomes, "only_old": [], "policies": {},
                                "regressions": [], "does_not_fit": [], "compared": outcomes,
                                "problem": lambda self: None})()
    text = compare_text(type("L", (), {"path": Path("old"), "kind": "baselines", "count": lambda self: 7})(),
                        type("L", (), {"path": Path("new"), "kind": "baselines", "count": lambda self: 7})(),
                        comparison)
    table: dict[str, str] = {}
    for line in text.splitlines():  # the totals table's row: a test's first line (its details follow)
        if line.startswith("tests/"):
            table.setdefault(line.split()[0], line.split()[-1])
    assert table[scenario.ACCEPTED] == "accepted" and table["tests/test_b.py::test_allowed"] == "allowed"
    assert table[scenario.NEW] == "new" and table[scenario.TOO_BIG] == "DOES-NOT-FIT"
    md = markdown.totals_markdown(outcomes)
    assert re.search(rf"`{re.escape(scenario.ACCEPTED)}` .*\| accepted +\|", md)
    assert all(re.search(rf"\| {word} +\|", md) for word in (r"\*\*does-not-fit\*\*", "allowed", "new"))
    assert markdown.counts_line(outcomes).startswith("**1 regression**, **1 does-not-fit**, 1 accepted")
    # the page's badges, from the same word
    assert {o.nodeid: html.badge(o) for o in outcomes if o.current.hardware == "trn2"} == words


# --- one row per op -----------------------------------------------------------------------------------

def test_an_op_slower_and_called_more_is_one_row_also_in_the_accepted_table():
    slower = Finding(Kind.SLOWER, "aten::mm", "mlp", 100.0, 300.0, 0.1, "12 -> 96 calls, each 8x smaller")
    calls = Finding(Kind.CALLS, "aten::mm", "mlp", 12, 96, 0.1, "12 -> 96 calls, each 8x smaller (same total work)")
    rows = finding_rows([slower, calls])
    assert rows == [["aten::mm", "mlp", "100.000 us (12 calls)", "300.000 us (96 calls)", "+200.0%", "10%",
                     "12 -> 96 calls, each 8x smaller (same total work)"]]
    assert finding_rows([calls]) == [calls.cells()]  # calls alone: its own row
    base = summarize({"aten::mm": (12, 100.0)})
    now = summarize({"aten::mm": (96, 300.0)})
    accepted = TestOutcome("t.py::t", ("t.py", 1), Verdict(Status.PASS, accepted=(slower, calls),
                                                           accepted_reason="why"), now, base)
    (row,) = accepted_rows(accepted)
    assert row[:4] == ["aten::mm", "100.000 us (12 calls)", "300.000 us (96 calls)", "+200.0%"]
    assert row[4] == "300.000 us (96 calls)"  # what this run measured: the same


def summarize(ops: dict[str, tuple[int, float]], modules: dict[str, dict[str, float]] | None = None) -> ProfileSummary:
    total = sum(t for _, t in ops.values())
    return ProfileSummary("simulated", "trn2", "7", "2.13", total, {
        name: OpSummary(count, t, "Tensor", 0, 0, round(t / total, 6), modules=(modules or {}).get(name, {"mlp": t}))
        for name, (count, t) in ops.items()})


def test_a_replaced_op_lists_every_module_it_changed():
    layers = [f"model.layers.{i}.self_attn" for i in range(4)]
    sdpa, bmm = "aten::_scaled_dot_product_flash_attention", "aten::bmm"
    base = summarize({sdpa: (4, 40.0), "aten::mm": (4, 400.0)},
                     {sdpa: {layer: 10.0 for layer in layers}, "aten::mm": {layer: 100.0 for layer in layers}})
    now = summarize({bmm: (8, 120.0), "aten::mm": (4, 400.0)},
                    {bmm: {layer: 30.0 for layer in layers}, "aten::mm": {layer: 100.0 for layer in layers}})
    verdict = compare(base, now, GatePolicy())
    replaced = next(f for f in verdict.regressions if f.kind == Kind.REPLACED)
    assert [path for path, _, _ in replaced.modules] == layers
    assert replaced.to_json()["modules"] == [[layer, 10.0, 30.0] for layer in layers]  # the JSON's form
    cell = replaced.cells()[1]
    assert cell == ("model.layers.0.self_attn (+200.0%), model.layers.1.self_attn (+200.0%), "
                    "model.layers.2.self_attn (+200.0%), +1 more")


# --- what --neuron-reason did --------------------------------------------------------------------------

def test_a_reason_given_to_a_whole_suite_after_a_plain_re_record_says_where_it_went(pytester):
    suite(pytester)
    pytester.makepyfile(test_other=SUITE.format(marker="").replace("def test_mm", "def test_other"))
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=2)
    knobs(pytester, 2)
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=2)  # a plain re-record: no reason
    result = pytester.runpytest("--neuron-baseline", "--neuron-reason", "slices, #4")
    result.assert_outcomes(passed=2)
    line = next(line for line in result.stdout.lines if line.startswith("--neuron-reason"))
    assert line.startswith("--neuron-reason 'slices, #4': written to no entry; not written to 2 whose "
                           "numbers did not change in this recording: a reason goes with the numbers it accepts")
    assert "name their tests: pytest --neuron-baseline --neuron-reason '...' <test id>" in line
    # named, as the line says: written
    named = pytester.runpytest("--neuron-baseline", "--neuron-reason", "slices, #4", "test_mm.py::test_mm")
    line = next(line for line in named.stdout.lines if line.startswith("--neuron-reason"))
    assert line == "--neuron-reason 'slices, #4': written to 1 entry (test_mm.py::test_mm)"


# --- the page's trace links ---------------------------------------------------------------------------

def test_the_page_links_every_trace_whether_or_not_the_session_mixes_one_and_several_chips(pytester):
    pytester.makepyfile(test_several_chips=  # not tests/test_chips.py's module name
                        SUITE.format(marker='(hardware=["trn2", "trn1"])').replace(
        "def test_mm", "def test_chips"))
    knobs(pytester, 1)
    pytester.runpytest("--neuron-html", "site/html", "--neuron-trace-dir", "site/traces").assert_outcomes(passed=1)
    only_chips = (pytester.path / "site" / "html" / "index.html").read_text()
    suite(pytester)
    pytester.runpytest("--neuron-html", "site/html", "--neuron-trace-dir", "site/traces").assert_outcomes(passed=2)
    mixed = (pytester.path / "site" / "html" / "index.html").read_text()
    names = [trace_file_name("test_several_chips.py::test_chips [simulated:trn2]"),
             trace_file_name("test_several_chips.py::test_chips [simulated:trn1]")]
    for page in (only_chips, mixed):
        for name in names:
            assert (pytester.path / "site" / "traces" / name).is_file()
            assert f'href="../traces/{name}"' in page
        # where the traces are: a sibling folder, not "next to this page"
        assert "Chrome trace files in <code>../traces</code> (relative to this page)" in page
    assert f'href="../traces/{trace_file_name("test_mm.py::test_mm")}"' in mixed


# --- a memory finding names what grew, grouped ------------------------------------------------------------

def test_a_longer_kv_cache_in_32_layers_is_one_group_with_its_total():
    def caches(tokens: int) -> tuple[PeakGroup, ...]:
        return tuple(PeakGroup("aten::cat", f"model.layers.{i}.self_attn", (1, 32, tokens, 128), "bfloat16", 2,
                               2 * 32 * tokens * 128 * 2) for i in range(32))
    weights = PeakGroup("(resident)", "", (4096, 4096), "bfloat16", 128, 128 * 4096 * 4096 * 2)
    old = MemorySummary(weights.bytes + sum(g.bytes for g in caches(8192)), weights.bytes, live=(weights, *caches(8192)))
    new = MemorySummary(weights.bytes + sum(g.bytes for g in caches(16384)), weights.bytes, live=(weights, *caches(16384)))
    reason = memory_reason(old, new)
    assert ("new at the peak: 64 x bfloat16[1,32,16384,128] from aten::cat in 32 modules "
            "(model.layers.0.self_attn, model.layers.1.self_attn, +30 more), 8 GiB") in reason
    assert "allocated +4 GiB" in reason


# --- the graph trace's DMA queue --------------------------------------------------------------------------

def test_a_graph_trace_shows_what_the_device_waits_on():
    """Graph execution: the transfers on the DMA queue are slices of their own, back to back, and
    where every engine's track is idle (a memory-bound chain: the engines wait on HBM), the
    queue's slices cover the gap, to the end of the graph."""
    x = torch.empty(8192, 8192, dtype=torch.bfloat16, device="meta")
    w = [torch.empty(8192, 8192, dtype=torch.bfloat16, device="meta") for _ in range(2)]
    with NeuronProfiler(NeuronConfig(execution="graph")) as prof:
        y = x
        for weight in w:
            y = torch.relu(y + weight)
    result = prof.result
    events = trace_events(result)
    queue = [e for e in events if e.get("cat") == "dma"]
    (track,) = [e for e in events if e.get("args", {}).get("name") == "DMA queue"]
    assert queue and all(e["tid"] == track["tid"] and e["name"].startswith("DMA for aten::") for e in queue)
    # no slice overlaps the next (ts and ends are rounded to the nanosecond: their float sum may
    # differ in the last bits)
    assert all(a["ts"] + a["dur"] <= b["ts"] + 1e-6 for a, b in zip(queue, queue[1:]))
    moved = sum(e["dur"] for e in queue)
    assert moved == pytest.approx(result.utilisation.active_us["DMA"], rel=1e-3)
    kernels = sorted((e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") == "kernel")
    start, end = kernels[0][0], kernels[0][0] + result.total_device_time_us
    gaps, busy_until = [], start
    for begin, finish in kernels + [(end, end)]:
        if begin > busy_until + 1e-3:
            gaps.append((busy_until, begin))
        busy_until = max(busy_until, finish)
    assert gaps and sum(b - a for a, b in gaps) > 0.2 * result.total_device_time_us  # the engines wait
    for gap_start, gap_end in gaps:  # and the queue says on what: a transfer spans every moment of it
        covered = sum(max(0.0, min(gap_end, e["ts"] + e["dur"]) - max(gap_start, e["ts"])) for e in queue)
        assert covered == pytest.approx(gap_end - gap_start, rel=1e-3), (gap_start, gap_end)


# --- the re-record hint of a test whose chips its marker picks -----------------------------------------------

def test_the_no_baseline_hint_of_a_test_whose_marker_picks_its_chip_needs_no_option(pytester):
    suite(pytester, marker='(hardware="trn1", execution="graph")')
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["test_mm.py::test_mm: no baseline for simulated:trn1:graph (passes); "
                                 "record it with pytest --neuron-baseline 'test_mm.py::test_mm'"])
    # the option's chip, not the marker's: named
    suite(pytester)
    again = pytester.runpytest("--neuron-hardware", "trn1")
    again.stdout.fnmatch_lines(["*record it with pytest --neuron-baseline --neuron-hardware trn1 'test_mm.py::test_mm'"])


# --- an optimizer's first step in the session's table ---------------------------------------------------------

def test_the_top_hotspot_says_when_it_is_an_optimizers_state_being_made():
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.AdamW(model.parameters())
    with NeuronProfiler(NeuronConfig(execution="graph")) as prof:
        model(torch.randn(8, 64)).sum().backward()
        optimizer.step()
    from pytest_neuronprof.gate.summary import summarize as gate_summarize

    summary = gate_summarize(prof.result, "7", torch.__version__)
    outcome = TestOutcome("t.py::step", ("t.py", 1), Verdict(Status.NO_BASELINE), summary, None,
                          recommendations=tuple(prof.result.recommendations()))
    top = summary.ranked()[0][0]
    assert top == "aten::zeros_like"
    assert f"{top} (" in session_table([outcome]) and "one-time optimizer state)" in session_table([outcome])


def test_a_failure_shows_only_the_recommendations_about_the_ops_that_changed():
    o = next(o for o in scenario.outcomes() if o.nodeid == scenario.REGRESSED)
    shown = failure_recommendations(o)
    assert shown and all({"aten::clone", "aten::bmm", "aten::_softmax", "aten::_scaled_dot_product_flash_attention"}
                         & set(r.ops) for r in shown)
    assert len(shown) < len(o.recommendations) or all(r in o.recommendations for r in shown)
    text = failure_section(o)
    assert text.splitlines()[1] == f"utilisation: {change_line(o)}"
    assert "why it is slow" in text and shown[0].condition in text
    assert load_hardware("trn2").hbm_bytes_per_us == 725e3



def test_a_failure_shows_a_recommendation_about_a_changed_op_it_does_not_name():
    """A rule names the three ops with the most at stake; the op that changed may be among its
    "+N more" (a new copy among many small kernels): the failure shows it all the same."""
    o = next(o for o in scenario.outcomes() if o.nodeid == scenario.REGRESSED)
    changed = sorted(changed_ops(o))[0]
    unnamed = Recommendation("fixed_cost", "Kernels dominated by their fixed cost", "found", "act", 5.0,
                             ("aten::a", "aten::b", "aten::c"), 1, ("m",), 0, "src",
                             ("aten::a", "aten::b", "aten::c", changed))
    elsewhere = replace(unnamed, rule="small_dma", about=("aten::a", "aten::b", "aten::c", "aten::d"))
    with_both = replace(o, recommendations=(unnamed, elsewhere))
    assert failure_recommendations(with_both) == [unnamed]
    # and it survives the report's round trip
    assert Recommendation.from_json(unnamed.to_json(), Decoder(ValueError), "r") == unnamed


# --- the failure docs/guide/failures.md shows is what pytest prints for its code --------------------------

FAILURES_PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "failures.md"


def test_the_failure_the_guide_shows_is_what_pytest_prints_for_its_code(pytester, monkeypatch):
    """docs/guide/failures.md, "Why it is slow: utilisation and recommendations", run as the
    reader would: its test recorded, its last line replaced by the loop it shows, and the failure
    pytest prints is the page's block, line for line (the utilisation line and the
    recommendations included); the optimizer step's summary row too, and the page's fix (one
    step before the region) leaves no state creation in it."""
    # the reader's options: the memory gate at its default
    monkeypatch.setenv("PYTEST_ADDOPTS", "-p no:hypothesispytest -p no:cacheprovider")
    text = FAILURES_PAGE.read_text(encoding="utf-8")
    section = text[text.index("## Why it is slow: utilisation and recommendations"):text.index("## The page")]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    test, loop, step, fix = [body for lang, body in blocks if lang == "python"]
    failure, summary = [body.splitlines() for lang, body in blocks if lang == ""]

    def shown_in(lines: list[str], block: list[str]) -> bool:
        return any(lines[i:i + len(block)] == block for i, line in enumerate(lines) if line == block[0])

    last = "        a @ b\n"
    assert test.endswith(last)
    pytester.makepyfile(test_product=test)
    pytester.runpytest("test_product.py", "--neuron-baseline").assert_outcomes(passed=1)
    pytester.makepyfile(test_product=test[:-len(last)] + loop)
    result = pytester.runpytest("test_product.py")
    result.assert_outcomes(failed=1)
    assert failure[1].startswith("utilisation: MFU ") and any(line.startswith("why it is slow") for line in failure)
    assert shown_in(result.stdout.lines, failure), "\n".join(result.stdout.lines)

    pytester.makepyfile(test_step=step)
    result = pytester.runpytest("test_step.py")
    result.assert_outcomes(passed=1)
    assert "one-time optimizer state" in summary[-1]
    assert shown_in(result.stdout.lines, summary), "\n".join(result.stdout.lines)
    region = "    with neuron_profile:\n"
    pytester.makepyfile(test_step=step[:step.index(region)] + fix)
    result = pytester.runpytest("test_step.py", "--neuron-report", "report.json")
    result.assert_outcomes(passed=1)
    assert "one-time optimizer state" not in result.stdout.str()
    report = json.loads((pytester.path / "report.json").read_text())["tests"]["test_step.py::test_training_step"]
    assert "state_creation" not in [r["rule"] for r in report["recommendations"]]
    assert "aten::zeros_like" not in report["current"]["ops"]
