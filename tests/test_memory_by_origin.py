"""A memory regression names what grew (issue 29, item 2): an entry keeps what is live at the
peak grouped by origin (op, module, shape, dtype: count and bytes; the 50 largest groups; baseline
schema 6, report version 5), and the gate compares by origin, naming the groups new or larger at
the peak ("new at the peak: 2 x bfloat16[1,32,2048,128] from aten::cat in self_attn, 32 MiB").

Before, an entry kept the five largest tensors at the peak: adding a DynamicCache to a
Llama-2-7B layer on meta failed with "allocated +32 MiB" alone, and its table listed weights
and MLP temporaries, never the two new 16 MiB K/V tensors. Entries of schema 5 (``at_peak``)
are still read and compared as far as five tensors allow."""

from __future__ import annotations

import inspect
import json
from dataclasses import replace

import pytest

from pytest_neuronprof.costmodel.memory import RESIDENT, LiveGroup, memory_usage
from pytest_neuronprof.errors import BaselineError
from pytest_neuronprof.gate.baseline import parse_baseline_text, render_baseline
from pytest_neuronprof.gate.compare import GatePolicy, Kind, Status, compare
from pytest_neuronprof.gate.memory import (MAX_GROUPS_KEPT, MemorySummary, PeakGroup, PeakTensor,
                                           memory_reason, peak_changes, summarize_memory)
from pytest_neuronprof.gate.outcome import TestOutcome
from pytest_neuronprof.gate.summary import OpSummary, ProfileSummary
from pytest_neuronprof.outputs import terminal
from pytest_neuronprof.outputs.rows import tensor_rows, tensors_left

try:  # imported with the module, before any in-process pytester run (tests/conftest.py says why)
    import transformers
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding
except ImportError:  # the tests that need it skip
    transformers = None

MiB, GiB = 2**20, 2**30
NODE = "tests/test_llama.py::test_layer"


def summary(memory: MemorySummary) -> ProfileSummary:
    mm = OpSummary(4, 100.0, "Tensor", 10**9, 10**6, 1.0, "mlp")
    return ProfileSummary("simulated", "trn2", "5", "2.13", 100.0, {"aten::mm": mm}, memory=memory)


def group(op: str, module: str, shape: tuple[int, ...], count: int, each: int,
          dtype: str = "bfloat16") -> PeakGroup:
    return PeakGroup(op, module, shape, dtype, count, count * each)


WEIGHTS = group("(resident)", "", (11008, 4096), 3, 86 * MiB)
QKV = group("(resident)", "", (4096, 4096), 4, 32 * MiB)
SILU = group("aten::silu", "mlp.act_fn", (1, 2048, 11008), 1, 43 * MiB)
KV = group("aten::cat", "self_attn", (1, 32, 2048, 128), 2, 16 * MiB)


def test_the_capture_groups_what_is_live_at_the_peak_by_origin():
    storages = [(RESIDENT, 100, (10, 5), "float32"), (RESIDENT, 100, (10, 5), "float32"),
                (0, 64, (16,), "float32"), (1, 64, (16,), "float32"), (1, 64, (16,), "float32"),
                (2, 8, (2,), "float32")]
    frees = [(2, 2)]  # op 0's output dies before op 2: not at the peak (after op 1)
    usage = memory_usage(storages, frees, 3, lambda k: (["aten::a", "aten::b", "aten::c"][k], "m"))
    assert usage.peak_bytes == 200 + 64 + 128
    assert usage.live == (
        LiveGroup("(resident)", "", (10, 5), "float32", 2, 200),
        LiveGroup("aten::b", "m", (16,), "float32", 2, 128),
        LiveGroup("aten::a", "m", (16,), "float32", 1, 64))
    kept = summarize_memory(usage)
    assert kept is not None and kept.at_peak == ()
    assert [(g.op, g.count, g.bytes) for g in kept.live] == [("(resident)", 2, 200), ("aten::b", 2, 128),
                                                              ("aten::a", 1, 64)]


def test_an_entry_keeps_the_50_largest_groups_and_writes_them_back_byte_for_byte(tmp_path):
    class Usage:  # what summarize_memory reads of a MemoryUsage
        peak_bytes, resident_bytes, sbuf_peak_bytes, spilled_bytes = 200 * MiB, 0, None, None
        live = tuple(LiveGroup("aten::mm", f"layers.{i}", (1024,), "float32", 1, (100 - i) * 1024)
                     for i in range(80))

    memory = summarize_memory(Usage())
    assert memory is not None and len(memory.live) == MAX_GROUPS_KEPT == 50
    assert memory.live[0].module == "layers.0" and memory.live[-1].module == "layers.49"
    entry = summary(memory)
    text = render_baseline({NODE: {entry.variant: entry}})
    stored = json.loads(text)["tests"][NODE]["simulated:trn2"]["memory"]
    assert "at_peak" not in stored and stored["live"][0] == {
        "bytes": 100 * 1024, "count": 1, "dtype": "float32", "module": "layers.0", "op": "aten::mm",
        "shape": [1024]}
    back = parse_baseline_text(tmp_path / "b.json", text)[NODE]["simulated:trn2"]
    assert back == entry and render_baseline({NODE: {entry.variant: back}}) == text


@pytest.mark.parametrize("change, problem", [
    (lambda doc: doc.update(schema_version=5), "needs schema_version 6"),
    (lambda doc: _memory(doc)["live"][0].update(count=0), "at least one tensor"),
    (lambda doc: _memory(doc)["live"].extend(_memory(doc)["live"] * 50), "at most 50"),
    (lambda doc: _memory(doc)["live"][0].update(colour=1), "colour"),
])
def test_a_bad_or_early_live_set_is_a_broken_file(tmp_path, change, problem):
    entry = summary(MemorySummary(GiB, 0, live=(KV,)))
    doc = json.loads(render_baseline({NODE: {entry.variant: entry}}))
    change(doc)
    with pytest.raises(BaselineError, match=problem):
        parse_baseline_text(tmp_path / "b.json", json.dumps(doc))


