"""The cuBLAS time head: training on per-problem cuBLAS rows, persistence, and the two-sided rule."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_select.errors import ModelError
from kernel_select.model.aten import CublasRule, AtenHead, fit_aten
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.training.training_data import aten_problems, prepare_rows
from kernel_select.problem import Problem
from tests.synthetic import DEVICE, synthetic_frame, untrained_mlp


@pytest.fixture(scope="module")
def problems():
    frame = synthetic_frame({"train": 24, "val": 8, "test": 0}, configs_per_problem=16)
    rows, aten = prepare_rows(frame, DEVICE)
    return aten_problems(rows, aten)


@pytest.fixture(scope="module")
def head(problems):
    return fit_aten(problems[problems["split"] == "train"], problems[problems["split"] == "val"], DEVICE,
                    epochs=1500)


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


def test_the_mlp_saves_and_loads_its_head_and_scores_cublas_only_where_it_can(head, tmp_path):
    mlp = untrained_mlp()
    model = MLPModel(mlp.device, mlp.net, mlp.card, head)
    model.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aten.json", "aten.pt", "mlp.json", "mlp.pt"]
    loaded = MLPModel.load(tmp_path)
    problem = Problem(512, 1024, 2048, "bfloat16")
    assert loaded.estimate_aten(problem) == pytest.approx(head.predict_ms([problem])[0])
    linear = Problem(512, 1024, 2048, "bfloat16", op="addmm")  # a biased nn.Linear: the same cuBLAS GEMM
    assert loaded.estimate_aten(linear) == pytest.approx(head.predict_ms([problem])[0])
    batched = Problem(512, 1024, 2048, "bfloat16", op="bmm", batch=4)
    assert loaded.estimate_aten(batched) is None  # not measured
    assert loaded.digest() != mlp.digest()  # the head is part of what Inductor's cache keys see
    assert untrained_mlp().estimate_aten(problem) is None  # no head: no cuBLAS prediction


def test_a_broken_head_file_is_refused_naming_it(head, tmp_path):
    head.save(tmp_path)
    (tmp_path / "aten.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="aten.pt"):
        AtenHead.load(tmp_path, DEVICE)


@pytest.mark.parametrize("triton_ms, prefers_cublas", [(0.90, False), (0.96, True), (1.2, True)])
def test_the_rule_offers_triton_only_where_it_is_predicted_faster_by_the_margin(triton_ms, prefers_cublas):
    rule = CublasRule(Problem(64, 64, 64, "bfloat16"), predicted_aten_ms=1.0, predicted_triton_ms=triton_ms,
                      margin=0.05)
    assert rule.prefers_cublas is prefers_cublas
    assert rule.predicted_ratio == pytest.approx(1.0 / triton_ms)
    assert ("skip the model's Triton picks" in rule.describe()) is prefers_cublas
