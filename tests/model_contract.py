"""The contract every PerformanceModel must keep, as reusable checks.

Each `check_*` takes a model instance and fails with an assertion naming the broken rule.
`MODEL_CHECKS` lists them all (parametrize over it for one test per rule), and
`assert_model_contract(model)` runs them in one go:

    from tests.model_contract import assert_model_contract
    assert_model_contract(MyModel("h100"))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.errors import UnsupportedProblemError
from kernel_select.model import PerformanceModel
from kernel_select.problem import Problem
from kernel_select.space import for_problem

#: Problems the checks score: the seed shape, a tiny one, an unaligned one and a large one.
CONTRACT_PROBLEMS = (
    Problem(560, 1280, 3420, "bfloat16"),
    Problem(1, 16, 16, "float16"),
    Problem(7, 33, 100, "float32"),
    Problem(4096, 4096, 4096, "bfloat16"),
)


def _configs(problem: Problem, model: PerformanceModel, limit: int = 64) -> list[GemmConfig]:
    space = for_problem(problem, model.device, "exhaustive")
    # An evenly spread sample keeps the checks fast while covering every tile shape family.
    step = max(1, len(space) // limit)
    return list(space[::step])


def _score(model: PerformanceModel, problem: Problem, configs: list[GemmConfig]) -> np.ndarray:
    return model.estimate(problem.m, problem.n, problem.k, problem.dtype, configs)


def check_shape_and_dtype(model: PerformanceModel) -> None:
    for problem in CONTRACT_PROBLEMS:
        configs = _configs(problem, model)
        out = _score(model, problem, configs)
        assert isinstance(out, np.ndarray), f"{model.name}: estimate returned {type(out).__name__}"
        assert out.dtype == np.float64, f"{model.name}: dtype {out.dtype}, expected float64"
        assert out.shape == (len(configs),), f"{model.name}: shape {out.shape} for {len(configs)} configs"


def check_finite_positive(model: PerformanceModel) -> None:
    for problem in CONTRACT_PROBLEMS:
        out = _score(model, problem, _configs(problem, model))
        assert np.all(np.isfinite(out)), f"{model.name}: non-finite runtime for {problem}"
        assert np.all(out > 0), f"{model.name}: non-positive runtime for {problem}"


# Models may run in float32: a BLAS kernel picked for a batch of 1 rounds differently from one
# picked for 1000 rows (~1e-7 relative). Batch statistics or cross-row leakage show up as
# differences of 1e-3 and more, which this bound still catches.
FLOAT32_RTOL = 1e-5


def check_input_order(model: PerformanceModel) -> None:
    rng = np.random.default_rng(0)
    for problem in CONTRACT_PROBLEMS:
        configs = _configs(problem, model)
        perm = rng.permutation(len(configs))
        out = _score(model, problem, configs)
        permuted = _score(model, problem, [configs[i] for i in perm])
        np.testing.assert_allclose(permuted, out[perm], rtol=FLOAT32_RTOL, atol=0,
                                   err_msg=f"{model.name}: permuting configs must permute runtimes")


def check_deterministic(model: PerformanceModel) -> None:
    problem = CONTRACT_PROBLEMS[0]
    configs = _configs(problem, model)
    first = _score(model, problem, configs)
    for _ in range(2):
        np.testing.assert_array_equal(_score(model, problem, configs), first,
                                      err_msg=f"{model.name}: repeated calls differ")


def check_batch_invariant(model: PerformanceModel) -> None:
    for problem in CONTRACT_PROBLEMS:
        configs = _configs(problem, model, limit=24)
        together = _score(model, problem, configs)
        alone = np.concatenate([_score(model, problem, [config]) for config in configs])
        np.testing.assert_allclose(alone, together, rtol=FLOAT32_RTOL, atol=0,
                                   err_msg=f"{model.name}: scoring one at a time differs from together")


def check_empty_configs(model: PerformanceModel) -> None:
    out = model.estimate(560, 1280, 3420, "bfloat16", [])
    assert isinstance(out, np.ndarray) and out.shape == (0,), f"{model.name}: empty input gave {out!r}"


def check_unsupported_dtype(model: PerformanceModel) -> None:
    configs = _configs(CONTRACT_PROBLEMS[0], model, limit=4)
    for dtype in ("int8", "float8_e4m3fn", "complex64"):
        with pytest.raises(UnsupportedProblemError):
            model.estimate(560, 1280, 3420, dtype, configs)


ModelCheck = Callable[[PerformanceModel], None]

MODEL_CHECKS: tuple[ModelCheck, ...] = (
    check_shape_and_dtype, check_finite_positive, check_input_order, check_deterministic,
    check_batch_invariant, check_empty_configs, check_unsupported_dtype,
)


def assert_model_contract(model: PerformanceModel) -> None:
    """Run every contract check against `model`; the first broken rule fails the test."""
    for check in MODEL_CHECKS:
        check(model)
