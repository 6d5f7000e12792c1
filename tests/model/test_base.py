"""The estimate() contract: every registered model keeps it, estimate validates once and calls
predict(problem, device, configs), and load_default serves only trained models."""

from __future__ import annotations

import numpy as np
import pytest
from tests.model_contract import MODEL_CHECKS, assert_model_contract

from kernel_select.configs import GemmConfig
from kernel_select.errors import ModelError, NoTrainedModelError, ProblemError, UnsupportedProblemError
from kernel_select.model.analytical import AnalyticalModel
from kernel_select.model.mlp import MLPModel
from kernel_select.problem import Problem
from kernel_select.model import PerformanceModel, get_model, load_default, registered_models
from kernel_select.resources import MODELS_DIR_ENV

DEVICE = "h100"


def _model_or_skip(name: str) -> PerformanceModel:
    try:
        return get_model(name, DEVICE)
    except ModelError as exc:  # e.g. a learned model with no weights shipped for this device yet
        pytest.skip(f"model {name!r} cannot be loaded for {DEVICE}: {exc}")


@pytest.mark.parametrize("check", MODEL_CHECKS, ids=lambda check: check.__name__)
@pytest.mark.parametrize("name", registered_models(DEVICE))
def test_registered_model_keeps_contract(name, check):
    check(_model_or_skip(name))


def test_analytical_is_registered_for_every_device():
    for device in ("h100", "h100-pcie", "h200", "a100"):
        assert "analytical" in registered_models(device)
        assert isinstance(get_model("analytical", device), AnalyticalModel)


def test_contract_catches_a_batch_dependent_model():
    # The suite must be able to fail: a model whose output depends on its batch (as a
    # BatchNorm left in training mode would) breaks batch invariance.
    class BatchDependent(AnalyticalModel):
        def predict(self, problem, device, configs):
            out = super().predict(problem, device, configs)
            return out / out.mean() * 1e-2

    with pytest.raises(AssertionError, match="one at a time"):
        assert_model_contract(BatchDependent(DEVICE))


def test_contract_catches_wrong_order():
    class Reversed(AnalyticalModel):
        def predict(self, problem, device, configs):
            return super().predict(problem, device, configs)[::-1].copy()

    with pytest.raises(AssertionError, match="permut"):
        assert_model_contract(Reversed(DEVICE))


class _Recording(PerformanceModel):
    """Returns 1 ms per config and remembers what `predict` was called with."""

    name = "recording"

    def __init__(self, device, result=None):
        super().__init__(device)
        self.calls, self.result = [], result

    def predict(self, problem, device, configs):
        self.calls.append((problem, device, list(configs)))
        return np.ones(len(configs)) if self.result is None else self.result


CONFIGS = [GemmConfig.create(block_m=64, block_n=64, block_k=32, num_stages=3, num_warps=4),
           GemmConfig.create(block_m=128, block_n=64, block_k=64, num_stages=4, num_warps=8)]


def test_both_estimate_forms_reach_predict_with_a_problem_and_the_device():
    model = _Recording("h200")
    problem = Problem(560, 1280, 3420, "bfloat16")
    first = model.estimate(problem, CONFIGS)
    second = model.estimate(560, 1280, 3420, "bf16", CONFIGS)
    np.testing.assert_array_equal(first, second)
    assert first.dtype == np.float64
    assert [(p, d.key) for p, d, _ in model.calls] == [(problem, "h200"), (problem, "h200")]


def test_estimate_validates_before_predict():
    model = _Recording(DEVICE)
    with pytest.raises(ProblemError):
        model.estimate(0, 16, 16, "bfloat16", CONFIGS)
    with pytest.raises(UnsupportedProblemError, match="int8"):
        model.estimate(16, 16, 16, "int8", CONFIGS)
    with pytest.raises(TypeError, match="problem, configs"):
        model.estimate(16, 16, CONFIGS)
    assert model.estimate(Problem(16, 16, 16), []).shape == (0,)
    assert model.calls == []


@pytest.mark.parametrize("result", [np.ones(1), np.array([1.0, np.nan]), np.array([1.0, 0.0])],
                         ids=["short", "nan", "zero"])
def test_malformed_predictions_are_a_model_error(result):
    with pytest.raises(ModelError, match="malformed runtimes"):
        _Recording(DEVICE, result).estimate(Problem(64, 64, 64), CONFIGS)


@pytest.fixture
def no_user_models(tmp_path, monkeypatch):
    """An empty user model directory: only the shipped models serve."""
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))


@pytest.mark.parametrize("device", ["h200", "a100"])
def test_no_device_means_the_local_gpu(monkeypatch, no_user_models, device):
    from kernel_select import device as device_module

    monkeypatch.setattr(device_module, "detect", lambda index=0: device_module.get_device(device))
    assert get_model("analytical").device.key == device
    if device == "h200":
        model = load_default()
        assert isinstance(model, MLPModel) and model.device.key == model.card.device == "h200"
    else:
        with pytest.raises(NoTrainedModelError, match="a100"):
            load_default()


def test_load_default_without_a_trained_model_raises_and_never_ranks_analytically(no_user_models):
    with pytest.raises(NoTrainedModelError) as info:
        load_default("a100")
    assert isinstance(info.value, ModelError)  # callers that catch ModelError keep working
    message = str(info.value)
    assert "no trained model for a100" in message and "kernel-select calibrate" in message
    assert "model='analytical'" in message  # the untrained model is there, by name only
    analytical = get_model("analytical", "a100")
    assert isinstance(analytical, AnalyticalModel) and analytical.device.key == "a100"
    assert isinstance(load_default(DEVICE), MLPModel)  # an empty user folder: the shipped model


def test_get_model_names_the_available_models():
    with pytest.raises(ModelError, match="analytical"):
        get_model("no-such-model", DEVICE)
