"""`kernel-select compare-models`: whole networks, the zoo's or the user's own (`--network`), under
mode="default", Inductor's GEMM autotuning, stock max-autotune and kernel_select; compile time,
autotuning time and step time. The zoo's networks need the optional `transformers` (extra `models`)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from kernel_select.cli import flags
from kernel_select.cli.common import int_at_least, load_lut_file, positive_float, printable, say, say_lines
from kernel_select.cli.devices import torch_device_model_line
from kernel_select.cli.outputs import output_dir
from kernel_select.errors import OptionError

_positive_int = int_at_least(1)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "compare-models", help="compile whole networks with each method: compile time and step time (GPU)",
        description="For every network and every method, one process with fresh caches compiles the "
                    "network and times its step beside eager (on a GPU also its device time, without the "
                    "host launch time). Networks: the zoo's (--networks: GPT-2 small, Llama-shaped "
                    "decoders, ViT-B/16, a recommendation MLP tower, a BERT-style masked LM with eager "
                    "attention in bf16 and fp32, a T5-style encoder-decoder, a ConvNeXt-style CNN, a "
                    "Swin-style window-attention network, a Whisper-style speech encoder, a Qwen3-MoE-style "
                    "decoder; "
                    "prefill, "
                    "decode and training steps) or your own (--network package.module:factory). "
                    "Every table gives each method's compile time, its autotuning time (compile time minus "
                    "default's on the same network), and its compile and step time over stock-gemm's "
                    "(Inductor's own GEMM autotuning, the same options as kernel_select's recipe), "
                    "stock's (mode max-autotune) and default's, where those were run. "
                    "pinned-gemm first pretunes each network's GEMMs in a process of its own into "
                    "OUT/luts/<model>_<phase>.json (kept and reused) and serves that LUT at k = 1; "
                    "its pretune time is reported apart from its compile time (pretune_s). "
                    "Writes OUT/models_<device>.json (resumable) and OUT/models_<device>.png, and "
                    "prints a summary and a line per network and method (with the GEMMs Inductor "
                    "autotuned out of those it lowered). The zoo needs the transformers "
                    "package (pip install 'kernel_select[models]').")
    networks = p.add_argument(
        "--networks", type=flags.word, default=None,
        help="comma-separated zoo workloads (gpt2-small/prefill) or architectures (gpt2-small); "
             "default: all of them, or none when --network is given")
    flags.deprecate(p, "--models", networks)
    flags.add_network(p, append=True,
                      help="your own network: a callable named by import path (package.module:function, "
                           "importable from the working directory or PYTHONPATH) that takes no arguments and "
                           "returns (module, inputs), inputs a tuple of positional arguments, a dict of "
                           "keyword arguments or one tensor, or a kernel_select.offline.e2e.user_model."
                           "UserModel; the module and the input tensors are moved to --torch-device, dtypes "
                           "kept; its inference step is timed (repeatable)")
    p.add_argument("--train", action="store_true",
                   help="time each --network network's training step instead (forward, loss, backward, AdamW "
                        "step; the loss: UserModel.loss, else a scalar output, else its .loss, else the "
                        "mean of its first tensor)")
    p.add_argument("--methods", type=flags.word, default=None,
                   help="comma-separated methods among eager, default, stock, topk-1, topk-4, topk-auto, "
                        "topk-4-parity, topk-4-inproc, stock-gemm, topk-4-gemm, topk-4-gemm-no-inproc, "
                        "topk-auto-gemm, install-gemm (a bare install(), the knobs' defaults, with "
                        "topk-4-gemm's options), zero-gemm "
                        "(gemm_topk=1 with topk-4-gemm's options: one choice per GEMM the cuBLAS decision "
                        "can decide, nothing benchmarked there), lut, "
                        "pinned-gemm (pretunes each model first; GPU), or 'all' (every one that applies); "
                        "default: default,stock-gemm,topk-4-gemm (topk-4-gemm is the README's recipe; "
                        "every process times eager beside its own step)")
    p.add_argument("--lut", default=None, help="lookup table for the 'lut' method (pinned, k = 1)")
    p.add_argument("--no-cudagraphs", action="store_true",
                   help="max-autotune methods without Inductor's CUDA graphs "
                        "(mode max-autotune-no-cudagraphs)")
    p.add_argument("--repeat", type=_positive_int, default=1,
                   help="measure every (model, method) this many times, for the run-to-run spread "
                        "(default: %(default)s)")
    p.add_argument("--samples", type=_positive_int, default=30,
                   help="timed samples per step, interleaved with eager's (default: %(default)s)")
    torch_device = p.add_argument("--torch-device", type=flags.torch_device, default="cuda",
                                  metavar="DEVICE",
                                  help="where the networks run: cuda, cuda:N or cpu (default: %(default)s)")
    flags.deprecate(p, "--device", torch_device)
    p.add_argument("--tiny", action="store_true",
                   help="narrow, shallow versions of the zoo's networks (smoke test; --network networks are "
                        "as their factory builds them)")
    p.add_argument("--out", type=output_dir, default="results",
                   help="output directory (default: %(default)s)")
    limit = p.add_argument("--worker-max-seconds", type=positive_float, default=1800.0,
                           help="seconds allowed per worker process (default: %(default)s)")
    flags.deprecate(p, "--timeout", limit)
    p.add_argument("--max-seconds", type=positive_float, default=None,
                   help="stop before a run that would not finish within this many seconds of the "
                        "whole comparison (judged by the method's longest run so far), and cut a worker "
                        "at the limit; --resume runs the rest (default: no limit)")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs in an existing OUT/models_<device>.json and add the missing ones")
    p.set_defaults(handler=run_compare_models)
    return p


def run_compare_models(args: argparse.Namespace) -> int:
    from kernel_select.offline.e2e import compare_models, model_report, model_tables
    from kernel_select.offline.e2e.model_methods import MethodContext, select_methods
    from kernel_select.offline.e2e.workloads import check_factories, require_transformers, select_workloads

    if args.train and not args.network:
        raise OptionError("--train times a --network network's training step; give --network "
                          "package.module:factory (the zoo's own are named like gpt2-small/train)")
    # The workers run `python -m`, which puts the working directory first on sys.path; the
    # `kernel-select` script does not, so a factory found there by a worker is found here too.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    models = select_workloads(args.networks, args.network, train=args.train)
    require_transformers(models)
    if args.lut is not None:  # the workers load it leniently (ignored if broken): fail here instead
        load_lut_file(args.lut)
    methods = select_methods(args.methods, MethodContext(lut=args.lut, cudagraphs=not args.no_cudagraphs))
    check_factories(args.network)
    serving = torch_device_model_line(args.torch_device)
    if serving is not None:  # the handler in each worker ranks with it
        say(serving, stderr=True)
    results, json_path, png_path = compare_models.run_compare_models(
        models, methods, out_dir=args.out, device=args.torch_device, tiny=args.tiny, repeat=args.repeat,
        samples=args.samples, timeout_s=args.worker_max_seconds, resume=args.resume,
        max_seconds=args.max_seconds,
        settings={"lut": args.lut, "cudagraphs": not args.no_cudagraphs})
    say_lines(model_tables.format_summary(model_report.summarize(results)))
    say("")
    say_lines(model_tables.format_models(results))
    plot = f" and {png_path}" if png_path else " (no plot: matplotlib is not installed)"
    say(f"wrote {printable(json_path)}{plot}")
    return 1 if compare_models.every_run_failed(results) else 0  # nothing measured: not a success


register = add_parser  # the name the other command modules use
