"""The one-sided Mann-Whitney U test, for comparison with the gate's permutation test
(``benchmarks/noise.py`` prints both). Exact without ties for up to ``EXACT_MAX`` rounds a side,
else the normal approximation with tie and continuity corrections, as
``scipy.stats.mannwhitneyu``.

The gate does not use it: it has less power on noisy rounds, because contention bursts put slow
rounds on both sides. For test_mlp's matmul made 30 % larger, 20 rounds a side, its median p over
10 sessions was 0.018 (not significant at 0.01) where the fastest-half permutation test's was
0.0005. (The U test restricted to the fastest halves, without permutations, is not a valid test:
on simulated noise it called 4.7 % of no-change cases significant at 1 %.)
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

EXACT_MAX = 30  # rounds per side up to which the exact distribution is used (without ties)


def mann_whitney_u(baseline: Sequence[float], current: Sequence[float]) -> float:
    """U of ``current``: the number of (baseline, current) pairs where current is larger, ties
    counting one half. Ranges from 0 (all current below) to len(baseline) * len(current)."""
    u = 0.0
    for b in baseline:
        for c in current:
            if c > b:
                u += 1.0
            elif c == b:
                u += 0.5
    return u


@functools.lru_cache(maxsize=None)  # at most (EXACT_MAX + 1) ** 2 small tuples
def _u_counts(m: int, n: int) -> tuple[int, ...]:
    """How many of the C(m+n, m) orderings of m baseline and n current values give U = u,
    for u = 0 .. m*n (no ties)."""
    if m == 0 or n == 0:
        return (1,)
    fewer_current = _u_counts(m, n - 1)  # the largest value is a current one: it adds m
    fewer_baseline = _u_counts(m - 1, n)  # the largest value is a baseline one: it adds 0
    counts = [0] * (m * n + 1)
    for u, ways in enumerate(fewer_current):
        counts[u + m] += ways
    for u, ways in enumerate(fewer_baseline):
        counts[u] += ways
    return tuple(counts)


def exact_p_greater(u: float, m: int, n: int) -> float:
    """P(U >= u) under the null hypothesis, exactly (no ties)."""
    counts = _u_counts(m, n)
    start = max(0, math.ceil(u - 1e-9))
    return sum(counts[start:]) / math.comb(m + n, m)


def _tie_term(values: Sequence[float]) -> float:
    groups: dict[float, int] = {}
    for v in values:
        groups[v] = groups.get(v, 0) + 1
    return float(sum(t ** 3 - t for t in groups.values()))


def normal_p_greater(u: float, baseline: Sequence[float], current: Sequence[float]) -> float:
    """P(U >= u) under the null hypothesis, normal approximation with tie and continuity
    corrections."""
    m, n = len(baseline), len(current)
    total = m + n
    mean = m * n / 2.0
    variance = m * n / 12.0 * ((total + 1) - _tie_term(list(baseline) + list(current))
                               / (total * (total - 1)))
    if variance <= 0:  # every value the same: no evidence either way
        return 1.0
    z = (u - mean - 0.5) / math.sqrt(variance)
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def p_greater(baseline: Sequence[float], current: Sequence[float]) -> float:
    """One-sided Mann-Whitney p-value of "current is stochastically larger than baseline".

    1.0 when either side has no values."""
    m, n = len(baseline), len(current)
    if m == 0 or n == 0:
        return 1.0
    u = mann_whitney_u(baseline, current)
    values = list(baseline) + list(current)
    if len(set(values)) == len(values) and m <= EXACT_MAX and n <= EXACT_MAX:
        return exact_p_greater(u, m, n)
    return normal_p_greater(u, baseline, current)


def p_less(baseline: Sequence[float], current: Sequence[float]) -> float:
    """One-sided p-value of "current is stochastically smaller than baseline"."""
    return p_greater([-v for v in baseline], [-v for v in current])
