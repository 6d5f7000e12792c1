"""`topk="auto"`: k from the ensemble spread, scored per problem, threshold chosen within the budget."""

from __future__ import annotations

import numpy as np

from kernel_select.offline.training import uncertainty


def test_auto_k_doubles_with_the_spread_and_is_capped():
    spread = np.array([0.0, 0.05, 0.1, 0.15, 0.3, 0.5, 5.0])
    assert uncertainty.auto_k(spread, 0.1, cap=8).tolist() == [1, 1, 1, 2, 4, 8, 8]


def test_problem_spread_looks_at_the_ensembles_best_rows():
    groups = np.array([0, 0, 0, 1, 1])
    a, b = np.array([1.0, 2.0, 3.0, 0.0, 0.0]), np.array([1.0, 2.5, 9.0, 1.0, 3.0])
    ensemble = np.array([0.0, 1.0, 2.0, 0.0, 1.0])
    np.testing.assert_allclose(uncertainty.problem_spread(groups, a, b, ensemble, top=2), [0.25, 2.0])


def test_auto_scores_use_each_problems_own_k():
    groups = np.array([0, 0, 0, 1, 1, 1])
    scores = np.array([0.0, 1.0, 2.0, 0.0, 1.0, 2.0])
    runtime = np.array([2.0, 1.0, 3.0, 2.0, 1.0, 3.0])  # the model's top-1 misses in both
    per_problem = uncertainty.auto_scores(groups, scores, runtime, np.array([1, 2]), cap=4)
    np.testing.assert_allclose(per_problem, [0.5, 1.0])


def test_threshold_respects_the_mean_k_budget():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(50), 8)
    runtime = rng.uniform(1, 2, len(groups))
    scores = runtime + rng.normal(0, 0.3, len(groups))
    spread = rng.uniform(0, 1, 50)
    s0 = uncertainty.choose_threshold(groups, scores, runtime, spread, budget=2.0)
    assert uncertainty.auto_k(spread, s0).mean() <= 2.0
