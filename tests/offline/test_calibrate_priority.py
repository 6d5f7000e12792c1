"""The order calibrate measures compile classes in (offline/calibrate/priority.py): the domain's classes
before the extras; from a model of several members, a class of nn.Linear's GEMMs first, then those it
never trained on, then by its members' disagreement; from scratch or a single network, the fixed order.
And 5 and 15 minutes from the shipped H100 model on an H200 (the issue's run) cover what they should."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tests.synthetic import untrained_mlp

from kernel_select.device import get_device
from kernel_select.model.card import MIN_STRATUM_PROBLEMS
from kernel_select.offline.calibrate.budget import Budget
from kernel_select.offline.calibrate.priority import COVERAGE, EXTRA, member_predictions, ranked_classes
from kernel_select.offline.calibrate.start import StartModel, resolve_start
from kernel_select.offline.calibrate.classes import (
    ALL_BUCKETS,
    COVERAGE_CLASSES,
    EXTRA_CLASSES,
    class_problems,
    covering_classes,
    strata_of,
)
from kernel_select.offline.calibrate.plan import plan_calibration
from kernel_select.space import for_problem

H200 = get_device("h200")
FIXED = [(c, COVERAGE) for c in COVERAGE_CLASSES] + [(c, EXTRA) for c in EXTRA_CLASSES]


@pytest.fixture(scope="module")
def from_h100():
    """The shipped H100 model, ranking an H200's configs, as `--from h100` starts on an H200."""
    return resolve_start("h100", H200, Path("/nonexistent/h200"))


@pytest.fixture(scope="module")
def ranked_from_h100(from_h100):
    return ranked_classes(from_h100)


def _start(model) -> StartModel:
    return StartModel(folder=Path("/nonexistent"), model=model, trained_on=model.card.device)


def test_from_scratch_or_a_single_network_the_order_is_fixed():
    for start in (None, _start(untrained_mlp(members=1))):
        ranked = ranked_classes(start)
        assert [(r.compile_class, r.tier) for r in ranked] == FIXED
        assert {r.note() for r in ranked} == {"fixed order"}


def test_a_linear_layer_class_leads_then_those_never_trained_on_then_the_members_disagreement(
        ranked_from_h100):
    ranked = ranked_from_h100
    tiers = [r.tier for r in ranked]
    assert tiers == sorted(tiers, key=[COVERAGE, EXTRA].index)  # every domain class before the extras
    assert {r.compile_class for r in ranked if r.tier == COVERAGE} == set(COVERAGE_CLASSES)
    # The lead: of the bf16 single-GEMM classes over every M bucket, the one the members disagree on most.
    linear = [r for r in ranked if r.compile_class.op == "mm" and r.compile_class.dtype == "bfloat16"
              and r.compile_class.m_buckets == ALL_BUCKETS]
    assert ranked[0] is max(linear, key=lambda r: r.disagreement) and ranked[0].untrained == 0.0
    for rest in (ranked[1:len(COVERAGE_CLASSES)], ranked[len(COVERAGE_CLASSES):]):
        keys = [(r.untrained, r.disagreement or 0.0) for r in rest]
        assert keys == sorted(keys, reverse=True)
    # The H100 model has trained on some problems of every stratum of these classes (its round-3 data
    # reached batched GEMMs at every M bucket), so none is untrained and the rest follow the members'
    # disagreement alone (test_identical_members_disagree_nowhere orders untrained classes first).
    assert all(r.untrained == 0.0 for r in ranked)
    assert all(r.disagreement > 0 for r in ranked) and ranked[1].note().startswith("disagreement 0.")


def test_identical_members_disagree_nowhere():
    model = untrained_mlp(members=2, hidden_widths=(8,))
    model.card.layouts = ["nn", "nt", "tn"]
    twin = model.net.members
    twin[1].load_state_dict(twin[0].state_dict())
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # not the one thread it judges on (the suite runs torch on one thread)
    try:
        ranked = ranked_classes(_start(model))
        assert torch.get_num_threads() == 2  # judged on one thread, the process's setting restored
    finally:
        torch.set_num_threads(threads)
    # The card: bf16 and fp16 single GEMMs, no recorded domain. It cannot rank fp32, and was never
    # trained on a batched GEMM: those classes come first, after the lead, in the fixed order.
    untrained = [r.compile_class for r in ranked if r.untrained == 1.0]
    assert set(untrained) == {c for c in COVERAGE_CLASSES + EXTRA_CLASSES
                              if c.dtype == "float32" or c.op == "bmm"}
    assert {r.disagreement for r in ranked if r.untrained == 0.0} == {0.0}
    coverage = [r.compile_class for r in ranked if r.tier == COVERAGE]
    rest = sorted(COVERAGE_CLASSES[1:], key=lambda c: (c not in untrained, COVERAGE_CLASSES.index(c)))
    assert coverage == [COVERAGE_CLASSES[0], *rest]


def test_the_members_predictions_average_to_the_models(from_h100):
    problem = class_problems(COVERAGE_CLASSES[0], 1)[0].problem()
    members = member_predictions(from_h100.model, problem)
    configs = for_problem(problem, H200, "exhaustive")
    assert members.shape == (from_h100.model.card.architecture.members, len(configs)) and len(members) >= 2
    averaged = np.exp(np.log(members).mean(axis=0))  # the averaged net: the mean of the members' log ms
    np.testing.assert_allclose(averaged, from_h100.model.estimate(problem, configs), rtol=1e-4)


@pytest.fixture(scope="module")
def h200_plans(ranked_from_h100):
    order = [r.compile_class for r in ranked_from_h100]
    return {minutes: plan_calibration(H200, Budget(minutes * 60.0).collection_s, 15, classes=order)
            for minutes in (5, 15)}


def test_fifteen_minutes_from_the_h100_model_cover_both_domains_on_an_h200(from_h100, h200_plans):
    card = from_h100.model.card
    coverage, _ = covering_classes(card.domain.strata, card.layouts)
    plan = h200_plans[15]
    claimed = {s for s, n in plan.training_problems().items() if n >= MIN_STRATUM_PROBLEMS}
    assert claimed >= strata_of(coverage) >= set(card.domain.strata)
    assert set(plan.summary()["layouts"]) >= set(card.layouts)
    assert plan.estimate.rows_per_gpu_minute() >= 30_000


def test_five_minutes_from_the_h100_model_start_with_linear_layers_then_the_least_sure(
        ranked_from_h100, h200_plans):
    plan = h200_plans[5]
    order = [r.compile_class.name for r in ranked_from_h100]
    assert list(plan.classes)[0] == order[0]  # bf16 single GEMMs: the calibrated model keeps them
    assert list(plan.classes) == sorted(plan.classes, key=order.index)
    claimed = {s for s, n in plan.training_problems().items() if n >= MIN_STRATUM_PROBLEMS}
    assert {f"mm/bfloat16/{bucket}" for bucket in ("m<=16", "m<=256", "m<=4096", "m>4096")} <= claimed
    assert plan.estimate.rows_per_gpu_minute() >= 30_000
