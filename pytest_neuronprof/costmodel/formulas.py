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
                       register_cost, register_free, unregister)

__all__ = ["formula_for", "generation", "is_free", "kernel_name", "op_cost", "register_cost",
           "register_free", "unregister"]

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
    sparse = next((t for t in iter_tensors(inputs) if t.nnz is not None), None)
    if sparse is not None:
        return _sparse_product(sparse, products, inputs, outputs)
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


def _scatter(dst: TensorMeta, written: int, read: Sequence[Any], accumulate: bool, inplace: bool,
             outputs: Sequence[Any]) -> OpCost:
    """A write of ``written`` elements into ``dst`` at indices: it reads what it writes (the
    values and their indices), writes only those elements, and reads them first when it
    accumulates. Out of place, the op copies the destination first (read and written whole)."""
    slice_bytes = written * dst.dtype.itemsize
    bytes_read = nbytes(read) + (slice_bytes if accumulate else 0)
    bytes_written = slice_bytes
    if not inplace:
        bytes_read += dst.nbytes
        bytes_written += dst.nbytes
    return OpCost(Engine.GPSIMD, bytes_read=bytes_read, bytes_written=bytes_written,
                  elements=written * (2 if accumulate else 1), dtype=dtype_key(dst.dtype))


def _indexed_elements(self: TensorMeta, indices: Sequence[Any]) -> int:
    """Elements ``self[indices]`` selects: the broadcast shape of the index tensors times the
    dims they leave whole (None, or past the list); a boolean mask stands for as many dims as it
    has and counts all its elements (how many it selects depends on the data)."""
    whole, tensors, dim = 1, [], 0
    for index in indices:
        if type(index) is TensorMeta:
            tensors.append(index)
            dim += len(index.shape) if index.dtype == torch.bool else 1
        else:
            whole *= self.shape[dim] if dim < len(self.shape) else 1
            dim += 1
    whole *= math.prod(self.shape[dim:])
    if not tensors:
        return self.numel
    if any(t.dtype == torch.bool for t in tensors):
        picked = sum(t.numel for t in tensors)
    else:
        picked = math.prod(torch.broadcast_shapes(*(t.shape for t in tensors)))
    return picked * whole


def _scatter_formulas(inplace: bool) -> dict[str, CostFormula]:
    def index_copy(self, dim, index, source, *, outputs, **_):
        return _scatter(self, source.numel, [index, source], False, inplace, outputs)

    def index_add(self, dim, index, source, *, outputs, **_):
        return _scatter(self, source.numel, [index, source], True, inplace, outputs)

    def index_fill(self, dim, index, value, *, outputs, **_):
        rows = self.numel // max(1, self.shape[dim]) if self.shape else 1
        return _scatter(self, index.numel * rows, [index, value], False, inplace, outputs)

    def index_put(self, indices, values, accumulate=False, *, outputs, **_):
        written = _indexed_elements(self, indices)
        if type(values) is TensorMeta:
            written = max(written, values.numel) if values.numel > 1 else written
        return _scatter(self, written, [*indices, values], bool(accumulate), inplace, outputs)

    def scatter(self, dim, index, *, outputs, src=None, value=None, reduce=None, **_):
        taken = [index] if type(src) is not TensorMeta else [index, TensorMeta(index.shape, src.dtype)]
        return _scatter(self, index.numel, taken, reduce is not None, inplace, outputs)

    def scatter_add(self, dim, index, src, *, outputs, **_):
        return _scatter(self, index.numel, [index, TensorMeta(index.shape, src.dtype)], True,
                        inplace, outputs)

    def masked_scatter(self, mask, source, *, outputs, **_):
        return _scatter(self, min(source.numel, mask.numel), [mask, source], False, inplace,
                        outputs)

    def put(self, index, source, accumulate=False, *, outputs, **_):
        return _scatter(self, index.numel, [index, source], bool(accumulate), inplace, outputs)

    return {"index_copy": index_copy, "index_add": index_add, "index_fill": index_fill,
            "index_put": index_put, "_index_put_impl": index_put, "_unsafe_index_put": index_put,
            "scatter": scatter, "scatter_add": scatter_add, "scatter_reduce": scatter_add,
            "index_reduce": index_add, "masked_scatter": masked_scatter, "put": put}


