"""The handler reads each GEMM's operand layout from Inductor's input strides (CPU doubles)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
import sympy
from torch._dynamo.source import ConstantSource
from torch._inductor.sizevars import SizeVarAllocator
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch._inductor.virtualized import V

import kernel_select.inductor as ks_inductor
import kernel_select.knobs as ks_config
from kernel_select.inductor.inputs import layout_from
from kernel_select.problem import Problem
from tests.inductor.kit import FakeInputs, finalize, inductor_candidates
from tests.inductor_doubles import FakeModel

M, N, K = 560, 1280, 3420
ROW_MAJOR_A, ROW_MAJOR_B = (K, 1), (N, 1)
TRANSPOSED_A, TRANSPOSED_B = (1, M), (1, K)  # A stored [K, M], B stored [N, K] (W in x @ W.t())


@pytest.fixture
def graph() -> Iterator[SizeVarAllocator]:
    """What the handler reads from the graph being lowered: its size variables."""
    sizevars = SizeVarAllocator(ShapeEnv())
    with V.set_graph_handler(SimpleNamespace(sizevars=sizevars)):
        yield sizevars


def select(inputs: FakeInputs, op: str = "mm") -> Problem:
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100")
    finalize(handler, inputs, inductor_candidates(inputs), op=op)
    return handler.selections[-1].problem


@pytest.mark.parametrize(("strides", "layout"), [
    ((ROW_MAJOR_A, ROW_MAJOR_B), "nn"),
    ((ROW_MAJOR_A, TRANSPOSED_B), "nt"),
    ((TRANSPOSED_A, ROW_MAJOR_B), "tn"),
    ((TRANSPOSED_A, TRANSPOSED_B), "tt"),
    ((ROW_MAJOR_A, (1, K + 64)), "nt"),  # a padded leading dimension is still a transposed view
])
def test_the_selection_carries_the_layout_of_the_strides(graph: SizeVarAllocator, strides: tuple, layout: str,
                                                         caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="kernel_select.inductor")
    problem = select(FakeInputs(M, N, K, strides=strides))
    assert problem == Problem(M, N, K, "bfloat16", layout=layout)
    shown = [r.getMessage() for r in caplog.records if "benchmarking" in r.getMessage()]
    assert shown and all(str(problem) in line for line in shown)
    assert (f"bfloat16 {layout} on" in shown[0]) == (layout != "nn")


def test_bmm_reads_the_last_two_dimensions(graph: SizeVarAllocator):
    inputs = FakeInputs(128, 256, 512, batch=6, strides=((512, 1), (1, 512)))
    assert select(inputs, op="bmm").layout == "nt"


@pytest.mark.parametrize("case", ["symbolic stride", "symbolic leading dimension", "sliced", "broadcast"])
def test_strides_that_prove_no_layout_read_as_nn(graph: SizeVarAllocator, case: str,
                                                 caplog: pytest.LogCaptureFixture):
    s0, s1 = sympy.symbols("s0 s1", positive=True, integer=True)
    b = {"symbolic stride": (s0, s1), "symbolic leading dimension": (1, s0),
         "sliced": (2 * N, 2), "broadcast": (0, 0)}[case]
    caplog.set_level(logging.DEBUG, logger="kernel_select.inductor")
    assert layout_from(FakeInputs(M, N, K, strides=(ROW_MAJOR_A, b))) == "nn"
    assert any("neither row-major nor transposed" in r.getMessage() for r in caplog.records)


def test_a_dynamic_k_that_the_leading_dimension_follows_is_still_transposed(graph: SizeVarAllocator):
    # As Dynamo makes it: a dynamic size has the range [2, inf) in the shape environment.
    k = graph.shape_env.create_symbol(K, ConstantSource("k"))
    inputs = FakeInputs(M, N, K, k_symbolic=k, strides=((k, 1), (1, k)))
    assert layout_from(inputs) == "nt"


def test_anything_failing_reads_as_nn_without_raising(caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.DEBUG, logger="kernel_select.inductor")
    # No graph is being lowered: V.graph has no size variables.
    assert layout_from(FakeInputs(M, N, K, strides=(ROW_MAJOR_A, TRANSPOSED_B))) == "nn"
    assert any("operand layout unknown" in r.getMessage() for r in caplog.records)
    broken = FakeInputs(M, N, K)
    broken.mat1mat2 = None  # type: ignore[assignment]
    assert layout_from(broken) == "nn"


class TrainedOnNN(FakeModel):
    """A learned model whose card lists "nn" only and whose own estimate is always 2 configs."""

    def trained_layouts(self) -> tuple[str, ...]:
        return ("nn",)

    def auto_topk(self, runtime_ms, cap, problem=None, configs=None) -> int:  # noqa: ANN001
        return 2


@pytest.mark.parametrize(("b", "count", "why"), [
    (ROW_MAJOR_B, 2, ""), (TRANSPOSED_B, 5, "layout nt not in the model's training data")])
def test_auto_takes_its_cap_for_a_layout_outside_training_and_says_why(
        graph: SizeVarAllocator, b: tuple, count: int, why: str, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.INFO, logger="kernel_select.inductor")
    inputs = FakeInputs(M, N, K, strides=(ROW_MAJOR_A, b))
    with ks_config.patch(gemm_auto_topk_cap=5):
        handler = ks_inductor.KernelSelectChoices(gemm_topk="auto", gemm_model=TrainedOnNN(),
                                                  gemm_device="h100")
        finalize(handler, inputs, inductor_candidates(inputs))
    selection = handler.selections[-1]
    assert len(selection.configs) == count and selection.auto_at_cap == why
    line = next(r.getMessage() for r in caplog.records if "benchmarking" in r.getMessage())
    assert (f"gemm_topk=auto at its cap: {why}" in line) == bool(why)


def test_a_lut_pin_serves_only_the_layout_it_names(graph: SizeVarAllocator, tmp_path):  # noqa: ANN001
    # A Linear's weight gradient grad_y.t() @ x ("tn") at a length of 1280 has the sizes of its
    # input gradient grad_y @ W ("nn"): one (m, n, k), two layouts, and a pin for one only.
    from kernel_select.configs import GemmConfig
    from kernel_select.layouts import operand_strides
    from kernel_select.lut import lut_from_rows, LUTEntry, save_lut
    from tests.inductor.kit import triton_of

    pinned = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=4, num_warps=4)
    inputs = FakeInputs(1280, 3420, 1280, strides=operand_strides(1280, 3420, 1280, "tn"))
    for layout, expected in (("nt", None), ("tn", pinned)):
        path = tmp_path / f"{layout}.json"
        save_lut(lut_from_rows([("h100", "mm", "bfloat16",
                                       LUTEntry(m=1280, n=3420, k=1280, layout=layout, pin=pinned))]), path)
        handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                                  kernel_lut_path=str(path))
        offered = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
        assert handler.selections[-1].problem.layout == "tn"
        assert handler.selections[-1].pinned == expected, layout
        assert len(offered) == (1 if expected else 4), layout  # the "nt" pin leaves the model's top-4
