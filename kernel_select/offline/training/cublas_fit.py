"""Training the cuBLAS decision's two problem-level networks (kernel_select.model.cublas): the gate
(log of cuBLAS time over the Triton oracle) and the cuBLAS time head (log cuBLAS ms).

Both see one row per problem (a few hundred to a few thousand), so every epoch is one full-batch
AdamW step over all of them; the weights with the lowest validation RMSE are kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelError
from kernel_select.layouts import DEFAULT_LAYOUT
from kernel_select.model.card import Architecture, GpuIdentity, ModelCard, training_versions, utc_now
from kernel_select.model.checkpoint import build_body
from kernel_select.model.folder_write import Checkpoint, write_model_folder
from kernel_select.model.folders import MODEL_STEMS
from kernel_select.model.cublas import (
    ATEN_STEM,
    BATCHED_FEATURE_NAMES,
    BATCHED_GATE_STEM,
    PROBLEM_FEATURE_NAMES,
    PROBLEM_FEATURE_VERSION,
    AtenHead,
    BatchedGate,
    CublasGate,
    MemberMean,
    ProblemNet,
    problem_features,
    skips_triton_at,
)
from kernel_select.offline.data import splits
from kernel_select.problem import DTYPE_BYTES, Problem, dtype_name

#: The margins a gate's validation report covers (the card's metrics.validation.margins).
GATE_MARGINS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.3)
#: Each gate network is the mean of this many, fitted from consecutive seeds (model.cublas.MemberMean:
#: why).
GATE_MEMBERS = 4
GATE_ARCHITECTURE = Architecture(inputs=len(PROBLEM_FEATURE_NAMES), hidden_widths=[32, 32], activation="silu",
                                 members=GATE_MEMBERS)
ATEN_ARCHITECTURE = Architecture(inputs=len(PROBLEM_FEATURE_NAMES), hidden_widths=[64, 64], activation="silu")
BATCHED_GATE_ARCHITECTURE = Architecture(inputs=len(BATCHED_FEATURE_NAMES), hidden_widths=[32, 32],
                                         activation="silu", members=GATE_MEMBERS)
#: The fewest batched train / val problems a batched gate is fitted on; with fewer the folder gets none
#: and batched GEMMs keep Inductor's benchmark of cuBLAS beside the picks. The H200 files hold 827 / 181.
MIN_BATCHED_TRAIN, MIN_BATCHED_VAL = 100, 20


def table_features(table: pd.DataFrame, device: DeviceSpec, *, batched: bool = False) -> np.ndarray:
    """Problem features of a frame with m, n, k, dtype and (else all "nn") layout columns; `batched`:
    BATCHED_FEATURE_NAMES, from its batch column."""
    layout = (table["layout"].astype(str) if "layout" in table.columns
              else pd.Series(DEFAULT_LAYOUT, index=table.index))
    return problem_features(table["m"], table["n"], table["k"],
                            table["dtype"].map(lambda d: DTYPE_BYTES[dtype_name(d)]),
                            (layout.str[0] == "t").to_numpy(np.float64),
                            (layout.str[1] == "t").to_numpy(np.float64), device,
                            batch=table["batch"].to_numpy(np.float64) if batched else None)


def problem_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per problem of a dataset frame: m, n, k, dtype, split, layout, batch and log(cuBLAS ms / Triton
    oracle ms). Problems without a finite cuBLAS row or without a finite Triton row are left out, and so are
    problems timed with TF32: the gate's features cannot tell them (CublasGate.supports)."""
    if "allow_tf32" in df.columns:
        df = df[~df["allow_tf32"].to_numpy(bool)]
    finite = df[np.isfinite(df["runtime_ms"]) & (df["runtime_ms"] > 0)]
    aten = finite[finite["backend"] == "aten"].groupby("problem_id")["runtime_ms"].min()
    triton = finite[finite["backend"] == "triton"].groupby("problem_id")["runtime_ms"].min()
    if "batch" not in df.columns:
        df = df.assign(batch=1)
    meta = df.groupby("problem_id")[["m", "n", "k", "dtype", "split", "layout", "batch"]].first()
    both = pd.concat({"aten": aten, "triton": triton}, axis=1, join="inner")
    out = meta.join(both, how="inner")
    out["log_ratio"] = np.log(out["aten"] / out["triton"])
    return out.drop(columns=["aten", "triton"])


