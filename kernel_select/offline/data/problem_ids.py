"""A problem's id in the dataset: stable text naming one GEMM problem, e.g. 'bfloat16/mm/1x560x1280x3420'.

Every row of a dataset carries the id of its problem (`problem_id` column); the fixed split of a
problem is a hash of it (`splits.split_of`), so an id never changes once rows carry it: a new property
of a problem (the operand layout, TF32) is a suffix that the ids written before it lack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_select.layouts import DEFAULT_LAYOUT, check_layout
from kernel_select.problem import TF32

if TYPE_CHECKING:
    from kernel_select.problem import Problem


def problem_id(m: int, n: int, k: int, dtype: str, op: str = "mm", batch: int = 1,
               layout: str = DEFAULT_LAYOUT, tf32: bool = False) -> str:
    """Stable text id of a problem, e.g. 'bfloat16/mm/1x560x1280x3420'; a layout other than "nn"
    is suffixed ('bfloat16/mm/1x560x1280x3420/nt'), so "nn" ids are those of datasets written
    before layouts existed (the frozen split is a hash of them), and so is TF32, last
    ('float32/mm/1x560x1280x3420/nt/tf32'), so every id written before TF32 stays as it was."""
    base = f"{dtype}/{op}/{batch}x{m}x{n}x{k}"
    pid = base if check_layout(layout) == DEFAULT_LAYOUT else f"{base}/{layout}"
    return f"{pid}/{TF32}" if tf32 else pid


def id_of(problem: Problem) -> str:
    """`problem_id` of a kernel_select.problem.Problem, its operand layout and TF32 included."""
    return problem_id(problem.m, problem.n, problem.k, problem.dtype, problem.op, problem.batch,
                      problem.layout, problem.tf32)


def is_tf32_id(pid: str) -> bool:
    """Whether a problem id names a TF32 problem (`problem_id`)."""
    return pid.endswith(f"/{TF32}")
