"""The calibration plan (offline/calibrate/plan.py, classes.py): 15 minutes on one
16-core host cover every stratum, layout and batched GEMM of the domain, 5 minutes the first classes
of the priority order; every plan fits its budget by cost.py's simulation at >= 30,000 rows per
GPU-minute; the hash split's shares hold in every bucket; and the plan is the same every time."""

from __future__ import annotations

from collections import Counter

import pytest

from kernel_select.device import get_device
from kernel_select.errors import OptionError
from kernel_select.model.card import MIN_STRATUM_PROBLEMS, stratum
from kernel_select.offline.calibrate.budget import Budget
from kernel_select.offline.calibrate.classes import (
    ALL_BUCKETS,
    COMPILE_CLASSES,
    COVERAGE_CLASSES,
    EXTRA_CLASSES,
    M_BUCKETS,
    PER_BUCKET_FOR_DOMAIN,
    CompileClass,
    class_problems,
    covering_classes,
    strata_of,
)
from kernel_select.offline.calibrate.plan import (
    MAX_PER_CLASS,
    MIN_ROWS_PER_GPU_MINUTE,
    SAFETY,
    least_count,
    plan_calibration,
)
from kernel_select.offline.data.problem_ids import id_of
from kernel_select.offline.data.splits import split_of
from kernel_select.offline.harness import cost
from kernel_select.offline.harness.bench_plan import distinct_keys, pow2_divisor

H100 = get_device("h100")
WORKERS = 15  # one host of 16 cores: a core launches kernels, the rest compile
MINUTES = (5, 10, 15)


@pytest.fixture(scope="module")
def plans():
    """The plans of 5, 10 and 15 minutes' runs (the collection's share of each) from no model."""
    return {minutes: plan_calibration(H100, Budget(minutes * 60.0).collection_s, WORKERS)
            for minutes in MINUTES}


def _bucket(m: int) -> int:
    return next(i for i, (low, high) in enumerate(M_BUCKETS) if low <= m <= high)


@pytest.mark.parametrize("minutes", MINUTES)
def test_each_plan_fits_its_budget_by_cost_py_and_collects_fast(plans, minutes: int, capsys):
    plan = plans[minutes]
    again = cost.estimate(plan.planned, WORKERS)  # the plan, in its order, as cost.py predicts it
    assert again.wall_s == pytest.approx(plan.estimate.wall_s)
    assert again.wall_s <= SAFETY * plan.budget_s
    assert plan.finish_s == sorted(plan.finish_s) and plan.finish_s[-1] == pytest.approx(again.wall_s)
    assert again.keys == len(distinct_keys(plan.planned))
    with capsys.disabled():  # the figures the guide quotes: pytest -s shows them
        print(f"\n{minutes} min: {len(plan.classes)} classes, " + "; ".join(again.lines()[:2]))
    assert again.rows_per_gpu_minute() >= MIN_ROWS_PER_GPU_MINUTE  # an empty Triton cache, compile included


def test_fifteen_minutes_cover_every_stratum_layout_and_batched_gemm_of_the_domain(plans):
    plan = plans[15]
    assert list(plan.classes)[:len(COVERAGE_CLASSES)] == [c.name for c in COVERAGE_CLASSES]
    training = plan.training_problems()
    assert {s for s, n in training.items() if n >= MIN_STRATUM_PROBLEMS} >= strata_of(COVERAGE_CLASSES)
    assert {s.dtype for s in plan.shapes} == {"bfloat16", "float16", "float32"}
    assert {s.layout for s in plan.shapes} == {"nn", "nt", "tn"} == set(plan.summary()["layouts"])
    assert {s.op for s in plan.shapes} == {"mm", "bmm"} and any(s.batch > 1 for s in plan.shapes)
    assert {pow2_divisor(s.n) for s in plan.shapes} == {1, 2, 4, 8, 16}
    assert {pow2_divisor(s.k) for s in plan.shapes} == {1, 2, 4, 8, 16}
    assert not [s for s in plan.shapes if s.n % 2 and s.k % 2]  # the family split's held-out class
    assert len({id_of(s.problem()) for s in plan.shapes}) == len(plan.shapes)


def test_shorter_budgets_take_the_first_classes_that_fit_in_priority_order(plans):
    names = [c.name for c in COMPILE_CLASSES]
    for minutes in MINUTES:
        taken, passed = list(plans[minutes].classes), plans[minutes].passed_over
        assert sorted(taken + passed, key=names.index) == names  # each class taken or passed over once
        assert taken == sorted(taken, key=names.index) and taken[0] == names[0]
        for name, count in plans[minutes].classes.items():  # never so few that its strata go unclaimed
            c = COMPILE_CLASSES[names.index(name)]
            assert least_count(c) <= count <= MAX_PER_CLASS
    assert 2 <= len(plans[5].classes) < len(plans[10].classes) < len(plans[15].classes)
    assert len(plans[5].shapes) < len(plans[10].shapes) < len(plans[15].shapes)


