"""`kernel-select shapes`, `bench`, `audit` and `fidelity`: the problems to measure, the GPU harness and
checks of what it measured."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from kernel_select.cli import flags
from kernel_select.cli.common import (
    Subparsers,
    add_device_arg,
    int_at_least,
    integer,
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

#: Most problems `shapes` generates (--random, --coverage). A file of 100,000 problems is ~21 MB,
#: well within what the shapes reader accepts (offline.json_files.MAX_SHAPES_BYTES), so every file
#: written here can be read back; far more than any collection so far (the largest plan,
#: data/shapes_coverage.json, has 4,000).
MAX_GENERATED_PROBLEMS = 100_000


def register_shapes(sub: Subparsers) -> None:
    p = sub.add_parser("shapes", help="write a shapes file of training problems",
                       description="Write the training problems: the seed layer (forward and backward), "
                                   "layer shapes of widely used open models, and log-uniform random "
                                   "problems, each capped at --max-flop. --coverage, --layers and "
                                   "--active write the sampled plans instead (data/README.md).")
    p.add_argument("--out", type=output_file, required=True, help="JSON file to write")
    p.add_argument("--dtype", type=flags.dtypes, default=None,
                   help="dtype of every problem, any alias (default: bfloat16); with --layers a "
                        "comma-separated list in collection order (default: bfloat16,float16)")
    p.add_argument("--random", type=int_at_least(0, MAX_GENERATED_PROBLEMS), default=150,
                   help="how many random problems (default: %(default)s)")
    p.add_argument("--seed", type=integer, default=0, help="random seed (default: %(default)s)")
    p.add_argument("--no-models", action="store_true", help="leave out the model layer shapes")
    p.add_argument("--max-flop", type=positive_float, default=None,
                   help="work cap per problem (default: 1e12, with --coverage or --layers 1e11)")
    p.add_argument("--min-flop", type=non_negative_float, default=0.0,
                   help="with --layers: work floor per problem, scaled per dtype as the cap (default: none)")
    p.add_argument("--coverage", type=int_at_least(1, MAX_GENERATED_PROBLEMS), default=None, metavar="N",
                   help="instead: N problems from the coverage sampler (strata and compile groups; "
                        "see data/README.md); --dtype, --random and --no-models are ignored")
    p.add_argument("--group-size", type=int_at_least(1), default=128,
                   help="problems per compile group with --coverage or --layers (default: %(default)s)")
    p.add_argument("--layers", action="store_true",
                   help="instead: the real layer GEMMs of the architecture table in the layouts programs "
                        "run them (nn.Linear: forward nt, input gradient nn, weight gradient tn), grouped "
                        "by compile class and layout; skips --measured problems")
    p.add_argument("--max-problems", type=int_at_least(1), default=None, metavar="N",
                   help="with --layers: at most N problems, an equal share per dtype (default: all)")
    p.add_argument("--eight-mod-16", action="store_true",
                   help="with --layers: each GEMM with N, then K, moved to the nearest width that is 8 mod "
                        "16, what Inductor's pad_mm makes of an odd width (bf16/fp16)")
    p.add_argument("--heads", action="store_true",
                   help="with --layers: the language models' output heads (hidden x vocabulary, forward at "
                        "every token count, both backward GEMMs at training sizes) instead of their layers")
    _add_active_args(p)
    p.set_defaults(handler=run_shapes)


def _add_active_args(p: argparse.ArgumentParser) -> None:
    from kernel_select.offline.data.strategies import DEFAULT_STRATEGY, STRATEGIES

    g = p.add_argument_group("active learning", "--active: the next collection's problems, chosen from a "
                             "pool within a row budget and grouped by compile class (data/README.md)")
    g.add_argument("--active", action="store_true", help="instead: choose problems from --pool")
    g.add_argument("--pool", default=None, help="shapes file to choose from (e.g. data/shapes_coverage.json)")
    g.add_argument("--rows", type=int_at_least(1), default=None,
                   help="row budget: a problem costs its configs (the rows the harness times)")
    g.add_argument("--strategy", type=flags.word, choices=STRATEGIES, default=DEFAULT_STRATEGY,
                   help="how to choose (default: %(default)s, the winner of the experiment)")
    g.add_argument("--committee", nargs="+", default=[], metavar="DIR",
                   help="model folders (kernel-select train --seed S --out DIR), at least 2 for "
                        "--strategy disagreement")
    g.add_argument("--measured", nargs="+", default=[], metavar="PARQUET",
                   help="dataset files whose problems are skipped (already measured; --active or --layers)")
    add_device_arg(g, "device whose config space sets the costs (default: the committee's, else this GPU)")
    flags.add_json(g, "the summary", file_form=True)


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


def run_shapes(args: argparse.Namespace) -> int:
    from kernel_select.offline.data import shapes

    if sum(map(bool, (args.active, args.coverage is not None, args.layers))) > 1:
        raise OptionError("shapes: --active, --coverage and --layers each write a whole plan; pass one")
    if args.heads and not args.layers:
        raise OptionError("shapes: --heads chooses what --layers plans; pass both")
    if (args.min_flop or args.eight_mod_16) and not args.layers:
        raise OptionError("shapes: --min-flop and --eight-mod-16 shape what --layers plans; pass both")
    if args.active:
        return _active_shapes(args)
    if args.coverage is not None:
        return _coverage_shapes(args)
    if args.layers:
        return _layer_shapes(args)
    if args.dtype is not None and len(args.dtype) > 1:
        raise OptionError("shapes: --dtype takes one dtype, or a list with --layers")
    dtype = args.dtype[0] if args.dtype else "bfloat16"
    max_flop = 1e12 if args.max_flop is None else args.max_flop
    chosen = shapes.random_shapes(args.random, dtype, args.seed, max_flop)  # validates the cap first
    if not args.no_models:
        chosen = shapes.model_shapes(dtype, max_flop) + chosen
    chosen = shapes.dedupe(shapes.seed_shapes(dtype) + chosen)
    shapes.save(chosen, args.out)
    _done(args, f"{printable(args.out)}: {len(chosen)} {dtype} problems",
          {"out": args.out, "problems": len(chosen), "dtype": dtype})
    return 0


def _coverage_shapes(args: argparse.Namespace) -> int:
    from kernel_select.offline.data import sampler, shapes

    chosen = sampler.coverage_shapes(args.coverage, seed=args.seed, group_size=args.group_size,
                                     max_flop=1e11 if args.max_flop is None else args.max_flop)
    shapes.save(chosen, args.out)
    shares = sampler.strata_shares(chosen)
    groups = len({s.group for s in chosen})
    _done(args, f"{printable(args.out)}: {len(chosen)} problems in {groups} compile groups; "
                + ", ".join(f"{key} {share:.0%}" for key, share in shares.items()),
          {"out": args.out, "problems": len(chosen), "compile_groups": groups, "shares": shares})
    for line in sampler.check_shares(chosen):
        say(f"warning: stratum below its minimum share: {line}", stderr=True)
    return 0


def _layer_shapes(args: argparse.Namespace) -> int:
    from kernel_select.offline.data import active, sampler, shapes

    dtypes = args.dtype or sampler.LAYER_DTYPES
    chosen = sampler.layer_shapes(args.max_problems, dtypes, group_size=args.group_size, seed=args.seed,
                                  max_flop=1e11 if args.max_flop is None else args.max_flop,
                                  min_flop=args.min_flop,
                                  skip=active.measured_check(args.measured) if args.measured else None,
                                  heads=args.heads, eight_mod_16=args.eight_mod_16)
    shapes.save(chosen, args.out)
    shares = sampler.strata_shares(chosen)
    groups = len({s.group for s in chosen})
    _done(args, f"{printable(args.out)}: {len(chosen)} real layer problems in {groups} compile groups; "
                + ", ".join(f"{key} {share:.0%}" for key, share in shares.items()
                            if share and (key in dtypes or key.startswith("layout "))),
          {"out": args.out, "problems": len(chosen), "compile_groups": groups, "shares": shares})
    return 0


def _active_shapes(args: argparse.Namespace) -> int:
    import json

    from kernel_select.atomic_write import write_atomic
    from kernel_select.model.mlp import MLPModel
    from kernel_select.offline.data import active, shapes
    from kernel_select.offline.json_files import SHAPES_FILE

    if not args.pool or args.rows is None:
        raise OptionError("shapes --active: needs --pool FILE and --rows N")
    if args.strategy == "disagreement" and len(args.committee) < 2:
        raise OptionError("shapes --active --strategy disagreement: needs --committee with at least 2 model "
                          "folders")
    committee = [MLPModel.load(d, args.device) for d in args.committee]
    pool = active.unmeasured(shapes.load(readable_json(args.pool, SHAPES_FILE)), args.measured)
    chosen = active.plan_collection(pool, args.rows, strategy=args.strategy, committee=committee,
                                    device=args.device, seed=args.seed)
    shapes.save(active.as_shapes(chosen, args.strategy), args.out)
    summary = {"out": args.out, "strategy": args.strategy, "pool_problems": len(pool),
               "rows_budget": args.rows, "problems": len(chosen), "rows": sum(c.rows for c in chosen),
               "compile_classes": len({c.compile_class for c in chosen}),
               "committee": list(args.committee), "measured": list(args.measured)}
    if args.json_out:
        write_atomic(args.json_out, json.dumps(summary, indent=1) + "\n")
    _done(args, f"{printable(args.out)}: {summary['problems']} of {len(pool)} unmeasured pool problems, "
                f"{summary['rows']} of {args.rows} rows, {summary['compile_classes']} compile classes "
                f"({args.strategy})", summary)
    return 0


def _done(args: argparse.Namespace, line: str, summary: dict[str, Any]) -> None:
    """The summary line, or with --json the summary as JSON on stdout."""
    import json

    say(json.dumps(summary, indent=1) if args.json else line)


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
