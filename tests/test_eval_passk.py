"""The unbiased pass@k / pass^k / avg@k estimators against an exact reference from the formula."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest

from longcat_plugins.evaluation.passk import (
    avg_at_k,
    default_ks,
    estimate,
    parse_ks,
    pass_at_k,
    pass_hat_k,
)


def ref_pass_at_k(n: int, c: int, k: int) -> Fraction:
    """1 - C(n-c, k)/C(n, k) in exact rationals (math.comb is 0 when k > n - c)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def ref_pass_hat_k(n: int, c: int, k: int) -> Fraction:
    return Fraction(math.comb(c, k), math.comb(n, k))


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 16, 17])
def test_matches_exact_reference_for_every_c_and_k(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(float(ref_pass_at_k(n, c, k)), rel=1e-12, abs=1e-15)
            assert pass_hat_k(n, c, k) == pytest.approx(float(ref_pass_hat_k(n, c, k)), rel=1e-12, abs=1e-15)
            assert avg_at_k(n, c, k) == pytest.approx(c / n)


def test_matches_brute_force_over_subsets() -> None:
    """The definition itself: over all k-subsets of n samples, the share with >= 1 (all) correct."""
    samples = [1, 0, 0, 1, 0, 1, 0]  # n = 7, c = 3
    n, c = len(samples), sum(samples)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(samples, k))
        any_ok = Fraction(sum(any(s) for s in subsets), len(subsets))
        all_ok = Fraction(sum(all(s) for s in subsets), len(subsets))
        mean_ok = Fraction(sum(Fraction(sum(s), k) for s in subsets), len(subsets))
        assert pass_at_k(n, c, k) == pytest.approx(float(any_ok), rel=1e-12)
        assert pass_hat_k(n, c, k) == pytest.approx(float(all_ok), rel=1e-12, abs=1e-15)
        assert avg_at_k(n, c, k) == pytest.approx(float(mean_ok), rel=1e-12)


def test_edges_c_zero_and_c_n() -> None:
    for n in (1, 4, 100):
        for k in (1, n):
            assert pass_at_k(n, 0, k) == 0.0
            assert pass_hat_k(n, 0, k) == 0.0
            assert avg_at_k(n, 0, k) == 0.0
            assert pass_at_k(n, n, k) == 1.0
            assert pass_hat_k(n, n, k) == 1.0
            assert avg_at_k(n, n, k) == 1.0
    assert pass_at_k(4, 3, 2) == 1.0  # n - c < k: every pair holds a correct one


def test_stable_for_large_n() -> None:
    """n where C(n, k) overflows a float: the product form stays exact to float precision."""
    n, c, k = 5000, 3, 1000
    assert math.comb(n, k) > 10**308
    assert pass_at_k(n, c, k) == pytest.approx(float(ref_pass_at_k(n, c, k)), rel=1e-12)
    n, c, k = 5000, 4990, 700
    assert pass_hat_k(n, c, k) == pytest.approx(float(ref_pass_hat_k(n, c, k)), rel=1e-10)


def test_k_larger_than_n_names_both() -> None:
    for fn in (pass_at_k, pass_hat_k, avg_at_k):
        with pytest.raises(ValueError, match=r"k=5 is larger than n=4"):
            fn(4, 2, 5)
    with pytest.raises(ValueError, match=r"c .* got c=5, n=4"):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError, match=r"k must be >= 1"):
        pass_at_k(4, 1, 0)
    with pytest.raises(TypeError, match=r"k must be an int"):
        pass_at_k(4, 1, 1.0)  # type: ignore[arg-type]


def test_default_and_parsed_ks() -> None:
    assert default_ks(1) == [1]
    assert default_ks(4) == [1, 2, 4]
    assert default_ks(6) == [1, 2, 4, 6]
    assert default_ks(16) == [1, 2, 4, 8, 16]
    assert parse_ks("16, 1,4,4", 16) == [1, 4, 16]
    assert parse_ks([2, 1], 2) == [1, 2]
    with pytest.raises(ValueError, match=r"--k: k=32 is larger than n=16"):
        parse_ks("1,32", 16, what="--k")
    with pytest.raises(ValueError, match=r"--k: expected comma-separated integers"):
        parse_ks("1,four", 16, what="--k")
    with pytest.raises(ValueError, match=r"no k"):
        parse_ks("", 16)


def test_estimate_averages_over_prompts() -> None:
    correct = [[1, 0, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [0, 1, 1, 0]]
    got = estimate(correct, [1, 2, 4])
    for k in (1, 2, 4):
        want_any = sum(float(ref_pass_at_k(4, sum(p), k)) for p in correct) / 4
        want_all = sum(float(ref_pass_hat_k(4, sum(p), k)) for p in correct) / 4
        assert got[f"pass@{k}"] == pytest.approx(want_any, rel=1e-12)
        assert got[f"pass^{k}"] == pytest.approx(want_all, rel=1e-12)
        assert got[f"avg@{k}"] == pytest.approx(7 / 16)
    assert got["pass@1"] == pytest.approx(7 / 16)
    with pytest.raises(ValueError, match=r"prompt 1 has only 2 samples"):
        estimate([[1, 0, 0], [1, 0]], [3])
