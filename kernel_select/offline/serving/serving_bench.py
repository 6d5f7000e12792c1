"""Serving measurement on a GPU: compile time, benchmarks and kernel time per sequence length.

A program is served at many sequence lengths, one fresh process per method, and again with the
Triton cache the first left (a serving restart):

    python -m kernel_select.offline.serving.serving_bench --program seed --warm all \
        --out results/serving_h100.json

Programs (programs.py): `seed`, the first user's Linear(3420 -> 1280) step (forward, grad input,
grad weight) at 560..8192; `decoder`, a Llama-3-8B-width decoder layer's prefill at 128..8192.

Methods, each in its own process with empty Inductor and Triton caches (`--methods`):
  eager           no compile
  default         mode="default", the length marked dynamic
  max_autotune    stock mode="max-autotune-no-cudagraphs", the length marked dynamic
  stock_gemm      stock GEMM-only autotuning (gemm_autotune_options), the length marked dynamic
  topk4_dynamic   kernel_select top-4 ranked over the whole range, one graph
  topk4_buckets   kernel_select top-4, one graph per length bucket (kernel_select.inductor.bucketed:
                  each bucket ranked over its range and benchmarked at its middle); the buckets of
                  `--edges`, else three log-spaced over the range (no pretune needed)
  pinned_lut      the pinned LUT served by one graph (one kernel per GEMM for every length)
  pinned_buckets  the pinned LUT served by one graph per bucket (each bucket its pins)
The pinned LUT comes from `kernel-select pretune --model` on the program (its compiled graph,
per-bucket pins) unless `--lut` names one. Methods that take a strict range per bucket compile
without shape padding (its guard on the length would split a bucket, docs/guide.md).

Per method: compile wall time (all first calls), graphs Dynamo compiled, autotune benchmarks run
(choices Inductor timed), and per length the kernel time (CUDA-graph replays over L2-cold input
copies, offline.compare.timing). The methods named by `--warm` run again in a new process that
finds the Triton cache of their first run (Inductor's caches still off): `compile_warm_s`, and
`triton_compile_s` = compile_s - compile_warm_s, the part of the compile that was Triton's.

`best_ms` per length, seed program: the harness's best when `--harness` names a parquet that
`kernel-select bench` wrote for `--harness-shapes` (the sum over the step's three GEMMs of the
fastest Triton config or cuBLAS, each timed alone in the operand layout the program runs it in),
else the fastest measured method at that length; `best_source` says which. The decoder layer runs
attention and norms beside its GEMMs, so its best is the fastest method.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernel_select.offline.serving import serving_report
from kernel_select.offline.serving.programs import (IN_FEATURES, LAYOUTS, OUT_FEATURES, PROGRAMS, SEED,
                                                    Program, gemm_sizes)

LENGTHS, LOW, HIGH = SEED.lengths, SEED.low, SEED.high
METHODS = ("eager", "default", "max_autotune", "stock_gemm", "topk4_dynamic", "topk4_buckets",
           "pinned_lut", "pinned_buckets")
DEFAULT_METHODS = ("eager", "default", "max_autotune", "topk4_buckets", "pinned_buckets")
PINNED = frozenset({"pinned_lut", "pinned_buckets"})
BUCKETED = frozenset({"topk4_buckets", "pinned_buckets"})
#: A method's process may take this long (a stock max-autotune of the decoder layer is the longest).
METHOD_TIMEOUT_S = 480

__all__ = ["IN_FEATURES", "LAYOUTS", "OUT_FEATURES", "gemm_sizes"]  # the seed program's, for callers


# -- what pretune and the harness measure (pure) -------------------------------------------------------

def shapes() -> list[dict[str, Any]]:
    """The seed program's GEMMs as a pretune shapes file, one pinned entry each over the length range:
    forward and grad input have the length as M (an m range), the grad weight has it as K (a k
    range), so every compile's hint finds its pin."""
    length = {"min": LOW, "max": HIGH}
    return [{"op": "mm", "n": OUT_FEATURES, "k": IN_FEATURES, "m": length, "layout": LAYOUTS["forward"]},
            {"op": "mm", "n": IN_FEATURES, "k": OUT_FEATURES, "m": length, "layout": LAYOUTS["grad_input"]},
            {"op": "mm", "n": IN_FEATURES, "k": length, "m": OUT_FEATURES, "layout": LAYOUTS["grad_weight"]}]


def harness_shapes() -> list[dict[str, Any]]:
    """The seed step's three GEMMs at every served length, each in the layout the program runs it
    in, as a `kernel-select bench` shapes file."""
    return [{"m": m, "n": n, "k": k, "dtype": "bfloat16", "layout": LAYOUTS[gemm],
             "source": f"serving {gemm} L={length}"}
            for length in LENGTHS for gemm, (m, n, k) in gemm_sizes(length).items()]


