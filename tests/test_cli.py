"""The `neuronprof` command: compare (exit codes 0/1/2), show, merge, formats, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_neuronprof.gate import compare as gate
from pytest_neuronprof.gate.baseline import baseline_path, render_baseline
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.outputs.json_report import json_report
from pytest_neuronprof.cli import main
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary

MLP = "tests/test_mlp.py::test_forward"
CONV = "tests/test_conv.py::test_conv[a|b]"  # a `|` must not break Markdown tables

BASE_OPS = {"aten::mm": (80.0, 2, "Tensor"), "aten::gelu": (15.0, 1, "Scalar"),
            "aten::add": (5.0, 1, "Vector")}


def summary(ops: dict[str, tuple[float, int, str]], torch_version: str = "2.13",
            hardware: str = "trn2") -> ProfileSummary:
    total = sum(t for t, _, _ in ops.values())
    return ProfileSummary("simulated", hardware, "1", torch_version, total, {
        name: OpSummary(count, t, engine, 1000 * count, 4096, t / total, "mlp.up")
        for name, (t, count, engine) in ops.items()})


def write(directory: Path, tests: dict[str, ProfileSummary]) -> Path:
    by_file: dict[Path, dict[str, dict[str, ProfileSummary]]] = {}
    for nodeid, s in tests.items():
        by_file.setdefault(baseline_path(directory, nodeid), {})[nodeid] = {s.variant: s}
    for path, entries in by_file.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_baseline(entries), encoding="utf-8")
    return directory


def slower_mm(factor: float = 1.4) -> ProfileSummary:
    return summary({**BASE_OPS, "aten::mm": (80.0 * factor, 2, "Tensor")})


def stored_form(ops: dict[str, tuple[float, int, str]]) -> dict[str, object]:
    """The JSON entry of ``summary(ops)``, written out by hand from the file format rather than
    taken from ``to_json``: times in us, each op's share of the total to 6 decimals, all of an
    op's time in its one module, its bound and dtype unknown ("")."""
    total = sum(t for t, _, _ in ops.values())
    return {"backend": "simulated", "hardware": "trn2", "cost_model_version": "1",
            "torch_version": "2.13", "total_device_time_us": total,
            "ops": {name: {"count": count, "device_time_us": t, "engine": engine, "flops": 1000 * count,
                           "bytes": 4096, "share": round(t / total, 6), "modules": {"mlp.up": t},
                           "bound": "", "dtype": ""}
                    for name, (t, count, engine) in ops.items()}}


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    old = write(tmp_path / "old", {MLP: summary(BASE_OPS), CONV: summary(BASE_OPS)})
    new = write(tmp_path / "new", {MLP: slower_mm(), CONV: summary(BASE_OPS)})
    return old, new


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *fragments: str) -> None:
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err


# --- compare: exit codes ----------------------------------------------------------------------

def test_compare_identical_exits_0(dirs, capsys):
    old, _ = dirs
    code, out, err = run(capsys, "compare", old, old)
    assert (code, err) == (0, "")
    assert "0 regressions in 2 compared test entries" in out


def test_compare_regression_exits_1_and_lists_the_op(dirs, capsys):
    old, new = dirs
    code, out, err = run(capsys, "compare", old, new)
    assert code == 1 and err == ""
    regressed = out.split(f"{MLP} [simulated:trn2]: regression, per-op changes:")[1]
    row = next(line for line in regressed.splitlines() if "aten::mm" in line)
    assert row.split() == ["aten::mm", "Tensor", "mlp.up", "80.000", "us", "112.000", "us",
                           "+40.0%", "2", "REGRESSION"]
    assert out.rstrip().endswith(f"1 regression in 2 compared test entries: {MLP}")


def test_compare_uses_the_gate_and_its_options(dirs, capsys):
    old, new = dirs
    code, out, _ = run(capsys, "compare", old, new, "--format", "json")
    verdict = gate.compare(summary(BASE_OPS), slower_mm(), gate.GatePolicy())
    test = next(t for t in json.loads(out)["tests"] if t["nodeid"] == MLP)
    assert test["regressions"] == [f.to_json() for f in verdict.regressions]
    # A threshold above the +40 % (and above the total's +32 %) lets it pass ...
    assert run(capsys, "compare", old, new, "--threshold", "45%")[0] == 0
    # ... and so does a floor above the 32 us increase, or gating no hotspot but the total.
    assert run(capsys, "compare", old, new, "--floor-us", "40")[0] == 0
    code, out, _ = run(capsys, "compare", old, new, "--hotspots", "0", "--min-share", "1",
                       "--format", "json")
    assert code == 1  # the total still regressed (+32 %)
    assert [f["op"] for f in json.loads(out)["tests"][1]["regressions"]] == [gate.TOTAL]


