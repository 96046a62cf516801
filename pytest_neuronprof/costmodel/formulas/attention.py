"""Attention, on TensorE with its softmax on ScalarE and VectorE alongside: the fused scaled
dot-product attention kernels (one kernel name whichever op torch picked), their backward, and
the fused inference paths of nn.MultiheadAttention and nn.TransformerEncoderLayer."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ...vocabulary import Engine
from ..opcost import OpCost, TensorMeta
from .common import Family, aten
from .matmul import matmul_cost

FAMILY = Family()


def _attention(q: TensorMeta, k: TensorMeta, v: TensorMeta, causal: bool, backward: bool,
               inputs: Sequence[Any], outputs: Sequence[Any]) -> OpCost:
    """Flash attention: S = QK^T and O = PV on TensorE, exp(S) on ScalarE alongside.
    A causal mask skips about half the blocks, so it halves the work."""
    heads = math.prod(q.shape[:-2])
    sq, d = q.shape[-2], q.shape[-1]
    skv, dv = k.shape[-2], v.shape[-1]
    kv = max(1, (skv + 1) // 2) if causal else skv
    if backward:  # recompute S, then dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
        products = [(heads, sq, d, kv), (heads, kv, sq, dv), (heads, sq, dv, kv),
                    (heads, sq, kv, d), (heads, kv, sq, d)]
    else:
        products = [(heads, sq, d, kv), (heads, sq, kv, dv)]
    scores = heads * sq * kv
    return matmul_cost(products, inputs, outputs, kind="attention",
                       overlapped=((Engine.SCALAR, scores), (Engine.VECTOR, 2 * scores)))


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
    return matmul_cost(projections + list(attn.matmuls), inputs, outputs, kind="attention",
                       overlapped=attn.overlapped)


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
    return matmul_cost(products, inputs, outputs, kind="attention", overlapped=overlapped)