def _memory(doc: dict) -> dict:
    return doc["tests"][NODE]["simulated:trn2"]["memory"]


def test_new_and_larger_groups_are_named_however_small_beside_the_weights():
    before = MemorySummary(564 * MiB, 402 * MiB, live=(WEIGHTS, QKV, SILU))
    more_silu = replace(SILU, count=2, bytes=86 * MiB)
    after = MemorySummary(596 * MiB + 43 * MiB, 402 * MiB, live=(WEIGHTS, QKV, more_silu, KV))
    assert memory_reason(before, after) == (
        "allocated +75 MiB; new at the peak: 2 x bfloat16[1,32,2048,128] from aten::cat in "
        "self_attn, 32 MiB; more at the peak: bfloat16[1,2048,11008] from aten::silu in "
        "mlp.act_fn, 43 MiB (2 now)")
    cells = [(c.group.op, c.cell()) for c in peak_changes(before, after)]
    assert cells == [("aten::silu", "was 1"), ("aten::cat", "new"), ("(resident)", "yes"),
                     ("(resident)", "yes")]


def test_a_schema_5_baseline_is_compared_as_far_as_its_five_tensors_allow():
    # the five largest tensors, the smallest 43 MiB: a group absent from them whose tensors are
    # larger was not at the peak; a smaller one may have been (not said); resident tensors were
    # recorded with the shape of the view the capture met them through: not matched
    old_tensors = tuple(PeakTensor(86 * MiB, (4096, 11008), "bfloat16", "(resident)", "") for _ in range(3)) + (
        PeakTensor(43 * MiB, (1, 2048, 11008), "bfloat16", "aten::silu", "mlp.act_fn"),
        PeakTensor(43 * MiB, (2048, 11008), "bfloat16", "aten::mm", "mlp.up_proj"))
    before = MemorySummary(564 * MiB, 402 * MiB, old_tensors)
    big_new = group("aten::bmm", "self_attn", (1, 32, 2048, 2048), 1, 256 * MiB)
    after = MemorySummary(564 * MiB + 288 * MiB, 402 * MiB, live=(WEIGHTS, big_new, SILU, KV))
    assert memory_reason(before, after) == (
        "allocated +288 MiB; new at the peak: bfloat16[1,32,2048,2048] from aten::bmm in self_attn, 256 MiB")
    cells = {c.group.op: c.cell() for c in peak_changes(before, after)}
    assert cells == {"aten::bmm": "new", "aten::silu": "yes", "aten::cat": "-", "(resident)": "-"}
    o = TestOutcome(NODE, ("t.py", 1), compare(summary(before), summary(after), GatePolicy()),
                    summary(after), summary(before))
    assert "the baseline kept only the 5 largest tensors at its peak (schema 5)" in tensors_left(o)


def test_a_dynamic_cache_added_to_a_llama_2_7b_layer_on_meta_names_its_k_and_v():
    """The issue's reproduction, run: one Llama-2-7B decoder layer (bf16, 2048 tokens) on meta,
    without and with a DynamicCache."""
    if transformers is None:
        pytest.skip("transformers is not installed")
    import torch

    from pytest_neuronprof import NeuronConfig, NeuronProfiler
    from pytest_neuronprof.gate.summary import summarize

    config = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=1,
                                      num_attention_heads=32, num_key_value_heads=32,
                                      vocab_size=32000, attn_implementation="sdpa")

    def profiled(cache: bool) -> ProfileSummary:
        with torch.device("meta"):
            layer = LlamaDecoderLayer(config, layer_idx=0).to(torch.bfloat16)
            rope = LlamaRotaryEmbedding(config)
            x = torch.randn(1, 2048, 4096, dtype=torch.bfloat16)
            positions = torch.arange(2048).unsqueeze(0)
        # "cache" in newer transformers, "past_key_values" before
        name = "cache" if "cache" in inspect.signature(layer.forward).parameters else "past_key_values"
        kv = {name: transformers.DynamicCache(config=config)} if cache else {}
        with torch.inference_mode(), NeuronProfiler(NeuronConfig()) as prof:
            layer(x, attention_mask=None, position_ids=positions, use_cache=cache,
                  position_embeddings=rope(x, positions), **kv)
        return summarize(prof.result, "5", torch.__version__)

    before, after = profiled(False), profiled(True)
    verdict = compare(before, after, GatePolicy())
    assert verdict.status == Status.REGRESSION
    (finding,) = [f for f in verdict.regressions if f.kind == Kind.MEMORY]
    assert (finding.baseline, finding.current) == (before.memory.peak_bytes, after.memory.peak_bytes)
    assert after.memory.peak_bytes - before.memory.peak_bytes == 32 * MiB
    assert finding.reason.startswith("allocated +32 MiB; new at the peak: 2 x bfloat16[1,32,2048,128] from ")
    assert finding.reason.endswith(" in self_attn, 32 MiB")
    o = TestOutcome(NODE, ("t.py", 1), verdict, after, before)
    rows = tensor_rows(o)
    assert rows[0][2:] == ["[1,32,2048,128]", "bfloat16", "2", "32 MiB", "new"]  # first: what is new
    assert all(row[-1] == "yes" for row in rows[1:])  # the weights and MLP temporaries: as before
    assert "new at the peak: 2 x bfloat16[1,32,2048,128]" in terminal.failure_section(o)
    assert len(after.memory.live) <= 50 and after.memory.at_peak == ()
