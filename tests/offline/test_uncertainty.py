"""`topk="auto"`: k from the ensemble spread, scored per problem, threshold chosen within the budget."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_members_spread_is_the_range_over_the_ensembles_best_rows():
    groups = np.array([0, 0, 0, 1, 1])
    members = np.array([[1.0, 2.0, 9.0, 1.0, 1.0],
                        [1.5, 2.0, 0.0, 1.0, 3.0],
                        [0.5, 2.5, 9.0, 1.0, 1.0]])
    ensemble = members.mean(axis=0)
    spread = uncertainty.members_spread(groups, members, ensemble, top=2)
    # problem 0: its 2 best by the mean are rows 0 (range 1.0) and 1 (0.5); problem 1: rows 3 (0) and 4 (2)
    np.testing.assert_allclose(spread, [0.75, 1.0])
    np.testing.assert_allclose(uncertainty.problem_spread(groups, members[0], members[1], ensemble, top=2),
                               uncertainty.members_spread(groups, members[:2], ensemble, top=2))


def test_choose_auto_rule_takes_the_spread_where_it_finds_the_misses():
    # 40 problems; in the 10 whose members disagree the predicted best is measured slow and the
    # 4th-best is the oracle; elsewhere the prediction is right. Only the spread can tell them apart.
    groups = np.repeat(np.arange(40), 8)
    log_pred = np.tile(np.log(np.linspace(1.0, 1.05, 8)), 40)
    runtime = np.tile(np.linspace(1.0, 2.0, 8), 40)
    unsure = np.arange(40) < 10
    for p in np.flatnonzero(unsure):
        runtime[p * 8:p * 8 + 8] = [2.0, 1.9, 1.8, 1.0, 2.1, 2.2, 2.3, 2.4]
    spread = np.where(unsure, 0.4, 0.01)
    chosen = uncertainty.choose_auto_rule(groups, log_pred, runtime, spread, budget=2.0)
    assert chosen["rule"] == "spread" and chosen["score"] == pytest.approx(1.0) and chosen["mean_k"] <= 2.0
    assert uncertainty.choose_auto_rule(groups, log_pred, runtime)["rule"] == "gap"
