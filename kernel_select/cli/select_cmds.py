"""`kernel-select topk` and `kernel-select demo`: what `select()` decides for a GEMM, printed."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_select import options
from kernel_select.cli import flags
from kernel_select.cli.common import (Subparsers, add_device_arg, add_problem_args, dimension, load_lut_file,
                                     printable, say)
from kernel_select.cli.devices import DEVICE_HELP
from kernel_select.layouts import DEFAULT_LAYOUT, LAYOUTS

if TYPE_CHECKING:
    from kernel_select.model import PerformanceModel
    from kernel_select.problem import Problem
    from kernel_select.decision import Selection

#: The shipped lookup table for the demo, in luts/ (the repository's, or the installed package's copy).
DEFAULT_DEMO_LUT = "h100_seed.json"


def _add_margin_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gemm-cublas-margin", default=None, metavar="FRACTION",
                        help="the cuBLAS decision's margin, or off (default: the gemm_cublas_margin knob, "
                             "0.15 unless set)")


def register_topk(sub: Subparsers) -> None:
    p = sub.add_parser("topk", help="print the configs worth benchmarking for a problem",
                       description="What the Inductor handler would offer for one GEMM: a LUT pin, else the "
                                   "LUT's entries and the model's best (gemm_topk in all), unless the cuBLAS "
                                   "decision prefers cuBLAS. The decision is for the GEMM alone: inside a "
                                   "compile a pointwise epilogue can also count.")
    add_problem_args(p)
    p.add_argument("--layout", type=flags.word, choices=LAYOUTS, default=DEFAULT_LAYOUT,
                   help="operand layout, A then B ('t': stored transposed, as W in x @ W.t(); default: "
                        "%(default)s)")
    p.add_argument("--batch", type=dimension, default=1,
                   help="batched GEMM (bmm) count (default: %(default)s)")
    flags.add_tf32(p)
    flags.add_gemm_topk(p, old=("-k",))
    _add_margin_arg(p)
    p.add_argument("--lut", default=None, metavar="PATH",
                   help="lookup table JSON whose pin, else entries, for the problem come first")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="performance model, e.g. analytical (default: the device's trained model)")
    p.add_argument("--search-space", type=flags.word, choices=("default", "exhaustive"), default="exhaustive",
                   help="candidate configs to rank (default: %(default)s)")
    flags.add_json(p, "the decision")
    p.set_defaults(handler=run_topk)


def register_demo(sub: Subparsers) -> None:
    p = sub.add_parser("demo", help="top-k configs for the seed problems, forward and backward",
                       description="Print the top-k configs for bf16 n=1280, k=3420 at m = 560, 1024, 2048 "
                                   "and the two backward GEMMs of each (dX: m x 3420 x 1280, dW: 1280 x 3420 "
                                   "x m), ranked by the device's trained model, with the shipped lookup "
                                   "table's entries first.")
    add_device_arg(p, f"the GPU: {DEVICE_HELP} (default: the GPU this runs on; h100 without one)")
    flags.add_gemm_topk(p, old=("-k",))
    _add_margin_arg(p)
    p.add_argument("--lut", default=None, metavar="PATH",
                   help=f"lookup table JSON (default: the shipped luts/{DEFAULT_DEMO_LUT}; the demo runs "
                        "without it when it is absent)")
    p.set_defaults(handler=run_demo)


def run_topk(args: argparse.Namespace) -> int:
    from kernel_select.problem import Problem
    from kernel_select.space import for_problem

    op = "bmm" if args.batch != 1 else "mm"
    problem = Problem(args.m, args.n, args.k, args.dtype, batch=args.batch, op=op, layout=args.layout,
                      tf32=args.tf32)
    model, serving = _model(args.model, args.device)
    lut = load_lut_file(args.lut) if args.lut else None
    candidates = for_problem(problem, model.device, args.search_space)
    if args.gemm_topk == options.SAME:
        return _passes_through(args, problem, model, serving)
    selection = _select(problem, model, args, lut, candidates)
    if args.json:
        say(json.dumps(_payload(args, model, serving, selection)))
        return 0
    say(f"{problem} on {serving['device']}: {len(selection.choices)} of {len(candidates)} "
        f"{args.search_space} configs")
    say(f"ranked by: {model.describe()}")
    if args.model is None:  # a model asked for by name is named on the line above
        say(serving["model"])
    _print_selection(model, selection)
    return 0


def run_demo(args: argparse.Namespace) -> int:
    from kernel_select.resources import shipped_lut
    from kernel_select.space import for_problem

    model, serving = _model(None, args.device)
    lut_path = Path(args.lut) if args.lut else shipped_lut(DEFAULT_DEMO_LUT)
    # An explicit --lut must exist; the shipped default is optional.
    lut = load_lut_file(str(lut_path)) if args.lut or lut_path.is_file() else None
    if args.gemm_topk == options.SAME:
        return _passes_through(args, None, model, serving)
    say(f"kernel-select demo: top {args.gemm_topk} Triton mm configs for the seed problems on "
        f"{serving['device']}")
    say(f"ranked by: {model.describe()}")
    say(serving["model"])
    shown = os.path.relpath(lut_path) if lut_path.is_relative_to(Path.cwd()) else str(lut_path)
    say(f"lookup table: {printable(shown)}" if lut is not None else
        f"lookup table: no LUT ({printable(shown)} not found)")
    for label, problem in _seed_problems():
        candidates = for_problem(problem, model.device, "exhaustive")
        say(f"\n{label:<14} {problem}  ({len(candidates)} candidates)")
        _print_selection(model, _select(problem, model, args, lut, candidates))
    return 0


def _model(name: str | None, device: str | None) -> tuple[PerformanceModel, dict[str, str]]:
    """The model ranking for `device` (None: the GPU this runs on), and the header's words for the
    device and the model: {"device": "h200 (detected)", "model": "model: h200 (calibrated, /path)"}."""
    from kernel_select import runtime
    from kernel_select.cli.devices import device_text, model_line, serving_device

    spec, origin = serving_device(device)
    model = runtime.model(name, spec)
    return model, {"device": device_text(spec, origin), "model": model_line(spec, name)}


def _passes_through(args: argparse.Namespace, problem: Problem | None, model: PerformanceModel,
                    serving: dict[str, str]) -> int:
    """gemm_topk SAME: the handler is off and Inductor benchmarks its own list; nothing to rank."""
    what = str(problem) if problem is not None else "the seed problems"
    line = (f"{what} on {serving['device']}: gemm_topk SAME leaves Inductor's own candidates in place; "
            "kernel_select ranks nothing")
    if args.json:
        say(json.dumps({"gemm_topk": options.SAME, "device": model.device.key, "choices": None}))
    else:
        say(line)
    return 0


def _select(problem: Problem, model: PerformanceModel, args: argparse.Namespace, lut: Any,
            candidates: list[Any]) -> Selection:
    """The handler's decision for `problem`, with the gate the handler would load."""
    from kernel_select import knobs, options, runtime
    from kernel_select.decision import select

    raw = args.gemm_cublas_margin if args.gemm_cublas_margin is not None else knobs.gemm_cublas_margin
    margin = options.parse_cublas_margin(raw, source="--gemm-cublas-margin")
    gate = runtime.gate(model.device) if margin is not None else None
    return select(problem, model=model, gemm_topk=args.gemm_topk, lut=lut, gate=gate,
                  cublas_margin=margin, candidates=candidates)


