"""Training (``train_step``): forward + backward per microbatch, and per optimizer step the
data-parallel gradient all-reduce and the optimizer, as the published throughput spans them.

``arch`` names the model and the task: ``bert-large-pretrain`` (``BertForPreTraining``, MLM + NSP
loss, of the named BERT), ``vit-base-finetune`` (``ViTForImageClassification``), or
``<decoder>-pretrain`` / ``-finetune`` of any decoder in ``decoders.DECODERS``
(``llama-3.1-8b-pretrain``, ``llama-3.1-70b-pretrain``, ``llama-2-7b-pretrain``): one
tensor-parallel rank of ``LlamaForCausalLM`` running causal flash attention as one op with its
backward, as NeuronX Distributed does by default.

What one optimizer step counts (the published throughput is logged per optimizer step:
``archive/nxd-training/bert.rst``): ``accum`` microbatches of forward + backward (with
``accum > 1`` the gradients of earlier microbatches exist, so the backward accumulates into
them), then the gradient all-reduce over the ``cores / (tp x pp)`` data-parallel replicas (one
``all_reduce`` of the rank's gradients, in their dtype; ZeRO-1's reduce-scatter + all-gather move
the same bytes) and the optimizer (``torch.optim.AdamW(foreach=True)``, or LAMB written as
whole-tensor foreach ops). The ``optimizer`` phase (all-reduce + optimizer) is weighted
``1 / accum``, so the weighted time is the optimizer step's time per microbatch, and the
throughput ``replicas x batch / that``. With ``pp > 1`` (pipeline parallelism, 1F1B) one stage
is built (``layers / pp`` decoder layers, with the embedding and the LM head: the last stage,
the heaviest) and a step takes ``accum + pp - 1`` stage microbatches; the point-to-point sends
between stages are not simulated.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any

import torch

from . import decoders, encoders, vision
from .base import Phase, UnbuildableRow, Workload, bare_name, dtype_of, hf_config
from .parallel import all_reduce, ensure_group

SUFFIXES = ("-pretrain", "-finetune")
# The names the calibration files use for the BERT models: the BERT size -> its published config
_BERT_SIZES = {"bert-large": "bert-large-uncased", "bert-base": "bert-base-uncased"}


def resolve(arch: str) -> tuple[str, str]:
    """(kind, base model) of a training arch: ``bert-large-pretrain`` -> (``bert-pretrain``,
    ``bert-large-uncased``); ``vit-base-finetune`` -> (``vit``, ``vit-base-finetune``);
    ``llama-3.1-70b-pretrain`` -> (``llama``, ``llama-3.1-70b``)."""
    name = bare_name(arch)
    base = next((name[: -len(s)] for s in SUFFIXES if name.endswith(s)), name)
    if base.startswith("bert"):
        base = _BERT_SIZES.get(base, base)
        if encoders.resolve(base)[0] in encoders.ENCODERS:
            return "bert-pretrain", encoders.resolve(base)[0]
    if base.startswith("vit"):
        return "vit", "vit-base-finetune"
    try:
        return "llama", decoders.resolve(base)
    except UnbuildableRow:
        raise UnbuildableRow(
            f"unknown train_step arch {arch!r}: expected bert-<size>-pretrain, vit-base-finetune or "
            f"<decoder>-pretrain with a decoder of {', '.join(decoders.DECODERS)}") from None


def _lamb_step(params: list[torch.Tensor], state: dict[str, list[torch.Tensor]], lr: float = 1e-3,
               betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6, weight_decay: float = 0.01) -> None:
    """LAMB (You et al. 2019) as whole-tensor foreach ops: Adam moments, the update with weight
    decay, per-tensor norms of weights and update, and the trust-ratio-scaled step."""
    grads = [p.grad for p in params]
    exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
    torch._foreach_lerp_(exp_avg, grads, 1 - betas[0])
    torch._foreach_mul_(exp_avg_sq, betas[1])
    torch._foreach_addcmul_(exp_avg_sq, grads, grads, value=1 - betas[1])
    denom = torch._foreach_sqrt(exp_avg_sq)
    torch._foreach_add_(denom, eps)
    update = torch._foreach_div(exp_avg, denom)
    torch._foreach_add_(update, params, alpha=weight_decay)
    w_norm = torch._foreach_norm(params)
    u_norm = torch._foreach_norm(update)
    ratio = torch._foreach_div(w_norm, u_norm)
    torch._foreach_mul_(update, ratio)
    torch._foreach_add_(params, update, alpha=-lr)


@functools.lru_cache(maxsize=None)
def train_model(arch: str, dtype: torch.dtype, tp: int, optimizer: str, sequence_parallel: bool = False,
                layers: int = 0):
    """(model, parameters, optimizer step callable, notes) for a train_step architecture."""
    kind, base = resolve(arch)
    notes: list[str] = []
    if kind == "bert-pretrain":
        from transformers import BertForPreTraining

        with torch.device("meta"):
            model = BertForPreTraining(hf_config(*encoders.ENCODERS[base])).to(dtype).train()
    elif kind == "vit":
        model = vision.vision_model(base, dtype, training=True)
    else:
        model, _, shard_notes = decoders.decoder_model(base, dtype, tp, True, sequence_parallel, layers)
        decoders.use_flash_attention(model)
        notes += list(shard_notes)
        notes.append("causal flash attention as one op with its backward (NxD's default); "
                     "selective activation checkpointing adds no other recompute here")
    params = [p for p in model.parameters() if p.requires_grad]
    if optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, foreach=True)
        step = opt.step
    elif optimizer == "lamb":
        with torch.device("meta"):
            state = {"exp_avg": [torch.zeros_like(p) for p in params],
                     "exp_avg_sq": [torch.zeros_like(p) for p in params]}
        step = functools.partial(_lamb_step, params, state)
        notes.append("LAMB written as whole-tensor foreach ops (torch has no LAMB)")
    else:
        raise UnbuildableRow(f"unknown optimizer {optimizer!r}: adamw or lamb")
    return model, params, step, tuple(notes)


def build_train_step(cfg: dict[str, Any], tp_method: str = "shard", **_: Any) -> Workload:
    arch, batch = cfg["arch"], int(cfg["batch"])
    accum, cores = int(cfg.get("accum", 1)), int(cfg.get("cores", 1))
    tp, pp = int(cfg.get("tp", 1)), int(cfg.get("pp", 1))
    dtype = dtype_of(cfg)
    kind, base = resolve(arch)
    if pp > 1 and kind != "llama":
        raise UnbuildableRow(f"pp={pp}: pipeline stages are built for decoders only, not {arch!r}")
    if cores % (tp * pp):
        raise UnbuildableRow(f"cores={cores} is not a whole number of tp x pp = {tp * pp} replicas")
    replicas = cores // (tp * pp)
    build_tp = tp if tp_method == "shard" else 1
    sp = bool(int(cfg.get("sp", 0))) and build_tp > 1
    if sp and int(cfg["seq"]) % build_tp:
        raise UnbuildableRow(f"sp=1 needs seq divisible by tp ({cfg['seq']} / {build_tp})")
    layers = math.ceil(decoders.layers_of(base) / pp) if pp > 1 else 0
    model, params, step, notes = train_model(arch, dtype, build_tp, cfg.get("optimizer", "adamw"), sp, layers)
    notes = list(notes)
    if pp > 1:
        notes.append(f"pipeline stage of {layers} of {decoders.layers_of(base)} layers with the embedding "
                     f"and LM head; a step is {accum} + {pp} - 1 stage microbatches (1F1B); "
                     "point-to-point sends not simulated")
    with torch.device("meta"):
        if kind == "bert-pretrain":
            seq = int(cfg["seq"])
            inputs = dict(input_ids=torch.zeros(batch, seq, dtype=torch.long),
                          labels=torch.zeros(batch, seq, dtype=torch.long),
                          next_sentence_label=torch.zeros(batch, dtype=torch.long))
        elif kind == "vit":
            image = int(cfg.get("image", 224))
            inputs = dict(pixel_values=torch.zeros(batch, 3, image, image, dtype=dtype),
                          labels=torch.zeros(batch, dtype=torch.long))
        else:
            seq = int(cfg["seq"])
            # A 4-D causal mask given up front: transformers' own mask preparation checks the
            # position ids for packed sequences with .all(), which meta tensors refuse.
            mask = torch.ones(seq, seq, dtype=torch.bool).tril()[None, None]
            inputs = dict(input_ids=torch.zeros(batch, seq, dtype=torch.long),
                          labels=torch.zeros(batch, seq, dtype=torch.long),
                          attention_mask=mask, use_cache=False)
            notes.append("explicit 4-D causal mask passed (transformers' mask preparation fails "
                         "on meta); the flash-attention function ignores it and runs is_causal")
            if tp > 1:
                notes.append("vocab-parallel cross-entropy approximated by the loss over the local "
                             "vocabulary shard (its small all-reduces are left out)")
        grads = torch.zeros(sum(p.numel() for p in params), dtype=params[0].dtype)
    if replicas > 1:
        notes.append(f"gradient all-reduce over {replicas} data-parallel replicas per optimizer step "
                     f"({grads.numel() * grads.element_size() / 2**20:.0f} MiB per rank)")

    def fwd_bwd() -> None:
        if build_tp > 1:
            ensure_group(build_tp)
        if accum == 1:  # no accumulation: each step starts without gradients
            for p in params:
                p.grad = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model(**inputs).loss.backward()

    def optimizer_step() -> None:
        with torch.no_grad():
            if replicas > 1:
                ensure_group(replicas)
                all_reduce(grads)
            step()

    if tp > 1 and tp_method == "divide":
        notes.append(f"tp_method=divide: whole model on one core, time / {tp}")
    microsteps = (accum + pp - 1) / accum
    return Workload("train_step", [Phase("fwd_bwd", fwd_bwd, microsteps),
                                   Phase("optimizer", optimizer_step, 1.0 / accum)],
                    cfg.get("unit", "per_s"), items=replicas * batch, notes=notes, tp=tp,
                    tp_divide=tp > 1 and tp_method == "divide")


def family(arch: str) -> str | None:
    return None  # a training row's size is its own: no regression pair across training archs


BUILDERS = {"train_step": build_train_step}
