"""`kernel-select train`, `train-gate` and `eval`: fit the learned models and score them
(`average-models`: cli/average_models.py; `gate-rules`: cli/gate_rules.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_select.cli import flags
from kernel_select.cli.common import (
    Subparsers,
    add_device_arg,
    emit_text,
    int_at_least,
    integer,
    positive_float,
    printable,
    say,
    say_lines,
)
from kernel_select.cli.devices import data_device, data_device_text, mlp_dir_line, model_line
from kernel_select.cli.outputs import check_output_dir, output_dir, output_file
from kernel_select.errors import DatasetError, OptionError
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION

if TYPE_CHECKING:
    import pandas as pd

    from kernel_select.device import DeviceSpec


#: The files `train` writes into --out (the MLP's, then the cuBLAS gate's); `train-gate` writes the
#: gate's, `train --refit-auto` rewrites the MLP's card. Each is checked before training starts.
MODEL_FILES = ("mlp.json", "mlp.pt", "cublas_gate.pt", "cublas_gate.json", "cublas_gate_bmm.pt",
               "cublas_gate_bmm.json")


def _add_training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, nargs="+", metavar="PARQUET",
                   help="benchmark dataset file(s) or glob patterns, read as one (e.g. 'data/h100*.parquet')")
    p.add_argument("--out", type=output_dir, required=True, help="output directory, e.g. models/h100/")
    add_device_arg(p, "device the data was measured on (any case; default: the one the dataset's rows "
                      "name, which must be one)")
    p.add_argument("--seed", type=integer, default=0, help="random seed (default: %(default)s)")


def register_train(sub: Subparsers) -> None:
    p = sub.add_parser("train", help="train the MLP performance model (and the cuBLAS gate) on a dataset",
                       description="Fit the MLP on the dataset's 'train' problems, keep the epoch (and "
                                   "objective) with the best top-k score on 'val', and write mlp.pt + "
                                   "mlp.json to --out; then fit the cuBLAS gate the same way and "
                                   "write cublas_gate.pt + cublas_gate.json (and, where the data hold "
                                   "enough batched GEMMs, its batched network cublas_gate_bmm.pt + "
                                   ".json). The held-out 'test' and "
                                   "'family' splits are never read.")
    _add_training_args(p)
    p.add_argument("--epochs", type=int_at_least(1), default=None, help="training epochs (default: 120)")
    p.add_argument("--objective", type=flags.word, choices=("mse", "rank", "both"), default="both",
                   help="loss: mse on log runtime, rank (mse + listwise within-problem), or both and keep "
                        "the better on validation (default: %(default)s)")
    p.add_argument("--features", type=integer, choices=sorted(FEATURE_SETS), default=FEATURE_VERSION,
                   help="feature version of the MLP: 5 reads the batch of batched GEMMs and trains on them "
                        "(default: %(default)s)")
    p.add_argument("--members", type=int_at_least(1), default=None,
                   help="MLPs trained from seeds seed, seed+1, ... whose log-ms predictions the model "
                        "averages (default: the training default, 2)")
    p.add_argument("--widths", type=flags.widths, default=None,
                   help="hidden layer widths of each MLP, comma-separated (default: the training "
                        "default, 96,64,32; with --init, give the saved model's, as with --members)")
    p.add_argument("--cap", type=int_at_least(1), default=384,
                   help="configs per problem trained on: every one within 1.5x of the oracle, then a "
                        "random sample (default: %(default)s)")
    p.add_argument("--init", default=None, metavar="DIR",
                   help="fine-tune the MLP saved in DIR (same feature version, widths and members; a device "
                        "of the same architecture) instead of starting from random weights")
    p.add_argument("--lr", type=positive_float, default=None,
                   help="peak learning rate (default: the training default, 2e-3; lower it with --init)")
    p.add_argument("--claim-init-domain", action="store_true",
                   help="with --init: the card also claims the domain of the model in DIR (per stratum the "
                        "larger training-problem count of the two), for a fine-tune of this GPU's own model "
                        "on its files again: strata the start knew from other rows stay in the domain, not "
                        "handed back to Inductor's list. DIR's model must serve this GPU")
    p.add_argument("--weight", type=_weight, action="append", default=None, metavar="PATTERN=FACTOR",
                   help="weigh the 'train' problems read from the --data files PATTERN names (a path or "
                        "glob, matched against the files --data expands to, or their file names) FACTOR "
                        "times those of the other files in the MLP's loss, in either objective (FACTOR > 0; "
                        "below 1 weighs them less); repeatable. A problem two files measured weighs as the "
                        "file whose rows are read (literal-size rows replace shared-binary ones); 'val', "
                        "which chooses the epoch, is not weighted; the card records each weighted file. "
                        "E.g. --weight data/h200_literal.parquet=8")
    p.add_argument("--gate", default=None, metavar="DIR",
                   help="write the cuBLAS gate saved in DIR with the model instead of fitting a new one "
                        "(keep a gate that scores better than a refit); the card records where it came from")
    flags.add_no_progress(p, old_quiet=True)
    p.add_argument("--refit-auto", action="store_true",
                   help="train nothing: choose the topk='auto' rule of the MLP already in --out again on the "
                        "'val' problems of --data (every usable row, as eval scores them) and rewrite only "
                        "its card, mlp.json")
    p.set_defaults(handler=run_train)


def register_train_gate(sub: Subparsers) -> None:
    p = sub.add_parser("train-gate", help="train only the cuBLAS gate (train trains it too)",
                       description="Fit the cuBLAS gate (does cuBLAS beat every Triton config of a "
                                   "problem?) on the trainable problems ('train' and 'val' minus the "
                                   "held-out 'family' split), select on 'val', and write cublas_gate.pt "
                                   "+ cublas_gate.json to --out, with its network for batched GEMMs "
                                   "(cublas_gate_bmm.pt + .json) where the data hold at least 100 "
                                   "batched train problems. An MLP there keeps its weights; its "
                                   "card (mlp.json) is rewritten to name the new gate.")
    _add_training_args(p)
    p.set_defaults(handler=run_train_gate)


def register_eval(sub: Subparsers) -> None:
    p = sub.add_parser("eval", help="score models and baselines against the measured oracle",
                       description="For each problem of a split: score(k) = oracle_ms / best measured ms "
                                   "among a method's top-k; prints the geometric mean over problems for "
                                   "the models, random k, Inductor's DEFAULT list, nvMatmulHeuristics (if "
                                   "installed) and cuBLAS.")
    p.add_argument("--data", required=True, nargs="+", metavar="PARQUET",
                   help="benchmark dataset file(s) or glob patterns, read as one")
    p.add_argument("--split", type=flags.word,
                   choices=("held-out", "test", "family", "unseen", "train", "val"), default="held-out",
                   help="held-out (default): the frozen test splits, 'test' (hash), 'family' (held-out "
                        "architectures and odd N) and 'unseen' (data/shapes_unseen.json, where measured), "
                        "in one report that names the shipped method")
    p.add_argument("--model", default="mlp,analytical",
                   help="comma-separated registered performance models (default: %(default)s)")
    flags.add_mlp_dir(p, "evaluate")
    add_device_arg(p, "device key (any case; default: from the dataset)")
    flags.add_json(p, "the report", file_form=True)
    p.add_argument("--pinned-rows", type=output_file, default=None, metavar="PARQUET",
                   help="with the held-out split: also write the rows of the report's pinned problems (the "
                        "shipped model's fixed slice of each held-out split) to PARQUET, from which "
                        "tests/model/test_held_out_scores.py recomputes the pinned scores")
    p.add_argument("--drop-suspect", action="store_true",
                   help="score as unmeasured the rows `kernel-select audit` flags (single samples over 8x "
                        "the fastest config of their tile: host stalls, not the kernel's time), for every "
                        "method alike")
    p.set_defaults(handler=run_eval)


def _weight(text: str) -> tuple[str, float]:
    """An argparse type: PATTERN=FACTOR (the last '=' splits: a file name may hold one), FACTOR > 0."""
    pattern, equals, factor = text.rpartition("=")
    if not equals or not pattern.strip():
        raise argparse.ArgumentTypeError(f"expected PATTERN=FACTOR (a --data file or glob, '=', a number "
                                         f"> 0), got {text!r}")
    return pattern, positive_float(factor)


def _weights(given: list[tuple[str, float]] | None) -> dict[str, float] | None:
    """--weight's values as train() takes them; a pattern given twice with two factors is refused."""
    weights: dict[str, float] = {}
    for pattern, factor in given or []:
        if weights.setdefault(pattern, factor) != factor:
            raise OptionError(f"train: --weight {pattern}: given twice, with factors {weights[pattern]:g} "
                              f"and {factor:g}")
    return weights or None


