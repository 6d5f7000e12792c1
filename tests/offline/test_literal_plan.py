"""The literal-size re-collection plans (data/shapes_literal_h200*.json): which problems they take, their
order, and that each committed file is what the planner writes from the committed H200 files."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kernel_select.offline.data import dataset, problem_ids, shapes

from kernel_select.offline.data.plans import literal_plan
from tests.synthetic import synthetic_frame

ROOT = Path(__file__).resolve().parents[2]
#: Each committed plan and its M range.
PLANS = {"shapes_literal_h200.json": (1, 16), "shapes_literal_h200_m17_32.json": (17, 32),
         "shapes_literal_h200_m33_64.json": (33, 64)}


def _problems(*specs: tuple[int, str, str, str]) -> pd.DataFrame:
    """Rows of one synthetic problem per (m, dtype, op, layout)."""
    base = synthetic_frame({"train": 1, "val": 0, "test": 0}, configs_per_problem=2, seed=5)
    frames = []
    for m, dtype, op, layout in specs:
        batch = 4 if op == "bmm" else 1
        pid = problem_ids.problem_id(m, 256, 512, dtype, op, batch, layout)
        frames.append(base.assign(problem_id=pid, m=m, n=256, k=512, dtype=dtype, op=op, batch=batch,
                                  layout=layout, family="llama3-8b",
                                  layer="q_proj fwd", **{"pass": "coverage"}))
    return pd.concat(frames, ignore_index=True)


def test_the_plan_takes_small_single_gemms_of_half_precision_once_each():
    frame = _problems((8, "bfloat16", "mm", "nt"), (16, "float16", "mm", "nn"),
                      (17, "bfloat16", "mm", "nt"),     # M above the bound
                      (8, "float32", "mm", "nt"),       # float32
                      (8, "bfloat16", "bmm", "nt"),     # batched
                      (8, "bfloat16", "mm", "tt"))      # a layout no model reads
    planned = literal_plan.literal_shapes(frame)
    assert sorted((s.m, s.dtype, s.layout) for s in planned) == [(8, "bfloat16", "nt"), (16, "float16", "nn")]
    assert {(s.family, s.layer, s.op) for s in planned} == {("llama3-8b", "q_proj fwd", "mm")}
    # the order is the ids' own: the same whatever order the rows come in
    assert literal_plan.literal_shapes(frame.iloc[::-1]) == planned


def test_an_m_range_takes_its_bounds_and_nothing_outside_them():
    frame = _problems(*[(m, "bfloat16", "mm", "nt") for m in (16, 17, 32, 33)])
    assert sorted(s.m for s in literal_plan.literal_shapes(frame, 17, 32)) == [17, 32]


@pytest.fixture(scope="module")
def planned_from() -> pd.DataFrame:
    return dataset.read_many([ROOT / "data" / name for name in literal_plan.PLANNED_FILES])


@pytest.mark.parametrize("name", sorted(PLANS))
def test_each_committed_plan_is_what_the_planner_writes_from_the_committed_files(name, planned_from):
    min_m, max_m = PLANS[name]
    assert literal_plan.literal_shapes(planned_from, min_m, max_m) == shapes.load(ROOT / "data" / name)


def test_the_cli_refuses_an_empty_m_range(tmp_path):
    with pytest.raises(SystemExit):
        literal_plan.main(["--out", str(tmp_path / "plan.json"), "--min-m", "33", "--max-m", "32"])
