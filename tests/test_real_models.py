"""Real Hugging Face models (GPT-2, BERT, Llama, T5, BART, ViT) from small configs: every op is
costed, and a grad mode changes nothing that eager PyTorch does not change. Runs when transformers
is installed (the dev extra has it)."""

from __future__ import annotations

import contextlib

import pytest
import torch

from pytest_neuronprof import NeuronConfig, NeuronProfiler

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

VOCAB = 128


def profiled(fn, context=contextlib.nullcontext, hardware="trn2"):
    with context(), NeuronProfiler(NeuronConfig(hardware=hardware)) as prof:
        fn()
    return prof.result


def records(result) -> list[tuple]:
    """What a baseline is made of, per op call: name, module, engine, work and device time."""
    return [(r.name, r.module_path, r.engine, r.flops, r.bytes_read, r.bytes_written,
             r.device_time_us) for r in result.records]


def _decoders():
    t = transformers
    small = dict(vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
                 intermediate_size=64)
    return {
        "gpt2": lambda: t.GPT2LMHeadModel(t.GPT2Config(vocab_size=VOCAB, n_embd=32, n_head=4,
                                                       n_layer=2, n_positions=64)),
        "llama": lambda: t.LlamaForCausalLM(t.LlamaConfig(**small, num_key_value_heads=2,
                                                          max_position_embeddings=64)),
        "t5": lambda: t.T5ForConditionalGeneration(t.T5Config(
            vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
            decoder_start_token_id=0)),
        "bart": lambda: t.BartForConditionalGeneration(t.BartConfig(
            vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=64)),
    }


MODELS = ("gpt2", "llama", "t5", "bart", "bert", "vit")


def build(name: str):
    """(model in eval mode, its forward's keyword arguments, its training labels)."""
    torch.manual_seed(0)
    t = transformers
    ids = torch.randint(0, VOCAB, (2, 16))
    if name == "bert":
        model = t.BertForSequenceClassification(t.BertConfig(
            vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_hidden_layers=2,
            intermediate_size=64, max_position_embeddings=64))
        return model.eval(), {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, torch.tensor([0, 1])
    if name == "vit":
        model = t.ViTForImageClassification(t.ViTConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            image_size=32, patch_size=8, num_labels=3))
        return model.eval(), {"pixel_values": torch.randn(2, 3, 32, 32)}, torch.tensor([0, 2])
    model = _decoders()[name]()
    kwargs = {"input_ids": ids}
    labels = ids
    if name in ("t5", "bart"):
        kwargs["decoder_input_ids"] = ids[:, :8].contiguous()
        labels = ids[:, :8].contiguous()
    return model.eval(), kwargs, labels


@pytest.mark.parametrize("name", MODELS)
def test_no_grad_and_inference_mode_record_the_same_ops_and_times(name):
    model, kwargs, _ = build(name)
    no_grad = profiled(lambda: model(**kwargs), torch.no_grad)
    inference = profiled(lambda: model(**kwargs), torch.inference_mode)
    assert records(no_grad) == records(inference)
    assert no_grad.uncosted_ops == []
    in_dropout = [r for r in no_grad.records
                  if "dropout" in r.module_path.rsplit(".", 1)[-1].lower() and r.device_time_us]
    assert in_dropout == []  # eval dropout runs nothing


@pytest.mark.parametrize("name", MODELS)
def test_a_training_step_is_costed_whole(name):
    model, kwargs, labels = build(name)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        model(**kwargs, labels=labels).loss.backward()
        optimizer.step()

    result = profiled(step)
    assert result.uncosted_ops == []
    phases = {r.phase for r in result.records}
    assert phases == {"forward", "backward"}
    names = {r.name for r in result.records}
    if name in ("llama", "vit"):  # SDPA without dropout: CPU's fused kernel, forward and backward
        assert {"aten::_scaled_dot_product_flash_attention",
                "aten::_scaled_dot_product_flash_attention_backward"} <= names


@pytest.mark.parametrize("name", ["gpt2", "llama", "t5", "bart"])
@pytest.mark.parametrize("search", ["sample", "beam"])
def test_generate_is_costed_whole(name, search):
    model, kwargs, _ = build(name)
    options = ({"do_sample": True, "top_k": 5, "top_p": 0.9} if search == "sample"
               else {"num_beams": 2})
    prompt = kwargs["input_ids"][:, :4]
    result = profiled(lambda: model.generate(prompt, max_new_tokens=3, **options), torch.no_grad)
    assert result.uncosted_ops == []
    assert result.total_device_time_us > 0


def test_llama_training_on_meta_tensors_runs_fused_attention_forward_and_backward():
    """A full-size-style step on meta tensors: attention is the fused kernel (forward and
    backward), not torch's math path of bmm and an fp32 softmax, which the meta device picks."""
    t = transformers
    with torch.device("meta"):
        model = t.LlamaForCausalLM(t.LlamaConfig(
            vocab_size=VOCAB, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
            num_hidden_layers=2, intermediate_size=512, max_position_embeddings=256))
        ids = torch.zeros(1, 256, dtype=torch.long)
    result = profiled(lambda: model(input_ids=ids, labels=ids).loss.backward())
    names = [r.name for r in result.records]
    assert names.count("aten::_scaled_dot_product_flash_attention") == 2
    assert names.count("aten::_scaled_dot_product_flash_attention_backward") == 2
    assert "aten::_safe_softmax" not in names and "aten::bmm" not in names
    assert result.uncosted_ops == []
