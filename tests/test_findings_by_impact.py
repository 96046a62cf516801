"""A failure's findings in order of impact (issue 29, item 1): the total first, then the device
time each finding adds or removes, largest first; the largest named in the failure's first line
(pytest's short summary line) and first among the GitHub annotation's findings; and an op that
no longer runs shown beside the new ops that took its place ("replaced by 3 new ops, +96 us"),
in the terminal, the Markdown, the annotation and the JSON report alike.

The case is the issue's: a Llama switched from attn_implementation="sdpa" to "eager". Before,
the failure listed `aten::_to_copy` (+19.5 us) and `aten::add` before the new `aten::clone`
(+96 us), the annotation named `_to_copy`, and the removed flash attention appeared only as an
improvement in the comment's folded table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_neuronprof.gate.compare import GatePolicy, Kind, Status, compare, replacements
from pytest_neuronprof.gate.outcome import TestOutcome, op_changes
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import github, json_report, markdown, terminal

try:  # imported with the module, before any in-process pytester run (tests/conftest.py says why)
    import transformers
except ImportError:  # the test that needs it skips
    transformers = None

SDPA = "aten::_scaled_dot_product_flash_attention"
ATTN = "model.layers.0.self_attn"
NODE = "tests/test_llama.py::test_forward"


def op(us: float, count: int = 1, module: str = "model", engine: str = "Vector") -> OpSummary:
    return OpSummary(count, us, engine, 0, 10**6, 0.0, module)


def summary(ops: dict[str, OpSummary]) -> ProfileSummary:
    total = sum(o.device_time_us for o in ops.values())
    shared = {name: OpSummary(o.count, o.device_time_us, o.engine, o.flops, o.bytes,
                              o.device_time_us / total, o.module) for name, o in ops.items()}
    return ProfileSummary("simulated", "trn2", "5", "2.13", total, shared)


# sdpa -> eager: the fused attention op goes; bmm, softmax and a clone of the mask come in the
# attention module; an existing cast and add grow a little elsewhere.
BEFORE = summary({"aten::mm": op(500.0, 8, "model.mlp", "Tensor"), "aten::_to_copy": op(80.0),
                  "aten::add": op(100.0, 10), SDPA: op(100.0, 2, ATTN, "Tensor")})
AFTER = summary({"aten::mm": op(500.0, 8, "model.mlp", "Tensor"), "aten::_to_copy": op(99.5),
                 "aten::add": op(115.0, 12), "aten::clone": op(96.0, 2, ATTN, "DMA"),
                 "aten::bmm": op(60.0, 4, ATTN, "Tensor"), "aten::_softmax": op(40.0, 2, ATTN, "Scalar")})


def eager() -> TestOutcome:
    return TestOutcome(NODE, ("tests/test_llama.py", 12), compare(BEFORE, AFTER, GatePolicy()), AFTER, BEFORE)


def test_findings_come_largest_first_with_the_replaced_op_beside_its_replacements():
    verdict = eager().verdict
    assert verdict.status == Status.REGRESSION
    assert [(f.kind, f.op) for f in verdict.regressions] == [
        (Kind.TOTAL, "(total)"),
        (Kind.REPLACED, SDPA),  # 100 us -> 196 us: +96 us, the largest
        (Kind.NEW, "aten::clone"), (Kind.NEW, "aten::bmm"),  # beside it, largest first
        (Kind.SLOWER, "aten::_to_copy"),  # +19.5 us
        (Kind.SLOWER, "aten::add"), (Kind.CALLS, "aten::add"),  # +15 us, its calls with it
    ]
    replaced = verdict.regressions[1]
    assert (replaced.module, replaced.baseline, replaced.current) == (ATTN, 100.0, 196.0)
    assert replaced.reason == ("replaced by 3 new ops, +96.000 us: aten::clone 96.000 us, "
                               "aten::bmm 60.000 us, aten::_softmax 40.000 us")
    # the op that went is not an improvement of its own: the replacement stands for it
    assert all(f.op != SDPA for f in verdict.improvements)


def test_the_first_line_and_the_annotation_name_the_largest():
    o = eager()
    headline = terminal.failure_section(o).splitlines()[0]
    assert headline == ("device time regression on simulated:trn2 (total 780.000 us -> 910.500 us, "
                        "+16.7%); largest: aten::_scaled_dot_product_flash_attention replaced by 3 "
                        "new ops, +96.000 us")
    (line,) = github.annotation_lines([o])
    findings = line.split("::", 2)[2].split("; ")
    assert findings[1] == (f"{SDPA} in {ATTN}: replaced by 3 new ops, +96.000 us: aten::clone "
                           "96.000 us, aten::bmm 60.000 us, aten::_softmax 40.000 us")
    assert findings[2].startswith(f"aten::clone in {ATTN} new (0.000 us -> 96.000 us")
    assert "aten::_to_copy" not in line.split("; 2 more in the job summary")[0].split("; ")[3]


def test_markdown_and_json_keep_the_same_order(tmp_path: Path):
    o = eager()
    text = markdown.outcomes_markdown([o], "t", per_op=True)
    table = text[text.index("### Regressions"):text.index("### Why it is slow")]
    order = [line.split("|")[2].strip().replace("\\", "") for line in table.splitlines()[4:] if line.startswith("|")]
    # one row per op: aten::add's time and calls in one
    assert order == ["(total)", SDPA, "aten::clone", "aten::bmm", "aten::_to_copy", "aten::add"]
    # the per-op table flags the op that went as replaced, not as an improvement
    details = text[text.index("<details>"):]
    assert "| replaced " in details and "improved" not in details
    assert {c.op: c.flag for c in op_changes(o)}[SDPA] == "replaced"
    doc = json.loads(json_report.json_report([o]))
    found = doc["tests"][NODE]["verdict"]["regressions"]
    assert [(f["kind"], f["op"]) for f in found][:3] == [("total", "(total)"), ("replaced", SDPA),
                                                         ("new", "aten::clone")]
    read = TestOutcome.from_json(doc["tests"][NODE])
    assert read.verdict == o.verdict


def test_a_cheaper_replacement_is_an_improvement_and_an_unrelated_one_is_no_replacement():
    cheaper = summary({**{k: v for k, v in BEFORE.ops.items() if k != SDPA},
                       "aten::bmm": op(30.0, 4, ATTN, "Tensor")})
    verdict = compare(BEFORE, cheaper, GatePolicy(hotspots=1, coverage=0.1))
    assert verdict.status == Status.IMPROVED  # the total fell 9 %: within the threshold
    assert [(f.kind, f.op, f.baseline, f.current) for f in verdict.improvements] == [
        (Kind.REPLACED, SDPA, 100.0, 30.0)]
    # a new op in another module did not take the removed op's place
    elsewhere = summary({**{k: v for k, v in BEFORE.ops.items() if k != SDPA},
                         "aten::bmm": op(60.0, 4, "model.lm_head", "Tensor")})
    assert replacements(BEFORE, elsewhere, GatePolicy()) == []
    # an op in allow= is never part of one
    assert replacements(BEFORE, AFTER, GatePolicy(allow={SDPA: "switching attention"})) == []


def test_a_tiny_transformers_llama_switched_from_sdpa_to_eager_attention():
    """The issue's reproduction, run: a 2-layer Llama (hidden 128) from sdpa to eager."""
    if transformers is None:
        pytest.skip("transformers is not installed")
    import torch

    from pytest_neuronprof import NeuronConfig, NeuronProfiler
    from pytest_neuronprof.gate.summary import summarize

    def profiled(attn: str) -> ProfileSummary:
        torch.manual_seed(0)
        config = transformers.LlamaConfig(
            vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
            attn_implementation=attn)
        model = transformers.LlamaForCausalLM(config).eval()
        ids = torch.randint(0, 256, (1, 64))
        with torch.inference_mode(), NeuronProfiler(NeuronConfig()) as prof:
            model(input_ids=ids, use_cache=False)
        return summarize(prof.result, "5", torch.__version__)

    before, after = profiled("sdpa"), profiled("eager")
    verdict = compare(before, after, GatePolicy())
    assert verdict.status == Status.REGRESSION
    kinds = [f.kind for f in verdict.regressions]
    assert kinds[:2] == [Kind.TOTAL, Kind.REPLACED]
    replaced = verdict.regressions[1]
    assert "scaled_dot_product" in replaced.op and replaced.module.endswith("self_attn")
    assert replaced.reason.startswith("replaced by ") and "aten::bmm" in replaced.reason
    assert replaced.current > replaced.baseline  # eager attention costs more than the fused op
    changes = [abs(f.current - f.baseline) for f in verdict.regressions[2:]
               if f.kind in (Kind.SLOWER, Kind.NEW) and f.op != "aten::bmm"]
    assert all(change <= replaced.current - replaced.baseline for change in changes)
    o = TestOutcome(NODE, ("tests/test_llama.py", 12), verdict, after, before)
    assert "; largest: " + replaced.op + " replaced by " in terminal.failure_headline(o)
