"""`topk="auto"`: how many configs to benchmark for one GEMM, from how unsure the model is.

Two rules, each with a floor (the fewest configs ever benchmarked: 1, or 2 where the model's single
best guess is often a near-miss) and a cap (`auto_topk_cap`):

  gap     k = the configs predicted within `gap` (log ms) of the predicted best. Any model can
          apply it to its own predictions: near-ties are where ranking errors cost.
  spread  k = floor, doubled each time the members' disagreement doubles past `s0`. The
          disagreement of a problem is the mean, over the SPREAD_TOP configs predicted fastest,
          of the range (max - min) of the members' log-ms predictions: a second opinion, which
          the gap rule does not have. Needs a model of several members.

Training chooses the rule and its parameters on the validation problems
(`kernel_select.offline.training.uncertainty`) and writes them in the model card.

Neither rule applies outside the model's training data (`hedge_reason`): for a problem whose op,
dtype, layout or size the training data did not cover, the predictions and the members' disagreement
are both extrapolations, so a small k there is a guess; auto benchmarks the cap instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np

def hedge_reason(model: Any, problem: Any) -> str:
    """Why `topk="auto"` benchmarks the cap for `problem` rather than trust `model`'s own estimate (a line
    for the log), or "" where the model was trained on problems like it (`PerformanceModel.domain_gap`)."""
    return "" if problem is None else model.domain_gap(problem)


#: Configs whose member disagreement measures a problem's uncertainty: the ones a top-4 benchmarks.
SPREAD_TOP = 4


def auto_k_from_gap(runtime_ms: np.ndarray, gap: float, cap: int, floor: int = 1) -> int:
    """The number of predictions within `gap` (log ms) of the smallest, between `floor` and `cap`
    (and never more than there are predictions)."""
    log_ms = np.log(np.asarray(runtime_ms, dtype=np.float64))
    if log_ms.size == 0:
        return 1
    near = int(np.count_nonzero(log_ms <= log_ms.min() + gap))
    return int(max(1, min(max(near, floor), cap, log_ms.size)))


def spread_k(spread: Any, s0: float, cap: int, floor: int = 1) -> np.ndarray:
    """k = floor while the spread is at most s0, doubling with every doubling of the spread beyond
    it, at most `cap` (elementwise over an array of spreads)."""
    doublings = np.ceil(np.log2(np.maximum(np.asarray(spread, dtype=np.float64) / s0, 1.0)))
    return np.minimum(floor * 2 ** doublings, cap).astype(np.int64)
