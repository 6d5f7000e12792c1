"""gemm_topk="auto": choosing the rule that benchmarks few configs where the model is sure, more where
it is not (model/auto_topk.py applies it at inference).

The spread signal of a problem: the mean range of the averaged MLP's members' log-ms predictions over
its 4 best configs (`MLPModel.member_spread` computes the same for one problem). The rule doubles k
each time the spread doubles past a threshold:

    k = 1 if spread <= s0, 2 if <= 2 s0, 4 if <= 4 s0, ... capped at `cap`

`s0` is chosen on the validation problems: the best score at a mean k within the budget.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kernel_select.model.auto_topk import SPREAD_TOP, spread_k
from kernel_select.offline.metrics import best_in_top_k, geomean, oracle_ms

AUTO_CAP = 8  # the gemm_auto_topk_cap knob's default
AUTO_MEAN_K_BUDGET = 2.5  # the target: at most 2.5 configs per problem on average


def auto_k(spread: np.ndarray, s0: float, cap: int = AUTO_CAP) -> np.ndarray:
    """The spread rule with a floor of 1 (model/auto_topk.py's `spread_k`)."""
    return spread_k(spread, s0, cap, floor=1)


def members_spread(groups: np.ndarray, members: np.ndarray, ensemble: np.ndarray,
                   top: int = SPREAD_TOP) -> np.ndarray:
    """Per problem: the mean over the `top` rows the ensemble ranks best of the range (max - min)
    of the members' predictions (`members`: (n_members, rows)); `MLPModel.member_spread` computes
    the same for one problem at inference."""
    order = np.lexsort((ensemble, groups))
    g = groups[order]
    rank = np.arange(len(g)) - np.searchsorted(g, g)
    chosen = order[rank < top]
    spread = members[:, chosen].max(axis=0) - members[:, chosen].min(axis=0)
    return np.bincount(groups[chosen], spread) / np.bincount(groups[chosen])


def problem_spread(groups: np.ndarray, member_a: np.ndarray, member_b: np.ndarray, ensemble: np.ndarray,
                   top: int = SPREAD_TOP) -> np.ndarray:
    """Per problem: mean |a - b| over the `top` rows the ensemble ranks best."""
    return members_spread(groups, np.stack([member_a, member_b]), ensemble, top)


def auto_scores(groups: np.ndarray, scores: np.ndarray, runtime_ms: np.ndarray, k: np.ndarray,
                cap: int = AUTO_CAP) -> np.ndarray:
    """Per problem: oracle / best measured among its own top-k[problem]."""
    ks = tuple(2 ** i for i in range(int(np.log2(cap)) + 1))
    best = best_in_top_k(groups, scores, runtime_ms, ks)
    column = np.log2(k).astype(np.int64)
    return oracle_ms(groups, runtime_ms) / best[np.arange(len(k)), column]


def choose_threshold(groups: np.ndarray, scores: np.ndarray, runtime_ms: np.ndarray, spread: np.ndarray,
                     budget: float = AUTO_MEAN_K_BUDGET, cap: int = AUTO_CAP,
                     candidates: Sequence[float] | None = None) -> float:
    """The s0 with the best geomean score whose mean k stays within `budget` (on these problems)."""
    grid = candidates if candidates is not None else np.quantile(spread, np.linspace(0.05, 0.95, 37))
    best_s0, best_score = float(np.max(spread)) + 1e-9, -np.inf  # fallback: k = 1 everywhere
    for s0 in grid:
        if s0 <= 0:
            continue
        k = auto_k(spread, float(s0), cap)
        if k.mean() > budget:
            continue
        score = float(geomean(auto_scores(groups, scores, runtime_ms, k, cap)))
        if score > best_score:
            best_s0, best_score = float(s0), score
    return best_s0


# -- the shipped MLP's rule: benchmark its near-ties ------------------------------------------------
#
# An MLP's own predictions say where it is unsure which config wins: when several configs are
# predicted within a few percent of the best, the measured winner is often any of them.
# k = the number of configs within `gap` (log ms) of the predicted best, at least `floor` and at
# most `cap` (`MLPModel.auto_topk`). Both are chosen on the validation problems: a floor of 2 pays
# where the model's single best guess is often a near-miss (one more benchmark is cheap next to a
# wrong pick), a floor of 1 where its confident picks are right.

GAP_GRID = tuple(np.round(np.linspace(0.0, 0.12, 25), 4))
FLOORS = (1, 2)


def gap_k(groups: np.ndarray, log_pred: np.ndarray, gap: float, cap: int = AUTO_CAP,
          floor: int = 1) -> np.ndarray:
    """Per problem: how many of its predictions lie within `gap` of its smallest, clipped to floor..cap."""
    best = np.full(groups.max() + 1, np.inf)
    np.minimum.at(best, groups, log_pred)
    near = np.bincount(groups, log_pred <= best[groups] + gap, minlength=len(best))
    return np.clip(near, min(floor, cap), cap).astype(np.int64)


def scores_at_k(groups: np.ndarray, scores: np.ndarray, runtime_ms: np.ndarray, k: np.ndarray) -> np.ndarray:
    """Per problem: oracle / best measured among its own k[problem] best-scored rows (any k)."""
    order = np.lexsort((scores, groups))
    g = groups[order]
    rank = np.arange(len(g)) - np.searchsorted(g, g)
    taken = order[rank < k[g]]
    best = np.full(len(k), np.inf)
    np.minimum.at(best, groups[taken], runtime_ms[taken])
    return oracle_ms(groups, runtime_ms) / best


def choose_gap(groups: np.ndarray, log_pred: np.ndarray, runtime_ms: np.ndarray,
               budget: float = AUTO_MEAN_K_BUDGET, cap: int = AUTO_CAP,
               grid: Sequence[float] = GAP_GRID, floors: Sequence[int] = FLOORS) -> dict[str, float]:
    """The (floor, gap) with the best geomean score whose mean k stays within `budget`, and what it
    scores on these problems next to a fixed top-4."""
    best = {"gap": 0.0, "floor": 1, "score": -np.inf}
    for floor in floors:
        for gap in grid:
            k = gap_k(groups, log_pred, float(gap), cap, floor)
            if k.mean() > budget:
                continue
            score = float(geomean(scores_at_k(groups, log_pred, runtime_ms, k)))
            if score > best["score"]:
                best = {"gap": float(gap), "floor": int(floor), "score": score, "mean_k": float(k.mean())}
    top4 = scores_at_k(groups, log_pred, runtime_ms, np.full(groups.max() + 1, 4))
    return {**best, "top4_score": float(geomean(top4)), "cap": cap, "budget_mean_k": budget}


def choose_auto_rule(groups: np.ndarray, log_pred: np.ndarray, runtime_ms: np.ndarray,
                     spread: np.ndarray | None = None, budget: float = AUTO_MEAN_K_BUDGET,
                     cap: int = AUTO_CAP) -> dict[str, float | str]:
    """The better of the gap rule (`choose_gap`) and, given the members' per-problem `spread`, the
    spread rule (floor x 2^doublings past s0, `model/auto_topk.spread_k`), by geomean score on these
    problems at a mean k within `budget`. The gap found is kept either way: it is the fallback where
    a caller gives the model only its predictions."""
    best: dict[str, float | str] = {"rule": "gap", **choose_gap(groups, log_pred, runtime_ms, budget, cap)}
    if spread is None:
        return best
    positive = spread[spread > 0]
    grid = np.unique(np.quantile(positive, np.linspace(0.05, 0.95, 37))) if positive.size else []
    for floor in FLOORS:
        for s0 in grid:
            k = spread_k(spread, float(s0), cap, floor)
            if k.mean() > budget:
                continue
            score = float(geomean(scores_at_k(groups, log_pred, runtime_ms, k)))
            if score > best["score"]:
                best = {**best, "rule": "spread", "spread": float(s0), "floor": int(floor), "score": score,
                        "mean_k": float(k.mean())}
    return best