#: train's options that shape a training: --refit-auto trains nothing, so it refuses them rather than
#: leave a user believing they took effect
_TRAINING_ONLY = {"epochs": "--epochs", "init": "--init", "lr": "--lr", "members": "--members",
                  "widths": "--widths", "weight": "--weight", "gate": "--gate",
                  "claim_init_domain": "--claim-init-domain"}


def run_train(args: argparse.Namespace) -> int:
    if args.refit_auto:
        given = [flag for name, flag in _TRAINING_ONLY.items() if getattr(args, name) not in (None, False)]
        if given:
            raise OptionError(f"train: --refit-auto trains nothing, so {', '.join(given)} would have no "
                              f"effect; drop {'it' if len(given) == 1 else 'them'}")
    check_output_dir(args.out, MODEL_FILES[:1] if args.refit_auto else MODEL_FILES)  # before the work
    from kernel_select.offline.training.training_data import require_rows

    paths = require_rows(args.data, "training")  # before any model is built
    from kernel_select.offline.training.train import MLPHParams, train

    if args.refit_auto:
        return _run_refit_auto(args)
    from kernel_select.offline.training.file_weights import file_factors

    weights = _weights(args.weight)
    file_factors(paths, weights)  # a pattern naming no --data file fails before the data is read
    device = named_or_data_device(args.device, paths)  # printed once the data is read and checked
    options = {"feature_version": args.features, "weights": weights,
               "claim_start_domain": args.claim_init_domain, "gate_from": args.gate}
    chosen = {name: value for name, value in (("members", args.members), ("lr", args.lr),
                                              ("hidden_widths", args.widths))
              if value is not None}  # the rest: MLPHParams' defaults
    result = train(args.data, args.out, seed=args.seed, epochs=args.epochs, objective=args.objective,
                   device=device, cap=args.cap, progress=not args.no_progress,
                   hparams=MLPHParams(**chosen),
                   init=args.init, **options)
    for objective, metrics in result.metrics["val"].items():
        topk = "  ".join(f"k={k}: {v:.4f}" for k, v in metrics["topk"].items())
        say(f"val [{objective}] epoch {metrics['epoch']}: {topk}")
    say(f"kept the {result.objective} model; trained in {result.seconds:.0f} s; "
        f"wrote {printable(result.out_dir)}")
    for name, weighted in result.model.card.hyperparameters.get("weights", {}).items():
        say(f"weighted {printable(name)} x{weighted['factor']:g}: "
            f"{weighted['train_problems']} train problems")
    say(data_device_text(device, args.device is not None))
    gate = result.metrics.get("cublas_gate", {})
    if "skipped" in gate:
        say(f"no cuBLAS gate: {gate['skipped']}")
    else:
        if args.gate is not None:
            say(f"cuBLAS gate of {printable(args.gate)} written with the model (not fitted again)")
        _print_gate_validation(gate)
    return 0


