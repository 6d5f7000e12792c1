"""Train the MLP performance model on a benchmark dataset.

The dataset's fixed `split` column decides everything: the model fits the "train" problems, the
epoch to keep (and, with objective "both", the objective) is chosen by the top-k score on "val",
and "test" is never read here. Rows that failed to run, non-finite runtimes and the aten (cuBLAS)
rows are not Triton configs with a runtime and are left out of the regression target.

Objectives:
  mse   mean squared error of log runtime over random minibatches of rows.
  rank  batches of whole problems (a fixed number of configs sampled from each): the same MSE
        plus a listwise softmax cross-entropy (ListNet) between the softmax of -log runtime / tau
        of the measurements and of the predictions, so the ordering of the fast configs of a
        problem weighs more than the absolute level of slow ones.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from kernel_select.offline.data import dataset, splits
from kernel_select.model.cublas import GATE_STEM, AtenHead, CublasGate
from kernel_select.model.folders import gate_in
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION
from kernel_select.device import DeviceSpec, get_device, key_for_name, serves_anyway
from kernel_select.errors import ModelError, OptionError
from kernel_select.model.card import GpuIdentity, ModelCard, training_versions, utc_now
from kernel_select.model.checkpoint import read_card, retrain_hint
from kernel_select.model.folder_write import check_model_folder, write_model_folder
from kernel_select.model.mlp import STEM, AveragedRuntimeNet, MLPModel, RuntimeNet, architecture
from kernel_select.offline.training.cublas_fit import (
    cublas_errors_by_layout,
    fit_aten,
    fit_batched_gate,
    fit_gate,
    gate_record,
    problem_net_checkpoints,
    save_problem_net,
)
from kernel_select.offline.training.features import featurize_frame
from kernel_select.offline.training.file_weights import file_factors, problem_files, row_weights
from kernel_select.offline.training.training_data import (
    DEFAULT_CAP, aten_problems, domain_of, layouts_for, provenance, training_rows,
)
from kernel_select.offline.training.auto_refit import refit_auto
from kernel_select.offline.training.domain_claim import card_claiming
from kernel_select.offline.training.fit_loop import (  # noqa: F401 - MLPHParams, TimeLimit: re-exported
    VAL_KS,
    MLPHParams,
    Split,
    TimeLimit,
    fit,
    make_split,
    standardize,
    validate,
)
from kernel_select.offline.training.warm_start import WarmStart, load_warm_start

log = logging.getLogger(__name__)

Objective = Literal["mse", "rank"]
OBJECTIVES: tuple[str, ...] = ("mse", "rank")
MAX_MEMBERS = 8  # the card's limit: each member adds its forward pass to every estimate()




@dataclass
class TrainResult:
    """What `train` produced: the saved model, where, and how the objectives compared on "val"."""

    model: MLPModel
    out_dir: Path
    objective: str  # the objective of the kept model
    metrics: dict[str, Any]  # objective -> validation metrics
    seconds: float






def train(data_path: str | Path | Sequence[str | Path], out_dir: str | Path, *, device: DeviceSpec | str,
          seed: int = 0, epochs: int | None = None, objective: str = "both",
          hparams: MLPHParams | None = None,
          feature_version: int = FEATURE_VERSION, cap: int = DEFAULT_CAP,
          progress: bool = True, init: str | Path | WarmStart | None = None,
          time_limit: TimeLimit | None = None, weights: Mapping[str, float] | None = None,
          claim_start_domain: bool = False, gate_from: str | Path | None = None) -> TrainResult:
    """Fit the MLP on the trainable problems of the dataset file(s) and save it to `out_dir`,
    with the cuBLAS time head, the `topk="auto"` rule, and the cuBLAS gate.

    Args:
        data_path: one dataset file, several, or glob patterns (read as one, see dataset.read_many).
        objective: "mse", "rank", or "both" (train each, keep the better on validation).
        epochs: overrides `hparams.epochs`.
        feature_version: one of `model.features.FEATURE_SETS` (5 adds the batch of batched GEMMs).
        cap: configs per problem (every contender within 1.5x of the oracle, then a sample).
        init: a saved MLP directory to fine-tune (warm_start.py): member i starts from its member i,
            with its standardization; the saved weights compete as "epoch 0" on validation. A
            WarmStart already loaded (load_warm_start) is used as it is.
        time_limit: bound the networks' training in wall time (TimeLimit); the card's metrics say
            how many epochs each ran. The cuBLAS head and gate after them are not bounded.
        weights: {pattern: factor}: the 'train' problems read from the dataset files a pattern (a path
            or glob) names weigh `factor` times the others' in the MLP's loss, in either objective
            (file_weights.py); the card records each weighted file's factor and train problems.
        claim_start_domain: with `init`, the card also claims the start's dtypes, layouts and domain, per
            stratum the larger of the two counts (domain_claim.py, overlapping): a fine-tune
            of this GPU's own model on its files again keeps in its domain what the start knew from
            rows these files lack (the H200 model's strata claimed from the H100 model's).
        gate_from: a model folder whose cuBLAS gate is written with the model instead of fitting one
            (one that scored better than a refit); the card records where it came from.
    Raises:
        DatasetError: a file is unreadable, or a split has no usable rows for `device`.
        OptionError: bad epochs, objective, feature version, cap or weights; claim_start_domain without
            `init`, or with a start that would not serve `device` (device.serves_anyway).
        ModelError: `gate_from` holds no cuBLAS gate for `device`'s architecture.
    """
    started = time.perf_counter()
    spec = get_device(device)
    hparams = hparams or MLPHParams()
    if epochs is not None:
        hparams = dataclasses.replace(hparams, epochs=epochs)
    _check_options(hparams, objective, feature_version, cap)
    paths = dataset.expand_paths(data_path)
    factors = file_factors(paths, weights)  # a pattern naming no file fails before any work
    check_model_folder(out_dir)  # before any work: a folder that cannot be written costs nothing
    warm = init if isinstance(init, WarmStart) or init is None else load_warm_start(
        init, spec, feature_version=feature_version, hidden_widths=hparams.hidden_widths,
        members=hparams.members)
    start_card = _start_card(warm, spec) if claim_start_domain else None
    kept_gate = _gate_from(gate_from, spec) if gate_from is not None else None

    frame, source = dataset.read_many_with_sources(paths)
    origin = problem_files(frame, source) if factors else None
    frame = dataset.modelled_layout_rows(frame, layouts=layouts_for(feature_version))
    rows, aten = training_rows(frame, spec, paths, cap, seed, layouts_for(feature_version),
                               batched=feature_version >= 5)
    per_row, weighting = row_weights(rows, origin, paths, factors) if origin is not None else (None, None)
    names = FEATURE_SETS[feature_version]
    standardized, mean, std = standardize(featurize_frame(rows, spec, feature_version),
                                           (rows["split"] == "train").to_numpy(), warm)
    # only the train split is weighted: val chooses the epoch and the objective as it always did
    splits_ = {"train": make_split(rows, standardized, "train", per_row),
               "val": make_split(rows, standardized, "val")}

    runs: dict[str, tuple[RuntimeNet, dict[str, Any]]] = {}
    objectives = list(OBJECTIVES) if objective == "both" else [objective]
    for i, name in enumerate(objectives):
        fits_left = len(objectives) - i + hparams.members - 1
        runs[name] = fit(name, splits_["train"], splits_["val"], hparams, seed, progress,
                          start=warm.members[0] if warm else None, limit=time_limit, fits_left=fits_left)
    best = max(runs, key=lambda name: runs[name][1]["selection_score"])
    net, member_metrics = _train_members(runs[best][0], best, splits_, hparams, seed, progress, warm,
                                         time_limit)

    metrics: dict[str, Any] = {"selected_objective": best, "val": {name: m for name, (_, m) in runs.items()},
                               **member_metrics}
    head = _fit_aten_head(rows, aten, spec, seed, metrics)
    if kept_gate is None:
        metrics["cublas_gate"], gate = _fit_gate_or_none(frame, spec, seed, paths)
    else:
        metrics["cublas_gate"], gate = kept_gate.card.metrics.get("validation", {}), kept_gate
    metrics["cublas_by_layout"] = cublas_errors_by_layout(frame, head, gate)
    metrics["train_seconds"] = round(time.perf_counter() - started, 1)
    card = ModelCard(
        model="mlp", device=spec.key, gpu=GpuIdentity.of(spec), feature_version=feature_version,
        feature_names=list(names),
        feature_mean=mean.tolist(), feature_std=std.tolist(), kernel_overhead_ms=net.kernel_overhead_ms,
        architecture=architecture(len(names), hparams.hidden_widths, hparams.members),
        dtypes=sorted(rows["dtype"].unique()), layouts=sorted(rows["layout"].astype(str).unique()),
        domain=domain_of(rows),
        hyperparameters={**dataclasses.asdict(hparams), "seed": seed, "objective": objective,
                         "cap_rows_per_problem": cap, **({"init": warm.record} if warm else {}),
                         **({"weights": weighting} if weighting else {}),
                         **({"gate": gate_record(kept_gate, gate_from)} if kept_gate else {})},
        data=provenance(paths, rows), metrics=metrics, trained_at=utc_now(), versions=training_versions())
    if start_card is not None:
        card = card_claiming(card, start_card, overlapping=True)
    model = MLPModel(spec, net, card, head)
    refit_auto(model, frame)  # the rule, on every val row as `evaluate` scores them (auto_refit.py)
    attach_held_out(model, paths, frame, gate)
    save_model(model, out_dir, gate)
    seconds = time.perf_counter() - started
    log.info("trained %s model (%s objective) in %.0f s -> %s", spec.key, best, seconds, out_dir)
    return TrainResult(model=model, out_dir=Path(out_dir), objective=best, metrics=metrics, seconds=seconds)


def _start_card(warm: WarmStart | None, spec: DeviceSpec) -> ModelCard:
    """The card whose domain `claim_start_domain` claims; OptionError where there is none to claim."""
    if warm is None or warm.card is None:
        raise OptionError("claiming the start's domain needs a start: pass init (train --init DIR)")
    if not serves_anyway(warm.card.device, spec):
        raise OptionError(f"the start model is the {warm.card.device}'s, which does not serve {spec.key}: "
                          f"its domain says nothing of this GPU")
    return warm.card


def _gate_from(folder: str | Path, spec: DeviceSpec) -> CublasGate:
    gate = gate_in(folder, spec)
    if gate is None:
        raise ModelError(f"{folder}: no cuBLAS gate here ({GATE_STEM}.pt) to write with the model")
    return gate


def save_model(model: MLPModel, out_dir: str | Path, gate: CublasGate | None = None) -> Path:
    """Replace the model folder `out_dir` (created if needed) with the MLP checkpoint (`mlp.pt`,
    `mlp.json`, the card with the learned overhead), its cuBLAS time head and `gate`, written whole
    (model/folder_write.py): a head or gate this training did not produce is not kept from the old
    folder, so the folder never mixes two trainings.

    Raises:
        ModelError: the folder cannot be written; once the model is written, naming where it is kept.
    """
    model.card = model.card.model_copy(update={"kernel_overhead_ms": model.net.kernel_overhead_ms})
    checkpoints = [(STEM, model.net.state_dict(), model.card)]
    checkpoints += problem_net_checkpoints(model.aten) + problem_net_checkpoints(gate)
    return write_model_folder(out_dir, checkpoints)


def _train_members(first: RuntimeNet, objective: str, splits_: dict[str, Split], hp: MLPHParams, seed: int,
                   progress: bool, warm: WarmStart | None = None, limit: TimeLimit | None = None
                   ) -> tuple[RuntimeNet | AveragedRuntimeNet, dict[str, Any]]:
    """With `hp.members` > 1: train the other members (objective of the first, seeds seed+1, ...;
    from the warm start's member i, if any) and return their average, with the validation figures
    of each member and of the average."""
    if hp.members == 1:
        return first, {}
    members = [first] + [fit(objective, splits_["train"], splits_["val"], hp, seed + i, progress,
                              start=warm.members[i] if warm else None, limit=limit,
                              fits_left=hp.members - i)[0]
                         for i in range(1, hp.members)]
    net = AveragedRuntimeNet(members).eval()
    return net, {"members_val": [validate(m, splits_["val"])["topk"] for m in members],
                 "averaged_val": validate(net, splits_["val"])}




def attach_held_out(model: MLPModel, paths: Sequence[Path], frame: pd.DataFrame | None = None,
                    gate: CublasGate | None = None) -> None:
    """Score `model` on the frozen `test` and `family` splits and keep the figures in its card
    (`metrics.held_out`: top-k, with cuBLAS, calibration, auto, strata, worst problems). `gate`: the
    cuBLAS gate written beside it, which the "with cuBLAS" figures apply (None: the one serving the
    device)."""
    from kernel_select.offline.training.evaluate import evaluate_splits
    from kernel_select.offline.training.model_extras import held_out_summary

    report = evaluate_splits(paths, [model], device=model.device, frame=frame, gate=gate)
    model.card.metrics["held_out"] = held_out_summary(report, model.name)


def _fit_aten_head(rows: pd.DataFrame, aten: pd.Series, spec: DeviceSpec, seed: int,
                   metrics: dict[str, Any]) -> AtenHead | None:
    """The cuBLAS time head on the same problems, or None (noted in `metrics`) without enough cuBLAS rows."""
    problems = aten_problems(rows, aten)
    try:
        head = fit_aten(problems[problems["split"] == "train"], problems[problems["split"] == "val"], spec,
                        seed=seed)
    except ModelError as exc:
        log.warning("no cuBLAS time head trained: %s", exc)
        metrics["aten_head"] = {"skipped": str(exc)}
        return None
    metrics["aten_head"] = head.card.metrics
    return head


def _fit_gate_or_none(frame: pd.DataFrame, spec: DeviceSpec, seed: int,
                      paths: Sequence[Path]) -> tuple[dict[str, Any], CublasGate | None]:
    """The gate's validation figures and the gate, or why none was trained and None (the folder is
    then written without one: an old gate beside a new MLP would mix two trainings)."""
    try:
        gate = fit_gate_of(frame, spec, seed=seed, data_path=paths[0] if len(paths) == 1 else None)
        return gate.card.metrics["validation"], gate
    except ModelError as exc:  # too few problems with a cuBLAS row: the MLP is still worth keeping
        log.warning("no cuBLAS gate trained (%s); the model folder is written without one", exc)
        return {"skipped": str(exc)}, None


def _check_options(hparams: MLPHParams, objective: str, feature_version: int, cap: int) -> None:
    """Refuse bad options before anything is read or written: zero epochs would save an untrained model."""
    if isinstance(hparams.epochs, bool) or not isinstance(hparams.epochs, int) or hparams.epochs < 1:
        raise OptionError(f"epochs: expected a whole number >= 1, got {hparams.epochs!r}")
    if objective not in (*OBJECTIVES, "both"):
        raise OptionError(f"objective: expected one of {OBJECTIVES + ('both',)}, got {objective!r}")
    if feature_version not in FEATURE_SETS:
        raise OptionError(f"feature version: expected one of {sorted(FEATURE_SETS)}, got {feature_version!r}")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise OptionError(f"cap: expected configs per problem >= 1, got {cap!r}")
    members = hparams.members
    if isinstance(members, bool) or not isinstance(members, int) or not 1 <= members <= MAX_MEMBERS:
        raise OptionError(f"members: expected a whole number from 1 to {MAX_MEMBERS}, got {members!r}")


def train_gate(frame: pd.DataFrame, spec: DeviceSpec, out_dir: str | Path, *, seed: int = 0,
               data_path: Path | None = None) -> CublasGate:
    """Fit the cuBLAS gate on the train/val problems of `spec` (all layouts of `frame`) and write it
    into the model folder `out_dir`, keeping the MLP and cuBLAS time head there (written whole:
    model/folder_write.py). An MLP there keeps its weights; its card is rewritten in the same step
    to name the new gate (`hyperparameters.gate`, `metrics.cublas_gate`), as `train --gate` records
    it, so the card never describes a gate the folder no longer holds. The folder and that card are
    checked before the fit.

    Raises:
        ModelError: too few problems to fit, the folder cannot be written, or its MLP card cannot be
            read.
    """
    check_model_folder(out_dir)
    card_path = Path(out_dir) / f"{STEM}.json"
    mlp_card = read_card(card_path, retrain_hint(out_dir, spec.key)) if card_path.is_file() else None
    gate = fit_gate_of(frame, spec, seed=seed, data_path=data_path)
    cards = []
    if mlp_card is not None:
        mlp_card.hyperparameters["gate"] = gate_record(gate, out_dir)
        mlp_card.metrics["cublas_gate"] = gate.card.metrics["validation"]
        cards.append((STEM, mlp_card))
    save_problem_net(gate, out_dir, cards=cards)
    log.info("trained the %s cuBLAS gate (validation: %s) -> %s", spec.key, gate.card.metrics["validation"],
             out_dir)
    return gate


def fit_gate_of(frame: pd.DataFrame, spec: DeviceSpec, *, seed: int = 0, data_path: Path | None = None
                ) -> CublasGate:
    """The cuBLAS gate fitted on the train/val problems of `spec` (all layouts of `frame`), not saved:
    its network on the single GEMMs and, where there are enough (cublas_fit.MIN_BATCHED_TRAIN), its
    batched network on the batched ones, whose validation figures the gate's card holds too
    (`metrics.validation.batched`)."""
    on_device = (frame["device_name"].map(lambda name: key_for_name(str(name)) == spec.key)
                 & (frame["sm_count"] == spec.sm_count))
    masks = splits.split_masks(frame)
    trainable = masks["train"] | masks["val"]  # never the frozen test or family problems
    gate = fit_gate(frame[on_device & trainable & (frame["batch"] == 1)], spec, seed=seed)
    try:
        gate.batched = fit_batched_gate(frame[on_device & trainable & (frame["batch"] > 1)], spec, seed=seed)
        gate.card.metrics["validation"]["batched"] = gate.batched.card.metrics["validation"]
    except ModelError as exc:  # too few: Inductor keeps benchmarking cuBLAS beside a batched GEMM's picks
        log.info("no cuBLAS gate for batched GEMMs (%s)", exc)
    for net in (gate, gate.batched):
        if net is not None and data_path is not None:
            net.card.hyperparameters["data_file"] = data_path.name
    return gate
