"""Fit the ``h200`` hardware profile to per-op device times measured on an NVIDIA H200.

Run by hand (about 30 s on 2 cores)::

    python benchmarks/fit_h200.py            # fit, print the table, the parameters and the errors
    python benchmarks/fit_h200.py --write    # ... and rewrite costmodel/hardware/h200.toml

Data: ``benchmarks/data/h200_calibration.csv`` (see ``benchmarks/data/README.md``): one row per op call,
``op, shape, dtype, device_us``. For every row the script builds the call the README describes
on ``meta`` tensors, runs it under ``NeuronProfiler(NeuronConfig(hardware="h200"))`` (inference
mode, so only the forward op runs) and takes the sum of the device time of the recorded ATen ops
as the prediction. The captured OpCosts are kept, so candidate parameter sets are evaluated with
``device_time(cost, profile)`` on ``parse_profile(dict)`` instead of re-running the ops; the
script checks that this gives the profiler's own numbers for the bundled profile.

Fit: ten parameters with a physical meaning (launch cost, HBM bandwidth, the tensor cores'
fixed latency and achieved fraction of the ceilings for matmul / conv / attention, the CUDA
cores' element rates for VectorE-like and ScalarE-like work as a fraction of 132 SMs x 128
lanes x 1.98 GHz, and their fixed cost), minimising the mean absolute log error (smoothed
within 2 %, so that rows the model cannot describe pull by their sign, not their size) with
deterministic coordinate descent (grid + golden section) and Nelder-Mead, in pure Python. The
tensor-core ceilings are set, not fitted: the README's measured 790 TFLOP/s bf16/fp16 and 51
fp32, and TF32 for fp32 convolutions (see CEILINGS).

Errors: median |predicted / measured - 1| and the share of rows within 2x, on all rows (fit on
all) and k-fold cross-validated (stratified by op: every row is predicted by a fit that did not
see it), the honest figure for shapes the fit has not seen.
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
from pytest_neuronprof.costmodel.formulas import OpCost, op_cost  # noqa: E402
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
        costs.append(op_cost(func._schema.name, args, kwargs or {}, outputs))
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
    prior from the README, not the profile's current value: runs do not depend on earlier
    --write runs), its bounds, and how it is searched (log: a rate or a fraction, searched in
    log space; lin: a fixed cost that may be 0)."""

    def __init__(self, key: str, start: float, lo: float, hi: float, scale: str, decimals: int) -> None:
        self.key, self.start, self.lo, self.hi = key, start, lo, hi
        self.scale, self.decimals = scale, decimals

    def to_u(self, value: float) -> float:
        return math.log(value) if self.scale == "log" else value

    def from_u(self, u: float) -> float:
        value = math.exp(u) if self.scale == "log" else u
        return min(self.hi, max(self.lo, value))

    def step(self) -> float:
        return 0.4 if self.scale == "log" else 0.5


