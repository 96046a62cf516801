"""The measured rows and the calls behind them: each row of ``benchmarks/data/h200_calibration.csv``
built on ``meta`` tensors as the data's README describes it, run under the project's profiler,
its OpCosts kept so that other parameter sets re-cost it without running it again."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F

from pytest_neuronprof import NeuronConfig, NeuronProfiler
from pytest_neuronprof.costmodel.opcost import OpCost
from pytest_neuronprof.costmodel.registry import op_cost
from pytest_neuronprof.costmodel.profiles import HardwareProfile
from pytest_neuronprof.costmodel.roofline import device_time

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


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


# --- the MLP at odd hidden sizes ------------------------------------------------------------------

MLP_HIDDEN = (128, 129, 136, 192, 255, 256)


def mlp_costs(hidden: int) -> list[OpCost]:
    """x[4096, 1024] bf16 -> Linear(1024, H) -> GELU -> Linear(H, 1024), forward, as recorded."""
    x = _meta(4096, 1024, dtype=torch.bfloat16)
    w1, b1 = _meta(hidden, 1024, dtype=torch.bfloat16), _meta(hidden, dtype=torch.bfloat16)
    w2, b2 = _meta(1024, hidden, dtype=torch.bfloat16), _meta(1024, dtype=torch.bfloat16)
    _, costs, _ = _profile(lambda: F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2))
    return costs