@pytest.mark.parametrize("case", ["missing", "broken", "incomparable", "no-common-variant",
                                  "bad-option", "not-a-baseline"])
def test_compare_bad_input_exits_2_with_one_line(dirs, tmp_path, capsys, case):
    old, _ = dirs
    other, expected = tmp_path / "other", ""
    if case == "missing":
        expected = f"{other}: no such file or directory"
    elif case == "broken":
        (other / "tests").mkdir(parents=True)
        (other / "tests" / "test_mlp.json").write_text('{"schema_version": 1, "tests": ')
        expected = "test_mlp.json: not valid JSON"
    elif case == "incomparable":
        write(other, {MLP: summary(BASE_OPS, torch_version="2.12")})
        expected = "torch version 2.13, this run uses 2.12"
    elif case == "no-common-variant":
        write(other, {MLP: summary(BASE_OPS, hardware="trn1")})
        expected = "OLD has simulated:trn2, NEW has simulated:trn1"
    elif case == "not-a-baseline":
        other.write_text('{"hello": 1}')
        expected = "neither a baseline file"
    code, _, err = run(capsys, "compare", old, old if case == "bad-option" else other,
                       *(["--threshold", "ten"] if case == "bad-option" else []))
    assert code == 2
    assert_one_line_error(err, "neuronprof compare: error:",
                          expected or "--threshold='ten': expected a relative change")


def test_compare_reports_from_real_runs(pytester: pytest.Pytester, capsys):
    """Record with the plugin, then compare its --neuron-report files: the exit code follows."""
    module = ("import pytest, torch\n\n@pytest.mark.neuron_profile\ndef test_mm():\n"
              "    a, b = torch.randn(64, 64), torch.randn(64, 64)\n    a @ b\n")
    pytester.makepyfile(test_mm=module)
    pytester.runpytest("--neuron-baseline", "--neuron-report", "recorded.json").assert_outcomes(passed=1)
    pytester.makepyfile(test_mm=module + "    a @ b\n    a @ b\n")  # 3x the matmuls
    pytester.runpytest("--neuron-report", "slower.json").assert_outcomes(failed=1)
    base, recorded, slower = (pytester.path / n for n in ("baselines", "recorded.json", "slower.json"))

    assert run(capsys, "compare", base, recorded)[0] == 0
    code, out, _ = run(capsys, "compare", recorded, slower)
    assert code == 1
    shown = run(capsys, "show", slower)[1]
    assert "1 -> 3 calls, same work each: fixed cost per call still dominates" in shown
    assert "aten::mm" in out and "1 -> 3" in out
    code, out, _ = run(capsys, "compare", slower, recorded)  # the other way round: faster
    assert code == 0 and "improved" in out


# --- formats ----------------------------------------------------------------------------------

def test_compare_markdown_is_pasteable(dirs, capsys):
    old, new = dirs
    code, out, _ = run(capsys, "compare", old, new, "--format", "markdown")
    assert code == 1
    assert out.startswith("## Device-time changes\n")
    assert "**1 regression**, 1 pass" in out
    lines = out.splitlines()
    assert "### Regressions" in lines and "### Per-test totals" in lines
    regression_rows = [line for line in lines if line.startswith(f"| `{MLP}`") and "aten::mm" in line]
    assert len(regression_rows) == 1 and "+40.0%" in regression_rows[0]
    # The `|` in the parametrized id is escaped, so every totals row has the same number of cells.
    totals = lines[lines.index("### Per-test totals") + 2:]
    rows = [line for line in totals[:4] if line.startswith("|")]
    assert len({line.replace("\\|", "").count("|") for line in rows}) == 1
    assert "`tests/test_conv.py::test_conv[a\\|b]`" in out
    assert f"<details><summary>Per-op changes: <code>{MLP}</code> (+32.0%)</summary>" in out
    assert "pytest --neuron-baseline" not in out  # a reviewer's diff, not a to-do


def test_compare_json(dirs, capsys):
    old, new = dirs
    _, out, _ = run(capsys, "compare", old, new, "--format", "json")
    doc = json.loads(out)
    assert (doc["exit_code"], doc["regressions"], doc["problem"]) == (1, 1, None)
    assert doc["policy"] == {"simulated": {"threshold": 0.1, "floor_us": 1.0, "hotspots": 10,
                                           "min_share": 0.05, "coverage": 0.9}}
    mlp = next(t for t in doc["tests"] if t["nodeid"] == MLP)
    assert mlp["status"] == "regression" and mlp["delta"] == pytest.approx(0.32)
    assert mlp["ops"] == [{"op": "aten::mm", "engine": "Tensor", "module": "mlp.up", "old_us": 80.0,
                           "new_us": 112.0, "delta": 0.4, "old_count": 2, "new_count": 2,
                           "gate": "regression"}]