PARAMS = [
    Param("launch_us", 0.8, 0.2, 3.0, "log", 2),  # per-kernel launch: README, 0.8-1 us
    Param("hbm_gbps", 4300.0, 2000.0, 6000.0, "log", 0),  # README: a copy moved 4.3 TB/s
    Param("tensor.fixed_us", 1.0, 0.0, 20.0, "lin", 2),  # GEMM kernel latency beyond launch
    Param("tensor.efficiency.matmul", 1.0, 0.3, 1.0, "log", 3),  # of the measured ceilings
    Param("tensor.efficiency.conv", 0.3, 0.005, 1.0, "log", 3),
    Param("tensor.efficiency.attention", 0.5, 0.02, 1.0, "log", 3),
    Param("vector.efficiency", 0.1, 0.002, 1.0, "log", 4),  # of 132 SMs x 128 lanes x 1.98 GHz
    Param("scalar.efficiency", 0.1, 0.002, 1.0, "log", 4),
    Param("vector.fixed_us", 0.0, 0.0, 10.0, "lin", 2),  # kernel latency beyond launch
    Param("scalar.fixed_us", 0.0, 0.0, 10.0, "lin", 2),
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
FIXED = {"dma_fixed_us": 0.0}  # the copy rows take launch + bytes / bandwidth, nothing more


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


def with_fixed(data: dict) -> dict:
    """The profile data with the numbers the script sets (ceilings, dma_fixed_us)."""
    data = copy.deepcopy(data)
    data.setdefault("tensor", {}).setdefault("tflops", {}).update(CEILINGS)
    for key, value in FIXED.items():
        _set(data, key, value)
    return data


def profile_data(base: dict, values: Sequence[float]) -> dict:
    """base (already with_fixed) with the fitted values and those tied to them."""
    data = copy.deepcopy(base)
    named = {p.key: v for p, v in zip(PARAMS, values)}
    for key, value in named.items():
        _set(data, key, value)
    for key, source in TIED.items():
        _set(data, key, named[source])
    return data


def rounded(values: Sequence[float]) -> list[float]:
    return [round(v, p.decimals) for p, v in zip(PARAMS, values)]


# --- the fit ------------------------------------------------------------------------------------

def predict(rows: Sequence[Row], hw: HardwareProfile) -> list[float]:
    return [sum(device_time(c, hw).device_time_us for c in row.costs) for row in rows]


SMOOTH = math.log(1.02)


def loss(base: dict, rows: Sequence[Row], values: Sequence[float]) -> float:
    """Mean absolute log error, smoothed within +-2 % (pseudo-Huber with a small delta): a
    median-like fit, in which a row the model cannot describe (a transposing copy, a C=3
    convolution) pulls by its sign only, not by its size."""
    hw = parse_profile(profile_data(base, values), "candidate")
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
    around the best grid point (the loss has kinks where an op turns memory-bound)."""
    def at(x: float) -> list[float]:
        v = list(u)
        v[i] = x
        return v

    grid = [lo + (hi - lo) * j / points for j in range(points + 1)]
    values = [f(at(x)) for x in grid]
    j = min(range(len(grid)), key=lambda n: (values[n], n))
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
    candidates = [(values[j], grid[j]), (fc, c), (fd, d), (best, u[i])]
    value, x = min(candidates, key=lambda t: t[0])
    return at(x), value


def fit(base: dict, rows: Sequence[Row], start: Sequence[float], sweeps: int = 8) -> list[float]:
    """Coordinate descent (grid + golden section per parameter, within its bounds), polished
    by Nelder-Mead, repeated until the loss stops improving. Deterministic."""
    def objective(u: list[float]) -> float:
        return loss(base, rows, [p.from_u(x) for p, x in zip(PARAMS, u)])

    bounds = [(p.to_u(p.lo) if p.lo > 0 or p.scale == "lin" else -30.0, p.to_u(p.hi)) for p in PARAMS]
    u = [p.to_u(min(p.hi, max(p.lo, v))) for p, v in zip(PARAMS, start)]
    best = objective(u)
    for _ in range(sweeps):
        previous = best
        for i, (lo, hi) in enumerate(bounds):
            u, best = _line_search(objective, u, i, lo, hi, best)
        u, _ = nelder_mead(objective, u, [p.step() / 4 for p in PARAMS], iterations=400)
        u = [min(hi, max(lo, x)) for x, (lo, hi) in zip(u, bounds)]
        best = objective(u)
        if previous - best < 1e-9:
            break
    return [p.from_u(x) for p, x in zip(PARAMS, u)]


# --- error figures ------------------------------------------------------------------------------

def metrics(ratios: Sequence[float]) -> tuple[float, float]:
    """(median |ratio - 1|, share of rows within 2x)."""
    median = statistics.median(abs(r - 1.0) for r in ratios)
    within = sum(1 for r in ratios if 0.5 <= r <= 2.0) / len(ratios)
    return median, within


def folds(rows: Sequence[Row], k: int) -> list[int]:
    """Fold of each row: within each op, rows sorted by dtype and size are dealt out in turn,
    so every fold holds small and large shapes of most ops."""
    fold = [0] * len(rows)
    by_op: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        by_op.setdefault(row.op, []).append(i)
    offset = 0
    for op in sorted(by_op):
        members = sorted(by_op[op], key=lambda i: (rows[i].dtype, math.prod(_ints(rows[i].shape)), i))
        for j, i in enumerate(members):
            fold[i] = (offset + j) % k
        offset += len(members)
    return fold


def cross_validate(base: dict, rows: Sequence[Row], start: Sequence[float], k: int) -> list[float]:
    """Ratios predicted/measured where each row is predicted by a fit without its fold."""
    assignment = folds(rows, k)
    ratios = [0.0] * len(rows)
    for f in range(k):
        train = [r for r, a in zip(rows, assignment) if a != f]
        test = [i for i, a in enumerate(assignment) if a == f]
        values = fit(base, train, start)
        hw = parse_profile(profile_data(base, values), f"fold {f}")
        for i, pred in zip(test, predict([rows[i] for i in test], hw)):
            ratios[i] = pred / rows[i].measured_us
    return ratios


# --- writing the profile ------------------------------------------------------------------------

def _fmt(value: float, decimals: int) -> str:
    return f"{value:.{decimals}f}" if decimals else f"{value:.1f}"


FIT_NOTE = "fitted by benchmarks/fit_h200.py on benchmarks/data/h200_calibration.csv"
SOURCES = {
    "launch_us": f"{FIT_NOTE} (README: the smallest kernels take 0.8-1 us)",
    "dma_fixed_us": "set by benchmarks/fit_h200.py: the copy rows of benchmarks/data/h200_calibration.csv "
                    "take launch_us + bytes / hbm_gbps, no fixed cost beyond launch",
    "hbm_gbps": f"{FIT_NOTE}; benchmarks/data/README.md: a device-to-device copy moved about 4.3 TB/s",
    "tensor.fixed_us": f"{FIT_NOTE}: GEMM/conv/attention kernel latency beyond launch_us",
    "tensor.tflops": "benchmarks/data/README.md: about 790 TFLOP/s bf16 and 51 fp32 (TF32 off) measured; "
                     "fp8 assumed 2x bf16; conv.float32: cuDNN runs fp32 convolutions on TF32 tensor "
                     "cores (torch.backends.cudnn.allow_tf32 defaults to True), NVIDIA H200 TF32 "
                     "494.7 TFLOP/s dense x the measured bf16 fraction 790/989.4",
    "tensor.efficiency": f"{FIT_NOTE}: achieved fraction of the ceilings for matrix products, "
                         "convolution (cuDNN, NCHW) and fused (flash) attention",
    "vector": f"132 SMs x 128 FP32 lanes at 1.98 GHz; efficiency and fixed_us {FIT_NOTE} "
              "(elementwise arithmetic, reductions, norms, softmax: eager PyTorch kernels)",
    "scalar": f"132 SMs x 128 FP32 lanes at 1.98 GHz; efficiency and fixed_us {FIT_NOTE} "
              "(activations and transcendentals: eager PyTorch kernels)",
    "gpsimd": "132 SMs x 128 FP32 lanes at 1.98 GHz; same CUDA cores: efficiency and fixed_us set "
              "to scalar's by benchmarks/fit_h200.py (no compute-bound gather in the data)",
}


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else f'"{key}"'


def render_profile(text: str, data: dict) -> str:
    """Rewrite the fitted and set numbers and their [sources] entries in h200.toml, keeping every
    other line (comments included); keys missing from a table are added at its end."""
    wanted: dict[tuple[str, str], str] = {}
    decimals = {p.key: p.decimals for p in PARAMS}
    decimals.update({key: decimals[source] for key, source in TIED.items()})
    decimals.update({f"tensor.tflops.{k}": 1 for k in CEILINGS})
    decimals.update({k: 2 for k in FIXED})
    for full, places in decimals.items():
        table, _, key = full.rpartition(".")
        if table.startswith("tensor.tflops."):  # "conv.float32" is one key of [tensor.tflops]
            table, key = "tensor.tflops", full[len("tensor.tflops."):]
        value = data["tensor"]["tflops"][key] if table == "tensor.tflops" else _get(data, full)
        wanted[(table, key)] = _fmt(value, places)
    sources = {k: '"' + v.replace('"', "'") + '"' for k, v in SOURCES.items()}

    out: list[str] = []
    table, seen = "", set()
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

    for line in text.splitlines():
        m = header.match(line)
        if m:
            flush(table)
            table = m.group(1).strip()
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

def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help="the calibration CSV")
    parser.add_argument("--folds", type=int, default=5,
                        help="cross-validation folds (default 5; 1 skips cross-validation)")
    parser.add_argument("--write", action="store_true", help="rewrite costmodel/hardware/h200.toml")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    data_path = args.data or DATA
    rows = load_rows(data_path)
    text = PROFILE_PATH.read_text(encoding="utf-8")
    current = tomllib.loads(text)
    base = with_fixed(current)
    bundled = load_hardware("h200")
    capture(rows, bundled)

    start = [p.start for p in PARAMS]
    before = [pred / row.measured_us for row, pred in zip(rows, predict(rows, bundled))]
    values = rounded(fit(base, rows, start))
    fitted = profile_data(base, values)
    hw = parse_profile(fitted, "fitted")
    preds = predict(rows, hw)
    ratios = [p / r.measured_us for p, r in zip(preds, rows)]
    cv = cross_validate(base, rows, start, args.folds) if args.folds > 1 else None

    print(f"data: {data_path} ({len(rows)} rows); prediction = sum of the device time of the "
          f"recorded ops under NeuronProfiler(NeuronConfig(hardware='h200')) with the fitted profile")
    print(f"{'op':17s} {'shape':22s} {'dtype':9s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s} "
          f"{'cv ratio':>8s}  recorded ops [capture]")
    for i, (row, pred, ratio) in enumerate(zip(rows, preds, ratios)):
        ops = ",".join(sorted({n.split("::")[-1] for n in row.ops}))
        cvr = f"{cv[i]:8.2f}" if cv else f"{'-':>8s}"
        print(f"{row.op:17s} {row.shape:22s} {row.dtype:9s} {row.measured_us:9.2f} {pred:9.2f} "
              f"{ratio:6.2f} {cvr}  {ops} [{row.path}]")

    print("\nfitted parameters (minimising the mean absolute log error, smoothed within 2 %)")
    for param, value in zip(PARAMS, values):
        was = _get(current, param.key)
        print(f"  {param.key:30s} {_fmt(value, param.decimals):>9s}   "
              f"(bounds {param.lo:g}..{param.hi:g}; profile had {'-' if was is None else f'{was:g}'})")
    for key, source in TIED.items():
        print(f"  {key:30s} = {source}")
    print("set, not fitted: tensor.tflops " + ", ".join(f"{k} {v:g}" for k, v in CEILINGS.items())
          + "; " + ", ".join(f"{k} {v:g}" for k, v in FIXED.items()))
    peak = hw.vector.lanes * hw.vector.clock_ghz * 1e3
    print(f"  -> element rates (of {peak:.3g} lane-cycles/us): vector {hw.vector.elements_per_us:.3g}/us, "
          f"scalar {hw.scalar.elements_per_us:.3g}/us, gpsimd {hw.gpsimd.elements_per_us:.3g}/us")

    def line(name: str, rs: Sequence[float]) -> None:
        median, within = metrics(rs)
        print(f"  {name:42s} median |pred/meas - 1| {median:6.1%}   within 2x {within:6.1%}   "
              f"({len(rs)} rows)")

    print("\nerrors")
    line("the profile before this run, all rows", before)
    line("fitted on all rows, all rows", ratios)
    if cv:
        line(f"{args.folds}-fold cross-validated (each row unseen)", cv)
    order = sorted(range(len(rows)), key=lambda i: (-abs(math.log(ratios[i])), i))
    print("\nworst rows (fit on all rows)")
    for i in order[:8]:
        print(f"  {rows[i].label:42s} measured {rows[i].measured_us:9.2f}  predicted "
              f"{preds[i]:9.2f}  ratio {ratios[i]:5.2f}")

    if args.write:
        new_text = render_profile(text, fitted)
        check = parse_profile(tomllib.loads(new_text), str(PROFILE_PATH))
        if [round(a, 9) for a in predict(rows, check)] != [round(a, 9) for a in preds]:
            raise SystemExit("the rewritten profile does not reproduce the fitted predictions")
        PROFILE_PATH.write_text(new_text, encoding="utf-8")
        print(f"\nwrote {PROFILE_PATH.relative_to(ROOT)}")
    print(f"\n({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
