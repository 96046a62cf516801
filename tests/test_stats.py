"""gate/stats.py: the permutation test the gate uses on measured rounds, checked on known inputs."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_neuronprof.gate.stats import (PERMUTATIONS, fastest_half_mean, median_low,
                                          min_rounds, permutation_p, smallest_p)


def test_lower_median():
    assert median_low([3, 1, 4, 2]) == 2 and median_low([5]) == 5 and median_low([]) == 0


def test_fastest_half_mean():
    assert fastest_half_mean([5.0, 1.0, 3.0, 2.0]) == 1.5  # 1 and 2
    assert fastest_half_mean([5.0, 1.0, 3.0]) == 2.0  # 1 and 3: the median is in
    assert fastest_half_mean([7.0]) == 7.0 and fastest_half_mean([]) == 0.0


def test_permutation_p_is_exact_for_small_samples():
    # complete separation of 5 and 5: one split of C(10, 5) = 252 is as extreme
    assert permutation_p([1, 2, 3, 4, 5], [11, 12, 13, 14, 15]) == pytest.approx(1 / 252)
    assert permutation_p([11, 12, 13, 14, 15], [1, 2, 3, 4, 5], "less") == pytest.approx(1 / 252)
    assert permutation_p([11, 12, 13, 14, 15], [1, 2, 3, 4, 5], "greater") == 1.0
    # 3 and 3: the fastest halves are the two smallest of each side, the observed ratio is
    # mean(3, 4) / mean(1, 2) = 7/3; the p-value is the share of the C(6, 3) = 20 splits whose
    # ratio is at least that, counted here by brute force
    baseline, current = [1.0, 2.0, 6.0], [4.0, 5.0, 3.0]
    observed = fastest_half_mean(current) / fastest_half_mean(baseline)
    pool = baseline + current
    count = 0
    for chosen in itertools.combinations(range(6), 3):
        old = [pool[i] for i in chosen]
        new = [pool[i] for i in range(6) if i not in chosen]
        count += fastest_half_mean(new) / fastest_half_mean(old) >= observed
    assert permutation_p(baseline, current) == pytest.approx(count / 20)
    assert permutation_p([], [1.0]) == 1.0
    with pytest.raises(ValueError):
        permutation_p([1.0], [2.0], "two-sided")


def test_permutation_p_of_many_rounds_is_a_fixed_seed_estimate():
    baseline = [100 + (i * 37) % 23 for i in range(20)]
    shifted = [v * 1.3 for v in baseline]
    assert math.comb(40, 20) > PERMUTATIONS
    p = permutation_p(baseline, shifted)
    assert p == permutation_p(baseline, shifted)  # deterministic
    assert p == pytest.approx(1 / (PERMUTATIONS + 1))  # no random split is as extreme
    same = permutation_p(baseline, list(reversed(baseline)))
    assert 0.3 < same <= 1.0


def test_permutation_test_holds_its_level_under_no_change():
    """Rounds with contention bursts, both sides from the same distribution: p < alpha in about
    alpha of the cases (every split enumerated: 6 rounds a side, 924 splits)."""
    import random

    rng = random.Random(7)

    def rounds():
        return [100 * (1 + rng.expovariate(20)) + (rng.random() < 0.2) * rng.uniform(0, 80)
                for _ in range(6)]

    ps = [permutation_p(rounds(), rounds()) for _ in range(150)]
    assert sum(p < 0.05 for p in ps) / len(ps) < 0.1
    assert sum(p < 0.2 for p in ps) / len(ps) == pytest.approx(0.2, abs=0.08)


def test_fewest_rounds_for_a_significant_change():
    assert min_rounds(0.01) == 5  # 1/C(8,4) = 0.014, 1/C(10,5) = 0.004
    assert min_rounds(0.05) == 4
    assert smallest_p(4, 4) > 0.01 > smallest_p(5, 5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=6),
       st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=6))
def test_p_values_are_probabilities_never_below_the_smallest_possible(baseline, current):
    for alternative in ("greater", "less"):
        p = permutation_p(baseline, current, alternative)
        assert smallest_p(len(baseline), len(current)) - 1e-12 <= p <= 1.0