def _register_scatters() -> None:
    """Scatters cost the slice they write: a one-token KV-cache write is one token's bytes."""
    for inplace in (False, True):
        for name, formula in _scatter_formulas(inplace).items():
            packet = getattr(aten, name + ("_" if inplace else ""), None)
            if packet is not None:
                formula.__qualname__ = f"scatter.{name}{'_' if inplace else ''}"
                register_cost(packet)(formula)


_register_scatters()

register_cost(*ops(
    "embedding_dense_backward", "nll_loss_backward", "nll_loss2d_backward",
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


# --- sparse operands ------------------------------------------------------------------------------

def _sparse_product(sparse: TensorMeta, products: Sequence[tuple[int, int, int, int]],
                    inputs: Sequence[Any], outputs: Sequence[Any]) -> OpCost:
    """A product with a sparse COO operand: each stored element multiplies one row (or column)
    of the dense operand, gathered by index, on VectorE; nothing runs on TensorE. Reads the
    sparse values and indices and only the dense rows they pick, writes the output."""
    g, m, k, n = products[0]
    dense_side = n if sparse.shape[-1] == k else m  # sparse x dense: output columns; else rows
    others = [t for t in iter_tensors(inputs) if t is not sparse]
    dense = max(others, key=lambda t: (t.numel, len(t.shape)), default=None)
    read = nbytes([t for t in others if t is not dense]) + sparse.nbytes
    if dense is not None:
        read += min(dense.nbytes, sparse.nnz * dense_side * dense.dtype.itemsize)
    return OpCost(Engine.VECTOR, flops=2 * sparse.nnz * dense_side, bytes_read=read,
                  bytes_written=nbytes(outputs), elements=sparse.nnz * dense_side,
                  dtype=dtype_key(sparse.dtype))


@register_cost(*ops("_sparse_addmm", "sspaddmm"))
def sparse_addmm(self: TensorMeta, mat1: TensorMeta, mat2: TensorMeta, *, outputs: list,
                 **args: Any) -> OpCost:
    return _matmul_cost([(1, mat1.shape[0], mat1.shape[1], mat2.shape[-1])], [self, mat1, mat2],
                        outputs)


@register_cost(*ops("_sparse_mm", "hspmm", inplace=False))
def sparse_mm(*, outputs: list, **args: Any) -> OpCost:
    a, b = list(iter_tensors(args.values()))[:2]
    return _matmul_cost([(1, a.shape[0], a.shape[1], b.shape[-1])], [a, b], outputs)


# --- the long tail: ops real models meet (pooling, resampling, FFT, view gradients, ...) ---------

# ScalarE: more transcendentals and activations.
register_cost(*ops(
    "atan2", "acosh", "asinh", "atanh", "log10", "lgamma", "digamma", "polygamma", "mvlgamma",
    "i0", "igamma", "igammac", "sinc", "logaddexp", "logaddexp2", "hypot", "xlogy",
    "logit_backward", "hardsigmoid_backward", "softshrink", "softshrink_backward", "hardshrink",
    "hardshrink_backward", "rrelu_with_noise", "rrelu_with_noise_backward", "_prelu_kernel",
    "_prelu_kernel_backward", "_masked_softmax", "_masked_softmax_backward",
))(_streaming(Engine.SCALAR))

# VectorE: more elementwise arithmetic, comparisons, fills and losses.
register_cost(*ops(
    "copysign", "deg2rad", "rad2deg", "floor_divide", "gcd", "lcm", "heaviside", "ldexp",
    "nextafter", "isneginf", "isposinf", "signbit", "__lshift__", "__rshift__", "__ilshift__",
    "__irshift__", "bitwise_left_shift", "bitwise_right_shift", "_add_relu", "frexp", "angle",
    "polar", "complex", "_conj_physical", "conj_physical", "huber_loss", "huber_loss_backward",
    "smooth_l1_loss_backward", "soft_margin_loss", "soft_margin_loss_backward",
    "multi_margin_loss", "multi_margin_loss_backward", "multilabel_margin_loss_forward",
    "multilabel_margin_loss_backward", "_masked_scale", "new_ones", "new_zeros", "new_full",
    "eye", "linspace", "logspace", "range", "hann_window", "hamming_window", "blackman_window",
    "bartlett_window", "kaiser_window", "_efficientzerotensor", "_amp_update_scale",
    "_weight_norm_interface", "_weight_norm_interface_backward", "renorm", "batch_norm_stats",
    "batch_norm_elemt", "batch_norm_backward_reduce", "batch_norm_backward_elemt",
    "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts", "batch_norm_update_stats",
    "batch_norm_backward", "_batch_norm_no_update", "_batch_norm_with_update",
    "_batch_norm_with_update_functional", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
    "_thnn_fused_lstm_cell_backward_impl", "_thnn_fused_gru_cell_backward", "_fused_adagrad",
))(_streaming(Engine.VECTOR))

# Reductions and scans over their whole input.
register_cost(*ops(
    "nansum", "median", "nanmedian", "mode", "kthvalue", "_aminmax", "dist", "trace", "histc",
    "bincount", "native_norm", "cummax", "cummin", "logcumsumexp", "_logcumsumexp",
    "_cummax_helper", "_cummin_helper", "unique_consecutive", "unique_dim",
    "unique_dim_consecutive", "_is_all_true", "_is_any_true", "allclose",
))(reduction)


@register_cost(aten.isin)
def isin(elements: Any, test_elements: Any, *, outputs: list, **args: Any) -> OpCost:
    """Membership by sorting the test elements once and a binary search per element."""
    n = elements.numel if type(elements) is TensorMeta else 1
    m = test_elements.numel if type(test_elements) is TensorMeta else 1
    steps = max(1, math.ceil(math.log2(m + 1)))  # of the sort and of each search
    read, written = traffic([elements, test_elements], outputs)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written, elements=(m + n) * steps,
                  dtype=dtype_key(getattr(elements, "dtype", None)))


def _window(kernel_size: Any) -> int:
    return math.prod(kernel_size) if isinstance(kernel_size, (list, tuple)) and kernel_size \
        else int(kernel_size or 1)


@register_cost(*ops("max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool2d",
                    "avg_pool3d", "fractional_max_pool2d", "fractional_max_pool3d"))
def pool(self: TensorMeta, kernel_size: Any, *, outputs: list, **args: Any) -> OpCost:
    """A pooling window per output element, on VectorE: each output reads its window."""
    out = first_tensor(outputs)
    read, written = traffic([self], outputs)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                  elements=(out.numel if out else 0) * _window(kernel_size), dtype=dtype_key(self.dtype))


