"""gemm_topk="auto" chosen again on every val row: the card's figure is eval's, and only the card changes."""

from __future__ import annotations

import json

import pytest

from kernel_select.cli import main
from kernel_select.errors import DatasetError
from kernel_select.model.mlp import CARD_FILE, WEIGHTS_FILE, MLPModel
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training.auto_refit import refit_auto, refit_auto_dir
from kernel_select.offline.training.evaluate import evaluate
from kernel_select.offline.training.train import save_model
from tests.synthetic import synthetic_frame, untrained_mlp

AUTO_KEYS = ("auto_topk_rule", "auto_topk_gap", "auto_topk_floor", "auto_topk_spread")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "synthetic.parquet"
    dataset.write(synthetic_frame({"train": 2, "val": 8}, configs_per_problem=60, noise=0.1), path)
    return path


def val_problems(path) -> int:
    """The dataset's val problems (its hash split's val minus the held-out family)."""
    return splits.split_rows(dataset.read(path), "val")["problem_id"].nunique()


def test_the_chosen_rule_scores_on_val_what_eval_reports_for_it(data):
    model = untrained_mlp(members=2)  # an untrained net: near-misses everywhere, a rule worth choosing
    chosen = refit_auto(model, dataset.read(data))
    hyper = model.card.hyperparameters
    assert hyper["auto_topk_rule"] == chosen["rule"] and hyper["auto_topk_floor"] == chosen["floor"]
    assert model.card.metrics["auto_topk_val"] == chosen and chosen["problems"] == val_problems(data) > 1
    assert chosen["mean_k"] <= chosen["budget_mean_k"] == 2.5
    auto = evaluate(data, "val", [model], device="h100")["methods"]["mlp"]["auto"]
    assert auto["score"] == pytest.approx(chosen["score"])
    assert auto["mean_k"] == pytest.approx(chosen["mean_k"])
    assert auto["top4_score"] == pytest.approx(chosen["top4_score"])


def test_refit_rewrites_the_card_and_leaves_the_weights(data, tmp_path, capsys):
    model = untrained_mlp(members=2)
    model.card.hyperparameters.update(auto_topk_rule="gap", auto_topk_gap=0.5, auto_topk_floor=1,
                                      auto_topk_spread=None)  # k = the cap almost everywhere
    save_model(model, tmp_path)
    weights, before = (tmp_path / WEIGHTS_FILE).read_bytes(), json.loads((tmp_path / CARD_FILE).read_text())
    assert main(["train", "--refit-auto", "--data", str(data), "--out", str(tmp_path)]) == 0
    assert f"topk='auto' on {val_problems(data)} val problems" in capsys.readouterr().out
    after = json.loads((tmp_path / CARD_FILE).read_text())
    assert (tmp_path / WEIGHTS_FILE).read_bytes() == weights
    chosen = after["metrics"].pop("auto_topk_val")
    assert after["hyperparameters"]["auto_topk_gap"] == chosen["gap"] != 0.5  # within the budget now
    for card in (before, after):
        for key in AUTO_KEYS:
            card["hyperparameters"].pop(key)
    assert after == before
    assert MLPModel.load(tmp_path).card.hyperparameters["auto_topk_rule"] == chosen["rule"]


def test_a_dataset_without_val_problems_is_refused(tmp_path, capsys):
    path = tmp_path / "train_only.parquet"
    dataset.write(synthetic_frame({"train": 2}, configs_per_problem=20), path)
    save_model(untrained_mlp(members=2), tmp_path / "m")
    with pytest.raises(DatasetError, match="'val'"):
        refit_auto_dir(tmp_path / "m", path)
    with pytest.raises(SystemExit) as exited:
        main(["train", "--refit-auto", "--data", str(path), "--out", str(tmp_path / "m")])
    assert exited.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_refit_refuses_the_options_of_a_training_it_does_not_run(data, tmp_path, capsys):
    save_model(untrained_mlp(members=2), tmp_path)
    card = (tmp_path / CARD_FILE).read_bytes()
    with pytest.raises(SystemExit) as exited:
        main(["train", "--refit-auto", "--data", str(data), "--out", str(tmp_path), "--epochs", "3",
              "--weight", "x=2"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--epochs, --weight would have no effect" in err
    assert (tmp_path / CARD_FILE).read_bytes() == card
