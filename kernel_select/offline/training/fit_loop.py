"""The MLP's fitting loop: hyperparameters, the standardized splits, the epochs, validation.

train.py decides what to fit on and what to save; this module fits one network. An epoch is
`_steps_per_epoch` AdamW steps on minibatches (`mse`: rows; `rank`: problems with configs sampled
from each, scored by the MSE plus a ListNet term), under a cosine learning-rate decay; after every
epoch the network is scored on `val` (mean of the top-1/2/4/8 scores) and the best epoch is kept.
A train split with problem weights (`train --weight`) weighs each problem's terms of the loss; the
batches are drawn as without, and `val` is never weighted.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from kernel_select.errors import ModelError
from kernel_select.model.mlp import RuntimeNet
from kernel_select.offline.metrics import geomean, topk_scores
from kernel_select.offline.training.warm_start import WarmStart


VAL_KS = (1, 2, 4, 8, 16)
_SELECTION_KS = (1, 2, 4, 8)  # the validation score is the mean of the geomean top-k scores at these k


@dataclass(frozen=True)
class MLPHParams:
    """Hyperparameters: chosen by hand, recorded in the model card, never learned."""

    # each member of this width adds one network's arithmetic to estimate() over the seed problem's 1,206
    # configs on one CPU thread, most of its time (results.md, "`estimate()` overhead")
    hidden_widths: tuple[int, ...] = (96, 64, 32)
    epochs: int = 120
    lr: float = 2e-3  # AdamW peak learning rate, cosine-annealed to lr/20 over all steps
    weight_decay: float = 1e-4
    batch_rows: int = 2048  # mse: rows per step
    batch_problems: int = 32  # rank: problems per step
    configs_per_problem: int = 128  # rank: configs sampled (with replacement) per problem and step
    rank_weight: float = 1.0  # rank: weight of the listwise term next to the MSE term
    rank_temperature: float = 0.1  # rank: softmax temperature in log-runtime units (0.1 = ~10%)
    initial_overhead_ms: float = 0.005  # start of the learned launch overhead (PR #156851 used 0.00541)
    members: int = 2  # nets trained from seeds seed, seed+1, ...; the model averages their log ms


@dataclass(frozen=True)
class TimeLimit:
    """A wall-clock bound on the MLP's training: the networks to fit share what is left of it
    equally, each stopping after the last epoch it can afford (kernel-select calibrate trains
    within its time budget). `on_epoch` is called after every epoch (a progress display)."""

    deadline: float  # time.perf_counter() by which every network is fitted
    on_epoch: Callable[[], None] | None = None

    def share(self, fits_left: int) -> float:
        """The deadline of the next fit when `fits_left` fits (it included) remain."""
        now = time.perf_counter()
        return now + max(self.deadline - now, 0.0) / max(fits_left, 1)


@dataclass
class Split:
    x: torch.Tensor  # standardized features (rows, n_features)
    y: torch.Tensor  # log runtime_ms (rows,)
    groups: np.ndarray  # problem codes 0..P-1, rows sorted by problem
    starts: np.ndarray  # first row of each problem
    counts: np.ndarray  # rows of each problem
    weights: np.ndarray | None = None  # each problem's weight in the loss (train --weight); None: alike


def standardize(features: np.ndarray, train_mask: np.ndarray, warm: WarmStart | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 standardized features, with the training rows' mean and std (float64), or the
    warm start's (its first layer was trained on inputs scaled that way)."""
    if warm is not None:
        return warm.standardize(features), warm.feature_mean, warm.feature_std
    mean = features[train_mask].mean(axis=0, dtype=np.float64)
    std = features[train_mask].std(axis=0, dtype=np.float64)
    std = np.where(std > 1e-6, std, 1.0)  # a constant feature (e.g. one dtype) must not divide by 0
    return ((features - mean) / std).astype(np.float32), mean, std


