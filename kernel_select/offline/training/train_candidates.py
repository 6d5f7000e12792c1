"""The candidate models of the model selection, each fitted on the same trainable problems.

  mlp_v1          the shipped architecture: features v1 (33), widths [128, 64, 64], learned overhead
  mlp_v2          the same network on features v2 (v1 plus alignment and per-step features)
  fast_autotune   the fast_autotune PR's net (pytorch/pytorch#156851): its 12 log features, 6 hidden
                  layers x 256 with BatchNorm and ReLU, output logsumexp(net, log 0.00541 ms)
  gbm_reg         LightGBM gradient-boosted trees regressing log runtime on features v2
  gbm_rank        LightGBM lambdarank over each problem's configs on features v2 (ranks only; its
                  scores are not milliseconds)

Every candidate maps a v2 feature matrix (v1 is its prefix, the 12 fast_autotune features are
v1's first 12) to a score per row, lower = faster; the calibrated ones score log milliseconds.
Nets train with the listwise+MSE objective of `train.py` (keep the best validation epoch);
the trees early-stop on the validation problems.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from kernel_select.model import features as v1
from kernel_select.offline.training.train import MLPHParams, _fit, _Split

FAST_AUTOTUNE_FEATURES = 12  # v1's first 12 columns are the PR's 12 log features
FAST_AUTOTUNE_OVERHEAD_MS = 0.00541  # the PR's fixed launch overhead
N_V1 = len(v1.FEATURE_NAMES)


@dataclass
class TrainData:
    """Rows of the trainable problems, sorted by problem, with v2 features and log runtime."""

    x: np.ndarray  # float32 (rows, n_v2_features)
    log_ms: np.ndarray  # float64 (rows,)
    groups: np.ndarray  # problem codes 0..P-1, contiguous
    is_val: np.ndarray  # bool per row: a validation problem


@dataclass
class Candidate:
    """A fitted candidate: `score(x_v2, groups)` per row (lower = faster) and what it is. `groups`
    (problem codes, rows contiguous per problem) matters only to candidates that shortlist per problem."""

    name: str
    score: Callable[[np.ndarray, np.ndarray], np.ndarray]
    calibrated: bool  # scores are log milliseconds
    info: dict[str, Any]


class FastAutotuneNet(nn.Module):
    """6 x [Linear 256 -> BatchNorm -> ReLU] -> Linear, logsumexp with a fixed launch overhead."""

    def __init__(self, n_features: int, width: int = 256, depth: int = 6) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i in range(depth):
            layers += [nn.Linear(n_features if i == 0 else width, width), nn.BatchNorm1d(width), nn.ReLU()]
        layers.append(nn.Linear(width, 1))
        self.body = nn.Sequential(*layers)
        self.register_buffer("log_overhead_ms", torch.tensor(math.log(FAST_AUTOTUNE_OVERHEAD_MS)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # BatchNorm1d wants (rows, features); listwise batches arrive as (problems, configs, features)
        flat = self.body(x.reshape(-1, x.shape[-1])).reshape(x.shape[:-1])
        return torch.logaddexp(flat, self.log_overhead_ms)


def _split_of(data: TrainData, x: np.ndarray, mask: np.ndarray) -> _Split:
    codes = np.unique(data.groups[mask], return_inverse=True)[1]
    counts = np.bincount(codes)
    return _Split(x=torch.from_numpy(np.ascontiguousarray(x[mask])),
                  y=torch.from_numpy(data.log_ms[mask].astype(np.float32)),
                  groups=codes, starts=np.r_[0, np.cumsum(counts)[:-1]], counts=counts)


def fit_net(name: str, data: TrainData, columns: int, hp: MLPHParams, seed: int,
            make_net: Callable[[int], nn.Module] | None = None, progress: bool = True) -> Candidate:
    """Standardize the first `columns` features on the training rows, fit, keep the best epoch."""
    x = data.x[:, :columns]
    train = ~data.is_val
    mean = x[train].mean(axis=0, dtype=np.float64)
    std = x[train].std(axis=0, dtype=np.float64)
    std = np.where(std > 1e-6, std, 1.0)
    z = ((x - mean) / std).astype(np.float32)
    net, val = _fit("rank", _split_of(data, z, train), _split_of(data, z, data.is_val), hp, seed, progress,
                    make_net=make_net)
    net.eval()
    mean32, inv_std = mean.astype(np.float32), (1.0 / std).astype(np.float32)

    def score(features: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
        with torch.inference_mode():
            z = torch.from_numpy((features[:, :columns] - mean32) * inv_std)
            return net(z).numpy().astype(np.float64)

    params = sum(p.numel() for p in net.parameters())
    return Candidate(name, score, calibrated=True,
                     info={"features": columns, "parameters": params, "val_topk": val["topk"],
                           "best_epoch": val["epoch"], "net": net, "mean": mean, "std": std})


def fit_mlp_v1(data: TrainData, hp: MLPHParams, seed: int, progress: bool = True) -> Candidate:
    return fit_net("mlp_v1", data, N_V1, hp, seed, progress=progress)


def fit_mlp_v2(data: TrainData, hp: MLPHParams, seed: int, progress: bool = True) -> Candidate:
    """The shipped MLP's architecture on features v2 (v1 plus alignment and per-step terms)."""
    return fit_net("mlp_v2", data, data.x.shape[1], hp, seed, progress=progress)


def fit_fast_autotune(data: TrainData, hp: MLPHParams, seed: int, progress: bool = True) -> Candidate:
    hp = dataclasses.replace(hp, lr=min(hp.lr, 1e-3))  # BatchNorm + depth 6: the smaller step is stabler
    return fit_net("fast_autotune", data, FAST_AUTOTUNE_FEATURES, hp, seed, FastAutotuneNet, progress)


