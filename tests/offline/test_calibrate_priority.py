"""The order calibrate measures compile classes in (offline/calibrate/priority.py): the domain's classes
before the extras; from a model of several members, those outside its domain first, then by its members'
disagreement; from scratch or a single network, the fixed order. And 15 minutes from the shipped H100
model on an H200 (the issue's run) still cover every stratum of both domains."""

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
from kernel_select.offline.data.calibration_classes import (
    COVERAGE_CLASSES,
    EXTRA_CLASSES,
    class_problems,
    covering_classes,
    strata_of,
)
from kernel_select.offline.data.calibration_plan import plan_calibration
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


def test_classes_outside_the_domain_come_first_then_the_members_disagreement(ranked_from_h100):
    ranked = ranked_from_h100
    tiers = [r.tier for r in ranked]
    assert tiers == sorted(tiers, key=[COVERAGE, EXTRA].index)  # every domain class before the extras
    assert {r.compile_class for r in ranked if r.tier == COVERAGE} == set(COVERAGE_CLASSES)
    for tier in (COVERAGE, EXTRA):
        keys = [(r.outside, r.disagreement or 0.0) for r in ranked if r.tier == tier]
        assert keys == sorted(keys, reverse=True)
    # The H100 model has 9 training problems of batched fp32 GEMMs (fewer than the 20 of its domain):
    # that class is wholly outside it, and comes first.
    first = ranked[0]
    assert first.compile_class.name == "bmm/float32/nt/n16/k16r0/m<=16" and first.outside == 1.0
    assert first.note() == "100% outside the start's domain"
    inside = [r for r in ranked if r.outside == 0.0]
    assert inside and all(r.disagreement > 0 for r in inside)
    assert inside[0].note().startswith("disagreement ")


def test_identical_members_disagree_nowhere():
    model = untrained_mlp(members=2, hidden_widths=(8,))
    model.card.layouts = ["nn", "nt", "tn"]
    twin = model.net.members
    twin[1].load_state_dict(twin[0].state_dict())
    threads = torch.get_num_threads()
    ranked = ranked_classes(_start(model))
    assert torch.get_num_threads() == threads  # judged on one thread, the process's setting restored
    # the card (bf16 and fp16 single GEMMs, no recorded domain): fp32 and batched classes are outside
    outside = [r.compile_class for r in ranked if r.outside == 1.0]
    assert set(outside) == {c for c in COVERAGE_CLASSES + EXTRA_CLASSES
                            if c.dtype == "float32" or c.op == "bmm"}
    assert {r.disagreement for r in ranked if r.outside == 0.0} == {0.0}
    coverage = [r.compile_class for r in ranked if r.tier == COVERAGE]  # ties keep the fixed order
    assert coverage == sorted(COVERAGE_CLASSES, key=lambda c: (c not in outside, COVERAGE_CLASSES.index(c)))


def test_the_members_predictions_average_to_the_models(from_h100):
    problem = class_problems(COVERAGE_CLASSES[0], 1)[0].problem()
    members = member_predictions(from_h100.model, problem)
    configs = for_problem(problem, H200, "exhaustive")
    assert members.shape == (2, len(configs))
    averaged = np.exp(np.log(members).mean(axis=0))  # the averaged net: the mean of the members' log ms
    np.testing.assert_allclose(averaged, from_h100.model.estimate(problem, configs), rtol=1e-4)


def test_fifteen_minutes_from_the_h100_model_cover_both_domains_on_an_h200(from_h100, ranked_from_h100):
    card = from_h100.model.card
    coverage, _ = covering_classes(card.domain.strata, card.layouts)
    plan = plan_calibration(H200, Budget(15 * 60.0).collection_s, 15,
                            classes=[r.compile_class for r in ranked_from_h100])
    claimed = {s for s, n in plan.training_problems().items() if n >= MIN_STRATUM_PROBLEMS}
    assert claimed >= strata_of(coverage) >= set(card.domain.strata)
    assert set(plan.summary()["layouts"]) >= set(card.layouts)
    assert list(plan.classes)[0] == ranked_from_h100[0].compile_class.name
    assert plan.estimate.rows_per_gpu_minute() >= 30_000
