"""`kernel-select bench`, `audit` and `fidelity`: the GPU harness and checks of what it measured (the
problems to measure are `shapes`, cli/shapes.py)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from kernel_select.cli import flags
from kernel_select.cli.common import (
    Subparsers,
    int_at_least,
    non_negative_float,
    positive_float,
    printable,
    readable_json,
    require_gpu,
    say,
    say_lines,
)
from kernel_select.cli.outputs import output_file
from kernel_select.errors import OptionError


def register_bench(sub: Subparsers) -> None:
    p = sub.add_parser("bench", help="time every config of the pruned space on this GPU (parquet out)",
                       description="Benchmark every (problem, config) pair of Inductor's pruned config "
                                   "space with kernel_select's Inductor-equivalent Triton kernel, plus "
                                   "cuBLAS, and append rows to a parquet dataset. Re-running skips "
                                   "problems already in the output. Needs a CUDA GPU.")
    p.add_argument("--shapes", required=True,
                   help='JSON list of {m, n, k, dtype[, source][, layout][, op, batch]}; layout "nn" '
                        '(default), "nt", "tn" or "tt": A then B, "t" stored transposed (as W in x @ W.t()); '
                        'op "mm" (default) or "bmm" with a batch')
    p.add_argument("--out", type=output_file, required=True, help="parquet file to create or extend")
    p.add_argument("--dtype", type=flags.dtypes, default=None,
                   help="only benchmark shapes of these dtypes (comma-separated, any alias; default: all)")
    p.add_argument("--layout", type=flags.layouts, default=None,
                   help="only benchmark shapes of these operand layouts (comma-separated, e.g. tn,nt; "
                        "default: all)")
    p.add_argument("--search-space", type=flags.word, choices=("default", "exhaustive"), default="exhaustive",
                   help="Inductor's DEFAULT or EXHAUSTIVE space (default: %(default)s)")
    p.add_argument("--gpus", type=int_at_least(1), default=1,
                   help="time on this many GPUs of the host: one compile pool, and a timing process per GPU "
                        "taking the next problem whose kernels are ready")
    p.add_argument("--workers", type=int_at_least(0), default=0,
                   help="compile processes (default: every core but one per GPU)")
    p.add_argument("--limit", type=int_at_least(0), default=0, help="benchmark at most this many problems")
    p.add_argument("--max-seconds", type=non_negative_float, default=0.0,
                   help="bound the run's wall time, compile included (stops between problems; re-run "
                        "to resume)")
    p.add_argument("--order", type=flags.word, choices=("reuse", "file"), default="reuse",
                   help="reuse (default): time problems that share compiled kernels together, so a "
                        "bounded run reaches more of them; file: the shapes file's order")
    p.add_argument("--literal-sizes", action="store_true",
                   help="compile every config once per shape with M, N and K as literals, as Inductor's "
                        "template has them (default: one binary per config serves every shape; faster to "
                        "collect, but some memory-bound configs then time unlike Inductor's kernel)")
    flags.add_no_progress(p)
    p.set_defaults(handler=run_bench)


def register_fidelity(sub: Subparsers) -> None:
    p = sub.add_parser("fidelity", help="compare the harness's timings with real Inductor's (GPU)",
                       description="For each single GEMM (any operand layout), time the same configs with "
                                   "real torch.compile max-autotune (Inductor's own per-choice timings) and "
                                   "with the benchmark harness; report per problem the Spearman rank "
                                   "correlation, the median time ratio, and the harness's fastest config "
                                   "as Inductor times it over Inductor's fastest. Needs a CUDA GPU.")
    p.add_argument("--shapes", required=True, help="JSON list of {m, n, k, dtype[, source][, layout]}")
    p.add_argument("--data", default=None,
                   help="dataset to pick configs from (spread over the measured ranking); "
                        "default: a random sample of each problem's space")
    p.add_argument("--configs", type=int_at_least(3), default=40,
                   help="configs per problem (default: %(default)s)")
    flags.add_json(p, "the results (--json-out: rewritten after every problem)", file_form=True)
    p.add_argument("--resume", action="store_true",
                   help="keep the problems already in --json-out and measure only the others")
    p.add_argument("--literal-sizes", action="store_true",
                   help="time the harness's binaries with M, N and K compiled in, as bench --literal-sizes "
                        "does (default: the shared binaries bench uses by default)")
    p.set_defaults(handler=run_fidelity)


def register_audit(sub: Subparsers) -> None:
    p = sub.add_parser("audit", help="flag implausible single-sample timings in datasets, or compare two "
                                     "collections (CPU)",
                       description="Count capped (single-sample) Triton rows timed more than --ratio times "
                                   "the fastest config of their problem with the same output tile "
                                   "(block_m, block_n): the mark of a host stall inside a timed interval. "
                                   "Prints per file: rows, suspect rows and problems affected, by dtype. "
                                   "With --compare, instead: how well the data agree with another "
                                   "collection of the same problems. Reads only; see data/README.md.")
    p.add_argument("data", nargs="+", help="dataset files or glob patterns")
    p.add_argument("--ratio", type=positive_float, default=None,
                   help="flag rows slower than this multiple of their tile's fastest (default: 8, "
                        "the harness's SUSPECT_RATIO)")
    flags.add_json(p, "the counts")
    p.add_argument("--check", action="store_true", help="exit 1 if any file has a suspect row")
    p.add_argument("--compare", default=None, metavar="PARQUET",
                   help="instead: compare the data with this collection of the same problems: median "
                        "runtime ratio per (problem, config) and the share of problems whose fastest "
                        "config matches")
    p.set_defaults(handler=run_audit)


def run_bench(args: argparse.Namespace) -> int:
    from kernel_select.device import detect
    from kernel_select.offline.harness import bench, sharding
    from kernel_select.offline.data import shapes
    from kernel_select.offline.json_files import SHAPES_FILE

    chosen = shapes.load(readable_json(args.shapes, SHAPES_FILE))
    require_gpu("bench")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.dtype:
        chosen = [s for s in chosen if s.dtype in args.dtype]
    if args.layout:
        chosen = [s for s in chosen if s.layout in args.layout]
    if args.limit:
        chosen = chosen[: args.limit]
    options = bench.BenchOptions(search_space=args.search_space, workers=args.workers,
                                 max_seconds=args.max_seconds, order=args.order,
                                 literal_sizes=args.literal_sizes, progress=not args.no_progress)
    problems = [s.problem() for s in chosen]  # each in its entry's layout
    df = sharding.run_sharded(problems, args.out, detect(), args.gpus, options,
                              origins={p: s.provenance() for p, s in zip(problems, chosen)})
    say(f"{printable(args.out)}: {df['problem_id'].nunique()} problems, {len(df)} rows "
        f"({int((df['runtime_ms'] < float('inf')).sum())} finite)")
    return 0


def run_fidelity(args: argparse.Namespace) -> int:
    import json

    from kernel_select.device import detect
    from kernel_select.offline.data import dataset, shapes
    from kernel_select.offline.harness import fidelity
    from kernel_select.offline.json_files import SHAPES_FILE

    chosen = shapes.load(readable_json(args.shapes, SHAPES_FILE))
    batched = sorted({s.op for s in chosen} - {"mm"})
    if batched:  # its Inductor side compiles one `a @ b` of two matrices
        raise OptionError(f"fidelity: {printable(args.shapes)} has {', '.join(batched)} entries; fidelity "
                          "compares single GEMMs (op \"mm\") only")
    if any(s.tf32 for s in chosen):  # its Inductor side runs under this process's precision, not TF32
        raise OptionError(f"fidelity: {printable(args.shapes)} has TF32 entries; fidelity compares problems "
                          "without TF32 only")
    problems = [s.problem() for s in chosen]
    if args.resume and not args.json_out:
        raise OptionError("fidelity: --resume needs --json-out (the file to resume)")
    results = []
    if args.resume and Path(args.json_out).exists():
        results = fidelity.read_json(args.json_out)
        done = {r.problem for r in results}
        problems = [p for p in problems if str(p) not in done]
        say(f"resuming {printable(args.json_out)}: {len(results)} problems measured, {len(problems)} to go")
    require_gpu("fidelity")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    data = dataset.read(args.data) if args.data else None

    def keep(result: fidelity.FidelityResult) -> None:
        results.append(result)
        if args.json_out:
            fidelity.write_json(fidelity.summarize(results), args.json_out)

    fidelity.check(problems, detect(), configs_per_problem=args.configs, data=data,
                   literal_sizes=args.literal_sizes, on_result=keep)
    if args.json:
        say(json.dumps(fidelity.summarize(results), indent=1, default=str))
    else:
        _print_fidelity(results, fidelity.summarize(results))
    return 0


def _print_fidelity(results: list[Any], summary: dict[str, Any]) -> None:
    say(f"{'problem':<34} {'n':>3} {'spearman':>8} {'(min)':>6} {'ratio':>6} {'best':>6}  "
        "inductor best / harness best")
    for r in results:
        say(f"{printable(r.problem):<34} {r.n_configs:>3} {r.spearman_median:>8.3f} {r.spearman_min:>6.3f} "
            f"{r.median_ratio:>6.3f} {r.harness_best_ratio:>6.3f}  {r.inductor_best} / {r.harness_best}")
    if summary["problems"]:
        say(f"median Spearman {summary['median_spearman']:.3f} over {summary['problems']} problems "
            f"(lowest {summary['min_spearman']:.3f}); median Inductor/harness time ratio "
            f"{summary['median_time_ratio']:.3f}")
    if summary.get("median_harness_best_ratio") is not None:
        say(f"the harness's fastest, timed by Inductor, over Inductor's fastest ('best'): median "
            f"{summary['median_harness_best_ratio']:.3f}, worst {summary['max_harness_best_ratio']:.3f}")
    if summary["without_triton_choices"]:
        without = ", ".join(summary["without_triton_choices"])
        say(f"no Triton choices from Inductor (not counted): {without}")


def run_audit(args: argparse.Namespace) -> int:
    import json

    from kernel_select.offline.data import audit, dataset

    if args.compare:
        return _compare_collections(args)
    ratio = audit.SUSPECT_RATIO if args.ratio is None else args.ratio
    paths = dataset.expand_paths(args.data)
    reports = {str(path): audit.audit(dataset.read(path), ratio) for path in paths}
    if args.json:
        files = {path: audit.as_json(counts) for path, counts in reports.items()}
        say(json.dumps({"ratio": ratio, "files": files}, indent=2))
    else:
        say(f"capped single-sample rows over {ratio:g}x the fastest config of their tile")
        say(f"{'file':<34} {'dtype':<9} {'rows':>10} {'capped':>10} {'suspect':>8} "
            f"{'problems hit':>16} {'worst':>7}")
        for path, counts in reports.items():
            for name, c in counts.items():
                hit = f"{c.problems_affected:,} of {c.problems:,}"
                say(f"{printable(path):<34} {name:<9} {c.rows:>10,} {c.capped_rows:>10,} "
                    f"{c.suspect_rows:>8,} "
                    f"{hit:>16} {c.worst_ratio:>6.0f}x")
    suspect = any(r["all"].suspect_rows for r in reports.values())
    return 1 if args.check and suspect else 0


def _compare_collections(args: argparse.Namespace) -> int:
    import json

    from kernel_select.offline.data import agreement, dataset

    if args.check or args.ratio is not None:
        raise OptionError("audit --compare: --check and --ratio belong to the stall audit; leave them out")
    names = (", ".join(str(p) for p in dataset.expand_paths(args.data)), str(args.compare))
    result = agreement.agreement(dataset.read_many(args.data), dataset.read(args.compare), names)
    if args.json:
        say(json.dumps({"first": names[0], "second": names[1], **result.as_json()}, indent=2))
    else:
        say_lines("\n".join(agreement.report_lines(result, names)))
    return 0
