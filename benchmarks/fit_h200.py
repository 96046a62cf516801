"""Fit the ``h200`` hardware profile to per-op device times measured on an NVIDIA H200, and say
how well it predicts shapes it was not fitted on.

Run by hand (about 4 minutes on 2 cores; ``--quick`` skips the cross-validations)::

    python benchmarks/fit_h200.py            # fit, print the table, the parameters and the errors
    python benchmarks/fit_h200.py --write    # ... and rewrite costmodel/hardware/h200.toml
    python benchmarks/fit_h200.py --plain    # the same fit and errors for the plain roofline and
                                             # its ten parameters (the model before the [gpu]
                                             # table), for comparison
    python benchmarks/fit_h200.py --schemes extremes,bands   # only these cross-validations

Data: ``benchmarks/data/h200_calibration.csv`` (see ``benchmarks/data/README.md``): one row per op
call, ``op, shape, dtype, device_us``. For every row the script builds the call the README
describes on ``meta`` tensors, runs it under ``NeuronProfiler(NeuronConfig(hardware="h200"))``
(inference mode, so only the forward op runs) and takes the sum of the device time of the
recorded ATen ops as the prediction. The captured OpCosts are kept, so candidate parameter sets
are evaluated with ``device_time(cost, profile)`` on ``parse_profile(dict)`` instead of re-running
the ops; the script checks that this gives the profiler's own numbers for the bundled profile.

Model (``costmodel/roofline.py``, ``gpu_time``): launch + serial stages + max(work, memory), with
the GPU's geometry: GEMM and convolution tiles in waves over 132 SMs (the library's fastest tile
and split-K), cuDNN's channel padding and NCHW transposes, flash-attention CTAs, row-wise kernels
with a block per row, reductions, the L2 cache for working sets that fit, strided reads in whole
sectors. The parameters (PARAMS)
each have a physical meaning; the tensor-core ceilings, the SM count, the L2 size and the kernels'
K tiles are set, not fitted (SET). The fit minimises the mean absolute log error (smoothed within
2 %, so that rows the model cannot describe pull by their sign, not their size) with deterministic
coordinate descent (grid + golden section) and Nelder-Mead, in pure Python.

Errors: median |predicted / measured - 1| and the share of rows within 2x, in sample (fit on all
rows) and cross-validated, each row predicted by a fit that did not see it:

* k-fold: 5 folds dealt out within each op (small and large shapes in every fold), as before;
* extremes: for each op, its smallest and, in a second fit, its largest shape held out (an op
  with one row is held out whole): extrapolation in size, the honest figure for new shapes;
* size bands: each op's rows in three bands by size; each band held out in turn;
* leave one class out: every op of a class (GEMMs, convolutions, elementwise, copies, the
  transposing copy, softmax, sum, layer_norm, embedding, attention) held out at once: a stress
  test of what the other classes say about it.

It also prints the predicted ratio of an MLP forward (x[4096, 1024] bf16 -> Linear(1024, H) ->
GELU -> Linear(H, 1024)) at odd hidden sizes to H = 128: tile and wave quantization.
"""

from __future__ import annotations

import argparse
import copy
import csv
import math
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_neuronprof import NeuronConfig, NeuronProfiler  # noqa: E402
from pytest_neuronprof.costmodel.opcost import OpCost  # noqa: E402
from pytest_neuronprof.costmodel.registry import op_cost  # noqa: E402
from pytest_neuronprof.costmodel.profiles import HardwareProfile, load_hardware, parse_profile  # noqa: E402
from pytest_neuronprof.costmodel.roofline import device_time  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

PROFILE_PATH = ROOT / "pytest_neuronprof" / "costmodel" / "hardware" / "h200.toml"
DATA = ROOT / "benchmarks" / "data" / "h200_calibration.csv"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
SCRIPT = "benchmarks/fit_h200.py"


# --- the measured rows and their calls ----------------------------------------------------------

class Row:
    def __init__(self, op: str, shape: str, dtype: str, measured_us: float) -> None:
        self.op, self.shape, self.dtype, self.measured_us = op, shape, dtype, measured_us
        self.costs: list[OpCost] = []
        self.ops: list[str] = []
        self.path = ""  # how the call was captured (only SDPA has two ways)

    @property
    def label(self) -> str:
        return f"{self.op} {self.shape} {self.dtype}"


def load_rows(path: Path) -> list[Row]:
    with path.open(newline="") as handle:
        return [Row(r["op"], r["shape"], r["dtype"], float(r["device_us"]))
                for r in csv.DictReader(handle)]


def _ints(shape: str) -> list[int]:
    return [int(v) for v in re.findall(r"\d+", shape)]


