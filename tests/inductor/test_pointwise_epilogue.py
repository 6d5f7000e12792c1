"""Which GEMMs feed a pointwise epilogue that cuBLAS would leave as a kernel of its own.

The graphs are traced to aten ops on the CPU (make_fx), the form Inductor lowers, with the
output metadata (`meta["val"]`) the reader uses.
"""

from __future__ import annotations

import types
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from kernel_select.inductor import pointwise_epilogue
from kernel_select.inductor.pointwise_epilogue import gemm_targets, has_separate_epilogue


def gemm_verdicts(fn: Callable[..., Any], *shapes: tuple[int, ...], mode: str = "real") -> list[bool]:
    """has_separate_epilogue for each GEMM of `fn`'s aten graph, in graph order."""
    graph = make_fx(fn, tracing_mode=mode)(*(torch.randn(s) for s in shapes)).graph
    return [has_separate_epilogue(node) for node in graph.nodes
            if node.op == "call_function" and node.target in gemm_targets()]


def mlp(x, w1, b1, w2, b2):  # noqa: ANN001, ANN201 -- Linear, ReLU, Linear (addmm, relu, addmm)
    return F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2)


MLP_SHAPES = ((4, 64), (32, 64), (32,), (16, 32), (16,))


@pytest.mark.parametrize("mode", ["real", "symbolic"])
def test_a_relu_between_two_linears_is_an_epilogue_of_the_first_only(mode: str):
    # the second GEMM's output goes straight out: nothing to fuse, nothing to charge
    assert gemm_verdicts(mlp, *MLP_SHAPES, mode=mode) == [True, False]


def test_views_between_the_gemm_and_its_pointwise_consumers_are_looked_through():
    def gelu_mlp(x, w1, w2):  # noqa: ANN001, ANN202 -- 3-D activations: mm, _unsafe_view, gelu, view, mm
        return F.gelu(x @ w1) @ w2

    assert gemm_verdicts(gelu_mlp, (2, 3, 64), (64, 32), (32, 8)) == [True, False]


def test_a_chain_that_ends_in_the_graphs_output_still_counts():
    def tanh_out(x, w):  # noqa: ANN001, ANN202
        return torch.tanh(x @ w) * 2.0

    assert gemm_verdicts(tanh_out, (8, 16), (16, 4)) == [True]


def test_a_residual_add_that_feeds_a_norm_is_left_to_the_norm():
    def residual_norm(x, w, r):  # noqa: ANN001, ANN202 -- the down projection before an RMSNorm
        h = r + x @ w
        return h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True)).to(h.dtype)

    assert gemm_verdicts(residual_norm, (4, 64), (64, 32), (4, 32)) == [False]


@pytest.mark.parametrize("consumer", [
    lambda y: torch.relu(y).sum(),                   # a reduction after the pointwise op
    lambda y: torch.cat([torch.relu(y), y]),         # a concatenation
    lambda y: torch.relu(y) + torch.zeros(3, *y.shape),  # broadcast to more elements than the GEMM's
    lambda y: y.split(2, dim=1)[0] * 2,              # a split's getitem
    lambda y: y,                                     # no consumer but the output
    lambda y: y.sum(dim=0),                          # no pointwise consumer at all
])
def test_consumers_that_may_fuse_elsewhere_earn_nothing(consumer: Callable[[torch.Tensor], torch.Tensor]):
    assert gemm_verdicts(lambda x, w: consumer(x @ w), (8, 16), (16, 4)) == [False]


def test_a_chain_longer_than_the_walk_counts_as_none():
    def long_chain(x, w):  # noqa: ANN001, ANN202
        y = x @ w
        for _ in range(pointwise_epilogue.MAX_WALK):
            y = y * 1.5
        return y

    assert gemm_verdicts(long_chain, (8, 16), (16, 4)) == [False]


def test_an_unreadable_node_counts_as_none():
    assert has_separate_epilogue(types.SimpleNamespace(users={object(): None})) is False


def first_gemm(fn: Callable[..., Any], *shapes: tuple[int, ...]) -> Any:
    graph = make_fx(fn)(*(torch.randn(s) for s in shapes)).graph
    return next(n for n in graph.nodes if n.op == "call_function" and n.target in gemm_targets())


def test_the_lowering_gemm_is_read_from_inductors_current_node():
    from torch._inductor import config
    from torch._inductor.virtualized import V

    node = first_gemm(mlp, *MLP_SHAPES)
    with V.set_graph_handler(types.SimpleNamespace(current_node=node)):
        assert pointwise_epilogue.lowering_has_separate_epilogue(4 * 32)
        assert not pointwise_epilogue.lowering_has_separate_epilogue(4 * 33)  # another GEMM's candidates
        # config.patch, not monkeypatch: monkeypatch's undo deletes a config module's entry (it is
        # no attribute of the module), and every later read of epilogue_fusion then fails.
        with config.patch(epilogue_fusion=False):
            assert not pointwise_epilogue.lowering_has_separate_epilogue(4 * 32)  # Inductor would not fuse it
    relu = next(iter(node.users))
    with V.set_graph_handler(types.SimpleNamespace(current_node=relu)):
        assert not pointwise_epilogue.lowering_has_separate_epilogue(4 * 32)  # not a GEMM node


def test_outside_a_compile_there_is_no_epilogue():
    assert pointwise_epilogue.lowering_has_separate_epilogue(128) is False
