"""What a cost formula reads (TensorMeta: a tensor's shape and dtype) and what it returns
(OpCost: the work and traffic of one op call), with the small helpers formulas share."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch

from ..vocabulary import Engine


class TensorMeta:
    """What the cost model needs of a tensor: shape and dtype, no storage kept alive.

    For the ops whose cost depends on the layout (copies, matrix products), the capture also
    keeps ``strides`` (in elements) and, for a sparse COO tensor, ``nnz`` and ``sparse_dims``;
    elsewhere they are None and the tensor counts as dense and contiguous."""

    __slots__ = ("shape", "dtype", "strides", "nnz", "sparse_dims")

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype,
                 strides: tuple[int, ...] | None = None, nnz: int | None = None,
                 sparse_dims: int = 0) -> None:
        self.shape = shape
        self.dtype = dtype
        self.strides = strides
        self.nnz = nnz
        self.sparse_dims = sparse_dims

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes in memory: every element of a dense tensor; a sparse one's values and indices."""
        if self.nnz is not None:
            dense = math.prod(self.shape[self.sparse_dims:])
            return self.nnz * (dense * self.dtype.itemsize + self.sparse_dims * 8)
        return self.numel * self.dtype.itemsize

    @property
    def key(self) -> tuple:
        """Equal for TensorMetas that cost the same."""
        return (self.shape, self.dtype, self.strides, self.nnz, self.sparse_dims)

    def __repr__(self) -> str:
        layout = (f", strides={list(self.strides)}" if self.strides is not None else "") + \
            (f", nnz={self.nnz}" if self.nnz is not None else "")
        return f"TensorMeta({list(self.shape)}, {self.dtype}{layout})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorMeta) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)