@register_cost(*ops("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d",
                    "adaptive_max_pool3d", "max_unpool2d", "max_unpool3d", "max_pool2d_with_indices_backward",
                    "max_pool3d_with_indices_backward", "avg_pool2d_backward", "avg_pool3d_backward",
                    "_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward",
                    "adaptive_avg_pool3d_backward", "adaptive_max_pool2d_backward",
                    "adaptive_max_pool3d_backward", "fractional_max_pool2d_backward",
                    "fractional_max_pool3d_backward", "max_pool2d_backward"))
def pool_whole(*, outputs: list, **args: Any) -> OpCost:
    """Adaptive pooling and pooling gradients: every input element is visited once."""
    read, written = traffic(args.values(), outputs)
    x = first_tensor(args.values())
    elements = max(numel(args.values()), numel(outputs))
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written, elements=elements,
                  dtype=dtype_key(x.dtype if x else None))


def _resampling(taps: int) -> CostFormula:
    def formula(*, outputs: list, **args: Any) -> OpCost:
        read, written = traffic(args.values(), outputs)
        first = first_tensor(outputs) or first_tensor(args.values())
        elements = max(numel(outputs), numel(args.values()))
        return OpCost(Engine.GPSIMD, bytes_read=read, bytes_written=written,
                      elements=elements * taps, dtype=dtype_key(first.dtype if first else None))

    formula.__qualname__ = f"resampling(taps={taps})"
    return formula


# Resampling: a gather of `taps` source elements per output element.
register_cost(*ops("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
                   "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
                   "_upsample_nearest_exact3d", "upsample_nearest1d_backward",
                   "upsample_nearest2d_backward", "upsample_nearest3d_backward",
                   "_upsample_nearest_exact1d_backward", "_upsample_nearest_exact2d_backward",
                   "_upsample_nearest_exact3d_backward", "im2col", "col2im", "channel_shuffle",
                   "pixel_unshuffle"))(_resampling(1))
register_cost(*ops("upsample_linear1d", "upsample_linear1d_backward"))(_resampling(2))
register_cost(*ops("upsample_bilinear2d", "upsample_bilinear2d_backward", "_upsample_bilinear2d_aa",
                   "_upsample_bilinear2d_aa_backward", "grid_sampler_2d",
                   "grid_sampler_2d_backward", "affine_grid_generator"))(_resampling(4))