def test_compare_lists_tests_on_one_side_only(dirs, tmp_path, capsys):
    old, _ = dirs
    new = write(tmp_path / "added", {MLP: summary(BASE_OPS), "tests/test_new.py::test_x": summary(BASE_OPS)})
    code, out, _ = run(capsys, "compare", old, new)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("tests/test_new.py::test_x"))
    assert row.split()[-1] == "new"  # the verdict as every table says it: no baseline yet
    assert f"{CONV}  simulated:trn2  -" in out and "only in OLD" in out


# --- show -------------------------------------------------------------------------------------

def test_show_baselines_text_markdown_json(dirs, capsys):
    old, _ = dirs
    code, out, _ = run(capsys, "show", old)
    assert code == 0
    assert f"{MLP} [simulated:trn2]: 100.000 us (cost model 1, torch 2.13;" in out
    rows = [line.split() for line in out.splitlines() if "aten::" in line]
    assert rows[:3] == [  # largest first, per test; no bound known (an entry before schema 4)
        ["aten::mm", "Tensor", "2", "80.000", "us", "80.0%", "mlp.up", "2.00", "kFLOP", "4.10", "kB", "-", "-"],
        ["aten::gelu", "Scalar", "1", "15.000", "us", "15.0%", "mlp.up", "1.00", "kFLOP", "4.10", "kB", "-", "-"],
        ["aten::add", "Vector", "1", "5.000", "us", "5.0%", "mlp.up", "1.00", "kFLOP", "4.10", "kB", "-", "-"]]
    _, md, _ = run(capsys, "show", old / "tests" / "test_mlp.json", "--format", "markdown")
    assert f"### `{MLP}` [simulated:trn2]: 100.000 us" in md
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in md.splitlines()
             if line.startswith("| aten::")]
    assert cells[0] == ["aten::mm", "Tensor", "2", "80.000 us", "80.0%", "mlp.up", "2.00 kFLOP", "4.10 kB", "-", "-"]
    _, js, _ = run(capsys, "show", old, "--format", "json")
    entry = json.loads(js)["tests"][MLP]["simulated:trn2"]
    assert entry == stored_form(BASE_OPS)
    assert [op["share"] for op in entry["ops"].values()] == [0.05, 0.15, 0.8]  # sorted by name


def test_show_report(tmp_path, capsys):
    outcome = TestOutcome(MLP, ("tests/test_mlp.py", 7),
                                 gate.compare(summary(BASE_OPS), slower_mm(), gate.GatePolicy()),
                                 slower_mm(), summary(BASE_OPS))
    path = tmp_path / "report.json"
    path.write_text(json_report([outcome]))
    code, out, _ = run(capsys, "show", path)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith(MLP))
    assert row.split() == [MLP, "132.000", "us", "+32.0%", "aten::mm", "(85%)", "regression"]
    assert "same work, other shapes" in out  # the hand-built entries keep no flops or bytes
    _, md, _ = run(capsys, "show", path, "--format", "markdown")
    assert "### Regressions" in md and f"pytest --neuron-baseline '{MLP}'" in md
    _, js, _ = run(capsys, "show", path, "--format", "json")
    test = json.loads(js)["tests"][MLP]
    # 100 -> 132 us in total (+32 %) and 80 -> 112 us in aten::mm (+40 %), both over 10 %.
    assert test["verdict"] == {"status": "regression", "message": "", "improvements": [], "allowed": [],
                               "regressions": [
        {"kind": "total", "op": "(total)", "module": "", "modules": [], "baseline": 100.0,
         "current": 132.0, "delta": 0.32, "threshold": 0.1, "reason": "total device time"},
        {"kind": "slower", "op": "aten::mm", "module": "mlp.up", "modules": [], "baseline": 80.0,
         "current": 112.0, "delta": 0.4, "threshold": 0.1, "reason": "same work, other shapes"}]}
    assert test["baseline"] == stored_form(BASE_OPS)
    assert test["current"] == stored_form({**BASE_OPS, "aten::mm": (112.0, 2, "Tensor")})
    assert test["current"]["ops"]["aten::mm"]["share"] == 0.848485  # 112 / 132
    assert {key: test[key] for key in ("nodeid", "baseline_key", "baseline_dir", "location", "uncosted")} == {
        "nodeid": MLP, "baseline_key": MLP, "baseline_dir": "", "location": ["tests/test_mlp.py", 7],
        "uncosted": {"ops": [], "share": 0}}
    assert set(test) == {"nodeid", "baseline_key", "baseline_dir", "location", "verdict", "current",
                         "baseline", "uncosted", "utilisation", "recommendations"}
    assert (test["utilisation"], test["recommendations"]) == (None, [])  # a hand-built outcome has none


