"""Ranking metrics: the one home of the scores every report, trainer and test uses.

All functions are pure numpy over flat per-row arrays plus `groups`, int codes 0..G-1 naming each
row's problem (every code present). A method's ranking key is `scores` (lower = better).

  oracle_ms(g)     fastest measured runtime of problem g
  score(g, k)      oracle_ms(g) / fastest measured runtime among the k best-ranked rows of g, in (0, 1]
  geomean          how scores are averaged over problems (a 2% loss counts the same on any size)
  spearman         rank correlation within each problem
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

DEFAULT_KS = (1, 2, 4, 8, 16)



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
    """Spearman rank correlation of a and b within each group (NaN for groups of < 2 rows)."""
    ra, rb = _rank_in_group(groups, a), _rank_in_group(groups, b)
    count = np.bincount(groups).astype(np.float64)
    mean = (count - 1) / 2  # ranks are 0..count-1 in every group
    da, db = ra - mean[groups], rb - mean[groups]
    cov = np.bincount(groups, da * db)
    var = np.sqrt(np.bincount(groups, da * da) * np.bincount(groups, db * db))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(var > 0, cov / var, np.nan)


def _rank_in_group(groups: np.ndarray, values: np.ndarray) -> np.ndarray:
    order = np.lexsort((values, groups))
    g = groups[order]
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    rank = np.empty(len(values), dtype=np.float64)
    rank[order] = np.arange(len(g)) - np.repeat(starts, np.diff(np.r_[starts, len(g)]))
    return rank


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