def _run_refit_auto(args: argparse.Namespace) -> int:
    from kernel_select.offline.training.auto_refit import refit_auto_dir

    chosen = refit_auto_dir(args.out, args.data, args.device)
    threshold = (f"spread {chosen['spread']:g}" if chosen["rule"] == "spread" else f"gap {chosen['gap']:g}")
    say(f"topk='auto' on {chosen['problems']} val problems: {chosen['rule']} rule, {threshold}, "
        f"floor {chosen['floor']}: {chosen['score']:.4f} at {chosen['mean_k']:.2f} configs per problem "
        f"(top-4 {chosen['top4_score']:.4f})")
    say(f"wrote {printable(Path(args.out) / 'mlp.json')}")
    return 0


def run_train_gate(args: argparse.Namespace) -> int:
    from kernel_select.offline.data import dataset
    from kernel_select.offline.training.train import train_gate
    from kernel_select.offline.training.training_data import require_rows

    check_output_dir(args.out, MODEL_FILES[2:])  # before the work
    paths = require_rows(args.data, "training the cuBLAS gate")
    frame = dataset.read_many(paths)
    device = named_or_data_device(args.device, paths, frame)
    say(data_device_text(device, args.device is not None))
    gate = train_gate(frame, device, args.out, seed=args.seed,
                      data_path=paths[0] if len(paths) == 1 else None)
    _print_gate_validation(gate.card.metrics["validation"])
    written = ["cublas_gate.pt"] + (["cublas_gate_bmm.pt"] if gate.batched is not None else [])
    say(f"wrote {', '.join(printable(Path(args.out) / name) for name in written)}")
    return 0


