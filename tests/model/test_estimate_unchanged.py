"""`estimate` of the shipped model gives what it gave before its inference path was made faster.

Two references, over problems of every layout, aligned and not, half and fp32:
- the fixture holds the estimates as the code computed them before the config-column table and the
  fused output layer (float32, recorded with the shipped model whose digest it names);
- the slow path recomputed here: features through the dataset-frame path (no config columns read
  from objects) and the members run one by one, as in training.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from kernel_select.model.mlp import MLPModel
from kernel_select.problem import Problem
from kernel_select.space import for_problem

FIXTURE = Path(__file__).parent.parent / "fixtures" / "estimate_h100_before_column_cache.npz"
CASES = [Problem(560, 1280, 3420, "bfloat16"), Problem(560, 1280, 3420, "bfloat16", layout="nt"),
         Problem(3420, 1280, 560, "bfloat16", layout="tn"), Problem(5, 1656, 152, "float16", layout="nt"),
         Problem(1000, 1001, 999, "float16"), Problem(1024, 1024, 1024, "float32", layout="tn")]
# The fused members sum in another order than the members one by one: float32 rounding of log ms.
RTOL = 1e-5


@pytest.fixture(scope="module")
def model() -> MLPModel:
    return MLPModel.load("models/h100", "h100")


def weights_digest(model: MLPModel) -> str:
    """sha256 of what the estimates depend on: the network's weights and the feature normalization.
    Not `model.digest()`, which also hashes the card, so refitting topk="auto" (a card field) would
    skip this test although every estimate is the same."""
    h = hashlib.sha256()
    for name, tensor in sorted(model.net.state_dict().items()):
        h.update(name.encode() + tensor.detach().cpu().contiguous().numpy().tobytes())
    for array in (model._mean, model._inv_std):
        h.update(np.ascontiguousarray(array, dtype=np.float64).tobytes())
    return h.hexdigest()


def _key(p: Problem) -> str:
    return f"{p.m}x{p.n}x{p.k}_{p.dtype}_{p.layout}"


@pytest.mark.parametrize("problem", CASES, ids=_key)
def test_estimates_equal_the_recorded_ones(model, problem):
    recorded = np.load(FIXTURE)
    if str(recorded["digest"]) != weights_digest(model):
        pytest.skip("the shipped model's weights changed after the fixture was recorded")
    estimate = model.estimate(problem, for_problem(problem, "h100"))
    np.testing.assert_allclose(estimate, recorded[_key(problem)], rtol=RTOL)


@pytest.mark.parametrize("problem", CASES, ids=_key)
def test_estimates_equal_the_slow_path(model, problem):
    configs = for_problem(problem, "h100")
    frame = pd.DataFrame([{"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype,
                           "layout": problem.layout, **c.model_dump()} for c in configs])
    x = (_frame_features(model, frame) - model._mean) * model._inv_std
    with torch.inference_mode():
        log_ms = model.net(torch.from_numpy(x.astype(np.float32))).numpy()
    np.testing.assert_allclose(model.estimate(problem, configs), np.exp(log_ms.astype(np.float64)), rtol=RTOL)


def _frame_features(model: MLPModel, frame: pd.DataFrame) -> np.ndarray:
    from kernel_select.model import features, features_v2, features_v3, features_v4

    modules = (features, features_v2, features_v3, features_v4)
    by_version = {module.FEATURE_VERSION: module for module in modules}
    return by_version[model.card.feature_version].featurize_frame(frame, model.device)
