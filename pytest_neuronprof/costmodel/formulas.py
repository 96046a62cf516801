"""The built-in cost formulas: which NeuronCore engine runs each ATen op, and how much work and
traffic it has. Registered in ``registry.py`` per op, in the manner of ``torch.utils.flop_counter``;
``roofline.py`` turns an OpCost into device time for a hardware profile.

Formulas receive the op's arguments by schema name (tensors as TensorMeta) and ``outputs``; the
generic ones (``**args``) take every tensor argument as read, in schema order.

Use the registry through this module (or ``pytest_neuronprof.costmodel``): importing it registers
the built-in formulas first, so that a user's ``register_cost`` meets them.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import torch

from ..vocabulary import Engine
from .opcost import (OpCost, TensorMeta, dtype_key, first_tensor, iter_tensors, nbytes, numel,
                     read_run_bytes, stream, traffic)
from .registry import (CostFormula, formula_for, generation, is_free, kernel_name, op_cost,
                       register_cost, register_free)

__all__ = ["formula_for", "generation", "is_free", "kernel_name", "op_cost", "register_cost",
           "register_free"]

aten = torch.ops.aten


def ops(*names: str, inplace: bool = True) -> list[Any]:
    """The aten ops of these names and, with ``inplace``, their in-place variants (``add_``)
    where torch has one. A name torch does not know raises: a typo registers nothing."""
    found = []
    for name in names:
        packet = getattr(aten, name)  # AttributeError for a name that is not an op
        found.append(packet)
        if inplace and not name.endswith("_") and hasattr(aten, name + "_"):
            found.append(getattr(aten, name + "_"))
    return found


# --- TensorE: matrix products, convolution, attention -------------------------------------------

def _matmul_cost(products: Sequence[tuple[int, int, int, int]], inputs: Sequence[Any],
                 outputs: Sequence[Any], kind: str = "matmul",
                 overlapped: tuple[tuple[Engine, int], ...] = ()) -> OpCost:
    read, written = traffic(inputs, outputs)
    first = first_tensor(inputs)
    if first is not None and first.dtype.is_complex:  # a complex product is four real ones
        products = [product for product in products for _ in range(4)]
    return OpCost(
        Engine.TENSOR,
        flops=sum(2 * g * m * k * n for g, m, k, n in products),
        bytes_read=read,
        bytes_written=written,
        matmuls=tuple(products),
        overlapped=overlapped,
        dtype=dtype_key(first.dtype if first else None),
        kind=kind,
    )


@register_cost(aten.mm)
def mm(self: TensorMeta, mat2: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    return _matmul_cost([(1, self.shape[0], self.shape[1], mat2.shape[1])], [self, mat2], outputs)


@register_cost(*ops("addmm"))
def addmm(self: TensorMeta, mat1: TensorMeta, mat2: TensorMeta, *, outputs: list,
          **args: Any) -> OpCost:
    return _matmul_cost([(1, mat1.shape[0], mat1.shape[1], mat2.shape[1])], [self, mat1, mat2],
                        outputs)


@register_cost(aten.bmm)
def bmm(self: TensorMeta, mat2: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    return _matmul_cost([(self.shape[0], self.shape[1], self.shape[2], mat2.shape[2])],
                        [self, mat2], outputs)


@register_cost(*ops("baddbmm"))
def baddbmm(self: TensorMeta, batch1: TensorMeta, batch2: TensorMeta, *, outputs: list,
            **args: Any) -> OpCost:
    return _matmul_cost([(batch1.shape[0], batch1.shape[1], batch1.shape[2], batch2.shape[2])],
                        [self, batch1, batch2], outputs)


@register_cost(aten.linear)
def linear(input: TensorMeta, weight: TensorMeta, bias: TensorMeta | None = None, *,
           outputs: list, **args: Any) -> OpCost:
    # Only reached if linear arrives undecomposed; costs the same as its t + addmm form.
    rows = math.prod(input.shape[:-1])
    return _matmul_cost([(1, rows, input.shape[-1], weight.shape[0])], [input, weight, bias],
                        outputs)


def _conv_product(x: TensorMeta, w: TensorMeta, y: TensorMeta, transposed: bool,
                  groups: int) -> tuple[int, int, int, int]:
    """A convolution as the implicit GEMM TensorE runs: per group, out-channels x contraction
    (in-channels/groups x kernel window) times contraction x output positions."""
    window = math.prod(w.shape[2:])
    if transposed:  # weight [Cin, Cout/groups, *k]; the GEMM runs over input positions
        return (groups, w.shape[1] * window, w.shape[0] // groups, x.numel // x.shape[1])
    cout_g = w.shape[0] // groups
    contraction = w.shape[1] * window
    positions = y.numel // y.shape[1]
    return (groups, cout_g, contraction, positions)


@register_cost(aten.convolution, aten._convolution, aten.conv1d, aten.conv2d, aten.conv3d)
def convolution(input: TensorMeta, weight: TensorMeta, bias: TensorMeta | None = None, *,
                outputs: list, transposed: bool = False, groups: int = 1, **args: Any) -> OpCost:
    product = _conv_product(input, weight, outputs[0], bool(transposed), int(groups))
    cost = _matmul_cost([product], [input, weight, bias], outputs, kind="conv")
    return dataclasses.replace(cost, channels=_conv_channels(input, int(groups)))


def _conv_channels(x: TensorMeta, groups: int) -> int:
    """Input channels per group: the innermost dim of the implicit GEMM's contraction."""
    return x.shape[1] // max(1, groups) if len(x.shape) > 1 else 1


