"""Training the cuBLAS decision's networks (offline/training/cublas_fit.py): per-problem ratios and
cuBLAS times from dataset rows, fitting, the validation report, and the shipped gate's card."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel_select.device import get_device
from kernel_select.errors import ModelError
from kernel_select.model.card import Architecture
from kernel_select.model.cublas import BATCHED_GATE_STEM, BatchedGate, CublasGate, problem_features
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data.dataset import read_many
from kernel_select.offline.data.splits import split_masks
from kernel_select.offline.training.cublas_fit import (
    GATE_MARGINS,
    GATE_MEMBERS,
    cublas_errors_by_layout,
    fit_aten,
    fit_batched_gate,
    fit_gate,
    fit_problem_net,
    gate_metrics,
    problem_ratios,
    problems_of,
    save_problem_net,
    table_features,
)
from kernel_select.offline.training.training_data import aten_problems, prepare_rows
from kernel_select.problem import Problem
from kernel_select.resources import shipped_dir
from tests.synthetic import DEVICE, synthetic_frame

REPO = Path(__file__).resolve().parents[2]
H100 = get_device("h100")


@pytest.fixture(scope="module")
def frame():
    return synthetic_frame({"train": 24, "val": 8, "test": 2}, configs_per_problem=24, seed=3)


@pytest.fixture(scope="module")
def gate(frame):
    return fit_gate(frame, H100, epochs=60)


@pytest.fixture(scope="module")
def problems():
    frame = synthetic_frame({"train": 24, "val": 8, "test": 0}, configs_per_problem=16)
    rows, aten = prepare_rows(frame, DEVICE)
    return aten_problems(rows, aten)


@pytest.fixture(scope="module")
def head(problems):
    return fit_aten(problems[problems["split"] == "train"], problems[problems["split"] == "val"], DEVICE,
                    epochs=1500)


# -- from dataset rows to problems ----------------------------------------------------------------

def test_problem_ratios_need_both_a_cublas_and_a_triton_row(frame):
    first_aten = (frame["problem_id"] == frame["problem_id"].iloc[0]) & (frame["backend"] == "aten")
    table = problem_ratios(frame[~first_aten])
    assert frame["problem_id"].iloc[0] not in table.index
    assert len(table) == frame["problem_id"].nunique() - 1 and np.all(np.isfinite(table["log_ratio"]))


def test_the_ratio_is_cublas_over_the_fastest_finite_triton_row(frame):
    table = problem_ratios(frame)
    pid = frame["problem_id"].iloc[0]
    rows = frame[frame["problem_id"] == pid]
    ok = rows[np.isfinite(rows["runtime_ms"])]
    expected = ok.loc[ok["backend"] == "aten", "runtime_ms"].min() / ok.loc[ok["backend"] == "triton",
                                                                           "runtime_ms"].min()
    assert table.loc[pid, "log_ratio"] == pytest.approx(np.log(expected))


def test_table_features_are_the_problem_features_of_each_row():
    table = pd.DataFrame({"m": [511, 64], "n": [512, 4096], "k": [512, 33], "dtype": ["bfloat16", "float32"],
                          "layout": ["tn", "nt"]})
    expected = problem_features([511, 64], [512, 4096], [512, 33], [2, 4], [1, 0], [0, 1], H100)
    np.testing.assert_array_equal(table_features(table, H100), expected)
    without_layout = table_features(table.drop(columns=["layout"]), H100)
    np.testing.assert_array_equal(without_layout, problem_features([511, 64], [512, 4096], [512, 33], [2, 4],
                                                                   [0, 0], [0, 0], H100))
    assert problems_of(table) == [Problem(511, 512, 512, "bfloat16", layout="tn"),
                                           Problem(64, 4096, 33, "float32", layout="nt")]


# -- the gate ---------------------------------------------------------------------------------------

def test_training_keeps_the_best_validation_epoch_and_reports_it(gate):
    metrics = gate.card.metrics
    assert (metrics["train_problems"], metrics["val_problems"]) == (24, 8)
    assert gate.card.hyperparameters["seed"] == 0 and gate.card.model == "cublas_gate"
    assert 10 <= metrics["best_epoch"] <= 60 and metrics["best_epoch"] % 10 == 0
    assert metrics["validation"]["problems"] == 8
    assert set(metrics["validation"]["margins"]) == {f"{m:g}" for m in GATE_MARGINS}


def test_the_validation_report_counts_what_the_gate_does_at_each_margin(frame, gate):
    val = problem_ratios(frame)
    val = val[val["split"] == "val"]
    report = gate_metrics(gate, val, margins=(0.0, 0.15))
    predicted, truth = gate.predict_log_ratio(problems_of(val)), val["log_ratio"].to_numpy()
    assert report["sign_accuracy"] == pytest.approx(np.mean((predicted < 0) == (truth < 0)))
    for margin in (0.0, 0.15):
        gated = predicted <= np.log(1.0 - margin)
        figures = report["margins"][f"{margin:g}"]
        assert figures["gated"] == pytest.approx(gated.mean())
        assert figures["wrongly_gated"] == int((truth[gated] > 0).sum())


def test_decisions_follow_the_margin(gate):
    problem = Problem(560, 1280, 3420, "bfloat16")
    ratio = float(np.exp(gate.predict_log_ratio([problem])[0]))
    assert gate.skips_triton([problem], 0.0)[0] == (ratio <= 1.0)
    assert not gate.skips_triton([problem], max(0.0, 1.0 - ratio) + 0.01)[0]


def test_a_fitted_gate_round_trips_through_its_checkpoint(gate, tmp_path: Path):
    save_problem_net(gate, tmp_path)
    loaded = CublasGate.load(tmp_path, "h100")
    problems = [Problem(560, 1280, 3420, "bfloat16"), Problem(16, 1024, 4096, "float32")]
    np.testing.assert_array_equal(loaded.predict_log_ratio(problems), gate.predict_log_ratio(problems))
    assert loaded.digest() == gate.digest() and loaded.card == gate.card


def test_the_gate_is_the_mean_of_its_members_fitted_from_consecutive_seeds(frame, gate):
    from kernel_select.model.cublas import MemberMean

    assert isinstance(gate.net, MemberMean) and gate.card.architecture.members == GATE_MEMBERS
    assert len(gate.card.metrics["member_best_epochs"]) == GATE_MEMBERS
    problem = Problem(560, 1280, 3420, "bfloat16")
    outputs = [member(_standardized(gate, problem)).item() for member in gate.net.members]
    assert len(set(outputs)) == GATE_MEMBERS  # each seed its own fit
    assert gate.predict_log_ratio([problem])[0] == pytest.approx(np.mean(outputs), rel=1e-5)
    one = fit_gate(frame, H100, epochs=60)  # the same seeds give the same gate
    np.testing.assert_array_equal(one.predict_log_ratio([problem]), gate.predict_log_ratio([problem]))


def _standardized(gate, problem):  # noqa: ANN001, ANN202
    import torch

    x = problem_features(problem.m, problem.n, problem.k, problem.dtype_bytes, 0, 0, gate.device)
    return torch.from_numpy((x - gate.mean) / gate.std)


def test_too_few_problems_with_a_cublas_row_is_a_model_error(frame):
    few = frame[frame["problem_id"].isin(frame["problem_id"].unique()[:6])]
    with pytest.raises(ModelError, match="need >= 10 train and >= 5 validation"):
        fit_gate(few, H100, epochs=10)


def test_fewer_epochs_than_one_validation_check_is_a_model_error():
    x, y = np.ones((4, 2)), np.zeros(4)
    with pytest.raises(ModelError, match="epochs"):
        fit_problem_net(x, y, x, y, Architecture(inputs=2, hidden_widths=[4], activation="silu"), epochs=5,
                        check_every=10)


def test_shipped_gate_reproduces_its_validation_figures():
    """The card's numbers are what the shipped weights do on the dataset's validation problems."""
    shipped = CublasGate.load(shipped_dir("models") / "h100", "h100")
    # trained on every H100 file (every layout, single GEMMs: batch 1), validated on their val problems
    # outside the frozen family holdout (the `unseen` file's problems are in no val). Collection appends
    # rows to the files after a model ships, so the data it saw are the rows measured before it was
    # trained (every row carries its timestamp).
    frame = read_many(str(REPO / "data" / "h100*.parquet"))
    frame = frame[pd.to_datetime(frame["timestamp"], utc=True) < pd.Timestamp(shipped.card.trained_at)]
    table = problem_ratios(frame[split_masks(frame)["val"] & (frame["batch"] == 1)])
    recomputed = gate_metrics(shipped, table)
    card = shipped.card.metrics["validation"]
    assert recomputed["problems"] == card["problems"]
    assert recomputed["sign_accuracy"] == pytest.approx(card["sign_accuracy"])
    assert recomputed["margins"].keys() == card["margins"].keys() and card["margins"]
    for margin, figures in card["margins"].items():
        assert recomputed["margins"][margin]["gated"] == pytest.approx(figures["gated"])
        assert recomputed["margins"][margin]["wrongly_gated"] == figures["wrongly_gated"]


# -- the gate's network for batched GEMMs ------------------------------------------------------------

@pytest.fixture(scope="module")
def batched_frame(frame):
    """The synthetic problems again as batches of 6 (bmm), each under a problem id of its own."""
    return frame.assign(batch=6, op="bmm", problem_id=frame["problem_id"] + "-b6")


@pytest.fixture(scope="module")
def batched(batched_frame):
    return fit_batched_gate(batched_frame, H100, epochs=60, min_train=10, min_val=4)


def test_the_batched_network_sees_the_batch_and_is_asked_only_for_batched_gemms(gate, batched):
    assert batched.card.model == BATCHED_GATE_STEM and batched.card.feature_names[-1] == "log_batch"
    assert batched.card.metrics["validation"]["problems"] == 8
    one, six = Problem(560, 1280, 3420, "bfloat16", op="bmm", batch=1), Problem(560, 1280, 3420, "bfloat16",
                                                                                op="bmm", batch=6)
    assert batched.predict_log_ratio([one])[0] != batched.predict_log_ratio([six])[0]
    single = Problem(560, 1280, 3420, "bfloat16")
    with_batched = CublasGate(gate.device, gate.net, gate.card, batched)
    assert not gate.supports(six) and with_batched.supports(six) and with_batched.supports(single)
    assert not with_batched.supports(Problem(560, 1280, 3420, "float32", op="bmm", batch=6, tf32=True))
    mixed = with_batched.predict_log_ratio([single, six])
    assert mixed[0] == gate.predict_log_ratio([single])[0] and mixed[1] == batched.predict_log_ratio([six])[0]
    assert with_batched.digest() != gate.digest()


def test_too_few_batched_problems_is_a_model_error(batched_frame):
    with pytest.raises(ModelError, match="batched GEMMs: need >= 100 train"):
        fit_batched_gate(batched_frame, H100, epochs=10)


def test_a_gate_is_written_with_its_batched_network_and_replaces_an_old_one(gate, batched, tmp_path: Path):
    save_problem_net(CublasGate(gate.device, gate.net, gate.card, batched), tmp_path)
    loaded = CublasGate.load(tmp_path, "h100")
    six = Problem(560, 1280, 3420, "bfloat16", op="bmm", batch=6)
    assert isinstance(loaded.batched, BatchedGate)
    np.testing.assert_array_equal(loaded.predict_log_ratio([six]), batched.predict_log_ratio([six]))
    save_problem_net(gate, tmp_path)  # a gate fitted without one: the old batched network goes
    assert not (tmp_path / f"{BATCHED_GATE_STEM}.pt").exists()
    assert CublasGate.load(tmp_path, "h100").batched is None


def test_training_a_gate_fits_its_batched_network_where_the_data_hold_enough(frame, batched_frame,
                                                                            monkeypatch: pytest.MonkeyPatch):
    from kernel_select.offline.training import cublas_fit
    from kernel_select.offline.training.train import fit_gate_of

    both = pd.concat([frame, batched_frame], ignore_index=True)
    assert fit_gate_of(both, H100).batched is None  # 24 batched train problems: too few
    monkeypatch.setattr(cublas_fit, "MIN_BATCHED_TRAIN", 10)
    monkeypatch.setattr(cublas_fit, "MIN_BATCHED_VAL", 4)
    gate = fit_gate_of(both, H100)
    validation = gate.card.metrics["validation"]
    assert gate.batched is not None and validation["batched"] == gate.batched.card.metrics["validation"]
    assert validation["problems"] == gate.card.metrics["val_problems"]  # single GEMMs only
    assert gate.batched.card.metrics["train_problems"] >= 10


# -- the cuBLAS time head -------------------------------------------------------------------------

def test_the_head_predicts_cublas_milliseconds_better_than_a_constant(problems, head):
    val = problems[problems["split"] == "val"]
    predicted = head.predict_ms([Problem(int(r.m), int(r.n), int(r.k), r.dtype) for r in val.itertuples()])
    error = np.abs(np.log(predicted / val["aten_ms"].to_numpy()))
    constant = np.abs(np.log(val["aten_ms"].to_numpy()) - np.log(problems["aten_ms"]).mean())
    assert np.median(error) < np.median(constant) * 0.75
    assert head.card.metrics["val_problems"] == len(val) and head.card.model == "aten"


def test_too_few_cublas_rows_is_a_model_error(problems):
    with pytest.raises(ModelError, match="need >= 10 train"):
        fit_aten(problems.iloc[:3], problems.iloc[3:9], DEVICE)


def test_a_fitted_head_loads_with_the_mlp_it_was_saved_with(head, tmp_path: Path):
    from kernel_select.offline.training.train import save_model
    from tests.synthetic import untrained_mlp

    mlp = untrained_mlp()
    save_model(MLPModel(mlp.device, mlp.net, mlp.card, head), tmp_path)
    problem = Problem(512, 1024, 2048, "bfloat16")
    assert MLPModel.load(tmp_path).estimate_aten(problem) == pytest.approx(head.predict_ms([problem])[0])


# -- errors by layout -------------------------------------------------------------------------------

def test_errors_by_layout_score_the_held_out_problems_of_each_layout(frame, gate, head):
    transposed = frame.assign(layout="nt", problem_id=frame["problem_id"] + "-nt")
    both = pd.concat([frame, transposed], ignore_index=True)
    report = cublas_errors_by_layout(both, head, gate)
    masks = split_masks(frame)
    held_out = frame.loc[masks["test"] | masks["family"], "problem_id"].nunique()  # never trained on
    assert 0 < held_out < frame["problem_id"].nunique()
    assert set(report) == {"nn", "nt"}
    for entry in report.values():
        assert entry["problems"] == held_out
        assert 0.0 <= entry["gate_sign_accuracy"] <= 1.0 and entry["gate_rmse_log_ratio"] >= 0
        assert entry["aten_rmse_log_ms"] >= 0
    assert cublas_errors_by_layout(both, None, None) == {"nn": {"problems": held_out},
                                                         "nt": {"problems": held_out}}


def test_a_head_fitted_on_one_layout_records_it_and_stays_finite_on_another(problems):
    # A calibration run measures one dtype in one layout, so the layout columns are constant over
    # its training problems; another layout must not enter the network scaled by a ~0 spread.
    nt = problems.assign(layout="nt")
    head = fit_aten(nt[nt["split"] == "train"], nt[nt["split"] == "val"], DEVICE, epochs=200)
    assert head.card.layouts == ["nt"] and head.card.dtypes == ["bfloat16"]
    measured = nt["aten_ms"].to_numpy()
    for layout in ("nn", "tn"):
        predicted = head.predict_ms([Problem(int(r.m), int(r.n), int(r.k), r.dtype, layout=layout)
                                     for r in nt.itertuples()])
        assert np.all(np.isfinite(predicted))
        assert measured.min() / 100 < predicted.min() and predicted.max() < measured.max() * 100
