"""The published-figure harness builds every row of a documented kind (issue 28, item 5), with
synthetic rows of each kind: encoders beyond the calibration files' (ELECTRA, XLM-R, CamemBERT,
cased BERT) with the head the row ran, Llama context encoding of other models and lengths,
Llama training of other sizes with tp (and pp), the fused-Mamba tutorial's PyTorch loop; a row
it cannot build is a named failure. Needs transformers (the models are its classes, on meta)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


@pytest.fixture(scope="module")
def H() -> Iterator[SimpleNamespace]:
    sys.path.insert(0, str(BENCH))
    try:
        from harness import compare, rows, workloads  # type: ignore[import-not-found]
        from harness.workloads import decoders, encoders, kernels, training  # type: ignore[import-not-found]

        yield SimpleNamespace(rows=rows, compare=compare, W=workloads, encoders=encoders,
                              decoders=decoders, training=training, kernels=kernels)
    finally:
        sys.path.remove(str(BENCH))
        import torch.distributed as dist

        if dist.is_initialized():  # leave no process group to the other tests
            dist.destroy_process_group()


def _row(workload: str, config: str, value: float = 1.0, hw: str = "trn1", notes: str = "",
         index: int = 1) -> dict[str, Any]:
    return {"set": "holdout", "index": index, "source": "synthetic", "hardware_profile": hw,
            "workload": workload, "config": config, "published_metric": "synthetic",
            "published_value": str(value), "published_unit": "ms", "notes": notes}


def _ops(capture: Any) -> list[str]:
    return [r.name for _, _, c in capture.phases for r in c.records if r.engine != "-"]


# --- encoders: the head the row ran -------------------------------------------------------------

@pytest.mark.parametrize("arch, notes, config, expected", [
    ("bert-base-uncased", "", {}, ("AutoModel", 0)),
    ("google/electra-base-discriminator", "", {}, ("AutoModel", 0)),
    ("bert-base-cased-finetuned-mrpc", "", {}, ("SequenceClassification", 2)),
    ("xlm-roberta-base", "", {}, ("MaskedLM", 0)),  # the tables: Raw Output (AutoModelForMaskedLM)
    ("roberta-base", "Raw Output (AutoModelForMaskedLM)", {}, ("MaskedLM", 2)),
    ("camembert-base", "", {"head": "AutoModelForSequenceClassification", "labels": 3},
     ("SequenceClassification", 3)),
])
def test_the_head_is_automodel_unless_the_row_names_another(H: SimpleNamespace, arch: str, notes: str,
                                                           config: dict, expected: tuple) -> None:
    assert H.encoders.head_of(arch, config, notes) == expected


def test_encoder_names_resolve_as_the_tables_spell_them(H: SimpleNamespace) -> None:
    resolve = H.encoders.resolve
    assert resolve("google/electra-base-discriminator")[0] == "electra-base-discriminator"
    assert resolve("FacebookAI/xlm-roberta-base")[0] == "xlm-roberta-base"
    assert resolve("bert-base-cased-finetuned-mrpc") == ("bert-base-cased", "SequenceClassification", 2)
    values = {name: values for name, (_, values) in H.encoders.ENCODERS.items()}
    assert values["xlm-roberta-base"]["vocab_size"] == 250002
    assert values["camembert-base"]["vocab_size"] == 32005
    assert values["electra-base-discriminator"]["embedding_size"] == 768
    assert values["bert-base-cased"]["vocab_size"] == 28996


def test_electra_runs_as_automodel_returning_its_fp32_hidden_state(H: SimpleNamespace) -> None:
    import torch

    capture = H.compare.capture_row(_row("encoder_fwd", "arch=google/electra-base-discriminator;batch=2;"
                                                        "seq=16;dtype=bf16;unit=ms"))
    wl = capture.workload
    assert type(H.encoders.encoder_model("google/electra-base-discriminator", torch.bfloat16)).__name__ == "ElectraModel"
    # ELECTRA has no pooler: its one output, the hidden state, FP32 on the host
    assert [(t.name, t.shape, t.dtype) for t in wl.host_outputs] == [
        ("last_hidden_state", (2, 16, 768), torch.float32)]
    assert [(t.name, t.shape, t.dtype) for t in wl.host_inputs] == [
        ("input_ids", (2, 16), torch.int32), ("attention_mask", (2, 16), torch.int32)]
    assert capture.figure.short() == "e2e w=1"
    assert "aten::mm" in _ops(capture) or "aten::addmm" in _ops(capture)


def test_xlm_roberta_runs_as_masked_lm_over_its_250k_vocabulary(H: SimpleNamespace) -> None:
    import torch

    from pytest_neuronprof.costmodel.profiles import load_hardware

    capture = H.compare.capture_row(_row("encoder_fwd", "arch=xlm-roberta-base;batch=1;seq=16;dtype=bf16;unit=ms"))
    [logits] = capture.workload.host_outputs
    assert (logits.shape, logits.dtype) == ((1, 16, 250002), torch.float32)
    sim = H.compare.simulate(capture, load_hardware("trn1"), "graph")
    # 16 MB of logits: under the 32 MiB mmap threshold, at the link's rate
    assert sim.host.outputs_us == pytest.approx(H.compare.copy_us(logits, load_hardware("trn1"), False))
    assert sim.host.output_bytes == 16 * 250002 * 4


def test_a_finetuned_mrpc_row_returns_two_logits_and_camembert_its_hidden_state_and_pooler(H: SimpleNamespace) -> None:
    mrpc = H.compare.capture_row(_row("encoder_fwd", "arch=bert-base-cased-finetuned-mrpc;batch=4;seq=16;"
                                                     "dtype=bf16;unit=ms"))
    assert [t.shape for t in mrpc.workload.host_outputs] == [(4, 2)]
    camembert = H.compare.capture_row(_row("encoder_fwd", "arch=camembert-base;batch=4;seq=16;dtype=bf16;unit=ms",
                                           hw="inf2"))
    assert [t.shape for t in camembert.workload.host_outputs] == [(4, 16, 768), (4, 768)]


# --- LLM context encoding of other models and lengths -------------------------------------------

@pytest.mark.parametrize("arch, key", [
    ("Llama-2-13b", "llama-2-13b"), ("Llama-2-13b-chat-hf", "llama-2-13b"),
    ("CodeLlama-13b-hf", "codellama-13b"), ("Meta-Llama-3-70B", "llama-3-70b"),
    ("Llama-3.3-70B-Instruct", "llama-3.3-70b"), ("Mistral-7B-Instruct-v0.2", "mistral-7b-instruct-v0.2"),
    ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-8b"), ("Qwen/Qwen3-32B", "qwen3-32b"),
])
def test_decoder_names_resolve_as_the_tables_spell_them(H: SimpleNamespace, arch: str, key: str) -> None:
    assert H.decoders.resolve(arch) == key


def test_prefill_of_another_model_and_length_runs_one_rank_with_its_collectives(H: SimpleNamespace) -> None:
    import torch

    capture = H.compare.capture_row(_row("llama_prefill", "arch=Llama-3.2-1B;batch=1;ctx=96;tp=4;dtype=bf16;unit=ms"))
    ops = _ops(capture)
    assert ops.count("_c10d_functional::all_reduce") == 2 * 16  # 2 per layer, 16 layers
    assert "_c10d_functional::all_gather_into_tensor" in ops  # the vocabulary-sharded logits
    assert [(t.name, t.shape) for t in capture.workload.host_inputs][0] == ("input_ids", (1, 96))
    assert [(t.shape, t.dtype) for t in capture.workload.host_outputs] == [((1, 128256), torch.bfloat16)]
    assert H.rows.row_label(_row("llama_prefill", "arch=Llama-3.2-1B;batch=1;ctx=96;tp=4")) == \
        "H01 Llama-3.2-1B b1 ctx96 tp4 prefill"


def test_a_large_prefill_row_builds(H: SimpleNamespace) -> None:
    wl = H.W.build("llama_prefill", "arch=CodeLlama-13b-hf;batch=1;ctx=8192;tp=32;dtype=bf16;unit=ms")
    assert wl.kind == "llama_prefill" and wl.tp == 32 and wl.host_inputs[0].shape == (1, 8192)


# --- training of other sizes with tp (and pp) -----------------------------------------------------

def test_training_arch_names(H: SimpleNamespace) -> None:
    resolve = H.training.resolve
    assert resolve("bert-large-pretrain") == ("bert-pretrain", "bert-large-uncased")
    assert resolve("vit-base-finetune") == ("vit", "vit-base-finetune")
    assert resolve("llama-3.1-70b-pretrain") == ("llama", "llama-3.1-70b")
    assert resolve("Llama-2-7b-pretrain") == ("llama", "llama-2-7b")
    with pytest.raises(H.W.UnbuildableRow, match="unknown train_step arch"):
        resolve("gpt3-23b-pretrain")


def test_a_pipeline_stage_spans_the_step_and_the_replicas_all_reduce_their_gradients(H: SimpleNamespace) -> None:
    row = _row("train_step", "arch=llama-3.2-1b-pretrain;batch=1;seq=64;accum=4;cores=16;tp=2;pp=4;"
                             "dtype=bf16;unit=per_s")
    capture = H.compare.capture_row(row)
    wl = capture.workload
    assert [(p.name, p.weight) for p in wl.phases] == [("fwd_bwd", (4 + 4 - 1) / 4), ("optimizer", 1 / 4)]
    assert wl.items == 2 * 1  # cores / (tp x pp) replicas x batch
    assert any("pipeline stage of 4 of 16 layers" in n for n in wl.notes)
    assert capture.figure.kind == "step" and not capture.figure.host
    fwd_bwd, optimizer = (c for _, _, c in capture.phases)
    reduces = [r for r in optimizer.records if r.name == "_c10d_functional::all_reduce"]
    assert len(reduces) == 1  # one all-reduce of the rank's gradients per optimizer step
    assert sum(r.engine == "Collective" for r in fwd_bwd.records) >= 2 * 4  # TP: 2 per stage layer


def test_a_training_row_without_data_parallelism_has_no_gradient_all_reduce(H: SimpleNamespace) -> None:
    capture = H.compare.capture_row(_row("train_step", "arch=llama-3.2-1b-pretrain;batch=1;seq=32;accum=2;"
                                                       "cores=2;tp=2;dtype=bf16;unit=per_s"))
    _, optimizer = (c for _, _, c in capture.phases)
    assert not any(r.engine == "Collective" for r in optimizer.records)
    with pytest.raises(H.W.UnbuildableRow, match="whole number"):
        H.W.build("train_step", "arch=llama-3.2-1b-pretrain;batch=1;seq=32;cores=3;tp=2")


# --- the fused-Mamba tutorial's PyTorch loop ------------------------------------------------------

def test_the_mamba_torch_loop_is_the_scan_as_a_loop_over_the_sequence(H: SimpleNamespace) -> None:
    import torch

    config = "batch=1;seq=8;channels=4;state=2;dtype=fp32;unit=us"
    loop = H.compare.capture_row(_row("mamba_fused", config + ";impl=torch_loop"))
    fused = H.compare.capture_row(_row("mamba_fused", config))
    assert loop.figure.kind == fused.figure.kind == "device"
    assert len(_ops(loop)) > len(_ops(fused)) + 8 * 2  # a product, an add and a write per position
    with torch.device("meta"):
        x = torch.zeros(1, 4, 8)
        a = torch.zeros(4, 2)
        b = torch.zeros(1, 2, 8)
    assert H.kernels.mamba_torch_loop(x, a, b, x, b).shape == H.kernels.mamba_layer(x, a, b, x, b).shape
    assert H.rows.row_label(_row("mamba_fused", config + ";impl=torch_loop")) == "H01 mamba b1 s8 c4 torch_loop"
    with pytest.raises(H.W.UnbuildableRow, match="impl"):
        H.W.build("mamba_fused", config + ";impl=cuda")


# --- rows the harness cannot build ----------------------------------------------------------------

@pytest.mark.parametrize("workload, config, message", [
    ("encoder_fwd", "arch=not-a-bert;batch=1;seq=128;unit=ms", "unknown encoder 'not-a-bert'"),
    ("llama_prefill", "arch=gpt-j-6b;ctx=128;unit=ms", "unknown decoder 'gpt-j-6b'"),
    ("vision_fwd", "arch=efficientnet-b0;batch=1;unit=ms", "unknown vision model"),
    ("unet_fwd", "arch=unet;batch=1;unit=ms", "unknown workload 'unet_fwd'"),
    ("llama_decode", "arch=llama-2-7b;unit=ms", "lacks ctx"),
])
def test_a_row_the_harness_cannot_build_is_a_named_failure(H: SimpleNamespace, workload: str, config: str,
                                                           message: str) -> None:
    result = H.compare.run_row(_row(workload, config, index=7))
    assert result["error"].startswith("cannot build H07 ")
    assert message in result["error"]
    assert result["ratio"] is None


def test_the_command_runs_a_file_of_synthetic_rows(H: SimpleNamespace, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import csv

    monkeypatch.setattr(sys, "path", [*sys.path])
    import published  # type: ignore[import-not-found]

    path = tmp_path / "rows.csv"
    fields = ["source", "hardware_profile", "workload", "config", "published_metric", "published_value",
              "published_unit", "notes"]
    rows = [
        ["s", "trn1", "encoder_fwd", "arch=electra-small-discriminator;batch=1;seq=32;dtype=bf16;unit=ms",
         "P50", "0.5", "ms", "Neuron 2.27.0"],
        ["s", "trn1", "encoder_fwd", "arch=distilbert-base-cased;batch=16;seq=32;dtype=bf16;unit=ms", "P50",
         "3.004", "ms", "Neuron 2.20 (throughput = 2 cores x batch / latency: 5328/s published)"],
        ["s", "trn1", "encoder_fwd", "arch=mystery-bert;batch=1;seq=32;unit=ms", "P50", "1", "ms", ""],
    ]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(fields)
        writer.writerows(rows)
    assert published.main(["--file", str(path), "--strict"]) == 1  # a row failed
    out = capsys.readouterr().out
    assert "H01 electra-small-discriminator b1 s32" in out and "e2e w=1: call" in out
    assert "1 row(s) dropped" in out and "H02 distilbert-base-cased b16 s32: Little's law gives N = 1.00" in out
    assert "1 row(s) FAILED" in out and "cannot build H03 mystery-bert b1 s32" in out