def harness_best(rows: Any) -> dict[str, float]:
    """Per served length of the seed program, the sum over its three GEMMs of the fastest timed
    choice in `rows` (a bench DataFrame) in the GEMM's own layout; a length with a GEMM missing
    from `rows` is left out."""
    timed = rows[rows["status"].isin(("ok", "capped")) & rows["runtime_ms"].notna()]
    fastest = timed.groupby(["m", "n", "k", "layout"])["runtime_ms"].min().to_dict()
    best = {}
    for length in LENGTHS:
        gemms = [(s["m"], s["n"], s["k"], s["layout"]) for s in harness_shapes()
                 if s["source"].endswith(f"L={length}")]
        if all(g in fastest for g in gemms):
            best[str(length)] = float(sum(fastest[g] for g in gemms))
    return best


def default_edges(program: Program) -> tuple[int, ...]:
    """Buckets for topk4_buckets without a LUT: three log-spaced buckets over the program's range."""
    from kernel_select.buckets import edges_of_ranges
    from kernel_select.problem import spread_ms

    points = spread_ms(program.low, program.high, 4)
    return edges_of_ranges([(points[0], points[1] - 1), (points[1], points[2] - 1),
                            (points[2], program.high)])


# -- one method, in a fresh process (GPU) ----------------------------------------------------------

def run_method(program: Program, method: str, lut: str | None, samples: int, *,
               edges: tuple[int, ...] | None = None, timing: bool = True) -> dict[str, Any]:
    """Measure one method on `program` in this (fresh) process."""
    import torch
    from torch._dynamo.utils import counters

    import kernel_select.inductor as ks_inductor
    from kernel_select.offline.compare.timing import input_copies, kernel_ms

    torch.compiler.config.force_disable_caches = True
    fn, handler, bucketed = _compiled(program, method, lut, edges)
    # Without a GPU (a program built on the CPU, for tests) compile times are still measured.
    synchronize = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    result: dict[str, Any] = {"compile_s": 0.0, "benchmarks": 0, "lengths": {}}
    graphs_before = int(counters["stats"]["unique_graphs"])
    with ks_inductor.record_autotuning() as records, torch.no_grad():
        for length in program.lengths:
            args = program.inputs(length)
            if method != "eager" and bucketed is None:  # as the user did: the length dynamic, no range
                for index, dim in program.dims.items():
                    torch._dynamo.mark_dynamic(args[index], dim)
            start = time.perf_counter()
            fn(*args)
            synchronize()
            first_call_s = time.perf_counter() - start
            result["compile_s"] += first_call_s if method != "eager" else 0.0
            entry: dict[str, Any] = {"first_call_s": first_call_s}
            if timing:
                l2 = torch.cuda.get_device_properties(0).L2_cache_size
                copies = [tuple(a.clone() for a in args)
                          for _ in range(input_copies(program.bytes_per_call(length), l2))]
                times, entry["timing"] = kernel_ms({method: fn}, copies, samples=samples)
                entry["kernel_ms"] = times[method]
                del copies
            result["lengths"][str(length)] = entry
    result["graphs"] = int(counters["stats"]["unique_graphs"]) - graphs_before
    result["benchmarks"] = sum(len(r.timings) for r in records)
    result["autotuned_gemms"] = len(records)
    # Which GEMMs were autotuned (a pinned LUT should leave none): their input sizes as Inductor
    # saw them, symbols included, and how many choices each timed.
    result["autotuned"] = [{"op": r.op, "shapes": r.shapes, "choices": len(r.timings)} for r in records]
    if bucketed is not None:
        result["edges"] = list(bucketed.edges)
        result["buckets"] = sorted(str(b) for b in bucketed.seen)
    if handler is not None:
        ks_inductor.uninstall()
    return result


def _compiled(program: Program, method: str, lut: str | None, edges: tuple[int, ...] | None
              ) -> tuple[Any, Any, Any]:
    """(what to call, the installed handler or None, the Bucketed wrapper or None) for a method."""
    import torch

    import kernel_select.inductor as ks_inductor

    model = program.build()
    if method == "eager":
        return model, None, None
    if method == "default":
        return torch.compile(model), None, None
    if method == "max_autotune":
        return torch.compile(model, options=ks_inductor.max_autotune_options()), None, None
    if method == "stock_gemm":
        return torch.compile(model, options=ks_inductor.gemm_autotune_options(cudagraphs=False)), None, None
    # A strict range per bucket needs shape padding off (module doc); the one-graph methods keep it,
    # as a user who never bucketed would.
    strict = method in BUCKETED
    if method.startswith("topk4"):
        knobs = {"gemm_topk": 4} | ({} if strict else {"gemm_dynamic_m": f"{program.low}..{program.high}"})
        options = ks_inductor.max_autotune_options(**({"shape_padding": False} if strict else {}))
    else:
        knobs = {"kernel_lut_path": lut}
        options = ks_inductor.gemm_autotune_options(cudagraphs=False, shape_padding=False)
    handler = ks_inductor.install(**knobs)
    compiled = torch.compile(model, options=options)
    if not strict:
        return compiled, handler, None
    wrapper = ks_inductor.bucketed(compiled, program.dims, edges=edges)
    return wrapper, handler, wrapper


