"""Statistics of measured rounds: pure functions, no numpy, no scipy, no I/O.

The gate of the measured backends (cpu, cuda, neuron) calls a change a regression only when it
is beyond the threshold *and* statistically significant. Significance is a one-sided
Mann-Whitney U test (Wilcoxon rank-sum) of the current rounds against the baseline's rounds:
it assumes nothing about the shape of the timing distribution (timings are skewed, with
outliers from preemption), only that rounds are exchangeable under "no change".

- No ties and both samples of at most ``EXACT_MAX`` rounds: the exact null distribution of U,
  counted with the recurrence f(m, n, u) = f(m, n-1, u-m) + f(m-1, n, u) (the largest value
  is either one of the n "current" values, above all m baseline values, or a baseline value).
- Otherwise: the normal approximation with the tie correction of the variance and a
  continuity correction of 0.5, as in textbooks and ``scipy.stats.mannwhitneyu``
  (method="asymptotic", use_continuity=True).
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

EXACT_MAX = 30  # rounds per side up to which the exact distribution is used (without ties)


def median(values: Sequence[float]) -> float:
    """The median (mean of the two middle values for an even count); 0.0 for no values."""
    ordered = sorted(values)
    n = len(ordered)
    if n == 0:
        return 0.0
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def median_low(values: Sequence[int]) -> int:
    """The lower median of whole numbers (a call count stays a whole number)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2] if ordered else 0


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


def smallest_p(m: int, n: int) -> float:
    """The smallest p-value m baseline and n current rounds can give (complete separation):
    with fewer rounds than this allows, no change is ever significant at a smaller alpha."""
    if m == 0 or n == 0:
        return 1.0
    return 1.0 / math.comb(m + n, m)
