"""Workloads behind the figures AWS publishes for Trainium / Inferentia, rebuilt on ``meta`` tensors.

Used by ``benchmarks/published.py``; the rows are in ``benchmarks/data/trn_published_*.csv``
(see ``benchmarks/data/README.md``). ``build(workload, config)`` turns one row's ``workload``
and ``config`` (``key=value;...``) into a :class:`Workload`: the phases to run under whatever
profiler is active (one call each; weights say how a phase counts in the published figure, e.g.
an optimizer step once per ``accum`` microbatches) and ``to_metric``, which turns the weighted
simulated device time (us) into the row's unit:

==============  ======================================================================
unit            conversion of the simulated device time ``t`` (us)
==============  ======================================================================
``ms``          ``t / 1e3`` (latency of one request / batch / decode step / prefill)
``us``          ``t`` (NKI kernel device time)
``per_s``       items per second: ``cores / tp * batch * 1e6 / t``; ``cores`` defaults to
                1 and ``tp`` to 1; a decode row's items are tokens: ``batch * 1e6 / t``
==============  ======================================================================

Every model runs on ``meta`` tensors: full-size models cost no memory and no arithmetic; the
profiler sees each ATen op with its shapes. Inference runs under ``torch.inference_mode()``;
training phases run under autograd (forward + ``loss.backward()``), the optimizer step apart.

What is rebuilt, and how (the model configurations are the published Hugging Face
``config.json`` values, written out below because no hub download is possible here):

* ``encoder_fwd``: ``transformers.AutoModel`` of the named encoder (the benchmark script
  ``archive/src/benchmark/pytorch/inf2_benchmark.py`` traces ``AutoModel`` with input_ids and an
  attention mask); the all-ones attention mask is left out because transformers' mask
  preprocessing calls ``.item()``, which meta tensors refuse; an all-ones mask does not change
  the arithmetic of the compiled graph.
* ``vision_fwd``: torchvision's ResNet (v1.5: stride in the 3x3 convolution) and VGG written
  out layer for layer (torchvision cannot be installed here), and
  ``transformers.ViTForImageClassification`` for ``vit-base-patch16-224``; eval mode, so
  BatchNorm is a separate op (the compiler folds it into the convolution).
* ``train_step``: ``BertForPreTraining`` (MLM + NSP loss), ``ViTForImageClassification`` or
  one tensor-parallel rank of ``LlamaForCausalLM``; forward + backward per microbatch, plus
  the optimizer step (``torch.optim.AdamW(foreach=True)``, or LAMB written as whole-tensor
  foreach ops) weighted ``1 / accum``. With ``accum > 1`` the gradients of earlier
  microbatches exist, so the backward accumulates into them, as a real accumulation step does.
  The data-parallel gradient all-reduce is not simulated. BERT and ViT attention runs as
  transformers writes it (under autograd on meta, SDPA decomposes into bmm + softmax, which is
  what an XLA graph of the Hugging Face model computes); the Llama rank runs causal flash
  attention as one op with its backward, as NeuronX Distributed does by default.
* ``llama_decode``: one decode step (one new token per sequence) of the named Llama-family
  model with a ``transformers.StaticCache`` of ``ctx`` tokens (attention over all of them,
  the new token's K/V written with ``index_copy_``), logits of the new token only.
* ``llama_prefill``: one context-encoding pass over ``ctx`` tokens (causal SDPA; the K/V
  written into a fresh ``DynamicCache``), logits of the last token only.
* ``mamba_fused``: the NKI tutorial's Mamba-v1 layer as whole-tensor ops: ``exp(delta*A)``,
  ``delta*B*u``, one two-input VectorE pass standing for the associative scan (the NKI kernel
  runs it as one ``tensor_tensor_scan`` instruction per tile; PyTorch has no scan op, and a
  Python loop over ``seq`` would issue ``seq`` small ops), ``C*scan`` and the sum over states.

Tensor parallelism (``tp > 1``): ONE rank's shard is built (query heads, KV heads,
intermediate size and vocabulary divided by ``tp``, rounded up, as transformers-neuronx pads
them; KV heads replicated when ``tp`` exceeds their number), with the collectives a
Megatron-style TP layer issues: the outputs of ``o_proj`` and ``down_proj`` are all-reduced
in forward (identity in backward), and the inputs of the attention and the MLP are
all-reduced in backward (identity in forward); the last-token logits are all-gathered over
the vocabulary shards. The collectives are ``torch.ops._c10d_functional.all_reduce`` /
``all_gather_into_tensor`` followed by ``_c10d_functional.wait_tensor``, issued on a fake
process group (``torch.testing._internal.distributed.fake_pg``) of ``tp`` ranks, which runs
them on meta tensors without communicating. With ``sp=1`` (sequence parallelism, as NxD
Inference's context encoding and NxD training run it) each rank keeps ``ctx / tp`` tokens
between the TP regions: norms and residual adds run on them, the row-parallel outputs are
reduce-scattered over the sequence and the attention and MLP inputs all-gathered
(``reduce_scatter_tensor`` / ``all_gather_into_tensor``; the mirror image in backward).
``tp_method="divide"`` instead builds the whole model on one core and divides its time by
``tp`` (the crude lower bound the calibration file's notes describe).

What is approximate: eager per-op execution (no fusion) unless the profiler's NeuronConfig
says otherwise; mixed precision is simulated all-BF16; BatchNorm is not folded; the encoders
run without their all-ones attention mask; transformers' separate q/k/v and gate/up
projections (NxD coalesces them: one matmul, and no summing of the input gradient of three
consumers in backward); the vocabulary-parallel cross-entropy of TP training is the loss over
the local vocabulary shard; ZeRO-1, pipeline parallelism and data-parallel gradient reduction
are not simulated; the Mamba scan is one elementwise pass.
"""