# -- the run ----------------------------------------------------------------------------------------

def _in_subprocess(program: Program, method: str, args: argparse.Namespace, lut: str | None,
                   edges: tuple[int, ...] | None, cache: Path, log_dir: Path, *, warm: bool,
                   timeout_s: float) -> dict[str, Any]:
    """One worker process, its Inductor and Triton caches in `cache` (empty on the first run)."""
    command = [sys.executable, "-m", "kernel_select.offline.serving.serving_bench", "--worker", method,
               "--program", program.name, "--samples", str(args.samples)]
    command += (["--lut", lut] if lut else []) + (["--edges", ",".join(map(str, edges))] if edges else [])
    command += ["--no-timing"] if warm else []
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{method}{'_warm' if warm else ''}.log"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr or b""
        log.write_text(stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr)
        return {"error": f"timed out after {timeout_s:.0f} s"}
    log.write_text(done.stderr)  # Inductor's AUTOTUNE tables, warnings
    if done.returncode != 0:
        stderr = done.stderr.strip()
        return {"error": stderr.splitlines()[-1] if stderr else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pretune(program: Program, lut: Path, args: argparse.Namespace, cache: Path, log_dir: Path,
             timeout_s: float) -> dict[str, Any]:
    """`kernel-select pretune` on the program's compiled graph, in its own process and caches."""
    command = [sys.executable, "-m", "kernel_select.cli", "pretune", "--network", program.factory,
               "--out", str(lut), "--gemm-topk", str(args.pretune_k), "--points", str(args.pretune_points),
               "--refine", str(args.pretune_refine), "--json"]
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "TRITON_CACHE_DIR": str(cache / "triton")}
    start = time.perf_counter()
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"pretune did not finish in {timeout_s:.0f} s (a rerun resumes from "
                         f"{lut.name}.progress.json)"}
    (log_dir / "pretune.log").write_text(done.stderr)
    if done.returncode != 0:
        last = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"
        return {"error": f"pretune failed: {last}"}
    summary = json.loads(done.stdout)
    return {"pretune_s": time.perf_counter() - start, "lut": str(lut), "entries": summary["entries"],
            "gemm_dynamic_buckets": summary["gemm_dynamic_buckets"], "sites": summary["sites"]}