@register_cost(aten.convolution_backward)
def convolution_backward(grad_output: TensorMeta, input: TensorMeta, weight: TensorMeta, *,
                         transposed: bool, groups: int, output_mask: Sequence[bool],
                         outputs: list, **args: Any) -> OpCost:
    product = _conv_product(input, weight, grad_output, bool(transposed), int(groups))
    count = int(bool(output_mask[0])) + int(bool(output_mask[1]))  # grad_input, grad_weight
    cost = _matmul_cost([product] * count, [grad_output, input, weight], outputs, kind="conv")
    return dataclasses.replace(cost, channels=_conv_channels(input, int(groups)))


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
    return _matmul_cost(products, inputs, outputs, kind="attention",
                        overlapped=((Engine.SCALAR, scores), (Engine.VECTOR, 2 * scores)))


# One fused attention kernel, whichever op torch picked for the device and grad mode.
FLASH_ATTENTION = "aten::_scaled_dot_product_flash_attention"


@register_cost(aten.scaled_dot_product_attention, aten._scaled_dot_product_flash_attention_for_cpu,
               aten._scaled_dot_product_flash_attention,
               aten._scaled_dot_product_efficient_attention,
               aten._scaled_dot_product_cudnn_attention,
               aten._scaled_dot_product_fused_attention_overrideable, kernel=FLASH_ATTENTION)
def attention(query: TensorMeta, key: TensorMeta, value: TensorMeta, *, outputs: list,
              is_causal: bool = False, **args: Any) -> OpCost:
    return _attention(query, key, value, bool(is_causal), False,
                      [query, key, value, *args.values()], outputs)


@register_cost(aten._scaled_dot_product_flash_attention_for_cpu_backward,
               aten._scaled_dot_product_flash_attention_backward,
               aten._scaled_dot_product_efficient_attention_backward,
               aten._scaled_dot_product_cudnn_attention_backward,
               aten._scaled_dot_product_fused_attention_overrideable_backward,
               kernel=FLASH_ATTENTION + "_backward")
def attention_backward(query: TensorMeta, key: TensorMeta, value: TensorMeta, *, outputs: list,
                       is_causal: bool = False, **args: Any) -> OpCost:
    return _attention(query, key, value, bool(is_causal), True, [query, key, value, *args.values()],
                      outputs)


# --- lane engines: generic streaming formulas ---------------------------------------------------

