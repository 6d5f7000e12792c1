"""The shortlist ensemble end to end on a synthetic dataset: train, save, load, score, refuse bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernel_select.cli import main
from kernel_select.errors import ModelCardMismatchError, ModelError
from kernel_select.offline.data import dataset
from kernel_select.problem import Problem
from kernel_select.space import for_problem
from tests.synthetic import synthetic_frame

pytest.importorskip("lightgbm")

from kernel_select.model.ensemble import CARD_FILE, RANKER_FILE, TREES_FILE, EnsembleModel  # noqa: E402
from kernel_select.offline.training.train_candidates import GBMParams  # noqa: E402
from kernel_select.offline.training.train_ensemble import train_ensemble  # noqa: E402


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    data = tmp_path_factory.mktemp("data") / "synthetic.parquet"
    dataset.write(synthetic_frame({"train": 14, "val": 4, "test": 4}, configs_per_problem=60), data)
    out = tmp_path_factory.mktemp("model")
    model = train_ensemble(data, out, "h100", epochs=2, cap=48, shortlist=16,
                           gbm=GBMParams(n_estimators=30, num_leaves=7, min_child_samples=5), progress=False)
    return data, out, model


def test_saved_model_loads_and_scores_the_same(trained):
    _, out, model = trained
    loaded = EnsembleModel.load(out, "h100")
    configs = for_problem(Problem(300, 1000, 700), "h100")
    a = model.estimate(300, 1000, 700, "bfloat16", configs)
    b = loaded.estimate(300, 1000, 700, "bfloat16", configs)
    np.testing.assert_allclose(a, b, rtol=1e-6)
    assert np.all(np.isfinite(a) & (a > 0)) and loaded.digest() == model.digest()
    # outside the shortlist nothing is predicted faster than the shortlist's slowest
    short = np.argsort(a)[:16]
    assert np.max(a[short]) <= np.min(np.delete(a, short)) + 1e-12
    assert loaded.spread(300, 1000, 700, "bfloat16", configs) >= 0
    assert loaded.card.ranker and (out / RANKER_FILE).is_file() and loaded.ranker is not None


def test_card_records_held_out_scores_and_provenance(trained):
    _, _, model = trained
    card = model.card
    assert set(card.metrics) >= {"test", "train_seconds"}
    test = card.metrics["test"]
    assert test["problems"] == 4 and 0 < test["topk"]["1"] <= test["topk"]["16"] <= 1
    assert card.data["sha256"] and card.data["problems"]["test"] == 4
    assert card.hyperparameters["cap_rows_per_problem"] == 48
    assert len(test["worst"]) == 4 and {"picked", "oracle", "top4_score"} <= set(test["worst"][0])
    assert card.auto_threshold is not None  # 2 validation problems remain after the family holdout
    assert 1.0 <= test["auto"]["mean_k"] <= 8
    configs = for_problem(Problem(300, 1000, 700), "h100")
    assert model.auto_topk_for(300, 1000, 700, "bfloat16", configs) in (1, 2, 4, 8)


def test_broken_files_are_refused_with_the_path(trained, tmp_path):
    _, out, _ = trained
    with pytest.raises(ModelError, match="no ensemble model"):
        EnsembleModel.load(tmp_path, "h100")
    for name in (CARD_FILE, TREES_FILE):
        broken = tmp_path / name.replace(".", "_")
        broken.mkdir()
        for f in out.iterdir():
            (broken / f.name).write_bytes(f.read_bytes())
        (broken / name).write_text("{ not valid")
        with pytest.raises(ModelCardMismatchError, match=str(broken)):
            EnsembleModel.load(broken, "h100")


def test_cli_ensemble_refuses_zero_epochs(trained, tmp_path, capsys):
    data, _, _ = trained
    with pytest.raises(SystemExit) as exc:
        main(["train", "--method", "ensemble", "--data", str(data), "--out", str(tmp_path / "x"),
              "--epochs", "0"])
    assert exc.value.code == 2 and "epochs" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_cli_eval_scores_a_saved_ensemble(trained, tmp_path):
    data, out, _ = trained
    report = tmp_path / "eval.json"
    assert main(["eval", "--data", str(data), "--split", "test", "--model", "analytical",
                 "--ensemble-dir", str(out), "--json", str(report)]) == 0
    methods = json.loads(report.read_text())["methods"]
    assert 0 < methods["ensemble"]["topk"]["1"] <= methods["ensemble"]["topk"]["16"] <= 1
