"""`kernel-select calibrate`: measure this GPU for a few minutes, train its model, score it, install it.

  1. plan: the compile classes, those where the starting model is least sure first (priority.py),
     and their problems that fit the collection's share of the minutes on this machine's compile
     workers (offline/calibrate/plan.py, sized by harness/cost.py); `--plan-only` stops here
     (preview.py);
  2. collect: the benchmark harness times the plan, bounded by the harness's max_seconds, into
     calibration.parquet in the model folder; problems already there from an earlier run on this
     GPU are skipped (a killed run resumes; training always starts over);
  3. train: the MLP (fine-tuned from the model --from names, or from scratch), the cuBLAS time head
     and the gate where enough cuBLAS rows were measured, on the `train` and `val` problems,
     within the training share of the minutes (train.TimeLimit); a fine-tuned model keeps the
     starting model's members beside its own (training/average.py says why);
  4. score: on the held-out `test` problems, the new model beside the fine-tuned members alone, the
     starting model and Inductor's DEFAULT list (scoring.py);
  5. install: the checkpoints move into <models dir>/<device key>/, which model/folders.py searches
     before the shipped models (install.py), with calibration.json saying what was done.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_select.atomic_write import write_atomic
from kernel_select.device import DeviceSpec
from kernel_select.errors import DatasetError
from kernel_select.offline.calibrate.budget import AFTER_TRAINING_S, DEFAULT_MINUTES, Budget, RunProgress
from kernel_select.offline.calibrate.install import CalibrationFiles, install
from kernel_select.offline.calibrate.priority import RankedClass, ranked_classes
from kernel_select.offline.calibrate.scoring import held_out_scores, lines
from kernel_select.offline.calibrate.start import StartModel, resolve_start

if TYPE_CHECKING:
    from kernel_select.offline.calibrate.plan import CalibrationPlan

log = logging.getLogger(__name__)

#: Peak learning rate when fine-tuning: the H200 model was the H100's fine-tuned at 2e-4 (models/h200).
FINE_TUNE_LR = 2e-4
OBJECTIVE = "rank"  # the shipped models' objective; "both" would train twice as long


@dataclass(frozen=True)
class CalibrateOptions:
    minutes: float = DEFAULT_MINUTES
    start: str = "auto"  # --from: auto, none, a device key or a model folder (start.py)
    models_dir: Path | None = None  # None: kernel_select.resources.user_models_dir()
    workers: int = 0  # compile processes; 0: every core but one
    max_problems: int | None = None  # a quick trial: at most this many problems
    epochs: int | None = None  # None: the training default, within the time limit
    progress: bool = True
    seed: int = 0


#: Collects planned problems: pipeline.run_bench's signature (tests pass a fake GPU).
Collector = Callable[..., Any]


def calibrate(options: CalibrateOptions, spec: DeviceSpec, *,
              collect: Collector | None = None) -> dict[str, Any]:
    """Calibrate GPU `spec` (detect() of the GPU the harness times on) and return the summary that
    calibration.json holds. `collect` replaces the harness (tests).

    Raises:
        OptionError: bad minutes or --from, or minutes that fit no class of problems.
        DatasetError: too few problems measured to train on (re-running resumes the collection).
        ModelError: the model --from names does not load.
    """
    from kernel_select.offline.data import dataset, problem_ids, shapes

    budget = Budget(options.minutes * 60.0)
    root, files = output_folder(options, spec)
    start = resolve_start(options.start, spec, files.folder)  # a bad --from fails before any work
    workers = compile_worker_count(options)
    progress = RunProgress(options.progress)
    try:
        progress.say(f"calibrating {spec.identity} for {options.minutes:g} minutes into {files.folder}; "
                     f"{'fine-tuning ' + start.describe() if start else 'training from scratch'}"
                     f"{_alone_note(start)}")
        ranked = ranked_classes(start, options.seed)
        plan = plan_run(options, spec, ranked, budget, workers)
        files.folder.mkdir(parents=True, exist_ok=True)
        shapes.save(plan.shapes, files.plan)
        done = dataset.completed_problems(files.measurements, spec.name)
        todo = [i for i, s in enumerate(plan.shapes) if problem_ids.id_of(s.problem()) not in done]
        progress.plan(time.perf_counter() - budget.started + _predicted_s(plan.finish_s, todo)
                      + budget.training_s + AFTER_TRAINING_S)
        resumed = len(plan.shapes) - len(todo)
        progress.phase(_plan_line(plan, workers, resumed, len(done), files),
                       _predicted_s(plan.finish_s, todo))
        collected = _collect(plan, todo, files, spec, budget, workers, progress, collect or _harness())
        measured = _measured(files.measurements, spec)
        progress.phase(f"measured {measured['problems']} problems ({collected['line']}); training "
                       f"{'from ' + start.trained_on if start else 'from scratch'} on the train and val "
                       f"problems (a re-run trains from the start)", budget.training_s)
        trained = _train(files, spec, start, budget, options, progress)
        progress.phase("scoring on the held-out problems", AFTER_TRAINING_S)
        models = {"calibrated": trained.model,
                  **({"fine-tuned": trained.fine_tuned} if trained.fine_tuned is not None else {}),
                  **({"start": start.model} if start else {})}
        scores = held_out_scores(files.measurements, spec, models)
        installed = install(files.staging, files.folder)
        summary = _summary(spec, files, start, plan, measured, collected, trained, scores, installed, budget)
        summary["priority"] = [r.record() for r in ranked]
        write_atomic(files.summary, (json.dumps(summary, indent=1) + "\n").encode())
        for line in lines(scores):
            progress.say(line)
        if trained.fine_tuned is not None:  # why the installed model may score below the fine-tuned members
            progress.say(f"calibrated = the fine-tuned members and the {start.trained_on} model's, kept for "
                         "networks' layer shapes; the held-out problems are random shapes like those "
                         "measured, which fine-tuning learns first (the guide's calibrate section)")
        progress.say(f"wrote {files.folder} ({', '.join(installed)}); " + _served(root, spec))
        return summary
    except KeyboardInterrupt:
        progress.say(f"interrupted: the problems measured so far are kept in {files.measurements}; run the "
                     f"same command again to resume (training starts over)")
        raise
    finally:
        progress.close()


def output_folder(options: CalibrateOptions, spec: DeviceSpec) -> tuple[Path, CalibrationFiles]:
    """The models dir calibrate writes into (--out, else the user's) and the files of `spec`'s folder."""
    from kernel_select.resources import user_models_dir

    root = Path(options.models_dir) if options.models_dir is not None else user_models_dir()
    return root, CalibrationFiles(root / spec.key)


def compile_worker_count(options: CalibrateOptions) -> int:
    """--workers, else every core this process may use but one (which launches kernels)."""
    from kernel_select.offline.harness.bench import compile_workers

    return options.workers or compile_workers(reserved=1)


def plan_run(options: CalibrateOptions, spec: DeviceSpec, ranked: list[RankedClass], budget: Budget,
             workers: int) -> CalibrationPlan:
    """The plan of a run: the classes in `ranked`'s order, sized to the collection's share of the
    minutes on `workers` compile processes.

    Raises:
        OptionError: the minutes fit no class.
    """
    from kernel_select.offline.calibrate.plan import plan_calibration

    return plan_calibration(spec, budget.collection_s, workers, classes=[r.compile_class for r in ranked],
                            max_problems=options.max_problems, seed=options.seed)


def _served(root: Path, spec: DeviceSpec) -> str:
    """Whether kernel_select will find the folder written under `root`, and how to make it."""
    from kernel_select.resources import MODELS_DIR_ENV, user_models_dir

    if root.resolve() == user_models_dir().resolve():
        return f"it serves {spec.key} from now on (loaded before any shipped model)"
    return f"set {MODELS_DIR_ENV}={root} for kernel_select to load it"


def _harness() -> Collector:
    from kernel_select.offline.harness.pipeline import run_bench

    return run_bench


def _predicted_s(finish_s: list[float], todo: list[int]) -> float:
    """cost.py's seconds for the problems still to measure: each problem's own share of the plan."""
    return sum(finish_s[i] - (finish_s[i - 1] if i else 0.0) for i in todo)


def _plan_line(plan: Any, workers: int, resumed: int, earlier: int, files: CalibrationFiles) -> str:
    est = plan.estimate
    passed = f" ({len(plan.passed_over)} more did not fit)" if plan.passed_over else ""
    text = (f"plan: {len(plan.shapes)} problems in {len(plan.classes)} compile class(es){passed}, first "
            f"{next(iter(plan.classes))}, {est.keys} kernels, {est.rows} rows; cost.py predicts "
            f"{est.wall_s:.0f} s with {workers} compile workers ({est.rows_per_gpu_minute():,.0f} rows per "
            "GPU-minute)")
    if earlier:
        text += (f"; resuming {files.measurements}: {resumed} of them (and {earlier} problems in all) "
                 f"measured by an earlier run")
    return text


def _collect(plan: Any, todo: list[int], files: CalibrationFiles, spec: DeviceSpec, budget: Budget,
             workers: int, progress: RunProgress, collect: Collector) -> dict[str, Any]:
    """Time the plan's problems still to do, within the collection's deadline."""
    from kernel_select.model.card import utc_now
    from kernel_select.offline.data.dataset import completed_problems
    from kernel_select.offline.data.problem_ids import id_of
    from kernel_select.offline.harness.bench import BenchOptions

    seconds = budget.seconds_until(budget.collection_deadline)
    if not todo or seconds <= 0:
        return {"problems": 0, "rows": 0, "started_at": None, "seconds": 0.0, "rows_per_gpu_minute": 0,
                "stopped_at_bound": bool(todo),
                "line": "nothing left to measure" if not todo else "no time left to measure"}
    problems = [plan.shapes[i].problem() for i in todo]
    share = {p: plan.finish_s[i] - (plan.finish_s[i - 1] if i else 0.0) for p, i in zip(problems, todo)}
    runs_of = {runs[0].problem: runs for runs in plan.planned}
    options = BenchOptions(workers=workers, max_seconds=seconds, order="file", progress=False)
    started_at, started = utc_now(), time.perf_counter()
    collect(problems, files.measurements, spec, options,
            {p: plan.shapes[i].provenance() for p, i in zip(problems, todo)},
            planned=[runs_of[p] for p in problems], on_problem=lambda p: progress.advance(share.get(p, 0.0)))
    wall = time.perf_counter() - started
    done = completed_problems(files.measurements, spec.name)
    new = [p for p in problems if id_of(p) in done]
    rows = sum(len(runs_of[p]) + 1 for p in new)
    rate = 60.0 * rows / max(wall, 1e-9)
    stopped = len(new) < len(problems)
    line = (f"{len(new)} of {len(problems)} timed in {wall:.0f} s, {rows:,} rows, {rate:,.0f} rows per "
            f"GPU-minute{'; stopped at the time bound' if stopped else ''}")
    return {"problems": len(new), "rows": rows, "started_at": started_at, "seconds": round(wall, 1),
            "rows_per_gpu_minute": round(rate), "stopped_at_bound": stopped, "line": line}


def _measured(path: Path, spec: DeviceSpec) -> dict[str, Any]:
    """Problems measured on this GPU per split; refuses data without train and val problems."""
    from kernel_select.offline.data import dataset

    if not path.exists():
        raise DatasetError(f"{path}: nothing measured; give calibrate more minutes and run it again")
    frame = dataset.read(path)
    frame = frame[(frame["device_name"] == spec.name) & (frame["sm_count"] == spec.sm_count)]
    per_split = frame.groupby("split")["problem_id"].nunique().to_dict()
    if not per_split.get("train") or not per_split.get("val"):
        train, val = per_split.get("train", 0), per_split.get("val", 0)
        count = frame["problem_id"].nunique()
        raise DatasetError(f"{path}: {count} problems measured on this GPU, {train} in split train and {val} "
                           "in val; training needs both: run calibrate again (it resumes) or give it more "
                           "minutes")
    return {"problems": int(frame["problem_id"].nunique()), "rows": len(frame),
            "splits": {split: int(n) for split, n in sorted(per_split.items())}}


def _alone_note(start: StartModel | None) -> str:
    if start is None or start.keeps_members():
        return ""
    members = start.model.card.architecture.members
    return (f" (its {members} networks are too many to keep beside {members} fine-tuned ones: the "
            "fine-tuned ones serve alone)")


@dataclass(frozen=True)
class Trained:
    """What calibrate's training made: the model it installs and, where it keeps a start's members
    beside its own, its fine-tuned members alone (scored beside it); train's validation figures."""

    model: Any
    fine_tuned: Any | None  # None: `model` is all there is (from scratch, or a start too large to keep)
    metrics: dict[str, Any]
    seconds: float


def _train(files: CalibrationFiles, spec: DeviceSpec, start: StartModel | None, budget: Budget,
           options: CalibrateOptions, progress: RunProgress) -> Trained:
    """The MLP with its cuBLAS head and gate, into the staging folder, within the training deadline."""
    from kernel_select.offline.training.train import MLPHParams

    defaults = MLPHParams()
    fits = start.model.card.architecture.members if start is not None else defaults.members  # one per member
    per_epoch = budget.training_s / ((options.epochs or defaults.epochs) * fits)
    shutil.rmtree(files.staging, ignore_errors=True)  # a killed training's leftovers: it starts over
    return train_calibrated(files.measurements, files.staging, spec, start, budget.training_deadline,
                            seed=options.seed, epochs=options.epochs,
                            on_epoch=lambda: progress.advance(per_epoch))


def train_calibrated(measurements: Path, out: Path, spec: DeviceSpec, start: StartModel | None,
                     deadline: float, *, seed: int = 0, epochs: int | None = None,
                     on_epoch: Callable[[], None] | None = None) -> Trained:
    """Train `spec`'s model on `measurements` into `out` as calibrate does: `start`'s widths and member
    count at the fine-tuning rate from its weights, then averaged with `start`'s members, claiming its
    domain where it would serve this GPU anyway (training/average.py); else from scratch; the rank
    objective; the training stopped at `deadline` (time.perf_counter()). results/calibrate.py retrains
    prefixes of a run with it.

    A start of more than half the members a card holds (a user's `train --members 8`) cannot be kept
    beside as many fine-tuned members: the fine-tuned ones, which began as its weights, serve alone, and
    claim its domain where it would serve this GPU anyway, as `train --claim-init-domain` does. Said
    before training, not found after the measurements (`StartModel.keeps_members`)."""
    from kernel_select.model.features import FEATURE_VERSION
    from kernel_select.offline.training.average import average_with_start
    from kernel_select.offline.training.train import MLPHParams, TimeLimit, train
    from kernel_select.offline.training.warm_start import load_warm_start

    hparams = MLPHParams()
    warm = None
    if start is not None:  # the start's shape, at the fine-tuning rate
        arch = start.model.card.architecture
        hparams = dataclasses.replace(hparams, hidden_widths=tuple(arch.hidden_widths),
                                      members=arch.members, lr=FINE_TUNE_LR)
        warm = load_warm_start(start.folder, spec, feature_version=FEATURE_VERSION,
                               hidden_widths=hparams.hidden_widths, members=hparams.members,
                               any_architecture=True)
    limit = TimeLimit(deadline, on_epoch=on_epoch)
    began = time.perf_counter()
    keep_start = start is not None and start.keeps_members()
    claim = start is not None and start.stands_in_for(spec)
    result = train(measurements, out, device=spec, seed=seed, epochs=epochs, objective=OBJECTIVE,
                   hparams=hparams, progress=False, init=warm, time_limit=limit,
                   claim_start_domain=claim and not keep_start)
    if not keep_start:
        return Trained(model=result.model, fine_tuned=None, metrics=result.metrics, seconds=result.seconds)
    model = average_with_start(result.model, out, start.model, str(start.folder), measurements,
                               claim_start_domain=claim)
    return Trained(model=model, fine_tuned=result.model, metrics=result.metrics,
                   seconds=time.perf_counter() - began)


def _summary(spec: DeviceSpec, files: CalibrationFiles, start: StartModel | None, plan: Any,
             measured: dict[str, Any], collected: dict[str, Any], trained: Trained, scores: dict[str, Any],
             installed: list[str], budget: Budget) -> dict[str, Any]:
    rank = trained.metrics["val"][OBJECTIVE]
    return {
        "device": {"key": spec.key, "name": spec.name, "capability": list(spec.capability),
                   "sm_count": spec.sm_count},
        "model_dir": str(files.folder), "measurements": str(files.measurements),
        "start": None if start is None else {"folder": str(start.folder), "device": start.trained_on},
        "minutes": round(budget.total_s / 60.0, 2),
        "plan": plan.summary(),
        "collection": {k: v for k, v in collected.items() if k != "line"},
        "measured": measured,
        "training": {"seconds": round(trained.seconds, 1), "objective": OBJECTIVE,
                     "epochs_run": rank.get("epochs_run"), "best_epoch": rank.get("epoch"),
                     "val_topk": rank.get("topk"), "members": trained.model.card.architecture.members,
                     "start_members_kept": trained.fine_tuned is not None,
                     "cublas_head": "aten" in installed, "cublas_gate": "cublas_gate" in installed},
        "held_out": scores,
        "installed": installed,
        "seconds": round(time.perf_counter() - budget.started, 1),
    }
