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

The Mann-Whitney U test, which this replaced, lives in ``benchmarks/mannwhitney.py``:
``benchmarks/noise.py`` prints both for comparison.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Sequence

PERMUTATIONS = 2000  # splits of the permutation test: above this many, a random sample of them
SEED = 20240611  # of that sample: fixed, so that a p-value is a function of the rounds alone


def median_low(values: Sequence[int]) -> int:
    """The lower median of whole numbers (a call count stays a whole number)."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2] if ordered else 0


def smallest_p(m: int, n: int) -> float:
    """The smallest p-value m baseline and n current rounds can give (complete separation):
    with fewer rounds than this allows, no change is ever significant at a smaller alpha."""
    if m == 0 or n == 0:
        return 1.0
    return 1.0 / math.comb(m + n, m)


def min_rounds(alpha: float) -> int:
    """The fewest rounds a side with which a change can be significant at ``alpha``."""
    rounds = 1
    while smallest_p(rounds, rounds) >= alpha and rounds < 1000:
        rounds += 1
    return rounds


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
