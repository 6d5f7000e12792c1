"""Train the shortlist ensemble (model/ensemble.py) with one call, and score it on the frozen splits.

Recipe: the trainable problems (hash train/val minus the family holdout, splits.py), at most
`cap` configs per problem (every contender within 1.5x of the oracle, then a random sample), an
MLP on features v1 with the listwise+MSE objective (best validation epoch), a LightGBM regressor
of log runtime and a LightGBM lambdarank ranker on features v2 (both early-stopped on validation).
The card records the data hash, the hyperparameters and the held-out scores.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import kernel_select
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import OptionError
from kernel_select.model import features_v2 as v2
from kernel_select.model.ensemble import EnsembleCard, EnsembleModel
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training import training_data, uncertainty
from kernel_select.offline.metrics import DEFAULT_KS, geomean
from kernel_select.offline.training.model_selection import SHORTLIST, HeldOut, build_train_data, prepare_rows
from kernel_select.offline.training.train import MLPHParams
from kernel_select.offline.training.train_candidates import (
    N_V1, GBMParams, fit_gbm_rank, fit_gbm_reg, fit_mlp_v1,
)

log = logging.getLogger(__name__)

DEFAULT_CAP = 384  # configs per problem: ~1M-row datasets train in minutes on 2 cores


def train_ensemble(data_path: str | Path | list[str | Path], out_dir: str | Path, device: DeviceSpec | str, *,
                   seed: int = 0,
                   epochs: int = 30, cap: int = DEFAULT_CAP, shortlist: int = SHORTLIST,
                   gbm: GBMParams | None = None, ranker: bool = True, progress: bool = True) -> EnsembleModel:
    """Fit and save the ensemble; returns it with held-out metrics in its card."""
    if epochs < 1 or cap < 1 or shortlist < 1:
        raise OptionError(f"epochs, cap and shortlist must be >= 1, got {epochs}, {cap}, {shortlist}")
    started = time.perf_counter()
    spec = get_device(device)
    gbm = gbm or GBMParams()
    hp = MLPHParams(epochs=epochs)
    frame = dataset.read_many(data_path)
    rows, aten = prepare_rows(frame, spec)
    x = v2.featurize_frame(rows, spec)
    masks = splits.split_masks(rows)
    data = build_train_data(rows, x, masks, cap, seed)
    mlp = fit_mlp_v1(data, hp, seed, progress=progress)
    trees = fit_gbm_reg(data, gbm, seed)
    ranking = fit_gbm_rank(data, gbm, seed) if ranker else None
    card = EnsembleCard(
        device=spec.key, feature_version=v2.FEATURE_VERSION, feature_names=list(v2.FEATURE_NAMES),
        mlp_features=N_V1, feature_mean=mlp.info["mean"].tolist(), feature_std=mlp.info["std"].tolist(),
        hidden_widths=list(hp.hidden_widths), shortlist=shortlist, ranker=ranker,
        dtypes=sorted(rows["dtype"].astype(str).unique()),
        hyperparameters={"mlp": dataclasses.asdict(hp), "gbm": dataclasses.asdict(gbm), "seed": seed,
                         "cap_rows_per_problem": cap, "trees": trees.info["trees"],
                         "ranker_trees": ranking.info["trees"] if ranking else 0},
        data=_provenance(dataset.expand_paths(data_path), rows, masks),
        trained_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        trainer={"kernel_select": kernel_select.__version__, "torch": torch.__version__,
                 "lightgbm": _lightgbm_version()})
    model = EnsembleModel(spec, mlp.info["net"], trees.info["booster"], card,
                          ranking.info["booster"] if ranking else None)
    card.metrics = held_out_metrics(model, rows, x, masks, aten, spec)  # sets card.auto_threshold
    card.metrics["train_seconds"] = round(time.perf_counter() - started, 1)
    model.save(out_dir)
    log.info("trained the %s ensemble in %.0f s -> %s", spec.key, card.metrics["train_seconds"], out_dir)
    return model


def held_out_metrics(model: EnsembleModel, rows, x: np.ndarray, masks: dict[str, np.ndarray], aten,
                     spec: DeviceSpec) -> dict[str, Any]:
    """Top-k, with-cuBLAS, strata, calibration and topk="auto" of the model on `test` and `family`,
    computed through `estimate` and `spread` themselves (one problem at a time, as Inductor calls
    them). Sets the card's auto threshold, chosen on the validation problems."""
    scored = {name: _score_split(model, HeldOut(rows, x, masks[name], aten, spec, "2.11"))
              for name in ("val", *splits.EVAL_SPLITS) if masks[name].any()}
    if "val" in scored:
        held, log_pred, spread = scored["val"]
        model.card.auto_threshold = uncertainty.choose_threshold(held.groups, log_pred, held.runtime, spread)
    out: dict[str, Any] = {}
    for name, (held, log_pred, spread) in scored.items():
        if name == "val":
            continue
        report = held.report(log_pred, calibrated=True)
        if model.card.auto_threshold is not None:
            k = uncertainty.auto_k(spread, model.card.auto_threshold)
            auto = uncertainty.auto_scores(held.groups, log_pred, held.runtime, k)
            report["auto"] = {"score": float(geomean(auto)), "mean_k": float(k.mean()),
                              "k_counts": {str(v): int((k == v).sum()) for v in np.unique(k)}}
        report["worst"] = _worst(held, report.pop("per_problem"), log_pred)
        out[name] = {"problems": len(held.problem_ids), **report}
    return out


def _score_split(model: EnsembleModel, held: HeldOut) -> tuple[HeldOut, np.ndarray, np.ndarray]:
    """(the split, log of the model's predicted ms per row, the model's spread per problem)."""
    from kernel_select.offline.training.evaluate import predict_cases, problem_cases

    cases = problem_cases(held.rows, held.problems)
    log_pred = np.log(predict_cases(model, cases))
    spread = np.array([model.spread(p.m, p.n, p.k, p.dtype, configs) for p, configs in cases])
    return held, log_pred, spread


def _worst(held: HeldOut, per_problem: np.ndarray, log_pred: np.ndarray, count: int = 10) -> list[dict]:
    """The `count` problems with the lowest top-4 score: what the model put first, what won."""
    from kernel_select.offline.training.evaluate import configs_of

    first = held.rows.iloc[np.lexsort((log_pred, held.groups))].groupby("problem_id", sort=True).head(1)
    fastest = held.rows.iloc[np.lexsort((held.runtime, held.groups))].groupby("problem_id", sort=True).head(1)
    column = list(DEFAULT_KS).index(4)
    return [{"problem_id": held.problem_ids[i], "top1_score": float(per_problem[i, 0]),
             "top4_score": float(per_problem[i, column]), "picked": configs_of(first.iloc[[i]])[0].short(),
             "oracle": configs_of(fastest.iloc[[i]])[0].short()}
            for i in np.argsort(per_problem[:, column], kind="stable")[:count]]


def _provenance(paths: list[Path], rows, masks: dict[str, np.ndarray]) -> dict[str, Any]:
    digest = training_data.file_hashes(paths)[1]
    ids = rows["problem_id"].to_numpy()
    return {"file": "+".join(p.name for p in paths), "sha256": digest,
            "rows": int((masks["train"] | masks["val"]).sum()),
            "problems": {name: int(len(set(ids[mask]))) for name, mask in masks.items()},
            "held_out_families": sorted(splits.HELD_OUT_FAMILIES)}


def _lightgbm_version() -> str:
    import lightgbm

    return lightgbm.__version__
