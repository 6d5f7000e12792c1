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


# -- compare -------------------------------------------------------------------------------------

def _compare_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="time stock max-autotune against the top-k handler on real torch.compile (GPU)",
        description="For every problem, compile torch.mm(a, b) in a fresh process with fresh caches: "
                    "stock max-autotune (mode max-autotune-no-cudagraphs, DEFAULT search space), the "
                    "kernel_select handler at each k, optionally stock EXHAUSTIVE, plus eager. Records "
                    "the compile's wall time, the kernel time (CUDA graph, L2-cold inputs, median) and "
                    "the winning kernel; writes OUT/compare_<device>.json and a trade-off plot "
                    "OUT/compare_<device>.png, and prints a summary. Needs a CUDA GPU.")
    p.add_argument("--shapes", default=None,
                   help="JSON or CSV file of problems (m, n, k[, dtype][, label]); default: the bundled "
                        "suite (seed MLP forward/backward, 32x28672x32, Llama-3-8B projections)")
    p.add_argument("--topk", default="1,2,4,8", help="comma-separated k values (default: %(default)s)")
    p.add_argument("--out", default="results", help="output directory (default: %(default)s)")
    p.add_argument("--exhaustive", action="store_true",
                   help="also time stock max-autotune with the EXHAUSTIVE search space (slow)")
    p.add_argument("--device-index", type=int, default=0, help="CUDA device to use (default: %(default)s)")
    p.add_argument("--lut", default=None,
                   help="kernel lookup table for the top-k runs (default: $TORCHINDUCTOR_KERNEL_LUT_PATH)")
    p.add_argument("--model", default=None, help="registered model name (default: the best shipped model)")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds allowed per compile process (default: %(default)s)")
    p.set_defaults(handler=_compare)


def _compare(args: argparse.Namespace) -> int:
    from kernel_select import compare

    topks = compare.parse_topks(args.topk)
    cases = compare.load_cases(args.shapes)
    results, json_path, png_path = compare.run_compare(
        cases, out_dir=args.out, topks=topks, exhaustive=args.exhaustive, device_index=args.device_index,
        lut=args.lut, model=args.model, timeout_s=args.timeout, shapes=args.shapes)
    print(compare.format_summary(compare.summarize(results)))
    plot = f" and {png_path}" if png_path else " (no plot: matplotlib is not installed)"
    print(f"wrote {json_path}{plot}")
    return 0


_PARSERS: list[Callable[[argparse._SubParsersAction], None]] = [_space_parser, _compare_parser]


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
