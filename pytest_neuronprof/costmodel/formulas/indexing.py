"""Indexing, on GpSimd: gathers (embedding, index_select, index), scatters (index_put, scatter,
index_copy: costed by the slice they write), masks, sort and top-k, iota and random numbers."""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from ...vocabulary import Engine
from ..opcost import OpCost, TensorMeta, dtype_key, first_tensor, iter_tensors, nbytes, numel
from .common import CostFormula, Family, aten, ops, streaming

FAMILY = Family()


# --- GpSimd: gather, scatter, index, masks, iota, random numbers ---------------------------------

@FAMILY.cost(*ops("embedding", "index_select", "gather", "take", "index", "masked_select",
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


def _declare_scatters() -> None:
    """Scatters cost the slice they write: a one-token KV-cache write is one token's bytes."""
    for inplace in (False, True):
        for name, formula in _scatter_formulas(inplace).items():
            packet = getattr(aten, name + ("_" if inplace else ""), None)
            if packet is not None:
                formula.__qualname__ = f"scatter.{name}{'_' if inplace else ''}"
                FAMILY.cost(packet)(formula)


_declare_scatters()

FAMILY.cost(*ops(
    "embedding_dense_backward", "nll_loss_backward", "nll_loss2d_backward",
    "arange", "tril", "triu", "nonzero", "sort", "topk", "argsort", "_unique", "_unique2",
    "one_hot", "bernoulli", "native_dropout", "native_dropout_backward", "dropout", "rand",
    "randn", "randint", "rand_like", "randn_like", "randint_like", "normal", "uniform",
    "multinomial", "randperm", "bucketize", "searchsorted", "embedding_renorm",
))(streaming(Engine.GPSIMD))


# GpSimd: more random numbers, gathers and embedding bags.
FAMILY.cost(*ops(
    "random", "exponential", "cauchy", "log_normal", "geometric", "poisson", "binomial",
    "_standard_gamma", "_standard_gamma_grad", "_sample_dirichlet", "_dirichlet_grad",
    "normal_functional", "_fused_dropout", "_embedding_bag", "_embedding_bag_forward_only",
    "_embedding_bag_backward", "_embedding_bag_dense_backward",
    "_embedding_bag_per_sample_weights_backward", "tril_indices", "triu_indices",
    "nonzero_static",
))(streaming(Engine.GPSIMD))
FAMILY.cost(*ops("_unsafe_index", "_unsafe_masked_index", inplace=False))(gather)
