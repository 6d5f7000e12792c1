"""Our DEFAULT and EXHAUSTIVE lists equal the ones the installed Inductor builds, order included.

This runs Inductor's own heuristic code (CUDAConfigHeuristic.get_mm_configs /
get_exhaustive_mm_configs, i.e. preprocess_mm_configs: scale, spill-prune, finalize) on the CPU.
It needs two stand-ins and nothing else:
  * a graph handler whose `sizevars` is a real SizeVarAllocator: `_scale_mm_configs` reads the
    size hints through `V.graph.sizevars.optimization_hint_with_override`;
  * without triton installed (a CPU-only torch), `triton.Config` is a placeholder that takes no
    arguments, so a subclass replaces only `triton_config` (the constructor call at the very end
    of `_finalize_mm_configs`) with a plain record; with triton present the real class is used.

Known version difference: torch 2.13's DEFAULT list has a 21st config, 128x256x64 with 4 stages
and 8 warps, that 2.11 lacks. `space.default_grid` adds it by version, and the comparison passes
the installed torch version, so this test checks whichever torch it runs on.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kernel_select.configs import torch_minor_version
from kernel_select.problem import Problem
from kernel_select.space import default_grid, exhaustive_grid, inductor_configs

torch = pytest.importorskip("torch")

try:
    from torch._inductor import config as inductor_config
    from torch._inductor.sizevars import SizeVarAllocator
    from torch._inductor.template_heuristics.triton import CUDAConfigHeuristic
    from torch._inductor.virtualized import V
except ImportError as exc:  # pragma: no cover - depends on the torch build
    pytest.skip(f"torch._inductor is not importable: {exc}", allow_module_level=True)


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


class _RecordingHeuristic(CUDAConfigHeuristic):
    """CUDAConfigHeuristic with triton.Config replaced by a record of the same fields."""

    def triton_config(self, num_stages: int, num_warps: int, **kwargs: Any) -> SimpleNamespace:
        return SimpleNamespace(kwargs=kwargs, num_stages=num_stages, num_warps=num_warps)


def _heuristic() -> CUDAConfigHeuristic:
    return CUDAConfigHeuristic() if _triton_available() else _RecordingHeuristic()


class _FakeGraph:
    def __init__(self) -> None:
        self.sizevars = SizeVarAllocator()


def inductor_list(problem: Problem, search_space: str) -> list[tuple[int, ...]]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps, GROUP_M) as Inductor yields them."""
    heuristic = _heuristic()
    with V.set_graph_handler(_FakeGraph()), inductor_config.patch(
        max_autotune_gemm_search_space=search_space.upper(),
        max_autotune_prune_choices_based_on_shared_mem=False,
        multi_kernel_hints=[],
    ):
        make = heuristic.get_exhaustive_mm_configs() if search_space == "exhaustive" \
            else heuristic.get_mm_configs()
        configs = list(make(problem.m, problem.n, problem.k, dtype_size=problem.dtype_bytes, op_name="mm"))
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.kwargs["BLOCK_K"], c.num_stages, c.num_warps,
             c.kwargs["GROUP_M"]) for c in configs]


PROBLEMS = [
    Problem(560, 1280, 3420, "bfloat16"),  # the seed problem: no clamping, 1400 exhaustive
    Problem(1, 16, 16, "float16"),  # everything clamps to 16
    Problem(7, 33, 100, "float32"),  # unaligned dims, partial clamping
    Problem(4096, 4096, 4096, "bfloat16"),
    Problem(32, 28672, 32, "bfloat16"),  # skinny: M and K clamp, N does not
]


@pytest.mark.parametrize("search_space", ["default", "exhaustive"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=str)
def test_our_space_equals_inductors(problem, search_space):
    theirs = inductor_list(problem, search_space)
    ours = inductor_configs(problem, search_space, torch_version=torch.__version__)
    assert theirs, "Inductor's heuristic produced no configs; the fake graph is not being used"
    assert ours == theirs


def test_seed_problem_counts_from_inductor():
    seed = PROBLEMS[0]
    assert len(inductor_list(seed, "exhaustive")) == 1400
    expected_default = 21 if torch_minor_version(torch.__version__) >= (2, 13) else 20
    assert len(inductor_list(seed, "default")) == expected_default


def _raw(configs: list[Any]) -> list[tuple[int, ...]]:
    return [(c.block_m, c.block_n, c.block_k, c.num_stages, c.num_warps, c.group_m) for c in configs]


def test_our_unscaled_lists_are_the_installed_torchs_own():
    """The parity check of space.py's copies: a torch release that adds, drops or reorders a config of
    its DEFAULT or EXHAUSTIVE mm list fails here, before any problem scales it away."""
    heuristic = CUDAConfigHeuristic()
    assert [tuple(row) for row in default_grid(torch.__version__)] == _raw(heuristic.mm_configs)
    assert [tuple(row) for row in exhaustive_grid()] == _raw(heuristic.exhaustive_configs)


def test_the_parity_check_fails_on_a_difference(monkeypatch: pytest.MonkeyPatch):
    import kernel_select.space as space

    monkeypatch.setattr(space, "_DEFAULT_211", space._DEFAULT_211[1:])
    with pytest.raises(AssertionError):
        test_our_unscaled_lists_are_the_installed_torchs_own()
