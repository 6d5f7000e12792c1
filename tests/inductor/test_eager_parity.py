"""The mode options of max-autotune turn a GEMV into a mul + sum; the eager-parity patches keep it
a GEMM. Traced with Inductor's own decomposition table on meta tensors (the rewrite is skipped on
CPU, so a CPU tensor would not show it)."""

from __future__ import annotations

import pytest
import torch
from torch._inductor import config as inductor_config
from torch._inductor.decomposition import select_decomp_table
from torch.fx.experimental.proxy_tensor import make_fx

from kernel_select.inductor.eager_parity import eager_parity_patches


def _ops(fn, *shapes: tuple[int, ...]) -> set[str]:
    inputs = [torch.empty(shape, device="meta", dtype=torch.bfloat16) for shape in shapes]
    graph = make_fx(fn, decomposition_table=select_decomp_table())(*inputs)
    return {str(node.target) for node in graph.graph.nodes if node.op == "call_function"}


@pytest.mark.parametrize("fn, shapes, gemm", [
    (torch.mm, ((1, 64), (64, 32)), "aten.mm.default"),
    (torch.mm, ((64, 32), (32, 1)), "aten.mm.default"),
    (torch.bmm, ((4, 1, 64), (4, 64, 32)), "aten.bmm.default"),
])
def test_max_autotune_options_decompose_gemv_and_patches_keep_it(fn, shapes, gemm) -> None:
    import torch._inductor as torch_inductor

    mode = torch_inductor.list_mode_options("max-autotune")
    with inductor_config.patch(coordinate_descent_tuning=mode["coordinate_descent_tuning"]):
        decomposed = _ops(fn, *shapes)
    with inductor_config.patch({**mode, **eager_parity_patches()}):
        kept = _ops(fn, *shapes)
    assert gemm not in decomposed and "aten.sum.dim_IntList" in decomposed
    assert gemm in kept and "aten.sum.dim_IntList" not in kept


def test_patches_leave_real_gemms_alone() -> None:
    with inductor_config.patch(coordinate_descent_tuning=True):
        assert "aten.mm.default" in _ops(torch.mm, (16, 64), (64, 32))
