"""What the fit searches: the fitted parameters (each with its prior, bounds and meaning), the
numbers the script sets without fitting them, and the two models (the GPU model and the plain
roofline before it) as sets of those."""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence


class Param:
    """One fitted number: where it lives in the profile, the starting point of every fit (a
    prior from the README or the hardware's documentation, not the profile's current value: runs
    do not depend on earlier --write runs), its bounds, and how it is searched (log: a rate or a
    fraction, searched in log space; lin: a fixed cost that may be 0)."""

    def __init__(self, key: str, start: float, lo: float, hi: float, scale: str, decimals: int,
                 meaning: str) -> None:
        self.key, self.start, self.lo, self.hi = key, start, lo, hi
        self.scale, self.decimals, self.meaning = scale, decimals, meaning

    def to_u(self, value: float) -> float:
        return math.log(value) if self.scale == "log" else value

    def from_u(self, u: float) -> float:
        value = math.exp(u) if self.scale == "log" else u
        return min(self.hi, max(self.lo, value))

    def step(self) -> float:
        return 0.4 if self.scale == "log" else 0.5


PARAMS = [
    Param("launch_us", 0.8, 0.2, 3.0, "log", 2,
          "the shortest kernel (README: 0.8-1 us)"),
    Param("hbm_gbps", 4300.0, 2000.0, 6000.0, "log", 0,
          "HBM bandwidth, bytes read + written (README: a copy moved about 4.3 TB/s)"),
    Param("gpu.l2_gbps", 8000.0, 3000.0, 30000.0, "log", 0,
          "L2 bandwidth for an op whose bytes fit in the 50 MiB L2"),
    Param("strided_granule_bytes", 32.0, 4.0, 256.0, "log", 1,
          "L2 bandwidth a scattered element read costs (a 32-byte sector)"),
    Param("tensor.fixed_us", 1.0, 0.0, 20.0, "lin", 2,
          "GEMM/conv/attention kernel latency beyond launch_us (prologue, epilogue)"),
    Param("tensor.efficiency.matmul", 1.0, 0.3, 1.1, "log", 3,
          "an SM's tensor-core rate in a GEMM main loop, as a share of ceiling / 132"),
    Param("tensor.efficiency.conv", 0.3, 0.02, 1.1, "log", 3,
          "the same for cuDNN's implicit-GEMM convolutions"),
    Param("tensor.efficiency.attention", 0.8, 0.02, 1.1, "log", 3,
          "the same for fused (flash) attention"),
    Param("gpu.feed_gbps_per_sm", 100.0, 10.0, 1000.0, "log", 1,
          "operand bandwidth of one SM loading GEMM tiles (L2 to shared memory)"),
    Param("gpu.kstep_us", 0.15, 0.0, 2.0, "lin", 3,
          "latency floor of one GEMM main-loop step"),
    Param("gpu.attention_cta_us", 2.0, 0.0, 10.0, "lin", 2,
          "a flash-attention CTA's time outside its KV steps (load Q, normalize, store O)"),
    Param("gpu.stream_fraction", 0.85, 0.3, 1.0, "log", 3,
          "share of the HBM bandwidth a GEMM or a reduction reaches streaming its input"),
    Param("scalar.efficiency", 0.1, 0.002, 1.0, "log", 4,
          "activations and transcendentals: the same"),
    Param("gpu.row_elements_per_us", 3000.0, 100.0, 100000.0, "log", 0,
          "elements per us one SM gets through in a row-wise kernel (softmax, norm), rows in L2"),
    Param("gpu.row_hbm_slowdown", 1.5, 1.0, 4.0, "log", 3,
          "how much slower, rows from HBM (latency-bound: HBM answers later than L2)"),
    Param("gpu.reduce_us", 1.0, 0.0, 10.0, "lin", 2,
          "latency of a reduction kernel's tree (blocks' partial results combined)"),
]
# The plain roofline of the profile before the [gpu] table (``--plain``): its ten parameters
# (launch, HBM, tensor latency and efficiencies, lane-engine rates and fixed costs) and the
# strided granule, fitted and cross-validated the same way, for the before/after comparison.
PLAIN_PARAMS = [  # as benchmarks/fit_h200.py fitted them before the [gpu] table
    Param("launch_us", 0.8, 0.2, 3.0, "log", 2, "per-kernel launch"),
    Param("hbm_gbps", 4300.0, 2000.0, 6000.0, "log", 0, "HBM bandwidth"),
    Param("tensor.fixed_us", 1.0, 0.0, 20.0, "lin", 2, "GEMM kernel latency beyond launch"),
    Param("tensor.efficiency.matmul", 1.0, 0.3, 1.0, "log", 3, "of the measured ceilings"),
    Param("tensor.efficiency.conv", 0.3, 0.005, 1.0, "log", 3, "convolution"),
    Param("tensor.efficiency.attention", 0.5, 0.02, 1.0, "log", 3, "fused attention"),
    Param("vector.efficiency", 0.1, 0.002, 1.0, "log", 4, "of 132 SMs x 128 lanes x 1.98 GHz"),
    Param("scalar.efficiency", 0.1, 0.002, 1.0, "log", 4, "of 132 SMs x 128 lanes x 1.98 GHz"),
    Param("vector.fixed_us", 0.0, 0.0, 10.0, "lin", 2, "kernel latency beyond launch"),
    Param("scalar.fixed_us", 0.0, 0.0, 10.0, "lin", 2, "kernel latency beyond launch"),
]
# GpSimd's work (gathers, index math, random numbers) has no compute-bound row in the data (the
# embedding rows are memory-bound at any rate above ~1e6 elements/us): it shares ScalarE's
# numbers, which keep the gathers memory-bound; VectorE's lower rate would not.
TIED = {"gpsimd.efficiency": "scalar.efficiency", "gpsimd.fixed_us": "scalar.fixed_us"}