register_cost(*ops("upsample_trilinear3d", "upsample_trilinear3d_backward", "grid_sampler_3d",
                   "grid_sampler_3d_backward"))(_resampling(8))
register_cost(*ops("upsample_bicubic2d", "upsample_bicubic2d_backward", "_upsample_bicubic2d_aa",
                   "_upsample_bicubic2d_aa_backward", "_upsample_lanczos2d_aa",
                   "_upsample_lanczos2d_aa_backward"))(_resampling(16))


@register_cost(*ops("_fft_r2c", "_fft_c2r", "_fft_c2c"))
def fft(self: TensorMeta, dim: Sequence[int], *, outputs: list, **args: Any) -> OpCost:
    """A radix-2 FFT over ``dim``: n/2 log2(n) butterflies per signal of n points, each a
    complex multiply and two complex adds (10 real operations), on VectorE."""
    out = first_tensor(outputs)
    signal = max(math.prod(self.shape[d] for d in dim), math.prod(out.shape[d] for d in dim)) \
        if out is not None else math.prod(self.shape[d] for d in dim)
    signals = max(1, max(self.numel, out.numel if out else 0) // max(1, signal))
    read, written = traffic([self], outputs)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                  elements=signals * 5 * signal * max(1, math.ceil(math.log2(max(signal, 2)))),
                  dtype=dtype_key(self.dtype))


@register_cost(*ops("slice_backward", "select_backward", "diagonal_backward", "unfold_backward",
                    "masked_scatter_backward"))
def view_backward(*, outputs: list, **args: Any) -> OpCost:
    """The gradient of a view: a zero-filled tensor of the input's size with the gradient copied
    into the viewed part. Writes the whole output once, reads the gradient."""
    grad = first_tensor(args.values())
    return OpCost(Engine.DMA, bytes_read=grad.nbytes if grad else 0, bytes_written=nbytes(outputs),
                  dtype=dtype_key(grad.dtype if grad else None))


# DMA: more copies (the *_copy forms of views, padding, stacking, resizing copies).
register_cost(*ops(
    "alias_copy", "as_strided_copy", "detach_copy", "diagonal_copy", "_reshape_copy",
    "_reshape_alias_copy", "indices_copy", "values_copy", "_indices_copy", "_values_copy",
    "_conj_copy", "_neg_view_copy", "unfold_copy", "squeeze_copy", "unsqueeze_copy",
    "view_as_real_copy", "view_as_complex_copy", "_fw_primal_copy", "_make_dual_copy",
    "ccol_indices_copy", "col_indices_copy", "crow_indices_copy", "row_indices_copy",
    "_chunk_cat", "_stack", "block_diag", "diag_embed", "rot90", "repeat_interleave",
    "reflection_pad1d", "reflection_pad3d", "replication_pad1d", "replication_pad3d",
    "reflection_pad1d_backward", "reflection_pad2d_backward", "reflection_pad3d_backward",
    "replication_pad1d_backward", "replication_pad2d_backward", "replication_pad3d_backward",
    "_lazy_clone", "to_padded_tensor", "_pack_padded_sequence", "_to_dense",
))(dma)

# GpSimd: more random numbers, gathers and embedding bags.
register_cost(*ops(
    "random", "exponential", "cauchy", "log_normal", "geometric", "poisson", "binomial",
    "_standard_gamma", "_standard_gamma_grad", "_sample_dirichlet", "_dirichlet_grad",
    "normal_functional", "_fused_dropout", "_embedding_bag", "_embedding_bag_forward_only",
    "_embedding_bag_backward", "_embedding_bag_dense_backward",
    "_embedding_bag_per_sample_weights_backward", "tril_indices", "triu_indices",
    "nonzero_static",
))(_streaming(Engine.GPSIMD))
register_cost(*ops("_unsafe_index", "_unsafe_masked_index", inplace=False))(gather)

register_free(*ops("resize", "resize_as", "_resize_output", "unsafe_split",
                   "unsafe_split_with_sizes", "lift", "_pin_memory", "is_pinned", "is_set_to",
                   "is_coalesced", "_nnz", "dense_dim", "_dimI", "_dimV", "sym_constrain_range",
                   "sym_constrain_range_for_size", "_functional_sym_constrain_range",
                   "_functional_sym_constrain_range_for_size", "_assert_scalar",
                   "_functional_assert_scalar", "_make_dep_token", "_print",
                   "_has_same_storage_numel", "q_scale", "q_zero_point", "qscheme"))