def _streaming(engine: Engine, passes: float = 1.0,
               overlapped: tuple[tuple[Engine, float], ...] = ()) -> CostFormula:
    def formula(*, outputs: list, **args: Any) -> OpCost:
        return stream(engine, args.values(), outputs, passes, overlapped)

    formula.__qualname__ = f"streaming({engine.value}, passes={passes:g})"
    return formula


# ScalarE: activations and transcendentals.
register_cost(*ops(
    "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2", "log1p",
    "sqrt", "rsqrt", "reciprocal", "pow", "erf", "erfc", "erfinv", "softplus", "elu", "selu",
    "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "mish", "sin", "cos", "tan",
    "atan", "asin", "acos", "sinh", "cosh", "logit", "prelu", "glu",
    "gelu_backward", "silu_backward", "elu_backward", "softplus_backward", "mish_backward",
    "hardswish_backward", "leaky_relu_backward", "hardtanh_backward", "log_sigmoid_forward",
    "log_sigmoid_backward", "glu_backward",
))(_streaming(Engine.SCALAR))

# VectorE: elementwise arithmetic, comparisons, fills, simple losses, scans.
register_cost(*ops(
    "add", "sub", "rsub", "mul", "div", "neg", "abs", "sign", "sgn", "clamp", "clamp_min",
    "clamp_max", "clip", "maximum", "minimum", "fmax", "fmin", "where", "masked_fill", "addcmul",
    "addcdiv", "lerp", "square", "floor", "ceil", "round", "trunc", "frac", "remainder", "fmod",
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "logical_xor",
    "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "isnan", "isinf", "isfinite",
    "nan_to_num", "threshold", "threshold_backward", "sigmoid_backward", "tanh_backward",
    "fill", "zero", "zeros", "ones", "full", "zeros_like", "ones_like", "full_like",
    "scalar_tensor", "mse_loss", "mse_loss_backward", "smooth_l1_loss", "l1_loss",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "binary_cross_entropy_backward",
    "cumsum", "cumprod",
))(_streaming(Engine.VECTOR))


@register_cost(*ops(
    "sum", "mean", "amax", "amin", "max", "min", "aminmax", "argmax", "argmin", "prod",
    "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "any", "all",
    "logsumexp", "count_nonzero", "dot", "vdot", "equal"))
def reduction(*, outputs: list, **args: Any) -> OpCost:
    """Reductions stream their whole input through VectorE, whatever the output size. Their
    rows (one per output element) are what a GPU's reduction kernel reduces, splitting a long
    row over several thread blocks."""
    read, written = traffic(args.values(), outputs)
    x = first_tensor(args.values())
    out = first_tensor(outputs)
    rows = max(1, out.numel) if out is not None else 1
    reduces = x is not None and x.numel > rows  # not max.other, an elementwise maximum
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                  elements=x.numel if x else 0, dtype=dtype_key(x.dtype if x else None),
                  rows=rows if reduces else 0, row_len=x.numel // rows if reduces else 0,
                  row_kernel="reduce" if reduces else "")


def _last_dim_rows(x: TensorMeta | None, dim: Any) -> tuple[int, int]:
    """(rows, row length) of a row-wise op along ``dim`` when that is the last dim (a GPU
    kernel gives each row a block or a warp); (0, 0) along another dim or for a scalar."""
    if x is None or not x.shape or not isinstance(dim, int):
        return 0, 0
    if dim % len(x.shape) != len(x.shape) - 1 or x.shape[-1] <= 1:
        return 0, 0
    return x.numel // x.shape[-1], x.shape[-1]


def _softmax_formula(passes: float, overlapped: tuple[tuple[Engine, float], ...],
                     engine: Engine) -> CostFormula:
    streaming = _streaming(engine, passes, overlapped)

    def formula(*, outputs: list, **args: Any) -> OpCost:
        cost = streaming(outputs=outputs, **args)
        rows, row_len = _last_dim_rows(first_tensor(args.values()), args.get("dim"))
        if not rows:
            return cost
        return dataclasses.replace(cost, rows=rows, row_len=row_len, row_kernel="softmax")

    formula.__qualname__ = f"softmax({engine.value}, passes={passes:g})"
    return formula


