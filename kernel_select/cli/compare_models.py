"""`kernel-select compare-models`: whole networks under eager, mode="default", stock max-autotune
and kernel_select; compile time and step time. Needs the optional `transformers` (extra `models`)."""

from __future__ import annotations

import argparse
from typing import Any

from kernel_select.cli.common import int_at_least, load_lut_file, positive_float, printable

_positive_int = int_at_least(1)




def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare-models", help="compile whole networks with each method: compile time and step time (GPU)",
        description="For every model (GPT-2 small, a 2-layer Llama-3-8B-width decoder, ViT-B/16, a "
                    "recommendation MLP tower; prefill, decode and a training step) and every method "
                    "(eager, default, stock max-autotune, kernel_select top-k, a pinned LUT), one "
                    "process with fresh caches compiles the model and times its step beside eager "
                    "(on a GPU also its device time, without the host launch time). "
                    "pinned-gemm first pretunes each model's GEMMs in a process of its own into "
                    "OUT/luts/<model>_<phase>.json (kept and reused) and serves that LUT at k = 1; "
                    "its pretune time is reported apart from its compile time (pretune_s). "
                    "Writes OUT/models_<device>.json (resumable) and OUT/models_<device>.png, and "
                    "prints a summary. Needs the transformers package (pip install 'kernel_select[models]').")
    p.add_argument("--models", default=None,
                   help="comma-separated models (gpt2-small/prefill) or architectures (gpt2-small); "
                        "default: all")
    p.add_argument("--methods", default=None,
                   help="comma-separated methods among eager, default, stock, topk-1, topk-4, topk-auto, "
                        "topk-4-parity, topk-4-inproc, stock-gemm, topk-4-gemm, topk-auto-gemm, lut, "
                        "pinned-gemm (pretunes each model first; GPU); default: all that apply")
    p.add_argument("--lut", default=None, help="lookup table for the 'lut' method (pinned, k = 1)")
    p.add_argument("--no-cudagraphs", action="store_true",
                   help="max-autotune methods without Inductor's CUDA graphs "
                        "(mode max-autotune-no-cudagraphs)")
    p.add_argument("--repeat", type=_positive_int, default=1,
                   help="measure every (model, method) this many times, for the run-to-run spread "
                        "(default: %(default)s)")
    p.add_argument("--samples", type=_positive_int, default=30,
                   help="timed samples per step, interleaved with eager's (default: %(default)s)")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default: %(default)s)")
    p.add_argument("--tiny", action="store_true", help="narrow, shallow versions of the models (smoke test)")
    p.add_argument("--out", default="results", help="output directory (default: %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=1800.0,
                   help="seconds allowed per worker process (default: %(default)s)")
    p.add_argument("--max-seconds", type=positive_float, default=None,
                   help="stop before a run that would not finish within this many seconds of the "
                        "whole comparison (judged by the method's longest run so far), and cut a worker "
                        "at the limit; --resume runs the rest (default: no limit)")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs in an existing OUT/models_<device>.json and add the missing ones")
    p.set_defaults(handler=run_compare_models)
    return p


def run_compare_models(args: argparse.Namespace) -> int:
    from kernel_select.offline.e2e import compare_models, model_report
    from kernel_select.offline.e2e.model_methods import MethodContext, select_methods
    from kernel_select.offline.e2e.model_zoo import parse_workloads, require_transformers

    models = parse_workloads(args.models)
    require_transformers(models)
    if args.lut is not None:  # the workers load it leniently (ignored if broken): fail here instead
        load_lut_file(args.lut)
    methods = select_methods(args.methods, MethodContext(lut=args.lut, cudagraphs=not args.no_cudagraphs))
    results, json_path, png_path = compare_models.run_compare_models(
        models, methods, out_dir=args.out, device=args.device, tiny=args.tiny, repeat=args.repeat,
        samples=args.samples, timeout_s=args.timeout, resume=args.resume, max_seconds=args.max_seconds,
        settings={"lut": args.lut, "cudagraphs": not args.no_cudagraphs})
    print(model_report.format_summary(model_report.summarize(results)))
    plot = f" and {png_path}" if png_path else " (no plot: matplotlib is not installed)"
    print(f"wrote {printable(json_path)}{plot}")
    return 0


register = add_parser  # the name the other command modules use