from __future__ import annotations

import functools
import inspect
import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

# --- configurations ------------------------------------------------------------------------------

# Hugging Face config.json values of the published checkpoints: (model_type, values).
ENCODERS: dict[str, tuple[str, dict[str, Any]]] = {
    # google-bert/bert-base-uncased
    "bert-base-uncased": ("bert", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                       intermediate_size=3072, vocab_size=30522,
                                       max_position_embeddings=512, type_vocab_size=2)),
    # google-bert/bert-large-uncased
    "bert-large-uncased": ("bert", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                        intermediate_size=4096, vocab_size=30522,
                                        max_position_embeddings=512, type_vocab_size=2)),
    # distilbert/distilbert-base-uncased
    "distilbert-base-uncased": ("distilbert", dict(dim=768, n_layers=6, n_heads=12, hidden_dim=3072,
                                                   vocab_size=30522, max_position_embeddings=512)),
    # albert/albert-base-v2: factorized embedding (128), one shared layer group
    "albert-base-v2": ("albert", dict(embedding_size=128, hidden_size=768, num_hidden_layers=12,
                                      num_attention_heads=12, intermediate_size=3072, vocab_size=30000,
                                      num_hidden_groups=1, inner_group_num=1, hidden_act="gelu_new",
                                      max_position_embeddings=512, type_vocab_size=2)),
    # FacebookAI/roberta-base, roberta-large
    "roberta-base": ("roberta", dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                                     intermediate_size=3072, vocab_size=50265,
                                     max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)),
    "roberta-large": ("roberta", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                      intermediate_size=4096, vocab_size=50265,
                                      max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)),
}

# google/vit-base-patch16-224 (ImageNet-1k head)
VIT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                image_size=224, patch_size=16, num_channels=3, num_labels=1000)

# Decoder-only LLMs: (model_type, values). rope settings do not change the arithmetic.
DECODERS: dict[str, tuple[str, dict[str, Any]]] = {
    # meta-llama/Llama-2-7b-hf, -13b-hf, -70b-hf
    "llama-2-7b": ("llama", dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                 num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                                 rms_norm_eps=1e-5, max_position_embeddings=4096)),
    "llama-2-13b": ("llama", dict(hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                                  num_attention_heads=40, num_key_value_heads=40, vocab_size=32000,
                                  rms_norm_eps=1e-5, max_position_embeddings=4096)),
    "llama-2-70b": ("llama", dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                  num_attention_heads=64, num_key_value_heads=8, vocab_size=32000,
                                  rms_norm_eps=1e-5, max_position_embeddings=4096)),
    # meta-llama/Meta-Llama-3-70B; Llama-3.3-70B-Instruct has the same shapes
    "llama-3-70b": ("llama", dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                  num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                                  rms_norm_eps=1e-5, rope_theta=500000.0, max_position_embeddings=8192)),
    "llama-3.3-70b": ("llama", dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                                    num_attention_heads=64, num_key_value_heads=8, vocab_size=128256,
                                    rms_norm_eps=1e-5, rope_theta=500000.0,
                                    max_position_embeddings=131072)),
    # meta-llama/Llama-3.1-8B, Llama-3.1-405B
    "llama-3.1-8b": ("llama", dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=8, vocab_size=128256,
                                   rms_norm_eps=1e-5, rope_theta=500000.0,
                                   max_position_embeddings=131072)),
    "llama-3.1-405b": ("llama", dict(hidden_size=16384, intermediate_size=53248, num_hidden_layers=126,
                                     num_attention_heads=128, num_key_value_heads=8, vocab_size=128256,
                                     rms_norm_eps=1e-5, rope_theta=500000.0,
                                     max_position_embeddings=131072)),
    # mistralai/Mistral-7B-Instruct-v0.2 (no sliding window in v0.2)
    "mistral-7b-instruct-v0.2": ("mistral", dict(hidden_size=4096, intermediate_size=14336,
                                                 num_hidden_layers=32, num_attention_heads=32,
                                                 num_key_value_heads=8, vocab_size=32000,
                                                 rms_norm_eps=1e-5, rope_theta=1e6, sliding_window=None,
                                                 max_position_embeddings=32768)),
    # Qwen/Qwen3-32B (per-head RMSNorm on q and k; head_dim 128 = hidden 5120 / 40, not / 64)
    "qwen3-32b": ("qwen3", dict(hidden_size=5120, intermediate_size=25600, num_hidden_layers=64,
                                num_attention_heads=64, num_key_value_heads=8, head_dim=128,
                                vocab_size=151936, rms_norm_eps=1e-6, rope_theta=1e6,
                                max_position_embeddings=40960, tie_word_embeddings=False)),
}

