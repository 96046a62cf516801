"""Which NeuronCore engine runs an ATen op, and how much work and traffic it has.

A registry keyed by the op's base name ("mm", "native_layer_norm"; the trailing "_" of in-place
variants and the overload dropped), in the manner of ``torch.utils.flop_counter``: each entry is a
small pure function from the op's argument metadata to an :class:`OpCost`. Times are not computed
here: ``roofline.py`` turns an OpCost into device time for a hardware profile.

Arguments arrive as captured by the simulated backend: tensors replaced by :class:`TensorMeta`,
everything else as passed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from ..vocabulary import Engine


class TensorMeta:
    """What the cost model needs of a tensor: shape and dtype, no storage kept alive."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype) -> None:
        self.shape = shape
        self.dtype = dtype

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"TensorMeta({list(self.shape)}, {self.dtype})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorMeta) and (self.shape, self.dtype) == (other.shape, other.dtype)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype))


@dataclass(frozen=True)
class OpCost:
    """Work and traffic of one op call.

    matmuls: (batch, m, k, n) products on TensorE, m x k times k x n.
    elements: element operations on the primary engine (VectorE, ScalarE or GpSimd).
    overlapped: work on other lane engines that runs alongside, as (engine, elements).
    kind: the TensorE kind whose efficiency applies ("matmul", "conv", "attention").
    costed: False when the model does not know the op and costed it by its bytes alone.
    """

    engine: Engine
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    matmuls: tuple[tuple[int, int, int, int], ...] = ()
    elements: int = 0
    overlapped: tuple[tuple[Engine, int], ...] = ()
    dtype: str = "float32"
    kind: str = "matmul"
    costed: bool = True


FREE = OpCost(Engine.NONE)

_DTYPE_KEYS = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
}


def dtype_key(dtype: torch.dtype | None) -> str:
    """The rate-table key of a dtype: bfloat16, float16, float8 or float32 (everything else)."""
    if dtype is None:
        return "float32"
    key = _DTYPE_KEYS.get(dtype)
    if key is None:
        key = "float8" if "float8" in str(dtype) else "float32"
    return key


def iter_tensors(values: Any) -> Iterator[TensorMeta]:
    """TensorMetas in an argument list, one level of lists deep (TensorList, Tensor?[])."""
    for value in values:
        if type(value) is TensorMeta:
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if type(item) is TensorMeta:
                    yield item


def _bytes(values: Any) -> int:
    return sum(t.nbytes for t in iter_tensors(values))


def _numel(values: Any) -> int:
    return sum(t.numel for t in iter_tensors(values))


def _first(values: Any) -> TensorMeta | None:
    return next(iter_tensors(values), None)


def _arg(args: Sequence[Any], kwargs: dict[str, Any], index: int, name: str, default: Any) -> Any:
    if name in kwargs:
        return kwargs[name]
    return args[index] if len(args) > index else default


# Cost functions take (args, kwargs, outputs) and return an OpCost.
CostFn = Callable[[Sequence[Any], dict, Sequence[Any]], OpCost]
_REGISTRY: dict[str, CostFn] = {}


def register(*names: str) -> Callable[[CostFn], CostFn]:
    def wrap(fn: CostFn) -> CostFn:
        for name in names:
            _REGISTRY[name] = fn
        return fn

    return wrap


def base_name(op_name: str) -> str:
    """'aten::add_' -> 'add'; '_softmax' keeps its leading underscore."""
    name = op_name.rsplit("::", 1)[-1]
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def lookup(op_name: str) -> CostFn | None:
    name = base_name(op_name)
    fn = _REGISTRY.get(name)
    if fn is None and name.startswith("_foreach_"):
        inner = _REGISTRY.get(name[len("_foreach_"):])
        if inner is not None:
            fn = _foreach(inner)
    return fn


def op_cost(op_name: str, args: Sequence[Any], kwargs: dict, outputs: Sequence[Any]) -> OpCost:
    """The OpCost of one call; unknown ops are costed by their bytes on VectorE, marked uncosted."""
    fn = lookup(op_name)
    if fn is not None:
        try:
            return fn(args, kwargs, outputs)
        except (AttributeError, IndexError, TypeError, ValueError, ZeroDivisionError):
            pass  # an unusual call form the formula does not cover: fall back, marked uncosted
    return _lane(Engine.VECTOR, args, outputs, costed=False)


