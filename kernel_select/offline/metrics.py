"""Ranking metrics: the one home of the scores every report, trainer and test uses.

All functions are pure numpy (and scipy.stats) over flat per-row arrays plus `groups`, int codes
0..G-1 naming each row's problem (every code present). A method's ranking key is `scores` (lower =
better).

  oracle_ms(g)     fastest measured runtime of problem g
  score(g, k)      oracle_ms(g) / fastest measured runtime among the k best-ranked rows of g, in (0, 1]
  geomean          how scores are averaged over problems (a 2% loss counts the same on any size)
  spearman         rank correlation within each problem (scipy's, tied values share their mean rank)
  paired_bootstrap geomean over problems of method a / method b, with a bootstrap confidence
                   interval that resamples problems (each problem's pair of values stays together)
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from kernel_select.errors import DatasetError

DEFAULT_KS = (1, 2, 4, 8, 16)
#: What `paired_bootstrap` reports unless told otherwise.
CONFIDENCE = 0.95
RESAMPLES = 5000


def best_in_top_k(groups: np.ndarray, scores: np.ndarray, runtime_ms: np.ndarray,
                  ks: Sequence[int]) -> np.ndarray:
    """Per group, the fastest runtime among the k rows with the lowest score, for each k.

    Args:
        groups: int codes 0..G-1, every code present. Rows need not be sorted.
        scores: the method's ranking key per row (lower = better; ties keep row order).
        runtime_ms: measured runtime per row.
    Returns:
        float64 array (G, len(ks)).
    """
    order = np.lexsort((scores, groups))  # stable: ties keep the input order
    g, r = groups[order], runtime_ms[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    rank = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    return np.stack([np.minimum.reduceat(np.where(rank < k, r, np.inf), starts) for k in ks], axis=1)


def oracle_ms(groups: np.ndarray, runtime_ms: np.ndarray) -> np.ndarray:
    """Fastest runtime per group code."""
    best = np.full(groups.max() + 1, np.inf)
    np.minimum.at(best, groups, runtime_ms)
    return best


def topk_scores(groups: np.ndarray, scores: np.ndarray, runtime_ms: np.ndarray,
                ks: Sequence[int] = DEFAULT_KS) -> np.ndarray:
    """score(k) = oracle / best-in-top-k, per group and k: array (G, len(ks)) in (0, 1]."""
    return oracle_ms(groups, runtime_ms)[:, None] / best_in_top_k(groups, scores, runtime_ms, ks)


def geomean(x: np.ndarray, axis: int = 0) -> np.ndarray:
    return np.exp(np.mean(np.log(x), axis=axis))


def spearman_per_group(groups: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman rank correlation of a and b within each group (`scipy.stats.spearmanr`: tied values
    share their mean rank, so the result does not depend on the order of the rows). NaN for a group
    of fewer than 2 rows or one whose a or b is constant."""
    order = np.argsort(groups, kind="stable")
    bounds = np.flatnonzero(np.diff(groups[order])) + 1
    rho = np.full(groups.max() + 1, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", stats.ConstantInputWarning)  # a constant group is NaN, as documented
        for rows in np.split(order, bounds):
            if len(rows) >= 2:
                rho[groups[rows[0]]] = stats.spearmanr(a[rows], b[rows]).statistic
    return rho


@dataclass(frozen=True)
class PairedRatio:
    """Geomean over problems of a / b and its confidence interval (`paired_bootstrap`)."""

    ratio: float
    low: float
    high: float
    problems: int
    confidence: float = CONFIDENCE
    resamples: int = RESAMPLES

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)

    def short(self) -> str:
        """"0.994 [0.985, 1.002]": the ratio and its interval."""
        return f"{self.ratio:.3f} [{self.low:.3f}, {self.high:.3f}]"


def paired_bootstrap(a: np.ndarray, b: np.ndarray, *, confidence: float = CONFIDENCE,
                     resamples: int = RESAMPLES, seed: int = 0) -> PairedRatio:
    """Geomean over problems of a[i] / b[i], and its `confidence` interval by a paired bootstrap
    (`scipy.stats.bootstrap`, BCa): problems are resampled with their pair of values, so what the
    two methods share (a problem that is hard for both) cancels in each resample's ratio.

    Args:
        a, b: one positive value per problem each, in the same problem order (two methods' scores,
            or their kernel times).
        seed: the resampling's seed (the same data and seed give the same interval).
    Raises:
        DatasetError: a and b differ in length, are empty, or hold a value that is not positive.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or len(a) == 0:
        raise DatasetError(f"paired_bootstrap: expected two equal-length 1-d arrays, got shapes "
                           f"{a.shape} and {b.shape}")
    if not (np.all(a > 0) and np.all(b > 0) and np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise DatasetError("paired_bootstrap: every value must be positive and finite (a geomean of ratios)")
    log_ratio = np.log(a) - np.log(b)
    ratio = float(np.exp(log_ratio.mean()))
    if len(a) < 2 or np.ptp(log_ratio) == 0:
        # Every resample gives the same ratio (BCa is undefined there): the interval is the point.
        return PairedRatio(ratio, ratio, ratio, len(a), confidence, resamples)

    def geomean_ratio(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.exp(np.mean(np.log(x) - np.log(y), axis=axis))

    result = stats.bootstrap((a, b), geomean_ratio, paired=True, vectorized=True, n_resamples=resamples,
                             confidence_level=confidence, rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return PairedRatio(ratio, float(low), float(high), len(a), confidence, resamples)


def topk_dict(per_problem: np.ndarray, ks: Sequence[int]) -> dict[str, float]:
    """{"k": geometric mean over problems} of a (problems, len(ks)) score array."""
    return {str(k): float(v) for k, v in zip(ks, geomean(per_problem))}


def measured_lookup(groups: np.ndarray, keys: Iterable[tuple], runtime_ms: np.ndarray) -> dict[tuple, float]:
    """(group code, config key) -> runtime, one key per row; the fastest when a key repeats."""
    lookup: dict[tuple, float] = {}
    for g, key, t in zip(groups.tolist(), keys, runtime_ms.tolist()):
        if t < lookup.get((g, key), np.inf):
            lookup[(g, key)] = t
    return lookup
