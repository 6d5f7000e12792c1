"""gemm_topk="auto": the near-tie rule, its knobs, and how it is chosen and measured offline."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_select import knobs, options
from kernel_select.errors import ConfigError, OptionError
from kernel_select.model import get_model
from kernel_select.model.auto_topk import auto_k_from_gap
from kernel_select.offline.training.uncertainty import choose_gap, gap_k, scores_at_k
from kernel_select.problem import Problem
from kernel_select.decision import AUTO_FALLBACK, resolve_k, select
from tests.synthetic import untrained_mlp


def test_the_knobs_accept_auto_and_a_cap():
    assert options.parse_topk("Auto") == options.AUTO == "auto"
    assert options.parse_auto_topk_cap("3") == 3
    for bad in (0, "x", True, 2.5):
        with pytest.raises(OptionError, match="gemm_auto_topk_cap"):
            options.parse_auto_topk_cap(bad)
    with knobs.patch(gemm_topk="auto", gemm_auto_topk_cap=2):
        assert knobs.gemm_topk == "auto" and knobs.gemm_auto_topk_cap == 2


def test_k_counts_the_near_ties_of_the_best_prediction_within_the_cap():
    ms = np.array([1.0, 1.004, 1.02, 1.5, 1.009])
    assert auto_k_from_gap(ms, 0.01, 8) == 3
    assert auto_k_from_gap(ms, 0.0, 8) == 1
    assert auto_k_from_gap(ms, 1.0, 2) == 2
    # a floor of 2 adds the runner-up where the model sees one clear winner, never above the cap
    assert auto_k_from_gap(ms, 0.0, 8, floor=2) == 2 and auto_k_from_gap(ms, 0.01, 8, floor=2) == 3
    assert auto_k_from_gap(ms, 0.0, 1, floor=2) == 1 and auto_k_from_gap(ms[:1], 0.0, 8, floor=2) == 1


def test_resolve_k_auto_asks_the_model_and_falls_back_to_top4():
    model = untrained_mlp()
    predicted = np.array([1.0, 1.0, 2.0])
    assert resolve_k("auto", 3, model=model, predicted_ms=predicted, cap=8) == 2
    analytical = get_model("analytical", "h100")
    assert resolve_k("auto", 3, model=analytical, predicted_ms=predicted, cap=8) == AUTO_FALLBACK
    assert resolve_k("auto", 3, model=analytical, predicted_ms=predicted, cap=2) == 2
    with pytest.raises(ConfigError, match="auto"):
        resolve_k("auto", 3)


def test_select_auto_returns_between_one_and_the_cap():
    chosen = select(Problem(560, 1280, 3420, "bfloat16"), model=untrained_mlp(), gemm_topk="auto", auto_cap=3)
    assert 1 <= len(chosen.choices) <= 3 and not chosen.auto_at_cap


def test_gap_k_and_scores_at_k_per_problem():
    groups = np.array([0, 0, 0, 1, 1])
    log_pred = np.log([1.0, 1.005, 2.0, 3.0, 1.0])
    runtime = np.array([2.0, 1.0, 3.0, 1.0, 2.0])
    assert gap_k(groups, log_pred, 0.01).tolist() == [2, 1]
    assert gap_k(groups, log_pred, 0.01, floor=2).tolist() == [2, 2]
    assert gap_k(groups, log_pred, 0.01, cap=1, floor=2).tolist() == [1, 1]
    # problem 0 takes its 2 best-predicted (measured 2.0 and 1.0: the oracle); problem 1 only its first (2.0)
    assert scores_at_k(groups, log_pred, runtime, np.array([2, 1])).tolist() == [1.0, 0.5]


def test_choose_gap_respects_the_budget():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 20)
    runtime = np.exp(rng.normal(0, 0.3, len(groups)))
    log_pred = np.log(runtime) + rng.normal(0, 0.05, len(groups))
    chosen = choose_gap(groups, log_pred, runtime, budget=2.0)
    assert chosen["mean_k"] <= 2.0 and 0 < chosen["score"] <= 1
    assert chosen["gap"] in [float(g) for g in np.round(np.linspace(0.0, 0.12, 25), 4)]
    assert chosen["floor"] in (1, 2)


def test_choose_gap_takes_a_floor_of_two_when_the_runner_up_often_wins():
    # every problem: the predicted best is measured 20% slower than the predicted runner-up, and
    # the two are predicted 20% apart (beyond any gap of the grid): only a floor of 2 finds the oracle
    groups = np.repeat(np.arange(30), 6)
    log_pred = np.tile(np.log([1.0, 1.2, 1.5, 1.6, 1.7, 1.8]), 30)
    runtime = np.tile([1.2, 1.0, 1.5, 1.6, 1.7, 1.8], 30)
    chosen = choose_gap(groups, log_pred, runtime, budget=2.5)
    assert chosen["floor"] == 2 and chosen["score"] == pytest.approx(1.0) and chosen["mean_k"] == 2
    assert choose_gap(groups, log_pred, runtime, budget=1.5)["floor"] == 1  # 2 per problem is over budget


def test_select_auto_lets_the_model_ask_its_members():
    problem = Problem(560, 1280, 3420, "bfloat16")
    model = untrained_mlp(members=2)
    model.card.hyperparameters.update(auto_topk_rule="spread", auto_topk_floor=1, auto_topk_gap=0.0,
                                      auto_topk_spread=1e-9)  # any disagreement at all: the cap
    assert len(select(problem, model=model, gemm_topk="auto", auto_cap=5).choices) == 5
    model.card.hyperparameters["auto_topk_spread"] = 1e9  # no disagreement counts: the floor
    assert len(select(problem, model=model, gemm_topk="auto", auto_cap=5).choices) == 1
