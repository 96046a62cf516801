"""Every chip from one run (issue 18, item 3): ``--neuron-hardware trn2,h200`` (ini, marker)
captures a test once, costs it on each chip and gates each against its own variant's baseline;
the outputs show a chip column, the re-record hints name the chips, `neuronprof compare --by
chip` puts them side by side.

The workload: a bfloat16 matrix product on meta tensors, 2048x2048, that knobs.json grows to
2049x2049. On trn2 the product costs +19.5 % (one more 128-wide tile row, on a large product),
on h200 +74.5 % (its small-tile kernel choice): under a 50 % threshold the change regresses on
h200 only; the tensors' bytes (the memory gate's) grow 0.1 %. The expected numbers come from
profiling the same work directly on each chip."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_neuronprof.formatting import format_bytes, format_us

pytest_plugins = ["pytester"]

NODE = "test_work.py::test_work"
SUITE = '''
import json
import pathlib

import pytest
import torch

HERE = pathlib.Path(__file__).parent


@pytest.mark.neuron_profile(threshold=0.5{marker})
def test_work():
    path = HERE / "knobs.json"
    n = json.loads(path.read_text())["n"] if path.exists() else 2048
    a = torch.ones(n, n, dtype=torch.bfloat16, device="meta")
    a @ a
'''


@pytest.fixture(autouse=True)
def _lean(lean_inner_runs: None) -> None:
    """Inner runs without hypothesis' plugin, the cache or GitHub's outputs."""


def suite(pytester: pytest.Pytester, marker: str = "", ini: str = "") -> None:
    pytester.makepyfile(test_work=SUITE.format(marker=marker))
    if ini:
        pytester.makeini(f"[pytest]\n{ini}\n")


def grow(pytester: pytest.Pytester) -> None:
    (pytester.path / "knobs.json").write_text(json.dumps({"n": 2049}))


def entries(pytester: pytest.Pytester) -> dict:
    return json.loads((pytester.path / "baselines" / "test_work.json").read_text())["tests"][NODE]


def direct_total(hardware: str, n: int = 2048) -> float:
    """The workload profiled on one chip, as a one-chip run records it."""
    import torch

    from pytest_neuronprof import NeuronConfig, NeuronProfiler

    with NeuronProfiler(NeuronConfig(hardware=hardware)) as prof:
        a = torch.ones(n, n, dtype=torch.bfloat16, device="meta")
        a @ a
    return prof.result.total_device_time_us


def test_one_run_records_an_entry_per_chip_with_each_chips_own_numbers(pytester: pytest.Pytester):
    suite(pytester)
    result = pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-baseline")
    result.assert_outcomes(passed=1)
    recorded = entries(pytester)
    assert list(recorded) == ["simulated:h200", "simulated:trn2"]  # sorted keys in the file
    for chip in ("trn2", "h200"):
        assert recorded[f"simulated:{chip}"]["hardware"] == chip
        assert recorded[f"simulated:{chip}"]["total_device_time_us"] == pytest.approx(
            direct_total(chip), abs=1e-3)
    assert recorded["simulated:h200"]["total_device_time_us"] < recorded["simulated:trn2"]["total_device_time_us"]
    # the summary has a row per chip, with a chip column
    result.stdout.re_match_lines([r"test\s+chip\s+device time", rf"{NODE}\s+trn2\s+", rf"{NODE}\s+h200\s+"])


def test_one_chip_records_as_before_and_the_same_entry_as_a_run_of_several(pytester: pytest.Pytester):
    suite(pytester)
    pytester.runpytest("--neuron-hardware", "h200", "--neuron-baseline").assert_outcomes(passed=1)
    alone = entries(pytester)
    assert list(alone) == ["simulated:h200"]
    (pytester.path / "baselines" / "test_work.json").unlink()
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-baseline").assert_outcomes(passed=1)
    assert entries(pytester)["simulated:h200"] == alone["simulated:h200"]


def test_a_regression_on_one_chip_fails_the_test_naming_that_chip(pytester: pytest.Pytester):
    suite(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-baseline").assert_outcomes(passed=1)
    pytester.runpytest("--neuron-hardware", "trn2,h200").assert_outcomes(passed=1)  # unchanged: both pass
    grow(pytester)
    result = pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-report", "report.json",
                                "--junitxml", "junit.xml")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "device time regression on simulated:h200 " in text
    assert "regression on simulated:trn2" not in text
    # one command re-records both chips
    assert f"update the baseline: pytest --neuron-baseline --neuron-hardware trn2,h200 '{NODE}'" in text
    # the per-chip deltas are the chips' own
    trn2 = direct_total("trn2", 2049) / direct_total("trn2") - 1
    h200 = direct_total("h200", 2049) / direct_total("h200") - 1
    assert trn2 < 0.5 < h200
    report = json.loads((pytester.path / "report.json").read_text())
    tests = report["tests"]
    assert sorted(tests) == [f"{NODE} [simulated:h200]", f"{NODE} [simulated:trn2]"]
    assert tests[f"{NODE} [simulated:h200]"]["verdict"]["status"] == "regression"
    assert tests[f"{NODE} [simulated:trn2]"]["verdict"]["status"] == "pass"
    assert tests[f"{NODE} [simulated:trn2]"]["current"]["hardware"] == "trn2"
    assert report["counts"] == {"pass": 1, "regression": 1}
    # JUnit: the first chip's properties unsuffixed, then each chip's
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "junit.xml").iter("property")}
    assert props["neuron_verdict"] == "pass"
    assert props["neuron_verdict[trn2]"] == "pass" and props["neuron_verdict[h200]"] == "regression"
    assert float(props["neuron_delta[trn2]"]) == pytest.approx(trn2, abs=1e-4)
    assert float(props["neuron_delta[h200]"]) == pytest.approx(h200, abs=1e-4)
    # the summary lists the regressed chip first
    result.stdout.re_match_lines([rf"{NODE}\s+h200\s+.*regression", rf"{NODE}\s+trn2\s+.*pass"])


def test_the_marker_takes_a_list_of_chips(pytester: pytest.Pytester):
    suite(pytester, marker=', hardware=["trn2", "inf2"]')
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    recorded = entries(pytester)
    assert list(recorded) == ["simulated:inf2", "simulated:trn2"]
    assert recorded["simulated:inf2"]["total_device_time_us"] == pytest.approx(
        direct_total("inf2"), abs=1e-3)


def test_the_marker_takes_a_comma_separated_string_and_replaces_the_options_chips(pytester: pytest.Pytester):
    suite(pytester, marker=', hardware="h200,trn3"')
    pytester.runpytest("--neuron-hardware", "trn2,inf2", "--neuron-baseline").assert_outcomes(passed=1)
    assert list(entries(pytester)) == ["simulated:h200", "simulated:trn3"]


def test_the_ini_key_takes_several_chips(pytester: pytest.Pytester):
    suite(pytester, ini="neuron_hardware = trn2, trn3")
    pytester.runpytest("--neuron-baseline").assert_outcomes(passed=1)
    assert list(entries(pytester)) == ["simulated:trn2", "simulated:trn3"]
    grow(pytester)
    result = pytester.runpytest()  # each chip gated against its own entry
    assert result.ret in (0, 1)
    report_line = [line for line in result.stdout.lines if line.startswith(NODE)]
    assert len(report_line) == 2


@pytest.mark.parametrize("backend", ["cpu"])
def test_several_chips_on_a_measured_backend_is_a_usage_error(pytester: pytest.Pytester, backend: str):
    suite(pytester)
    result = pytester.runpytest("--neuron-backend", backend, "--neuron-hardware", "trn2,h200")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--neuron-hardware (ini neuron_hardware)=trn2,h200: the cpu backend "
                                 "measures the one device this machine has*"])


def test_several_chips_in_a_marker_on_a_measured_backend_fails_that_test(pytester: pytest.Pytester):
    suite(pytester, marker=', hardware="trn2,h200"')
    result = pytester.runpytest("--neuron-backend", "cpu")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{NODE}: neuron_profile hardware=trn2,h200: the cpu backend measures*"])


def test_a_chip_listed_twice_is_an_error_naming_it(pytester: pytest.Pytester):
    suite(pytester)
    result = pytester.runpytest("--neuron-hardware", "trn2,h200,trn2")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--neuron-hardware (ini neuron_hardware)=trn2,h200,trn2: trn2 is "
                                 "listed more than once*"])


def test_an_unknown_chip_in_a_list_names_the_choices(pytester: pytest.Pytester):
    suite(pytester)
    result = pytester.runpytest("--neuron-hardware", "trn2,tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--neuron-hardware (ini neuron_hardware)='tpu': unknown; valid choices:*h200*"])


def test_no_baseline_hint_records_every_chip(pytester: pytest.Pytester):
    suite(pytester)
    result = pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-execution", "graph")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"{NODE}: no baseline for simulated:h200:graph (passes); record it with "
                                 f"pytest --neuron-baseline --neuron-hardware trn2,h200 --neuron-execution "
                                 f"graph '{NODE}'"])


def test_compare_by_chip_puts_the_chips_side_by_side(pytester: pytest.Pytester, capsys: pytest.CaptureFixture):
    from pytest_neuronprof.cli.commands import main

    suite(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-baseline",
                       "--neuron-baseline-dir", "old").assert_outcomes(passed=1)
    grow(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-baseline",
                       "--neuron-baseline-dir", "new").assert_outcomes(passed=1)
    old, new = pytester.path / "old", pytester.path / "new"

    def total(folder: Path, chip: str) -> float:
        return json.loads((folder / "test_work.json").read_text())["tests"][NODE][f"simulated:{chip}"][
            "total_device_time_us"]

    def peak(folder: Path, chip: str) -> int:
        return json.loads((folder / "test_work.json").read_text())["tests"][NODE][f"simulated:{chip}"][
            "memory"]["peak_bytes"]

    trn2 = f"{(total(new, 'trn2') / total(old, 'trn2') - 1) * 100:+.1f}%"
    h200 = f"{(total(new, 'h200') / total(old, 'h200') - 1) * 100:+.1f}%"
    capsys.readouterr()
    # the h200 regression, gated by the marker's threshold=0.5 the entries were recorded with
    assert main(["compare", str(old), str(new), "--by", "chip"]) == 1
    text = capsys.readouterr().out
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("test"))
    assert header.split() == ["test", "h200", "trn2"]
    row = next(line for line in lines if line.startswith(NODE))
    # each chip's change, with its device time and peak in NEW; the verdict when it fails (the
    # marker's threshold=0.5, which the entries were recorded with: trn2's +16.6 % passes)
    shown = {chip: f"{format_us(total(new, chip))}, {format_bytes(peak(new, chip))}" for chip in ("trn2", "h200")}
    assert row.split() == [NODE, h200, *f"({shown['h200']})".split(), "REGRESSION",
                           trn2, *f"({shown['trn2']})".split()]
    assert f"{NODE}: this change costs {trn2} on trn2 and {h200} on h200" in text or \
        f"{NODE}: this change costs {h200} on h200 and {trn2} on trn2" in text
    # how the chips compare, read off the same table: each against the one that takes least
    fastest, other = sorted(("trn2", "h200"), key=lambda chip: total(new, chip))
    assert (f"{NODE}: in NEW, {other} {total(new, other) / total(new, fastest):.2f}x {fastest}'s "
            "device time") in text
    # the marker's threshold wins over the command line's, as over the plugin's options
    assert main(["compare", str(old), str(new), "--by", "chip", "--threshold", "5%"]) == 1
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(NODE))
    assert row.split() == [NODE, h200, *f"({shown['h200']})".split(), "REGRESSION",
                           trn2, *f"({shown['trn2']})".split()]
    assert main(["compare", str(old), str(new), "--by", "chip", "--format", "json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["chips"] == ["h200", "trn2"]
    chips = document["tests"][0]["chips"]
    assert chips["h200"]["delta"] == pytest.approx(total(new, "h200") / total(old, "h200") - 1, abs=1e-6)
    assert (chips["trn2"]["new_total_us"], chips["trn2"]["new_peak_bytes"]) == (total(new, "trn2"), peak(new, "trn2"))
    assert chips["trn2"]["old_peak_bytes"] == peak(old, "trn2")
    assert main(["compare", str(old), str(new), "--by", "chip", "--format", "markdown"]) == 1
    markdown = capsys.readouterr().out
    assert f"| {h200} ({shown['h200']}) **regression**" in markdown and "| h200" in markdown


def test_compare_of_reports_of_several_chips(pytester: pytest.Pytester, capsys: pytest.CaptureFixture):
    from pytest_neuronprof.cli.commands import main

    suite(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-report", "old.json")
    grow(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-report", "new.json")
    capsys.readouterr()
    assert main(["compare", "old.json", "new.json", "--format", "markdown"]) == 1
    markdown = capsys.readouterr().out
    # the findings tables name each row's variant: the two chips' rows can be told apart
    assert "| test" in markdown and "| variant" in markdown.split("### Regressions")[1].split("###")[0]
    assert main(["compare", "old.json", "new.json"]) == 1
    last = capsys.readouterr().out.rstrip().splitlines()[-1]
    # named with its variant (the test has two); trn2's +16.6 % passes at the marker's 50 %,
    # which the reports' entries were recorded with
    assert last == f"1 regression in 2 compared test entries: {NODE} [simulated:h200]"


def test_html_page_has_a_chip_column_and_a_section_per_chip(pytester: pytest.Pytester):
    suite(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-baseline")
    grow(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-html", "html",
                       "--neuron-trace-dir", "traces").assert_outcomes(failed=1)
    page = (pytester.path / "html" / "index.html").read_text()
    # a trace per chip, each section linking its own chip's
    from pytest_neuronprof.outputs.trace_files import trace_file_name

    for chip in ("trn2", "h200"):
        name = trace_file_name(f"{NODE} [simulated:{chip}]")
        trace = json.loads((pytester.path / "traces" / name).read_text())
        assert f'"{chip}"' in json.dumps(trace)
        section = page.split(f"<code>{NODE}</code> on {chip}")[1].split("</section>")[0]
        assert f'href="../traces/{name}"' in section
    assert "<th>chip</th>" in page
    overview = page.split("<tbody>")[1].split("</tbody>")[0]
    assert overview.index("<td>h200</td>") < overview.index("<td>trn2</td>")  # regression first
    assert page.count('<section class="test') == 2
    assert f"<code>{NODE}</code> on h200" in page and f"<code>{NODE}</code> on trn2" in page


def test_github_annotation_names_the_chip_and_recording_command(pytester: pytest.Pytester,
                                                                 monkeypatch: pytest.MonkeyPatch):
    suite(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-baseline")
    grow(pytester)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("--neuron-hardware", "trn2,h200")
    errors = [line for line in result.stdout.lines if line.startswith("::error")]
    assert len(errors) == 1
    assert "title=device-time regression%3A test_work on h200::" in errors[0]  # ':' escaped
    assert "on simulated:h200" in errors[0]
    assert f"pytest --neuron-baseline --neuron-hardware trn2,h200 '{NODE}'" in errors[0]
    markdown = summary.read_text()
    assert "| variant" in markdown
    assert f"pytest --neuron-baseline --neuron-hardware trn2,h200 '{NODE}'" in markdown


def test_one_chips_hint_and_header_name_its_whole_variant(pytester: pytest.Pytester):
    """Issue 19: under h200, graph execution and an auto-cast, the failure names the full
    variant, and its command re-records that variant (the same run then passes)."""
    suite(pytester)
    options = ["--neuron-hardware", "h200", "--neuron-execution", "graph", "--neuron-auto-cast", "matmult"]
    pytester.runpytest(*options, "--neuron-baseline").assert_outcomes(passed=1)
    grow(pytester)
    result = pytester.runpytest(*options)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["device time regression on simulated:h200:graph:auto-cast=matmult (total *",
                                 "If this change is intended, update the baseline: pytest --neuron-baseline "
                                 "--neuron-hardware h200 --neuron-execution graph --neuron-auto-cast matmult "
                                 f"'{NODE}'"])
    hint = next(line for line in result.stdout.lines if line.startswith("If this change is intended"))
    command = hint.split("update the baseline: pytest ")[1].rsplit(" ", 1)[0].split()
    pytester.runpytest(*command).assert_outcomes(passed=1)
    assert list(entries(pytester)) == ["simulated:h200:graph:auto-cast=matmult"]
    pytester.runpytest(*options).assert_outcomes(passed=1)


ODD_IDS = """
import pytest
import torch


