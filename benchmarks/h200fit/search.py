"""The fit: predictions of a candidate profile, the smoothed log loss, and the deterministic search
(coordinate descent with grid + golden section per parameter, polished by Nelder-Mead)."""

from __future__ import annotations

import math
from typing import Callable, Sequence

from pytest_neuronprof.costmodel.profiles import HardwareProfile, parse_profile
from pytest_neuronprof.costmodel.roofline import device_time

from .calls import Row
from .parameters import Model


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