# --- merge ------------------------------------------------------------------------------------

def test_merge_is_clean_and_deterministic(tmp_path, capsys):
    shard1 = write(tmp_path / "s1", {MLP: summary(BASE_OPS)})
    shard2 = write(tmp_path / "s2", {CONV: slower_mm(), MLP: summary(BASE_OPS)})  # same MLP: fine
    out = tmp_path / "out"
    write(out, {"tests/test_old.py::test_kept": summary(BASE_OPS)})
    code, text, err = run(capsys, "merge", out, shard1, shard2)
    assert (code, err) == (0, "")
    assert "merged 2 baseline entries from 2 inputs" in text
    assert (out / "tests" / "test_mlp.json").read_text() == render_baseline({MLP: {"simulated:trn2": summary(BASE_OPS)}})
    assert (out / "tests" / "test_conv.json").read_text() == render_baseline({CONV: {"simulated:trn2": slower_mm()}})
    assert (out / "tests" / "test_old.json").is_file()  # entries no input has are kept
    before = {p: p.read_bytes() for p in out.rglob("*.json")}
    code, text, _ = run(capsys, "merge", out, shard2, shard1)  # any order, same bytes
    assert code == 0 and "files changed: none (all unchanged)" in text
    assert {p: p.read_bytes() for p in out.rglob("*.json")} == before


def test_merge_refuses_conflicts_unless_told(tmp_path, capsys):
    shard1 = write(tmp_path / "s1", {MLP: summary(BASE_OPS)})
    shard2 = write(tmp_path / "s2", {MLP: slower_mm()})
    out = tmp_path / "out"
    code, _, err = run(capsys, "merge", out, shard1, shard2)
    assert code == 2
    assert_one_line_error(err, f"conflicting baselines for {MLP} [simulated:trn2]",
                          str(Path("s1", "tests", "test_mlp.json")), str(Path("s2", "tests", "test_mlp.json")),
                          "--prefer")
    assert not out.exists()  # nothing written
    for prefer, winner in (("first", summary(BASE_OPS)), ("last", slower_mm())):
        code, _, err = run(capsys, "merge", out, shard1, shard2, "--prefer", prefer)
        assert code == 0 and f"(--prefer {prefer})" in err
        assert (out / "tests" / "test_mlp.json").read_text() == render_baseline({MLP: {"simulated:trn2": winner}})


def test_merge_refuses_a_broken_output_file(tmp_path, capsys):
    shard = write(tmp_path / "s1", {MLP: summary(BASE_OPS)})
    broken = tmp_path / "out" / "tests" / "test_mlp.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("{")
    code, _, err = run(capsys, "merge", tmp_path / "out", shard)
    assert code == 2
    assert_one_line_error(err, "broken baseline file", "test_mlp.json")
    assert broken.read_text() == "{"


# --- the command itself -----------------------------------------------------------------------

def test_report_command_and_its_errors(dirs, tmp_path, capsys):
    old, _ = dirs
    code, _, err = run(capsys, "report", old, "-o", tmp_path / "html")
    assert code == 2
    assert_one_line_error(err, "takes a --neuron-report file")
    path = tmp_path / "report.json"
    path.write_text(json_report([TestOutcome(MLP, ("t.py", 1), gate.Verdict("pass"),
                                                           summary(BASE_OPS), summary(BASE_OPS))]))
    code, out, _ = run(capsys, "report", path, "-o", tmp_path / "html")
    assert code == 0 and (tmp_path / "html" / "index.html").is_file()
    assert out.strip() == f"wrote {tmp_path / 'html' / 'index.html'}"


@pytest.mark.slow  # starts a subprocess
def test_module_and_console_script(dirs):
    """`python -m pytest_neuronprof` and `neuronprof` run without importing torch; usage errors
    are one line too."""
    old, new = dirs
    script = Path(sys.executable).with_name("neuronprof")
    for argv in ([sys.executable, "-m", "pytest_neuronprof"], [str(script)]):
        done = subprocess.run([*argv, "compare", str(old), str(new)], capture_output=True, text=True)
        assert done.returncode == 1, done.stderr
        assert "REGRESSION" in done.stdout
    done = subprocess.run([sys.executable, "-c", "import sys; from pytest_neuronprof.cli import main; "
                           "code = main(sys.argv[1:]); assert 'torch' not in sys.modules; sys.exit(code)",
                           "compare", str(old), str(new)], capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    done = subprocess.run([sys.executable, "-m", "pytest_neuronprof", "compare", str(old)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr == ("neuronprof compare: error: the following arguments are required: NEW "
                           "(see neuronprof compare --help)\n")