# TensorE: more matrix products.
@register_cost(*ops("addmv", "mv"))
def matrix_vector(*, outputs: list, **args: Any) -> OpCost:
    mat = args["mat"] if "mat" in args else args["self"]  # addmv(self, mat, vec), mv(self, vec)
    return _matmul_cost([(1, mat.shape[0], mat.shape[1], 1)], list(args.values()), outputs)


@register_cost(*ops("addr"))
def outer(self: TensorMeta, vec1: TensorMeta, vec2: TensorMeta, *, outputs: list,
          **args: Any) -> OpCost:
    return _matmul_cost([(1, vec1.shape[0], 1, vec2.shape[0])], [self, vec1, vec2], outputs)


@register_cost(*ops("addbmm"))
def addbmm(self: TensorMeta, batch1: TensorMeta, batch2: TensorMeta, *, outputs: list,
           **args: Any) -> OpCost:
    return _matmul_cost([(batch1.shape[0], batch1.shape[1], batch1.shape[2], batch2.shape[2])],
                        [self, batch1, batch2], outputs)


@register_cost(aten._int_mm, aten._scaled_mm, aten._weight_int8pack_mm,
               *ops("_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu",
                    "_weight_int4pack_mm_with_scales_and_zeros", "_addmm_activation",
                    "linear_backward", "_cdist_forward", "_euclidean_dist"))
def low_precision_mm(*, outputs: list, **args: Any) -> OpCost:
    """Products whose first two tensors are the operands (quantized or scaled, or x1 and x2 of a
    distance matrix, or an activation fused into addmm): rows of the first times its last dim
    times the output's last dim."""
    tensors = list(iter_tensors(args.values()))
    if "mat1" in args:  # _addmm_activation(self, mat1, mat2)
        a, b = args["mat1"], args["mat2"]
    else:
        a, b = tensors[0], tensors[1]
    out = first_tensor(outputs)
    rows = a.numel // max(1, a.shape[-1])
    cols = out.shape[-1] if out is not None and out.shape else b.shape[-1]
    return _matmul_cost([(1, rows, a.shape[-1], cols)], tensors, outputs)


@register_cost(aten._grouped_mm, *ops("_scaled_grouped_mm", "_scaled_grouped_mm_v2", "_scaled_mm_v2"))
def grouped_mm(self: TensorMeta, mat2: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    """Mixture-of-experts products: the tokens of every group through their expert's matrix,
    in all one product of every token's row (self is 2-D) with one expert's K x N."""
    rows = self.numel // max(1, self.shape[-1])
    cols = mat2.shape[-1]
    return _matmul_cost([(1, rows, self.shape[-1], cols)], [self, mat2, *args.values()], outputs)


@register_cost(*ops("slow_conv_dilated2d", "slow_conv_dilated3d", "_slow_conv2d_forward",
                    "slow_conv3d_forward", "_conv_depthwise2d", "conv_depthwise3d",
                    "slow_conv_transpose2d", "slow_conv_transpose3d", "convolution_overrideable"))
def native_convolution(*, outputs: list, **args: Any) -> OpCost:
    """The device-specific convolution kernels, costed as ``convolution``."""
    x = args.get("input", args.get("self"))
    weight = args["weight"]
    transposed = bool(args.get("transposed", False))
    groups = args.get("groups")
    if groups is None:  # depthwise kernels: one group per input channel
        groups = x.shape[1] if weight.shape[1] == 1 and x.shape[1] != 1 else 1
    return convolution(input=x, weight=weight, bias=args.get("bias"), outputs=outputs,
                       transposed=transposed, groups=groups)


@register_cost(aten._native_multi_head_attention)
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
    return _matmul_cost(projections + list(attn.matmuls), inputs, outputs, kind="attention",
                        overlapped=attn.overlapped)


@register_cost(aten._transformer_encoder_layer_fwd)
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
    return _matmul_cost(products, inputs, outputs, kind="attention", overlapped=overlapped)


# --- collectives: torch.distributed's functional collectives and the c10d ops they replace -------

def ranks_of(group: Any, given: int | None = None) -> int:
    """Ranks in a collective's group: its ``group_size`` argument, a ProcessGroup's size, or the
    size of the group a name resolves to (the process group registered under it)."""
    if given:
        return int(given)
    import torch.distributed as dist

    if not dist.is_available():
        return 1
    if isinstance(group, torch.ScriptObject):  # the c10d ops' boxed ProcessGroup
        group = dist.ProcessGroup.unbox(group)
    if isinstance(group, str):
        from torch.distributed.distributed_c10d import _resolve_process_group

        group = _resolve_process_group(group)
    return int(group.size())


def _collective(tensor_bytes: int, ranks: int, kind: str, inputs: Sequence[Any],
                outputs: Sequence[Any]) -> OpCost:
    """A collective over ``ranks``. An all-reduce is a reduce-scatter and an all-gather; each
    phase sends (p - 1) / p of the buffer from every rank (the bandwidth of a ring, which no
    algorithm beats) in ceil(log2 p) steps (the latency of recursive halving / doubling: the
    runtime picks a latency-bound algorithm for the small messages of decode and a ring for
    large ones, and in both the bytes are the same). One rank alone communicates nothing."""
    read, written = traffic(inputs, outputs)
    phases = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1,
              "broadcast": 1}[kind]
    p = max(1, ranks)
    first = first_tensor(inputs) or first_tensor(outputs)
    return OpCost(Engine.COLLECTIVE, bytes_read=read, bytes_written=written,
                  link_bytes=phases * (p - 1) * tensor_bytes // p,
                  hops=phases * math.ceil(math.log2(p)),
                  dtype=dtype_key(first.dtype if first else None))


