"""`kernel-select topk` and `kernel-select demo`: the configs worth benchmarking, LUT first."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_select.cli.common import Subparsers, add_k_arg, add_problem_args, load_lut_file, parse_k
from kernel_select.layouts import DEFAULT_LAYOUT, LAYOUTS

if TYPE_CHECKING:
    from kernel_select.problem import Problem
    from kernel_select.select import Choice

#: The shipped lookup table for the demo, in luts/ (the repository's, or the installed package's copy).
DEFAULT_DEMO_LUT = "h100_seed.json"


def register_topk(sub: Subparsers) -> None:
    p = sub.add_parser("topk", help="print the k configs worth benchmarking for a problem",
                       description="Rank the problem's configs with a performance model and print the "
                                   "top k, lookup-table entries first (always kept, even beyond k).")
    add_problem_args(p)
    p.add_argument("--layout", choices=LAYOUTS, default=DEFAULT_LAYOUT,
                   help="operand layout, A then B ('t': stored transposed, as W in x @ W.t(); "
                        "default: %(default)s); -k auto takes its cap for one the model was not trained on")
    add_k_arg(p)
    p.add_argument("--lut", default=None, metavar="PATH",
                   help="lookup table JSON whose entries for the problem come first")
    p.add_argument("--model", default=None, metavar="NAME",
                   help="performance model, e.g. analytical or mlp (default: the best shipped for the "
                        "device: the trained model if there is one, else analytical)")
    p.add_argument("--search-space", choices=("default", "exhaustive"), default="exhaustive",
                   help="candidate configs to rank (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(handler=run_topk)


def register_demo(sub: Subparsers) -> None:
    p = sub.add_parser("demo", help="top-k configs for the seed problems, forward and backward",
                       description="Print the top-k configs for bf16 n=1280, k=3420 at m = 560, 1024, 2048 "
                                   "and the two backward GEMMs of each (dX: m x 3420 x 1280, dW: "
                                   "1280 x 3420 x m), ranked by the best model available, with the "
                                   "shipped lookup table's entries first.")
    p.add_argument("--device", default="h100", help="device spec (default: %(default)s)")
    add_k_arg(p)
    p.add_argument("--lut", default=None, metavar="PATH",
                   help=f"lookup table JSON (default: the shipped luts/{DEFAULT_DEMO_LUT}; "
                        "the demo runs without it when it is absent)")
    p.set_defaults(handler=run_demo)


def run_topk(args: argparse.Namespace) -> int:
    from kernel_select.knobs import AUTO
    from kernel_select.model import get_model, load_default
    from kernel_select.model.auto_topk import hedge_reason
    from kernel_select.problem import Problem
    from kernel_select.select import top_k
    from kernel_select.space import for_problem

    problem = Problem(args.m, args.n, args.k, args.dtype, layout=args.layout)
    k = parse_k(args.top_k)
    model = get_model(args.model, args.device) if args.model else load_default(args.device)
    lut = load_lut_file(args.lut) if args.lut else None
    candidates = for_problem(problem, model.device, args.search_space)
    choices = top_k(problem, k, lut=lut, model=model, candidates=candidates)
    decision = _gate_decision(problem, model)
    hedged = hedge_reason(model, problem) if k == AUTO else ""
    if args.json:
        print(json.dumps(_topk_payload(args, problem, model, len(candidates), choices, decision)))
        return 0
    print(f"{problem} on {model.device.key}: {len(choices)} of {len(candidates)} {args.search_space} configs")
    print(f"ranked by: {model.describe()}")
    if hedged:
        print(f"-k auto took its cap: {hedged}")
    _print_choices(choices)
    _print_cublas(model, problem, decision)
    return 0


def _topk_payload(args: argparse.Namespace, problem: Problem, model: Any, candidates: int,
                  choices: Sequence[Choice], decision: Any) -> dict[str, Any]:
    return {
        "problem": {"m": problem.m, "n": problem.n, "k": problem.k, "dtype": problem.dtype,
                    "op": problem.op, "layout": problem.layout},
        "device": model.device.key, "model": model.name, "model_description": model.describe(),
        "lut": args.lut, "search_space": args.search_space, "candidates": candidates,
        "choices": [{"rank": rank, "config": choice.config.model_dump(),
                     "predicted_ms": choice.predicted_ms, "source": choice.source}
                    for rank, choice in enumerate(choices, 1)],
        "predicted_cublas_ms": model.estimate_aten(problem),
        "cublas_gate": None if decision is None else {
            "predicted_cublas_over_triton": decision.predicted_ratio, "margin": decision.margin,
            "small_gemm": decision.small, "skips_triton": decision.prefers_cublas},
    }


def _gate_decision(problem: Problem, model: Any) -> Any:
    """The shipped cuBLAS gate's verdict at the configured margin; None when there is no gate or
    the gate is off (kernel_select.knobs.cublas_margin / TORCHINDUCTOR_GEMM_CUBLAS_MARGIN)."""
    from kernel_select import knobs
    from kernel_select.model.gate import load_default_gate

    if knobs.cublas_margin is None:
        return None
    gate = load_default_gate(model.device)
    if gate is None:
        return None
    return gate.decide(problem, knobs.cublas_margin, model.estimate_aten(problem))


def run_demo(args: argparse.Namespace) -> int:
    from kernel_select.model import load_default
    from kernel_select.select import top_k
    from kernel_select.space import for_problem

    k = parse_k(args.top_k)
    model = load_default(args.device)
    from kernel_select.resources import shipped_lut

    lut_path = Path(args.lut) if args.lut else shipped_lut(DEFAULT_DEMO_LUT)
    # An explicit --lut must exist; the shipped default is optional.
    lut = load_lut_file(str(lut_path)) if args.lut or lut_path.is_file() else None

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
        _print_cublas(model, problem, _gate_decision(problem, model))
    return 0


def _print_cublas(model: Any, problem: Problem, decision: Any) -> None:
    """The model's own cuBLAS prediction (where it has one) and the gate's verdict."""
    aten_ms = model.estimate_aten(problem)
    if aten_ms is not None:
        print(f"cuBLAS (ATen mm) predicted by the model: {aten_ms:.4f} ms")
    if decision is not None:
        print(decision.describe())


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
