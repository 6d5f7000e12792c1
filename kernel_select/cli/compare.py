"""`kernel-select compare`: stock max-autotune against the top-k handler on real torch.compile."""

from __future__ import annotations

import argparse

from kernel_select.cli.common import (
    Subparsers,
    integer,
    load_lut_file,
    positive_float,
    printable,
    readable_file,
    readable_json,
)


def register(sub: Subparsers) -> None:
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
    p.add_argument("--gemm-only", action="store_true",
                   help="compile every method with GEMM autotuning only (kernel_select.inductor."
                        "gemm_autotune_options: no pointwise autotuning, no coordinate descent, so "
                        "GEMVs stay on cuBLAS) in place of max-autotune's options")
    p.add_argument("--device-index", type=integer, default=0,
                   help="CUDA device to use (default: %(default)s)")
    p.add_argument("--lut", default=None,
                   help="kernel lookup table for the top-k runs (default: $TORCHINDUCTOR_KERNEL_LUT_PATH)")
    p.add_argument("--model", default=None, help="registered model name (default: the best shipped model)")
    p.add_argument("--timeout", type=positive_float, default=1800.0,
                   help="seconds allowed per method's worker process (default: %(default)s)")
    p.add_argument("--resume", action="store_true",
                   help="keep the measurements in an existing OUT/compare_<device>.json, add the missing")
    p.add_argument("--only", default=None, metavar="METHODS",
                   help="comma-separated methods to measure in this run, e.g. eager,stock (the others "
                        "keep earlier measurements; use with --resume)")
    p.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from kernel_select.offline import compare
    from kernel_select.offline.json_files import SHAPES_FILE

    topks = compare.parse_topks(args.topk)
    nogate_topks = compare.parse_topks(args.nogate_topk) if args.nogate_topk.strip() else []
    if args.shapes is not None:  # a JSON or CSV file; the suite loader reads it by its suffix
        (readable_json if args.shapes.lower().endswith(".json") else readable_file)(args.shapes, SHAPES_FILE)
    if args.lut is not None:  # the workers load it leniently (ignored if broken): fail here instead
        load_lut_file(args.lut)
    cases = compare.load_cases(args.shapes)
    only = [name.strip() for name in args.only.split(",") if name.strip()] if args.only else None
    results, json_path, png_path = compare.run_compare(
        cases, out_dir=args.out, topks=topks, exhaustive=args.exhaustive, nogate_topks=nogate_topks,
        device_index=args.device_index, lut=args.lut, model=args.model, timeout_s=args.timeout,
        shapes=args.shapes, resume=args.resume, only=only, gemm_only=args.gemm_only)
    print(compare.format_summary(compare.summarize(results)))
    plot = f" and {png_path}" if png_path else " (no plot: matplotlib is not installed)"
    print(f"wrote {printable(json_path)}{plot}")
    return 0