def _payload(args: argparse.Namespace, model: PerformanceModel, serving: dict[str, str],
             selection: Selection) -> dict[str, Any]:
    problem, cublas = selection.problem, selection.cublas
    pinned = selection.pinned
    return {
        "problem": {"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype,
                    "batch": problem.batch, "op": problem.op, "layout": problem.layout, "tf32": problem.tf32},
        "device": model.device.key, "device_origin": serving["device"], "model": model.name,
        "model_description": model.describe(), "model_source": serving["model"].removeprefix("model: "),
        "lut": args.lut, "search_space": args.search_space, "ranked": selection.ranked,
        "pinned": None if pinned is None else (pinned if isinstance(pinned, str) else pinned.model_dump()),
        "choices": [{"rank": rank, "config": choice.config.model_dump(), "predicted_ms": choice.predicted_ms,
                     "source": choice.source} for rank, choice in enumerate(selection.choices, 1)],
        "predicted_cublas_ms": model.estimate_aten(problem),
        "cublas_decision": None if cublas is None else {
            "source": cublas.source, "predicted_cublas_over_triton": cublas.predicted_ratio,
            "margin": cublas.margin, "small_gemm": cublas.small, "skips_triton": cublas.prefers_cublas,
            "one_choice": cublas.alone},
        "outside": selection.outside, "launch_bound": selection.launch_bound,
        "no_cublas_decision": selection.undecided, "auto_at_cap": selection.auto_at_cap,
    }


def _print_selection(model: PerformanceModel, selection: Selection) -> None:
    """The choices, the model's cuBLAS time and the cuBLAS decision, or the pin."""
    if selection.pinned is not None:
        pin = selection.pinned
        what = "ATen (cuBLAS)" if isinstance(pin, str) else pin.short()
        say(f"pinned by the lookup table to {what}: a compile uses it alone and benchmarks nothing")
        return
    if selection.launch_bound:
        say(f"outside the model's training data ({selection.outside}), but launch-bound: with --gemm-topk 1 "
            f"a compile takes the model's first config alone, no cuBLAS decision, nothing benchmarked")
    elif selection.outside:
        say(f"outside the model's training data ({selection.outside}): a compile benchmarks Inductor's own "
            f"configs beside these, and makes no cuBLAS decision")
    if selection.auto_at_cap:
        say(f"--gemm-topk auto took its cap: {selection.auto_at_cap}")
    if selection.choices:
        say(f"  {'rank':>4}  {'config':<22} {'predicted ms':>12}  source")
        for rank, choice in enumerate(selection.choices, 1):
            say(f"  {rank:>4}  {choice.config.short():<22} {choice.predicted_ms:>12.4f}  {choice.source}")
    aten_ms = model.estimate_aten(selection.problem)
    if aten_ms is not None:
        say(f"cuBLAS (ATen mm) predicted by the model: {aten_ms:.4f} ms")
    if selection.cublas is not None:
        say(selection.cublas.describe())
        if selection.skips_triton:
            say("(--gemm-cublas-margin off shows the model's top configs)")
    elif selection.undecided:
        say(f"no cuBLAS decision ({selection.undecided}): a compile benchmarks cuBLAS beside these")


def _seed_problems() -> list[tuple[str, Problem]]:
    from kernel_select.problem import Problem

    # Y[m, 1280] = X[m, 3420] @ W[3420, 1280]; backward: dX = dY @ W^T, dW = X^T @ dY.
    problems = []
    for m in (560, 1024, 2048):
        problems.append((f"m={m} fwd", Problem(m, 1280, 3420, "bfloat16")))
        problems.append((f"m={m} dX", Problem(m, 3420, 1280, "bfloat16")))
        problems.append((f"m={m} dW", Problem(1280, 3420, m, "bfloat16")))
    return problems