def problems_of(table: pd.DataFrame) -> list[Problem]:
    """The Problems of a frame with m, n, k, dtype and (else all "nn" and 1) layout and batch columns,
    in row order; a batch over 1 is a bmm."""
    columns = table.reindex(columns=["m", "n", "k", "dtype", "layout"], fill_value=DEFAULT_LAYOUT)
    batch = table["batch"].to_numpy(np.int64) if "batch" in table.columns else np.ones(len(table), np.int64)
    return [Problem(int(m), int(n), int(k), str(d), layout=str(layout), batch=int(b),
                    op="bmm" if b > 1 else "mm")
            for (m, n, k, d, layout), b in zip(columns.itertuples(index=False, name=None), batch)]


@dataclass
class FittedProblemNet:
    """A trained network with the standardization it expects and how it did on validation."""

    net: Any
    mean: np.ndarray  # float32 per feature, from the training rows
    std: np.ndarray
    val_rmse: float
    best_epoch: int  # the first member's, where there are several (member_best_epochs: each one's)
    member_best_epochs: tuple[int, ...] = ()


def fit_problem_net(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
                    architecture: Architecture, *, seed: int = 0, epochs: int = 1500, check_every: int = 10,
                    lr: float = 1e-2, weight_decay: float = 1e-2) -> FittedProblemNet:
    """Standardize on the training rows, fit MSE, keep the best validation epoch (checked every
    `check_every` epochs)."""
    # A feature constant over the training rows (one dtype, one layout: a calibration run) keeps scale
    # 1: scaled by its ~0 spread, any other value would enter the network at about 1e6.
    mean, spread = x_train.mean(axis=0), x_train.std(axis=0)
    std = np.where(spread > 1e-6, spread + 1e-6, 1.0)
    to_tensor = lambda a: torch.tensor((a - mean) / std, dtype=torch.float32)  # noqa: E731
    xt, xv = to_tensor(x_train), to_tensor(x_val)
    yt = torch.tensor(np.asarray(y_train), dtype=torch.float32)
    yv = np.asarray(y_val, dtype=np.float64)
    torch.manual_seed(seed)
    net = build_body(architecture)
    optimizer = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=weight_decay)
    best_rmse, best_epoch, best_state = math.inf, 0, None
    for epoch in range(1, epochs + 1):
        optimizer.zero_grad()
        loss = ((net(xt).squeeze(1) - yt) ** 2).mean()
        loss.backward()
        optimizer.step()
        if epoch % check_every == 0:
            with torch.no_grad():
                rmse = float(np.sqrt(np.mean((net(xv).squeeze(1).numpy() - yv) ** 2)))
            if rmse < best_rmse:
                best_rmse, best_epoch = rmse, epoch
                best_state = {name: t.clone() for name, t in net.state_dict().items()}
    if best_state is None:
        raise ModelError(f"epochs ({epochs}) must be at least check_every ({check_every})")
    net.load_state_dict(best_state)
    return FittedProblemNet(net.eval(), mean.astype(np.float32), std.astype(np.float32), best_rmse,
                            best_epoch)


def fit_members(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray,
                architecture: Architecture, *, seed: int = 0, **fit: Any) -> FittedProblemNet:
    """`architecture.members` networks fitted by `fit_problem_net` from seeds seed, seed + 1, ... on the
    same rows (so the same standardization), as one model.cublas.MemberMean; one network where the
    architecture has one member. `val_rmse` is the mean's."""
    if architecture.members == 1:
        return fit_problem_net(x_train, y_train, x_val, y_val, architecture, seed=seed, **fit)
    fitted = [fit_problem_net(x_train, y_train, x_val, y_val, architecture, seed=seed + i, **fit)
              for i in range(architecture.members)]
    net = MemberMean([member.net for member in fitted]).eval()
    with torch.no_grad():
        predicted = net(torch.tensor((x_val - fitted[0].mean) / fitted[0].std, dtype=torch.float32))
    rmse = float(np.sqrt(np.mean((predicted.squeeze(1).numpy() - np.asarray(y_val, dtype=np.float64)) ** 2)))
    return FittedProblemNet(net, fitted[0].mean, fitted[0].std, rmse, fitted[0].best_epoch,
                            tuple(member.best_epoch for member in fitted))