def _functional(kind: str, buffer: str) -> CostFormula:
    """A ``_c10d_functional`` op; ``buffer``: whose bytes the algorithm moves, the input's or
    the output's (an all-gather's output is the whole gathered buffer)."""
    def formula(input: Any, *, outputs: list, group_name: Any = None, group_size: int = 0,
                **args: Any) -> OpCost:
        inputs = [input, *args.values()]
        moved = nbytes(inputs if buffer == "input" else outputs)
        return _collective(moved, ranks_of(group_name, group_size), kind, inputs, outputs)

    formula.__qualname__ = f"collective({kind})"
    return formula


def _c10d(kind: str, buffer: str) -> CostFormula:
    """A ``c10d`` op (the ProcessGroup API under torch.distributed.all_reduce and friends)."""
    def formula(*, outputs: list, process_group: Any = None, **args: Any) -> OpCost:
        tensors = list(iter_tensors(args.values()))
        moved = nbytes(tensors if buffer == "input" else outputs) or nbytes(tensors)
        return _collective(moved, ranks_of(process_group), kind, tensors, outputs)

    formula.__qualname__ = f"collective({kind})"
    return formula


def _register_collectives() -> None:
    functional = torch.ops._c10d_functional
    c10d = torch.ops.c10d
    for kind, buffer, names in (
            ("all_reduce", "input", ("all_reduce", "all_reduce_", "all_reduce_coalesced",
                                     "all_reduce_coalesced_")),
            ("all_gather", "output", ("all_gather_into_tensor", "all_gather_into_tensor_out",
                                      "all_gather_into_tensor_coalesced")),
            ("reduce_scatter", "input", ("reduce_scatter_tensor", "reduce_scatter_tensor_out",
                                         "reduce_scatter_tensor_coalesced")),
            ("all_to_all", "input", ("all_to_all_single",)),
            ("broadcast", "input", ("broadcast", "broadcast_"))):
        register_cost(*(getattr(functional, name) for name in names))(_functional(kind, buffer))
    for kind, buffer, names in (
            ("all_reduce", "input", ("allreduce_", "allreduce_coalesced_")),
            ("all_gather", "output", ("allgather_", "_allgather_base_", "allgather_coalesced_",
                                      "allgather_into_tensor_coalesced_")),
            ("reduce_scatter", "input", ("reduce_scatter_", "_reduce_scatter_base_",
                                         "reduce_scatter_tensor_coalesced_")),
            ("all_to_all", "input", ("alltoall_", "alltoall_base_")),
            ("broadcast", "input", ("broadcast_",))):
        register_cost(*(getattr(c10d, name) for name in names))(_c10d(kind, buffer))
    # Waiting for a collective, and autograd's wrapper of its result, move nothing.
    register_free(functional.wait_tensor)


_register_collectives()


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