# Numbers the script sets without fitting them. Tensor-core ceilings: benchmarks/data/README.md
# (bf16/fp16 790, fp32 51 TFLOP/s measured; fp8 assumed 2x bf16). "conv.float32": cuDNN runs
# float32 convolutions on TF32 tensor cores (torch.backends.cudnn.allow_tf32 is True by default,
# unlike torch.backends.cuda.matmul.allow_tf32): H200 TF32 is 494.7 TFLOP/s dense, scaled by the
# bf16 fraction measured (790 of 989.4) = 395. The fp32 conv row of the data ran 94 TFLOP/s,
# above the 51 TFLOP/s FP32 ceiling, so it cannot have run in FP32.
CEILINGS = {"bfloat16": 790.0, "float16": 790.0, "float8": 1580.0, "float32": 51.0,
            "conv.float32": 395.0}
SET = {
    "dma_fixed_us": 0.0,  # the copy rows take launch + bytes / bandwidth, nothing more
    "vector.fixed_us": 0.0,  # the GPU model: a kernel's latency is launch_us (+ reduce_us)
    "scalar.fixed_us": 0.0,
    # elementwise arithmetic never binds on an H200 (memory does): an eager kernel's few
    # instructions per element; reductions, softmax and norms have their own terms
    "vector.efficiency": 0.25,
    # a round trip of a row-wise kernel's loop: an L2 hit (a few hundred SM cycles) and the
    # dependent arithmetic of the elements it brings, at ~1.75 GHz; no row of the data is bound
    # by it (every row-wise row keeps its SMs busy with rows or threads)
    "gpu.row_step_us": 0.25,
    "gpu.sms": 132,  # NVIDIA H200 SXM: 132 SMs
    "gpu.l2_mib": 50.0,  # NVIDIA H200: 50 MB L2
    "gpu.gemm_k_tile_bytes": 128,  # Hopper TMA/wgmma GEMM kernels: K tile 64 x 16-bit
    "gpu.simt_k_tile_bytes": 32,  # CUDA-core SGEMM kernels (e.g. 128x128x8): K tile 8 x fp32
    "gpu.conv_k_tile_bytes": 64,  # implicit-GEMM convolution: K tile 32 x 16-bit channels
}
PLAIN_SET = {"dma_fixed_us": 0.0, "strided_granule_bytes": 0.0}


def _set(data: dict, key: str, value: float) -> None:
    *path, last = key.split(".")
    table = data
    for part in path:
        table = table.setdefault(part, {})
    table[last] = value


def _get(data: dict, key: str) -> float | None:
    table: Any = data
    for part in key.split("."):
        if not isinstance(table, dict) or part not in table:
            return None
        table = table[part]
    return float(table)


class Model:
    """A parameter set to fit: the GPU model (default) or the plain roofline (``--plain``)."""

    def __init__(self, plain: bool) -> None:
        self.plain = plain
        self.params = PLAIN_PARAMS if plain else PARAMS
        self.set = PLAIN_SET if plain else SET
        self.name = "plain roofline (before)" if plain else "GPU model"

    def base(self, data: dict) -> dict:
        """The profile data with the numbers the script sets (ceilings, geometry)."""
        data = copy.deepcopy(data)
        if self.plain:
            data.pop("gpu", None)
        data.setdefault("tensor", {}).setdefault("tflops", {}).update(CEILINGS)
        for key, value in self.set.items():
            _set(data, key, value)
        return data

    def profile_data(self, base: dict, values: Sequence[float]) -> dict:
        """base with the fitted values and those tied to them."""
        data = copy.deepcopy(base)
        named = {p.key: v for p, v in zip(self.params, values)}
        for key, value in named.items():
            _set(data, key, value)
        for key, source in TIED.items():
            _set(data, key, named.get(source, _get(data, source)))
        return data

    def rounded(self, values: Sequence[float]) -> list[float]:
        return [round(v, p.decimals) for p, v in zip(self.params, values)]

    def start(self) -> list[float]:
        return [p.start for p in self.params]