def _card(stem: str, spec: DeviceSpec, architecture: Architecture, fitted: FittedProblemNet,
          trained: pd.DataFrame, hyperparameters: dict[str, Any], metrics: dict[str, Any], *,
          feature_names: Sequence[str] = PROBLEM_FEATURE_NAMES) -> ModelCard:
    """The card of a problem net fitted on the problems of `trained` (their dtypes and layouts)."""
    layouts = trained["layout"] if "layout" in trained.columns else [DEFAULT_LAYOUT]
    return ModelCard(
        model=stem, device=spec.key, gpu=GpuIdentity.of(spec), architecture=architecture,
        feature_version=PROBLEM_FEATURE_VERSION,
        feature_names=list(feature_names), feature_mean=fitted.mean.tolist(),
        feature_std=fitted.std.tolist(), dtypes=sorted({dtype_name(d) for d in trained["dtype"]}),
        layouts=sorted(set(layouts)), hyperparameters=hyperparameters, metrics=metrics, trained_at=utc_now(),
        versions=training_versions())


def fit_gate(df: pd.DataFrame, device: DeviceSpec | str, *, seed: int = 0, epochs: int = 1500,
             check_every: int = 10) -> CublasGate:
    """Train the gate on the 'train' split's problems of a dataset frame; validation picks the epoch.

    Raises:
        ModelError: fewer than 10 train or 5 validation problems with a cuBLAS row.
    """
    return _fit_gate_network(CublasGate, problem_ratios(df), device, seed=seed, epochs=epochs,
                             check_every=check_every, min_train=10, min_val=5)


def fit_batched_gate(df: pd.DataFrame, device: DeviceSpec | str, *, seed: int = 0, epochs: int = 1500,
                     check_every: int = 10, min_train: int | None = None,
                     min_val: int | None = None) -> BatchedGate:
    """Train the gate's network for batched GEMMs on the 'train' split's batched problems of a dataset
    frame (its single GEMMs are left out); validation picks the epoch.

    Raises:
        ModelError: fewer than `min_train` train or `min_val` validation batched problems with a
            cuBLAS row (default: MIN_BATCHED_TRAIN, MIN_BATCHED_VAL).
    """
    table = problem_ratios(df)
    return _fit_gate_network(BatchedGate, table[table["batch"] > 1], device, seed=seed, epochs=epochs,
                             check_every=check_every,
                             min_train=MIN_BATCHED_TRAIN if min_train is None else min_train,
                             min_val=MIN_BATCHED_VAL if min_val is None else min_val)


def _fit_gate_network(kind: type[CublasGate] | type[BatchedGate], table: pd.DataFrame,
                      device: DeviceSpec | str, *, seed: int, epochs: int, check_every: int, min_train: int,
                      min_val: int) -> CublasGate | BatchedGate:
    """One of the gate's networks (`kind`) fitted on the train problems of `table` (`problem_ratios`),
    its epoch picked on the val ones, with its card; `metrics.validation` is `gate_metrics` on val."""
    spec = get_device(device)
    batched = kind is BatchedGate
    architecture = BATCHED_GATE_ARCHITECTURE if batched else GATE_ARCHITECTURE
    train, val = table[table["split"] == "train"], table[table["split"] == "val"]
    if len(train) < min_train or len(val) < min_val:
        raise ModelError(f"{kind.WHAT}: need >= {min_train} train and >= {min_val} validation "
                         f"{'batched ' if batched else ''}problems with a cuBLAS row, got {len(train)} and "
                         f"{len(val)}")
    fitted = fit_members(table_features(train, spec, batched=batched), train["log_ratio"].to_numpy(),
                         table_features(val, spec, batched=batched), val["log_ratio"].to_numpy(),
                         architecture, seed=seed, epochs=epochs, check_every=check_every)
    card = _card(kind.STEM, spec, architecture, fitted, table,
                 _gate_hyperparameters(seed, epochs, check_every), _fit_metrics(train, val, fitted),
                 feature_names=kind.FEATURE_NAMES)
    net = kind(spec, fitted.net, card)
    card.metrics["validation"] = gate_metrics(net, val)
    return net


