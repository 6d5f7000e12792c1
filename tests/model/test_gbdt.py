"""The GBDT model: exported from LightGBM to numpy, it predicts what LightGBM predicts, keeps the
estimator contract, and loads only a whole, matching pair of files."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernel_select.errors import ModelCardMismatchError, ModelError, NoTrainedModelError
from kernel_select.model import get_model
from kernel_select.model.features import featurize
from kernel_select.model.gbdt import ARRAYS_FILE, CARD_FILE, GBDTModel
from kernel_select.offline.data import dataset
from kernel_select.problem import Problem
from kernel_select.resources import MODELS_DIR_ENV
from kernel_select.space import for_problem
from tests.model_contract import MODEL_CHECKS
from tests.synthetic import synthetic_frame

pytest.importorskip("lightgbm")

from kernel_select.offline.training.gbdt_fit import GBDTParams, fit_gbdt  # noqa: E402

SMALL = {"num_leaves": 15, "max_depth": 6, "rounds": 40, "early_stopping_rounds": 40, "min_data_in_leaf": 5,
         "learning_rate": 0.2, "threads": 1}
PROBLEMS = (Problem(560, 1280, 3420, "bfloat16"), Problem(64, 4096, 1000, "bfloat16"),
            Problem(3000, 96, 77, "bfloat16", layout="nt"),
            Problem(256, 512, 512, "float16", batch=8, op="bmm"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "synthetic.parquet"
    dataset.write(synthetic_frame({"train": 24, "val": 6, "test": 2}), path)
    return path


@pytest.fixture(scope="module", params=["lambdarank", "regression"])
def fitted(request, data):
    return fit_gbdt(data, device="h100", params=GBDTParams(objective=request.param, **SMALL))


def test_the_numpy_model_predicts_what_lightgbm_predicts(fitted):
    booster, model = fitted.booster, fitted.model
    for problem in PROBLEMS:
        configs = for_problem(problem, "h100")
        x = featurize(problem, configs, model.device, model.card.feature_version)
        ours = model.trees.raw(x)
        np.testing.assert_allclose(ours, booster.predict(x, num_iteration=booster.best_iteration),
                                   rtol=1e-12, atol=1e-12)
        sign = 1 if model.card.output == "log_ms" else -1
        np.testing.assert_allclose(model.estimate(problem, configs), np.exp(sign * ours), rtol=1e-12)


def test_the_fit_keeps_its_best_validation_round_and_says_what_it_predicts(fitted):
    metrics, card = fitted.metrics, fitted.model.card
    assert 1 <= metrics["best_round"] <= metrics["rounds_run"] <= SMALL["rounds"]
    assert card.trees == metrics["best_round"]
    assert card.output == ("log_ms" if metrics["objective"] == "regression" else "rank_score")
    assert card.layouts == ["nn"] and card.dtypes == ["bfloat16"] and card.domain is not None
    assert 0 < metrics["val"]["topk"]["1"] <= metrics["val"]["topk"]["4"] <= 1


def _contract_model(model: GBDTModel) -> GBDTModel:
    # The synthetic rows are bf16 only; the contract also scores float32 problems, which the trees
    # read like any other features.
    card = model.card.model_copy(update={"dtypes": ["bfloat16", "float16", "float32"]})
    return GBDTModel(model.device, model.trees, card)


@pytest.mark.parametrize("check", MODEL_CHECKS, ids=lambda check: check.__name__)
def test_the_gbdt_keeps_the_estimator_contract(fitted, check):
    check(_contract_model(fitted.model))


def test_an_untrained_dtype_is_refused(fitted):
    from kernel_select.errors import UnsupportedProblemError

    configs = for_problem(Problem(64, 64, 64, "float32"), "h100")[:4]
    with pytest.raises(UnsupportedProblemError, match="float32"):
        fitted.model.estimate(Problem(64, 64, 64, "float32"), configs)


def test_a_saved_model_loads_and_predicts_the_same(fitted, tmp_path):
    fitted.model.save(tmp_path)
    loaded = GBDTModel.load(tmp_path, "h100")
    problem = PROBLEMS[0]
    configs = for_problem(problem, "h100")
    np.testing.assert_array_equal(loaded.estimate(problem, configs), fitted.model.estimate(problem, configs))
    assert loaded.digest() == fitted.model.digest()
    assert loaded.trained_layouts() == ("nn",)


def test_get_model_serves_the_gbdt_of_the_users_model_folder(fitted, tmp_path, monkeypatch):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("KERNEL_SELECT_HIDE_SHIPPED", "h100")
    with pytest.raises(NoTrainedModelError):
        get_model("gbdt", "h100")
    fitted.model.save(tmp_path / "h100")
    served = get_model("gbdt", "h100")
    assert isinstance(served, GBDTModel) and served.digest() == fitted.model.digest()


@pytest.fixture
def saved(fitted, tmp_path):
    fitted.model.save(tmp_path)
    return tmp_path


def test_arrays_of_another_training_are_refused(fitted, saved, tmp_path_factory):
    other = tmp_path_factory.mktemp("other")
    model = fitted.model
    from kernel_select.model.trees import TreeEnsemble

    trees = model.trees
    changed = TreeEnsemble(trees.feature, trees.threshold, trees.children, trees.value + 1.0, trees.roots,
                           trees.n_features, trees.max_depth)
    GBDTModel(model.device, changed, model.card).save(other)
    (saved / ARRAYS_FILE).write_bytes((other / ARRAYS_FILE).read_bytes())
    with pytest.raises(ModelCardMismatchError, match="sha256") as caught:
        GBDTModel.load(saved, "h100")
    assert str(saved / ARRAYS_FILE) in str(caught.value)


def test_a_damaged_arrays_file_is_refused(saved):
    data = bytearray((saved / ARRAYS_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (saved / ARRAYS_FILE).write_bytes(bytes(data))
    with pytest.raises(ModelCardMismatchError, match="sha256"):
        GBDTModel.load(saved, "h100")


@pytest.mark.parametrize("change, message", [
    ({"device": "h200"}, "trained for device 'h200'"),
    ({"feature_version": 4}, "feature_version 4"),
    ({"output": "seconds"}, "output"),
    ({"trees": 0}, "trees"),
    ({"unknown_field": 1}, "unknown_field"),
])
def test_a_card_that_does_not_fit_is_refused_naming_the_file(saved, change, message):
    card = json.loads((saved / CARD_FILE).read_text())
    card.update(change)
    (saved / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelCardMismatchError, match=message) as caught:
        GBDTModel.load(saved, "h100")
    assert CARD_FILE in str(caught.value)


def test_a_card_whose_counts_differ_from_its_arrays_is_refused(saved):
    card = json.loads((saved / CARD_FILE).read_text())
    card["nodes"] += 1
    (saved / CARD_FILE).write_text(json.dumps(card))
    with pytest.raises(ModelCardMismatchError, match="the card says"):
        GBDTModel.load(saved, "h100")


def test_half_a_model_is_refused_and_an_empty_folder_holds_none(saved, tmp_path_factory):
    (saved / ARRAYS_FILE).unlink()
    with pytest.raises(ModelCardMismatchError, match="missing"):
        GBDTModel.load(saved, "h100")
    with pytest.raises(ModelError, match="no gbdt model"):
        GBDTModel.load(tmp_path_factory.mktemp("empty"), "h100")


def test_a_problem_outside_the_training_data_is_named(fitted):
    from kernel_select.model.card import Domain

    # the synthetic rows: 30 bf16 "nn" single GEMMs, too few per stratum to be inside the domain
    assert "fewer than 20" in fitted.model.domain_gap(Problem(512, 512, 512, "bfloat16"))
    domain = Domain(strata={"mm/bfloat16/m<=4096": 40}, m=(16, 8192), n=(16, 8192), k=(16, 8192))
    model = GBDTModel(fitted.model.device, fitted.model.trees,
                      fitted.model.card.model_copy(update={"domain": domain}))
    assert model.domain_gap(Problem(512, 512, 512, "bfloat16")) == ""
    assert model.domain_gap(Problem(512, 512, 512, "float16")) == ""  # fp16 reads as bf16
    assert "layout nt" in model.domain_gap(Problem(512, 512, 512, "bfloat16", layout="nt"))
    assert "bmm/bfloat16" in model.domain_gap(Problem(512, 512, 512, "bfloat16", batch=4, op="bmm"))
    assert "k = 60000 outside the trained 16..8192" in model.domain_gap(Problem(512, 512, 60000, "bfloat16"))
    assert "dtype float32" in model.domain_gap(Problem(512, 512, 512, "float32"))
