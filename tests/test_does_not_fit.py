"""Does not fit is its own verdict (issue 29, item 3): a test whose peak of device memory is above
its limit gets ``Status.DOES_NOT_FIT`` ("does-not-fit"), with or without a baseline, in every
output and in the JSON report (version 5, counted in "does_not_fit"); `neuronprof compare` exits
3 for it. Its failure says what would fit: bfloat16 (an estimate from its float32 tensors at the
peak), a chip with enough memory per core (``hardware=``), a ``memory_limit`` of at least its
peak; and each tensor at the peak has its own shape, not that of the view the capture first met
it through.

Before, an fp32 Llama-2-7B on meta failed "does not fit on trn2" (right), but the summary said
``regression`` for a test with no baseline, the hint suggested ``memory_limit="16 GiB"`` (below
the peak), and the resident lm_head weight was listed with the shape of its transpose."""

from __future__ import annotations

import json

import pytest

from pytest_neuronprof.cli import main
from pytest_neuronprof.gate.compare import (FAILED, GatePolicy, Kind, Status, compare, uncompared,
                                            with_memory_limit)
from pytest_neuronprof.gate.memory import MemorySummary, PeakGroup, device_memory, fit_suggestions
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import comment, github, json_report, terminal
from pytest_neuronprof.outputs.json_report import REPORT_VERSION

MiB, GiB = 2**20, 2**30
NODE = "tests/test_llama.py::test_fp32"
# An fp32 Llama-2-7B's peak on meta: its weights resident, a layer's activations on top.
WEIGHTS = PeakGroup("(resident)", "", (11008, 4096), "float32", 96, 96 * 172 * MiB)
HEAD = PeakGroup("(resident)", "", (32000, 4096), "float32", 2, 1000 * MiB)
LOGITS = PeakGroup("aten::mm", "lm_head", (4096, 32000), "float32", 1, 500 * MiB)
FP32 = MemorySummary(int(29.9 * GiB), int(25.1 * GiB), live=(WEIGHTS, HEAD, LOGITS))


def summary(memory: MemorySummary | None = FP32, time_us: float = 100.0, hardware: str = "trn2") -> ProfileSummary:
    mm = OpSummary(4, time_us, "Tensor", 10**9, 10**6, 1.0, "model", bound="TensorE", dtype="float32")
    return ProfileSummary("simulated", hardware, "5", "2.13", time_us, {"aten::mm": mm}, memory=memory)


TRN2 = with_memory_limit(GatePolicy(), "trn2", "simulated")


def first_run() -> TestOutcome:
    current = summary()
    verdict = uncompared(current, TRN2, Status.NO_BASELINE, "no baseline for simulated:trn2")
    return TestOutcome(NODE, ("tests/test_llama.py", 9), verdict, current, None)


def test_a_test_over_its_limit_has_a_verdict_of_its_own_with_or_without_a_baseline():
    assert (TRN2.memory_limit, TRN2.memory_limit_label) == (24 * GiB, "24 GiB per NeuronCore")
    assert device_memory("trn2") == (24 * GiB, "24 GiB per NeuronCore") and device_memory("nope") is None
    o = first_run()
    assert o.verdict.status == Status.DOES_NOT_FIT == "does-not-fit" and o.verdict.failed
    assert Status.DOES_NOT_FIT in FAILED and o.verdict.does_not_fit
    assert o.verdict.message == "no baseline for simulated:trn2"
    # with a baseline, and slower too: still does-not-fit (a new baseline would not fit it)
    slower = compare(summary(), summary(time_us=150.0), TRN2)
    assert slower.status == Status.DOES_NOT_FIT
    assert [f.kind for f in slower.regressions] == [Kind.TOTAL, Kind.SLOWER, Kind.FIT]
    # recording keeps its status (the entry is written) and fails
    assert uncompared(summary(), TRN2, Status.RECORDED).status == Status.RECORDED
    # measured backends and unknown chips have no limit of their own
    assert with_memory_limit(GatePolicy(), "trn2", "cpu").memory_limit is None
    assert with_memory_limit(GatePolicy(), "nope", "simulated").memory_limit is None


def test_every_output_says_does_not_fit_and_what_would_fit():
    o = first_run()
    text = terminal.failure_section(o)
    lines = text.splitlines()
    assert lines[0] == "does not fit in device memory on simulated:trn2 (peak 29.9 GiB, limit 24 GiB)"
    fix = lines[-1]
    assert fix == (
        "It does not fit in 24 GiB per NeuronCore (peak 29.9 GiB): in bfloat16 "
        "(model.to(torch.bfloat16)) its peak would be about 21.1 GiB, which fits (float32 is "
        "17.6 GiB of what is live at the peak); or cost it on a chip with room for it: "
        '@pytest.mark.neuron_profile(hardware="trn3") (36 GiB per NeuronCore), or '
        'hardware="h200" (131.3 GiB per device); or set a limit of at least its peak: '
        '@pytest.mark.neuron_profile(memory_limit="30 GiB"). Re-recording its baseline does not '
        "change its limit.")
    assert '"16 GiB"' not in text and "update the baseline" not in text
    table = terminal.session_table([o]).splitlines()
    assert table[2].split()[-1] == "does-not-fit"
    (line,) = github.annotation_lines([o])
    assert line.startswith("::error file=tests/test_llama.py,line=9,title=does not fit in device memory%3A test_fp32::")
    assert line.endswith(fix.replace("%", "%25"))
    summary_md = github.step_summary([o])
    assert "**1 does-not-fit**" in summary_md and "| **does-not-fit** |" in summary_md
    assert "memory\\_limit=\"30 GiB\"" in summary_md  # the fix, in the memory details
    assert "```sh" not in summary_md  # no re-record command: it would not make the test fit
    body = comment.comment_body([o])
    assert "**1 does-not-fit**" in body and "hardware=\"trn3\"" in body
    doc = json.loads(json_report.json_report([o]))
    assert doc["report_version"] == REPORT_VERSION == 6
    assert (doc["does_not_fit"], doc["regressions"], doc["counts"]) == (1, 0, {"does-not-fit": 1})
    assert doc["tests"][NODE]["verdict"]["status"] == "does-not-fit"
    assert TestOutcome.from_json(doc["tests"][NODE]).verdict == o.verdict


