"""Matrix products and convolutions, on TensorE: mm, addmm, bmm and their kin, linear, the
quantized, scaled and grouped (mixture-of-experts) products, convolutions as the implicit GEMM
TensorE runs, and products with a sparse operand (those on VectorE). ``matmul_cost``, the cost
of a list of products, is shared with ``attention``."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from ...vocabulary import Engine
from ..opcost import OpCost, TensorMeta, dtype_key, first_tensor, iter_tensors, nbytes, traffic
from .common import Family, aten, ops

FAMILY = Family()


def matmul_cost(products: Sequence[tuple[int, int, int, int]], inputs: Sequence[Any],
                outputs: Sequence[Any], kind: str = "matmul",
                overlapped: tuple[tuple[Engine, int], ...] = (), lane_free: int = 0) -> OpCost:
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
        lane_free=lane_free,
        operands=max(1, sum(1 for t in iter_tensors(inputs) if t.numel > 1)),
        bytes_read=read,
        bytes_written=written,
        matmuls=tuple(products),
        overlapped=overlapped,
        dtype=dtype_key(first.dtype if first else None),
        kind=kind,
    )


@FAMILY.cost(aten.mm)
def mm(self: TensorMeta, mat2: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    return matmul_cost([(1, self.shape[0], self.shape[1], mat2.shape[1])], [self, mat2], outputs)


@FAMILY.cost(*ops("addmm"))
def addmm(self: TensorMeta, mat1: TensorMeta, mat2: TensorMeta, *, outputs: list,
          **args: Any) -> OpCost:
    return matmul_cost([(1, mat1.shape[0], mat1.shape[1], mat2.shape[1])], [self, mat1, mat2],
                       outputs)


@FAMILY.cost(aten.bmm)
def bmm(self: TensorMeta, mat2: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    return matmul_cost([(self.shape[0], self.shape[1], self.shape[2], mat2.shape[2])],
                       [self, mat2], outputs)


@FAMILY.cost(*ops("baddbmm"))
def baddbmm(self: TensorMeta, batch1: TensorMeta, batch2: TensorMeta, *, outputs: list,
            **args: Any) -> OpCost:
    return matmul_cost([(batch1.shape[0], batch1.shape[1], batch1.shape[2], batch2.shape[2])],
                       [self, batch1, batch2], outputs)


@FAMILY.cost(aten.linear)
def linear(input: TensorMeta, weight: TensorMeta, bias: TensorMeta | None = None, *,
           outputs: list, **args: Any) -> OpCost:
    # Only reached if linear arrives undecomposed; costs the same as its t + addmm form.
    rows = math.prod(input.shape[:-1])
    return matmul_cost([(1, rows, input.shape[-1], weight.shape[0])], [input, weight, bias],
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


def _per_tap(product: tuple[int, int, int, int], window: int,
             backward: bool = False) -> tuple[tuple[int, int, int, int], ...]:
    """A convolution's products as TensorE runs them: one product per kernel tap, each
    contracting only the input channels (on the partitions, a shifted window of the same SBUF
    tensor), the taps accumulating in PSUM (the NKI architecture guide: a contraction over 128
    "invoke[s] multiple nc_matmul to accumulate into the same output buffer in PSUM"). So a
    convolution of few input channels fills a sliver of the array: a 3-channel stem uses 3 of
    its 128 rows. (The NKI library's conv kernels stack taps on the partitions to avoid that;
    nothing says neuronx-cc does.) ``backward``: the data gradient, contracting the output
    channels per tap, and the weight gradient, contracting the positions per tap."""
    g, m, k, n = product  # groups, out-channels per group, in-channels x window, positions
    channels = max(1, k // window)
    if backward:
        return ((g, channels, m, n), (g, m, n, channels))
    return ((g, m, channels, n),)


@FAMILY.cost(aten.convolution, aten._convolution, aten.conv1d, aten.conv2d, aten.conv3d)
def convolution(input: TensorMeta, weight: TensorMeta, bias: TensorMeta | None = None, *,
                outputs: list, transposed: bool = False, groups: int = 1, **args: Any) -> OpCost:
    product = _conv_product(input, weight, outputs[0], bool(transposed), int(groups))
    cost = matmul_cost([product], [input, weight, bias], outputs, kind="conv")
    cost = dataclasses.replace(cost, channels=_conv_channels(input, int(groups)),
                               elements=_grouped_macs(product, int(groups)))
    if transposed:  # its GEMM already contracts the input channels alone, tap by tap
        return cost
    window = math.prod(weight.shape[2:])
    return dataclasses.replace(cost, array_products=_per_tap(product, window), taps=window)


def _grouped_macs(product: tuple[int, int, int, int], groups: int) -> int:
    """A grouped convolution's multiply-accumulates, for its VectorE lowering: a depthwise or
    narrow grouped convolution fills a sliver of the 128 x 128 array (its per-group contraction
    and output channels), so the compiler may run it as per-tap multiply-accumulates on VectorE
    instead; the cost model takes the cheaper (roofline.engine_busy). 0 for an ungrouped one."""
    if groups <= 1:
        return 0
    g, m, k, n = product
    return g * m * k * n


def _conv_channels(x: TensorMeta, groups: int) -> int:
    """Input channels per group: the innermost dim of the implicit GEMM's contraction."""
    return x.shape[1] // max(1, groups) if len(x.shape) > 1 else 1