def _traffic(args: Any, outputs: Any) -> tuple[int, int]:
    written = _bytes(outputs)
    if not written:  # in-place ops that return nothing write their first argument
        first = _first(args)
        written = first.nbytes if first is not None else 0
    return _bytes(args), written


def _lane(engine: Engine, args: Any, outputs: Any, passes: float = 1.0, costed: bool = True,
          overlapped: tuple[tuple[Engine, int], ...] = ()) -> OpCost:
    """An op that streams its output (or, in place, its first argument) through a lane engine."""
    read, written = _traffic(args, outputs)
    elements = _numel(outputs) or _numel(args[:1])
    first = _first(args) or _first(outputs)
    return OpCost(
        engine,
        bytes_read=read,
        bytes_written=written,
        elements=int(elements * passes),
        overlapped=tuple((e, int(elements * p)) for e, p in overlapped),
        dtype=dtype_key(first.dtype if first else None),
        costed=costed,
    )


def _foreach(inner: CostFn) -> CostFn:
    def cost(args: Sequence[Any], kwargs: dict, outputs: Sequence[Any]) -> OpCost:
        first = inner(args, kwargs, outputs)
        read, written = _traffic(args, outputs)
        elements = _numel(outputs) or _numel(args[:1])
        return OpCost(first.engine, bytes_read=read, bytes_written=written, elements=elements,
                      dtype=first.dtype, costed=first.costed)

    return cost


# --- TensorE: matrix products, convolution, attention -------------------------------------------

def _matmul_cost(products: Sequence[tuple[int, int, int, int]], args: Any, outputs: Any,
                 kind: str = "matmul", overlapped: tuple[tuple[Engine, int], ...] = (),
                 flop_scale: float = 1.0) -> OpCost:
    read, written = _traffic(args, outputs)
    first = _first(args)
    flops = sum(2 * g * m * k * n for g, m, k, n in products)
    return OpCost(
        Engine.TENSOR,
        flops=int(flops * flop_scale),
        bytes_read=read,
        bytes_written=written,
        matmuls=tuple(products),
        overlapped=overlapped,
        dtype=dtype_key(first.dtype if first else None),
        kind=kind,
    )


@register("mm")
def _mm(args, kwargs, out):
    a, b = args[0], args[1]
    return _matmul_cost([(1, a.shape[0], a.shape[1], b.shape[1])], args, out)


@register("addmm")
def _addmm(args, kwargs, out):
    a, b = args[1], args[2]
    return _matmul_cost([(1, a.shape[0], a.shape[1], b.shape[1])], args, out)


@register("bmm")
def _bmm(args, kwargs, out):
    a, b = args[0], args[1]
    return _matmul_cost([(a.shape[0], a.shape[1], a.shape[2], b.shape[2])], args, out)


@register("baddbmm")
def _baddbmm(args, kwargs, out):
    a, b = args[1], args[2]
    return _matmul_cost([(a.shape[0], a.shape[1], a.shape[2], b.shape[2])], args, out)


@register("linear")
def _linear(args, kwargs, out):
    # Only reached if linear arrives undecomposed; costs the same as its t + addmm form.
    x, w = args[0], args[1]
    rows = math.prod(x.shape[:-1])
    return _matmul_cost([(1, rows, x.shape[-1], w.shape[0])], args, out)


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


@register("convolution", "_convolution", "conv1d", "conv2d", "conv3d")
def _convolution(args, kwargs, out):
    x, w = args[0], args[1]
    transposed = bool(_arg(args, kwargs, 6, "transposed", False))
    groups = int(_arg(args, kwargs, 8, "groups", 1))
    return _matmul_cost([_conv_product(x, w, out[0], transposed, groups)], args, out, kind="conv")


@register("convolution_backward")
def _convolution_backward(args, kwargs, out):
    grad, x, w = args[0], args[1], args[2]
    transposed = bool(_arg(args, kwargs, 7, "transposed", False))
    groups = int(_arg(args, kwargs, 9, "groups", 1))
    mask = _arg(args, kwargs, 10, "output_mask", (True, True, True))
    product = _conv_product(x, w, grad, transposed, groups)
    count = int(bool(mask[0])) + int(bool(mask[1]))
    return _matmul_cost([product] * count, args, out, kind="conv")


# Argument positions of (dropout_p, is_causal) in the fused attention ops.
_ATTENTION_CAUSAL_ARG = {
    "_scaled_dot_product_flash_attention_for_cpu": 4,
    "_scaled_dot_product_flash_attention": 4,
    "_scaled_dot_product_efficient_attention": 6,
    "_scaled_dot_product_cudnn_attention": 6,
    "_scaled_dot_product_fused_attention_overrideable": 5,
    "scaled_dot_product_attention": 5,
}


