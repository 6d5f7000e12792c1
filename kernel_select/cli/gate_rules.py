"""`kernel-select gate-rules`: replay the cuBLAS gate's decision rules on measured data."""

from __future__ import annotations

import argparse
import json

from kernel_select.cli import flags
from kernel_select.cli.common import Subparsers, add_device_arg, emit_text, int_at_least, say, say_lines
from kernel_select.cli.devices import data_device_text, mlp_dir_line, model_line
from kernel_select.cli.model import named_or_data_device


def register_gate_rules(sub: Subparsers) -> None:
    p = sub.add_parser("gate-rules", help="replay the cuBLAS gate's small-GEMM rule (or, --one-choice, "
                                          "gemm_topk=1's decision) on measured data",
                       description="Where Inductor's benchmark over-times cuBLAS (small GEMMs), the gate "
                                   "decides alone. For each split (default: the held-out test and family), "
                                   "k and over-timing scenario, score each (small-GEMM zone, tie) rule with "
                                   "the shipped model and gate: geomean of min(cuBLAS, oracle) / time taken, "
                                   "and how many problems end more than 2% slower than cuBLAS. The shipped "
                                   "rule is marked *.")
    p.add_argument("--data", required=True, nargs="+", metavar="PARQUET",
                   help="benchmark dataset file(s) or glob patterns, read as one")
    p.add_argument("--split", type=_names_among(("test", "family", "unseen", "train", "val")),
                   default="test,family",
                   help="comma-separated splits among test, family, unseen, train, val "
                        "(default: %(default)s)")
    flags.add_gemm_topk(p, default="1,4", type=_positive_ints, old=("--k",),
                        what="comma-separated top-k counts to replay")
    p.add_argument("--one-choice", action="store_true",
                   help="replay gemm_topk=1's decision instead, where nothing is benchmarked: the gate alone "
                        "picks cuBLAS or the model's first config, at each threshold of the predicted ratio; "
                        "its sign accuracy and regret against the measured faster of the two; a GEMM "
                        "outside the model's domain is benchmarked with Inductor's list, as the handler "
                        "does (--gemm-topk is not read)")
    flags.add_mlp_dir(p, "replay")
    add_device_arg(p, "device key (any case; default: from the dataset)")
    flags.add_json(p, "the rows", file_form=True)
    p.set_defaults(handler=run_gate_rules)


def run_gate_rules(args: argparse.Namespace) -> int:
    from kernel_select.model.folders import gate_in
    from kernel_select.offline.training import gate_rules
    from kernel_select.offline.training.training_data import require_rows

    paths = require_rows(args.data, "gate-rules")
    spec = named_or_data_device(args.device, paths)
    if args.one_choice:
        rows = gate_rules.simulate_one_choice(args.data, args.split, device=spec.key, mlp_dir=args.mlp_dir)
        table = gate_rules.format_one_choice_table(rows)
    else:
        rows = gate_rules.simulate(args.data, args.split, args.gemm_topk, device=spec.key,
                                   mlp_dir=args.mlp_dir)
        table = gate_rules.format_table(rows)
    say(data_device_text(spec, args.device is not None), stderr=args.json)
    # the data read and checked: what ranked it (the gate beside --mlp-dir's MLP, where it has one)
    say(model_line(spec) if args.mlp_dir is None else
        mlp_dir_line(args.mlp_dir, spec, gate_in(args.mlp_dir, spec) is not None), stderr=args.json)
    if args.json:
        say(json.dumps(rows, indent=1))
    else:
        say_lines(table)
    if args.json_out is not None:
        emit_text(json.dumps(rows, indent=1) + "\n", args.json_out)
    return 0


def _positive_ints(text: str) -> list[int]:
    """An argparse type: comma-separated integers >= 1."""
    return [int_at_least(1)(part) for part in text.split(",")]


def _names_among(allowed: tuple[str, ...]):  # noqa: ANN202
    """An argparse type: comma-separated names, each one of `allowed`."""

    def parse(text: str) -> list[str]:
        names = [part.strip().lower() for part in text.split(",") if part.strip()]
        unknown = [name for name in names if name not in allowed]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"expected names among {', '.join(allowed)}, got {text!r}")
        return names

    return parse
