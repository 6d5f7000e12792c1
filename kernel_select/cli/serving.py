"""`kernel-select pretune` and `kernel-select record`: LUTs for serving without autotuning."""

from __future__ import annotations

import argparse
import json
import os

from kernel_select.atomic_write import check_writable
from kernel_select.cli import flags
from kernel_select.cli.common import (
    Subparsers,
    int_at_least,
    load_lut_file,
    non_negative_float,
    printable,
    readable_json,
    require_gpu,
    say,
)
from kernel_select.cli.devices import model_line
from kernel_select.cli.outputs import output_file
from kernel_select.offline.serving.crossovers import DEFAULT_REFINE, DEFAULT_TOLERANCE


def register(sub: Subparsers) -> None:
    q = sub.add_parser("pretune", help="benchmark a model's GEMMs per length bucket, write a pinned LUT",
                       description="Find the GEMMs Inductor lowers for a model (its compiled graph, the "
                                   "length marked dynamic over its range) or read a shapes file, benchmark "
                                   "the model's top-k per GEMM at a spread of lengths with Inductor's "
                                   "autotuner (caches off; where the cuBLAS decision skips Triton, ATen is "
                                   "pinned unbenchmarked), split the lengths into buckets where a best "
                                   "choice changes, and write a LUT of pinned entries, one per GEMM and "
                                   "bucket: serving one graph per bucket then benchmarks nothing. "
                                   "Resumable: measurements are kept in OUT.progress.json.")
    source = q.add_mutually_exclusive_group(required=True)
    flags.add_network(source, help="the network: a factory returning (module, example_inputs, "
                                   "{input_index: (dim, low, high)})")
    source.add_argument("--shapes", metavar="FILE",
                        help='JSON list of {"op", "dtype", "n", "m", "k"[, "layout": "nn" / "nt" / "tn" / '
                             '"tt"]}; m or k (not both) may be {"min", "max"}, the dynamic size')
    q.add_argument("--out", type=output_file, required=True, help="the LUT to write")
    q.add_argument("--backward", action="store_true", help="also the GEMMs of the backward pass")
    q.add_argument("--eager", action="store_true",
                   help="find the GEMMs in an eager run rather than the compiled graph (no epilogues)")
    flags.add_gemm_topk(q, type=flags.gemm_topk_count, old=("-k",),
                        what="model-ranked configs benchmarked per length: a count")
    points = q.add_argument("--points", dest="points", type=int_at_least(1), default=5,
                            help="log-spaced lengths timed per length range before refining (default: "
                                 "%(default)s)")
    flags.deprecate(q, "--buckets", points)
    q.add_argument("--tolerance", type=non_negative_float, default=DEFAULT_TOLERANCE,
                   help="how far from each length's best a bucket's pin may be (default: %(default)s)")
    q.add_argument("--refine", type=int_at_least(0), default=DEFAULT_REFINE,
                   help="rounds of timing the middle of every gap between buckets (default: %(default)s)")
    flags.add_json(q, "the summary")
    q.set_defaults(handler=run_pretune)

    q = sub.add_parser("record", help="write a LUT from Inductor's own autotuning of a model",
                       description="Compile the model with max-autotune (caches disabled for the run, "
                                   "restored after) and write every GEMM Inductor benchmarks into a LUT: "
                                   "pinned entries, or with --no-pin the fastest Triton configs.")
    flags.add_network(q.add_mutually_exclusive_group(required=True),
                      help="the network: a factory returning (module, example_inputs, "
                           "{input_index: (dim, low, high)})")
    q.add_argument("--out", type=output_file, required=True,
                   help="the LUT to write (existing entries are kept)")
    q.add_argument("--backward", action="store_true", help="also compile and run the backward pass")
    q.add_argument("--no-pin", dest="pin", action="store_false", help="write benchmarked entries, not pins")
    flags.add_gemm_topk(q, type=flags.gemm_topk_count, old=("--top",),
                        what="configs per entry with --no-pin: a count")
    flags.add_json(q, "the summary")
    q.set_defaults(handler=run_record)


def run_pretune(args: argparse.Namespace) -> int:
    from kernel_select import runtime
    from kernel_select.offline.serving import discovery, pretune
    from kernel_select.offline.serving.progress import progress_path

    check_writable(progress_path(args.out))  # the measurements are kept there: checked before them
    if args.shapes:  # a bad file is reported before the GPU is looked for, as `bench` does
        from kernel_select.offline.json_files import SHAPES_FILE

        sites = discovery.load_shapes(readable_json(args.shapes, SHAPES_FILE))
    require_gpu("pretune")
    device = runtime.current_device()
    if args.network:
        module, inputs, dynamic = discovery.load_factory(args.network)
        find = discovery.discover if args.eager else discovery.discover_compiled
        sites = find(module, inputs, dynamic, backward=args.backward)
    say(model_line(device), stderr=True)
    summary = pretune.pretune(sites, out=args.out, device=device, model=runtime.model(None, device),
                              k=args.gemm_topk,
                              points=args.points, progress=not args.json, tolerance=args.tolerance,
                              refine=args.refine, **pretune.gate_settings(device))
    edges = summary["gemm_dynamic_buckets"]
    buckets = f"; length buckets begin at {', '.join(map(str, edges))}" if edges else ""
    _report(summary, args.json, f"pinned {summary['entries']} entries for {len(sites)} GEMMs into "
                                f"{printable(summary['out'])}{buckets}")
    return 0


def run_record(args: argparse.Namespace) -> int:
    if os.path.exists(args.out):  # its entries are kept: a broken table fails here, not after the compile
        load_lut_file(args.out)
    import torch

    import kernel_select.inductor as ks_inductor
    from kernel_select.offline.serving import discovery

    require_gpu("record")
    module, inputs, dynamic = discovery.load_factory(args.network)
    for index, (dim, low, high) in dynamic.items():
        torch._dynamo.mark_dynamic(inputs[index], dim, min=low, max=high)
    with ks_inductor.record(args.out, pin=args.pin, top=args.gemm_topk) as recording:
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
    say(json.dumps(summary, indent=2) if as_json else line)