def _meta(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(*shape, dtype=dtype, device="meta")


_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu, "exp": torch.exp, "gelu": F.gelu, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
}


def build_call(op: str, shape: str, dtype: torch.dtype) -> Callable[[], Any]:
    """The call of benchmarks/data/README.md for one row, on meta tensors (SDPA: see capture_sdpa)."""
    n = _ints(shape)
    if op == "mm":
        m, k, cols = n
        a, b = _meta(m, k, dtype=dtype), _meta(k, cols, dtype=dtype)
        return lambda: torch.mm(a, b)
    if op == "bmm":
        g, m, k, cols = n
        a, b = _meta(g, m, k, dtype=dtype), _meta(g, k, cols, dtype=dtype)
        return lambda: torch.bmm(a, b)
    if op == "linear":
        rows, fan_in, fan_out = n
        x, w, bias = _meta(rows, fan_in, dtype=dtype), _meta(fan_out, fan_in, dtype=dtype), _meta(fan_out, dtype=dtype)
        return lambda: F.linear(x, w, bias)
    if op == "conv2d":
        batch, cin, h, w_, cout, r, stride = n
        x, w = _meta(batch, cin, h, w_, dtype=dtype), _meta(cout, cin, r, r, dtype=dtype)
        return lambda: F.conv2d(x, w, stride=stride, padding=1 if r == 3 else 3)
    if op in ("add", "mul"):
        x, y = _meta(n[0], dtype=dtype), _meta(n[0], dtype=dtype)
        return (lambda: x + y) if op == "add" else (lambda: x * y)
    if op in _UNARY:
        fn, x = _UNARY[op], _meta(n[0], dtype=dtype)
        return lambda: fn(x)
    if op == "copy":
        x = _meta(n[0], dtype=dtype)
        return lambda: x.clone()
    if op == "softmax":
        x = _meta(*n, dtype=dtype)
        return lambda: torch.softmax(x, -1)
    if op == "sum":
        x = _meta(*n, dtype=dtype)
        return lambda: x.sum(-1)
    if op == "transpose_contig":
        x = _meta(*n, dtype=dtype)
        return lambda: x.t().contiguous()
    if op == "layer_norm":
        rows, cols = n
        x, w, b = _meta(rows, cols, dtype=dtype), _meta(cols, dtype=dtype), _meta(cols, dtype=dtype)
        return lambda: F.layer_norm(x, (cols,), w, b)
    if op == "embedding":
        vocab, dim, count = n
        idx, w = torch.empty(count, dtype=torch.int64, device="meta"), _meta(vocab, dim, dtype=dtype)
        return lambda: F.embedding(idx, w)
    if op == "cat":
        parts, rows, cols = n
        xs = [_meta(rows, cols, dtype=dtype) for _ in range(parts)]
        return lambda: torch.cat(xs, 0)
    raise ValueError(f"unknown op {op!r} in the calibration data")


def _profile(fn: Callable[[], Any]) -> tuple[list[str], list[OpCost], float]:
    """Run fn under the project's profiler; the recorded op names, their OpCosts and the
    profiler's total device time. The OpCosts are rebuilt from the backend's raw capture (the
    same metadata the backend costs) so that other parameter sets can be evaluated later."""
    prof = NeuronProfiler(NeuronConfig(hardware="h200"))
    with torch.inference_mode():
        prof.start()
        mode = prof._backend._mode  # the capture of the simulated backend: (func, args, kwargs, outputs, ...)
        try:
            fn()
        finally:
            result = prof.stop()
    names, costs = [], []
    for func, args, kwargs, outputs, *_ in mode.raw:
        if args is None:
            continue  # free ops (views, empty): no device time
        names.append(func._schema.name)
        costs.append(op_cost(func, args, kwargs or {}, outputs))
    uncosted = sorted({r.name for r in result.records if not r.costed})
    if uncosted:
        print(f"warning: ops costed by bytes only (unknown to the cost model): {uncosted}")
    return names, costs, result.total_device_time_us


_FUSED_ATTENTION = ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")