# train_step architectures: name -> (kind, base configuration)
TRAIN_ARCHS = {
    "bert-large-pretrain": ("bert-pretrain", "bert-large-uncased"),
    "vit-base-finetune": ("vit", None),
    "llama-3.1-8b-pretrain": ("llama", "llama-3.1-8b"),
}

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def parse_config(text: str) -> dict[str, Any]:
    """``"arch=bert-base-uncased;batch=1;seq=128"`` -> {"arch": "bert-base-uncased", "batch": 1, ...}."""
    out: dict[str, Any] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"config item {part!r} is not key=value")
        value = value.strip()
        try:
            out[key.strip()] = int(value)
        except ValueError:
            try:
                out[key.strip()] = float(value)
            except ValueError:
                out[key.strip()] = value
    return out


# --- the workload object ------------------------------------------------------------------------

@dataclass
class Phase:
    """One region to profile: ``fn()`` runs it once; its device time counts ``weight`` times."""

    name: str
    fn: Callable[[], Any]
    weight: float = 1.0


@dataclass
class Workload:
    kind: str
    phases: list[Phase]
    to_metric: Callable[[float], float]  # weighted simulated device time (us) -> published unit
    unit: str
    notes: list[str] = field(default_factory=list)
    tp: int = 1

    def run(self) -> None:
        """Run every phase once (weights ignored), under whatever profiler is active."""
        for phase in self.phases:
            phase.fn()

    def weighted(self, times_us: dict[str, float]) -> float:
        return sum(p.weight * times_us[p.name] for p in self.phases)


def _converter(unit: str, items: float) -> Callable[[float], float]:
    """``items``: what one run produces, for per_s units (cores / tp * batch, or tokens)."""
    if unit == "ms":
        return lambda us: us / 1e3
    if unit == "us":
        return lambda us: us
    if unit == "per_s":
        return lambda us: items * 1e6 / us
    raise ValueError(f"unknown unit {unit!r}: expected ms, us or per_s")


# --- tensor parallelism: a fake process group and Megatron's f / g ------------------------------