# exp on ScalarE (with its running sum); row max and the normalizing multiply on VectorE.
register_cost(*ops("_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax"))(
    _softmax_formula(1.0, ((Engine.VECTOR, 2.0),), Engine.SCALAR))
# dx = (g - sum(g * y)) * y
register_cost(*ops("_softmax_backward_data", "_log_softmax_backward_data"))(
    _softmax_formula(3.0, (), Engine.VECTOR))


def _norm_rows(args: dict[str, Any], x: TensorMeta | None) -> tuple[int, int]:
    """(rows, row length) a norm's statistics reduce: layer and RMS norm over
    ``normalized_shape``, group norm over each sample's group (GPU: a thread block per row);
    (0, 0) for batch norm, whose statistics run per channel across the batch."""
    if x is None or not x.numel:
        return 0, 0
    shape = args.get("normalized_shape")
    if isinstance(shape, (list, tuple)) and shape and all(isinstance(v, int) for v in shape):
        row_len = math.prod(shape)
        return (x.numel // row_len, row_len) if row_len > 0 else (0, 0)
    n, group = args.get("N"), args.get("group")
    if isinstance(n, int) and isinstance(group, int) and n * group > 0:
        return n * group, x.numel // (n * group)
    return 0, 0


def _passes_over_input(passes: int) -> CostFormula:
    def formula(*, outputs: list, **args: Any) -> OpCost:
        x = first_tensor(args.values())
        read, written = traffic(args.values(), outputs)
        rows, row_len = _norm_rows(args, x)
        return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                      elements=passes * (x.numel if x else 0), dtype=dtype_key(x.dtype if x else None),
                      rows=rows, row_len=row_len, row_kernel="norm" if rows else "")

    formula.__qualname__ = f"passes_over_input({passes})"
    return formula


# Norms: statistics (one pass, bn_stats), then normalize and the affine transform (two passes).
register_cost(*ops(
    "native_layer_norm", "layer_norm", "native_group_norm", "group_norm", "native_batch_norm",
    "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional", "batch_norm"))(_passes_over_input(3))
register_cost(*ops("_fused_rms_norm", "rms_norm"))(_passes_over_input(2))
register_cost(*ops("native_layer_norm_backward", "native_group_norm_backward",
                   "native_batch_norm_backward", "_fused_rms_norm_backward"))(_passes_over_input(5))


@register_cost(*ops("_fused_adam", "_fused_adamw", "_fused_sgd"))
def fused_optimizer(self: list, *, outputs: list, **args: Any) -> OpCost:
    elements = numel([self])
    read = nbytes([self, *args.values()])
    written = nbytes([self]) * 3  # param, exp_avg, exp_avg_sq updated
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written, elements=10 * elements,
                  dtype=dtype_key(self[0].dtype if self else None))


# --- GpSimd: gather, scatter, index, masks, iota, random numbers ---------------------------------

@register_cost(*ops("embedding", "index_select", "gather", "take", "index", "masked_select",
                    "nll_loss_forward", "nll_loss2d_forward", "take_along_dim", inplace=False))
def gather(*, outputs: list, **args: Any) -> OpCost:
    """A gather reads only the rows it picks (and its indices), not the whole table."""
    # The first tensor is the table in every op registered here; skip it by position, not by
    # dtype: an integer table (token ids, index_select on a LongTensor) is not an index.
    indices = [t for t in list(iter_tensors(args.values()))[1:] if not t.dtype.is_floating_point]
    gathered = nbytes(outputs)
    first = first_tensor(outputs)
    return OpCost(Engine.GPSIMD, bytes_read=gathered + nbytes(indices), bytes_written=gathered,
                  elements=numel(outputs), dtype=dtype_key(first.dtype if first else None))


