"""Fit a gradient-boosted tree model (LightGBM) on the rows and features the MLP trains on.

The same rows as `train.py` (training_data.training_rows: the trainable problems' Triton rows, at most
`cap` configs per problem, every contender kept) and the same features (`featurize_frame`, the card's
feature version); the round to keep is chosen as the MLP's epoch is, by the mean of the geomean
top-1/2/4/8 scores on `val` (fit_loop.validate's selection score), with early stopping. Two objectives:

  regression  L2 on log runtime_ms: the trees predict log milliseconds, calibrated like the MLP.
  lambdarank  LambdaMART within each problem (one query = one problem's configs), in the manner of
              CK-Tile's ranker. A config's relevance grade falls by one per `grade_step` of log
              runtime above its problem's oracle, and a grade's gain is exp(-gap / temperature): the
              target the MLP's listwise term uses (softmax(-log runtime / 0.1)). The trees then
              predict a score (higher = faster), not milliseconds.

LightGBM is imported only here (the `train` extra); the fitted booster becomes a numpy
`TreeEnsemble` (`export_ensemble`) that kernel_select.model.gbdt predicts with, inside torch.compile,
on the core install.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelError, OptionError
from kernel_select.model.card import GpuIdentity, training_versions, utc_now
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION
from kernel_select.model.gbdt import GBDTCard, GBDTModel, Output
from kernel_select.model.trees import TreeEnsemble
from kernel_select.offline.data import dataset
from kernel_select.offline.metrics import geomean, topk_scores
from kernel_select.offline.training.features import featurize_frame
from kernel_select.offline.training.fit_loop import VAL_KS
from kernel_select.offline.training.training_data import (
    DEFAULT_CAP, domain_of, layouts_for, provenance, training_rows,
)

log = logging.getLogger(__name__)

Objective = Literal["regression", "lambdarank"]
OBJECTIVES: tuple[str, ...] = ("regression", "lambdarank")
_SELECTION_KS = (1, 2, 4, 8)  # as fit_loop's: the mean of the geomean top-k scores at these k


@dataclass(frozen=True)
class GBDTParams:
    """Hyperparameters: chosen by hand, recorded in the card, never learned."""

    objective: str = "lambdarank"
    num_leaves: int = 63
    max_depth: int = 12  # bounds the numpy traversal's steps (kernel_select.model.trees)
    learning_rate: float = 0.1
    rounds: int = 1000  # the most boosting rounds; early stopping usually ends sooner
    early_stopping_rounds: int = 100  # rounds without a better validation score before stopping
    min_data_in_leaf: int = 50
    feature_fraction: float = 0.9
    bagging_fraction: float = 0.8
    lambda_l2: float = 1.0
    max_bin: int = 255
    # lambdarank: relevance grades (LightGBM allows at most 31 with its default gains; we give our own)
    grades: int = 32
    grade_step: float = math.log(1.02)  # log runtime per grade: within 2% of the oracle is the top grade
    rank_temperature: float = 0.1  # a grade's gain: exp(-gap / temperature), gap = grade_step * (top - grade)
    truncation_level: int = 32  # lambdarank: pairs involving the first this-many ranks of a query
    threads: int = 0  # LightGBM's num_threads: 0 = its default (all cores)


def check_params(params: GBDTParams) -> None:
    """Refuse parameters that cannot fit a model, before any data is read."""
    if params.objective not in OBJECTIVES:
        raise OptionError(f"objective: expected one of {OBJECTIVES}, got {params.objective!r}")
    for name in ("num_leaves", "max_depth", "rounds", "early_stopping_rounds", "min_data_in_leaf",
                 "max_bin", "grades", "truncation_level"):
        value = getattr(params, name)
        least = 2 if name == "num_leaves" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise OptionError(f"{name}: expected a whole number >= {least}, got {value!r}")
    for name in ("learning_rate", "grade_step", "rank_temperature"):
        value = getattr(params, name)
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise OptionError(f"{name}: expected a positive number, got {value!r}")
    for name in ("feature_fraction", "bagging_fraction"):
        value = getattr(params, name)
        if not (isinstance(value, (int, float)) and 0 < value <= 1):
            raise OptionError(f"{name}: expected a fraction in (0, 1], got {value!r}")


@dataclass
class GBDTResult:
    """A fitted GBDT: the model (numpy inference), LightGBM's booster it was exported from, and how
    it scored on `val`."""

    model: GBDTModel
    booster: Any  # lightgbm.Booster, kept for the equality check of the export
    metrics: dict[str, Any]
    seconds: float


def lightgbm() -> Any:
    """The lightgbm module, or a ModelError saying how to install it (it is not a core dependency)."""
    try:
        import lightgbm as lgb
    except ImportError:
        raise ModelError("fitting a GBDT needs LightGBM: pip install 'kernel_select[train]' (or "
                         "pip install lightgbm)") from None
    return lgb


def relevance_grades(groups: np.ndarray, log_ms: np.ndarray, params: GBDTParams) -> np.ndarray:
    """lambdarank labels: grades-1 for a config within one grade_step of its problem's oracle, one less
    per further step, 0 at and beyond grades-1 steps."""
    best = np.full(groups.max() + 1, np.inf)
    np.minimum.at(best, groups, log_ms)
    gap = log_ms - best[groups]
    top = params.grades - 1
    return np.clip(top - np.floor(gap / params.grade_step), 0, top).astype(np.int32)


def label_gains(params: GBDTParams) -> list[float]:
    """The gain of each grade: exp(-gap / temperature) at the grade's gap to the oracle, 0 for grade 0."""
    top = params.grades - 1
    return [0.0] + [math.exp(-(top - g) * params.grade_step / params.rank_temperature)
                    for g in range(1, params.grades)]


