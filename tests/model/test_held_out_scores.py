"""The shipped H100 model's held-out scores, recomputed from a committed slice of the data.

models/h100/eval.json pins (`pinned`) the shipped model's top-1 and top-4 scores and its calibration on a
fixed slice of each held-out split: 40 problems each of `test`, `family` and `unseen`, those with the smallest
sha256 of their problem id among the problems the split's evaluation scores
(kernel_select/offline/training/held_out_slice.py). tests/fixtures/h100_held_out_slice.parquet holds the
dataset rows of exactly those problems, so the scores are recomputed here in seconds, from the rows and
the model alone (not through the evaluation's code), and a retrained model, a changed feature or a
changed way of scoring that eval.json does not record fails.

When the change is intended, write eval.json and the slice again, together, from the data the model was
trained on (on a CPU, a few minutes):

    kernel-select eval --data 'data/h100*.parquet' \\
        --json-out models/h100/eval.json --pinned-rows tests/fixtures/h100_held_out_slice.parquet

(with KERNEL_SELECT_MODELS_DIR unset or empty of an h100 model, so that models/h100 is the one scored).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset
from kernel_select.offline.training.held_out_slice import SLICE_PROBLEMS, slice_ids
from kernel_select.problem import Problem
from kernel_select.resources import shipped_dir

SLICE = Path(__file__).parent.parent / "fixtures" / "h100_held_out_slice.parquet"
REPORT = shipped_dir("models") / "h100" / "eval.json"
WRITE_AGAIN = ("if the change is intended, write eval.json and the slice again: see "
               "tests/model/test_held_out_scores.py's docstring")
#: Scores are ratios of measured times picked by the ranking, so a model that ranks the same gives the
#: same figures to the last bit; 1e-9 leaves room only for the order of a sum.
SCORE_TOLERANCE = 1e-9
#: The calibration figure is a predicted time itself (a median of |log(predicted / measured)|), and the
#: network runs in float32: another CPU's BLAS may round a prediction differently by an ulp (about 1e-7
#: of the log), where a retrained model moves the figure by percents.
CALIBRATION_TOLERANCE = 1e-6
TOP_CALIBRATED = 16  # each problem's fastest configs, as model_extras.CALIBRATION_TOP
USABLE = ("ok", "capped")
#: The held-out splits eval.json pins a slice of: the frozen `test` and `family` and the `unseen` split,
#: the one that says how the model does on shapes no training plan drew.
SPLITS = ("test", "family", "unseen")


@pytest.fixture(scope="module")
def pinned() -> dict:
    return json.loads(REPORT.read_text())["pinned"]


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    return dataset.read(SLICE)


@pytest.fixture(scope="module")
def model() -> MLPModel:
    return MLPModel.load(shipped_dir("models") / "h100", "h100")


def test_eval_json_pins_the_shipped_model(pinned: dict, model: MLPModel):
    assert pinned["digest"] == model.digest(), f"models/h100 is not the model eval.json pins; {WRITE_AGAIN}"
    assert pinned["model"] == model.describe() and pinned["ks"] == [1, 4]


def test_the_slice_holds_the_rows_of_exactly_the_pinned_problems(pinned: dict, rows: pd.DataFrame):
    named = {split: result["problems"] for split, result in pinned["splits"].items()}
    assert set(named) == set(SPLITS) and all(len(ids) == SLICE_PROBLEMS for ids in named.values())
    assert all(ids == slice_ids(ids) for ids in named.values())  # sorted, no id twice
    assert set(rows["problem_id"]) == set().union(*named.values()), WRITE_AGAIN
    assert SLICE.stat().st_size < 4 << 20  # a few MB at most: it is committed


def recomputed(model: MLPModel, rows: pd.DataFrame) -> tuple[dict[str, float], float]:
    """Top-1 and top-4 scores (geometric mean over problems of fastest measured Triton time / fastest
    measured time among the model's k best-ranked configs) and the calibration figure (median
    |log(predicted / measured)| over each problem's 16 fastest configs), from the rows alone."""
    usable = rows[(rows["backend"] == "triton") & rows["status"].isin(USABLE)
                  & np.isfinite(rows["runtime_ms"]) & (rows["runtime_ms"] > 0)]
    # the evaluation's row order (problem, then config), so the model sees each problem's configs as there
    usable = usable.sort_values(["problem_id", *dataset.CONFIG_COLUMNS], kind="stable")
    log_scores: dict[int, list[float]] = {1: [], 4: []}
    errors: list[np.ndarray] = []
    for _, group in usable.groupby("problem_id", sort=True):
        first = group.iloc[0]
        problem = Problem(int(first["m"]), int(first["n"]), int(first["k"]), str(first["dtype"]),
                          batch=int(first["batch"]), op=str(first["op"]), layout=str(first["layout"]))
        configs = [GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=s, num_warps=w, group_m=g)
                   for bm, bn, bk, s, w, g in group[list(dataset.CONFIG_COLUMNS)].itertuples(index=False)]
        predicted = model.estimate(problem, configs)
        measured = group["runtime_ms"].to_numpy(np.float64)
        ranked = np.argsort(predicted, kind="stable")
        for k, scores in log_scores.items():
            scores.append(np.log(measured.min() / measured[ranked[:k]].min()))
        fastest = np.argsort(measured, kind="stable")[:TOP_CALIBRATED]
        errors.append(np.abs(np.log(predicted[fastest] / measured[fastest])))
    topk = {str(k): float(np.exp(np.mean(scores))) for k, scores in log_scores.items()}
    return topk, float(np.median(np.concatenate(errors)))


@pytest.mark.parametrize("split", SPLITS)
def test_the_pinned_scores_are_what_the_shipped_model_scores_on_the_slice(pinned: dict, rows: pd.DataFrame,
                                                                          model: MLPModel, split: str):
    expected = pinned["splits"][split]
    topk, calibration = recomputed(model, rows[rows["problem_id"].isin(expected["problems"])])
    for k in ("1", "4"):
        assert topk[k] == pytest.approx(expected["topk"][k], abs=SCORE_TOLERANCE), \
            f"{split}: top-{k} is {topk[k]:.6f}, eval.json pins {expected['topk'][k]:.6f}; {WRITE_AGAIN}"
    assert calibration == pytest.approx(expected["calibration_median_abs_log_top16"],
                                        abs=CALIBRATION_TOLERANCE), \
        f"{split}: calibration is {calibration:.6f}, eval.json pins " \
        f"{expected['calibration_median_abs_log_top16']:.6f}; {WRITE_AGAIN}"
