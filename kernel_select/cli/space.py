"""`kernel-select space`: the configs Inductor would consider for one problem."""

from __future__ import annotations

import argparse
import json

from kernel_select.cli import flags
from kernel_select.cli.common import Subparsers, add_problem_args, printable, say, torch_version


def register(sub: Subparsers) -> None:
    p = sub.add_parser("space", help="list the configs Inductor would consider for a problem",
                       description="Count and list the Triton mm configs of Inductor's DEFAULT or "
                                   "EXHAUSTIVE space for one problem, scaled, deduplicated, "
                                   "spill-pruned and shared-memory-pruned for the device.")
    add_problem_args(p)
    p.add_argument("--search-space", type=flags.word, choices=("default", "exhaustive"), default="exhaustive",
                   help="Inductor's DEFAULT or EXHAUSTIVE space (any case; default: %(default)s)")
    p.add_argument("--torch-version", type=torch_version, default=None,
                   help="Inductor version whose DEFAULT list to use (default: the installed torch)")
    flags.add_json(p, "the configs")
    p.set_defaults(handler=run_space)


def run_space(args: argparse.Namespace) -> int:
    from kernel_select.cli.devices import device_text, serving_device
    from kernel_select.problem import Problem
    from kernel_select.space import for_problem

    problem = Problem(args.m, args.n, args.k, args.dtype)
    device, origin = serving_device(args.device)
    configs = for_problem(problem, device, args.search_space, args.torch_version)
    if args.json:
        say(json.dumps({"problem": str(problem), "device": device.key, "search_space": args.search_space,
                        "count": len(configs), "configs": [c.model_dump() for c in configs]}))
        return 0
    say(f"{problem} on {printable(device_text(device, origin))}: {len(configs)} {args.search_space} configs")
    for config in configs:
        say(f"  {config.short()}")
    return 0
