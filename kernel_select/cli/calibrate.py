"""`kernel-select calibrate`: train a model for this GPU from a few minutes of its own measurements."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from typing import TYPE_CHECKING

from kernel_select.cli import flags
from kernel_select.cli.common import (Subparsers, add_device_arg, int_at_least, positive_float, require_gpu,
                                     say, say_lines)
from kernel_select.cli.devices import DEVICE_HELP, FALLBACK_DEVICE
from kernel_select.cli.outputs import check_output_dir, output_dir
from kernel_select.errors import OptionError

if TYPE_CHECKING:
    from kernel_select.offline.calibrate.run import CalibrateOptions


def register(sub: Subparsers) -> None:
    from kernel_select.offline.calibrate.budget import DEFAULT_MINUTES  # free of torch: --help stays light

    p = sub.add_parser("calibrate", help="measure this GPU for a few minutes and train its own model",
                       description="Plan problems that reuse compiled kernels and cover the dtypes, M "
                                   "buckets, N and K alignments, layouts and batched GEMMs of the domain, "
                                   "the compile classes where the starting model is least sure first "
                                   "(--plan-only prints the plan); time them with the benchmark harness "
                                   "within --max-seconds; fine-tune the nearest "
                                   "trained model on them (or train from scratch) and keep its members "
                                   "beside the fine-tuned ones; score it on the "
                                   "measured problems held out from training; and write the model into "
                                   "the user's model directory, where kernel_select finds it for this GPU "
                                   "before any shipped model. A killed run resumes its measurements when "
                                   "run again (training starts over). Needs a CUDA GPU, except with "
                                   "--plan-only.")
    budget = p.add_argument(
        "--max-seconds", type=positive_float, default=DEFAULT_MINUTES * 60.0,
        help="the whole run's wall time in seconds: planning, measuring (compile included; a hard bound), "
             "training and scoring (default: %(default)g; 900 cover every stratum of the domain with 15 "
             "compile workers, less the classes first in the order)")
    flags.deprecate(p, "--minutes", budget, convert=flags.minutes_as_seconds)
    p.add_argument("--from", dest="start", default="auto", metavar="DEVICE|auto|none",
                   help="the model to fine-tune: auto (default): the trained model of this GPU or of its SM "
                        "architecture, else none; none: from scratch; a device key (h100) or a model folder")
    p.add_argument("--out", type=output_dir, default=None, metavar="DIR",
                   help="the model directory to write <device>/ into (default: KERNEL_SELECT_MODELS_DIR, "
                        "else ~/.cache/kernel_select/models, the directory kernel_select searches first)")
    flags.add_json(p, "the run's summary")
    p.add_argument("--workers", type=int_at_least(0), default=0,
                   help="compile processes (default: every core but one)")
    p.add_argument("--max-problems", type=int_at_least(1), default=None, metavar="N",
                   help="a quick trial: measure at most N problems")
    p.add_argument("--epochs", type=int_at_least(1), default=None,
                   help="a quick trial: at most this many training epochs (default: 120, within the time)")
    flags.add_no_progress(p, old_quiet=True)
    p.add_argument("--plan-only", action="store_true",
                   help="print the plan and stop, on any machine (no GPU needed, nothing written): the "
                        "compile classes in the order measured and why (from the --from model), the "
                        "problems each gets or that it does not fit, cost.py's predicted time and rows per "
                        "GPU-minute, and the domain strata the calibrated model would claim; --workers sets "
                        "the compile workers of the machine it is for")
    add_device_arg(p, f"with --plan-only: the GPU to plan for: {DEVICE_HELP} (default: the GPU this runs "
                      f"on; {FALLBACK_DEVICE} without one); a run measures the GPU it runs on")
    p.set_defaults(handler=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    if args.plan_only:
        return _run_plan_only(args)
    if args.device is not None:
        raise OptionError(f"calibrate: --device {args.device}: calibrate measures the GPU it runs on; "
                          "--device goes with --plan-only")
    if args.out is None:  # the user model directory: checked before the GPU, as --out is when parsed
        from kernel_select.resources import user_models_dir

        check_output_dir(user_models_dir())
    require_gpu("calibrate")
    from kernel_select.device import detect
    from kernel_select.offline.calibrate.run import calibrate

    summary = calibrate(_options(args), detect())
    if args.json:
        say(json.dumps(summary, indent=1))
    else:
        held_out = summary["held_out"]
        methods = held_out.get("methods", {})
        new = methods.get("calibrated", {})
        score = (f"top-1 {new['top1']:.3f}, top-4 {new['top4']:.3f} on {held_out['problems']} held-out "
                 f"problems" if "top4" in new else "no held-out score")
        say(f"calibrated {summary['device']['key']}: {score}; model in {summary['model_dir']}")
    return 0


def _options(args: argparse.Namespace) -> CalibrateOptions:
    from kernel_select.offline.calibrate.run import CalibrateOptions

    return CalibrateOptions(minutes=args.max_seconds / 60.0, start=args.start,
                            models_dir=Path(args.out) if args.out else None, workers=args.workers,
                            max_problems=args.max_problems, epochs=args.epochs, progress=not args.no_progress)


def _run_plan_only(args: argparse.Namespace) -> int:
    """What a run would measure, for --device or the GPU here (else the fallback), on any machine."""
    from kernel_select.cli.devices import serving_device
    from kernel_select.offline.calibrate.preview import lines, preview

    spec, _ = serving_device(args.device)
    report = preview(_options(args), spec)
    if args.json:
        say(json.dumps(report, indent=1))
    else:
        say_lines("\n".join(lines(report)))
    return 0
