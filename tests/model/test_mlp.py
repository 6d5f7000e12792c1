"""The MLP model: the PerformanceModel contract, persistence, and refusing mismatched files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from kernel_select.errors import (
    ModelCardMismatchError, ModelError, NoTrainedModelError, UnsupportedProblemError,
)
from kernel_select.model import get_model
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION
from kernel_select.model.mlp import CARD_FILE, WEIGHTS_FILE, MLPModel
from kernel_select.offline.training.train import save_model
from kernel_select.problem import Problem
from kernel_select.resources import MODELS_DIR_ENV, shipped_dir
from kernel_select.space import for_problem
from tests.model_contract import FLOAT32_RTOL
from tests.synthetic import untrained_mlp

SEED = Problem(560, 1280, 3420, "bfloat16")
CONFIGS = for_problem(SEED, "h100")


@pytest.fixture(scope="module")
def model() -> MLPModel:
    return untrained_mlp()


def _estimate(model, configs=CONFIGS, dtype="bfloat16"):
    return model.estimate(SEED.m, SEED.n, SEED.k, dtype, configs)


def test_shape_dtype_finite_and_above_overhead(model):
    out = _estimate(model)
    assert out.shape == (len(CONFIGS),) and out.dtype == np.float64
    assert np.isfinite(out).all()
    assert (out >= model.net.kernel_overhead_ms * (1 - 1e-6)).all()


def test_input_order_is_output_order(model):
    out = _estimate(model)
    perm = np.random.default_rng(0).permutation(len(CONFIGS))
    # Rows that land elsewhere in the BLAS kernel's blocking may round differently in float32.
    permuted = _estimate(model, [CONFIGS[i] for i in perm])
    np.testing.assert_allclose(permuted, out[perm], rtol=FLOAT32_RTOL, atol=0)


def test_deterministic_and_batch_invariant(model):
    together = _estimate(model)
    np.testing.assert_array_equal(_estimate(model), together)
    alone = np.array([_estimate(model, [c])[0] for c in CONFIGS[::97]])
    np.testing.assert_allclose(alone, together[::97], rtol=1e-5)


def test_dtypes_outside_training_are_unsupported(model):
    with pytest.raises(UnsupportedProblemError, match="float32"):
        _estimate(model, dtype="float32")
    with pytest.raises(UnsupportedProblemError):
        _estimate(model, dtype="int8")


def test_half_types_share_a_model(tmp_path):
    model = untrained_mlp()
    model.card = model.card.model_copy(update={"dtypes": ["bfloat16"]})
    np.testing.assert_array_equal(_estimate(model, dtype="float16"), _estimate(model, dtype="bfloat16"))


def test_save_load_round_trip(model, tmp_path):
    save_model(model, tmp_path)
    loaded = MLPModel.load(tmp_path, "h100")
    np.testing.assert_array_equal(_estimate(loaded), _estimate(model))
    assert loaded.card == model.card
    assert MLPModel.load(tmp_path).device.key == "h100"  # no device: the one the card names


def test_a_folder_without_a_model_is_a_model_error_naming_the_fix(tmp_path):
    with pytest.raises(ModelError, match=f"{tmp_path}: no trained mlp model here.*kernel-select train"):
        MLPModel.load(tmp_path)
    with pytest.raises(ModelError, match="no trained mlp model here for h100"):
        MLPModel.load(tmp_path, "h100")


def _saved(tmp_path):
    save_model(untrained_mlp(), tmp_path)
    return tmp_path


def _edit_card(path, **changes):
    card = json.loads((path / CARD_FILE).read_text())
    card.update(changes)
    (path / CARD_FILE).write_text(json.dumps(card))


@pytest.mark.parametrize("changes, message", [
    ({"feature_version": 0}, "feature_version 0"),
    ({"feature_names": ["a", "b"]}, "feature version"),
    ({"device": "a100"}, "trained for device 'a100'"),
    ({"architecture": {"inputs": len(FEATURE_SETS[FEATURE_VERSION]), "hidden_widths": [32, 16],
                       "activation": "relu"}}, "weights do not fit the card's architecture"),
    ({"architecture": {"inputs": 33, "hidden_widths": [16, 16], "activation": "relu"}},
     "architecture.inputs, feature_mean and feature_std must all be"),
    ({"schema_version": 3}, "schema_version"),
    ({"model": "cublas_gate"}, "not 'mlp'"),
    ({"unknown_field": 1}, "unknown_field"),
    ({"layouts": ["nn", "NT"]}, "layouts.*unsupported layout 'NT'"),
])
def test_mismatched_card_is_refused_with_the_retrain_command(tmp_path, changes, message):
    _edit_card(_saved(tmp_path), **changes)
    with pytest.raises(ModelCardMismatchError, match=message) as info:
        MLPModel.load(tmp_path, "h100")
    assert f"kernel-select train --data <dataset.parquet> --out {tmp_path} --device h100" in str(info.value)


def test_the_card_lists_the_layouts_trained_on_and_old_cards_mean_nn(tmp_path):
    saved = _saved(tmp_path)
    assert "layouts" in json.loads((saved / CARD_FILE).read_text())
    _edit_card(saved, layouts=["nn", "nt"])
    assert MLPModel.load(saved, "h100").trained_layouts() == ("nn", "nt")
    card = json.loads((saved / CARD_FILE).read_text())
    del card["layouts"]  # a card written before the field existed
    (saved / CARD_FILE).write_text(json.dumps(card))
    assert MLPModel.load(saved, "h100").trained_layouts() == ("nn",)


@pytest.mark.parametrize("version", [1, 2, 3])
def test_a_card_of_a_feature_version_this_code_no_longer_computes_is_refused(tmp_path, version):
    _edit_card(_saved(tmp_path), feature_version=version)
    with pytest.raises(ModelCardMismatchError, match=f"feature_version {version} .*kernel-select train"):
        MLPModel.load(tmp_path, "h100")


def test_a_model_built_for_a_removed_feature_version_is_refused():
    model = untrained_mlp()
    with pytest.raises(ModelError, match="feature version 3 is not one of this code's"):
        MLPModel(model.device, model.net, model.card.model_copy(update={"feature_version": 3}))


def test_a_v4_model_reads_the_layout_and_round_trips(tmp_path):
    model = untrained_mlp(feature_version=4)
    save_model(model, tmp_path)
    loaded = MLPModel.load(tmp_path, "h100")
    for layout in ("nn", "nt", "tn"):
        problem = Problem(SEED.m, SEED.n, SEED.k, SEED.dtype, layout=layout)
        np.testing.assert_array_equal(loaded.estimate(problem, CONFIGS), model.estimate(problem, CONFIGS))
    nt = Problem(SEED.m, SEED.n, SEED.k, SEED.dtype, layout="nt")
    assert not np.array_equal(model.estimate(nt, CONFIGS), model.estimate(SEED, CONFIGS))


def test_a_v4_model_scores_a_batch_as_that_many_gemms_and_a_v5_model_reads_the_batch():
    one, eight = Problem(128, 64, 64, "bfloat16"), Problem(128, 64, 64, "bfloat16", op="bmm", batch=8)
    configs = for_problem(one, "h100")
    v4 = untrained_mlp(feature_version=4)
    np.testing.assert_allclose(v4.estimate(eight, configs), 8 * v4.estimate(one, configs), rtol=1e-12)
    v5 = untrained_mlp(feature_version=5)
    x = v5.features(eight, configs)
    assert x.shape == (len(configs), 60) and np.allclose(x[:, -1], np.log(8))
    assert not np.allclose(v5.estimate(eight, configs), 8 * v5.estimate(one, configs))


def test_loading_for_another_device_is_refused(tmp_path):
    with pytest.raises(ModelCardMismatchError, match="not 'h200'"):
        MLPModel.load(_saved(tmp_path), "h200")


@pytest.mark.parametrize("missing", [WEIGHTS_FILE, CARD_FILE])
def test_a_missing_file_is_refused(tmp_path, missing):
    (_saved(tmp_path) / missing).unlink()
    with pytest.raises(ModelCardMismatchError, match=missing):
        MLPModel.load(tmp_path, "h100")


def test_weights_are_loaded_without_unpickling_objects(tmp_path):
    _saved(tmp_path)
    torch.save({"payload": _NotATensor()}, tmp_path / WEIGHTS_FILE)
    with pytest.raises(ModelCardMismatchError, match="cannot be loaded as weights .*_NotATensor"):
        MLPModel.load(tmp_path, "h100")
    assert not _NotATensor.unpickled


class _NotATensor:
    unpickled = False

    def __init__(self) -> None:
        self.state = "pickled"  # an object with state: unpickling it calls __setstate__

    def __setstate__(self, state):
        type(self).unpickled = True


def test_the_registrys_mlp_is_the_trained_model_or_no_trained_model_error(tmp_path, monkeypatch):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    with pytest.raises(NoTrainedModelError, match="no trained model for a100.*kernel-select calibrate"):
        get_model("mlp", "a100")
    model = untrained_mlp(device="a100")
    save_model(model, tmp_path / "a100")
    loaded = get_model("mlp", "a100")
    assert isinstance(loaded, MLPModel) and loaded.digest() == model.digest()
    np.testing.assert_array_equal(_estimate(loaded), _estimate(model))


def test_digest_identifies_the_weights():
    shipped = MLPModel.load(shipped_dir("models") / "h100", "h100")
    again = MLPModel.load(shipped_dir("models") / "h100", "h100")
    assert shipped.digest() == again.digest() and len(shipped.digest()) == 64
    with torch.no_grad():
        next(again.net.parameters()).add_(1e-3)
    again._digest = None  # the cached digest belongs to the old weights
    assert again.digest() != shipped.digest()


def test_an_averaged_model_predicts_the_mean_log_ms_of_its_members(tmp_path):
    from kernel_select.model.mlp import AveragedRuntimeNet, RuntimeNet

    model = untrained_mlp(members=2)
    assert isinstance(model.net, AveragedRuntimeNet) and model.card.architecture.members == 2
    x = model.features(SEED, CONFIGS)
    x = torch.from_numpy(((x - model._mean) * model._inv_std).astype(np.float32))
    with torch.inference_mode():
        members = [m(x).numpy() for m in model.net.members]
    assert all(isinstance(m, RuntimeNet) for m in model.net.members)
    assert not np.allclose(members[0], members[1])  # seeded apart: the average is not one member
    # atol: the fused inference path (model/mlp.py, fused_forward) sums in another order (float32 rounding)
    np.testing.assert_allclose(np.log(_estimate(model)), np.mean(members, axis=0), rtol=1e-5, atol=1e-6)
    save_model(model, tmp_path)
    loaded = MLPModel.load(tmp_path, "h100")
    assert isinstance(loaded.net, AveragedRuntimeNet) and len(loaded.net.members) == 2
    np.testing.assert_array_equal(_estimate(loaded), _estimate(model))


def test_weights_of_another_member_count_are_refused(tmp_path):
    save_model(untrained_mlp(members=2), tmp_path)
    _edit_card(tmp_path, architecture={**json.loads((tmp_path / CARD_FILE).read_text())["architecture"],
                                       "members": 3})
    with pytest.raises(ModelCardMismatchError, match="3 member"):
        MLPModel.load(tmp_path, "h100")


def test_auto_topk_follows_the_cards_rule():
    model = untrained_mlp(members=2)
    predicted = _estimate(model)
    spread = model.member_spread(SEED, CONFIGS, predicted)
    assert spread > 0  # two differently seeded members disagree
    model.card.hyperparameters.update(auto_topk_rule="spread", auto_topk_floor=2, auto_topk_gap=0.0)
    model.card.hyperparameters["auto_topk_spread"] = spread * 10  # sure: the floor
    assert model.auto_topk(predicted, 8, SEED, CONFIGS) == 2
    model.card.hyperparameters["auto_topk_spread"] = spread / 5  # 5x past s0: three doublings, capped
    assert model.auto_topk(predicted, 8, SEED, CONFIGS) == 8
    assert model.auto_topk(predicted, 3, SEED, CONFIGS) == 3
    # without the problem and its configs the card's gap rule decides, from the predictions alone
    assert model.auto_topk(predicted, 8) == max(2, int(np.sum(np.log(predicted) <= np.log(predicted.min()))))


def test_a_single_network_has_no_spread():
    model = untrained_mlp()
    assert model.member_spread(SEED, CONFIGS, _estimate(model)) == 0.0