def capture_sdpa(op: str, shape: str, dtype: torch.dtype) -> tuple[list[str], list[OpCost], float, str]:
    """F.scaled_dot_product_attention(q, k, v[, is_causal]) as a fused flash-attention op.

    On meta tensors SDPA takes the math path (bmm, softmax, bmm), which is not what an H200
    runs. CPU-device fake tensors pick the fused CPU flash kernel, costed like the CUDA one; if
    that capture fails, the CUDA flash op that the H200 dispatches for bf16/fp16 (head dim <=
    256) is called directly on meta tensors. Both are the same OpCost formula."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    b, h, s, d = _ints(shape)
    causal = op == "sdpa_causal"
    try:
        with FakeTensorMode():
            q, k, v = (torch.empty(b, h, s, d, dtype=dtype) for _ in range(3))
            names, costs, total = _profile(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        if any(base in _FUSED_ATTENTION for base in (n.split("::")[-1] for n in names)):
            return names, costs, total, "sdpa/fake-cpu"
    except RuntimeError:
        pass
    q, k, v = (_meta(b, h, s, d, dtype=dtype) for _ in range(3))
    names, costs, total = _profile(
        lambda: torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal))
    return names, costs, total, "flash/meta"


def capture(rows: Sequence[Row], bundled: HardwareProfile) -> None:
    for row in rows:
        dtype = DTYPES[row.dtype]
        if row.op in ("sdpa", "sdpa_causal"):
            row.ops, row.costs, total, row.path = capture_sdpa(row.op, row.shape, dtype)
        else:
            row.ops, row.costs, total = _profile(build_call(row.op, row.shape, dtype))
            row.path = "meta"
        check = sum(device_time(c, bundled).device_time_us for c in row.costs)
        if not math.isclose(check, total, rel_tol=1e-9, abs_tol=1e-9):
            raise SystemExit(f"{row.label}: re-costing the capture gives {check} us, the profiler "
                             f"{total} us; the capture no longer matches the backend")


# --- parameters ---------------------------------------------------------------------------------

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


# --- the fit ------------------------------------------------------------------------------------

def predict(rows: Sequence[Row], hw: HardwareProfile) -> list[float]:
    return [sum(device_time(c, hw).device_time_us for c in row.costs) for row in rows]


SMOOTH = math.log(1.02)


def loss(model: Model, base: dict, rows: Sequence[Row], values: Sequence[float]) -> float:
    """Mean absolute log error, smoothed within +-2 % (pseudo-Huber with a small delta): a
    median-like fit, in which a row the model cannot describe pulls by its sign only, not by
    its size."""
    hw = parse_profile(model.profile_data(base, values), "candidate")
    total = 0.0
    for row, pred in zip(rows, predict(rows, hw)):
        e = math.log(pred / row.measured_us)
        total += SMOOTH * (math.sqrt(1.0 + (e / SMOOTH) ** 2) - 1.0)
    return total / len(rows)


def nelder_mead(f: Callable[[list[float]], float], x0: list[float], steps: list[float],
                iterations: int = 1500, tol: float = 1e-10) -> tuple[list[float], float]:
    """Plain Nelder-Mead (standard coefficients), deterministic."""
    simplex = [list(x0)]
    for i, step in enumerate(steps):
        x = list(x0)
        x[i] += step
        simplex.append(x)
    values = [f(x) for x in simplex]
    n = len(x0)
    for _ in range(iterations):
        order = sorted(range(n + 1), key=lambda j: (values[j], j))
        simplex, values = [simplex[j] for j in order], [values[j] for j in order]
        if values[-1] - values[0] < tol:
            break
        centroid = [sum(x[i] for x in simplex[:-1]) / n for i in range(n)]
        worst = simplex[-1]
        reflected = [c + (c - w) for c, w in zip(centroid, worst)]
        fr = f(reflected)
        if fr < values[0]:
            expanded = [c + 2.0 * (c - w) for c, w in zip(centroid, worst)]
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            if fr < values[-1]:
                contracted = [c + 0.5 * (r - c) for c, r in zip(centroid, reflected)]
            else:
                contracted = [c + 0.5 * (w - c) for c, w in zip(centroid, worst)]
            fc = f(contracted)
            if fc < min(fr, values[-1]):
                simplex[-1], values[-1] = contracted, fc
            else:  # shrink towards the best point
                best = simplex[0]
                simplex = [best] + [[b + 0.5 * (x - b) for b, x in zip(best, xs)] for xs in simplex[1:]]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    j = min(range(n + 1), key=lambda i: (values[i], i))
    return simplex[j], values[j]


def _line_search(f: Callable[[list[float]], float], u: list[float], i: int, lo: float, hi: float,
                 best: float, points: int = 24) -> tuple[list[float], float]:
    """Minimise f along coordinate i: a grid over [lo, hi], then golden-section refinement
    around the best grid point (the loss has kinks where an op turns memory-bound). The current
    value stays unless another is strictly better: a parameter no row in the fit depends on keeps
    its prior (leave-one-class-out fits)."""
    def at(x: float) -> list[float]:
        v = list(u)
        v[i] = x
        return v

    grid = [lo + (hi - lo) * j / points for j in range(points + 1)]
    values = [f(at(x)) for x in grid]
    j = min(range(len(grid)), key=lambda n: (values[n], abs(grid[n] - u[i]), n))
    a, b = grid[max(0, j - 1)], grid[min(points, j + 1)]
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = f(at(c)), f(at(d))
    for _ in range(30):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = f(at(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = f(at(d))
    candidates = [(best, u[i]), (values[j], grid[j]), (fc, c), (fd, d)]
    value, x = min(candidates, key=lambda t: t[0])  # the first of equals: the current value
    return at(x), value


def fit(model: Model, base: dict, rows: Sequence[Row], sweeps: int = 6) -> list[float]:
    """Coordinate descent (grid + golden section per parameter, within its bounds), polished
    by Nelder-Mead, repeated until the loss stops improving. Deterministic; every fit starts
    from the same priors (Param.start)."""
    params = model.params

    def objective(u: list[float]) -> float:
        return loss(model, base, rows, [p.from_u(x) for p, x in zip(params, u)])

    bounds = [(p.to_u(p.lo), p.to_u(p.hi)) for p in params]
    u = [p.to_u(min(p.hi, max(p.lo, p.start))) for p in params]
    best = objective(u)
    for _ in range(sweeps):
        previous = best
        for i, (lo, hi) in enumerate(bounds):
            u, best = _line_search(objective, u, i, lo, hi, best)
        polished, _ = nelder_mead(objective, u, [p.step() / 4 for p in params], iterations=300)
        polished = [min(hi, max(lo, x)) for x, (lo, hi) in zip(polished, bounds)]
        value = objective(polished)
        if value < best:
            u, best = polished, value
        if previous - best < 1e-7:
            break
    return [p.from_u(x) for p, x in zip(params, u)]


# --- error figures ------------------------------------------------------------------------------

def metrics(ratios: Sequence[float]) -> tuple[float, float]:
    """(median |ratio - 1|, share of rows within 2x)."""
    median = statistics.median(abs(r - 1.0) for r in ratios)
    within = sum(1 for r in ratios if 0.5 <= r <= 2.0) / len(ratios)
    return median, within


def size(row: Row) -> float:
    """A row's problem size: FLOPs of tensor-core work, else bytes moved."""
    flops = sum(c.flops for c in row.costs)
    return float(flops or sum(c.bytes_read + c.bytes_written for c in row.costs))


