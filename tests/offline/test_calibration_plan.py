"""The calibration plan (offline/data/calibration_plan.py): it covers the strata in few compile classes,
fits its budget by cost.py's simulation, keeps the hash split's shares, and is the same every time."""

from __future__ import annotations

from collections import Counter

import pytest

from kernel_select.device import get_device
from kernel_select.errors import OptionError
from kernel_select.offline.data.calibration_plan import (
    COMPILE_CLASSES,
    M_BUCKETS,
    MIN_PER_CLASS,
    SAFETY,
    plan_calibration,
)
from kernel_select.offline.data.dataset import id_of, split_of
from kernel_select.offline.harness import cost
from kernel_select.offline.harness.bench_plan import distinct_keys, pow2_divisor

H100 = get_device("h100")
WORKERS = 15  # one H100 host of 16 cores: a core launches kernels, the rest compile
#: The collection's share of the default 15 minutes, less than that: the budget at which the first
#: seven classes (every stratum) fit on 15 workers.
STRATA_BUDGET_S = 600.0


@pytest.fixture(scope="module")
def full():
    return plan_calibration(H100, STRATA_BUDGET_S, WORKERS)


def _bucket(m: int) -> int:
    return next(i for i, (low, high) in enumerate(M_BUCKETS) if low <= m <= high)


def test_the_plan_covers_every_stratum(full):
    shapes = full.shapes
    assert {s.dtype for s in shapes} == {"bfloat16", "float16", "float32"}
    assert {s.layout for s in shapes} == {"nn", "nt", "tn"}
    assert {s.op for s in shapes} == {"mm", "bmm"} and any(s.batch > 1 for s in shapes)
    assert {pow2_divisor(s.n) for s in shapes} == {1, 2, 4, 8, 16}
    assert {pow2_divisor(s.k) for s in shapes} == {1, 2, 4, 8, 16}
    assert not [s for s in shapes if s.n % 2 and s.k % 2]  # the family split's held-out class
    for name in full.classes:  # every M bucket within every class
        assert {_bucket(s.m) for s in shapes if s.group == name} == {0, 1, 2, 3}, name
    assert len({id_of(s.problem()) for s in shapes}) == len(shapes)


def test_few_compile_classes_with_many_problems_each(full):
    assert list(full.classes) == [c.name for c in COMPILE_CLASSES[:len(full.classes)]]
    assert len(full.classes) == 7 and all(n >= MIN_PER_CLASS for n in full.classes.values())
    assert Counter(s.group for s in full.shapes) == Counter(full.classes)
    # a class's problems share their kernels: about 1,200 to 1,600 per class, not one set per problem
    assert len(distinct_keys(full.planned)) < 1700 * len(full.classes)
    assert full.estimate.keys == len(distinct_keys(full.planned))


def test_the_plan_fits_its_budget_by_cost_py_and_collects_fast(full):
    again = cost.estimate(full.planned, WORKERS)  # the plan, in its order, as cost.py predicts it
    assert again.wall_s == pytest.approx(full.estimate.wall_s)
    assert again.wall_s <= SAFETY * STRATA_BUDGET_S
    assert full.finish_s == sorted(full.finish_s) and full.finish_s[-1] == pytest.approx(again.wall_s)
    assert again.rows_per_gpu_minute() >= 30_000  # with an empty Triton cache, compile included


def test_the_hash_split_keeps_its_shares_in_every_class(full):
    for name in full.classes:
        splits = Counter(split_of(id_of(s.problem())) for s in full.shapes if s.group == name)
        total = sum(splits.values())
        assert splits["test"] >= 0.14 * total and splits["val"] >= 0.14 * total, (name, splits)


def test_a_smaller_budget_takes_the_first_classes_and_still_fits():
    budget_s = 220.0
    plan = plan_calibration(H100, budget_s, WORKERS)
    assert plan.estimate.wall_s <= SAFETY * budget_s and 2 <= len(plan.classes) < 7
    assert list(plan.classes) == [c.name for c in COMPILE_CLASSES[:len(plan.classes)]]
    assert plan.estimate.rows_per_gpu_minute() >= 30_000


def test_a_budget_that_fits_no_class_says_so():
    with pytest.raises(OptionError, match="fit no class of problems with 15 compile workers.*more minutes"):
        plan_calibration(H100, 40.0, WORKERS)


def test_fewer_workers_plan_fewer_problems_in_the_same_time():
    few, many = plan_calibration(H100, 200.0, 7), plan_calibration(H100, 200.0, WORKERS)
    assert few.estimate.wall_s <= SAFETY * 200.0 and len(few.shapes) < len(many.shapes)


def test_a_capped_plan_has_a_problem_in_each_split_and_is_the_same_every_time():
    plan = plan_calibration(H100, 200.0, WORKERS, max_problems=6)
    assert len(plan.shapes) == 6
    assert {split_of(id_of(s.problem())) for s in plan.shapes} == {"train", "val", "test"}
    assert plan_calibration(H100, 200.0, WORKERS, max_problems=6).shapes == plan.shapes
    assert plan_calibration(H100, 200.0, WORKERS, max_problems=6, seed=1).shapes != plan.shapes