def _attention(q: TensorMeta, k: TensorMeta, v: TensorMeta, causal: bool, backward: bool,
               args: Any, out: Any) -> OpCost:
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
    return _matmul_cost(products, args, out, kind="attention",
                        overlapped=((Engine.SCALAR, scores), (Engine.VECTOR, 2 * scores)))


def _attention_forward(name: str) -> CostFn:
    causal_at = _ATTENTION_CAUSAL_ARG[name]

    def cost(args, kwargs, out):
        causal = bool(_arg(args, kwargs, causal_at, "is_causal", False))
        return _attention(args[0], args[1], args[2], causal, False, args, out)

    return cost


for _name in _ATTENTION_CAUSAL_ARG:
    register(_name)(_attention_forward(_name))


@register("_scaled_dot_product_flash_attention_for_cpu_backward")
def _flash_cpu_backward(args, kwargs, out):
    # (grad_out, q, k, v, out, logsumexp, dropout_p, is_causal, ...)
    causal = bool(_arg(args, kwargs, 7, "is_causal", False))
    return _attention(args[1], args[2], args[3], causal, True, args, out)


@register("_scaled_dot_product_flash_attention_backward")
def _flash_backward(args, kwargs, out):
    # (grad_out, q, k, v, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, ...)
    causal = bool(_arg(args, kwargs, 11, "is_causal", False))
    return _attention(args[1], args[2], args[3], causal, True, args, out)


@register("_scaled_dot_product_efficient_attention_backward")
def _efficient_backward(args, kwargs, out):
    # (grad_out, q, k, v, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
    #  grad_input_mask, is_causal, ...)
    causal = bool(_arg(args, kwargs, 11, "is_causal", False))
    return _attention(args[1], args[2], args[3], causal, True, args, out)


# --- ScalarE: activations and transcendentals ----------------------------------------------------

_SCALAR_OPS = (
    "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2", "log1p",
    "sqrt", "rsqrt", "reciprocal", "pow", "erf", "erfc", "erfinv", "softplus", "elu", "selu",
    "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "mish", "sin", "cos", "tan",
    "atan", "asin", "acos", "sinh", "cosh", "logit", "prelu", "glu",
    "gelu_backward", "silu_backward", "elu_backward", "softplus_backward", "mish_backward",
    "hardswish_backward", "leaky_relu_backward", "hardtanh_backward", "log_sigmoid_forward",
    "log_sigmoid_backward", "glu_backward",
)
for _name in _SCALAR_OPS:
    register(_name)(lambda args, kwargs, out: _lane(Engine.SCALAR, args, out))


# --- VectorE: elementwise arithmetic, comparisons, reductions, normalization ---------------------

_VECTOR_OPS = (
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
)
for _name in _VECTOR_OPS:
    register(_name)(lambda args, kwargs, out: _lane(Engine.VECTOR, args, out))


@register("sum", "mean", "amax", "amin", "max", "min", "aminmax", "argmax", "argmin", "prod",
          "var", "std", "var_mean", "std_mean", "norm", "linalg_vector_norm", "any", "all",
          "logsumexp", "count_nonzero", "dot", "vdot", "equal")
def _reduction(args, kwargs, out):
    """Reductions stream their whole input through VectorE, whatever the output size."""
    read, written = _traffic(args, out)
    x = _first(args)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                  elements=x.numel if x else 0, dtype=dtype_key(x.dtype if x else None))


@register("_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax")
def _softmax(args, kwargs, out):
    # exp on ScalarE (with its running sum); row max and the normalizing multiply on VectorE.
    return _lane(Engine.SCALAR, args, out, overlapped=((Engine.VECTOR, 2.0),))


@register("_softmax_backward_data", "_log_softmax_backward_data")
def _softmax_backward(args, kwargs, out):
    return _lane(Engine.VECTOR, args, out, passes=3.0)  # dx = (g - sum(g * y)) * y


@register("native_layer_norm", "layer_norm", "native_group_norm", "group_norm",
          "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
          "_native_batch_norm_legit_functional", "batch_norm")
def _norm(args, kwargs, out):
    # statistics (one pass, bn_stats), then normalize and the affine transform (two passes).
    x = _first(args)
    read, written = _traffic(args, out)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                  elements=3 * (x.numel if x else 0), dtype=dtype_key(x.dtype if x else None))