def ensure_tp_group(tp: int) -> None:
    """A fake process group of ``tp`` ranks (this process is rank 0): collectives run on meta
    tensors without communicating. Re-made when another row needs another size."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        if dist.get_world_size() == tp:
            return
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)


def _group_name() -> str:
    import torch.distributed as dist

    return dist.group.WORLD.group_name


def all_reduce(t: torch.Tensor) -> torch.Tensor:
    out = torch.ops._c10d_functional.all_reduce(t, "sum", _group_name())
    return torch.ops._c10d_functional.wait_tensor(out)


def all_gather(t: torch.Tensor, tp: int) -> torch.Tensor:
    out = torch.ops._c10d_functional.all_gather_into_tensor(t.contiguous(), tp, _group_name())
    return torch.ops._c10d_functional.wait_tensor(out)


class _ReduceFromTP(torch.autograd.Function):
    """Megatron's g: all-reduce the partial sums of a row-parallel layer; identity backward."""

    @staticmethod
    def forward(ctx, x):
        return all_reduce(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


class _CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward; all-reduce the input gradient in backward."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad)


def _copy_to_tp_pre_hook(module, args, kwargs):
    if torch.is_grad_enabled():  # identity forward: only backward has a collective
        if args:
            args = (_CopyToTP.apply(args[0]),) + tuple(args[1:])
        elif "hidden_states" in kwargs:
            kwargs = dict(kwargs, hidden_states=_CopyToTP.apply(kwargs["hidden_states"]))
    return args, kwargs


def _reduce_hook(module, args, output):
    return _ReduceFromTP.apply(output)


def install_tp_collectives(model: nn.Module, tp: int, gather_logits: bool) -> None:
    """Megatron TP on a transformers decoder: f at the attention and MLP inputs, g after
    ``o_proj`` and ``down_proj``, and (inference) an all-gather of the vocabulary-sharded logits."""
    for layer in model.model.layers:
        layer.self_attn.register_forward_pre_hook(_copy_to_tp_pre_hook, with_kwargs=True)
        layer.mlp.register_forward_pre_hook(_copy_to_tp_pre_hook, with_kwargs=True)
        layer.self_attn.o_proj.register_forward_hook(_reduce_hook)
        layer.mlp.down_proj.register_forward_hook(_reduce_hook)
    if gather_logits:
        model.lm_head.register_forward_hook(lambda m, a, out: all_gather(out, tp))


# Sequence parallelism (Megatron-SP, NxD's sequence_parallel_enabled): between the TP regions
# each rank holds S/tp tokens, so norms and residual adds run on S/tp tokens; the all-reduce
# after o_proj / down_proj becomes a reduce-scatter over the sequence, and the attention and
# MLP inputs are all-gathered over the sequence (their backward: the other one).

def _seq_first(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """[B, S, H] as [S, B*H]-like rows for collectives over dim 0 (a view when B == 1)."""
    if t.shape[0] == 1:
        return t.reshape(t.shape[1], *t.shape[2:]), (1,)
    return t.movedim(1, 0).contiguous(), (t.shape[0],)


def _seq_back(t: torch.Tensor, batch: tuple[int, ...]) -> torch.Tensor:
    return t.unsqueeze(0) if batch == (1,) else t.movedim(0, 1)


def gather_seq(t: torch.Tensor, tp: int) -> torch.Tensor:
    rows, batch = _seq_first(t)
    out = torch.ops._c10d_functional.all_gather_into_tensor(rows, tp, _group_name())
    return _seq_back(torch.ops._c10d_functional.wait_tensor(out), batch)


def reduce_scatter_seq(t: torch.Tensor, tp: int) -> torch.Tensor:
    rows, batch = _seq_first(t)
    out = torch.ops._c10d_functional.reduce_scatter_tensor(rows, "sum", tp, _group_name())
    return _seq_back(torch.ops._c10d_functional.wait_tensor(out), batch)


class _GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return gather_seq(x, tp)

    @staticmethod
    def backward(ctx, grad):
        return reduce_scatter_seq(grad, ctx.tp), None


class _ReduceScatterSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return reduce_scatter_seq(x, tp)

    @staticmethod
    def backward(ctx, grad):
        return gather_seq(grad, ctx.tp), None


def install_sp_collectives(model: nn.Module, tp: int, training: bool) -> None:
    """Megatron TP + sequence parallelism on a transformers decoder. The first layer keeps its
    rank's S/tp tokens (rotary tables are made for the whole sequence before it); the final norm
    runs on S/tp tokens; in training its output is all-gathered for the vocabulary-parallel
    lm_head, in inference the last token's logits are all-gathered over the vocabulary."""

    def split_first(module, args, kwargs):
        def local(h):
            return h[:, : h.shape[1] // tp]
        if args:
            return (local(args[0]),) + tuple(args[1:]), kwargs
        return args, dict(kwargs, hidden_states=local(kwargs["hidden_states"]))

    def gather_pre(module, args, kwargs):
        if args:
            return (_GatherSeq.apply(args[0], tp),) + tuple(args[1:]), kwargs
        return args, dict(kwargs, hidden_states=_GatherSeq.apply(kwargs["hidden_states"], tp))

    def scatter_post(module, args, output):
        return _ReduceScatterSeq.apply(output, tp)

    layers = model.model.layers
    layers[0].register_forward_pre_hook(split_first, with_kwargs=True)
    for layer in layers:
        layer.self_attn.register_forward_pre_hook(gather_pre, with_kwargs=True)
        layer.mlp.register_forward_pre_hook(gather_pre, with_kwargs=True)
        layer.self_attn.o_proj.register_forward_hook(scatter_post)
        layer.mlp.down_proj.register_forward_hook(scatter_post)
    if training:
        model.lm_head.register_forward_pre_hook(gather_pre, with_kwargs=True)
    else:
        model.lm_head.register_forward_hook(lambda m, a, out: all_gather(out, tp))


def shard_values(values: dict[str, Any], tp: int) -> tuple[dict[str, Any], list[str]]:
    """One TP rank's configuration of a decoder: heads, KV heads, intermediate and vocabulary
    divided by ``tp`` and rounded up (transformers-neuronx pads heads to a multiple of tp);
    KV heads replicated (1 per rank) when tp exceeds them; head_dim kept."""
    v = dict(values)
    heads, kv = v["num_attention_heads"], v.get("num_key_value_heads", v["num_attention_heads"])
    head_dim = v.get("head_dim") or v["hidden_size"] // heads
    heads_r = math.ceil(heads / tp)
    kv_r = max(1, math.ceil(kv / tp))
    if heads_r % kv_r:
        kv_r = math.gcd(heads_r, kv_r)
    notes = []
    if heads_r * tp != heads:
        notes.append(f"{heads} query heads padded to {heads_r * tp} for TP={tp}")
    if kv < tp:
        notes.append(f"{kv} KV heads replicated: 1 per rank at TP={tp}")
    v.update(num_attention_heads=heads_r, num_key_value_heads=kv_r, head_dim=head_dim,
             intermediate_size=math.ceil(v["intermediate_size"] / tp),
             vocab_size=math.ceil(v["vocab_size"] / tp))
    return v, notes


# --- model construction (cached: rows share models) ---------------------------------------------

def _hf_config(model_type: str, values: dict[str, Any]):
    from transformers import AutoConfig

    return AutoConfig.for_model(model_type, **values)


@functools.lru_cache(maxsize=None)
def encoder_model(arch: str, dtype: torch.dtype) -> nn.Module:
    from transformers import AutoModel

    if arch not in ENCODERS:
        raise KeyError(f"unknown encoder {arch!r}; known: {', '.join(ENCODERS)}")
    model_type, values = ENCODERS[arch]
    with torch.device("meta"):
        model = AutoModel.from_config(_hf_config(model_type, values))
    return model.to(dtype).eval()


@functools.lru_cache(maxsize=None)
def decoder_model(arch: str, dtype: torch.dtype, tp: int, training: bool,
                  sequence_parallel: bool = False) -> tuple[nn.Module, Any, tuple]:
    """(model, its config, notes) of one TP rank of ``arch`` (tp=1: the whole model), with
    Megatron TP collectives, and sequence parallelism if asked."""
    from transformers import AutoModelForCausalLM

    if arch not in DECODERS:
        raise KeyError(f"unknown decoder {arch!r}; known: {', '.join(DECODERS)}")
    model_type, full = DECODERS[arch]
    notes: list[str] = []
    values = dict(full)
    if tp > 1:
        values, notes = shard_values(full, tp)
    # transformers validates hidden_size % num_attention_heads at construction, which a shard
    # with padded heads (64 heads / TP=24 -> 3 per rank) fails although head_dim is explicit:
    # build with the full model's head counts, then set the rank's.
    heads = {k: values.pop(k) for k in ("num_attention_heads", "num_key_value_heads")}
    cfg = _hf_config(model_type, dict(values, num_attention_heads=full["num_attention_heads"],
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


# torchvision's ResNet and VGG, layer for layer (torchvision/models/resnet.py, vgg.py).

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4  # ResNet v1.5: the stride is in the 3x3 convolution

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, block: type, layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], 2)
        self.layer3 = self._make_layer(block, 256, layers[2], 2)
        self.layer4 = self._make_layer(block, 512, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _make_layer(self, block: type, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


RESNETS = {"resnet18": (BasicBlock, [2, 2, 2, 2]), "resnet34": (BasicBlock, [3, 4, 6, 3]),
           "resnet50": (Bottleneck, [3, 4, 6, 3]), "resnet101": (Bottleneck, [3, 4, 23, 3]),
           "resnet152": (Bottleneck, [3, 8, 36, 3])}

VGG_CFGS = {  # torchvision cfgs "A", "B", "D", "E"
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M",
              512, 512, 512, 512, "M"],
}


class VGG(nn.Module):
    def __init__(self, cfg: list, num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(channels, v, 3, padding=1), nn.ReLU(inplace=True)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(4096, 4096), nn.ReLU(True), nn.Dropout(0.5),
            nn.Linear(4096, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


@functools.lru_cache(maxsize=None)
def vision_model(arch: str, dtype: torch.dtype, training: bool = False) -> nn.Module:
    with torch.device("meta"):
        if arch in RESNETS:
            model = ResNet(*RESNETS[arch])
        elif arch in VGG_CFGS:
            model = VGG(VGG_CFGS[arch])
        elif arch in ("vit-base-patch16-224", "vit-base-finetune"):
            from transformers import ViTForImageClassification

            model = ViTForImageClassification(_hf_config("vit", VIT_BASE))
        else:
            raise KeyError(f"unknown vision model {arch!r}; known: {', '.join([*RESNETS, *VGG_CFGS])}, "
                           "vit-base-patch16-224")
    return model.to(dtype).train(training)


# --- builders -----------------------------------------------------------------------------------

def _dtype(cfg: dict[str, Any]) -> torch.dtype:
    name = cfg.get("dtype", "bf16")
    if name not in DTYPES:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}")
    return DTYPES[name]


def _inference(fn: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn()

    return run


def build_encoder_fwd(cfg: dict[str, Any], **_: Any) -> Workload:
    arch, batch, seq = cfg["arch"], int(cfg["batch"]), int(cfg["seq"])
    model = encoder_model(arch, _dtype(cfg))
    with torch.device("meta"):
        ids = torch.zeros(batch, seq, dtype=torch.long)
    unit = cfg.get("unit", "ms")
    return Workload("encoder_fwd", [Phase("forward", _inference(lambda: model(input_ids=ids)))],
                    _converter(unit, cfg.get("cores", 1) * batch), unit,
                    ["attention mask omitted (transformers' mask checks call .item() on meta)"])


def build_vision_fwd(cfg: dict[str, Any], **_: Any) -> Workload:
    arch, batch, image = cfg["arch"], int(cfg["batch"]), int(cfg.get("image", 224))
    dtype = _dtype(cfg)
    model = vision_model(arch, dtype)
    with torch.device("meta"):
        x = torch.zeros(batch, 3, image, image, dtype=dtype)
    if arch.startswith("vit"):
        fn = lambda: model(pixel_values=x)  # noqa: E731
    else:
        fn = lambda: model(x)  # noqa: E731
    unit = cfg.get("unit", "ms")
    return Workload("vision_fwd", [Phase("forward", _inference(fn))],
                    _converter(unit, cfg.get("cores", 1) * batch), unit)


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
def _train_model(arch: str, dtype: torch.dtype, tp: int, optimizer: str, sequence_parallel: bool = False):
    """(model, optimizer step callable, notes) for a train_step architecture."""
    if arch not in TRAIN_ARCHS:
        raise KeyError(f"unknown train_step arch {arch!r}; known: {', '.join(TRAIN_ARCHS)}")
    kind, base = TRAIN_ARCHS[arch]
    notes: list[str] = []
    if kind == "bert-pretrain":
        from transformers import BertForPreTraining

        with torch.device("meta"):
            model = BertForPreTraining(_hf_config(*ENCODERS[base])).to(dtype).train()
    elif kind == "vit":
        model = vision_model(arch, dtype, training=True)
    else:
        model, _, shard_notes = decoder_model(base, dtype, tp, True, sequence_parallel)
        _use_flash_attention(model)
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
        raise ValueError(f"unknown optimizer {optimizer!r}: adamw or lamb")
    return model, params, step, tuple(notes)


def _flash_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
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


def _use_flash_attention(model: nn.Module) -> None:
    from transformers import AttentionInterface

    AttentionInterface.register("neuronprof_flash", _flash_attention)
    model.config._attn_implementation = "neuronprof_flash"


def build_train_step(cfg: dict[str, Any], tp_method: str = "shard", **_: Any) -> Workload:
    arch, batch = cfg["arch"], int(cfg["batch"])
    accum, cores, tp = int(cfg.get("accum", 1)), int(cfg.get("cores", 1)), int(cfg.get("tp", 1))
    dtype = _dtype(cfg)
    kind = TRAIN_ARCHS.get(arch, (None,))[0]
    build_tp = tp if tp_method == "shard" else 1
    sp = bool(int(cfg.get("sp", 0))) and build_tp > 1
    if sp and int(cfg["seq"]) % build_tp:
        raise ValueError(f"sp=1 needs seq divisible by tp ({cfg['seq']} / {build_tp})")
    model, params, step, notes = _train_model(arch, dtype, build_tp, cfg.get("optimizer", "adamw"), sp)
    notes = list(notes)
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

    def fwd_bwd() -> None:
        if tp > 1 and tp_method == "shard":
            ensure_tp_group(tp)
        if accum == 1:  # no accumulation: each step starts without gradients
            for p in params:
                p.grad = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model(**inputs).loss.backward()

    def optimizer_step() -> None:
        with torch.no_grad():
            step()

    items = cores / tp * batch
    unit = cfg.get("unit", "per_s")
    to_metric = _converter(unit, items)
    if tp > 1 and tp_method == "divide":
        base = to_metric
        to_metric = lambda us: base(us / tp)  # noqa: E731
        notes.append(f"tp_method=divide: whole model on one core, time / {tp}")
    return Workload("train_step", [Phase("fwd_bwd", fwd_bwd), Phase("optimizer", optimizer_step, 1.0 / accum)],
                    to_metric, unit, notes, tp)


def _cache_kwarg(model: nn.Module) -> str:
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def _build_llm(cfg: dict[str, Any], prefill: bool, tp_method: str) -> Workload:
    from transformers import DynamicCache, StaticCache

    arch, batch, ctx, tp = cfg["arch"], int(cfg.get("batch", 1)), int(cfg["ctx"]), int(cfg.get("tp", 1))
    build_tp = tp if tp_method == "shard" else 1
    sp = bool(int(cfg.get("sp", 0))) and build_tp > 1
    if sp and not prefill:
        raise ValueError("sp=1 applies to prefill (context encoding) only: token generation "
                         "runs without sequence parallelism")
    if sp and ctx % build_tp:
        raise ValueError(f"sp=1 needs ctx divisible by tp ({ctx} / {build_tp})")
    model, hf_cfg, shard_notes = decoder_model(arch, _dtype(cfg), build_tp, False, sp)
    notes = list(shard_notes)
    cache_kw = _cache_kwarg(model)
    with torch.device("meta"):
        if prefill:
            ids = torch.zeros(batch, ctx, dtype=torch.long)
        else:
            ids = torch.zeros(batch, 1, dtype=torch.long)
            position = torch.tensor([ctx - 1])
            cache = StaticCache(config=hf_cfg, max_cache_len=ctx)

    def step() -> None:
        if build_tp > 1:
            ensure_tp_group(build_tp)
        if prefill:  # a fresh cache per pass; a cache (not None) also skips the packed-sequence check
            model(input_ids=ids, **{cache_kw: DynamicCache(config=hf_cfg)}, use_cache=True, logits_to_keep=1)
        else:
            model(input_ids=ids, **{cache_kw: cache}, cache_position=position, use_cache=True,
                  logits_to_keep=1)

    unit = cfg.get("unit", "ms")
    to_metric = _converter(unit, batch)
    if tp > 1 and tp_method == "divide":
        base = to_metric
        to_metric = lambda us: base(us / tp)  # noqa: E731
        notes.append(f"tp_method=divide: whole model on one core, time / {tp}")
    return Workload("llama_prefill" if prefill else "llama_decode",
                    [Phase("prefill" if prefill else "decode_step", _inference(step))],
                    to_metric, unit, notes, tp)


def build_llama_decode(cfg: dict[str, Any], tp_method: str = "shard", **_: Any) -> Workload:
    return _build_llm(cfg, prefill=False, tp_method=tp_method)


def build_llama_prefill(cfg: dict[str, Any], tp_method: str = "shard", **_: Any) -> Workload:
    return _build_llm(cfg, prefill=True, tp_method=tp_method)


def mamba_layer(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, u: torch.Tensor,
                C: torch.Tensor) -> torch.Tensor:
    """The NKI tutorial's Mamba-v1 layer (nki/examples/fused_mamba/mamba_torch.py) in whole-tensor
    ops. delta, u: [batch, channels, seq]; A: [channels, state]; B, C: [batch, state, seq]."""
    delta_a = torch.exp(delta[:, :, None, :] * A[None, :, :, None])
    delta_b_u = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    # The associative scan out[..., i] = delta_a[..., i] * out[..., i-1] + delta_b_u[..., i] is one
    # tensor_tensor_scan pass per tile in the NKI kernel: one two-input VectorE pass here.
    scan = delta_a * delta_b_u
    return (C[:, None, :, :] * scan).sum(dim=-2)


def build_mamba_fused(cfg: dict[str, Any], **_: Any) -> Workload:
    batch, seq = int(cfg["batch"]), int(cfg["seq"])
    channels, state = int(cfg["channels"]), int(cfg["state"])
    dtype = _dtype(dict(cfg, dtype=cfg.get("dtype", "fp32")))
    with torch.device("meta"):
        delta = torch.zeros(batch, channels, seq, dtype=dtype)
        u = torch.zeros(batch, channels, seq, dtype=dtype)
        A = torch.zeros(channels, state, dtype=dtype)
        B = torch.zeros(batch, state, seq, dtype=dtype)
        C = torch.zeros(batch, state, seq, dtype=dtype)
    unit = cfg.get("unit", "us")
    return Workload("mamba_fused", [Phase("kernel", _inference(lambda: mamba_layer(delta, A, B, u, C)))],
                    _converter(unit, batch), unit,
                    ["the scan is one two-input VectorE pass; intermediates go through HBM"])


def model_family(arch: str) -> str:
    """The architecture ``arch`` is one size of: the same code and vocabulary at another depth or
    width (resnet18 and resnet152: "resnet"; bert-base and bert-large: "bert/30522"; Llama-2 7B
    and 70B: "llama/32000", Llama-3 70B, whose vocabulary is 4x larger, not). An unknown arch is
    its own family."""
    if arch in RESNETS:
        return "resnet"
    if arch in VGG_CFGS:
        return "vgg"
    for table in (ENCODERS, DECODERS):
        if arch in table:
            kind, values = table[arch]
            return f"{kind}/{values.get('vocab_size')}"
    return arch


# --- op-level rows (benchmarks/data/trn_oplevel_calibration.csv) --------------------------------
# One operator or kernel per row, its inputs made here (outside the profiled phase: region
# inputs, already in HBM), one compiled graph per phase, device time in us.

# The ``params`` column's fields (``;``-separated) per workload, as config keys.
OPLEVEL_PARAMS: dict[str, tuple[str, ...]] = {
    "mm_t": ("M", "K", "N"), "silu": ("M", "N"), "adamw": ("M", "N"), "all_reduce": ("ranks", "bytes"),
}


def oplevel_config(workload: str, params: str, dtype: str) -> str:
    """An op-level row's ``params`` and ``dtype`` columns as a ``key=value;...`` config (unit us):
    ``oplevel_config("mm_t", "512;512;512", "bf16") == "M=512;K=512;N=512;dtype=bf16;unit=us"``."""
    if workload not in OPLEVEL_PARAMS:
        raise KeyError(f"unknown op-level workload {workload!r}; known: {', '.join(OPLEVEL_PARAMS)}")
    names, values = OPLEVEL_PARAMS[workload], params.split(";")
    if len(values) != len(names):
        raise ValueError(f"{workload} params {params!r}: expected {len(names)} fields "
                         f"({';'.join(names)})")
    return ";".join(f"{k}={v.strip()}" for k, v in zip(names, values)) + f";dtype={dtype};unit=us"


def _kernel(kind: str, fn: Callable[[], None], notes: list[str]) -> Workload:
    return Workload(kind, [Phase("graph", fn)], _converter("us", 1), "us", notes)


def build_mm_t(cfg: dict[str, Any], **_: Any) -> Workload:
    m, k, n = int(cfg["M"]), int(cfg["K"]), int(cfg["N"])
    dtype = _dtype(cfg)
    with torch.device("meta"):
        a = torch.zeros(k, m, dtype=dtype)  # the left operand stored transposed, as NKI's lhsT
        b = torch.zeros(k, n, dtype=dtype)
    return _kernel("mm_t", _inference(lambda: a.t() @ b),
                   ["a.t() @ b with a[K,M] stored transposed: one aten::mm on a transposed view"])


def build_silu(cfg: dict[str, Any], **_: Any) -> Workload:
    m, n = int(cfg["M"]), int(cfg["N"])
    with torch.device("meta"):
        x = torch.zeros(m, n, dtype=_dtype(cfg))
    return _kernel("silu", _inference(lambda: torch.nn.functional.silu(x)), [])


def build_adamw(cfg: dict[str, Any], **_: Any) -> Workload:
    m, n = int(cfg["M"]), int(cfg["N"])
    dtype = _dtype(cfg)
    with torch.device("meta"):
        param, grad, exp_avg, exp_avg_sq = (torch.zeros(m, n, dtype=dtype) for _ in range(4))
        step = torch.ones((), dtype=torch.float32)

    def update() -> None:
        # torch._fused_adamw_ runs on meta; torch.optim.AdamW(fused=True) refuses meta params and
        # the single-tensor and foreach paths issue a dozen separate ops per update, which the
        # published kernel (one pass over param, grad, m and v) is not.
        with torch.no_grad():
            torch._fused_adamw_([param], [grad], [exp_avg], [exp_avg_sq], [], [step], lr=1e-3,
                                beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                                amsgrad=False, maximize=False)

    return _kernel("adamw", update,
                   ["one torch._fused_adamw_ call: param, m and v updated in place from the grad in "
                    "one pass (the step counter's increment, a scalar op, left out)"])


def build_all_reduce(cfg: dict[str, Any], **_: Any) -> Workload:
    ranks, size = int(cfg["ranks"]), int(cfg["bytes"])
    dtype = _dtype(dict(cfg, dtype=cfg.get("dtype", "fp32")))
    itemsize = torch.empty((), dtype=dtype).element_size()
    if size % itemsize:
        raise ValueError(f"all_reduce bytes={size} is not a whole number of {dtype} elements")
    with torch.device("meta"):
        buffer = torch.zeros(size // itemsize, dtype=dtype)

    def run() -> None:
        ensure_tp_group(ranks)  # made in the warm-up run, outside the profiled one
        all_reduce(buffer)

    return _kernel("all_reduce", _inference(run),
                   [f"_c10d_functional.all_reduce + wait_tensor on a fake process group of {ranks} ranks"])


BUILDERS: dict[str, Callable[..., Workload]] = {
    "mm_t": build_mm_t,
    "silu": build_silu,
    "adamw": build_adamw,
    "all_reduce": build_all_reduce,
    "encoder_fwd": build_encoder_fwd,
    "vision_fwd": build_vision_fwd,
    "train_step": build_train_step,
    "llama_decode": build_llama_decode,
    "llama_prefill": build_llama_prefill,
    "mamba_fused": build_mamba_fused,
}


def build(workload: str, config: str | dict[str, Any], tp_method: str = "shard") -> Workload:
    """The Workload of one CSV row (``workload`` column and ``config`` column)."""
    cfg = parse_config(config) if isinstance(config, str) else dict(config)
    if workload not in BUILDERS:
        raise KeyError(f"unknown workload {workload!r}; known: {', '.join(BUILDERS)}")
    if tp_method not in ("shard", "divide"):
        raise ValueError(f"tp_method must be 'shard' or 'divide', got {tp_method!r}")
    return BUILDERS[workload](cfg, tp_method=tp_method)
