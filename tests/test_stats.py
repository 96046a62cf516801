"""stats.py: the permutation test the gate uses on measured rounds, and the Mann-Whitney U test
kept for comparison, checked on known inputs."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_neuronprof.session import min_measured_rounds
from pytest_neuronprof.stats import (PERMUTATIONS, _u_counts, exact_p_greater, fastest_half_mean,
                                     mann_whitney_u, median, median_low, normal_p_greater, p_greater,
                                     p_less, permutation_p, smallest_p)


def test_medians():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert median([]) == 0.0
    assert median_low([3, 1, 4, 2]) == 2 and median_low([5]) == 5 and median_low([]) == 0


def test_u_counts_pairs_with_ties_as_halves():
    assert mann_whitney_u([1, 2, 3], [4, 5, 6]) == 9  # every current value above every baseline one
    assert mann_whitney_u([4, 5, 6], [1, 2, 3]) == 0
    assert mann_whitney_u([1, 2], [2, 3]) == 3.5  # 2 vs 2 is a tie: one half
    # U of one side plus U of the other is m * n
    a, b = [1.5, 3.0, 7.0, 2.0], [2.0, 4.0, 1.0]
    assert mann_whitney_u(a, b) + mann_whitney_u(b, a) == len(a) * len(b)


def test_exact_distribution_matches_brute_force_enumeration():
    """_u_counts(m, n)[u]: how many placements of n current values among m + n sorted values
    give U = u; checked against listing every placement."""
    for m, n in [(1, 1), (2, 3), (3, 3), (4, 2), (5, 4)]:
        counts = [0] * (m * n + 1)
        for current in itertools.combinations(range(m + n), n):
            baseline = [i for i in range(m + n) if i not in current]
            counts[int(mann_whitney_u(baseline, list(current)))] += 1
        assert tuple(counts) == _u_counts(m, n)
        assert sum(counts) == math.comb(m + n, m)


def test_exact_p_values_of_known_inputs():
    # complete separation: 1 / C(m + n, m)
    assert p_greater([1, 2, 3], [4, 5, 6]) == pytest.approx(1 / 20)
    assert p_greater(list(range(5)), list(range(10, 15))) == pytest.approx(1 / 252)
    assert smallest_p(5, 5) == pytest.approx(1 / 252) and smallest_p(0, 3) == 1.0
    # scipy's documented example (scipy.stats.mannwhitneyu, males vs females): exact two-sided
    # p = 0.1111 for U = 17, so the one-sided "males larger" p is 1/18
    males, females = [19, 22, 16, 29, 24], [20, 11, 17, 12]
    assert mann_whitney_u(females, males) == 17
    assert p_greater(females, males) == pytest.approx(1 / 18)
    # reversed roles: the other tail
    assert p_less([4, 5, 6], [1, 2, 3]) == pytest.approx(1 / 20)
    assert p_greater([4, 5, 6], [1, 2, 3]) == 1.0


def test_normal_approximation_of_known_inputs():
    males, females = [19, 22, 16, 29, 24], [20, 11, 17, 12]
    # scipy's asymptotic two-sided p for the example above is 0.11134688653314041
    assert normal_p_greater(17, females, males) == pytest.approx(0.11134688653314041 / 2, rel=1e-9)
    # with ties the normal approximation is used; by hand: U = 1 + 0.5 + 0.5 + 3 + 3 = 8 of 9;
    # ties: 2 three times, 3 twice: var = 3*3/12 * (7 - ((27-3) + (8-2)) / (6*5)) = 0.75 * 6 = 4.5
    baseline, current = [1, 2, 2], [2, 3, 3]
    assert mann_whitney_u(baseline, current) == 8
    z = (8 - 4.5 - 0.5) / math.sqrt(4.5)
    assert p_greater(baseline, current) == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)), rel=1e-12)
    assert p_greater([5, 5, 5], [5, 5, 5]) == 1.0  # no variance: no evidence
    assert p_greater([], [1.0]) == 1.0


def test_normal_approximation_is_close_to_the_exact_test_for_larger_samples():
    baseline = [100 + (i * 37) % 23 for i in range(20)]
    current = [104 + (i * 41) % 23 + 0.5 for i in range(20)]  # shifted, no ties
    u = mann_whitney_u(baseline, current)
    assert abs(exact_p_greater(u, 20, 20) - normal_p_greater(u, baseline, current)) < 0.005


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
    assert min_measured_rounds(0.01) == 5  # 1/C(8,4) = 0.014, 1/C(10,5) = 0.004
    assert min_measured_rounds(0.05) == 4
    assert smallest_p(4, 4) > 0.01 > smallest_p(5, 5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=12),
       st.lists(st.floats(0, 1e4, allow_nan=False), min_size=1, max_size=12))
def test_p_values_are_probabilities_and_complete_separation_is_the_smallest(baseline, current):
    assert 0.0 <= p_greater(baseline, current) <= 1.0
    assert 0.0 <= p_less(baseline, current) <= 1.0
    above = [max(baseline) + 1.0 + i for i in range(len(current))]  # all above, no ties
    if len(set(baseline)) == len(baseline):
        assert p_greater(baseline, above) == pytest.approx(smallest_p(len(baseline), len(above)))