@pytest.mark.neuron_profile
@pytest.mark.parametrize("v", [1], ids=["x/y::z"])
def test_odd_ids(v):
    torch.ones(4, 4) + v
"""


def test_annotation_title_keeps_a_parameter_id_holding_colons(pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch):
    """Issue 19: ``test_odd_ids[x/y::z]`` was titled ``z]`` (the id split at its last ``::``)."""
    pytester.makepyfile(test_odd=ODD_IDS)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = pytester.runpytest()
    warnings = [line for line in result.stdout.lines if line.startswith("::warning")]
    assert len(warnings) == 1
    assert "title=device time not compared%3A test_odd_ids[x/y%3A%3Az]::" in warnings[0]


# --- the profiler's API ---------------------------------------------------------------------------

@pytest.mark.parametrize("execution", ["eager", "graph"])
def test_result_for_is_what_a_region_on_that_chip_records(execution: str):
    import torch

    from pytest_neuronprof import NeuronConfig, NeuronProfiler

    def step() -> None:
        a = torch.ones(300, 700, dtype=torch.bfloat16, device="meta")
        (a @ a.T).relu().sum()

    with NeuronProfiler(NeuronConfig(hardware="trn2", execution=execution), keep_capture=True) as prof:
        step()
    for chip in ("h200", "inf2", "trn3"):
        with NeuronProfiler(NeuronConfig(hardware=chip, execution=execution)) as direct:
            step()
        retimed = prof.result_for(chip)
        assert retimed.hardware == chip and retimed.execution == execution
        assert [(r.name, r.device_time_us, r.bound) for r in retimed.records] == \
            [(r.name, r.device_time_us, r.bound) for r in direct.result.records]
        assert retimed.execution_overhead_us == direct.result.execution_overhead_us
        assert getattr(retimed, "memory", None) == getattr(direct.result, "memory", None)
    assert prof.result.hardware == "trn2"  # the profiler's own result is untouched
    assert prof.result_for("trn2") is prof.result


def test_result_for_needs_the_capture_and_the_simulated_backend():
    import torch

    from pytest_neuronprof import NeuronConfig, NeuronProfiler
    from pytest_neuronprof.errors import ConfigError

    with NeuronProfiler(NeuronConfig()) as prof:
        torch.ones(4, 4) + 1
    with pytest.raises(RuntimeError, match="keep_capture=True"):
        prof.result_for("h200")
    with pytest.raises(ConfigError, match="unknown hardware profile 'tpu'"):
        prof.result_for("tpu")
    with pytest.raises(ConfigError, match="the cpu backend measures the one device"):
        NeuronProfiler(NeuronConfig(), backend="cpu", keep_capture=True)


@pytest.mark.slow  # starts a subprocess
def test_xdist_carries_every_chips_outcome_to_the_controller(pytester: pytest.Pytester):
    pytest.importorskip("xdist")
    suite(pytester)
    pytester.runpytest("--neuron-hardware", "trn2,h200", "--neuron-baseline").assert_outcomes(passed=1)
    grow(pytester)
    result = pytester.runpytest_subprocess("-n", "2", "--neuron-hardware", "trn2,h200",
                                           "--neuron-report", "report.json")
    result.assert_outcomes(failed=1)
    tests = json.loads((pytester.path / "report.json").read_text())["tests"]
    assert {key: test["verdict"]["status"] for key, test in tests.items()} == {
        f"{NODE} [simulated:trn2]": "pass", f"{NODE} [simulated:h200]": "regression"}
    result.stdout.re_match_lines([rf"{NODE}\s+h200\s+.*regression", rf"{NODE}\s+trn2\s+.*pass"])


# --- what a reviewer reads (issue 19), on outcomes built here ------------------------------------

def _outcome(nodeid: str, hardware: str, old: float, new: float, status: str, execution: str = "eager"):
    from pytest_neuronprof.gate.compare import Finding, Kind, Verdict
    from pytest_neuronprof.gate.outcome import TestOutcome
    from pytest_neuronprof.gate.summary import ProfileSummary

    def summary(total: float) -> ProfileSummary:
        return ProfileSummary("simulated", hardware, "3", "2.13", total, execution=execution)

    regressions = (Finding(Kind.TOTAL, "(total)", "", old, new, 0.1, "total device time"),) \
        if status == "regression" else ()
    return TestOutcome(nodeid, (nodeid.split("::")[0], 3), Verdict(status, regressions=regressions),
                       summary(new), summary(old))


def test_markdown_shortens_long_ids_and_names_the_variant_of_each_finding():
    from pytest_neuronprof.outputs.markdown import outcomes_markdown

    long_id = "tests/test_perf.py::test_block[" + "x" * 200 + "]"
    outcomes = [_outcome(long_id, "trn2", 10.0, 20.0, "regression"),
                _outcome(long_id, "trn2", 10.0, 10.0, "pass", execution="graph")]
    text = outcomes_markdown(outcomes, "t")
    table_lines = [line for line in text.splitlines() if line.startswith("|")]
    assert table_lines and not any(long_id in line for line in table_lines)
    assert max(map(len, table_lines)) < len(long_id)  # the id alone was wider than a row is now
    regressions = text.split("### Regressions")[1].split("###")[0]
    assert "| variant" in regressions and "simulated:trn2 " in regressions
    assert f"pytest --neuron-baseline '{long_id}'" in text  # the eager entry regressed, not the graph one


def test_the_session_table_and_compare_list_regressions_first():
    from pytest_neuronprof.cli.diffing import Comparison
    from pytest_neuronprof.cli.inputs import BASELINES, Loaded
    from pytest_neuronprof.cli.render import compare_text
    from pytest_neuronprof.outputs.terminal import session_table

    outcomes = [_outcome("t.py::test_a", "trn2", 10.0, 10.0, "pass"),
                _outcome("t.py::test_b", "trn2", 10.0, 10.0, "pass"),
                _outcome("t.py::test_z", "trn2", 10.0, 20.0, "regression")]
    rows = [line.split()[0] for line in session_table(outcomes).splitlines()[2:]]
    assert rows == ["t.py::test_z", "t.py::test_a", "t.py::test_b"]
    loaded = Loaded(BASELINES, Path("x"), {})
    text = compare_text(loaded, loaded, Comparison(outcomes))
    rows = [line.split()[0] for line in text.splitlines() if line.startswith("t.py::")]
    assert rows[:3] == ["t.py::test_z", "t.py::test_a", "t.py::test_b"]
