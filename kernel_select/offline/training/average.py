"""Average several trained MLPs into one model: every member of each becomes a member of the result.

Averaging helps most where the models differ most. Two members of one training run (seeds 0 and 1)
start apart but see the same epochs; a model fine-tuned from the previous one and a model trained from
random weights on the same rows make different mistakes, and the average of their log-ms ranks shapes
no dataset holds better than either (docs/results.md, the learner comparison). Training both in one run
is not possible (a run's members share their start), so the two are trained apart and averaged here.

A model's first layer only means something for inputs standardized its own way, and two runs keep
different statistics (a fine-tune keeps its parent's). The result keeps the first model's, and each
other member's first layer is rewritten to read them:

    z_own = (x - mean_own) / std_own = z_first * (std_first / std_own) + (mean_first - mean_own) / std_own

so W z_own + b = (W * std_first / std_own) z_first + (b + W (mean_first - mean_own) / std_own): the same
function of x, exactly up to float32 rounding. Nothing is retrained. The averaged model's `topk="auto"`
rule is chosen again on `val` (its members' spread is not either model's), and its held-out figures
are recomputed, as `train` does.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from kernel_select.device import DeviceSpec, serves_anyway
from kernel_select.errors import ModelError, OptionError
from kernel_select.model.card import MAX_MEMBERS, utc_now
from kernel_select.model.cublas import GATE_STEM, CublasGate
from kernel_select.model.folder_write import check_model_folder
from kernel_select.model.folders import gate_in
from kernel_select.model.mlp import AveragedRuntimeNet, MLPModel, RuntimeNet, architecture
from kernel_select.offline.data import dataset
from kernel_select.offline.training.auto_refit import refit_auto
from kernel_select.offline.training.domain_claim import card_claiming
from kernel_select.offline.training.cublas_fit import cublas_errors_by_layout, gate_record
from kernel_select.offline.training.training_data import file_hashes

log = logging.getLogger(__name__)


def average_models(models: Sequence[MLPModel], sources: Sequence[str] | None = None, *,
                   fine_tuned_from: bool = False) -> MLPModel:
    """One MLPModel whose members are all the members of `models`, standardized as the first one is,
    with the first one's card, cuBLAS time head and device (module docstring).

    Args:
        sources: where each model was loaded from, for the card's record (default: "model i").
        fine_tuned_from: the other models are those the first was fine-tuned from, trained on other
            rows and perhaps for another GPU of its architecture; the card keeps the first's device and
            data record.

    Raises:
        OptionError: fewer than two models, more members than a card may hold, or models that differ in
            features or widths, or (without `fine_tuned_from`) in device or the data they were trained on.
    """
    if len(models) < 2:
        raise OptionError(f"averaging needs at least two models, got {len(models)}")
    sources = list(sources) if sources is not None else [f"model {i}" for i in range(len(models))]
    first = models[0]
    _check_alike(models, sources, same_data=not fine_tuned_from)
    mean = np.asarray(first.card.feature_mean, dtype=np.float64)
    std = np.asarray(first.card.feature_std, dtype=np.float64)
    members = [_restandardized(member, model, mean, std) for model in models for member in _members(model)]
    if len(members) > MAX_MEMBERS:
        raise OptionError(f"averaging {len(models)} models gives {len(members)} members; a model holds at "
                          f"most {MAX_MEMBERS}")
    net = AveragedRuntimeNet(members).eval()
    card = first.card.model_copy(deep=True, update={
        "architecture": architecture(first.card.architecture.inputs, first.card.hidden_widths, len(members)),
        "kernel_overhead_ms": net.kernel_overhead_ms,
        "hyperparameters": _averaged_hyperparameters(models, sources),
        "metrics": _averaged_metrics(models),
        "trained_at": utc_now(),
    })
    return MLPModel(first.device, net, card, first.aten)


def average_dirs(model_dirs: Sequence[str | Path], data_path: str | Path | Sequence[str | Path],
                 out_dir: str | Path, device: DeviceSpec | str | None = None, *,
                 gate_dir: str | Path | None = None) -> MLPModel:
    """Average the MLPs saved in `model_dirs` (`average_models`), choose the result's `topk="auto"`
    rule on the `val` problems of `data_path` (the data they were trained on), score it on the held-out
    splits, and write it to `out_dir` with the first folder's cuBLAS time head and the cuBLAS gate of
    `gate_dir` (default: the first folder's; the gate reads no MLP output, so another training's gate
    serves as well). The card's cuBLAS figures are those of the head and gate written.

    Raises:
        ModelError: a folder holds no loadable MLP, `gate_dir` no gate, or `out_dir` cannot be written.
        OptionError: the models cannot be averaged (`average_models`).
        DatasetError: the data cannot be read or has no `val` problems.
    """
    check_model_folder(out_dir)  # before any work
    models = [MLPModel.load(path, device, allow_same_architecture=True) for path in model_dirs]
    averaged = average_models(models, [str(path) for path in model_dirs])
    gate_dir = Path(model_dirs[0] if gate_dir is None else gate_dir)
    gate = gate_in(gate_dir, averaged.device)
    if gate is None and gate_dir != Path(model_dirs[0]):
        raise ModelError(f"{gate_dir}: no cuBLAS gate here ({GATE_STEM}.pt) to write with the averaged model")
    return _scored_and_saved(averaged, data_path, out_dir, gate, gate_dir)


def average_with_start(fine_tuned: MLPModel, folder: str | Path, start: MLPModel, start_source: str,
                       data_path: str | Path | Sequence[str | Path], *, claim_start_domain: bool,
                       out_dir: str | Path | None = None) -> MLPModel:
    """calibrate's model (module docstring): `fine_tuned`, saved in `folder` by `train` on `data_path`,
    averaged with the members of `start`, the model it was fine-tuned from (loaded from
    `start_source`), its `topk="auto"` rule and held-out figures computed again on `data_path`, and
    written over `folder` (or to `out_dir`) with the cuBLAS time head and gate saved in `folder`.
    `claim_start_domain`: the start would serve this GPU without it (`with_start_domain`).

    Raises:
        OptionError: models of different features or widths.
        ModelError: the folder cannot be written.
    """
    averaged = average_models([fine_tuned, start], [str(folder), start_source], fine_tuned_from=True)
    if claim_start_domain:
        averaged = with_start_domain(averaged, start)
    gate = gate_in(Path(folder), averaged.device)
    return _scored_and_saved(averaged, data_path, folder if out_dir is None else out_dir, gate, Path(folder))


def average_start_dirs(fine_tuned_dir: str | Path, start_dir: str | Path,
                       data_path: str | Path | Sequence[str | Path], out_dir: str | Path,
                       device: DeviceSpec | str | None = None) -> MLPModel:
    """`average_with_start` of the models saved in two folders: the one fine-tuned on `data_path`, and
    the one it started from (trained on other rows, perhaps for another GPU of its architecture),
    whose domain the result claims where that model would serve the GPU anyway (`serves_anyway`)."""
    check_model_folder(out_dir)  # before any work
    fine_tuned = MLPModel.load(fine_tuned_dir, device, allow_same_architecture=True)
    start = MLPModel.load(start_dir, fine_tuned.device, allow_same_architecture=True)
    claim = serves_anyway(start.card.device, fine_tuned.device)
    return average_with_start(fine_tuned, fine_tuned_dir, start, str(start_dir), data_path,
                              claim_start_domain=claim, out_dir=out_dir)


def with_start_domain(model: MLPModel, start: MLPModel) -> MLPModel:
    """`model` with a card that also claims `start`'s dtypes, layouts and domain (module docstring):
    the training problems of a stratum are both cards' together, each dimension's range spans both."""
    card = card_claiming(model.card, start.card)
    return MLPModel(model.device, model.net, card, model.aten)


def _scored_and_saved(averaged: MLPModel, data_path: str | Path | Sequence[str | Path], out_dir: str | Path,
                      gate: CublasGate | None, gate_dir: Path) -> MLPModel:
    """Choose the averaged model's `topk="auto"` rule on the `val` problems of `data_path`, score it on
    its held-out splits, record the cuBLAS figures and write it with `gate` to `out_dir`."""
    from kernel_select.offline.training.train import attach_held_out, save_model

    paths = dataset.expand_paths(data_path)
    _check_trained_on(averaged, paths)
    frame = dataset.read_many(paths)
    refit_auto(averaged, frame)
    attach_held_out(averaged, paths, frame, gate)
    _record_cublas(averaged, gate, gate_dir, frame)
    save_model(averaged, out_dir, gate)
    log.info("averaged %d members -> %s", averaged.card.architecture.members, out_dir)
    return averaged


def _check_trained_on(model: MLPModel, paths: Sequence[Path]) -> None:
    """Refuse data other than the files the models were trained on: the auto rule is chosen on their
    `val` problems and the card keeps their record."""
    recorded = model.card.data
    _, combined = file_hashes(paths)
    if recorded is not None and combined != recorded.sha256:
        raise OptionError(f"--data: the models were trained on {recorded.file}; these files are not those "
                          "(another file or content): pass the files they were trained on")


def _members(model: MLPModel) -> list[RuntimeNet]:
    net = model.net
    return list(net.members) if isinstance(net, AveragedRuntimeNet) else [net]


def _restandardized(member: RuntimeNet, model: MLPModel, mean: np.ndarray, std: np.ndarray) -> RuntimeNet:
    """A copy of `member` of `model` that reads features standardized with `mean` and `std`."""
    own_mean = np.asarray(model.card.feature_mean, dtype=np.float64)
    own_std = np.asarray(model.card.feature_std, dtype=np.float64)
    copied = copy.deepcopy(member).eval()
    first = copied.body[0]
    with torch.no_grad():
        weight = first.weight.double()
        shift = torch.from_numpy((mean - own_mean) / own_std)
        first.bias.copy_(first.bias.double() + weight @ shift)
        first.weight.copy_(weight * torch.from_numpy(std / own_std))
    return copied


def _check_alike(models: Sequence[MLPModel], sources: Sequence[str], *, same_data: bool = True) -> None:
    """Refuse models that do not describe the same thing the same way: the averaged card keeps one
    device, feature list, width, domain and data record for all of them (with `same_data` False, a
    model and those it was fine-tuned from: features and widths alike)."""
    first = models[0].card

    def shape(card: Any) -> dict[str, Any]:
        alike = {"feature version": card.feature_version, "features": card.feature_names,
                 "hidden widths": list(card.hidden_widths)}
        if same_data:
            alike.update({"device": card.device, "data": card.data.sha256 if card.data is not None else None})
        return alike

    expected = shape(first)
    for model, source in zip(models[1:], sources[1:]):
        differing = [key for key, value in shape(model.card).items() if value != expected[key]]
        if differing:
            raise OptionError(f"{source} differs from {sources[0]} in {', '.join(differing)}: only models of "
                              "one shape trained on the same data are averaged")
    if same_data and expected["data"] is None:
        raise OptionError(f"{sources[0]}: the card records no training data; only models trained on the "
                          "same recorded data are averaged")


#: Card metrics about the cuBLAS time head and gate, which the averaged folder takes from the first.
CUBLAS_METRICS = ("aten_head", "cublas_gate", "cublas_by_layout")


def _record_cublas(model: MLPModel, gate: CublasGate | None, gate_dir: Path, frame: pd.DataFrame) -> None:
    """The card's figures for the cuBLAS gate written beside `model` (where from, its validation
    figures) and, per layout, for it and the time head on the held-out single GEMMs of `frame`."""
    model.card.hyperparameters.pop("gate", None)  # an averaged first model's record
    if gate is None:
        model.card.metrics["cublas_gate"] = {"skipped": f"no cuBLAS gate in {gate_dir}"}
    else:
        model.card.metrics["cublas_gate"] = gate.card.metrics.get("validation", {})
        model.card.hyperparameters["gate"] = gate_record(gate, gate_dir)
    model.card.metrics["cublas_by_layout"] = cublas_errors_by_layout(frame, model.aten, gate)


def _averaged_metrics(models: Sequence[MLPModel]) -> dict[str, Any]:
    """The first card's cuBLAS figures, and each member's validation top-k where every card has them
    (standardizing members alike changes none of their predictions). The averaged model's own figures,
    `auto_topk_val` and `held_out`, are computed after."""
    first = models[0].card.metrics
    metrics = {key: first[key] for key in CUBLAS_METRICS if key in first}
    members_val = [model.card.metrics.get("members_val") for model in models]
    if all(members_val):
        metrics["members_val"] = [figures for per_model in members_val for figures in per_model]
    return metrics


def _averaged_hyperparameters(models: Sequence[MLPModel], sources: Sequence[str]) -> dict[str, Any]:
    """The averaged card's hyperparameters: the first model's (its widths, its `init` lineage), the
    member count, and what each averaged model was (folder, digest, how it was trained)."""
    first = models[0].card.hyperparameters
    members = sum(len(_members(model)) for model in models)
    return {**first, "members": members,
            "averaged": [{"dir": source, "digest": model.digest(),
                          "hyperparameters": {key: value for key, value in model.card.hyperparameters.items()
                                              if key != "averaged"}}
                         for model, source in zip(models, sources)]}
