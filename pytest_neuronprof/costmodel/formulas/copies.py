"""Copies, on DMA: clones, casts, concatenation, padding, materialized views and view gradients;
and the free ops, which cost nothing on the device (allocation without writing, relabelled
storage, host-side queries)."""

from __future__ import annotations

from typing import Any

from ...vocabulary import Engine
from ..opcost import OpCost, TensorMeta, dtype_key, first_tensor, nbytes, read_run_bytes, traffic
from .common import Family, aten, ops

FAMILY = Family()


# --- DMA: copies, concatenation, materialized transposes and casts -------------------------------

@FAMILY.cost(*ops(
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


@FAMILY.cost(aten.copy, aten.copy_)
def copy(self: TensorMeta, src: TensorMeta, *, outputs: list, **args: Any) -> OpCost:
    """copy_(dst, src) reads the source and writes the destination (a cast if dtypes differ)."""
    return OpCost(Engine.DMA, bytes_read=src.nbytes, bytes_written=self.nbytes,
                  dtype=dtype_key(self.dtype), read_run_bytes=read_run_bytes(src, self))


# --- free: allocation without writing, relabelled storage, host-side queries ---------------------

FAMILY.free(*ops(
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
    "_unsafe_view", "lift_fresh", "resolve_conj", "resolve_neg", "_reshape_alias", "set",
    "detach", "alias", "_local_scalar_dense", "item", "size", "stride", "numel", "dim",
    "is_same_size", "_has_compatible_shallow_copy_type", "record_stream", "_assert_async",
    "_assert_tensor_metadata", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
    "_propagate_xla_data", "_functional_assert_async", "_fused_sdp_choice"))


@FAMILY.cost(*ops("slice_backward", "select_backward", "diagonal_backward", "unfold_backward",
                  "masked_scatter_backward"))
def view_backward(*, outputs: list, **args: Any) -> OpCost:
    """The gradient of a view: a zero-filled tensor of the input's size with the gradient copied
    into the viewed part. Writes the whole output once, reads the gradient."""
    grad = first_tensor(args.values())
    return OpCost(Engine.DMA, bytes_read=grad.nbytes if grad else 0, bytes_written=nbytes(outputs),
                  dtype=dtype_key(grad.dtype if grad else None))


# DMA: more copies (the *_copy forms of views, padding, stacking, resizing copies).
FAMILY.cost(*ops(
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


# In-place restrides: the in-place forms of views change a tensor's shape and strides (its
# metadata) and move no data, so they cost what the views cost: nothing.
FAMILY.free(*ops("as_strided_", "squeeze_", "unsqueeze_", "transpose_", "t_", "swapdims_",
                 "swapaxes_", inplace=False))


FAMILY.free(*ops("resize", "resize_as", "_resize_output", "unsafe_split",
                 "unsafe_split_with_sizes", "lift", "_pin_memory", "is_pinned", "is_set_to",
                 "is_coalesced", "_nnz", "dense_dim", "_dimI", "_dimV", "sym_constrain_range",
                 "sym_constrain_range_for_size", "_functional_sym_constrain_range",
                 "_functional_sym_constrain_range_for_size", "_assert_scalar",
                 "_functional_assert_scalar", "_make_dep_token", "_print",
                 "_has_same_storage_numel", "q_scale", "q_zero_point", "qscheme"))
