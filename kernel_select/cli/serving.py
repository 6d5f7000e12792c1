"""`kernel-select pretune` and `kernel-select record`: LUTs for serving without autotuning."""

from __future__ import annotations

import argparse
import json

from kernel_select.cli.common import (
    Subparsers,
    int_at_least,
    output_file,
    printable,
    readable_json,
    require_gpu,
)


def register(sub: Subparsers) -> None:
    q = sub.add_parser("pretune", help="benchmark a model's GEMMs per M bucket and write a pinned LUT",
                       description="Discover every GEMM a model runs (or read a shapes file), benchmark "
                                   "the model's top-k per GEMM and M bucket with Inductor's autotuner "
                                   "(caches off; where the cuBLAS gate skips Triton, ATen is pinned "
                                   "unbenchmarked), "
                                   "and write a LUT of pinned entries: serving then "
                                   "benchmarks nothing. Resumable: measurements are kept in "
                                   "OUT.progress.json.")
    source = q.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", metavar="MODULE:FACTORY",
                        help="a factory returning (module, example_inputs, {input_index: (dim, low, high)})")
    source.add_argument("--shapes", metavar="FILE",
                        help='JSON list of {"op", "dtype", "n", "m", "k"[, "layout": "nn" / "nt" / "tn" / '
                             '"tt"]}; m or k (not both) may be {"min", "max"}, the dynamic size')
    q.add_argument("--out", type=output_file, required=True, help="the LUT to write")
    q.add_argument("--backward", action="store_true", help="also the GEMMs of the backward pass")
    q.add_argument("-k", type=int_at_least(1), default=4,
                   help="model-ranked configs per bucket (default: %(default)s)")
    q.add_argument("--buckets", type=int_at_least(1), default=5,
                   help="log-spaced values per dynamic range (default: %(default)s)")
    q.add_argument("--json", action="store_true", help="print a JSON summary")
    q.set_defaults(handler=run_pretune)

    q = sub.add_parser("record", help="write a LUT from Inductor's own autotuning of a model",
                       description="Compile the model with max-autotune (caches disabled for the run, "
                                   "restored after) and write every GEMM Inductor benchmarks into a LUT: "
                                   "pinned entries, or with --no-pin the fastest Triton configs.")
    q.add_argument("--model", metavar="MODULE:FACTORY", required=True,
                   help="a factory returning (module, example_inputs, {input_index: (dim, low, high)})")
    q.add_argument("--out", type=output_file, required=True,
                   help="the LUT to write (existing entries are kept)")
    q.add_argument("--backward", action="store_true", help="also compile and run the backward pass")
    q.add_argument("--no-pin", dest="pin", action="store_false", help="write benchmarked entries, not pins")
    q.add_argument("--top", type=int_at_least(1), default=4, help="configs per entry with --no-pin")
    q.add_argument("--json", action="store_true", help="print a JSON summary")
    q.set_defaults(handler=run_record)


def run_pretune(args: argparse.Namespace) -> int:
    from kernel_select import runtime
    from kernel_select.offline.serving import pretune

    if args.shapes:  # a bad file is reported before the GPU is looked for, as `bench` does
        from kernel_select.offline.json_files import SHAPES_FILE

        sites = pretune.load_shapes(readable_json(args.shapes, SHAPES_FILE))
    require_gpu("pretune")
    device = runtime.current_device()
    if args.model:
        module, inputs, dynamic = pretune.load_factory(args.model)
        sites = pretune.discover(module, inputs, dynamic, backward=args.backward)
    summary = pretune.pretune(sites, out=args.out, device=device, model=runtime.model(None, device), k=args.k,
                              points=args.buckets, progress=not args.json, **pretune.gate_settings(device))
    _report(summary, args.json, f"pinned {summary['entries']} GEMMs into {printable(summary['out'])}")
    return 0


def run_record(args: argparse.Namespace) -> int:
    import torch

    import kernel_select.inductor as ks_inductor
    from kernel_select.offline.serving import pretune

    require_gpu("record")
    module, inputs, dynamic = pretune.load_factory(args.model)
    for index, (dim, low, high) in dynamic.items():
        torch._dynamo.mark_dynamic(inputs[index], dim, min=low, max=high)
    with ks_inductor.record(args.out, pin=args.pin, top=args.top) as recording:
        torch._dynamo.reset()
        out = torch.compile(module, mode="max-autotune-no-cudagraphs")(*inputs)
        if args.backward:
            out.float().sum().backward()
        torch.cuda.synchronize()
    lut = recording.lut
    summary = {"out": args.out, "entries": lut.num_entries if lut else 0,
               "gemms_benchmarked": len(recording.feedback)}
    _report(summary, args.json,
            f"recorded {summary['gemms_benchmarked']} autotuned GEMMs into {printable(args.out)}")
    return 0


def _report(summary: dict, as_json: bool, line: str) -> None:
    print(json.dumps(summary, indent=2) if as_json else line)
