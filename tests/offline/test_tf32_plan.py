"""The TF32 plan (offline/data/plans/tf32_plan.py): the committed data/shapes_tf32_h100.json is its output,
and the plan is what the datasheet says: float32 with TF32 only, about 8 minutes on one H100 with 15 compile
workers by cost.py, every stratum it covers claimable by a model, in compile-reuse order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_select.device import get_device
from kernel_select.model.card import MIN_STRATUM_PROBLEMS
from kernel_select.offline.data import shapes
from kernel_select.offline.data.plans import tf32_plan
from kernel_select.offline.data.splits import HELD_OUT_FAMILIES
from kernel_select.offline.harness import cost
from kernel_select.offline.harness.bench_plan import plan, reuse_order

COMMITTED = Path(__file__).resolve().parents[2] / "data" / "shapes_tf32_h100.json"


@pytest.fixture(scope="module")
def planned() -> list[shapes.Shape]:
    return tf32_plan.tf32_plan()


def test_the_generator_still_writes_the_committed_file(planned: list[shapes.Shape]):
    assert json.loads(COMMITTED.read_text()) == [s.to_json() for s in planned], (
        "data/shapes_tf32_h100.json is not what `python -m kernel_select.offline.data.plans.tf32_plan` "
        "writes; run it and commit both, with the datasheet's figures")
    assert shapes.load(COMMITTED) == planned


def test_every_problem_is_float32_with_tf32_and_plans_on_the_data_engines_torch(planned: list[shapes.Shape]):
    assert planned and all(s.tf32 and s.dtype == "float32" for s in planned)
    runs = plan([s.problem() for s in planned], get_device("h100"), torch_version=tf32_plan.TORCH_VERSION)
    assert all(run.key.allow_tf32 for runs_ in runs for run in runs_)
    assert len({s.problem() for s in planned}) == len(planned)


def test_it_fits_the_budget_in_compile_reuse_order(planned: list[shapes.Shape]):
    runs = plan([s.problem() for s in planned], get_device("h100"), torch_version=tf32_plan.TORCH_VERSION)
    assert [r[0].problem for r in reuse_order(runs)] == [r[0].problem for r in runs]
    wall = cost.estimate(runs, tf32_plan.WORKERS).wall_s
    assert 0.75 * tf32_plan.BUDGET_S <= wall <= tf32_plan.BUDGET_S


def test_every_stratum_it_covers_holds_enough_problems_for_a_models_card(planned: list[shapes.Shape]):
    strata = tf32_plan.composition(planned)["stratum"]
    assert set(strata) >= {"mm/tf32/m<=16", "mm/tf32/m<=256", "mm/tf32/m<=4096", "mm/tf32/m>4096",
                           "bmm/tf32/m<=16"}
    # A card claims a stratum at MIN_STRATUM_PROBLEMS training problems: 85% of a stratum is not `test`
    assert min(strata.values()) * 0.85 >= MIN_STRATUM_PROBLEMS
    layouts = tf32_plan.composition(planned)["layout"]
    assert set(layouts) == {"nn", "nt", "tn"}


def test_its_families_train_unless_their_kin_are_held_out(planned: list[shapes.Shape]):
    held = {s.family for s in planned} & HELD_OUT_FAMILIES
    assert held == {"moe-experts"}  # the batched experts stay out, as the bfloat16 ones do


def test_which_problems_torch_2_13_also_runs_with_tf32():
    assert tf32_plan.runs_tf32_on_2_13(shapes.Shape(16, 512, 512, "float32", tf32=True))
    assert not tf32_plan.runs_tf32_on_2_13(shapes.Shape(16, 4096, 64, "float32", tf32=True))  # attention's K
    assert not tf32_plan.runs_tf32_on_2_13(shapes.Shape(8, 4096, 4096, "float32", tf32=True))