CLASSES = {
    "mm": "gemm", "bmm": "gemm", "linear": "gemm", "conv2d": "conv",
    "add": "elementwise", "mul": "elementwise", "relu": "elementwise", "exp": "elementwise",
    "gelu": "elementwise", "sigmoid": "elementwise", "tanh": "elementwise",
    "copy": "copy", "cat": "copy", "transpose_contig": "transpose", "softmax": "softmax",
    "sum": "sum", "layer_norm": "layer_norm", "embedding": "embedding",
    "sdpa": "attention", "sdpa_causal": "attention",
}


def _by_op(rows: Sequence[Row]) -> dict[str, list[int]]:
    """Row indices of each op, smallest shape first (ties: in file order)."""
    groups: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault(row.op, []).append(i)
    return {op: sorted(members, key=lambda i: (size(rows[i]), i)) for op, members in groups.items()}


def kfold_folds(rows: Sequence[Row], k: int = 5) -> list[list[int]]:
    """Within each op, rows sorted by dtype and size are dealt out in turn."""
    fold = [0] * len(rows)
    offset = 0
    for op, members in sorted(_by_op(rows).items()):
        members = sorted(members, key=lambda i: (rows[i].dtype, size(rows[i]), i))
        for j, i in enumerate(members):
            fold[i] = (offset + j) % k
        offset += len(members)
    return [[i for i in range(len(rows)) if fold[i] == f] for f in range(k)]


def extreme_folds(rows: Sequence[Row]) -> list[list[int]]:
    """Two folds: the smallest shape of every op; the largest (an op with one row: that row)."""
    groups = _by_op(rows)
    smallest = sorted(m[0] for m in groups.values() if len(m) > 1)
    largest = sorted(m[-1] for m in groups.values())
    return [smallest, largest]


def band_folds(rows: Sequence[Row], bands: int = 3) -> list[list[int]]:
    """Each op's rows, smallest first, cut into ``bands`` bands of (nearly) equal count; fold b
    holds band b of every op (an op with fewer rows than bands skips the middle ones)."""
    folds: list[list[int]] = [[] for _ in range(bands)]
    for members in _by_op(rows).values():
        n = len(members)
        for j, i in enumerate(members):
            band = 0 if n == 1 else round(j * (bands - 1) / (n - 1)) if n < bands else j * bands // n
            folds[band].append(i)
    return [sorted(f) for f in folds]