register_cost(*ops(
    "embedding_dense_backward", "scatter", "scatter_add", "scatter_reduce", "index_add",
    "index_put", "index_copy", "index_fill", "masked_scatter", "nll_loss_backward",
    "nll_loss2d_backward", "_index_put_impl",
    "arange", "tril", "triu", "nonzero", "sort", "topk", "argsort", "_unique", "_unique2",
    "one_hot", "bernoulli", "native_dropout", "native_dropout_backward", "dropout", "rand",
    "randn", "randint", "rand_like", "randn_like", "randint_like", "normal", "uniform",
    "multinomial", "randperm", "bucketize", "searchsorted", "embedding_renorm",
))(_streaming(Engine.GPSIMD))


# --- DMA: copies, concatenation, materialized transposes and casts -------------------------------

@register_cost(*ops(
    "clone", "_to_copy", "cat", "stack", "contiguous", "constant_pad_nd", "repeat",
    "expand_copy", "permute_copy", "transpose_copy", "t_copy", "view_copy", "slice_copy",
    "select_copy", "narrow_copy", "split_copy", "split_with_sizes_copy", "unbind_copy",
    "slice_scatter", "select_scatter", "as_strided_scatter", "diagonal_scatter", "flip", "roll",
    "to", "lift_fresh_copy", "reflection_pad2d", "replication_pad2d", "pixel_shuffle"))
def dma(*, outputs: list, **args: Any) -> OpCost:
    read, written = traffic(args.values(), outputs)
    first = first_tensor(outputs) or first_tensor(args.values())
    source = first_tensor(args.values())
    return OpCost(Engine.DMA, bytes_read=read, bytes_written=written,
                  dtype=dtype_key(first.dtype if first else None),
                  read_run_bytes=read_run_bytes(source, first_tensor(outputs)) if source is not None else 0)


@register_cost(aten.copy, aten.copy_)
def copy(self: TensorMeta, src: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    """copy_(dst, src) reads the source and writes the destination (a cast if dtypes differ)."""
    return OpCost(Engine.DMA, bytes_read=src.nbytes, bytes_written=self.nbytes,
                  dtype=dtype_key(self.dtype), read_run_bytes=read_run_bytes(src, self))


# --- free: allocation without writing, relabelled storage, host-side queries ---------------------

register_free(*ops(
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
    "_unsafe_view", "lift_fresh", "resolve_conj", "resolve_neg", "_reshape_alias", "set",
    "detach", "alias", "_local_scalar_dense", "item", "size", "stride", "numel", "dim",
    "is_same_size", "_has_compatible_shallow_copy_type", "record_stream", "_assert_async",
    "_assert_tensor_metadata", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "_propagate_xla_data", "_functional_assert_async", "_fused_sdp_choice"))


# --- _foreach_*: one launch over lists of tensors, each element costed as the single op ------------

def _foreach(inner: CostFormula) -> CostFormula:
    def formula(*, outputs: list, **args: Any) -> OpCost:
        count = max((len(v) for v in args.values() if isinstance(v, (list, tuple))), default=0)
        parts = []
        for i in range(count):
            element = {name: value[i] if isinstance(value, (list, tuple)) and len(value) == count
                       else value for name, value in args.items()}
            parts.append(inner(**element, outputs=[outputs[i]] if len(outputs) == count else []))
        if not parts:
            return OpCost(Engine.NONE)
        return OpCost(parts[0].engine, flops=sum(p.flops for p in parts),
                      bytes_read=sum(p.bytes_read for p in parts),
                      bytes_written=sum(p.bytes_written for p in parts),
                      elements=sum(p.elements for p in parts), dtype=parts[0].dtype,
                      costed=all(p.costed for p in parts))

    formula.__qualname__ = f"foreach({getattr(inner, '__qualname__', inner)})"
    return formula


def _register_foreach() -> None:
    """Every ``_foreach_X`` torch has, whose single-tensor ``X`` has a formula, is costed as X
    on each element of its lists, in one launch."""
    names = {qualified[len("aten::"):].split(".")[0]
             for qualified in torch._C._dispatch_get_all_op_names()
             if qualified.startswith("aten::_foreach_")}
    for name in sorted(names):
        single = getattr(aten, name[len("_foreach_"):], None)
        inner = formula_for(single) if single is not None else None
        if inner is not None:
            register_cost(getattr(aten, name))(_foreach(inner))


_register_foreach()
