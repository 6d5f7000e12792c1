"""`kernel-select shapes`: the problems to measure, as a shapes file (the plans of data/README.md)."""

from __future__ import annotations

import argparse
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
    say,
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
    p.add_argument("--lora", action="store_true",
                   help="with --layers: LoRA adapters (ranks 8-64) on every layer instead of the layers: "
                        "each adapter's two Linear layers, forward at every token count, both backward "
                        "GEMMs at training sizes")
    _add_active_args(p)
    p.set_defaults(handler=run_shapes)


def _add_active_args(p: argparse.ArgumentParser) -> None:
    from kernel_select.offline.data.plans.strategies import DEFAULT_STRATEGY, STRATEGIES

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


def run_shapes(args: argparse.Namespace) -> int:
    from kernel_select.offline.data import shapes

    if sum(map(bool, (args.active, args.coverage is not None, args.layers))) > 1:
        raise OptionError("shapes: --active, --coverage and --layers each write a whole plan; pass one")
    if (args.heads or args.lora) and not args.layers:
        raise OptionError("shapes: --heads and --lora choose what --layers plans; pass both")
    if args.heads and args.lora:
        raise OptionError("shapes: --heads and --lora each choose what --layers plans; pass one")
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
    from kernel_select.offline.data import shapes
    from kernel_select.offline.data.plans import sampler

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
    from kernel_select.offline.data import shapes
    from kernel_select.offline.data.plans import active, sampler

    dtypes = args.dtype or sampler.LAYER_DTYPES
    chosen = sampler.layer_shapes(args.max_problems, dtypes, group_size=args.group_size, seed=args.seed,
                                  max_flop=1e11 if args.max_flop is None else args.max_flop,
                                  min_flop=args.min_flop,
                                  skip=active.measured_check(args.measured) if args.measured else None,
                                  source="heads" if args.heads else "lora" if args.lora else "layers",
                                  eight_mod_16=args.eight_mod_16)
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
    from kernel_select.offline.data import shapes
    from kernel_select.offline.data.plans import active
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