@FAMILY.cost(aten.convolution_backward)
def convolution_backward(grad_output: TensorMeta, input: TensorMeta, weight: TensorMeta, *,
                         transposed: bool, groups: int, output_mask: Sequence[bool],
                         outputs: list, **args: Any) -> OpCost:
    product = _conv_product(input, weight, grad_output, bool(transposed), int(groups))
    count = int(bool(output_mask[0])) + int(bool(output_mask[1]))  # grad_input, grad_weight
    cost = matmul_cost([product] * count, [grad_output, input, weight], outputs, kind="conv")
    cost = dataclasses.replace(cost, channels=_conv_channels(input, int(groups)))
    if transposed or not count:
        return cost
    window = math.prod(weight.shape[2:])
    data, weights = _per_tap(product, window, backward=True)
    chosen = [p for p, wanted in ((data, output_mask[0]), (weights, output_mask[1])) if wanted]
    return dataclasses.replace(cost, array_products=tuple(chosen), taps=window)


# --- sparse operands ------------------------------------------------------------------------------

def _sparse_product(sparse: TensorMeta, products: Sequence[tuple[int, int, int, int]],
                    inputs: Sequence[Any], outputs: Sequence[Any]) -> OpCost:
    """A product with a sparse COO operand: each stored element multiplies one row (or column)
    of the dense operand, gathered by index, on VectorE; nothing runs on TensorE. Reads the
    sparse values and indices and only the dense rows they pick, writes the output."""
    g, m, k, n = products[0]
    nnz = sparse.nnz or 0  # a sparse COO operand always has it
    dense_side = n if sparse.shape[-1] == k else m  # sparse x dense: output columns; else rows
    others = [t for t in iter_tensors(inputs) if t is not sparse]
    dense = max(others, key=lambda t: (t.numel, len(t.shape)), default=None)
    read = nbytes([t for t in others if t is not dense]) + sparse.nbytes
    if dense is not None:
        read += min(dense.nbytes, nnz * dense_side * dense.dtype.itemsize)
    return OpCost(Engine.VECTOR, flops=2 * nnz * dense_side, bytes_read=read,
                  bytes_written=nbytes(outputs), elements=nnz * dense_side,
                  dtype=dtype_key(sparse.dtype))


@FAMILY.cost(*ops("_sparse_addmm", "sspaddmm"))
def sparse_addmm(self: TensorMeta, mat1: TensorMeta, mat2: TensorMeta, *, outputs: list,
                 **args: Any) -> OpCost:
    return matmul_cost([(1, mat1.shape[0], mat1.shape[1], mat2.shape[-1])], [self, mat1, mat2],
                       outputs)


@FAMILY.cost(*ops("_sparse_mm", "hspmm", inplace=False))
def sparse_mm(*, outputs: list, **args: Any) -> OpCost:
    a, b = list(iter_tensors(args.values()))[:2]
    return matmul_cost([(1, a.shape[0], a.shape[1], b.shape[-1])], [a, b], outputs)


# TensorE: more matrix products.
@FAMILY.cost(*ops("addmv", "mv"))
def matrix_vector(*, outputs: list, **args: Any) -> OpCost:
    mat = args["mat"] if "mat" in args else args["self"]  # addmv(self, mat, vec), mv(self, vec)
    return matmul_cost([(1, mat.shape[0], mat.shape[1], 1)], list(args.values()), outputs)


@FAMILY.cost(*ops("addr"))
def outer(self: TensorMeta, vec1: TensorMeta, vec2: TensorMeta, *, outputs: list,
          **args: Any) -> OpCost:
    return matmul_cost([(1, vec1.shape[0], 1, vec2.shape[0])], [self, vec1, vec2], outputs)


@FAMILY.cost(*ops("addbmm"))
def addbmm(self: TensorMeta, batch1: TensorMeta, batch2: TensorMeta, *, outputs: list,
           **args: Any) -> OpCost:
    return matmul_cost([(batch1.shape[0], batch1.shape[1], batch1.shape[2], batch2.shape[2])],
                       [self, batch1, batch2], outputs)


@FAMILY.cost(aten._int_mm, aten._scaled_mm, aten._weight_int8pack_mm,
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
    return matmul_cost([(1, rows, a.shape[-1], cols)], tensors, outputs)


@FAMILY.cost(aten._grouped_mm, *ops("_scaled_grouped_mm", "_scaled_grouped_mm_v2", "_scaled_mm_v2"))
def grouped_mm(self: TensorMeta, mat2: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    """Mixture-of-experts products: the tokens of every group through their expert's matrix,
    in all one product of every token's row (self is 2-D) with one expert's K x N."""
    rows = self.numel // max(1, self.shape[-1])
    cols = mat2.shape[-1]
    return matmul_cost([(1, rows, self.shape[-1], cols)], [self, mat2, *args.values()], outputs)


@FAMILY.cost(*ops("slow_conv_dilated2d", "slow_conv_dilated3d", "_slow_conv2d_forward",
                  "slow_conv3d_forward", "_conv_depthwise2d", "conv_depthwise3d",
                  "slow_conv_transpose2d", "slow_conv_transpose3d", "convolution_overrideable"))
def native_convolution(*, outputs: list, **args: Any) -> OpCost:
    """The device-specific convolution kernels, costed as ``convolution``."""
    x = args["input"] if "input" in args else args["self"]
    weight = args["weight"]
    transposed = bool(args.get("transposed", False))
    groups = args.get("groups")
    if groups is None:  # depthwise kernels: one group per input channel
        groups = x.shape[1] if weight.shape[1] == 1 and x.shape[1] != 1 else 1
    return convolution(input=x, weight=weight, bias=args.get("bias"), outputs=outputs,
                       transposed=transposed, groups=groups)
