"""Training on a small synthetic dataset: fast, reproducible, better than untrained, honest card."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from kernel_select.offline.data import dataset, splits
from kernel_select.cli import main
from kernel_select.errors import DatasetError, OptionError
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION
from kernel_select.model.mlp import CARD_FILE, MLPModel
from kernel_select.offline.training.features import featurize_frame
from kernel_select.offline.training.fit_loop import MLPHParams, make_split, validate
from kernel_select.offline.training.train import train
from kernel_select.offline.training.training_data import training_rows
from tests.synthetic import synthetic_frame

SMALL = MLPHParams(hidden_widths=(32, 32), epochs=8, batch_rows=256, batch_problems=8, configs_per_problem=64)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "synthetic.parquet"
    dataset.write(synthetic_frame(), path)
    return path


@pytest.fixture(scope="module")
def trained(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("model")
    return train(data, out, device="h100", seed=0, objective="both", hparams=SMALL, progress=False)


def test_both_objectives_are_compared_and_the_better_is_kept(trained):
    val = trained.metrics["val"]
    assert set(val) == {"mse", "rank"}
    assert val[trained.objective]["selection_score"] == max(m["selection_score"] for m in val.values())
    assert trained.metrics["selected_objective"] == trained.objective


def test_the_kept_model_is_better_than_its_initialization(data, trained):
    rows, _ = training_rows(dataset.read(data), trained.model.device, [data], 384, 0)
    mean = np.asarray(trained.model.card.feature_mean)
    std = np.asarray(trained.model.card.feature_std)
    features = featurize_frame(rows, "h100", trained.model.card.feature_version)
    val = make_split(rows, ((features - mean) / std).astype(np.float32), "val")
    torch.manual_seed(0)
    from kernel_select.model.mlp import RuntimeNet

    untrained = validate(RuntimeNet(val.x.shape[1], SMALL.hidden_widths), val)
    kept = validate(trained.model.net, val)
    assert kept["selection_score"] > untrained["selection_score"]
    assert kept["rmse_log"] < untrained["rmse_log"] / 4
    for member in trained.model.net.members:  # each member learned on its own, too
        assert validate(member, val)["rmse_log"] < untrained["rmse_log"] / 4


def test_members_are_trained_from_consecutive_seeds_and_averaged(trained):
    card = trained.model.card
    assert card.architecture.members == SMALL.members == 2 and card.hyperparameters["members"] == 2
    members_val, averaged = trained.metrics["members_val"], trained.metrics["averaged_val"]
    assert len(members_val) == 2 and members_val[0] != members_val[1]
    assert 0 < averaged["topk"]["1"] <= 1


def test_one_member_is_a_plain_net(data, tmp_path):
    from kernel_select.model.mlp import RuntimeNet

    one = train(data, tmp_path, device="h100", objective="rank", progress=False,
                hparams=MLPHParams(hidden_widths=(16,), epochs=2, batch_problems=8, configs_per_problem=32,
                                   members=1))
    assert type(one.model.net) is RuntimeNet and one.model.card.architecture.members == 1
    assert "members_val" not in one.metrics


@pytest.mark.parametrize("members", [0, 9, True])
def test_bad_member_counts_are_refused_before_anything_is_written(data, tmp_path, members):
    out = tmp_path / "m"
    with pytest.raises(OptionError, match="members"):
        train(data, out, device="h100", hparams=MLPHParams(members=members), progress=False)
    assert not out.exists()


def test_card_records_what_was_learned_and_from_what(data, trained):
    card = json.loads((trained.out_dir / CARD_FILE).read_text())
    assert card["feature_version"] == FEATURE_VERSION
    assert card["feature_names"] == list(FEATURE_SETS[FEATURE_VERSION])
    assert card["data"]["sha256"] == hashlib.sha256(data.read_bytes()).hexdigest()
    # the frozen test and family problems are never read; failed configs and aten rows are not targets
    frame = dataset.read(data)
    masks = splits.split_masks(frame)
    trainable = masks["train"] | masks["val"]
    assert card["data"]["problems"] == {split: frame.loc[masks[split], "problem_id"].nunique()
                                        for split in ("train", "val")}
    assert not frame.loc[trainable, "problem_id"].isin(frame.loc[masks["family"], "problem_id"]).any()
    assert card["dtypes"] == ["bfloat16"]
    assert card["hyperparameters"]["hidden_widths"] == [32, 32] and card["hyperparameters"]["seed"] == 0
    assert set(card["metrics"]["val"]) == {"mse", "rank"}
    assert card["kernel_overhead_ms"] > 0
    usable = frame[(frame["backend"] == "triton") & (frame["status"] == "ok") & trainable]
    assert card["data"]["rows"] == len(usable)  # fewer than the cap per problem: nothing dropped
    held_out = card["metrics"]["held_out"]  # scored on the frozen splits it never saw, by stratum
    assert set(held_out) <= {"test", "family"} and held_out
    for split in held_out.values():
        assert "dtype=bfloat16" in split["strata"] and 0 < split["topk"]["4"] <= 1
        assert len(split["worst_top4"]) == min(10, split["problems"])
    assert 0 <= card["hyperparameters"]["auto_topk_gap"] <= 0.12
    hyper = card["hyperparameters"]
    assert hyper["auto_topk_rule"] in ("gap", "spread") and hyper["auto_topk_floor"] in (1, 2)
    assert MLPModel.load(trained.out_dir).card.model_dump(mode="json") == card


def test_an_older_feature_version_is_trained_on_request(data, tmp_path):
    result = train(data, tmp_path, device="h100", objective="mse", feature_version=4, progress=False,
                   hparams=MLPHParams(hidden_widths=(16,), epochs=1, batch_rows=512, members=1))
    loaded = MLPModel.load(tmp_path)
    assert result.model.card.feature_version == loaded.card.feature_version == 4
    assert loaded.card.feature_names == list(FEATURE_SETS[4])


@pytest.mark.parametrize("version", [3, 6])
def test_a_feature_version_this_code_does_not_compute_is_refused_before_anything_is_written(data, tmp_path,
                                                                                          version):
    out = tmp_path / "never"
    with pytest.raises(OptionError, match=r"feature version: expected one of \[4, 5\]"):
        train(data, out, device="h100", feature_version=version, hparams=SMALL, progress=False)
    assert not out.exists()


def test_same_seed_same_model(data, tmp_path):
    params = MLPHParams(hidden_widths=(16,), epochs=2, batch_rows=512)
    first, second = (train(data, tmp_path / name, device="h100", seed=5, objective="mse", hparams=params,
                           progress=False) for name in ("a", "b"))
    for (name, a), b in zip(first.model.net.state_dict().items(), second.model.net.state_dict().values()):
        assert torch.equal(a, b), name


def test_training_needs_validation_problems(tmp_path):
    path = tmp_path / "train_only.parquet"
    dataset.write(synthetic_frame({"train": 3}, configs_per_problem=20), path)
    with pytest.raises(DatasetError, match="split 'val'"):
        train(path, tmp_path / "out", device="h100", hparams=SMALL, progress=False)


@pytest.mark.parametrize("epochs", [0, -1])
def test_non_positive_epochs_are_refused_before_anything_is_written(data, tmp_path, epochs):
    out = tmp_path / "never"
    with pytest.raises(OptionError, match="epochs: expected a whole number >= 1"):
        train(data, out, device="h100", epochs=epochs, hparams=SMALL, progress=False)
    assert not out.exists()


def test_cli_train_with_zero_epochs_exits_2_with_one_line(data, tmp_path, capsys):
    out = tmp_path / "never"
    with pytest.raises(SystemExit) as exc:
        main(["train", "--data", str(data), "--out", str(out), "--epochs", "0", "--no-progress"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1 and "epochs" in err
    assert not out.exists()


def test_runtimes_no_gemm_can_have_are_refused_before_training(tmp_path):
    frame = synthetic_frame({"train": 3, "val": 2}, configs_per_problem=20)
    frame["runtime_ms"] = frame["runtime_ms"] * 1e-6  # nanoseconds read as milliseconds
    path = tmp_path / "tiny_times.parquet"
    dataset.write(frame, path)
    out = tmp_path / "out"
    with pytest.raises(DatasetError, match=r"tiny_times.parquet: \d+ rows have a runtime under 0.0001 ms"):
        train(path, out, device="h100", hparams=SMALL, progress=False)
    assert not out.exists()
