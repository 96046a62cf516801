"""Encoder inference (``encoder_fwd``): a Hugging Face encoder, traced with the head the published
row ran, on ``meta`` tensors.

The published harness (``archive/src/benchmark/pytorch/inf2_benchmark.py``, NeuronPerf) loads
``AutoModel.from_pretrained(name, torchscript=True)`` and calls it with two int32 ``[b, seq]``
tensors (input_ids, attention_mask) on the host; the outputs (``last_hidden_state`` and, where
the model has one, ``pooler_output``) come back to the host in FP32, whatever ``--auto-cast`` did
inside the graph (the compiler keeps the framework's I/O dtypes). Other heads: a ``-finetuned-mrpc``
checkpoint is a SequenceClassification model (2 logits); the ``xlm-roberta`` rows are
``AutoModelForMaskedLM`` (the tables' Task column: "Raw Output (AutoModelForMaskedLM)"), whose
logits over a 250,002-token vocabulary are the output; a row's notes naming
``AutoModelFor<Head>`` or a ``head=`` config key choose another.

The all-ones attention mask is left out of the simulated call (transformers' mask checks call
``.item()``, which meta tensors refuse; an all-ones mask does not change the compiled
arithmetic); it is still one of the host inputs.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import torch
from torch import nn

from .base import HostTensor, Phase, UnbuildableRow, Workload, bare_name, dtype_of, hf_config, host_tensors, inference

# Hugging Face config.json values of the published checkpoints: name -> (model_type, values).
# Each comment names the hub repository whose config.json the values are copied from.
_BERT = dict(max_position_embeddings=512, type_vocab_size=2)
_ROBERTA = dict(max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)
_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)
_LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)
ENCODERS: dict[str, tuple[str, dict[str, Any]]] = {
    # google-bert/bert-base-uncased, bert-large-uncased (vocabulary 30522)
    "bert-base-uncased": ("bert", dict(_BASE, vocab_size=30522, **_BERT)),
    "bert-large-uncased": ("bert", dict(_LARGE, vocab_size=30522, **_BERT)),
    # google-bert/bert-base-cased, bert-large-cased (vocabulary 28996)
    "bert-base-cased": ("bert", dict(_BASE, vocab_size=28996, **_BERT)),
    "bert-large-cased": ("bert", dict(_LARGE, vocab_size=28996, **_BERT)),
    # distilbert/distilbert-base-uncased, distilbert-base-cased: 6 layers, no pooler
    "distilbert-base-uncased": ("distilbert", dict(dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
                                                   vocab_size=30522, max_position_embeddings=512)),
    "distilbert-base-cased": ("distilbert", dict(dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
                                                 vocab_size=28996, max_position_embeddings=512)),
    # albert/albert-base-v2, albert-large-v2: factorized embedding (128), one shared layer group
    "albert-base-v2": ("albert", dict(_BASE, embedding_size=128, vocab_size=30000, num_hidden_groups=1,
                                      inner_group_num=1, hidden_act="gelu_new", **_BERT)),
    "albert-large-v2": ("albert", dict(_LARGE, embedding_size=128, vocab_size=30000, num_hidden_groups=1,
                                       inner_group_num=1, hidden_act="gelu_new", **_BERT)),
    # FacebookAI/roberta-base, roberta-large; distilbert/distilroberta-base (6 layers)
    "roberta-base": ("roberta", dict(_BASE, vocab_size=50265, **_ROBERTA)),
    "roberta-large": ("roberta", dict(_LARGE, vocab_size=50265, **_ROBERTA)),
    "distilroberta-base": ("roberta", dict(_BASE, num_hidden_layers=6, vocab_size=50265, **_ROBERTA)),
    # google/electra-small-discriminator, -base-, -large-: no pooler; embedding_size as published
    "electra-small-discriminator": ("electra", dict(hidden_size=256, num_hidden_layers=12,
                                                    num_attention_heads=4, intermediate_size=1024,
                                                    embedding_size=128, vocab_size=30522, **_BERT)),
    "electra-base-discriminator": ("electra", dict(_BASE, embedding_size=768, vocab_size=30522, **_BERT)),
    "electra-large-discriminator": ("electra", dict(_LARGE, embedding_size=1024, vocab_size=30522, **_BERT)),
    # FacebookAI/xlm-roberta-base, xlm-roberta-large (vocabulary 250002)
    "xlm-roberta-base": ("xlm-roberta", dict(_BASE, vocab_size=250002, **_ROBERTA)),
    "xlm-roberta-large": ("xlm-roberta", dict(_LARGE, vocab_size=250002, **_ROBERTA)),
    # almanach/camembert-base (vocabulary 32005)
    "camembert-base": ("camembert", dict(_BASE, vocab_size=32005, **_ROBERTA)),
}

# The heads a row may run: name -> transformers auto class
HEADS = {"AutoModel": "AutoModel", "SequenceClassification": "AutoModelForSequenceClassification",
         "MaskedLM": "AutoModelForMaskedLM", "QuestionAnswering": "AutoModelForQuestionAnswering",
         "TokenClassification": "AutoModelForTokenClassification"}
# fine-tuned checkpoint suffix -> (head, labels): the GLUE MRPC and SST-2 classifiers, SQuAD readers
FINETUNED = {"-finetuned-mrpc": ("SequenceClassification", 2),
             "-finetuned-sst-2-english": ("SequenceClassification", 2),
             "-distilled-squad": ("QuestionAnswering", 0)}


def resolve(arch: str) -> tuple[str, str | None, int]:
    """(the base architecture, the head its checkpoint implies or None, labels) of a row's
    ``arch``: ``google/electra-base-discriminator`` -> (``electra-base-discriminator``, None, 0);
    ``bert-base-cased-finetuned-mrpc`` -> (``bert-base-cased``, ``SequenceClassification``, 2)."""
    name = bare_name(arch)
    for suffix, (head, labels) in FINETUNED.items():
        if name.endswith(suffix):
            return name[: -len(suffix)], head, labels
    return name, None, 0


def head_of(arch: str, cfg: dict[str, Any], notes: str = "") -> tuple[str, int]:
    """The head the published row ran, and its labels: a ``head=`` key, else a checkpoint suffix
    (``-finetuned-mrpc``, ``-finetuned-sst-2-english``: SequenceClassification with 2 labels;
    ``-distilled-squad``: QuestionAnswering), else a head the notes name
    (``AutoModelForMaskedLM``), else MaskedLM for XLM-R (its tables' task), else AutoModel."""
    base, implied, labels = resolve(arch)
    if "head" in cfg:
        head = str(cfg["head"]).removeprefix("AutoModelFor")
        if head not in HEADS:
            raise UnbuildableRow(f"unknown head {cfg['head']!r}; known: {', '.join(HEADS)}")
        return head, int(cfg.get("labels", labels or 2))
    if implied:
        return implied, labels
    named = re.search(r"AutoModelFor(\w+)", notes or "")
    if named and named.group(1) in HEADS:
        return named.group(1), 2
    if base.startswith("xlm-roberta"):
        return "MaskedLM", 0
    return "AutoModel", 0


@functools.lru_cache(maxsize=None)
def encoder_model(arch: str, dtype: torch.dtype, head: str = "AutoModel", labels: int = 0) -> nn.Module:
    import transformers

    base, _, _ = resolve(arch)
    if base not in ENCODERS:
        raise UnbuildableRow(f"unknown encoder {arch!r} (no published config.json written out for it); "
                             f"known: {', '.join(ENCODERS)}")
    model_type, values = ENCODERS[base]
    if labels:
        values = dict(values, num_labels=labels)
    auto = getattr(transformers, HEADS[head])
    with torch.device("meta"):
        model = auto.from_config(hf_config(model_type, values))
    return model.to(dtype).eval()


def build_encoder_fwd(cfg: dict[str, Any], notes: str = "", **_: Any) -> Workload:
    arch, batch, seq = cfg["arch"], int(cfg["batch"]), int(cfg.get("seq", 128))
    head, labels = head_of(arch, cfg, notes)
    model = encoder_model(arch, dtype_of(cfg), head, labels)
    with torch.device("meta"):
        ids = torch.zeros(batch, seq, dtype=torch.long)
    unit = cfg.get("unit", "ms")
    inputs = [HostTensor("input_ids", (batch, seq), torch.int32),
              HostTensor("attention_mask", (batch, seq), torch.int32)]
    notes_out = [f"head: {head}" + (f" ({labels} labels)" if labels else ""),
                 "attention mask omitted from the simulated call (transformers' mask checks call "
                 ".item() on meta); copied to the device as a host input"]
    return Workload("encoder_fwd", [Phase("forward", inference(lambda: model(input_ids=ids)))],
                    unit, items=int(cfg.get("cores", 1)) * batch, notes=notes_out, host_inputs=inputs,
                    outputs=lambda result: host_tensors(result, dtype=torch.float32))


def family(arch: str) -> str | None:
    """``model_type/vocabulary`` of a known encoder (the same code and vocabulary at another
    size), None for an unknown one."""
    base, _, _ = resolve(arch)
    if base not in ENCODERS:
        return None
    kind, values = ENCODERS[base]
    return f"{kind}/{values.get('vocab_size')}"


BUILDERS = {"encoder_fwd": build_encoder_fwd}
