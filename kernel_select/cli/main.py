"""`kernel-select` command line. Argument parsing and printing only; the work lives in modules.

Every command exits 0 on success, 2 with a one-line `kernel-select: error: ...` on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kernel_select.errors import KernelSelectError, OptionError

if TYPE_CHECKING:
    from kernel_select.problem import Problem
    from kernel_select.select import Choice

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
                   help="bound the run's wall time, compile included (stops between problems; re-run "
                        "to resume)")
    p.set_defaults(handler=_bench)


def _require_gpu(command: str) -> None:
    import torch

    from kernel_select.errors import DeviceError

    if not torch.cuda.is_available():
        raise DeviceError(f"{command}: needs a CUDA GPU (torch.cuda.is_available() is False); it times "
                          "kernels on the device")


def _bench(args: argparse.Namespace) -> int:
    import logging

    from kernel_select.offline import bench, pipeline, shapes
    from kernel_select.device import detect
    from kernel_select.problem import dtype_name

    chosen = shapes.load(args.shapes)
    _require_gpu("bench")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.dtype:
        wanted = {dtype_name(d) for d in args.dtype.split(",")}
        chosen = [s for s in chosen if s.dtype in wanted]
    if args.limit:
        chosen = chosen[: args.limit]
    device = detect()
    options = bench.BenchOptions(search_space=args.search_space, workers=args.workers,
                                 max_seconds=args.max_seconds)
    problems = [s.problem() for s in chosen]
    df = pipeline.run_sharded(problems, args.out, device, args.gpus, options,
                              origins={p: s.provenance() for p, s in zip(problems, chosen)},
                              groups=[s.group or f"{s.dtype}/{s.family}" for s in chosen])
    print(f"{args.out}: {df['problem_id'].nunique()} problems, {len(df)} rows "
          f"({int((df['runtime_ms'] < float('inf')).sum())} finite)")
    return 0


# -- fidelity (GPU) ------------------------------------------------------------------------------

def _fidelity_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fidelity", help="compare the harness's timings with real Inductor's (GPU)",
                       description="For each problem, time the same configs with real torch.compile "
                                   "max-autotune (Inductor's own per-choice timings) and with the "
                                   "benchmark harness; report the Spearman rank correlation and the "
                                   "median time ratio per problem. Needs a CUDA GPU.")
    p.add_argument("--shapes", required=True, help="JSON list of {m, n, k, dtype[, source]}")
    p.add_argument("--data", default=None,
                   help="dataset to pick configs from (spread over the measured ranking); "
                        "default: a random sample of each problem's space")
    p.add_argument("--configs", type=int, default=40, help="configs per problem (default: %(default)s)")
    p.add_argument("--json", dest="json_out", default=None,
                   help="write the results here (rewritten after every problem)")
    p.add_argument("--resume", action="store_true",
                   help="keep the problems already in --json and measure only the others")
    p.set_defaults(handler=_fidelity)


def _fidelity(args: argparse.Namespace) -> int:
    import logging

    from kernel_select.offline import dataset, fidelity, shapes
    from kernel_select.device import detect

    problems = [s.problem() for s in shapes.load(args.shapes)]
    if args.resume and not args.json_out:
        raise OptionError("fidelity: --resume needs --json (the file to resume)")
    results = []
    if args.resume and Path(args.json_out).exists():
        results = fidelity.read_json(args.json_out)
        done = {r.problem for r in results}
        problems = [p for p in problems if str(p) not in done]
        print(f"resuming {args.json_out}: {len(results)} problems measured, {len(problems)} to go")
    _require_gpu("fidelity")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    data = dataset.read(args.data) if args.data else None

    def keep(result: fidelity.FidelityResult) -> None:
        results.append(result)
        if args.json_out:
            fidelity.write_json(fidelity.summarize(results), args.json_out)

    fidelity.check(problems, detect(), configs_per_problem=args.configs, data=data, on_result=keep)
    summary = fidelity.summarize(results)
    print(f"{'problem':<34} {'n':>3} {'spearman':>8} {'(min)':>6} {'ratio':>6}  inductor best / harness best")
    for r in results:
        print(f"{r.problem:<34} {r.n_configs:>3} {r.spearman_median:>8.3f} {r.spearman_min:>6.3f} "
              f"{r.median_ratio:>6.3f}  {r.inductor_best} / {r.harness_best}")
    if summary["problems"]:
        print(f"median Spearman {summary['median_spearman']:.3f} over {summary['problems']} problems "
              f"(lowest {summary['min_spearman']:.3f}); median Inductor/harness time ratio "
              f"{summary['median_time_ratio']:.3f}")
    if summary["without_triton_choices"]:
        print(f"no Triton choices from Inductor (not counted): {', '.join(summary['without_triton_choices'])}")
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
    p.add_argument("--max-flop", type=float, default=None,
                   help="work cap per problem (default: 1e12, with --coverage 1e11)")
    p.add_argument("--coverage", type=int, default=0, metavar="N",
                   help="instead: N problems from the coverage sampler (strata and compile groups; "
                        "see data/README.md); --dtype, --random and --no-models are ignored")
    p.add_argument("--group-size", type=int, default=128, help="problems per compile group with --coverage")
    p.set_defaults(handler=_shapes)


def _shapes(args: argparse.Namespace) -> int:
    from kernel_select.offline import shapes
    from kernel_select.problem import dtype_name

    if args.coverage:
        return _coverage_shapes(args)
    dtype = dtype_name(args.dtype)
    max_flop = 1e12 if args.max_flop is None else args.max_flop
    chosen = shapes.random_shapes(args.random, dtype, args.seed, max_flop)  # validates the cap first
    if not args.no_models:
        chosen = shapes.model_shapes(dtype, max_flop) + chosen
    chosen = shapes.dedupe(shapes.seed_shapes(dtype) + chosen)
    shapes.save(chosen, args.out)
    print(f"{args.out}: {len(chosen)} {dtype} problems")
    return 0


def _coverage_shapes(args: argparse.Namespace) -> int:
    from kernel_select.offline import sampler, shapes

    chosen = sampler.coverage_shapes(args.coverage, seed=args.seed, group_size=args.group_size,
                                     max_flop=1e11 if args.max_flop is None else args.max_flop)
    shapes.save(chosen, args.out)
    shares = sampler.strata_shares(chosen)
    print(f"{args.out}: {len(chosen)} problems in {len({s.group for s in chosen})} compile groups; "
          + ", ".join(f"{key} {share:.0%}" for key, share in shares.items()))
    for line in sampler.check_shares(chosen):
        print(f"warning: stratum below its minimum share: {line}")
    return 0


# -- topk / demo ---------------------------------------------------------------------------------

#: The shipped lookup table for the demo, relative to the repository root.
DEFAULT_DEMO_LUT = "luts/h100_seed.json"


def _topk_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("topk", help="print the k configs worth benchmarking for a problem",
                       description="Rank the problem's configs with a performance model and print the "
                                   "top k, lookup-table entries first (always kept, even beyond k).")
    _add_problem_args(p)
    _add_k_arg(p)
    p.add_argument("--lut", default=None, metavar="PATH",
                   help="lookup table JSON whose entries for the problem come first")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="performance model, e.g. analytical or mlp (default: the best shipped for the "
                        "device: the trained model if there is one, else analytical)")
    p.add_argument("--search-space", choices=("default", "exhaustive"), default="exhaustive",
                   help="candidate configs to rank (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=_topk)


def _demo_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="top-k configs for the seed problems, forward and backward",
                       description="Print the top-k configs for bf16 n=1280, k=3420 at m = 560, 1024, 2048 "
                                   "and the two backward GEMMs of each (dX: m x 3420 x 1280, dW: "
                                   "1280 x 3420 x m), ranked by the best model available, with the "
                                   "shipped lookup table's entries first.")
    p.add_argument("--device", default="h100", help="device spec (default: %(default)s)")
    _add_k_arg(p)
    p.add_argument("--lut", default=None, metavar="PATH",
                   help=f"lookup table JSON (default: {DEFAULT_DEMO_LUT} in the repository; "
                        "the demo runs without it when it is absent)")
    p.set_defaults(handler=_demo)


def _add_k_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-k", dest="top_k", default="4", metavar="COUNT",
                        help="how many configs: a count (4) or a fraction of the candidates (0.01) "
                             "(default: %(default)s)")


def _parse_k(text: str) -> int | float:
    from kernel_select.errors import ConfigError

    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise ConfigError(
            f"-k: expected a count such as 4 or a fraction such as 0.01, got {text!r}") from None


def _load_lut(path: str) -> object:

    from kernel_select.errors import LUTError

    if not Path(path).is_file():
        raise LUTError(f"{path}: no such lookup table file")
    try:
        from kernel_select.lut import load_lut
    except ImportError as exc:
        raise LUTError(f"{path}: cannot load lookup tables in this installation ({exc})") from None
    return load_lut(path)


def _topk(args: argparse.Namespace) -> int:
    from kernel_select.model import get_model, load_default
    from kernel_select.problem import Problem
    from kernel_select.select import top_k
    from kernel_select.space import for_problem

    problem = Problem(args.m, args.n, args.k, args.dtype)
    k = _parse_k(args.top_k)
    model = get_model(args.model, args.device) if args.model else load_default(args.device)
    lut = _load_lut(args.lut) if args.lut else None
    candidates = for_problem(problem, model.device, args.search_space)
    choices = top_k(problem, k, lut=lut, model=model, candidates=candidates)
    decision = _gate_decision(problem, model.device)
    if args.json:
        print(json.dumps({
            "problem": {"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype,
                        "op": problem.op},
            "device": model.device.key, "model": model.name, "model_description": model.describe(),
            "lut": args.lut, "search_space": args.search_space, "candidates": len(candidates),
            "choices": [{"rank": rank, "config": choice.config.model_dump(),
                         "predicted_ms": choice.predicted_ms, "source": choice.source}
                        for rank, choice in enumerate(choices, 1)],
            "cublas_gate": None if decision is None else {
                "predicted_cublas_over_triton": decision.predicted_ratio, "margin": decision.margin,
                "skips_triton": decision.prefers_cublas},
        }))
        return 0
    print(f"{problem} on {model.device.key}: {len(choices)} of {len(candidates)} {args.search_space} configs")
    print(f"ranked by: {model.describe()}")
    _print_choices(choices)
    if decision is not None:
        print(decision.describe())
    return 0


def _gate_decision(problem: Problem, device: object) -> object:
    """The shipped cuBLAS gate's verdict at the configured margin; None when there is no gate or
    the gate is off (kernel_select.knobs.cublas_margin / TORCHINDUCTOR_GEMM_CUBLAS_MARGIN)."""
    from kernel_select import knobs as ks_config
    from kernel_select.model.gate import load_default_gate

    if ks_config.cublas_margin is None:
        return None
    gate = load_default_gate(device)
    return gate.decide(problem, ks_config.cublas_margin) if gate is not None else None


def _demo(args: argparse.Namespace) -> int:

    from kernel_select.model import load_default
    from kernel_select.select import top_k
    from kernel_select.space import for_problem

    k = _parse_k(args.top_k)
    model = load_default(args.device)
    repo_root = Path(__file__).resolve().parent.parent.parent
    lut_path = Path(args.lut) if args.lut else repo_root / DEFAULT_DEMO_LUT
    # An explicit --lut must exist; the shipped default is optional.
    lut = _load_lut(str(lut_path)) if args.lut or lut_path.is_file() else None

    key = model.device.key
    fallback = "" if model.name != "analytical" else f"; no trained model for {key} was found"
    print(f"kernel-select demo: top {args.top_k} Triton mm configs for the seed problems on {key}")
    print(f"ranked by: {model.describe()}{fallback}")
    shown = os.path.relpath(lut_path) if lut_path.is_relative_to(Path.cwd()) else str(lut_path)
    print(f"lookup table: {shown}" if lut is not None else f"lookup table: no LUT ({shown} not found)")
    for label, problem in _seed_problems():
        candidates = for_problem(problem, model.device, "exhaustive")
        choices = top_k(problem, k, lut=lut, model=model, candidates=candidates)
        print(f"\n{label:<14} {problem}  ({len(candidates)} candidates)")
        _print_choices(choices)
        decision = _gate_decision(problem, model.device)
        if decision is not None:
            print(decision.describe())
    return 0


def _seed_problems() -> list[tuple[str, Problem]]:
    from kernel_select.problem import Problem

    # Y[m, 1280] = X[m, 3420] @ W[3420, 1280]; backward: dX = dY @ W^T, dW = X^T @ dY.
    problems = []
    for m in (560, 1024, 2048):
        problems.append((f"m={m} fwd", Problem(m, 1280, 3420, "bfloat16")))
        problems.append((f"m={m} dX", Problem(m, 3420, 1280, "bfloat16")))
        problems.append((f"m={m} dW", Problem(1280, 3420, m, "bfloat16")))
    return problems


def _print_choices(choices: Sequence[Choice]) -> None:
    print(f"  {'rank':>4}  {'config':<22} {'predicted ms':>12}  source")
    for rank, choice in enumerate(choices, 1):
        print(f"  {rank:>4}  {choice.config.short():<22} {choice.predicted_ms:>12.4f}  {choice.source}")


# -- lut -----------------------------------------------------------------------------------------

def _lut_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lut", help="validate, format, show and convert kernel lookup tables",
                       description="Work with kernel lookup tables (LUTs): JSON files of hand-picked "
                                   "configs per device, op, dtype and problem that are always "
                                   "benchmarked.")
    lut_sub = p.add_subparsers(dest="lut_command", metavar="LUT_COMMAND", required=True)

    q = lut_sub.add_parser("validate", help="check LUT files strictly",
                           description="Load each LUT strictly; print one line per file. Exits 2 if "
                                       "any file is invalid.")
    q.add_argument("paths", nargs="+", metavar="PATH")
    q.set_defaults(handler=_lut_validate)

    q = lut_sub.add_parser("fmt", help="rewrite LUT files in the canonical layout",
                           description="Rewrite each LUT in place in the canonical layout (sorted, "
                                       "2-space indent, one config per line, trailing newline).")
    q.add_argument("paths", nargs="+", metavar="PATH")
    q.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 if a file is not in canonical layout")
    q.set_defaults(handler=_lut_fmt)

    q = lut_sub.add_parser("show", help="print a LUT as a table",
                           description="Print the entries of a LUT, one line per entry.")
    q.add_argument("path", metavar="PATH")
    q.add_argument("--device", default=None, help="only this device (h100, 'NVIDIA H100 80GB HBM3', ...)")
    q.add_argument("--json", action="store_true", help="print canonical JSON instead of a table")
    q.set_defaults(handler=_lut_show)

    q = lut_sub.add_parser("from-log", help="build a LUT from Inductor AUTOTUNE log output",
                           description="Read the AUTOTUNE blocks max-autotune prints to stderr and keep "
                                       "the fastest Triton configs of every mm/addmm/bmm/baddbmm.")
    q.add_argument("log", metavar="LOG", help="log file, or - for stdin")
    q.add_argument("--top", type=int, default=1,
                   help="Triton configs to keep per problem, fastest first (default: %(default)s)")
    q.add_argument("--device", default="h100", help="device the log was taken on (default: %(default)s)")
    q.add_argument("--out", default=None, help="write the LUT here instead of printing it")
    q.set_defaults(handler=_lut_from_log)

    q = lut_sub.add_parser("to-inductor", help="convert a LUT to torch._inductor.lookup_table's format",
                           description="Print the LUT as a dict for torch._inductor.config.lookup_table."
                                       "table. Entries with an m range (and bmm entries without a "
                                       "batch) cannot be expressed there and are skipped with a warning.")
    q.add_argument("path", metavar="PATH")
    q.add_argument("--device-name", default=None,
                   help="device name as torch.cuda.get_device_name() reports it, for device-specific "
                        "keys (default: device-agnostic keys; the LUT must hold one device)")
    q.add_argument("--no-aten", action="store_true",
                   help="do not list the ATen choice, so a hit benchmarks only the LUT configs")
    q.add_argument("--out", default=None, help="write the JSON here instead of printing it")
    q.set_defaults(handler=_lut_to_inductor)

    q = lut_sub.add_parser("from-inductor", help="convert a torch._inductor.lookup_table JSON file to a LUT",
                           description="Read a JSON dict in torch._inductor.lookup_table's format. Only "
                                       "triton::mm/triton::bmm entries on contiguous operands are kept.")
    q.add_argument("path", metavar="PATH")
    q.add_argument("--device", required=True, help="device the LUT entries are for, e.g. h100")
    q.add_argument("--out", default=None, help="write the LUT here instead of printing it")
    q.set_defaults(handler=_lut_from_inductor)

    q = lut_sub.add_parser("schema", help="print the JSON schema of the LUT format",
                           description="Print the JSON schema generated from the LUT models; it is "
                                       "committed as luts/schema/lut.v1.schema.json.")
    q.add_argument("--out", default=None, help="write the schema here instead of printing it")
    q.set_defaults(handler=_lut_schema)


def _emit_text(text: str, out: str | None) -> None:
    if out is None:
        sys.stdout.write(text)
        return

    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text, encoding="utf-8")


def _lut_validate(args: argparse.Namespace) -> int:
    from kernel_select.lut import load_lut

    failed = 0
    for path in args.paths:
        try:
            lut = load_lut(path)
        except KernelSelectError as exc:
            print(f"kernel-select: error: {exc}", file=sys.stderr)
            failed += 1
            continue
        devices = ", ".join(sorted(lut.devices)) or "no devices"
        print(f"{path}: ok, {lut.num_entries} entries ({devices})")
    return 2 if failed else 0


def _lut_fmt(args: argparse.Namespace) -> int:

    from kernel_select.lut import dump_lut, load_lut

    unformatted = 0
    for path in args.paths:
        canonical = dump_lut(load_lut(path)).encode("utf-8")
        if Path(path).read_bytes() == canonical:
            continue
        unformatted += 1
        if args.check:
            print(f"would reformat {path}")
        else:
            Path(path).write_bytes(canonical)
            print(f"reformatted {path}")
    return 1 if args.check and unformatted else 0


def _lut_show(args: argparse.Namespace) -> int:
    from kernel_select.device import get_device
    from kernel_select.lut import BATCHED_OPS, KernelLUT, dump_lut, load_lut

    lut = load_lut(args.path)
    rows = list(lut.entries())
    if args.device is not None:
        wanted = get_device(args.device).key
        rows = [row for row in rows if row.device == wanted]
    if args.json:
        print(dump_lut(KernelLUT.from_rows(rows)), end="")
        return 0
    if not rows:
        print(f"{args.path}: no entries")
        return 0
    table = [("device", "op", "dtype", "m", "n", "k", "batch", "configs (in order)", "note")]
    for row in rows:
        low, high = row.entry.m_bounds
        batch = row.entry.batch_key
        table.append((row.device, row.op, row.dtype, str(low) if low == high else f"{low}..{high}",
                      str(row.entry.n), str(row.entry.k),
                      "-" if row.op not in BATCHED_OPS else "any" if batch is None else str(batch),
                      ", ".join(c.short() for c in row.entry.configs), row.entry.note or ""))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]) - 1)]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)) + "  " + line[-1])
    return 0


def _lut_from_log(args: argparse.Namespace) -> int:

    from kernel_select.lut.autotune_log import lut_from_autotune_log, parse_autotune_log
    from kernel_select.errors import LUTError
    from kernel_select.lut import dump_lut

    try:
        text = sys.stdin.read() if args.log == "-" else Path(args.log).read_text(encoding="utf-8",
                                                                                  errors="replace")
    except OSError as exc:
        raise LUTError(f"{args.log}: cannot read: {exc.strerror or exc}") from None
    source = "<stdin>" if args.log == "-" else args.log
    lut = lut_from_autotune_log(text, args.device, top=args.top, source=source)
    _emit_text(dump_lut(lut), args.out)
    print(f"{source}: {lut.num_entries} LUT entries from {len(parse_autotune_log(text))} AUTOTUNE "
          f"blocks" + (f", written to {args.out}" if args.out else ""), file=sys.stderr)
    return 0


def _read_json(path: str) -> object:

    from kernel_select.errors import LUTError

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise LUTError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise LUTError(f"{path}: not valid JSON: {exc}") from None


def _lut_to_inductor(args: argparse.Namespace) -> int:
    from kernel_select.lut.torch_table import to_inductor_table
    from kernel_select.lut import load_lut

    table = to_inductor_table(load_lut(args.path), args.device_name, keep_aten=not args.no_aten)
    _emit_text(json.dumps(table, indent=2) + "\n", args.out)
    return 0


def _lut_from_inductor(args: argparse.Namespace) -> int:
    from kernel_select.lut.torch_table import from_inductor_table
    from kernel_select.lut import dump_lut

    lut = from_inductor_table(_read_json(args.path), args.device)  # type: ignore[arg-type]
    _emit_text(dump_lut(lut), args.out)
    return 0


def _lut_schema(args: argparse.Namespace) -> int:
    from kernel_select.lut import json_schema

    _emit_text(json_schema(), args.out)
    return 0


# -- compare -------------------------------------------------------------------------------------

def _compare_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="time stock max-autotune against the top-k handler on real torch.compile (GPU)",
        description="For every problem, compile torch.mm(a, b) with fresh caches (one process per method): "
                    "stock max-autotune (mode max-autotune-no-cudagraphs, DEFAULT search space), the "
                    "kernel_select handler at each k, optionally stock EXHAUSTIVE, plus eager. Records "
                    "the compile's wall time, the kernel time (CUDA graph, L2-cold inputs, median) and "
                    "the winning kernel; writes OUT/compare_<device>.json and a trade-off plot "
                    "OUT/compare_<device>.png, and prints a summary. Needs a CUDA GPU.")
    p.add_argument("--shapes", default=None,
                   help="JSON or CSV file of problems (m, n, k[, dtype][, label]); default: the bundled "
                        "suite (seed MLP forward/backward, 32x28672x32, Llama-3-8B projections)")
    p.add_argument("--topk", default="1,2,4,8", help="comma-separated k values (default: %(default)s)")
    p.add_argument("--nogate-topk", default="",
                   help="comma-separated k values to time again with the cuBLAS gate off (methods "
                        "topk-K-nogate); default: none")
    p.add_argument("--out", default="results", help="output directory (default: %(default)s)")
    p.add_argument("--exhaustive", action="store_true",
                   help="also time stock max-autotune with the EXHAUSTIVE search space (slow)")
    p.add_argument("--device-index", type=int, default=0, help="CUDA device to use (default: %(default)s)")
    p.add_argument("--lut", default=None,
                   help="kernel lookup table for the top-k runs (default: $TORCHINDUCTOR_KERNEL_LUT_PATH)")
    p.add_argument("--model", default=None, help="registered model name (default: the best shipped model)")
    p.add_argument("--timeout", type=float, default=1800.0,
                   help="seconds allowed per method's worker process (default: %(default)s)")
    p.add_argument("--resume", action="store_true",
                   help="keep the measurements in an existing OUT/compare_<device>.json, add the missing")
    p.add_argument("--only", default=None, metavar="METHODS",
                   help="comma-separated methods to measure in this run, e.g. eager,stock (the others "
                        "keep earlier measurements; use with --resume)")
    p.set_defaults(handler=_compare)


def _compare(args: argparse.Namespace) -> int:
    from kernel_select.offline import compare

    topks = compare.parse_topks(args.topk)
    nogate_topks = compare.parse_topks(args.nogate_topk) if args.nogate_topk.strip() else []
    cases = compare.load_cases(args.shapes)
    results, json_path, png_path = compare.run_compare(
        cases, out_dir=args.out, topks=topks, exhaustive=args.exhaustive, nogate_topks=nogate_topks,
        device_index=args.device_index,
        lut=args.lut, model=args.model, timeout_s=args.timeout, shapes=args.shapes, resume=args.resume,
        only=[name.strip() for name in args.only.split(",") if name.strip()] if args.only else None)
    print(compare.format_summary(compare.summarize(results)))
    plot = f" and {png_path}" if png_path else " (no plot: matplotlib is not installed)"
    print(f"wrote {json_path}{plot}")
    return 0


# -- train / eval (the learned model) ------------------------------------------------------------

def _add_training_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="benchmark dataset (parquet)")
    p.add_argument("--out", required=True, help="output directory, e.g. models/h100/")
    p.add_argument("--device", default="h100", help="device the data was measured on (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: %(default)s)")


def _train_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train the MLP performance model (and the cuBLAS gate) on a dataset",
                       description="Fit the MLP on the dataset's 'train' problems, keep the epoch (and "
                                   "objective) with the best top-k score on 'val', and write mlp.pt + "
                                   "model_card.json to --out; then fit the cuBLAS gate the same way and "
                                   "write cublas_gate.pt. The 'test' split is never read.")
    _add_training_args(p)
    p.add_argument("--epochs", type=int, default=None, help="training epochs (default: 80)")
    p.add_argument("--objective", choices=("mse", "rank", "both"), default="both",
                   help="loss: mse on log runtime, rank (mse + listwise within-problem), or both and keep "
                        "the better on validation (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=_train)


def _train(args: argparse.Namespace) -> int:
    from kernel_select.offline.train import train

    result = train(args.data, args.out, seed=args.seed, epochs=args.epochs, objective=args.objective,
                   device=args.device, progress=not args.quiet)
    for objective, metrics in result.metrics["val"].items():
        topk = "  ".join(f"k={k}: {v:.4f}" for k, v in metrics["topk"].items())
        print(f"val [{objective}] epoch {metrics['epoch']}: {topk}")
    print(f"kept the {result.objective} model; trained in {result.seconds:.0f} s; wrote {result.out_dir}")
    gate = result.metrics.get("cublas_gate", {})
    if "skipped" in gate:
        print(f"no cuBLAS gate: {gate['skipped']}")
    else:
        _print_gate_validation(gate)
    return 0


def _train_gate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train-gate", help="train only the cuBLAS gate (train trains it too)",
                       description="Fit the cuBLAS gate (does cuBLAS beat every Triton config of a "
                                   "problem?) on the dataset's 'train' problems, select on 'val', and "
                                   "write cublas_gate.pt to --out, leaving the MLP there untouched.")
    _add_training_args(p)
    p.set_defaults(handler=_train_gate)


def _train_gate(args: argparse.Namespace) -> int:
    from kernel_select.offline import dataset
    from kernel_select.device import get_device
    from kernel_select.offline.train import train_gate

    data_path = Path(args.data)
    gate = train_gate(dataset.read(data_path), get_device(args.device), args.out, seed=args.seed,
                      data_path=data_path)
    _print_gate_validation(gate.card["validation"])
    print(f"wrote {Path(args.out) / 'cublas_gate.pt'}")
    return 0


def _print_gate_validation(validation: dict) -> None:
    print(f"cuBLAS gate, validation: {validation['problems']} problems, sign accuracy "
          f"{validation['sign_accuracy']:.3f}, RMSE of log(cuBLAS/Triton) {validation['rmse_log_ratio']:.3f}")
    for margin, m in validation["margins"].items():
        print(f"  margin {margin}: Triton skipped on {m['gated']:.0%}, wrongly {m['wrongly_gated']}, "
              f"time lost there geomean {m['loss_geomean']:.3f} (worst {m['loss_worst']:.3f})")


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

    from kernel_select.offline.evaluate import evaluate, format_report

    models: list = [name.strip() for name in args.model.split(",") if name.strip()]
    if args.mlp_dir is not None:
        from kernel_select.model.mlp import MLPModel

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


_PARSERS: list[Callable[[argparse._SubParsersAction], None]] = [
    _space_parser, _topk_parser, _demo_parser, _shapes_parser, _bench_parser, _fidelity_parser, _lut_parser, _compare_parser, _train_parser, _train_gate_parser,
    _eval_parser,
]


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
    except BrokenPipeError:
        # `kernel-select demo | head`: the reader left; stop quietly, as Unix tools do.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- keeps the interpreter's final flush silent
        return 141
    return 0


