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


# -- bench (GPU) ---------------------------------------------------------------------------------

def _bench_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="time every config of the pruned space on this GPU (parquet out)",
                       description="Benchmark every (problem, config) pair of Inductor's pruned config "
                                   "space with kernel_select's Inductor-equivalent Triton kernel, plus "
                                   "cuBLAS, and append rows to a parquet dataset. Re-running skips "
                                   "problems already in the output. Needs a CUDA GPU.")
    p.add_argument("--shapes", required=True, help="JSON list of {m, n, k, dtype[, source]}")
    p.add_argument("--out", required=True, help="parquet file to create or extend")
    p.add_argument("--dtype", default=None,
                   help="only benchmark shapes of these dtypes (comma-separated; default: all)")
    p.add_argument("--search-space", choices=("default", "exhaustive"), default="exhaustive")
    p.add_argument("--gpus", type=int, default=1, help="shard problems over this many GPUs")
    p.add_argument("--workers", type=int, default=0, help="compile processes (default: one per core)")
    p.add_argument("--limit", type=int, default=0, help="benchmark at most this many problems")
    p.add_argument("--max-seconds", type=float, default=0.0,
                   help="stop timing after this many seconds (finish the current problem, write, exit)")
    p.set_defaults(handler=_bench)


def _bench(args: argparse.Namespace) -> int:
    import logging

    from kernel_select import bench, shapes
    from kernel_select.device import detect
    from kernel_select.problem import dtype_name

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    chosen = shapes.load(args.shapes)
    if args.dtype:
        wanted = {dtype_name(d) for d in args.dtype.split(",")}
        chosen = [s for s in chosen if s.dtype in wanted]
    if args.limit:
        chosen = chosen[: args.limit]
    device = detect()
    options = bench.BenchOptions(search_space=args.search_space, workers=args.workers,
                                 max_seconds=args.max_seconds)
    df = bench.run_sharded([s.problem() for s in chosen], args.out, device, args.gpus, options)
    print(f"{args.out}: {df['problem_id'].nunique()} problems, {len(df)} rows "
          f"({int((df['runtime_ms'] < float('inf')).sum())} finite)")
    return 0


# -- shapes ----------------------------------------------------------------------------------------

def _shapes_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("shapes", help="write a shapes file of training problems",
                       description="Write the training problems: the seed layer (forward and backward), "
                                   "layer shapes of widely used open models, and log-uniform random "
                                   "problems, each capped at --max-flop.")
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--dtype", default="bfloat16", help="dtype of every problem (default: %(default)s)")
    p.add_argument("--random", type=int, default=150, help="how many random problems (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--no-models", action="store_true", help="leave out the model layer shapes")
    p.add_argument("--max-flop", type=float, default=1e12, help="work cap per problem (default: %(default)g)")
    p.set_defaults(handler=_shapes)


def _shapes(args: argparse.Namespace) -> int:
    from kernel_select import shapes
    from kernel_select.problem import dtype_name

    dtype = dtype_name(args.dtype)
    chosen = shapes.seed_shapes(dtype)
    if not args.no_models:
        chosen += shapes.model_shapes(dtype, args.max_flop)
    chosen += shapes.random_shapes(args.random, dtype, args.seed, args.max_flop)
    chosen = shapes.dedupe(chosen)
    shapes.save(chosen, args.out)
    print(f"{args.out}: {len(chosen)} {dtype} problems")
    return 0


_PARSERS: list[Callable[[argparse._SubParsersAction], None]] = [_space_parser, _bench_parser, _shapes_parser]


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