def test_problems_of_a_class_share_its_kernels_and_cover_its_buckets(plans):
    plan = plans[15]
    by_class = Counter(s.group for s in plan.shapes)
    assert by_class == Counter(plan.classes)
    for c in COMPILE_CLASSES:
        if c.name in plan.classes:
            assert {_bucket(s.m) for s in plan.shapes if s.group == c.name} == set(c.m_buckets), c.name
    # about 1,000 to 1,600 kernels per class, not one set per problem
    assert plan.estimate.keys < 1700 * len(plan.classes)


def test_the_hash_split_keeps_its_shares_in_every_bucket_of_every_class():
    for c in (COVERAGE_CLASSES[0], COVERAGE_CLASSES[7]):  # four buckets; M <= 16 alone
        shapes = class_problems(c, least_count(c))
        for bucket in c.m_buckets:
            splits = Counter(split_of(id_of(s.problem())) for s in shapes if _bucket(s.m) == bucket)
            assert sum(splits.values()) == PER_BUCKET_FOR_DOMAIN
            assert splits["train"] + splits["val"] >= MIN_STRATUM_PROBLEMS, (c.name, bucket, splits)
            assert splits["test"] >= 3 and splits["val"] >= 3, (c.name, bucket, splits)


def test_a_class_draws_the_same_problems_wherever_it_comes_in_the_order():
    c = COVERAGE_CLASSES[0]
    assert class_problems(c, 40)[:10] == class_problems(c, 10)  # a longer list starts with a shorter one
    after = plan_calibration(H100, 300.0, WORKERS, classes=[EXTRA_CLASSES[2], c])
    alone = plan_calibration(H100, 300.0, WORKERS, classes=[c])
    mine, theirs = ({s for s in plan.shapes if s.group == c.name} for plan in (after, alone))
    assert mine and (mine <= theirs or theirs <= mine)  # prefixes of one list of the class's problems


def test_a_budget_that_fits_no_class_says_so():
    with pytest.raises(OptionError, match="fit no class of problems with 15 compile workers.*more minutes"):
        plan_calibration(H100, 20.0, WORKERS)


def test_fewer_workers_plan_fewer_problems_in_the_same_time():
    few, many = plan_calibration(H100, 200.0, 7), plan_calibration(H100, 200.0, WORKERS)
    assert few.estimate.wall_s <= SAFETY * 200.0 and len(few.shapes) < len(many.shapes)


def test_a_capped_plan_has_a_problem_in_each_split_and_is_the_same_every_time():
    plan = plan_calibration(H100, 200.0, WORKERS, max_problems=8)
    assert len(plan.shapes) == 8
    assert {split_of(id_of(s.problem())) for s in plan.shapes} == {"train", "val", "test"}
    assert plan_calibration(H100, 200.0, WORKERS, max_problems=8).shapes == plan.shapes
    assert plan_calibration(H100, 200.0, WORKERS, max_problems=8, seed=1).shapes != plan.shapes


def test_a_card_beyond_the_coverage_classes_gets_classes_of_its_own():
    coverage, extra = covering_classes()
    assert coverage == list(COVERAGE_CLASSES) and extra == list(EXTRA_CLASSES)
    strata = ["bmm/float32/m<=16", "bmm/float32/m>4096", "bmm/float32/m<=256", "mm/bfloat16/m<=16",
              "conv/float32/m<=16", "mm/int8/m<=16", "mm/float16/m<=9000"]  # the last three: not ours
    coverage, extra = covering_classes(strata, ["nn", "tt"])
    added = coverage[len(COVERAGE_CLASSES):]
    assert added == [CompileClass("bmm", "float32", "nt", 16, 16, m_buckets=(1, 3)),
                     CompileClass("mm", "bfloat16", "tt", 16, 16)]
    assert added[0].name == "bmm/float32/nt/n16/k16r0/m<=256+m>4096" and added[1].m_buckets == ALL_BUCKETS
    assert strata_of(coverage) >= {"bmm/float32/m<=256", "bmm/float32/m>4096"}
    assert extra == list(EXTRA_CLASSES)


def test_the_strata_a_plan_trains_on_are_counted_as_the_card_will_count_them(plans):
    plan = plans[5]
    expected = Counter(stratum(s.op, s.dtype, s.m) for s in plan.shapes
                       if split_of(id_of(s.problem())) in ("train", "val"))
    assert plan.training_problems() == dict(expected) == plan.summary()["training_problems"]


def test_a_plan_below_the_rate_passes_over_the_class_that_adds_rows_slowest():
    small_batched = COVERAGE_CLASSES[8]  # batched fp32 at M <= 16: ~20,000 rows per GPU-minute alone
    # beside one faster class only: beside many, the plan that takes the fewest of each first lifts the rate
    order = [small_batched, COVERAGE_CLASSES[4]]
    budget = Budget(5 * 60.0).collection_s
    at_any_rate = plan_calibration(H100, budget, WORKERS, classes=order, min_rows_per_gpu_minute=0)
    assert list(at_any_rate.classes)[0] == small_batched.name
    assert at_any_rate.estimate.rows_per_gpu_minute() < MIN_ROWS_PER_GPU_MINUTE
    held = plan_calibration(H100, budget, WORKERS, classes=order)
    assert small_batched.name in held.passed_over
    assert held.estimate.rows_per_gpu_minute() >= MIN_ROWS_PER_GPU_MINUTE
    assert list(held.classes) == [COVERAGE_CLASSES[4].name]