def test_what_would_fit_is_only_what_would():
    hints = fit_suggestions(FP32, "trn2", 24 * GiB)
    assert [name for name, _ in hints.chips] == ["trn3", "h200"]  # by memory, the smallest first
    assert hints.limit == "30 GiB" and hints.narrow_peak is not None and hints.narrow_peak < 24 * GiB
    # a marker's limit does not move with the chip: no chip to suggest
    assert fit_suggestions(FP32, "trn2", 16 * GiB).chips == ()
    # a bfloat16 model has nothing to halve; 200 GiB fits no chip
    bf16 = MemorySummary(200 * GiB, 0, live=(PeakGroup("aten::mm", "", (8,), "bfloat16", 1, 200 * GiB),))
    assert fit_suggestions(bf16, "trn2", 24 * GiB) == type(hints)(None, 0, (), "200 GiB")
    assert fit_suggestions(MemorySummary(300 * MiB + 1, 0), "trn2", 256 * MiB).limit == "301 MiB"


def test_a_resident_weight_has_its_own_shape_not_its_transpose():
    torch = pytest.importorskip("torch")
    from pytest_neuronprof import NeuronConfig, NeuronProfiler

    with torch.device("meta"):
        head = torch.nn.Linear(4096, 32000, bias=False)
        x = torch.empty(1, 64, 4096)
    with torch.no_grad(), NeuronProfiler(NeuronConfig()) as prof:
        head(x)
    memory = prof.result.memory
    assert memory is not None
    resident = {(t.shape, t.bytes) for t in memory.at_peak if t.op == "(resident)"}
    assert resident == {((32000, 4096), 32000 * 4096 * 4), ((1, 64, 4096), 64 * 4096 * 4)}
    assert {g.shape for g in memory.live if g.op == "(resident)"} == {(32000, 4096), (1, 64, 4096)}


SUITE = '''
import pytest, torch

@pytest.mark.neuron_profile
def test_fp32_model(neuron_profile):
    with torch.device("meta"):  # 25 GiB of float32 weights and a 1000 MiB head: resident
        layers = torch.nn.Sequential(*[torch.nn.Linear(8192, 8192, bias=False) for _ in range(100)])
        head = torch.nn.Linear(8192, 32000, bias=False)
        x = torch.empty(1, 8, 8192)
    with torch.no_grad(), neuron_profile:
        head(layers(x))


@pytest.mark.neuron_profile
def test_small():
    torch.ones(8, device="meta") + 1
'''


@pytest.mark.slow
def test_end_to_end_the_verdict_the_report_and_compare_s_exit_code(pytester: pytest.Pytester,
                                                                   lean_inner_runs: None, capsys):
    pytester.makepyfile(test_fp32=SUITE)
    result = pytester.runpytest("--neuron-report", "report.json")
    result.assert_outcomes(failed=1, passed=1)
    out = result.stdout.str()
    assert "does not fit in device memory on simulated:trn2 (peak 26 GiB, limit 24 GiB)" in out
    result.stdout.fnmatch_lines(["(resident) * - * [[]8192,8192[]] * float32 * 100 * 25 GiB * -",
                                 "(resident) * - * [[]32000,8192[]] * float32 * 1 * 1000 MiB * -"])
    assert 'hardware="trn3"' in out and 'memory_limit="26 GiB"' in out  # 25.98 GiB, rounded up
    result.stdout.fnmatch_lines(["test_fp32.py::test_fp32_model * 26 GiB * does-not-fit"])
    report = json.loads((pytester.path / "report.json").read_text())
    assert report["does_not_fit"] == 1 and report["regressions"] == 0
    # recorded (the entry is written, and the run fails), then compared: exit 3, said in the last line
    pytester.runpytest("--neuron-baseline").assert_outcomes(failed=1, passed=1)
    capsys.readouterr()
    assert main(["compare", str(pytester.path / "baselines"), str(pytester.path / "baselines")]) == 3
    last = capsys.readouterr().out.splitlines()[-1]
    assert last == ("1 does not fit in device memory: test_fp32.py::test_fp32_model; 0 regressions "
                    "in 2 compared test entries")
    assert main(["compare", "--format", "json", str(pytester.path / "report.json"),
                 str(pytester.path / "report.json")]) == 3
    doc = json.loads(capsys.readouterr().out)
    assert (doc["exit_code"], doc["does_not_fit"], doc["regressions"]) == (3, 1, 0)


def test_a_test_that_does_not_fit_has_a_status_of_its_own(pytester):
    pytester.makepyfile(test_big="""
        import pytest, torch

        @pytest.mark.neuron_profile(memory_limit="1 KiB")
        def test_big():
            torch.randn(256, 256) @ torch.randn(256, 256)
    """)
    result = pytester.runpytest("-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["test_big.py M*", "DOES NOT FIT test_big.py::test_big*"])
