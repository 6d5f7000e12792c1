"""Every registered performance model keeps the estimate() contract; load_default falls back."""

from __future__ import annotations

import numpy as np
import pytest
from tests.model_contract import MODEL_CHECKS, assert_model_contract

from kernel_select.model.analytical import AnalyticalModel
from kernel_select.errors import ModelError
from kernel_select.model import PerformanceModel, get_model, load_default, registered_models

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
        def estimate(self, m, n, k, dtype, configs, **kwargs):
            out = super().estimate(m, n, k, dtype, configs, **kwargs)
            return out / out.mean() if len(out) else out

    with pytest.raises(AssertionError, match="one at a time"):
        assert_model_contract(BatchDependent(DEVICE))


def test_contract_catches_wrong_order_and_dtype():
    class Reversed(AnalyticalModel):
        def estimate(self, m, n, k, dtype, configs, **kwargs):
            return super().estimate(m, n, k, dtype, configs, **kwargs)[::-1].copy()

    class Float32(AnalyticalModel):
        def estimate(self, m, n, k, dtype, configs, **kwargs):
            return super().estimate(m, n, k, dtype, configs, **kwargs).astype(np.float32)

    with pytest.raises(AssertionError, match="permut"):
        assert_model_contract(Reversed(DEVICE))
    with pytest.raises(AssertionError, match="float64"):
        assert_model_contract(Float32(DEVICE))


def test_load_default_without_trained_model_is_analytical(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_SELECT_MODELS_DIR", str(tmp_path))  # an empty models directory
    model = load_default(DEVICE)
    assert isinstance(model, AnalyticalModel)
    assert model.device.key == DEVICE
    assert "analytical" in model.describe() and DEVICE in model.describe()
    assert model.estimate(560, 1280, 3420, "bfloat16", []).shape == (0,)


def test_get_model_names_the_available_models():
    with pytest.raises(ModelError, match="analytical"):
        get_model("no-such-model", DEVICE)
