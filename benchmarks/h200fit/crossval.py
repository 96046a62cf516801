"""Error figures and cross-validation: each held-out row predicted by a fit that did not see it,
with folds dealt within each op (k-fold), at each op's extremes, by size bands, or by whole
classes of ops."""

from __future__ import annotations

import statistics
from typing import Sequence

from pytest_neuronprof.costmodel.profiles import parse_profile

from .calls import Row
from .parameters import Model
from .search import fit, predict


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