def make_split(rows: pd.DataFrame, standardized: np.ndarray, split: str,
               weights: np.ndarray | None = None) -> Split:
    """The rows of `split` (`rows` sorted by problem); `weights`: per row of `rows`, the weight of its
    problem in the loss (alike within a problem), or None."""
    mask = (rows["split"] == split).to_numpy()
    groups, _ = pd.factorize(rows.loc[mask, "problem_id"], sort=True)
    counts = np.bincount(groups)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    return Split(x=torch.from_numpy(standardized[mask]),
                  y=torch.from_numpy(np.log(rows.loc[mask, "runtime_ms"].to_numpy(np.float64))
                                     .astype(np.float32)),
                  groups=groups, starts=starts, counts=counts,
                  weights=None if weights is None else np.asarray(weights, np.float64)[mask][starts])


def fit(objective: str, train_split: Split, val: Split, hp: MLPHParams, seed: int,
         progress: bool, make_net: Any = None, start: RuntimeNet | None = None,
         limit: TimeLimit | None = None, fits_left: int = 1) -> tuple[RuntimeNet, dict[str, Any]]:
    """Fit a net (default: RuntimeNet of `hp.hidden_widths`; `make_net(n_features)` builds another
    architecture with the same `body[-1]` output layer; `start`: a copy of these trained weights)
    and keep its best epoch on `val` (with `start`, its weights untouched count as epoch 0).

    With `limit`, this fit gets an equal share of the time left among `fits_left` fits: when the
    first epoch shows that fewer epochs than `hp.epochs` fit in it, the cosine decay starts again
    over the epochs that do, and training stops after the last of them."""
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    net = _initial_net(train_split, hp, make_net, start)
    optimizer = torch.optim.AdamW(net.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
    steps_per_epoch = _steps_per_epoch(objective, train_split, hp)
    weights = step_weights(objective, train_split)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=hp.epochs * steps_per_epoch, eta_min=hp.lr / 20)

    best_state = copy.deepcopy(net.state_dict())
    best = {**validate(net, val), "epoch": 0} if start is not None else {"selection_score": -math.inf}
    deadline = limit.share(fits_left) if limit is not None else math.inf
    epochs = hp.epochs
    bar = tqdm(total=hp.epochs, desc=f"train[{objective}]", unit="epoch", disable=not progress)
    epoch = 0
    while epoch < epochs:
        started = time.perf_counter()
        net.train()
        losses = []
        for batch in _batches(objective, train_split, hp, rng, steps_per_epoch):
            loss = _loss(objective, net, train_split, batch, hp, weights)
            if not torch.isfinite(loss):
                raise diverged(epoch + 1, loss.item(), hp.lr)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            losses.append(loss.item())
        metrics = validate(net, val)
        metrics.update(epoch=epoch + 1, train_loss=float(np.mean(losses)))
        if metrics["selection_score"] > best["selection_score"]:
            best, best_state = metrics, copy.deepcopy(net.state_dict())
        bar.update(1)
        bar.set_postfix(loss=f"{metrics['train_loss']:.4f}", val=f"{metrics['selection_score']:.4f}",
                        best=f"{best['selection_score']:.4f}")
        epoch += 1
        if limit is not None:
            if limit.on_epoch is not None:
                limit.on_epoch()
            epoch_s = time.perf_counter() - started
            affordable = epoch + int(max(deadline - time.perf_counter(), 0.0) // max(epoch_s, 1e-9))
            if affordable < epochs:
                if epoch == 1 and affordable > 1:  # decay over the epochs that fit, not over hp.epochs
                    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
                        optimizer, T_max=(affordable - 1) * steps_per_epoch, eta_min=hp.lr / 20)
                epochs = max(affordable, epoch)
    bar.close()
    net.load_state_dict(best_state)
    if limit is not None:
        best.update(epochs_run=epoch, epochs_planned=hp.epochs)
    return net.eval(), best


def diverged(epoch: int, loss: float, lr: float) -> ModelError:
    """The error that stops a fit whose loss is no longer finite: every later step would be wasted."""
    return ModelError(f"training diverged in epoch {epoch} (the loss is {loss}); nothing was saved; "
                      f"train again with a smaller learning rate (--lr, now {lr:g}; the default is "
                      f"{MLPHParams.lr:g})")