def _gate_hyperparameters(seed: int, epochs: int, check_every: int) -> dict[str, Any]:
    return {"seed": seed, "members": GATE_MEMBERS, "epochs": epochs, "check_every": check_every, "lr": 1e-2,
            "weight_decay": 1e-2}


def _fit_metrics(train: pd.DataFrame, val: pd.DataFrame, fitted: FittedProblemNet) -> dict[str, Any]:
    members = {"member_best_epochs": list(fitted.member_best_epochs)} if fitted.member_best_epochs else {}
    return {"train_problems": len(train), "val_problems": len(val), "best_epoch": fitted.best_epoch,
            **members, "val_rmse_log_ratio": fitted.val_rmse}


def fit_aten(train: pd.DataFrame, val: pd.DataFrame, device: DeviceSpec | str, *, seed: int = 0,
             epochs: int = 1500) -> AtenHead:
    """Fit on problem tables (m, n, k, dtype, aten_ms): `train` to fit, `val` to pick the epoch.

    Raises:
        ModelError: fewer than 10 train or 5 validation problems with a cuBLAS time.
    """
    spec = get_device(device)
    if len(train) < 10 or len(val) < 5:
        raise ModelError(f"cuBLAS time head: need >= 10 train and >= 5 validation problems with a cuBLAS "
                         f"row, got {len(train)} and {len(val)}")
    fitted = fit_problem_net(table_features(train, spec), np.log(train["aten_ms"].to_numpy()),
                             table_features(val, spec), np.log(val["aten_ms"].to_numpy()), ATEN_ARCHITECTURE,
                             seed=seed, epochs=epochs)
    card = _card(ATEN_STEM, spec, ATEN_ARCHITECTURE, fitted, train,
                 {"seed": seed, "epochs": epochs, "lr": 1e-2, "weight_decay": 1e-2},
                 {"train_problems": len(train), "val_problems": len(val), "best_epoch": fitted.best_epoch,
                  "val_rmse_log_ms": fitted.val_rmse})
    return AtenHead(spec, fitted.net, card)


def problem_net_checkpoint(net: ProblemNet) -> Checkpoint:
    """The checkpoint of a cuBLAS head or gate's network, for model/folder_write.py to write with the
    rest of its folder."""
    return net.STEM, net.net.state_dict(), net.card


def problem_net_checkpoints(net: ProblemNet | None) -> list[Checkpoint]:
    """The checkpoints of a cuBLAS head, or of a gate with its batched network where it has one."""
    if net is None:
        return []
    batched = getattr(net, "batched", None)
    return [problem_net_checkpoint(net)] + ([problem_net_checkpoint(batched)] if batched is not None else [])


def gate_record(gate: CublasGate, folder: str | Path) -> dict[str, str]:
    """What a model card's hyperparameters say of a gate taken from another folder (train --gate,
    average-models): where it came from and which it is."""
    return {"dir": str(folder), "digest": gate.digest()}


def save_problem_net(net: ProblemNet, model_dir: str | Path,
                     cards: Sequence[tuple[str, ModelCard]] = ()) -> Path:
    """Replace the checkpoint (`<STEM>.pt`, `<STEM>.json`) in the model folder `model_dir`, keeping
    its other checkpoints, and rewrite the cards in `cards` (stem, card) of kept ones in the same
    step; the folder is written whole (model/folder_write.py).

    Raises:
        ModelError: the folder cannot be written.
    """
    # A gate replaces its batched network too: one it was fitted without is not kept beside it.
    replaced = {net.STEM, BATCHED_GATE_STEM} if isinstance(net, CublasGate) else {net.STEM}
    others = tuple(stem for stem in MODEL_STEMS if stem not in replaced)
    return write_model_folder(model_dir, problem_net_checkpoints(net), keep=others, cards=cards)