def lightgbm_params(params: GBDTParams, seed: int) -> dict[str, Any]:
    """The LightGBM parameters of `params` (deterministic: the same data and seed give the same trees)."""
    common = {
        "num_leaves": params.num_leaves, "max_depth": params.max_depth,
        "learning_rate": params.learning_rate, "min_data_in_leaf": params.min_data_in_leaf,
        "feature_fraction": params.feature_fraction, "bagging_fraction": params.bagging_fraction,
        "bagging_freq": 1 if params.bagging_fraction < 1 else 0, "lambda_l2": params.lambda_l2,
        "max_bin": params.max_bin, "seed": seed, "deterministic": True, "force_row_wise": True,
        "num_threads": params.threads, "verbosity": -1, "metric": "None",
    }
    if params.objective == "regression":
        return {**common, "objective": "regression"}
    return {**common, "objective": "lambdarank", "label_gain": label_gains(params),
            "lambdarank_truncation_level": params.truncation_level}


@dataclass(frozen=True)
class Rows:
    """One split's features and measurements, rows contiguous per problem (training_rows' order)."""

    x: np.ndarray  # float32 (rows, features)
    log_ms: np.ndarray  # float64 (rows,)
    groups: np.ndarray  # problem codes 0..P-1, ascending
    sizes: np.ndarray  # rows per problem, in code order

    @classmethod
    def of(cls, rows: pd.DataFrame, x: np.ndarray, split: str) -> Rows:
        mask = (rows["split"] == split).to_numpy()
        groups, _ = pd.factorize(rows.loc[mask, "problem_id"], sort=True)
        if np.any(np.diff(groups) < 0):
            raise ModelError("GBDT rows must be sorted by problem (training_rows sorts them)")
        return cls(x=np.ascontiguousarray(x[mask]),
                   log_ms=np.log(rows.loc[mask, "runtime_ms"].to_numpy(np.float64)),
                   groups=groups, sizes=np.bincount(groups))


def selection_score(rows: Rows, ranking_key: np.ndarray) -> tuple[float, dict[str, float]]:
    """fit_loop's validation score of a ranking (lower key = predicted faster): the mean of the geomean
    top-1/2/4/8 scores, and the top-k scores themselves."""
    scores = geomean(topk_scores(rows.groups, ranking_key, np.exp(rows.log_ms), VAL_KS))
    topk = {str(k): float(s) for k, s in zip(VAL_KS, scores)}
    return float(np.mean([topk[str(k)] for k in _SELECTION_KS])), topk


def ranking_key(raw: np.ndarray, objective: str) -> np.ndarray:
    """Lower = predicted faster: log ms for regression, minus the score for lambdarank."""
    return raw if objective == "regression" else -raw


