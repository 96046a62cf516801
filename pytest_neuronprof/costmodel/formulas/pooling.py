"""Pooling, resampling and FFT: ops that visit a window (or a whole signal) per output element.
Max and average pooling and their gradients (VectorE), upsampling, grid sampling and im2col as
gathers of a few taps per output (GpSimd), and FFTs as radix-2 butterflies (VectorE)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from ...vocabulary import Engine
from ..opcost import OpCost, TensorMeta, dtype_key, first_tensor, numel, traffic
from .common import CostFormula, Family, ops

FAMILY = Family()


def _window(kernel_size: Any) -> int:
    return math.prod(kernel_size) if isinstance(kernel_size, (list, tuple)) and kernel_size \
        else int(kernel_size or 1)


@FAMILY.cost(*ops("max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool2d",
                  "avg_pool3d", "fractional_max_pool2d", "fractional_max_pool3d"))
def pool(self: TensorMeta, kernel_size: Any, *, outputs: list, **args: Any) -> OpCost:
    """A pooling window per output element, on VectorE: each output reads its window."""
    out = first_tensor(outputs)
    read, written = traffic([self], outputs)
    return OpCost(Engine.VECTOR, bytes_read=read, bytes_written=written,
                  elements=(out.numel if out else 0) * _window(kernel_size), dtype=dtype_key(self.dtype))


@FAMILY.cost(*ops("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_max_pool2d",
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
FAMILY.cost(*ops("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
                 "_upsample_nearest_exact1d", "_upsample_nearest_exact2d",
                 "_upsample_nearest_exact3d", "upsample_nearest1d_backward",
                 "upsample_nearest2d_backward", "upsample_nearest3d_backward",
                 "_upsample_nearest_exact1d_backward", "_upsample_nearest_exact2d_backward",
                 "_upsample_nearest_exact3d_backward", "im2col", "col2im", "channel_shuffle",
                 "pixel_unshuffle"))(_resampling(1))
FAMILY.cost(*ops("upsample_linear1d", "upsample_linear1d_backward"))(_resampling(2))
FAMILY.cost(*ops("upsample_bilinear2d", "upsample_bilinear2d_backward", "_upsample_bilinear2d_aa",
                 "_upsample_bilinear2d_aa_backward", "grid_sampler_2d",
                 "grid_sampler_2d_backward", "affine_grid_generator"))(_resampling(4))
FAMILY.cost(*ops("upsample_trilinear3d", "upsample_trilinear3d_backward", "grid_sampler_3d",
                 "grid_sampler_3d_backward"))(_resampling(8))
FAMILY.cost(*ops("upsample_bicubic2d", "upsample_bicubic2d_backward", "_upsample_bicubic2d_aa",
                 "_upsample_bicubic2d_aa_backward", "_upsample_lanczos2d_aa",
                 "_upsample_lanczos2d_aa_backward"))(_resampling(16))


@FAMILY.cost(*ops("_fft_r2c", "_fft_c2r", "_fft_c2c"))
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