@dataclass(frozen=True)
class OpCost:
    """Work and traffic of one op call.

    matmuls: (batch, m, k, n) products on TensorE, m x k times k x n.
    elements: element operations on the primary engine (VectorE, ScalarE or GpSimd).
    overlapped: work on other lane engines that runs alongside, as (engine, elements).
    kind: the TensorE kind whose efficiency applies ("matmul", "conv", "attention").
    costed: False when the model does not know the op and costed it by its bytes alone.
    read_run_bytes: for a copy from a strided tensor, the length in bytes of the contiguous runs
        its reads come in (one element for a transpose); 0 when the reads are contiguous.
    operands: tensors a lane op streams in per output element (a + b: 2); an engine whose
        data path takes a fixed number of input elements per cycle spends that many passes.
        A TensorE op's input tensors. With the outputs, the tensors its transfers are spread
        over (roofline.transfer_us: the size of each DMA descriptor).
    link_bytes, ranks, phases: a collective's bytes each rank sends over the links, the ranks
        of its group, and its phases (an all-reduce: a reduce-scatter and an all-gather, 2);
        the profile's runtime picks the algorithm, and so the steps, by the message size.
    collective: a collective's kind ("all_reduce", "all_gather", ..., "send", "recv",
        "barrier": formulas/collectives.py), whichever API issued it; "" elsewhere.
    array_products: where a NeuronCore kernel issues other products on TensorE than the op's
        logical ``matmuls`` (a flash attention's blocks and transposes), those; () elsewhere.
    taps: how many times the ``array_products`` run, each pass accumulating into the same
        PSUM tiles: a convolution's kernel taps (each tap's product contracts only the input
        channels, shifted windows of the same SBUF tensor); 1 elsewhere.
    lane_free: elements per partition of each lane-engine instruction where the op's tiling
        fixes it (a flash attention's key block); 0: the engine's ``free_max``.
    rows, row_len, row_kernel: the geometry of a row-wise op: how many independent rows it
        reduces, the elements in each, and which kind of kernel runs it: "softmax" and "norm"
        give each row a thread block or a warp on a GPU (few long rows leave SMs idle),
        "reduce" splits long rows over several blocks (PyTorch's reductions); 0 and "" elsewhere.
    channels: for a convolution, the input channels per group: the innermost, vectorized dim of
        the implicit GEMM's contraction (a GPU pads it to its vector width); 0 elsewhere.
    Only the GPU model (``roofline`` profiles with a ``[gpu]`` table) reads the last four.
    transposes: how many of the last ``array_products`` are partition/free transposes through
        the array (identity products: a flash attention's P^T), not the op's own arithmetic:
        what the activity counts as transpose FLOPs (activity.py); 0 elsewhere.
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
    read_run_bytes: int = 0
    operands: int = 1
    link_bytes: int = 0
    ranks: int = 0
    phases: int = 0
    collective: str = ""
    lane_free: int = 0
    array_products: tuple[tuple[int, int, int, int], ...] = ()
    taps: int = 1
    rows: int = 0
    row_len: int = 0
    row_kernel: str = ""
    channels: int = 0
    transposes: int = 0


# The kinds of collective (OpCost.collective) that move a tensor to or from one peer, once:
# not phases over a group.
POINT_TO_POINT = frozenset({"send", "recv", "send_recv"})


_DTYPE_KEYS = {
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float32: "float32",
}


def dtype_key(dtype: torch.dtype | None) -> str:
    """The rate-table key of a dtype: bfloat16, float16, float8, int8 or float32 (everything
    else; a complex dtype is its real parts')."""
    if dtype is None:
        return "float32"
    key = _DTYPE_KEYS.get(dtype)
    if key is None:
        if dtype.is_complex:
            return dtype_key(dtype.to_real())
        # one-byte floats run at the fp8 rate, one-byte integers at int8's (a profile without
        # one runs them at bfloat16's); everything else at fp32's
        if dtype.itemsize == 1 and dtype != torch.bool:
            key = "float8" if dtype.is_floating_point else "int8"
        else:
            key = "float32"
    return key


def real_lanes(dtype: torch.dtype | None) -> int:
    """Real numbers per element: 2 for a complex dtype (real and imaginary part), else 1."""
    return 2 if dtype is not None and dtype.is_complex else 1


def read_run_bytes(source: TensorMeta, destination: TensorMeta | None = None) -> int:
    """The contiguous runs (in bytes) a copy from ``source`` reads in, walking the
    destination in its memory order (row-major when its strides are not known); 0 when the
    reads are contiguous, or when the source's strides are not known."""
    strides = source.strides
    if strides is None or source.numel <= 1:
        return 0
    dims = [d for d in range(len(source.shape)) if source.shape[d] > 1]
    outer = destination.strides if destination is not None else None
    if outer is not None and len(outer) == len(source.shape):
        dims.sort(key=lambda d: -outer[d])
    run, expected = 1, 1
    for d in reversed(dims):  # innermost first: merge dims while the source stays contiguous
        if strides[d] != expected:
            break
        run *= source.shape[d]
        expected = run
    return 0 if run >= source.numel else run * source.dtype.itemsize


def iter_tensors(values: Iterable[Any]) -> Iterator[TensorMeta]:
    """TensorMetas in an argument list, one level of lists deep (TensorList, Tensor?[])."""
    for value in values:
        if type(value) is TensorMeta:
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if type(item) is TensorMeta:
                    yield item


def nbytes(values: Iterable[Any]) -> int:
    return sum(t.nbytes for t in iter_tensors(values))


def numel(values: Iterable[Any]) -> int:
    return sum(t.numel for t in iter_tensors(values))


def first_tensor(values: Iterable[Any]) -> TensorMeta | None:
    return next(iter_tensors(values), None)


def traffic(inputs: Iterable[Any], outputs: Iterable[Any]) -> tuple[int, int]:
    """(bytes read, bytes written): every input tensor read once, every output written once;
    an in-place op that returns nothing writes its first argument."""
    inputs = list(inputs)
    written = nbytes(outputs)
    if not written:
        first = first_tensor(inputs)
        written = first.nbytes if first is not None else 0
    return nbytes(inputs), written


def stream(engine: Engine, inputs: Iterable[Any], outputs: Iterable[Any], passes: float = 1.0,
           overlapped: tuple[tuple[Engine, float], ...] = (), costed: bool = True) -> OpCost:
    """An op that streams its output (or, in place, its first argument) through a lane engine
    ``passes`` times, with ``overlapped`` passes on other engines alongside."""
    inputs, outputs = list(inputs), list(outputs)
    read, written = traffic(inputs, outputs)
    first = first_tensor(inputs) or first_tensor(outputs)
    elements = (numel(outputs) or numel(inputs[:1])) * real_lanes(first.dtype if first else None)
    return OpCost(
        engine,
        bytes_read=read,
        bytes_written=written,
        elements=int(elements * passes),
        overlapped=tuple((e, int(elements * p)) for e, p in overlapped),
        dtype=dtype_key(first.dtype if first else None),
        costed=costed,
        operands=max(1, sum(1 for t in iter_tensors(inputs) if t.numel > 1)),
    )
