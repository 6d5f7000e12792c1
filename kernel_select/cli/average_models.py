"""`kernel-select average-models`: one MLP of several trained on the same rows (training/average.py)."""

from __future__ import annotations

import argparse

from kernel_select.cli.common import Subparsers, add_device_arg, printable, say
from kernel_select.cli.devices import data_device_text
from kernel_select.cli.model import MODEL_FILES, named_or_data_device
from kernel_select.cli.outputs import check_output_dir, output_dir
from kernel_select.errors import OptionError


def register(sub: Subparsers) -> None:
    p = sub.add_parser("average-models", help="average the MLPs of several model folders into one model",
                       description="Make one MLP whose members are every member of the MLPs saved in DIR "
                                   "(trained on the same data: a fine-tuned model and one trained from "
                                   "scratch, say), without training: each member keeps its predictions, "
                                   "the model predicts their mean log runtime. Then choose its "
                                   "topk='auto' rule on the 'val' problems of --data, score it on the "
                                   "held-out splits, and write it to --out with the first DIR's cuBLAS "
                                   "time head and gate (--gate: another folder's gate).")
    p.add_argument("model_dirs", nargs="+", metavar="DIR",
                   help="model folders written by train (two or more)")
    p.add_argument("--data", required=True, nargs="+", metavar="PARQUET",
                   help="the dataset file(s) or glob patterns the models were trained on, read as one")
    p.add_argument("--out", type=output_dir, required=True, help="output directory, e.g. models/h100/")
    add_device_arg(p, "device the models are for (any case; default: the one the dataset's rows name)")
    p.add_argument("--gate", default=None, metavar="DIR",
                   help="write the cuBLAS gate saved in DIR with the model (default: the first DIR's)")
    p.add_argument("--fine-tuned-from", action="store_true",
                   help="two DIRs: a model fine-tuned on --data, then the model it started from (trained on "
                        "other rows, perhaps for another GPU of its architecture), averaged as calibrate "
                        "does: the card keeps the first's device and data, and claims the second's "
                        "dtypes, layouts and strata where that model would serve the GPU anyway")
    p.set_defaults(handler=run_average_models)


def run_average_models(args: argparse.Namespace) -> int:
    check_output_dir(args.out, MODEL_FILES)  # before the work
    if len(args.model_dirs) < 2:
        raise OptionError(f"average-models: expected two or more model folders, got {len(args.model_dirs)}")
    from kernel_select.offline.training.average import average_dirs, average_start_dirs
    from kernel_select.offline.training.training_data import require_rows

    if args.fine_tuned_from and (len(args.model_dirs) != 2 or args.gate is not None):
        raise OptionError("average-models --fine-tuned-from: give two DIRs (the fine-tuned model, then the "
                          "model it started from) and no --gate (the first DIR's is written)")
    paths = require_rows(args.data, "averaging models")
    device = named_or_data_device(args.device, paths)
    if args.fine_tuned_from:
        model = average_start_dirs(*args.model_dirs, args.data, args.out, device)
    else:
        model = average_dirs(args.model_dirs, args.data, args.out, device, gate_dir=args.gate)
    say(data_device_text(device, args.device is not None))
    gate = model.card.hyperparameters.get("gate", {}).get("dir", "none")
    say(f"averaged {len(args.model_dirs)} models into {model.card.architecture.members} members, the cuBLAS "
        f"gate of {printable(gate)}; wrote {printable(args.out)}")
    auto = model.card.metrics["auto_topk_val"]
    say(f"topk='auto' on {auto['problems']} val problems: {auto['rule']} rule: {auto['score']:.4f} at "
        f"{auto['mean_k']:.2f} configs per problem (top-4 {auto['top4_score']:.4f})")
    for split, figures in model.card.metrics["held_out"].items():
        if isinstance(figures, dict) and "topk" in figures:
            topk = "  ".join(f"k={k}: {v:.4f}" for k, v in figures["topk"].items())
            say(f"{split} ({figures['problems']} problems): {topk}")
    return 0