def fit_booster(train: Rows, val: Rows, params: GBDTParams, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """Fit LightGBM on `train` and keep the round with the best selection score on `val`.

    Returns the booster (its `best_iteration` the kept round) and the validation figures."""
    lgb = lightgbm()
    check_params(params)
    lambdarank = params.objective == "lambdarank"
    label = relevance_grades(train.groups, train.log_ms, params) if lambdarank else train.log_ms
    train_set = lgb.Dataset(train.x, label=label, group=train.sizes if lambdarank else None,
                            free_raw_data=False, params={"max_bin": params.max_bin})
    val_label = relevance_grades(val.groups, val.log_ms, params) if lambdarank else val.log_ms
    val_set = lgb.Dataset(val.x, label=val_label, group=val.sizes if lambdarank else None,
                          reference=train_set)

    def score_on_val(raw: np.ndarray, _: Any) -> tuple[str, float, bool]:
        return "selection", selection_score(val, ranking_key(raw, params.objective))[0], True

    rounds_run = 0

    def count_rounds(env: Any) -> None:
        nonlocal rounds_run
        rounds_run = env.iteration + 1

    booster = lgb.train(lightgbm_params(params, seed), train_set, num_boost_round=params.rounds,
                        valid_sets=[val_set], valid_names=["val"], feval=score_on_val,
                        callbacks=[count_rounds,
                                   lgb.early_stopping(params.early_stopping_rounds, verbose=False)])
    best = booster.best_iteration or booster.current_iteration()
    raw = booster.predict(val.x, num_iteration=best)
    score, topk = selection_score(val, ranking_key(raw, params.objective))
    metrics: dict[str, Any] = {"objective": params.objective, "best_round": int(best),
                               "rounds_run": rounds_run,
                               "val": {"selection_score": score, "topk": topk}}
    if not lambdarank:
        metrics["val"]["rmse_log"] = float(np.sqrt(np.mean((raw - val.log_ms) ** 2)))
    return booster, metrics


def export_ensemble(booster: Any, n_features: int, num_iteration: int | None = None) -> TreeEnsemble:
    """The booster's first `num_iteration` trees (default: its best round) as numpy arrays.

    Raises:
        ModelError: a tree uses a split the numpy traversal does not implement (categorical, or one
            whose missing values go another way than LightGBM's for finite inputs).
    """
    dump = booster.dump_model(num_iteration=num_iteration or booster.best_iteration or None)
    if dump.get("num_class", 1) != 1 or dump.get("num_tree_per_iteration", 1) != 1:
        raise ModelError("GBDT export: only single-output models (regression, lambdarank) are supported")
    return TreeEnsemble.from_nested([info["tree_structure"] for info in dump["tree_info"]], n_features)


def fit_gbdt(data_path: str | Path | Sequence[str | Path], *, device: DeviceSpec | str,
             params: GBDTParams | None = None, seed: int = 0, cap: int = DEFAULT_CAP,
             feature_version: int = FEATURE_VERSION, problem_fraction: float = 1.0,
             frame: pd.DataFrame | None = None) -> GBDTResult:
    """Fit a GBDT on the trainable problems of the dataset file(s), as `train.train` fits the MLP,
    and export it to a numpy `GBDTModel` (not saved: `GBDTModel.save` writes it).

    Args:
        problem_fraction: keep this share of the train and val problems (a hash of the problem id
            chooses them, the same for every learner): a quick fit while developing.
        frame: the dataset, already read from `data_path`.
    Raises:
        DatasetError: unreadable files, or no usable rows in `train` or `val`.
        OptionError: bad parameters.
        ModelError: LightGBM is not installed.
    """
    started = time.perf_counter()
    params = params or GBDTParams()
    check_params(params)
    lightgbm()  # before the data is read: a missing LightGBM costs nothing
    spec = get_device(device)
    paths = dataset.expand_paths(data_path)
    layouts = layouts_for(feature_version)
    frame = dataset.read_many(paths) if frame is None else frame
    frame = dataset.modelled_layout_rows(frame, layouts=layouts)
    rows, _ = training_rows(frame, spec, paths, cap, seed, layouts, batched=feature_version >= 5)
    rows = keep_problem_fraction(rows, problem_fraction)
    x = featurize_frame(rows, spec, feature_version)
    train_rows, val_rows = Rows.of(rows, x, "train"), Rows.of(rows, x, "val")
    booster, metrics = fit_booster(train_rows, val_rows, params, seed)
    ensemble = export_ensemble(booster, x.shape[1])
    metrics["train_seconds"] = round(time.perf_counter() - started, 1)
    card = GBDTCard(
        device=spec.key, gpu=GpuIdentity.of(spec), feature_version=feature_version,
        feature_names=list(FEATURE_SETS[feature_version]),
        output=output_of(params.objective), trees=ensemble.n_trees, nodes=ensemble.n_nodes,
        max_depth=ensemble.max_depth, dtypes=sorted(rows["dtype"].astype(str).unique()),
        layouts=sorted(rows["layout"].astype(str).unique()), domain=domain_of(rows),
        hyperparameters={**dataclasses.asdict(params), "seed": seed, "cap_rows_per_problem": cap,
                         "problem_fraction": problem_fraction},
        data=provenance(paths, rows), metrics=metrics, trained_at=utc_now(),
        versions={**training_versions(), "lightgbm": lightgbm().__version__})
    model = GBDTModel(spec, ensemble, card)
    return GBDTResult(model=model, booster=booster, metrics=metrics, seconds=time.perf_counter() - started)


def output_of(objective: str) -> Output:
    """What the trees' sum means: log ms (regression) or a ranking score, higher = faster (lambdarank)."""
    return "log_ms" if objective == "regression" else "rank_score"


def keep_problem_fraction(rows: pd.DataFrame, fraction: float) -> pd.DataFrame:
    """The rows of a `fraction` of the problems, chosen by a hash of the problem id (the same problems
    for every learner and run); all rows at 1.

    Raises:
        OptionError: a fraction outside (0, 1].
    """
    if not (isinstance(fraction, (int, float)) and 0 < fraction <= 1):
        raise OptionError(f"problem fraction: expected a number in (0, 1], got {fraction!r}")
    if fraction == 1:
        return rows
    keep = pd.util.hash_array(rows["problem_id"].astype(str).to_numpy()) % 10_000 < fraction * 10_000
    return rows[keep].reset_index(drop=True)
