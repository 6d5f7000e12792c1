"""The MLP model: the PerformanceModel contract, persistence, and refusing mismatched files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from kernel_select.errors import ModelCardMismatchError, ModelError, UnsupportedProblemError
from kernel_select.model.mlp import CARD_FILE, WEIGHTS_FILE, MLPModel
from kernel_select.model import MODELS_DIR_ENV, get_model
from kernel_select.problem import Problem
from kernel_select.space import for_problem
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
    np.testing.assert_array_equal(_estimate(model, [CONFIGS[i] for i in perm]), out[perm])


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
    model.save(tmp_path)
    loaded = MLPModel.load(tmp_path, "h100")
    np.testing.assert_array_equal(_estimate(loaded), _estimate(model))
    assert loaded.card == model.card


def _saved(tmp_path):
    untrained_mlp().save(tmp_path)
    return tmp_path


def _edit_card(path, **changes):
    card = json.loads((path / CARD_FILE).read_text())
    card.update(changes)
    (path / CARD_FILE).write_text(json.dumps(card))


@pytest.mark.parametrize("changes, message", [
    ({"feature_version": 0}, "feature_version 0"),
    ({"feature_names": ["a", "b"]}, "feature version"),
    ({"device": "a100"}, "trained for device 'a100'"),
    ({"architecture": {"inputs": 33, "hidden_widths": [32, 16], "activation": "relu"}}, "do not fit"),
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


def test_a_v3_card_still_loads_and_scores_every_layout_as_nn(tmp_path):
    untrained_mlp(feature_version=3).save(tmp_path)
    loaded = MLPModel.load(tmp_path, "h100")
    assert loaded.card.feature_version == 3 and loaded.trained_layouts() == ("nn",)
    nt = Problem(SEED.m, SEED.n, SEED.k, SEED.dtype, layout="nt")
    np.testing.assert_array_equal(loaded.estimate(nt, CONFIGS), loaded.estimate(SEED, CONFIGS))


def test_a_v4_model_reads_the_layout_and_round_trips(tmp_path):
    model = untrained_mlp(feature_version=4)
    model.save(tmp_path)
    loaded = MLPModel.load(tmp_path, "h100")
    for layout in ("nn", "nt", "tn"):
        problem = Problem(SEED.m, SEED.n, SEED.k, SEED.dtype, layout=layout)
        np.testing.assert_array_equal(loaded.estimate(problem, CONFIGS), model.estimate(problem, CONFIGS))
    nt = Problem(SEED.m, SEED.n, SEED.k, SEED.dtype, layout="nt")
    assert not np.array_equal(model.estimate(nt, CONFIGS), model.estimate(SEED, CONFIGS))


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
    with pytest.raises(ModelCardMismatchError, match="cannot be loaded"):
        MLPModel.load(tmp_path, "h100")
    assert not _NotATensor.unpickled


class _NotATensor:
    unpickled = False

    def __setstate__(self, state):
        type(self).unpickled = True


def test_registry_loads_the_shipped_model_or_raises_model_error(tmp_path, monkeypatch):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    with pytest.raises(ModelError, match="no trained mlp model"):
        get_model("mlp", "h100")
    model = untrained_mlp()
    model.save(tmp_path / "h100")
    np.testing.assert_array_equal(_estimate(get_model("mlp", "h100")), _estimate(model))


def test_digest_identifies_the_weights():
    import torch

    from kernel_select.model import models_dir
    from kernel_select.model.mlp import MLPModel

    shipped = MLPModel.load(models_dir() / "h100", "h100")
    again = MLPModel.load(models_dir() / "h100", "h100")
    assert shipped.digest() == again.digest() and len(shipped.digest()) == 64
    with torch.no_grad():
        next(again.net.parameters()).add_(1e-3)
    again._digest = None  # the cached digest belongs to the old weights
    assert again.digest() != shipped.digest()


def test_an_averaged_model_predicts_the_mean_log_ms_of_its_members(tmp_path):
    from kernel_select.model.mlp import AveragedRuntimeNet, RuntimeNet

    model = untrained_mlp(feature_version=3, members=2)
    assert isinstance(model.net, AveragedRuntimeNet) and model.card.architecture.members == 2
    x = model.features(SEED, CONFIGS, model.device)
    x = torch.from_numpy(((x - model._mean) * model._inv_std).astype(np.float32))
    with torch.inference_mode():
        members = [m(x).numpy() for m in model.net.members]
    assert all(isinstance(m, RuntimeNet) for m in model.net.members)
    assert not np.allclose(members[0], members[1])  # seeded apart: the average is not one member
    # atol: the fused inference path (model/fused_members.py) sums in another order (float32 rounding)
    np.testing.assert_allclose(np.log(_estimate(model)), np.mean(members, axis=0), rtol=1e-5, atol=1e-6)
    model.save(tmp_path)
    loaded = MLPModel.load(tmp_path, "h100")
    assert isinstance(loaded.net, AveragedRuntimeNet) and len(loaded.net.members) == 2
    np.testing.assert_array_equal(_estimate(loaded), _estimate(model))


def test_weights_of_another_member_count_are_refused(tmp_path):
    untrained_mlp(feature_version=3, members=2).save(tmp_path)
    _edit_card(tmp_path, architecture={**json.loads((tmp_path / CARD_FILE).read_text())["architecture"],
                                       "members": 3})
    with pytest.raises(ModelCardMismatchError, match="3 member"):
        MLPModel.load(tmp_path, "h100")


def test_auto_topk_follows_the_cards_rule():
    model = untrained_mlp(feature_version=3, members=2)
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
    model = untrained_mlp(feature_version=3)
    assert model.member_spread(SEED, CONFIGS, _estimate(model)) == 0.0