def gate_metrics(gate: CublasGate | BatchedGate, table: pd.DataFrame,
                 margins: Sequence[float] = GATE_MARGINS) -> dict[str, Any]:
    """How the gate decides on the problems of `table` (rows from `problem_ratios`), per margin.

    gated: fraction of problems where Triton is skipped; wrongly_gated: of those, how many had a Triton
    config faster than cuBLAS; loss_*: measured cuBLAS / best-of-(cuBLAS, Triton oracle) over the gated
    problems (1.0 = nothing lost).
    """
    problems = problems_of(table)
    predicted = gate.predict_log_ratio(problems)
    truth = table["log_ratio"].to_numpy()
    out: dict[str, Any] = {"problems": len(problems),
                           "sign_accuracy": float(np.mean((predicted < 0) == (truth < 0))),
                           "rmse_log_ratio": float(np.sqrt(np.mean((predicted - truth) ** 2))),
                           "margins": {}}
    for margin in margins:
        gated = skips_triton_at(predicted, margin)
        loss = np.exp(np.maximum(truth[gated], 0.0))
        out["margins"][f"{margin:g}"] = {
            "gated": float(gated.mean()), "wrongly_gated": int((truth[gated] > 0).sum()),
            "loss_geomean": float(np.exp(np.mean(np.log(loss)))) if gated.any() else 1.0,
            "loss_worst": float(loss.max()) if gated.any() else 1.0,
        }
    return out


# How both networks err per operand layout, on the frozen held-out problems (splits.EVAL_SPLITS: never
# trained on) of every layout in the data: cuBLAS picks other kernels for "nt" and "tn", and the Triton
# oracle moves too. aten_rmse_log_ms: RMSE of log(predicted / measured cuBLAS ms); gate_sign_accuracy:
# share of problems whose predicted sign of log(cuBLAS / Triton oracle) is the measured one;
# gate_rmse_log_ratio: RMSE of that prediction.

def cublas_errors_by_layout(frame: pd.DataFrame, head: AtenHead | None,
                            gate: CublasGate | None) -> dict[str, dict[str, Any]]:
    """{layout: {problems, aten_rmse_log_ms?, gate_sign_accuracy?, gate_rmse_log_ratio?}} on the
    held-out single GEMMs of `frame` (a dataset frame) with a cuBLAS and a Triton time."""
    masks = splits.split_masks(frame)
    held_out = np.logical_or.reduce([np.asarray(masks[name]) for name in splits.EVAL_SPLITS])
    rows = frame[held_out & (frame["batch"] == 1).to_numpy()]
    table = problem_ratios(rows)
    aten = rows[(rows["backend"] == "aten") & np.isfinite(rows["runtime_ms"])]
    table["aten_ms"] = aten.groupby("problem_id")["runtime_ms"].min().reindex(table.index)
    table["layout"] = rows.groupby("problem_id")["layout"].first().reindex(table.index).astype(str)
    out: dict[str, dict[str, Any]] = {}
    for layout, part in table.groupby("layout", sort=True):
        problems = problems_of(part)
        entry: dict[str, Any] = {"problems": len(part)}
        if head is not None:
            supported = [head.supports(p) for p in problems]
            chosen = [p for p, ok in zip(problems, supported) if ok]
            error = np.log(head.predict_ms(chosen)) - np.log(part["aten_ms"].to_numpy()[supported])
            entry["aten_rmse_log_ms"] = _rmse(error)
        if gate is not None:
            predicted, truth = gate.predict_log_ratio(problems), part["log_ratio"].to_numpy()
            entry["gate_sign_accuracy"] = float(np.mean((predicted < 0) == (truth < 0)))
            entry["gate_rmse_log_ratio"] = _rmse(predicted - truth)
        out[str(layout)] = entry
    return out


def _rmse(error: np.ndarray) -> float | None:
    return float(np.sqrt(np.mean(error ** 2))) if error.size else None
