"""`kernel-select` command line. Argument parsing and printing only; the work lives in modules.

Every command exits 0 on success, 2 with a one-line `kernel-select: error: ...` on bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from kernel_select.errors import KernelSelectError

Handler = Callable[[argparse.Namespace], int]


def _add_problem_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--m", type=int, required=True, help="rows of A and C")
    parser.add_argument("--n", type=int, required=True, help="columns of B and C")
    parser.add_argument("--k", type=int, required=True, help="columns of A, rows of B")
    parser.add_argument("--dtype", default="bfloat16", help="float16 | bfloat16 | float32 (default: %(default)s)")
    parser.add_argument("--device", default="h100",
                        help="device spec: h100, h100-pcie, h200, a100 (default: %(default)s)")


# -- space ---------------------------------------------------------------------------------------

def _space_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("space", help="list the configs Inductor would consider for a problem",
                       description="Count and list the Triton mm configs of Inductor's DEFAULT or "
                                   "EXHAUSTIVE space for one problem, scaled, deduplicated, "
                                   "spill-pruned and shared-memory-pruned for the device.")
    _add_problem_args(p)
    p.add_argument("--search-space", choices=("default", "exhaustive"), default="exhaustive")
    p.add_argument("--torch-version", default=None,
                   help="Inductor version whose DEFAULT list to use (default: the installed torch)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_space)


def _space(args: argparse.Namespace) -> int:
    from kernel_select.problem import Problem
    from kernel_select.space import for_problem

    problem = Problem(args.m, args.n, args.k, args.dtype)
    configs = for_problem(problem, args.device, args.search_space, args.torch_version)
    if args.json:
        print(json.dumps({"problem": str(problem), "search_space": args.search_space,
                          "count": len(configs), "configs": [c.model_dump() for c in configs]}))
        return 0
    print(f"{problem} on {args.device}: {len(configs)} {args.search_space} configs")
    for config in configs:
        print(f"  {config.short()}")
    return 0


# -- train / eval (the learned model) ------------------------------------------------------------

def _train_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train the MLP performance model on a benchmark dataset",
                       description="Fit the MLP on the dataset's 'train' problems, keep the epoch (and "
                                   "objective) with the best top-k score on 'val', and write mlp.pt + "
                                   "model_card.json to --out. The 'test' split is never read.")
    p.add_argument("--data", required=True, help="benchmark dataset (parquet)")
    p.add_argument("--out", required=True, help="output directory, e.g. models/h100/")
    p.add_argument("--device", default="h100", help="device the data was measured on (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: 80)")
    p.add_argument("--objective", choices=("mse", "rank", "both"), default="both",
                   help="loss: mse on log runtime, rank (mse + listwise within-problem), or both and keep "
                        "the better on validation (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    from kernel_select.train import train

    result = train(args.data, args.out, seed=args.seed, epochs=args.epochs, objective=args.objective,
                   device=args.device, progress=not args.quiet)
    for objective, metrics in result.metrics["val"].items():
        topk = "  ".join(f"k={k}: {v:.4f}" for k, v in metrics["topk"].items())
        print(f"val [{objective}] epoch {metrics['epoch']}: {topk}")
    print(f"kept the {result.objective} model; trained in {result.seconds:.0f} s; wrote {result.out_dir}")
    return 0


def _eval_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="score models and baselines against the measured oracle",
                       description="For each problem of a split: score(k) = oracle_ms / best measured ms "
                                   "among a method's top-k; prints the geometric mean over problems for "
                                   "the models, random k, Inductor's DEFAULT list, nvMatmulHeuristics (if "
                                   "installed) and cuBLAS.")
    p.add_argument("--data", required=True, help="benchmark dataset (parquet)")
    p.add_argument("--split", choices=("train", "val", "test"), default="test")
    p.add_argument("--model", default="mlp,analytical",
                   help="comma-separated registered models (default: %(default)s)")
    p.add_argument("--mlp-dir", default=None,
                   help="evaluate the MLP saved in this directory instead of the shipped one")
    p.add_argument("--device", default=None, help="device key (default: from the dataset)")
    p.add_argument("--json", default=None, metavar="OUT", help="also write the report as JSON to OUT")
    p.set_defaults(handler=_eval)


def _eval(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kernel_select.evaluate import evaluate, format_report

    models: list = [name.strip() for name in args.model.split(",") if name.strip()]
    if args.mlp_dir is not None:
        from kernel_select.mlp import MLPModel

        device = args.device or "h100"
        models = [MLPModel.load(args.mlp_dir, device) if name == "mlp" else name for name in models]
    report = evaluate(args.data, args.split, models, device=args.device)
    print(format_report(report))
    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {out}")
    return 0


_PARSERS: list[Callable[[argparse._SubParsersAction], None]] = [_space_parser, _train_parser, _eval_parser]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernel-select",
        description="Rank Triton GEMM configs with a performance model and a hand-editable lookup "
                    "table, so max-autotune benchmarks only the top-k.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in _PARSERS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except KernelSelectError as exc:
        parser.exit(2, f"kernel-select: error: {exc}\n")
    except KeyboardInterrupt:
        parser.exit(130, "kernel-select: interrupted\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
