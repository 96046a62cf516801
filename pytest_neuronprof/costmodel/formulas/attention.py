"""Attention, on TensorE with its softmax on ScalarE and VectorE alongside: the fused scaled
dot-product attention kernels (one kernel name whichever op torch picked), their backward, and
the fused inference paths of nn.MultiheadAttention and nn.TransformerEncoderLayer."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from ...vocabulary import Engine
from ..opcost import OpCost, TensorMeta
from .common import Family, aten
from .matmul import matmul_cost

FAMILY = Family()


# The flash kernel's tiles: 128 query rows (the array's partitions) against blocks of 512 keys
# (TensorE's largest moving tile), as the NKI flash-attention kernels tile them.
Q_BLOCK, KV_BLOCK = 128, 512


def visited_keys(sq: int, skv: int, causal: bool) -> int:
    """Keys a flash kernel visits per head, summed over its query blocks: every key block, or
    under a causal mask (query i sees keys up to i) the blocks up to the diagonal's."""
    if not causal:
        return -(-sq // Q_BLOCK) * skv
    total = 0
    for first in range(0, sq, Q_BLOCK):
        last = min(sq, first + Q_BLOCK)  # this block's queries see keys < last
        total += min(skv, -(-last // KV_BLOCK) * KV_BLOCK)
    return total


def _attention(q: TensorMeta, k: TensorMeta, v: TensorMeta, causal: bool, backward: bool,
               inputs: Sequence[Any], outputs: Sequence[Any]) -> OpCost:
    """Flash attention. Its work (``matmuls``, flops: S = QK^T and O = PV, a causal mask
    halving them) is what a GPU's fused kernel does; ``array_products`` is what a NeuronCore
    kernel issues on TensorE: per query block of 128 rows and key block of 512, the two
    products padded to the array, and P transposed through the array (an identity product per
    128 x 128 block) to be PV's stationary operand; a causal mask skips the blocks past the
    diagonal. exp(S) runs on ScalarE and the running max and sum on VectorE alongside, one
    instruction per block."""
    heads = math.prod(q.shape[:-2])
    sq, d = q.shape[-2], q.shape[-1]
    skv, dv = k.shape[-2], v.shape[-1]
    kv = max(1, (skv + 1) // 2) if causal else skv
    blocks = max(1, -(-sq // Q_BLOCK))
    rows = blocks * Q_BLOCK
    visited = visited_keys(sq, skv, causal)
    per_block = max(1, -(-visited // blocks))  # keys per query block, on average
    transpose = (heads, per_block, Q_BLOCK, rows)  # P^T: a 128 x 128 identity product per block
    if backward:  # recompute S, then dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
        products = [(heads, sq, d, kv), (heads, kv, sq, dv), (heads, sq, dv, kv),
                    (heads, sq, kv, d), (heads, kv, sq, d)]
        array = [(heads, rows, d, per_block), (heads, per_block, rows, dv),
                 (heads, rows, dv, per_block), (heads, rows, per_block, d),
                 (heads, per_block, rows, d), transpose, transpose]
    else:
        products = [(heads, sq, d, kv), (heads, sq, kv, dv)]
        array = [(heads, rows, d, per_block), (heads, rows, per_block, dv), transpose]
    scores = heads * visited * Q_BLOCK * sq // rows  # of the real queries, not the padding
    passes = 2 if backward else 1
    cost = matmul_cost(products, inputs, outputs, kind="attention",
                       overlapped=((Engine.SCALAR, passes * scores),
                                   (Engine.VECTOR, 2 * passes * scores)),
                       lane_free=KV_BLOCK)
    return dataclasses.replace(cost, array_products=tuple(array), transposes=2 if backward else 1)


# One fused attention kernel, whichever op torch picked for the device and grad mode.
FLASH_ATTENTION = "aten::_scaled_dot_product_flash_attention"


@FAMILY.cost(aten.scaled_dot_product_attention, aten._scaled_dot_product_flash_attention_for_cpu,
             aten._scaled_dot_product_flash_attention,
             aten._scaled_dot_product_efficient_attention,
             aten._scaled_dot_product_cudnn_attention,
             aten._scaled_dot_product_fused_attention_overrideable, kernel=FLASH_ATTENTION)
def attention(query: TensorMeta, key: TensorMeta, value: TensorMeta, *, outputs: list,
              is_causal: bool = False, **args: Any) -> OpCost:
    return _attention(query, key, value, bool(is_causal), False,
                      [query, key, value, *args.values()], outputs)


@FAMILY.cost(aten._scaled_dot_product_flash_attention_for_cpu_backward,
             aten._scaled_dot_product_flash_attention_backward,
             aten._scaled_dot_product_efficient_attention_backward,
             aten._scaled_dot_product_cudnn_attention_backward,
             aten._scaled_dot_product_fused_attention_overrideable_backward,
             kernel=FLASH_ATTENTION + "_backward")
def attention_backward(query: TensorMeta, key: TensorMeta, value: TensorMeta, *, outputs: list,
                       is_causal: bool = False, **args: Any) -> OpCost:
    return _attention(query, key, value, bool(is_causal), True, [query, key, value, *args.values()],
                      outputs)


@FAMILY.cost(aten._native_multi_head_attention)
def native_multi_head_attention(query: TensorMeta, key: TensorMeta, value: TensorMeta,
                                embed_dim: int, num_head: int, qkv_weight: TensorMeta,
                                qkv_bias: TensorMeta, proj_weight: TensorMeta,
                                proj_bias: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    """nn.MultiheadAttention's fused inference path: the q, k, v projections, attention and the
    output projection in one op (as one kernel: the sum of its parts' work)."""
    batch, sq, skv = math.prod(query.shape[:-2]), query.shape[-2], key.shape[-2]
    d = embed_dim // num_head
    projections = [(1, batch * sq, embed_dim, embed_dim), (1, batch * skv, embed_dim, 2 * embed_dim),
                   (1, batch * sq, embed_dim, embed_dim)]
    q = TensorMeta((batch, num_head, sq, d), query.dtype)
    kv = TensorMeta((batch, num_head, skv, d), query.dtype)
    attn = _attention(q, kv, kv, False, False, [], [])
    inputs = [query, key, value, qkv_weight, qkv_bias, proj_weight, proj_bias, args.get("mask")]
    cost = matmul_cost(projections + list(attn.matmuls), inputs, outputs, kind="attention",
                       overlapped=attn.overlapped, lane_free=attn.lane_free)
    return dataclasses.replace(cost, array_products=(*projections, *attn.array_products),
                               transposes=attn.transposes)


@FAMILY.cost(aten._transformer_encoder_layer_fwd)
def transformer_encoder_layer(src: TensorMeta, embed_dim: int, num_heads: int,
                              qkv_weight: TensorMeta, proj_weight: TensorMeta,
                              ffn_weight_1: TensorMeta, ffn_weight_2: TensorMeta, *,
                              outputs: list, **args: Any) -> OpCost:
    """nn.TransformerEncoderLayer's fused inference path: attention block, two norms and the
    feed-forward block in one op (as one kernel: the sum of its parts' work)."""
    batch, seq = math.prod(src.shape[:-2]), src.shape[-2]
    tokens, d, hidden = batch * seq, embed_dim // num_heads, ffn_weight_1.shape[0]
    q = TensorMeta((batch, num_heads, seq, d), src.dtype)
    attn = _attention(q, q, q, False, False, [], [])
    products = [(1, tokens, embed_dim, 3 * embed_dim), (1, tokens, embed_dim, embed_dim),
                *attn.matmuls, (1, tokens, embed_dim, hidden), (1, tokens, hidden, embed_dim)]
    overlapped = tuple((engine, elements + (6 * src.numel if engine is Engine.VECTOR else
                                            tokens * hidden)) for engine, elements in attn.overlapped)
    inputs = [src, qkv_weight, proj_weight, ffn_weight_1, ffn_weight_2, *args.values()]
    cost = matmul_cost(products, inputs, outputs, kind="attention", overlapped=overlapped,
                       lane_free=attn.lane_free)
    array = [p for p in products if p not in attn.matmuls] + list(attn.array_products)
    return dataclasses.replace(cost, array_products=tuple(array), transposes=attn.transposes)
