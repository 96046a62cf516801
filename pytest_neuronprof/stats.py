"""Statistics of measured rounds: pure functions, no numpy, no scipy, no I/O.

The gate of the measured backends (cpu, cuda, neuron) calls a change a regression only when it
is beyond the threshold *and* statistically significant. Timing noise on a shared machine
(preemption, cache and memory-bandwidth contention, page faults) only ever adds time, in bursts
that hit some rounds and not others: the fast rounds carry the signal, the slow ones the noise.

The significance test (``permutation_p``) is a one-sided permutation test of the mean of the
fastest half of the rounds, current against baseline: the p-value is the share of the ways to
split the pooled rounds into two groups of the same sizes whose statistic is at least as
extreme as the observed one. It is exact (every split) when there are at most ``PERMUTATIONS``
splits (5 rounds a side: 252), and otherwise a Monte-Carlo estimate from ``PERMUTATIONS``
random splits with a fixed seed, so the same rounds always give the same p. It assumes only
that, with no change, rounds of both sides are exchangeable.

The Mann-Whitney U test of all rounds (``p_greater`` / ``p_less``; exact without ties for up to
``EXACT_MAX`` rounds a side, else the normal approximation with tie and continuity corrections,
as ``scipy.stats.mannwhitneyu``) is kept for comparison: ``benchmarks/noise.py`` prints both.
It has less power on noisy rounds, because contention bursts put slow rounds on both sides: for
test_mlp's matmul made 30 % larger, 20 rounds a side, its median p over 10 sessions was 0.018
(not significant at 0.01) where the fastest-half test's was 0.0005. (The U test restricted to
the fastest halves, without permutations, is not a valid test: on simulated noise it called
4.7 % of no-change cases significant at 1 %.)
"""

from __future__ import annotations

import functools
import itertools
import math
import random
from typing import Sequence

EXACT_MAX = 30  # rounds per side up to which the exact distribution is used (without ties)
PERMUTATIONS = 2000  # splits of the permutation test: above this many, a random sample of them
SEED = 20240611  # of that sample: fixed, so that a p-value is a function of the rounds alone


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


def fastest_half_mean(values: Sequence[float]) -> float:
    """The mean of the fastest (smallest) half of the values, the median included for an odd
    count: the rounds the least disturbed by noise."""
    ordered = sorted(values)
    k = max(1, (len(ordered) + 1) // 2)
    return sum(ordered[:k]) / k if ordered else 0.0


def _ratio(baseline: Sequence[float], current: Sequence[float]) -> float:
    old, new = fastest_half_mean(baseline), fastest_half_mean(current)
    if old <= 0:
        return math.inf if new > 0 else 1.0
    return new / old


def permutation_p(baseline: Sequence[float], current: Sequence[float], alternative: str = "greater",
                  permutations: int = PERMUTATIONS, seed: int = SEED) -> float:
    """One-sided permutation p-value of "current is slower" (``alternative="greater"``) or
    "faster" (``"less"``), on the ratio of the fastest-half means. 1.0 when a side is empty."""
    if alternative not in ("greater", "less"):
        raise ValueError(f"alternative must be 'greater' or 'less', got {alternative!r}")
    m, n = len(baseline), len(current)
    if m == 0 or n == 0:
        return 1.0
    sign = 1.0 if alternative == "greater" else -1.0
    observed = sign * _ratio(baseline, current)
    pool = [float(v) for v in baseline] + [float(v) for v in current]
    tolerance = 1e-12 * max(1.0, abs(observed)) if math.isfinite(observed) else 0.0
    total = math.comb(m + n, m)
    if total <= permutations:  # every split: the exact p-value
        hits = 0
        everything = range(m + n)
        for chosen in itertools.combinations(everything, m):
            picked = set(chosen)
            old = [pool[i] for i in chosen]
            new = [pool[i] for i in everything if i not in picked]
            hits += sign * _ratio(old, new) >= observed - tolerance
        return hits / total
    rng = random.Random(seed)
    hits = 0
    for _ in range(permutations):
        rng.shuffle(pool)
        hits += sign * _ratio(pool[:m], pool[m:]) >= observed - tolerance
    return (hits + 1) / (permutations + 1)  # the observed split counts as one of them
