"""`kernel-select fidelity` on a real GPU: Inductor and the harness time the same configs of a problem
in a transposed layout, with shared binaries and with the sizes compiled in."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


@pytest.mark.parametrize("literal_sizes", [False, True])
def test_fidelity_times_an_nt_problem_both_ways(literal_sizes):
    from kernel_select.device import detect
    from kernel_select.offline.harness import fidelity
    from kernel_select.problem import Problem

    problem = Problem(64, 512, 1024, "bfloat16", layout="nt")  # x @ W.t(), as nn.Linear runs it
    [result] = fidelity.check([problem], detect(), configs_per_problem=6, literal_sizes=literal_sizes)
    assert result.problem == str(problem)
    assert result.n_configs >= 3  # Inductor timed the pinned configs of this layout, and so did the harness
    assert math.isfinite(result.spearman_median) and 0.3 < result.median_ratio < 3.0
    assert result.harness_best_ratio >= 1.0
