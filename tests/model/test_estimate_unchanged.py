"""The shipped models predict what they predicted when the fixture was recorded.

Two references, over problems of every layout, aligned and not, half and fp32, a biased Linear at
M = 1 and a batched GEMM:
- the fixture (tests/fixtures/shipped_estimates.npz) holds, per shipped device, each problem's
  configs, the MLP's estimates for them and its cuBLAS time, and the H100 gate's log ratios, as
  the code at the 1.0 refactor computed them (bit for bit what the code before the refactor
  computed). Any drift fails: a retrained model or a changed feature, network or loading path. When
  the change is intended, record the fixture again with `python -m tests.model.test_estimate_unchanged`
  and say why in the commit;
- the slow path recomputed here: features through the dataset-frame path (no config columns read
  from objects) and the members run one by one, as in training.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from kernel_select.configs import GemmConfig
from kernel_select.model.cublas import CublasGate
from kernel_select.model.mlp import AveragedRuntimeNet, MLPModel
from kernel_select.offline.training.features import featurize_frame
from kernel_select.problem import Problem
from kernel_select.resources import shipped_dir
from kernel_select.space import for_problem

FIXTURE = Path(__file__).parent.parent / "fixtures" / "shipped_estimates.npz"
DEVICES = ("h100", "h200")
CASES = [Problem(560, 1280, 3420, "bfloat16"), Problem(560, 1280, 3420, "bfloat16", layout="nt"),
         Problem(3420, 1280, 560, "bfloat16", layout="tn"), Problem(5, 1656, 152, "float16", layout="nt"),
         Problem(1000, 1001, 999, "float16"), Problem(1024, 1024, 1024, "float32", layout="tn"),
         Problem(1, 4096, 4096, "bfloat16", op="addmm", layout="nt"),
         Problem(128, 64, 64, "bfloat16", op="bmm", batch=8)]
# float32 rounding of log ms between machines, and between the fused members and the members one by
# one (which sum in another order); a retrained model moves estimates by percents.
RTOL = 1e-5
RECORD_AGAIN = ("if the change is intended, record the fixture again: "
                "python -m tests.model.test_estimate_unchanged")


def _key(problem: Problem) -> str:
    sizes = f"{problem.batch}x{problem.m}x{problem.n}x{problem.k}"
    return f"{problem.op}_{sizes}_{problem.dtype}_{problem.layout}"


def _shipped(device: str) -> MLPModel:
    return MLPModel.load(shipped_dir("models") / device, device)


def _shipped_gate() -> CublasGate:
    return CublasGate.load(shipped_dir("models") / "h100", "h100")


def record(path: Path = FIXTURE) -> None:
    """Write the fixture from the shipped models and the code as they are now."""
    arrays: dict[str, np.ndarray] = {}
    for device in DEVICES:
        model = _shipped(device)
        for problem in CASES:
            configs = for_problem(problem, device)
            key = f"{device}/{_key(problem)}"
            arrays[f"{key}/configs"] = np.array([c.key for c in configs], dtype=np.int16)
            arrays[f"{key}/ms"] = model.estimate(problem, configs)
            aten = model.estimate_aten(problem)
            arrays[f"{key}/aten_ms"] = np.array(np.nan if aten is None else aten)
    arrays["h100/gate_log_ratio"] = _shipped_gate().predict_log_ratio(CASES)
    np.savez_compressed(path, **arrays)


@pytest.fixture(scope="module")
def recorded():
    return np.load(FIXTURE)


@pytest.fixture(scope="module", params=DEVICES)
def model(request) -> MLPModel:
    return _shipped(request.param)


@pytest.mark.parametrize("problem", CASES, ids=_key)
def test_estimates_equal_the_recorded_ones(model, recorded, problem):
    key = f"{model.device.key}/{_key(problem)}"
    configs = [GemmConfig.from_key(tuple(int(x) for x in row)) for row in recorded[f"{key}/configs"]]
    np.testing.assert_allclose(model.estimate(problem, configs), recorded[f"{key}/ms"], rtol=RTOL,
                               err_msg=f"{key}: the shipped MLP's estimates drifted; {RECORD_AGAIN}")
    aten = model.estimate_aten(problem)
    expected = float(recorded[f"{key}/aten_ms"])
    assert (aten is None) == np.isnan(expected), f"{key}: the cuBLAS head now scores {aten}"
    if aten is not None:
        assert aten == pytest.approx(expected, rel=RTOL), f"{key}: cuBLAS time drifted; {RECORD_AGAIN}"


def test_the_gate_predicts_the_recorded_ratios(recorded):
    np.testing.assert_allclose(_shipped_gate().predict_log_ratio(CASES), recorded["h100/gate_log_ratio"],
                               rtol=RTOL, atol=1e-6, err_msg=f"the shipped gate drifted; {RECORD_AGAIN}")


def test_the_fixture_covers_every_case_on_every_shipped_device(recorded):
    # a case added to CASES without recording again would otherwise fail with a KeyError
    parts = ("configs", "ms", "aten_ms")
    expected = {f"{d}/{_key(p)}/{part}" for d in DEVICES for p in CASES for part in parts}
    assert set(recorded.files) == expected | {"h100/gate_log_ratio"}


@pytest.mark.parametrize("problem", CASES, ids=_key)
def test_estimates_equal_the_slow_path(model, problem):
    configs = for_problem(problem, model.device)
    frame = pd.DataFrame([{"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype,
                           "layout": problem.layout, "batch": problem.batch, **c.model_dump()}
                          for c in configs])
    x = (featurize_frame(frame, model.device, model.card.feature_version) - model._mean) * model._inv_std
    nets = model.net.members if isinstance(model.net, AveragedRuntimeNet) else [model.net]
    with torch.inference_mode():
        members = [net(torch.from_numpy(x.astype(np.float32))).numpy() for net in nets]
    slow = np.exp(np.mean(members, axis=0).astype(np.float64))
    if model.card.feature_version < 5:  # version 4 scores one GEMM of a batch: the batch is more of it
        slow = slow * problem.batch
    np.testing.assert_allclose(model.estimate(problem, configs), slow, rtol=RTOL)


if __name__ == "__main__":
    record(Path(sys.argv[1]) if len(sys.argv) > 1 else FIXTURE)