def _eval_model_source(models: list, mlp_dir: str | None, spec: DeviceSpec, own_gate: bool) -> str | None:
    """The line naming the MLP `eval` scores: the folder --mlp-dir names (and whether the gate is the
    folder's own), else the one serving the device (a calibrated model first); None when no MLP is
    among the models."""
    if "mlp" not in models:
        return None
    return model_line(spec) if mlp_dir is None else mlp_dir_line(mlp_dir, spec, own_gate)


def named_or_data_device(key: str | None, paths: list[Path], rows: pd.DataFrame | None = None) -> DeviceSpec:
    """--device, else the device the dataset's rows were measured on (cli/devices.data_device): a
    model is trained and scored for the device of its data, never an assumed one."""
    from kernel_select.device import get_device

    return get_device(key) if key is not None else data_device(paths, rows)


def _print_gate_validation(validation: dict, what: str = "cuBLAS gate") -> None:
    say(f"{what}, validation: {validation['problems']} problems, sign accuracy "
        f"{validation['sign_accuracy']:.3f}, RMSE of log(cuBLAS/Triton) {validation['rmse_log_ratio']:.3f}")
    for margin, m in validation["margins"].items():
        say(f"  margin {margin}: Triton skipped on {m['gated']:.0%}, wrongly {m['wrongly_gated']}, "
            f"time lost there geomean {m['loss_geomean']:.3f} (worst {m['loss_worst']:.3f})")
    if "batched" in validation:
        _print_gate_validation(validation["batched"], "cuBLAS gate for batched GEMMs")


def _model_names(text: str, device: str | None) -> list[str]:
    """The --model list, each name checked against the registry: `evaluate` reports a model it
    cannot load as skipped, which is right for a broken file but hides a typo behind exit 0."""
    from kernel_select.device import get_device
    from kernel_select.model import registered_models

    known = registered_models(get_device(device).key if device is not None else None)
    by_lower = {name.lower(): name for name in known}  # any case, as every choice
    given = [name.strip() for name in text.split(",") if name.strip()]
    names = [by_lower.get(name.lower(), name) for name in given]
    unknown = [name for name in names if name not in known]
    if not names or unknown:
        raise OptionError(f"eval: --model: no model {', '.join(map(repr, unknown)) or 'given'}; "
                          f"available: {', '.join(known)}")
    return names


