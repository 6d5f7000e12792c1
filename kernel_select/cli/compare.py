"""`kernel-select compare`: stock max-autotune against the top-k handler on real torch.compile."""

from __future__ import annotations

import argparse

from kernel_select.cli import flags
from kernel_select.cli.common import (
    Subparsers,
    integer,
    load_lut_file,
    positive_float,
    printable,
    readable_file,
    readable_json,
    say,
    say_lines,
)
from kernel_select.cli.devices import torch_device_model_line
from kernel_select.cli.outputs import output_dir
from kernel_select.errors import OptionError


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
    flags.add_gemm_topk(p, default="1,2,4,8", type=str, old=("--topk",),
                        what="comma-separated gemm_topk values, one handler run each (counts, DEFAULT, auto)")
    nogate = p.add_argument("--nogate-gemm-topk", default="", metavar="TOPK",
                            help="comma-separated gemm_topk values to time again with the cuBLAS gate off "
                                 "(methods topk-K-nogate); default: none")
    flags.deprecate(p, "--nogate-topk", nogate)
    p.add_argument("--out", type=output_dir, default="results",
                   help="output directory (default: %(default)s)")
    p.add_argument("--exhaustive", action="store_true",
                   help="also time stock max-autotune with the EXHAUSTIVE search space (slow)")
    p.add_argument("--gemm-only", action="store_true",
                   help="compile every method with GEMM autotuning only (kernel_select.inductor."
                        "gemm_autotune_options: no pointwise autotuning, no coordinate descent, so "
                        "GEMVs stay on cuBLAS) in place of max-autotune's options")
    torch_device = p.add_argument("--torch-device", type=flags.torch_device, default="cuda",
                                  metavar="cuda[:N]",
                                  help="the CUDA device to time on (default: %(default)s)")
    flags.deprecate(p, "--device-index", torch_device, type=integer, convert=lambda index: f"cuda:{index}")
    p.add_argument("--lut", default=None,
                   help="kernel lookup table for the top-k runs (default: $TORCHINDUCTOR_KERNEL_LUT_PATH)")
    p.add_argument("--model", default=None,
                   help="registered performance model name (default: the device's trained model)")
    limit = p.add_argument("--worker-max-seconds", type=positive_float, default=1800.0,
                           help="seconds allowed per method's worker process (default: %(default)s)")
    flags.deprecate(p, "--timeout", limit)
    p.add_argument("--resume", action="store_true",
                   help="keep the measurements in an existing OUT/compare_<device>.json, add the missing")
    p.add_argument("--only", default=None, metavar="METHODS",
                   help="comma-separated methods to measure in this run, e.g. eager,stock (the others "
                        "keep earlier measurements; use with --resume)")
    p.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    from kernel_select.offline import compare
    from kernel_select.offline.json_files import SHAPES_FILE

    topks = compare.parse_topks(args.gemm_topk)
    nogate_topks = compare.parse_topks(args.nogate_gemm_topk) if args.nogate_gemm_topk.strip() else []
    device_index = _cuda_index(args.torch_device)
    if args.shapes is not None:  # a JSON or CSV file; the suite loader reads it by its suffix
        (readable_json if args.shapes.lower().endswith(".json") else readable_file)(args.shapes, SHAPES_FILE)
    if args.lut is not None:  # the workers load it leniently (ignored if broken): fail here instead
        load_lut_file(args.lut)
    cases = compare.load_cases(args.shapes)
    serving = torch_device_model_line(args.torch_device, args.model)
    if serving is not None:  # the handler in each worker ranks with it
        say(serving, stderr=True)
    only = [name.strip().lower() for name in args.only.split(",") if name.strip()] if args.only else None
    results, json_path, png_path = compare.run_compare(
        cases, out_dir=args.out, topks=topks, exhaustive=args.exhaustive, nogate_topks=nogate_topks,
        device_index=device_index, lut=args.lut, model=args.model, timeout_s=args.worker_max_seconds,
        shapes=args.shapes, resume=args.resume, only=only, gemm_only=args.gemm_only)
    say_lines(compare.format_summary(compare.summarize(results)))
    plot = f" and {png_path}" if png_path else " (no plot: matplotlib is not installed)"
    say(f"wrote {printable(json_path)}{plot}")
    return 0


def _cuda_index(torch_device: str) -> int:
    """The CUDA index of --torch-device ("cuda" is 0); compare times on a GPU only."""
    kind, _, index = torch_device.partition(":")  # checked by flags.torch_device: cuda, cuda:N or cpu
    if kind != "cuda":
        raise OptionError(f"compare: --torch-device: compare times on a GPU; expected cuda or cuda:N, got "
                          f"{torch_device!r}")
    return int(index or 0)