@register("_fused_rms_norm", "rms_norm")
def _rms_norm(args, kwargs, out):
    x = _first(args)
    read, written = _traffic(args, out)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                  elements=2 * (x.numel if x else 0), dtype=dtype_key(x.dtype if x else None))


@register("native_layer_norm_backward", "native_group_norm_backward", "native_batch_norm_backward",
          "_fused_rms_norm_backward")
def _norm_backward(args, kwargs, out):
    x = _first(args)
    read, written = _traffic(args, out)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                  elements=5 * (x.numel if x else 0), dtype=dtype_key(x.dtype if x else None))


@register("_fused_adam", "_fused_adamw", "_fused_sgd")
def _fused_optimizer(args, kwargs, out):
    params = args[0]
    elements = _numel([params])
    read, written = _bytes(args), _bytes([params]) * 3  # param, exp_avg, exp_avg_sq updated
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written, elements=10 * elements,
                  dtype=dtype_key(params[0].dtype if params else None))


# --- GpSimd: gather, scatter, index, masks, iota, random numbers ---------------------------------

@register("embedding", "index_select", "gather", "take", "index", "masked_select",
          "nll_loss_forward", "nll_loss2d_forward", "take_along_dim")
def _gather(args, kwargs, out):
    """A gather reads only the rows it picks (and its indices), not the whole table."""
    # The first tensor is the table in every op registered here; skip it by position, not by
    # dtype: an integer table (token ids, index_select on a LongTensor) is not an index.
    indices = [t for t in list(iter_tensors(args))[1:] if not t.dtype.is_floating_point]
    gathered = _bytes(out)
    first = _first(out)
    return OpCost(Engine.GPSIMD, bytes_read=gathered + _bytes(indices), bytes_written=gathered,
                  elements=_numel(out), dtype=dtype_key(first.dtype if first else None))


@register("embedding_dense_backward", "scatter", "scatter_add", "scatter_reduce", "index_add",
          "index_put", "index_copy", "index_fill", "masked_scatter", "nll_loss_backward",
          "nll_loss2d_backward", "_index_put_impl")
def _scatter(args, kwargs, out):
    return _lane(Engine.GPSIMD, args, out)


@register("arange", "tril", "triu", "nonzero", "sort", "topk", "argsort", "unique",
          "_unique2", "one_hot", "bernoulli", "native_dropout", "native_dropout_backward",
          "dropout", "rand", "randn", "randint", "rand_like", "randn_like", "randint_like",
          "normal", "uniform", "multinomial", "randperm", "bucketize", "searchsorted",
          "embedding_renorm")
def _gpsimd(args, kwargs, out):
    return _lane(Engine.GPSIMD, args, out)


# --- DMA: copies, concatenation, materialized transposes and casts -------------------------------

@register("clone", "_to_copy", "cat", "stack", "contiguous", "constant_pad_nd", "repeat",
          "expand_copy", "permute_copy", "transpose_copy", "t_copy", "view_copy",
          "_unsafe_view_copy", "slice_copy", "select_copy", "narrow_copy", "split_copy",
          "split_with_sizes_copy", "unbind_copy", "slice_scatter", "select_scatter",
          "as_strided_scatter", "diagonal_scatter", "flip", "roll", "_to_dtype", "to",
          "lift_fresh_copy", "reflection_pad2d", "replication_pad2d", "pixel_shuffle")
def _dma(args, kwargs, out):
    read, written = _traffic(args, out)
    first = _first(out) or _first(args)
    return OpCost(Engine.DMA, bytes_read=read, bytes_written=written,
                  dtype=dtype_key(first.dtype if first else None))


@register("copy")
def _copy_into(args, kwargs, out):
    """copy_(dst, src) reads the source and writes the destination (a cast if dtypes differ)."""
    dst, src = args[0], args[1]
    return OpCost(Engine.DMA, bytes_read=src.nbytes, bytes_written=dst.nbytes,
                  dtype=dtype_key(dst.dtype))


# Ops that allocate without writing, or only relabel storage: free on the device.
FREE_OPS = frozenset({
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
    "_unsafe_view", "lift_fresh", "resolve_conj", "resolve_neg", "_reshape_alias", "set",
    "detach", "alias", "_local_scalar_dense", "item", "size", "stride", "numel", "dim",
    "is_same_size", "_has_compatible_shallow_copy_type", "record_stream", "_assert_async",
    "_assert_tensor_metadata", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "_propagate_xla_data", "_functional_assert_async", "copy_meta", "_fused_sdp_choice",
})