def run_eval(args: argparse.Namespace) -> int:
    models: list = _model_names(args.model, args.device)  # a typo fails before the dataset is read

    from kernel_select.model.folders import gate_in
    from kernel_select.offline.data import dataset
    from kernel_select.offline.training.evaluate import evaluate, evaluate_splits
    from kernel_select.offline.training.report import format_paired, format_pinned, format_report
    from kernel_select.offline.training.training_data import require_rows

    paths = require_rows(args.data, "eval")
    if args.pinned_rows is not None and args.split != "held-out":
        raise OptionError(f"eval: --pinned-rows: the pinned problems are chosen from the held-out splits, "
                          f"not --split {args.split}; leave --split out")
    if args.pinned_rows is not None and args.drop_suspect:
        raise OptionError("eval: --pinned-rows writes all the rows eval.json's pinned scores are "
                          "recomputed from; leave --drop-suspect out")
    frame = dataset.read_many(paths)  # read and checked once, before anything is printed
    device = named_or_data_device(args.device, paths, frame)
    # the gate `train` saved beside the --mlp-dir MLP; without one the serving gate scores
    gate = None if args.mlp_dir is None else gate_in(args.mlp_dir, device)
    source = _eval_model_source(models, args.mlp_dir, device, gate is not None)
    header = [data_device_text(device, args.device is not None), *([source] if source else [])]
    dropped = None
    if args.drop_suspect:
        from kernel_select.offline.data.audit import SUSPECT_RATIO, suspect_rows

        suspect = suspect_rows(frame)
        frame, dropped = frame[~suspect], int(suspect.sum())
        say(f"dropped {dropped:,} suspect rows (capped single samples over {SUSPECT_RATIO:g}x the fastest "
            "config of their tile)", stderr=args.json)
    if args.mlp_dir is not None:  # loaded for the device the data was measured on, unless named
        from kernel_select.model.mlp import MLPModel

        models = [MLPModel.load(args.mlp_dir, device.key) if name == "mlp" else name for name in models]
    if args.split == "held-out":
        report = evaluate_splits(args.data, models, device=device, frame=frame, gate=gate)
        if all("skipped" in r for r in report["splits"].values()):
            reasons = "; ".join(r["skipped"] for r in report["splits"].values())
            raise DatasetError(f"{', '.join(map(str, args.data))}: nothing to evaluate ({reasons}); pass "
                               "--split with a split the data has")
        lines = ["\n\n".join(format_report(r) for r in report["splits"].values())]
        if "paired" in report:
            lines.append(format_paired(report["paired"]))
        lines += [f"shipped: {report['shipped_model']}", format_pinned(report["pinned"])]
    else:
        report = evaluate(args.data, args.split, models, device=device, frame=frame, gate=gate)
        lines = [format_report(report)]
    if dropped is not None:
        report["dropped_suspect_rows"] = dropped
    if source is not None:
        report["model_source"] = source.removeprefix("model: ")
    for line in header:  # once there is a report: the device and the MLP it scores
        say(line, stderr=args.json)
    # A problem id or file name from the data is escaped: it must not drive the terminal.
    (say if args.json else say_lines)(json.dumps(report, indent=2) if args.json else "\n".join(lines))
    if args.json_out:
        emit_text(json.dumps(report, indent=2) + "\n", args.json_out)
        say(f"wrote {printable(args.json_out)}", stderr=args.json)
    if args.pinned_rows is not None:
        from kernel_select.offline.training.held_out_slice import pinned_ids, slice_rows

        dataset.write(slice_rows(frame, report["pinned"]), args.pinned_rows)
        say(f"wrote {printable(args.pinned_rows)}: the rows of the {len(pinned_ids(report['pinned']))} "
            "pinned problems", stderr=args.json)
    return 0