def _initial_net(train_split: Split, hp: MLPHParams, make_net: Any, start: RuntimeNet | None) -> RuntimeNet:
    if start is not None:
        return copy.deepcopy(start).train()
    n_features = train_split.x.shape[1]
    net = (make_net(n_features) if make_net is not None
           else RuntimeNet(n_features, hp.hidden_widths, hp.initial_overhead_ms))
    with torch.no_grad():  # start at the mean log runtime rather than at 0 = 1 ms
        net.body[-1].bias.fill_(float(train_split.y.mean()))
    return net


def _steps_per_epoch(objective: str, split: Split, hp: MLPHParams) -> int:
    rows_per_step = hp.batch_rows if objective == "mse" else hp.batch_problems * hp.configs_per_problem
    return max(1, math.ceil(len(split.y) / rows_per_step))


def _batches(objective: str, split: Split, hp: MLPHParams, rng: np.random.Generator, steps: int):
    """Row indices per step: a flat array (mse) or (problems, configs) (rank)."""
    if objective == "mse":
        order = rng.permutation(len(split.y))
        for step in range(steps):
            yield torch.from_numpy(order[step * hp.batch_rows:(step + 1) * hp.batch_rows])
        return
    n_problems = len(split.counts)
    problems = np.concatenate([rng.permutation(n_problems)
                               for _ in range(math.ceil(steps * hp.batch_problems / n_problems))])
    for step in range(steps):
        chosen = problems[step * hp.batch_problems:(step + 1) * hp.batch_problems]
        offsets = np.floor(rng.random((len(chosen), hp.configs_per_problem))
                           * split.counts[chosen, None]).astype(np.int64)
        yield torch.from_numpy(split.starts[chosen, None] + offsets)


def step_weights(objective: str, split: Split) -> torch.Tensor | None:
    """Per row of `split`, its problem's weight over the mean weight of what a step draws: rows (mse)
    or problems (rank, each drawn alike whatever its rows). A step's loss is then an unbiased estimate
    of the weighted mean loss over the split at the unweighted loss's scale, so --lr means the same.
    Weights rather than weighted draws: the batches, epochs and random stream stay those of an
    unweighted fit, and a factor below 1 needs nothing else. None without weights."""
    if split.weights is None:
        return None
    per_row = split.weights[split.groups]
    mean = per_row.mean() if objective == "mse" else split.weights.mean()
    return torch.from_numpy((per_row / mean).astype(np.float32))


def _loss(objective: str, net: RuntimeNet, split: Split, index: torch.Tensor,
          hp: MLPHParams, weights: torch.Tensor | None = None) -> torch.Tensor:
    pred = net(split.x[index])
    target = split.y[index]
    if weights is None:  # the unweighted fit computes exactly what it did before weights existed
        mse = torch.nn.functional.mse_loss(pred, target)
    else:
        mse = (weights[index] * (pred - target) ** 2).mean()
    if objective == "mse":
        return mse
    # ListNet over each problem's sampled configs: cross-entropy between "which config is fastest"
    # distributions; the target's entropy is subtracted (KL) so a perfect ranking scores 0.
    tau = hp.rank_temperature
    log_p_target = torch.log_softmax(-target / tau, dim=1)
    log_p_pred = torch.log_softmax(-pred / tau, dim=1)
    per_problem = (log_p_target.exp() * (log_p_target - log_p_pred)).sum(dim=1)
    listwise = per_problem.mean() if weights is None else (weights[index[:, 0]] * per_problem).mean()
    return mse + hp.rank_weight * listwise


@torch.no_grad()
def validate(net: RuntimeNet, split: Split, ks: tuple[int, ...] = VAL_KS) -> dict[str, Any]:
    """Top-k scores (geomean over problems) and log-runtime RMSE on a split."""
    net.eval()
    pred = torch.cat([net(chunk) for chunk in torch.split(split.x, 65536)]).numpy()
    y = split.y.numpy()
    runtime_ms = np.exp(y.astype(np.float64))
    scores = geomean(topk_scores(split.groups, pred.astype(np.float64), runtime_ms, ks))
    topk = {str(k): float(s) for k, s in zip(ks, scores)}
    return {"topk": topk, "selection_score": float(np.mean([topk[str(k)] for k in _SELECTION_KS])),
            "rmse_log": float(np.sqrt(np.mean((pred - y) ** 2)))}