@dataclass(frozen=True)
class GBMParams:
    """LightGBM hyperparameters: chosen by hand, recorded in the card."""

    n_estimators: int = 400  # upper bound; early stopping on validation picks the count
    learning_rate: float = 0.05
    num_leaves: int = 63
    min_child_samples: int = 40
    subsample: float = 0.8
    colsample_bytree: float = 0.8
    early_stopping_rounds: int = 40
    rank_label_levels: int = 31  # lambdarank relevance 0..30 (LightGBM's default label_gain length)
    rank_label_span: float = math.log(2.0)  # a config 2x slower than the oracle gets relevance 0


def _lgb_params(p: GBMParams, seed: int, **objective: Any) -> dict[str, Any]:
    return {"learning_rate": p.learning_rate, "num_leaves": p.num_leaves,
            "min_data_in_leaf": p.min_child_samples, "bagging_fraction": p.subsample, "bagging_freq": 1,
            "feature_fraction": p.colsample_bytree, "seed": seed, "num_threads": 2, "verbose": -1,
            **objective}


def _booster_score(booster: Any) -> Callable[[np.ndarray], np.ndarray]:
    def score(features: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
        return booster.predict(features, num_threads=1).astype(np.float64)
    return score


def _train_booster(params: dict[str, Any], p: GBMParams, train: Any, val: Any) -> Any:
    import lightgbm as lgb

    return lgb.train(params, train, num_boost_round=p.n_estimators, valid_sets=[val],
                     callbacks=[lgb.early_stopping(p.early_stopping_rounds, verbose=False)])


def fit_gbm_reg(data: TrainData, p: GBMParams, seed: int) -> Candidate:
    import lightgbm as lgb

    train, val = ~data.is_val, data.is_val
    dtrain = lgb.Dataset(data.x[train], data.log_ms[train], free_raw_data=False)
    dval = lgb.Dataset(data.x[val], data.log_ms[val], reference=dtrain)
    booster = _train_booster(_lgb_params(p, seed, objective="regression"), p, dtrain, dval)
    return Candidate("gbm_reg", _booster_score(booster), calibrated=True,
                     info={"trees": booster.num_trees(), "booster": booster})


def rank_labels(groups: np.ndarray, log_ms: np.ndarray, p: GBMParams) -> np.ndarray:
    """Relevance per row: levels-1 at the problem's oracle, falling linearly to 0 at span slower."""
    best = np.full(groups.max() + 1, np.inf)
    np.minimum.at(best, groups, log_ms)
    gap = (log_ms - best[groups]) / p.rank_label_span
    return np.clip(np.round((1.0 - gap) * (p.rank_label_levels - 1)), 0, p.rank_label_levels - 1).astype(int)


def fit_gbm_rank(data: TrainData, p: GBMParams, seed: int) -> Candidate:
    import lightgbm as lgb

    def dataset(mask: np.ndarray, **kw: Any) -> Any:
        sizes = np.bincount(np.unique(data.groups[mask], return_inverse=True)[1])
        return lgb.Dataset(data.x[mask], labels[mask], group=sizes, **kw)

    labels = rank_labels(data.groups, data.log_ms, p)
    dtrain = dataset(~data.is_val, free_raw_data=False)
    dval = dataset(data.is_val, reference=dtrain)
    params = _lgb_params(p, seed, objective="lambdarank", lambdarank_truncation_level=32,
                         label_gain=list(range(p.rank_label_levels)), eval_at=[4])
    booster = _train_booster(params, p, dtrain, dval)
    score = _booster_score(booster)
    # LightGBM ranks high scores first; negate so that lower = better like every other method
    return Candidate("gbm_rank", lambda f, g=None: -score(f), calibrated=False,
                     info={"trees": booster.num_trees(), "booster": booster})


def ensemble(name: str, members: list[Candidate], shortlist: int | None = None) -> Candidate:
    """Mean of the members' log-ms predictions.

    With `shortlist`, the first member (the cheap one) scores every config and only its
    `shortlist` best per problem are re-scored by the mean: tree models cost ~30 us a row, too much
    for 1,400 configs inside the 2 ms budget, not for 64. Configs left out keep the first member's
    prediction, raised to at least the slowest shortlisted prediction, so the ranking is
    "shortlist first" and every number is still a runtime in ms.
    """
    if not all(m.calibrated for m in members):
        raise ValueError("ensemble: only calibrated (log-ms) members can be averaged")

    def mean_of(features: np.ndarray, groups: np.ndarray) -> np.ndarray:
        return np.mean([m.score(features, groups) for m in members], axis=0)

    def score(features: np.ndarray, groups: np.ndarray | None = None) -> np.ndarray:
        groups = np.zeros(len(features), dtype=np.int64) if groups is None else groups
        if shortlist is None:
            return mean_of(features, groups)
        first = members[0].score(features, groups)
        order = np.lexsort((first, groups))
        g = groups[order]
        rank = np.empty(len(g), dtype=np.int64)
        rank[order] = np.arange(len(g)) - np.searchsorted(g, g)
        short = rank < shortlist
        out = first.copy()
        out[short] = np.mean([first[short], *[m.score(features[short], groups[short]) for m in members[1:]]],
                             axis=0)
        slowest = np.full(groups.max() + 1, -np.inf)
        np.maximum.at(slowest, groups[short], out[short])
        out[~short] = np.maximum(out[~short], slowest[groups[~short]])
        return out

    return Candidate(name, score, calibrated=True,
                     info={"members": [m.name for m in members], "shortlist": shortlist})
