"""Decoder-only LLM inference: ``llama_decode`` (one decode step with a KV cache of ``ctx``
tokens) and ``llama_prefill`` (context encoding: ``ctx`` prompt tokens into an empty KV cache,
the last position's logits), of any Llama-family model whose published ``config.json`` is
written out below, on one tensor-parallel rank (``parallel``).

* ``llama_decode``: one new token per sequence with a ``transformers.StaticCache`` of ``ctx``
  tokens (attention over all of them, the new token's K/V written with ``index_copy_``),
  logits of the new token only.
* ``llama_prefill``: one pass over ``ctx`` tokens (causal SDPA; the K/V written into a fresh
  ``DynamicCache``), logits of the last token only.

Host transfers per call: the token ids (int32) in, the last position's logits (the model's dtype,
all-gathered over the vocabulary shards) out; the KV cache stays on the device.

``tp_method="divide"`` builds the whole model on one core and divides its time by ``tp`` (the
crude lower bound the calibration file's notes describe).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import nn

from .base import HostTensor, Phase, UnbuildableRow, Workload, bare_name, dtype_of, hf_config, inference
from .parallel import ensure_group, install_sp_collectives, install_tp_collectives, shard_values

_L2 = dict(rms_norm_eps=1e-5, max_position_embeddings=4096, vocab_size=32000)
_L3 = dict(rms_norm_eps=1e-5, rope_theta=500000.0, vocab_size=128256)
# Decoder-only LLMs: (model_type, values), each from the hub repository's config.json named
# beside it. rope settings do not change the arithmetic.
DECODERS: dict[str, tuple[str, dict[str, Any]]] = {
    # meta-llama/Llama-2-7b-hf, -13b-hf, -70b-hf
    "llama-2-7b": ("llama", dict(_L2, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=32)),
    "llama-2-13b": ("llama", dict(_L2, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                  num_attention_heads=40, num_key_value_heads=40)),
    "llama-2-70b": ("llama", dict(_L2, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                  num_attention_heads=64, num_key_value_heads=8)),
    # codellama/CodeLlama-7b-hf, -13b-hf (16k context, rope_theta 1e6, 32016 tokens)
    "codellama-7b": ("llama", dict(_L2, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=32, vocab_size=32016,
                                   rope_theta=1e6, max_position_embeddings=16384)),
    "codellama-13b": ("llama", dict(_L2, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                    num_attention_heads=40, num_key_value_heads=40, vocab_size=32016,
                                    rope_theta=1e6, max_position_embeddings=16384)),
    # meta-llama/Meta-Llama-3-8B, Meta-Llama-3-70B; Llama-3.3-70B-Instruct and Llama-3.1-70B have
    # the same shapes (128k context)
    "llama-3-8b": ("llama", dict(_L3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192)),
    "llama-3-70b": ("llama", dict(_L3, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                  num_attention_heads=64, num_key_value_heads=8, max_position_embeddings=8192)),
    "llama-3.1-70b": ("llama", dict(_L3, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                    num_attention_heads=64, num_key_value_heads=8,
                                    max_position_embeddings=131072)),
    "llama-3.3-70b": ("llama", dict(_L3, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                    num_attention_heads=64, num_key_value_heads=8,
                                    max_position_embeddings=131072)),
    # meta-llama/Llama-3.1-8B, Llama-3.1-405B
    "llama-3.1-8b": ("llama", dict(_L3, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8,
                                   max_position_embeddings=131072)),
    "llama-3.1-405b": ("llama", dict(_L3, hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                                     num_attention_heads=128, num_key_value_heads=8,
                                     max_position_embeddings=131072)),
    # meta-llama/Llama-3.2-1B, Llama-3.2-3B (tied embeddings)
    "llama-3.2-1b": ("llama", dict(_L3, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                                   num_attention_heads=32, num_key_value_heads=8, head_dim=64,
                                   tie_word_embeddings=True, max_position_embeddings=131072)),
    "llama-3.2-3b": ("llama", dict(_L3, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
                                   num_attention_heads=24, num_key_value_heads=8, head_dim=128,
                                   tie_word_embeddings=True, max_position_embeddings=131072)),
    # mistralai/Mistral-7B-v0.1 (sliding window 4096), Mistral-7B-Instruct-v0.2 (none)
    "mistral-7b": ("mistral", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, vocab_size=32000,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=4096,
                                   max_position_embeddings=32768)),
    "mistral-7b-instruct-v0.2": ("mistral", dict(hidden_size=4096, intermediate_size=14336,
                                                 num_hidden_layers=32, num_attention_heads=32,
                                                 num_key_value_heads=8, vocab_size=32000,
                                                 rms_norm_eps=1e-5, rope_theta=1e6, sliding_window=None,
                                                 max_position_embeddings=32768)),
    # Qwen/Qwen3-8B, Qwen3-32B (per-head RMSNorm on q and k; head_dim 128)
    "qwen3-8b": ("qwen3", dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                               vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1e6,
                               max_position_embeddings=40960, tie_word_embeddings=False)),
    "qwen3-32b": ("qwen3", dict(hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                                num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                                vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1e6,
                                max_position_embeddings=40960, tie_word_embeddings=False)),
}
ALIASES = {"mistral-7b-instruct-v0.1": "mistral-7b", "mistral-7b-v0.1": "mistral-7b"}
_SUFFIXES = ("-hf", "-chat", "-instruct")


def resolve(arch: str) -> str:
    """The DECODERS key of a row's ``arch`` as the tables spell it: ``Meta-Llama-3-70B``,
    ``Llama-3.3-70B-Instruct``, ``CodeLlama-13b-hf``, ``Llama-2-13b-chat-hf``; an unknown one
    raises ``UnbuildableRow``."""
    name = bare_name(arch).removeprefix("meta-")
    for _ in range(len(_SUFFIXES) + 1):
        name = ALIASES.get(name, name)
        if name in DECODERS:
            return name
        stripped = next((name[: -len(s)] for s in _SUFFIXES if name.endswith(s)), None)
        if stripped is None:
            break
        name = stripped
    raise UnbuildableRow(f"unknown decoder {arch!r} (no published config.json written out for it); "
                         f"known: {', '.join(DECODERS)}")


@functools.lru_cache(maxsize=None)
def decoder_model(arch: str, dtype: torch.dtype, tp: int, training: bool,
                  sequence_parallel: bool = False, layers: int = 0) -> tuple[nn.Module, Any, tuple]:
    """(model, its config, notes) of one TP rank of ``arch`` (tp=1: the whole model), with
    Megatron TP collectives, and sequence parallelism if asked; ``layers`` > 0: that many decoder
    layers (a pipeline stage) instead of the model's."""
    from transformers import AutoModelForCausalLM

    model_type, full = DECODERS[resolve(arch)]
    notes: list[str] = []
    values = dict(full)
    if layers:
        values["num_hidden_layers"] = layers
    if tp > 1:
        values, notes = shard_values(values, tp)
    # transformers validates hidden_size % num_attention_heads at construction, which a shard
    # with padded heads (64 heads / TP=24 -> 3 per rank) fails although head_dim is explicit:
    # build with the full model's head counts, then set the rank's.
    heads = {k: values.pop(k) for k in ("num_attention_heads", "num_key_value_heads")}
    cfg = hf_config(model_type, dict(values, num_attention_heads=full["num_attention_heads"],
                                     num_key_value_heads=full.get("num_key_value_heads",
                                                                  full["num_attention_heads"])))
    for key, value in heads.items():
        setattr(cfg, key, value)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg)
    model = model.to(dtype)
    model.train(training)
    if tp > 1 and sequence_parallel:
        install_sp_collectives(model, tp, training)
        notes.append("sequence parallel: norms and residuals on S/tp tokens, reduce-scatter + "
                     "all-gather over the sequence instead of all-reduce")
    elif tp > 1:
        install_tp_collectives(model, tp, gather_logits=not training)
    return model, cfg, tuple(notes)


