"""Choose a trained MLP's `topk="auto"` rule on the validation problems, scored the way `evaluate` scores.

Training used to choose the rule (`uncertainty.choose_auto_rule`: the gap or the spread rule, its
floor and threshold, at most 2.5 configs per problem on average) on the rows it trains on: at most
384 configs per problem, every contender within 1.5x of the oracle and then a sample. The model's
top-k among those rows is not its top-k among all the configs Inductor would offer (a slow config
predicted fast drops out of the sample), so the card's validation figure was optimistic and not
comparable with `eval`'s `auto` on the held-out splits (val 0.986 on the capped rows, 0.981 on all
of them, at the same rule). Here the rule is chosen on every usable row of the `val`
problems, ranked by `model.estimate` as `evaluate` ranks them; `test` and `family` are never read.

`refit_auto` updates a model's card in memory (training calls it before saving);
`refit_auto_dir` rewrites only the card of a saved model (`kernel-select train --refit-auto`), so
the rule can follow a change of the selection without retraining the networks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training.uncertainty import choose_auto_rule

log = logging.getLogger(__name__)

VALIDATION_SPLIT = "val"


def validation_predictions(model: Any, frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """The model's log-ms predictions for every usable row of the `val` problems (as `evaluate`
    selects and orders them), their measured ms, problem codes and, for a model of several
    members, each problem's member spread (`MLPModel.member_spread`); spread is None otherwise."""
    from kernel_select.offline.training.evaluate import (
        evaluated_layouts, predict_cases, problem_cases, problem_rows,
    )

    val = dataset.modelled_layout_rows(splits.split_rows(frame, VALIDATION_SPLIT), "auto rule",
                                       evaluated_layouts([model]))
    scored = problem_rows(val, f"no usable Triton rows in split {VALIDATION_SPLIT!r} "
                               "to choose topk='auto' on")
    rows, groups = scored.rows, scored.groups
    cases = problem_cases(rows, scored.problems)
    predicted = predict_cases(model, cases)
    spread = None
    if model.card.architecture.members > 1:
        bounds = np.r_[0, np.cumsum(np.bincount(groups))]
        spread = np.array([model.member_spread(problem, configs, predicted[lo:hi])
                           for (problem, configs), lo, hi in zip(cases, bounds[:-1], bounds[1:])])
    return {"groups": groups, "log_pred": np.log(predicted),
            "runtime_ms": rows["runtime_ms"].to_numpy(np.float64), "spread": spread}


def auto_hyperparameters(auto: dict[str, Any]) -> dict[str, Any]:
    """The card's `topk="auto"` entries (MLPModel.auto_topk reads them)."""
    return {"auto_topk_rule": auto["rule"], "auto_topk_gap": auto["gap"], "auto_topk_floor": auto["floor"],
            "auto_topk_spread": auto.get("spread")}


def refit_auto(model: Any, frame: pd.DataFrame) -> dict[str, Any]:
    """Choose `model`'s `topk="auto"` rule on the `val` problems of `frame` and write it into its
    card: the `auto_topk_*` hyperparameters and `metrics.auto_topk_val` (the chosen rule's score
    and mean k next to a fixed top-4 there). Returns what was chosen."""
    val = validation_predictions(model, frame)
    chosen = {**choose_auto_rule(val["groups"], val["log_pred"], val["runtime_ms"], val["spread"]),
              "problems": int(val["groups"].max() + 1), "rows": "every usable row"}
    model.card.hyperparameters.update(auto_hyperparameters(chosen))
    model.card.metrics["auto_topk_val"] = chosen
    log.info("topk='auto': %s rule, floor %d: val %.4f at %.2f configs per problem (top-4 %.4f)",
             chosen["rule"], chosen["floor"], chosen["score"], chosen["mean_k"], chosen["top4_score"])
    return chosen


def refit_auto_dir(model_dir: str | Path, data_path: str | Path | Sequence[str | Path],
                   device: str | None = None) -> dict[str, Any]:
    """`refit_auto` for the MLP saved in `model_dir`, on the dataset file(s) it was trained on;
    rewrites only its card (`mlp.json`): the weights and the cuBLAS head stay as they are."""
    from kernel_select.model.checkpoint import save_card
    from kernel_select.model.mlp import CARD_FILE, MLPModel

    model = MLPModel.load(model_dir, device)
    chosen = refit_auto(model, dataset.read_many(dataset.expand_paths(data_path)))
    save_card(Path(model_dir) / CARD_FILE, model.card)
    return chosen
