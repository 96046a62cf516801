"""Pointwise ops, reductions and norms, on the lane engines: activations and transcendentals
(ScalarE), elementwise arithmetic, comparisons, fills and losses (VectorE), reductions and
scans, softmax, layer / group / batch / RMS norms and the fused optimizer steps."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ...vocabulary import Engine
from ..opcost import OpCost, TensorMeta, dtype_key, first_tensor, nbytes, numel, traffic
from .common import CostFormula, Family, aten, ops, streaming

FAMILY = Family()


# ScalarE: activations and transcendentals.
FAMILY.cost(*ops(
    "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "exp2", "expm1", "log", "log2", "log1p",
    "sqrt", "rsqrt", "reciprocal", "pow", "erf", "erfc", "erfinv", "softplus", "elu", "selu",
    "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "mish", "sin", "cos", "tan",
    "atan", "asin", "acos", "sinh", "cosh", "logit", "prelu", "glu",
    "gelu_backward", "silu_backward", "elu_backward", "softplus_backward", "mish_backward",
    "hardswish_backward", "leaky_relu_backward", "hardtanh_backward", "log_sigmoid_forward",
    "log_sigmoid_backward", "glu_backward",
))(streaming(Engine.SCALAR))

# VectorE: elementwise arithmetic, comparisons, fills, simple losses, scans.
FAMILY.cost(*ops(
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
))(streaming(Engine.VECTOR))


@FAMILY.cost(*ops(
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
                  rows=rows if reduces else 0, row_len=x.numel // rows if reduces and x is not None else 0,
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
    base = streaming(engine, passes, overlapped)

    def formula(*, outputs: list, **args: Any) -> OpCost:
        cost = base(outputs=outputs, **args)
        rows, row_len = _last_dim_rows(first_tensor(args.values()), args.get("dim"))
        if not rows:
            return cost
        return dataclasses.replace(cost, rows=rows, row_len=row_len, row_kernel="softmax")

    formula.__qualname__ = f"softmax({engine.value}, passes={passes:g})"
    return formula


# exp on ScalarE (with its running sum); row max and the normalizing multiply on VectorE.
FAMILY.cost(*ops("_softmax", "_log_softmax", "_safe_softmax", "softmax", "log_softmax"))(
    _softmax_formula(1.0, ((Engine.VECTOR, 2.0),), Engine.SCALAR))
# dx = (g - sum(g * y)) * y
FAMILY.cost(*ops("_softmax_backward_data", "_log_softmax_backward_data"))(
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
FAMILY.cost(*ops(
    "native_layer_norm", "layer_norm", "native_group_norm", "group_norm", "native_batch_norm",
    "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional", "batch_norm"))(_passes_over_input(3))
FAMILY.cost(*ops("_fused_rms_norm", "rms_norm"))(_passes_over_input(2))
FAMILY.cost(*ops("native_layer_norm_backward", "native_group_norm_backward",
                 "native_batch_norm_backward", "_fused_rms_norm_backward"))(_passes_over_input(5))


@FAMILY.cost(*ops("_fused_adam", "_fused_adamw", "_fused_sgd"))
def fused_optimizer(self: list, *, outputs: list, **args: Any) -> OpCost:
    """One fused Adam(W) step per element, as a NeuronCore kernel issues it: four two-input
    VectorE instructions (the moving averages m and v, r = m / denominator, the parameter's
    update with its decay folded into the scale) and two ScalarE activations alongside (g^2,
    and the denominator sqrt(v * c) + eps with its scale and bias)."""
    elements = numel([self])
    read = nbytes([self, *args.values()])
    written = nbytes([self]) * 3  # param, exp_avg, exp_avg_sq updated
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written, elements=4 * elements,
                  operands=2, overlapped=((Engine.SCALAR, 2 * elements),),
                  dtype=dtype_key(self[0].dtype if self else None))


# ScalarE: more transcendentals and activations.
FAMILY.cost(*ops(
    "atan2", "acosh", "asinh", "atanh", "log10", "lgamma", "digamma", "polygamma", "mvlgamma",
    "i0", "igamma", "igammac", "sinc", "logaddexp", "logaddexp2", "hypot", "xlogy",
    "logit_backward", "hardsigmoid_backward", "softshrink", "softshrink_backward", "hardshrink",
    "hardshrink_backward", "rrelu_with_noise", "rrelu_with_noise_backward", "_prelu_kernel",
    "_prelu_kernel_backward", "_masked_softmax", "_masked_softmax_backward",
))(streaming(Engine.SCALAR))

# VectorE: more elementwise arithmetic, comparisons, fills and losses.
FAMILY.cost(*ops(
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
))(streaming(Engine.VECTOR))

# Reductions and scans over their whole input.
FAMILY.cost(*ops(
    "nansum", "median", "nanmedian", "mode", "kthvalue", "_aminmax", "dist", "trace", "histc",
    "bincount", "native_norm", "cummax", "cummin", "logcumsumexp", "_logcumsumexp",
    "_cummax_helper", "_cummin_helper", "unique_consecutive", "unique_dim",
    "unique_dim_consecutive", "_is_all_true", "_is_any_true", "allclose",
))(reduction)


@FAMILY.cost(aten.isin)
def isin(elements: Any, test_elements: Any, *, outputs: list, **args: Any) -> OpCost:
    """Membership by sorting the test elements once and a binary search per element."""
    n = elements.numel if type(elements) is TensorMeta else 1
    m = test_elements.numel if type(test_elements) is TensorMeta else 1
    steps = max(1, math.ceil(math.log2(m + 1)))  # of the sort and of each search
    read, written = traffic([elements, test_elements], outputs)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written, elements=(m + n) * steps,
                  dtype=dtype_key(getattr(elements, "dtype", None)))