def cache_kwarg(model: nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def flash_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """A transformers attention function that runs causal flash attention as one ATen op with its
    own backward (``_scaled_dot_product_flash_attention_for_cpu`` and ``..._backward``, which
    have meta kernels), instead of SDPA, which under autograd on meta decomposes into
    bmm + softmax over the full S x S scores. NeuronX Distributed's Llama training uses its
    flash-attention kernel by default (training_llama_tp_zero1.rst: ``--use_flash_attention``)."""
    groups = query.shape[1] // key.shape[1]
    if groups > 1:  # grouped-query attention: repeat the KV heads, as transformers' repeat_kv
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, dropout, True, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def use_flash_attention(model: nn.Module) -> None:
    from transformers import AttentionInterface

    AttentionInterface.register("neuronprof_flash", flash_attention)
    model.config._attn_implementation = "neuronprof_flash"


def _build_llm(cfg: dict[str, Any], prefill: bool, tp_method: str) -> Workload:
    from transformers import DynamicCache, StaticCache

    arch, batch, ctx, tp = cfg["arch"], int(cfg.get("batch", 1)), int(cfg["ctx"]), int(cfg.get("tp", 1))
    build_tp = tp if tp_method == "shard" else 1
    sp = bool(int(cfg.get("sp", 0))) and build_tp > 1
    if sp and not prefill:
        raise UnbuildableRow("sp=1 applies to prefill (context encoding) only: token generation "
                             "runs without sequence parallelism")
    if sp and ctx % build_tp:
        raise UnbuildableRow(f"sp=1 needs ctx divisible by tp ({ctx} / {build_tp})")
    dtype = dtype_of(cfg)
    model, hf_cfg, shard_notes = decoder_model(resolve(arch), dtype, build_tp, False, sp)
    notes = list(shard_notes)
    cache_kw = cache_kwarg(model)
    with torch.device("meta"):
        if prefill:
            ids = torch.zeros(batch, ctx, dtype=torch.long)
        else:
            ids = torch.zeros(batch, 1, dtype=torch.long)
            position = torch.tensor([ctx - 1])
            cache = StaticCache(config=hf_cfg, max_cache_len=ctx)

    def step() -> Any:
        if build_tp > 1:
            ensure_group(build_tp)
        if prefill:  # a fresh cache per pass; a cache (not None) also skips the packed-sequence check
            return model(input_ids=ids, **{cache_kw: DynamicCache(config=hf_cfg)}, use_cache=True,
                         logits_to_keep=1)
        return model(input_ids=ids, **{cache_kw: cache}, cache_position=position, use_cache=True,
                     logits_to_keep=1)

    vocab = DECODERS[resolve(arch)][1]["vocab_size"]
    if tp > 1 and tp_method == "divide":
        notes.append(f"tp_method=divide: whole model on one core, time / {tp}")
    tokens = ids.shape[1]
    return Workload("llama_prefill" if prefill else "llama_decode",
                    [Phase("prefill" if prefill else "decode_step", inference(step))],
                    cfg.get("unit", "ms"), items=batch, notes=notes, tp=tp,
                    host_inputs=[HostTensor("input_ids", (batch, tokens), torch.int32),
                                 HostTensor("position_ids", (batch, tokens), torch.int32)],
                    host_outputs=[HostTensor("logits", (batch, vocab), dtype)],
                    tp_divide=tp > 1 and tp_method == "divide")


def build_llama_decode(cfg: dict[str, Any], tp_method: str = "shard", **_: Any) -> Workload:
    return _build_llm(cfg, prefill=False, tp_method=tp_method)


def build_llama_prefill(cfg: dict[str, Any], tp_method: str = "shard", **_: Any) -> Workload:
    return _build_llm(cfg, prefill=True, tp_method=tp_method)


def family(arch: str) -> str | None:
    try:
        kind, values = DECODERS[resolve(arch)]
    except UnbuildableRow:
        return None
    return f"{kind}/{values.get('vocab_size')}"


def layers_of(arch: str) -> int:
    return int(DECODERS[resolve(arch)][1]["num_hidden_layers"])


BUILDERS = {"llama_decode": build_llama_decode, "llama_prefill": build_llama_prefill}
