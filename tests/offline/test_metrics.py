"""Spearman per problem and the paired bootstrap, on data small enough to check by hand."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from kernel_select.errors import DatasetError
from kernel_select.offline.metrics import paired_bootstrap, spearman_per_group


def test_tied_values_share_their_mean_rank():
    # a's ranks are 1.5, 1.5, 3, 4 against b's 1, 2, 3, 4: rho = 4.5 / sqrt(4.5 * 5) = 3 / sqrt(10)
    groups = np.zeros(4, dtype=np.int64)
    a, b = np.array([1.0, 1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0, 4.0])
    assert spearman_per_group(groups, a, b) == pytest.approx([3 / np.sqrt(10)])
    # Ranking ties by row order gave 1.0 here and 0.8 with the rows reversed.
    assert spearman_per_group(groups, a[::-1], b[::-1]) == pytest.approx([3 / np.sqrt(10)])


def test_spearman_does_not_depend_on_the_order_of_rows():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(5), 40)
    a = rng.integers(0, 6, len(groups)).astype(float)  # many ties, as capped timings have
    b = a + rng.integers(0, 3, len(groups))
    expected = [stats.spearmanr(a[groups == g], b[groups == g]).statistic for g in range(5)]
    shuffled = rng.permutation(len(groups))
    np.testing.assert_allclose(spearman_per_group(groups, a, b), expected)
    np.testing.assert_allclose(spearman_per_group(groups[shuffled], a[shuffled], b[shuffled]), expected)


def test_spearman_is_nan_for_a_single_row_or_a_constant_group():
    groups = np.array([0, 1, 1, 2, 2, 2])
    a = np.array([1.0, 2.0, 2.0, 1.0, 2.0, 3.0])
    b = np.array([5.0, 1.0, 2.0, 3.0, 2.0, 1.0])
    rho = spearman_per_group(groups, a, b)
    assert np.isnan(rho[0]) and np.isnan(rho[1]) and rho[2] == pytest.approx(-1.0)


def test_paired_bootstrap_of_a_constant_ratio_is_that_ratio():
    result = paired_bootstrap(np.array([2.0, 20.0, 0.2]), np.array([1.0, 10.0, 0.1]))
    assert (result.ratio, result.low, result.high, result.problems) == pytest.approx((2.0, 2.0, 2.0, 3))


def test_paired_bootstrap_resamples_problems_with_their_pair():
    # The problems differ by 10^6 in size, the ratios only between 0.95 and 1.05: a paired interval
    # stays inside the ratios' range (every resample's geomean ratio does), an unpaired one would not.
    rng = np.random.default_rng(1)
    b = 10.0 ** rng.uniform(-3, 3, 50)
    ratios = rng.uniform(0.95, 1.05, 50)
    result = paired_bootstrap(b * ratios, b)
    assert result.ratio == pytest.approx(np.exp(np.mean(np.log(ratios))))
    assert ratios.min() <= result.low < result.ratio < result.high <= ratios.max()
    assert result.high - result.low < 0.05
    assert paired_bootstrap(b * ratios, b) == result  # seeded: the same data give the same interval
    swapped = paired_bootstrap(b, b * ratios)
    assert swapped.ratio == pytest.approx(1 / result.ratio)


def test_paired_bootstrap_interval_narrows_with_more_problems():
    rng = np.random.default_rng(2)
    ratios = rng.lognormal(0.0, 0.1, 400)
    few, many = paired_bootstrap(ratios[:20], np.ones(20)), paired_bootstrap(ratios, np.ones(400))
    assert many.high - many.low < few.high - few.low
    assert many.short() == f"{many.ratio:.3f} [{many.low:.3f}, {many.high:.3f}]"
    assert many.as_dict() == {"ratio": many.ratio, "low": many.low, "high": many.high, "problems": 400,
                              "confidence": 0.95, "resamples": 5000}


@pytest.mark.parametrize("a, b", [([1.0, 2.0], [1.0]), ([], []), ([1.0, 0.0], [1.0, 1.0]),
                                  ([1.0, np.inf], [1.0, 1.0])])
def test_paired_bootstrap_rejects_unpaired_or_non_positive_values(a, b):
    with pytest.raises(DatasetError, match="paired_bootstrap"):
        paired_bootstrap(np.array(a), np.array(b))