def measure(program: Program, args: argparse.Namespace, out: Path,
            done: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pretune if needed, then every method (and its warm run) in its own process, within
    `--max-seconds`; methods left when the budget is spent are recorded as skipped.

    `done`: an earlier run's results for the same program (`--resume`): its methods measured
    without an error are kept as they are, and its pinned LUT is served again rather than pretuned
    anew, so a measurement split over several runs compares the methods on one LUT."""
    deadline = time.monotonic() + args.max_seconds if args.max_seconds else None
    log_dir = out.with_name(out.stem + "_logs")
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    kept = {m: r for m, r in (done or {}).get("methods", {}).items() if "error" not in r}
    lut, pretuned = args.lut, None
    if lut is None and done and done.get("lut") and Path(done["lut"]).is_file():
        lut, pretuned = done["lut"], done.get("pretune")
    with tempfile.TemporaryDirectory(prefix="serving-") as tmp:
        if lut is None and any(m in PINNED for m in methods):
            lut = str(out.with_name(out.stem + "_pinned_lut.json"))
            left = deadline - time.monotonic() if deadline else METHOD_TIMEOUT_S
            pretuned = _pretune(program, Path(lut), args, Path(tmp) / "pretune", log_dir,
                                timeout_s=min(METHOD_TIMEOUT_S, max(left, 1)))
            if "error" in pretuned:
                lut = None
        edges = args.edges if args.edges is not None else default_edges(program)
        per_method: dict[str, dict[str, Any]] = dict(kept)
        for method in methods:
            if method in kept:
                continue
            left = deadline - time.monotonic() if deadline else METHOD_TIMEOUT_S
            if left < 30:
                per_method[method] = {"error": "skipped: the run's time budget (--max-seconds) was spent"}
                continue
            if method in PINNED and lut is None:
                per_method[method] = {"error": f"no pinned LUT ({pretuned['error'] if pretuned else 'none'})"}
                continue
            cache = Path(tmp) / method
            method_edges = edges if method == "topk4_buckets" else None
            result = _in_subprocess(program, method, args, lut, method_edges, cache, log_dir, warm=False,
                                    timeout_s=min(METHOD_TIMEOUT_S, left))
            left = deadline - time.monotonic() if deadline else METHOD_TIMEOUT_S
            warm_wanted = method in args.warm.split(",") or (args.warm == "all" and method != "eager")
            if warm_wanted and "error" not in result and left >= 30:
                warm = _in_subprocess(program, method, args, lut, method_edges, cache, log_dir, warm=True,
                                      timeout_s=min(METHOD_TIMEOUT_S, left))
                result["warm"] = {key: warm[key] for key in ("compile_s", "benchmarks", "graphs", "error")
                                  if key in warm}
            per_method[method] = result
    return {"per_method": per_method, "lut": lut, "pretune": pretuned}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", choices=sorted(PROGRAMS), default="seed")
    parser.add_argument("--out", default="results/serving_h100.json")
    parser.add_argument("--methods", default=",".join(DEFAULT_METHODS),
                        help=f"comma-separated, of {', '.join(METHODS)} (default: %(default)s)")
    parser.add_argument("--warm", default="", metavar="METHODS",
                        help="comma-separated methods (or 'all') to run again with the Triton cache "
                             "their first run left")
    parser.add_argument("--lut", default=None,
                        help="pinned LUT to serve with (default: pretune one next to --out)")
    parser.add_argument("--edges", default=None,
                        help="bucket edges for topk4_buckets (default: three log-spaced buckets)")
    parser.add_argument("--pretune-k", type=int, default=2,
                        help="pretune's --gemm-topk (default: %(default)s)")
    parser.add_argument("--pretune-points", type=int, default=5,
                        help="pretune's --points (default: %(default)s)")
    parser.add_argument("--pretune-refine", type=int, default=1,
                        help="pretune's --refine (default: %(default)s)")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="the run's budget: methods not started by then are recorded as skipped")
    parser.add_argument("--harness", default=None,
                        help="bench parquet of --harness-shapes: best_ms per length from the harness (seed)")
    parser.add_argument("--harness-shapes", default=None, metavar="PATH",
                        help="write the seed step's GEMMs at every length as a bench shapes file and exit")
    parser.add_argument("--resume", action="store_true",
                        help="keep the methods an existing --out measured without an error, and its "
                             "pinned LUT; measure the rest")
    parser.add_argument("--reassemble", action="store_true",
                        help="measure nothing: recompute best_ms of an existing --out from --harness")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    parser.add_argument("--no-timing", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    program = PROGRAMS[args.program]
    if args.edges is not None:
        from kernel_select.options import parse_dynamic_buckets

        args.edges = parse_dynamic_buckets(args.edges, source="--edges")
    if args.worker:
        print(json.dumps(run_method(program, args.worker, args.lut, args.samples, edges=args.edges,
                                    timing=not args.no_timing)))
        return 0
    if args.harness_shapes:
        Path(args.harness_shapes).write_text(json.dumps(harness_shapes(), indent=1) + "\n")
        return 0
    unknown = [m for m in args.methods.split(",") if m.strip() and m.strip() not in METHODS]
    if unknown:
        parser.error(f"--methods: unknown {', '.join(unknown)}; choose from {', '.join(METHODS)}")
    out = Path(args.out)
    harness = _harness(args.harness) if args.harness else None
    if args.reassemble:
        if not args.harness:
            parser.error("--reassemble needs --harness")
        old = json.loads(out.read_text())
        program = PROGRAMS[old.get("program_name", "seed")]
        results = old | serving_report.assemble(old["methods"], harness, program)
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        done = json.loads(out.read_text()) if args.resume and out.is_file() else None
        if done is not None and done.get("program_name", "seed") != program.name:
            parser.error(f"--resume: {out} holds the {done.get('program_name')} program, not {program.name}")
        measured = measure(program, args, out, done)
        results = (serving_report.assemble(measured["per_method"], harness, program)
                   | {"lut": measured["lut"], "pretune": measured["pretune"]})
    out.write_text(json.dumps(results, indent=2) + "\n")
    try:
        serving_report.plot(results, out.with_suffix(".png"))
    except ImportError as exc:  # a GPU machine without matplotlib: the JSON has everything
        print(f"serving_bench: no plot ({exc})", file=sys.stderr)
    keys = ("compile_s", "compile_warm_s", "graphs", "benchmarks", "error")
    print(json.dumps({m: {k: r.get(k) for k in keys} for m, r in results["methods"].items()}, indent=2))
    return 0


def _harness(path: str) -> dict[str, float]:
    from kernel_select.offline.data import dataset

    return harness_best(dataset.read(path))


if __name__ == "__main__":
    sys.exit(main())
