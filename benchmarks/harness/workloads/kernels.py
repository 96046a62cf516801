"""Kernels: the NKI fused-Mamba tutorial's layer (``mamba_fused``) and the op-level rows
(``benchmarks/data/trn_oplevel_calibration.csv``: ``mm_t``, ``silu``, ``adamw``, ``all_reduce``),
each one compiled graph whose inputs are already in HBM; their figures are device times.

* ``mamba_fused``: the tutorial's Mamba-v1 layer as whole-tensor ops: ``exp(delta*A)``,
  ``delta*B*u``, one two-input VectorE pass standing for the associative scan (the NKI kernel
  runs it as one ``tensor_tensor_scan`` instruction per tile; PyTorch has no scan op),
  ``C*scan`` and the sum over states. ``impl=torch_loop``: the tutorial's compiled PyTorch
  reference instead (``nki/guides/tutorials/fused_mamba.rst``: 151.83 ms on device at
  [1, 512, 256, 16]), whose associative scan is a Python loop over the sequence, two ops and an
  indexed write per position.
* op-level rows: one operator or kernel per row, its inputs made here (outside the profiled
  phase: region inputs, already in HBM), device time in us.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .base import Phase, UnbuildableRow, Workload, dtype_of, inference
from .parallel import all_gather, all_reduce, ensure_group, group_name

MAMBA_IMPLS = ("nki", "torch_loop")


def mamba_layer(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, u: torch.Tensor,
                C: torch.Tensor) -> torch.Tensor:
    """The NKI tutorial's Mamba-v1 layer in whole-tensor ops. delta, u: [batch, channels, seq];
    A: [channels, state]; B, C: [batch, state, seq]."""
    delta_a = torch.exp(delta[:, :, None, :] * A[None, :, :, None])
    delta_b_u = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    # The associative scan out[..., i] = delta_a[..., i] * out[..., i-1] + delta_b_u[..., i] is one
    # tensor_tensor_scan pass per tile in the NKI kernel: one two-input VectorE pass here.
    scan = delta_a * delta_b_u
    return (C[:, None, :, :] * scan).sum(dim=-2)


def mamba_torch_loop(delta: torch.Tensor, A: torch.Tensor, B: torch.Tensor, u: torch.Tensor,
                     C: torch.Tensor) -> torch.Tensor:
    """The tutorial's PyTorch reference: the same layer with the associative scan as a loop over
    the sequence (a product with the previous state, an add, and a write into the scan's
    position i), as the compiler gets it from a traced loop."""
    delta_a = torch.exp(delta[:, :, None, :] * A[None, :, :, None])
    delta_b_u = delta[:, :, None, :] * B[:, None, :, :] * u[:, :, None, :]
    scan = torch.empty_like(delta_a)
    for i in range(delta_a.shape[-1]):
        previous = scan[..., i - 1] if i > 0 else 0
        scan[..., i] = delta_a[..., i] * previous + delta_b_u[..., i]
    return (C[:, None, :, :] * scan).sum(dim=-2)


def build_mamba_fused(cfg: dict[str, Any], **_: Any) -> Workload:
    batch, seq = int(cfg["batch"]), int(cfg["seq"])
    channels, state = int(cfg["channels"]), int(cfg["state"])
    impl = str(cfg.get("impl", "nki"))
    if impl not in MAMBA_IMPLS:
        raise UnbuildableRow(f"unknown mamba_fused impl {impl!r}; known: {', '.join(MAMBA_IMPLS)}")
    dtype = dtype_of(cfg, "fp32")
    with torch.device("meta"):
        delta = torch.zeros(batch, channels, seq, dtype=dtype)
        u = torch.zeros(batch, channels, seq, dtype=dtype)
        A = torch.zeros(channels, state, dtype=dtype)
        B = torch.zeros(batch, state, seq, dtype=dtype)
        C = torch.zeros(batch, state, seq, dtype=dtype)
    layer = mamba_torch_loop if impl == "torch_loop" else mamba_layer
    note = ("the compiled PyTorch reference: the scan a loop over the sequence, "
            f"{3 * seq} ops" if impl == "torch_loop"
            else "the scan is one two-input VectorE pass; intermediates go through HBM")
    return Workload("mamba_fused", [Phase("kernel", inference(lambda: layer(delta, A, B, u, C)))],
                    cfg.get("unit", "us"), items=batch, notes=[note])


# The ``params`` column's fields (``;``-separated) per workload, as config keys.
OPLEVEL_PARAMS: dict[str, tuple[str, ...]] = {
    "mm_t": ("M", "K", "N"), "silu": ("M", "N"), "adamw": ("M", "N"), "all_reduce": ("ranks", "bytes"),
    "all_gather": ("ranks", "bytes"), "reduce_scatter": ("ranks", "bytes"),
}
# The collectives among them (nccom-test's operations; ``bytes``: nccom-test's size(B), the
# all-reduce's buffer, the all-gather's gathered output, the reduce-scatter's input).
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def oplevel_config(workload: str, params: str, dtype: str) -> str:
    """An op-level row's ``params`` and ``dtype`` columns as a ``key=value;...`` config (unit us):
    ``oplevel_config("mm_t", "512;512;512", "bf16") == "M=512;K=512;N=512;dtype=bf16;unit=us"``."""
    if workload not in OPLEVEL_PARAMS:
        raise UnbuildableRow(f"unknown op-level workload {workload!r}; known: {', '.join(OPLEVEL_PARAMS)}")
    names, values = OPLEVEL_PARAMS[workload], params.split(";")
    if len(values) != len(names):
        raise UnbuildableRow(f"{workload} params {params!r}: expected {len(names)} fields "
                         f"({';'.join(names)})")
    return ";".join(f"{k}={v.strip()}" for k, v in zip(names, values)) + f";dtype={dtype};unit=us"


def _kernel(kind: str, fn: Callable[[], Any], notes: list[str]) -> Workload:
    return Workload(kind, [Phase("graph", fn)], "us", notes=notes)


def build_mm_t(cfg: dict[str, Any], **_: Any) -> Workload:
    m, k, n = int(cfg["M"]), int(cfg["K"]), int(cfg["N"])
    dtype = dtype_of(cfg)
    with torch.device("meta"):
        a = torch.zeros(k, m, dtype=dtype)  # the left operand stored transposed, as NKI's lhsT
        b = torch.zeros(k, n, dtype=dtype)
    return _kernel("mm_t", inference(lambda: a.t() @ b),
                   ["a.t() @ b with a[K,M] stored transposed: one aten::mm on a transposed view"])


def build_silu(cfg: dict[str, Any], **_: Any) -> Workload:
    m, n = int(cfg["M"]), int(cfg["N"])
    with torch.device("meta"):
        x = torch.zeros(m, n, dtype=dtype_of(cfg))
    return _kernel("silu", inference(lambda: torch.nn.functional.silu(x)), [])


def build_adamw(cfg: dict[str, Any], **_: Any) -> Workload:
    m, n = int(cfg["M"]), int(cfg["N"])
    dtype = dtype_of(cfg)
    with torch.device("meta"):
        param, grad, exp_avg, exp_avg_sq = (torch.zeros(m, n, dtype=dtype) for _ in range(4))
        step = torch.ones((), dtype=torch.float32)

    def update() -> None:
        # torch._fused_adamw_ runs on meta; torch.optim.AdamW(fused=True) refuses meta params and
        # the single-tensor and foreach paths issue a dozen separate ops per update, which the
        # published kernel (one pass over param, grad, m and v) is not.
        with torch.no_grad():
            torch._fused_adamw_([param], [grad], [exp_avg], [exp_avg_sq], [], [step], lr=1e-3,
                                beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                                amsgrad=False, maximize=False)

    return _kernel("adamw", update,
                   ["one torch._fused_adamw_ call: param, m and v updated in place from the grad in "
                    "one pass (the step counter's increment, a scalar op, left out)"])


def _collective(kind: str, cfg: dict[str, Any]) -> Workload:
    """One collective over a fake process group of ``ranks`` ranks, nccom-test's ``size(B)`` =
    ``bytes``: the all-reduce's buffer, the all-gather's gathered output (each rank's input is
    1 / ranks of it), the reduce-scatter's input."""
    ranks, size = int(cfg["ranks"]), int(cfg["bytes"])
    dtype = dtype_of(cfg, "fp32")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if size % itemsize:
        raise UnbuildableRow(f"{kind} bytes={size} is not a whole number of {dtype} elements")
    elements = size // itemsize
    if kind != "all_reduce" and elements % ranks:
        raise UnbuildableRow(f"{kind} bytes={size}: {elements} elements do not split over {ranks} ranks")
    with torch.device("meta"):
        buffer = torch.zeros(elements // ranks if kind == "all_gather" else elements, dtype=dtype)

    def run() -> None:
        ensure_group(ranks)  # made in the warm-up run, outside the profiled one
        if kind == "all_reduce":
            all_reduce(buffer)
        elif kind == "all_gather":
            all_gather(buffer, ranks)
        else:
            out = torch.ops._c10d_functional.reduce_scatter_tensor(buffer, "sum", ranks, group_name())
            torch.ops._c10d_functional.wait_tensor(out)

    return _kernel(kind, inference(run),
                   [f"_c10d_functional.{kind} + wait_tensor on a fake process group of {ranks} ranks"])


def build_all_reduce(cfg: dict[str, Any], **_: Any) -> Workload:
    return _collective("all_reduce", cfg)


def build_all_gather(cfg: dict[str, Any], **_: Any) -> Workload:
    return _collective("all_gather", cfg)


def build_reduce_scatter(cfg: dict[str, Any], **_: Any) -> Workload:
    return _collective("reduce_scatter", cfg)


BUILDERS = {"mm_t": build_mm_t, "silu": build_silu, "adamw": build_adamw, "all_reduce": build_all_reduce,
            "all_gather": build_all_gather, "reduce_scatter": build_reduce_scatter,
            "mamba_fused": build_mamba_fused}