def class_folds(rows: Sequence[Row]) -> list[list[int]]:
    classes = sorted({CLASSES[r.op] for r in rows})
    return [[i for i, r in enumerate(rows) if CLASSES[r.op] == c] for c in classes]


def cross_validate(model: Model, base: dict, rows: Sequence[Row],
                   folds: Sequence[Sequence[int]]) -> list[float | None]:
    """Ratios predicted/measured where each held-out row is predicted by a fit without its
    fold (None for rows no fold holds out)."""
    ratios: list[float | None] = [None] * len(rows)
    for held in folds:
        if not held:
            continue
        out = set(held)
        train = [r for i, r in enumerate(rows) if i not in out]
        values = fit(model, base, train)
        hw = parse_profile(model.profile_data(base, values), "fold")
        for i, pred in zip(held, predict([rows[i] for i in held], hw)):
            ratios[i] = pred / rows[i].measured_us
    return ratios


# --- the MLP at odd hidden sizes ------------------------------------------------------------------

MLP_HIDDEN = (128, 129, 136, 192, 255, 256)


def mlp_costs(hidden: int) -> list[OpCost]:
    """x[4096, 1024] bf16 -> Linear(1024, H) -> GELU -> Linear(H, 1024), forward, as recorded."""
    x = _meta(4096, 1024, dtype=torch.bfloat16)
    w1, b1 = _meta(hidden, 1024, dtype=torch.bfloat16), _meta(hidden, dtype=torch.bfloat16)
    w2, b2 = _meta(1024, hidden, dtype=torch.bfloat16), _meta(1024, dtype=torch.bfloat16)
    _, costs, _ = _profile(lambda: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2))
    return costs


# --- shapes the data lacks ------------------------------------------------------------------------

# Predicted, not measured: where the model's physics says more than the calibration rows do.
UNMEASURED = [
    ("layer_norm", "64x32000", "bfloat16", "few long rows, 128 threads each: latency-bound"),
    ("layer_norm", "8192x128", "bfloat16", "many short rows"),
    ("softmax", "64x32000", "bfloat16", "the same rows with 1024 threads each (measured: 10.50)"),
    ("conv2d", "32x256x14x14_k256r3s1", "bfloat16", "the FLOPs of the 64-channel row (measured: 47.77)"),
    ("conv2d", "16x3x224x224_k64r7s2", "float32", "the stem on TF32 (bf16 measured: 164.47)"),
    ("sum", "4096x4096", "bfloat16", "input fits in L2"),
    ("sum", "32768x1024", "bfloat16", "memory-bound (fp32 measured: 38.13)"),
    ("transpose_contig", "4096x4096", "bfloat16", "a sector per element, as fp32 (measured: 120.86)"),
]


# --- writing the profile ------------------------------------------------------------------------

def _fmt(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}" if decimals else f"{value:.1f}"


