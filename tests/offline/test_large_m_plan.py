"""The plan for M beyond the trained range (data/shapes_large_m.json): what it draws, that it stays in
few compile classes, that its problems train, and that the committed file is what the planner writes."""

from __future__ import annotations

from pathlib import Path

from kernel_select.offline.data import shapes, splits

from kernel_select.offline.data.plans import large_m_plan
from kernel_select.problem import gemm_flops

ROOT = Path(__file__).resolve().parents[2]


def test_every_problem_lies_beyond_the_committed_files_and_under_its_work_cap():
    planned = large_m_plan.large_m_shapes()
    assert planned and len({(s.m, s.n, s.k, s.dtype) for s in planned}) == len(planned)
    for shape in planned:
        assert 65_536 < shape.m <= large_m_plan.MAX_M
        assert gemm_flops(1, shape.m, shape.n, shape.k) <= large_m_plan.MAX_FLOP[shape.dtype]
        assert (shape.op, shape.layout, shape.family) == ("mm", "nt", large_m_plan.FAMILY)


def test_it_keeps_to_few_compile_classes_and_runs_each_class_together():
    groups = [s.group for s in large_m_plan.large_m_shapes()]
    assert len(set(groups)) <= 12
    firsts = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
    assert len(firsts) == len(set(groups))  # a class never comes back after another


def test_its_problems_are_trained_on():
    assert large_m_plan.FAMILY not in splits.HELD_OUT_FAMILIES


def test_the_committed_plan_is_what_the_planner_writes():
    assert large_m_plan.large_m_shapes() == shapes.load(ROOT / "data" / "shapes_large_m.json")
