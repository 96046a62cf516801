"""Tensor parallelism on a fake process group: Megatron's f and g, sequence parallelism, and one
rank's shard of a decoder's configuration.

ONE rank's shard is built (query heads, KV heads, intermediate size and vocabulary divided by
``tp``, rounded up, as transformers-neuronx pads them; KV heads replicated when ``tp`` exceeds
their number), with the collectives a Megatron-style TP layer issues: the outputs of ``o_proj``
and ``down_proj`` are all-reduced in forward (identity in backward), and the inputs of the
attention and the MLP are all-reduced in backward (identity in forward); the last-token logits
are all-gathered over the vocabulary shards. The collectives are
``torch.ops._c10d_functional.all_reduce`` / ``all_gather_into_tensor`` followed by
``_c10d_functional.wait_tensor``, issued on a fake process group
(``torch.testing._internal.distributed.fake_pg``) of ``tp`` ranks, which runs them on meta
tensors without communicating. With ``sp=1`` (sequence parallelism, as NxD Inference's context
encoding and NxD training run it) each rank keeps ``ctx / tp`` tokens between the TP regions:
norms and residual adds run on them, the row-parallel outputs are reduce-scattered over the
sequence and the attention and MLP inputs all-gathered (``reduce_scatter_tensor`` /
``all_gather_into_tensor``; the mirror image in backward).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


def ensure_group(ranks: int) -> None:
    """A fake process group of ``ranks`` ranks (this process is rank 0): collectives run on meta
    tensors without communicating. Re-made when another row (or phase) needs another size."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives  # noqa: F401  (their Meta kernels: meta tensors)
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from pytest_neuronprof.profiler.backends.simulated import clear_cost_cache

    if dist.is_initialized():
        if dist.get_world_size() == ranks:
            return
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=ranks)
    # The simulated backend shares costs between regions by the ops' arguments; a collective's
    # group is a name the new group may reuse with another size: its costs start afresh.
    clear_cost_cache()


ensure_tp_group = ensure_group  # the name benchmarks/probe_collectives.py and older scripts use


def _group_name() -> str:
    import torch.distributed as dist

    return dist.group.WORLD.group_name


group_name = _group_name  # the fake group's name, for the functional collectives (workloads.kernels)


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