FIT_NOTE = "fitted by benchmarks/fit_h200.py on benchmarks/data/h200_calibration.csv"
SOURCES = {
    "launch_us": f"{FIT_NOTE} (README: the smallest kernels take 0.8-1 us)",
    "dma_fixed_us": "set by benchmarks/fit_h200.py: the copy rows of benchmarks/data/h200_calibration.csv "
                    "take launch_us + bytes / bandwidth, no fixed cost beyond launch",
    "hbm_gbps": f"{FIT_NOTE}; benchmarks/data/README.md: a device-to-device copy moved about 4.3 TB/s",
    "strided_granule_bytes": f"{FIT_NOTE} on the transposing copies: the L2 bandwidth one scattered "
                             "element read costs. An H200 memory sector is 32 bytes; the fit says "
                             "more, because the L2 serves scattered 32-byte sectors at a lower byte "
                             "rate than the streaming reads gpu.l2_gbps is fitted on",
    "sbuf_mib": "NVIDIA H200: 50 MB L2 cache (plays SBUF's part; the GPU model uses gpu.l2_mib)",
    "tensor.fixed_us": f"{FIT_NOTE}: GEMM/conv/attention kernel latency beyond launch_us",
    "tensor.tflops": "benchmarks/data/README.md: about 790 TFLOP/s bf16 and 51 fp32 (TF32 off) measured; "
                     "fp8 assumed 2x bf16; conv.float32: cuDNN runs fp32 convolutions on TF32 tensor "
                     "cores (torch.backends.cudnn.allow_tf32 defaults to True), NVIDIA H200 TF32 "
                     "494.7 TFLOP/s dense x the measured bf16 fraction 790/989.4",
    "tensor.efficiency": f"{FIT_NOTE}: an SM's rate in the main loop of a GEMM, a cuDNN implicit-GEMM "
                         "convolution and fused (flash) attention, as a share of the ceiling / 132 SMs "
                         "(above 1: the ceilings were measured on whole GEMMs, wave quantization "
                         "included)",
    "vector": "132 SMs x 128 FP32 lanes at 1.98 GHz; efficiency set by benchmarks/fit_h200.py to 0.25 "
              "(assumption: an eager elementwise kernel's few instructions per element; it never binds "
              "in the data, where elementwise arithmetic is memory-bound; reductions, softmax and norms "
              "have gpu.* terms of their own); fixed_us set to 0 (launch_us is a kernel's latency)",
    "scalar": f"132 SMs x 128 FP32 lanes at 1.98 GHz; efficiency {FIT_NOTE} (activations and "
              "transcendentals: eager PyTorch kernels); fixed_us set to 0",
    "gpsimd": "132 SMs x 128 FP32 lanes at 1.98 GHz; same CUDA cores: efficiency and fixed_us set "
              "to scalar's by benchmarks/fit_h200.py (no compute-bound gather in the data)",
    "gpu.sms": "NVIDIA H200 SXM (GH100): 132 streaming multiprocessors",
    "gpu.l2_mib": "NVIDIA H200 (GH100): 50 MB L2 cache",
    "gpu.l2_gbps": f"{FIT_NOTE}: streaming bandwidth of an op whose bytes fit in L2 (the calibration "
                   "repeats each call on the same tensors)",
    "gpu.gemm_k_tile_bytes": "Hopper tensor-core GEMM kernels (CUTLASS 3 / cuBLAS sm90, TMA + wgmma) "
                             "load K in 128-byte tiles: 64 bf16/fp16, 128 fp8, 32 tf32",
    "gpu.simt_k_tile_bytes": "FP32 CUDA-core SGEMM kernels (TF32 off, PyTorch's default; e.g. "
                             "128x128x8 tiles): K tile of 8 fp32 = 32 bytes",
    "gpu.conv_k_tile_bytes": "implicit-GEMM convolution kernels (CUTLASS/cuDNN) step K through each "
                             "filter tap in 32 16-bit channels = 64 bytes; 3 input channels waste "
                             "29 of 32 (the 7x7 stem row of the data runs at ~3 % of the bf16 ceiling)",
    "gpu.feed_gbps_per_sm": f"{FIT_NOTE}: an SM's bandwidth loading GEMM operand tiles from L2",
    "gpu.kstep_us": f"{FIT_NOTE}: latency floor of one GEMM main-loop step",
    "gpu.attention_cta_us": f"{FIT_NOTE}: what a flash-attention CTA spends outside its KV steps "
                            "(loading its queries, normalizing and storing its output)",
    "gpu.stream_fraction": f"{FIT_NOTE}: share of hbm_gbps a GEMM or a reduction reaches streaming "
                           "its input (copies and elementwise kernels reach all of it)",
    "gpu.row_elements_per_us": f"{FIT_NOTE}: elements per us one SM gets through in a row-wise "
                               "kernel (softmax, layer norm: a thread block or a warp per row), rows in L2",
    "gpu.row_hbm_slowdown": f"{FIT_NOTE}: how much slower a row-wise kernel runs on rows from HBM "
                            "(latency-bound: HBM answers later than L2)",
    "gpu.row_step_us": "assumption, set by benchmarks/fit_h200.py: one round trip of a row-wise "
                       "kernel's loop (an L2 hit, a few hundred SM cycles, and the dependent "
                       "arithmetic of the elements it brings) at ~1.75 GHz: 0.25 us. No row of the "
                       "calibration data is bound by it; it sets how slowly few long rows with few "
                       "threads each (layer norm: 128) run",
    "gpu.reduce_us": f"{FIT_NOTE}: latency of a reduction kernel's tree (block reductions, the "
                     "blocks' partial results combined in global memory)",
}


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def _toml_value(value: float, decimals: int | None) -> str:
    if decimals is None:  # an integer
        return str(int(value))
    return _fmt(value, decimals)


