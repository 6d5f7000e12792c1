"""What pretune learns of a compiled graph's GEMMs (kernel_select.inductor.lowered): which size
follows the length, over which range, how many per length, and why some cannot be pinned per range."""

from __future__ import annotations

import pytest
import sympy

from kernel_select.inductor import inputs as inductor_inputs
from kernel_select.inductor import lowered
from kernel_select.model.cublas import Epilogue
from kernel_select.problem import Problem

S = sympy.Symbol("s0", positive=True, integer=True)
T = sympy.Symbol("s1", positive=True, integer=True)
PROBLEM = Problem(96, 32, 64)
EPILOGUE = Epilogue(bias_row=True)


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranges as mark_dynamic(min=16, max=4096) declares them for s0 (Inductor's shape env would)."""
    def bound(expr: object) -> tuple[int, int] | None:
        if getattr(expr, "free_symbols", None) != {S}:
            return None
        return int(expr.subs(S, 16)), int(expr.subs(S, 4096))  # type: ignore[union-attr]

    monkeypatch.setattr(inductor_inputs, "declared_range", bound)


@pytest.mark.usefixtures("declared")
def test_a_dynamic_m_or_k_records_its_range_and_its_multiple_of_the_length():
    assert lowered.lowered_gemm(PROBLEM, EPILOGUE, (96, 32, 64)) == lowered.LoweredGemm(PROBLEM, EPILOGUE)
    assert lowered.lowered_gemm(PROBLEM, EPILOGUE, (S, 32, 64)) == lowered.LoweredGemm(
        PROBLEM, EPILOGUE, "m", 16, 4096, 1)
    # two sequences per batch, flattened: M = 2 x length
    assert lowered.lowered_gemm(PROBLEM, EPILOGUE, (2 * S, 32, 64)) == lowered.LoweredGemm(
        PROBLEM, EPILOGUE, "m", 32, 8192, 2)
    weight_gradient = lowered.lowered_gemm(PROBLEM, EPILOGUE, (32, 64, S))
    assert (weight_gradient.dynamic, weight_gradient.low, weight_gradient.high) == ("k", 16, 4096)


@pytest.mark.usefixtures("declared")
@pytest.mark.parametrize("mnk, why", [((96, S, 64), "N = s0 follows the length"),
                                      ((S, 32, S), "M = s0 and K = s0 both follow the length"),
                                      ((S + 1, 32, 64), "M = s0 + 1 is not a multiple of one length"),
                                      ((T, 32, 64), "M = s1 has no declared range")])
def test_a_size_that_no_range_entry_can_serve_says_why(mnk: tuple[object, object, object], why: str):
    assert why in lowered.lowered_gemm(PROBLEM, EPILOGUE, mnk).unpinnable