def render_profile(text: str, data: dict, model: Model) -> str:
    """Rewrite the fitted and set numbers and their [sources] entries in h200.toml, keeping every
    other line (comments included); keys missing from a table are added at its end, a missing
    table at the end of the file (before [sources])."""
    wanted: dict[tuple[str, str], str] = {}
    decimals: dict[str, int | None] = {p.key: p.decimals for p in model.params}
    decimals.update({f"tensor.tflops.{k}": 1 for k in CEILINGS})
    decimals.update({k: None if isinstance(v, int) else 2 for k, v in model.set.items()})
    decimals.update({key: decimals[source] for key, source in TIED.items()})
    for full, places in decimals.items():
        table, _, key = full.rpartition(".")
        if table.startswith("tensor.tflops."):  # "conv.float32" is one key of [tensor.tflops]
            table, key = "tensor.tflops", full[len("tensor.tflops."):]
        value = data["tensor"]["tflops"][key] if table == "tensor.tflops" else _get(data, full)
        wanted[(table, key)] = _toml_value(value, places)
    sources = {k: '"' + v.replace('"', "'") + '"' for k, v in SOURCES.items()}

    out: list[str] = []
    table, seen, tables = "", set(), set()
    header = re.compile(r"^\s*\[([^\]]+)\]\s*$")
    assign = re.compile(r'^(\s*)("[^"]+"|[A-Za-z0-9_-]+)(\s*=\s*)(.*)$')

    def flush(current: str) -> None:
        """Append the keys still missing from table ``current``, before its trailing blank lines."""
        at = len(out)
        while at > 0 and not out[at - 1].strip():
            at -= 1
        added = []
        if current == "sources":
            added += [f"{_toml_key(key)} = {value}" for key, value in sources.items()]
            sources.clear()
        for (t, key), value in wanted.items():
            if t == current and (t, key) not in seen:
                added.append(f"{_toml_key(key)} = {value}")
                seen.add((t, key))
        out[at:at] = added

    lines = text.splitlines()
    for line in lines:
        m = header.match(line)
        if m:
            flush(table)
            table = m.group(1).strip()
            if table == "sources":  # tables the file lacks go before [sources]
                for missing in sorted({t for t, _ in wanted if t and t not in tables}):
                    out.extend([f"[{missing}]", ""])
                    flush(missing)
                    out.append("")
                    tables.add(missing)
            tables.add(table)
            out.append(line)
            continue
        m = assign.match(line)
        if m:
            key = m.group(2).strip('"')
            if (table, key) in wanted:
                out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{wanted[(table, key)]}")
                seen.add((table, key))
                continue
            if table == "sources" and key in sources:
                out.append(f"{m.group(1)}{m.group(2)}{m.group(3)}{sources.pop(key)}")
                continue
        out.append(line)
    flush(table)
    missing = [k for k in wanted if k not in seen]
    if missing or sources:
        raise SystemExit(f"h200.toml: could not place {missing or list(sources)}")
    return "\n".join(out) + "\n"


# --- main ---------------------------------------------------------------------------------------

def _line(name: str, ratios: Sequence[float | None]) -> str:
    got = [r for r in ratios if r is not None]
    median, within = metrics(got)
    return (f"  {name:52s} median |pred/meas - 1| {median:6.1%}   within 2x {within:6.1%}   "
            f"({len(got)} rows)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="the calibration CSV")
    parser.add_argument("--quick", action="store_true", help="skip the cross-validations")
    parser.add_argument("--schemes", default="kfold,extremes,bands,classes",
                        help="cross-validations to run (default: kfold,extremes,bands,classes)")
    parser.add_argument("--plain", action="store_true",
                        help="fit the plain roofline (no [gpu] table), the model before, instead")
    parser.add_argument("--write", action="store_true", help="rewrite costmodel/hardware/h200.toml")
    args = parser.parse_args(argv)
    if args.write and args.plain:
        parser.error("--write writes the GPU model; run it without --plain")
    started = time.perf_counter()
    model = Model(args.plain)

    data_path = args.data or DATA
    rows = load_rows(data_path)
    text = PROFILE_PATH.read_text(encoding="utf-8")
    current = tomllib.loads(text)
    base = model.base(current)
    bundled = load_hardware("h200")
    capture(rows, bundled)

    before = [pred / row.measured_us for row, pred in zip(rows, predict(rows, bundled))]
    values = model.rounded(fit(model, base, rows))
    fitted = model.profile_data(base, values)
    hw = parse_profile(fitted, "fitted")
    preds = predict(rows, hw)
    ratios = [p / r.measured_us for p, r in zip(preds, rows)]
    schemes: list[tuple[str, list[float | None]]] = []
    wanted = set() if args.quick else set(args.schemes.split(","))
    for key, name, folds in (
            ("kfold", "5-fold within each op (random shapes)", kfold_folds(rows)),
            ("extremes", "extremes: each op's smallest / largest held out", extreme_folds(rows)),
            ("bands", "size bands: each op's small / mid / large third", band_folds(rows)),
            ("classes", "leave one class out (stress test)", class_folds(rows))):
        if key in wanted:
            schemes.append((name, cross_validate(model, base, rows, folds)))

    print(f"model: {model.name}; data: {data_path} ({len(rows)} rows); prediction = sum of the "
          f"device time of the recorded ops under NeuronProfiler(NeuronConfig(hardware='h200'))")
    heads = ["extremes", "bands", "class-out"]
    print(f"{'op':17s} {'shape':22s} {'dtype':9s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s} "
          + " ".join(f"{h:>9s}" for h in heads) + "  recorded ops")
    keyed = [next((r for n, r in schemes if n.startswith(h)), None)
             for h in ("extremes", "size bands", "leave one")]
    for i, (row, pred, ratio) in enumerate(zip(rows, preds, ratios)):
        ops = ",".join(sorted({n.split("::")[-1] for n in row.ops}))
        cv = " ".join(f"{r[i]:9.2f}" if r is not None and r[i] is not None else f"{'-':>9s}"
                      for r in keyed)
        print(f"{row.op:17s} {row.shape:22s} {row.dtype:9s} {row.measured_us:9.2f} {pred:9.2f} "
              f"{ratio:6.2f} {cv}  {ops}")

    print("\nfitted parameters (minimising the mean absolute log error, smoothed within 2 %)")
    for param, value in zip(model.params, values):
        was = _get(current, param.key)
        print(f"  {param.key:28s} {_fmt(value, param.decimals):>9s}   {param.meaning} "
              f"(bounds {param.lo:g}..{param.hi:g}; profile had {'-' if was is None else f'{was:g}'})")
    for key, source in TIED.items():
        print(f"  {key:28s} = {source}")
    print("set, not fitted: tensor.tflops " + ", ".join(f"{k} {v:g}" for k, v in CEILINGS.items())
          + "; " + ", ".join(f"{k} {v:g}" for k, v in model.set.items()))
    peak = hw.vector.lanes * hw.vector.clock_ghz * 1e3
    print(f"  -> element rates (of {peak:.3g} lane-cycles/us): vector {hw.vector.elements_per_us:.3g}/us, "
          f"scalar {hw.scalar.elements_per_us:.3g}/us, gpsimd {hw.gpsimd.elements_per_us:.3g}/us")

    print(f"\nerrors ({model.name})")
    if not args.plain:  # the bundled profile is the GPU model's
        print(_line("the bundled profile before this run, all rows", before))
    print(_line("fitted on all rows, in sample", ratios))
    for name, cv in schemes:
        print(_line(name, cv))
    order = sorted(range(len(rows)), key=lambda i: (-abs(math.log(ratios[i])), i))
    print("\nworst rows in sample")
    for i in order[:8]:
        print(f"  {rows[i].label:42s} measured {rows[i].measured_us:9.2f}  predicted "
              f"{preds[i]:9.2f}  ratio {ratios[i]:5.2f}")
    extremes = next((r for n, r in schemes if n.startswith("extremes")), None)
    if extremes:
        print("\nworst row of each class, held out at the extremes (ratio predicted/measured)")
        for cls in sorted(set(CLASSES[r.op] for r in rows)):
            members = [i for i, r in enumerate(rows) if CLASSES[r.op] == cls and extremes[i] is not None]
            if members:
                i = max(members, key=lambda j: (abs(math.log(extremes[j])), -j))
                print(f"  {cls:12s} {rows[i].label:42s} {extremes[i]:5.2f}")

    print("\npredicted for shapes the data lacks (not measured)")
    extra = [Row(op, shape, dtype, 1.0) for op, shape, dtype, _ in UNMEASURED]
    capture(extra, bundled)
    for row, pred, (*_, note) in zip(extra, predict(extra, hw), UNMEASURED):
        print(f"  {row.label:42s} {pred:9.2f} us   {note}")

    print("\nMLP forward x[4096,1024] bf16 -> Linear(1024,H) -> GELU -> Linear(H,1024): predicted "
          "time and ratio to H=128")
    reference = None
    for hidden in MLP_HIDDEN:
        total = sum(device_time(c, hw).device_time_us for c in mlp_costs(hidden))
        reference = reference or total
        print(f"  H={hidden:4d}  {total:7.2f} us  x{total / reference:5.3f}")
    print("  (measured on an H200, issue 10: H=136 is 21 % slower than H=128)")

    if args.write:
        new_text = render_profile(text, fitted, model)
        check = parse_profile(tomllib.loads(new_text), str(PROFILE_PATH))
        if [round(a, 9) for a in predict(rows, check)] != [round(a, 9) for a in preds]:
            raise SystemExit("the rewritten profile does not reproduce the fitted predictions")
        PROFILE_PATH.write_text(new_text, encoding="utf-8")
        print(f"\nwrote {PROFILE_PATH.relative_to(ROOT)}")
    print(f"\n({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
