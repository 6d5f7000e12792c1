"""`kernel-select calibrate --plan-only`: what a run would measure, before spending its minutes.

The same steps as a run up to its plan (run.py: the starting model, the classes in the order
priority.py gives, the plan sized by cost.py), on any machine, GPU or not: the compile classes in
the order they would be measured, with why each comes there and how many problems it gets (or that
it does not fit), cost.py's prediction for the collection, and the domain the calibrated model
would claim. Nothing is written, nothing is compiled or timed.
"""

from __future__ import annotations

import time
from typing import Any

from kernel_select.device import DeviceSpec
from kernel_select.model.card import MIN_STRATUM_PROBLEMS, stratum_count
from kernel_select.offline.calibrate.budget import AFTER_TRAINING_S, PLANNING_S, Budget
from kernel_select.offline.calibrate.priority import COVERAGE, ranked_classes
from kernel_select.offline.calibrate.run import (CalibrateOptions, compile_worker_count, output_folder,
                                                 plan_run)
from kernel_select.offline.calibrate.start import resolve_start
from kernel_select.offline.calibrate.classes import strata_of
from kernel_select.offline.calibrate.plan import SAFETY


def preview(options: CalibrateOptions, spec: DeviceSpec) -> dict[str, Any]:
    """The plan a run of `options` would make on GPU `spec` with this machine's compile workers (or
    `options.workers`), as a dict (`lines` prints it).

    Raises:
        OptionError: bad minutes or --from, or minutes that fit no class.
        ModelError: the model --from names does not load.
    """
    budget = Budget(options.minutes * 60.0)
    _, files = output_folder(options, spec)
    start = resolve_start(options.start, spec, files.folder)
    workers = compile_worker_count(options)
    began = time.perf_counter()
    ranked = ranked_classes(start, options.seed)
    plan = plan_run(options, spec, ranked, budget, workers)
    planning_s = time.perf_counter() - began
    training = plan.training_problems()
    target = sorted(strata_of(r.compile_class for r in ranked if r.tier == COVERAGE))
    return {
        "device": {"key": spec.key, "name": spec.name, "capability": list(spec.capability),
                   "sm_count": spec.sm_count},
        "minutes": round(budget.total_s / 60.0, 2), "model_dir": str(files.folder),
        "phases_s": {"planning": PLANNING_S, "collection": round(budget.collection_s, 1),
                     "training": round(budget.training_s, 1), "after_training": AFTER_TRAINING_S},
        "start": None if start is None else {"folder": str(start.folder), "device": start.trained_on},
        "order": "disagreement" if any(r.untrained is not None for r in ranked) else "fixed",
        "classes": [{**r.record(), "why": r.note(), "problems": plan.classes.get(r.compile_class.name, 0)}
                    for r in ranked],
        "plan": plan.summary(),
        "domain": {"strata": target, "min_training_problems": MIN_STRATUM_PROBLEMS,
                   "claimed": [s for s in target if stratum_count(s, training) >= MIN_STRATUM_PROBLEMS]},
        "planning_s": round(planning_s, 1),
    }


def lines(report: dict[str, Any]) -> list[str]:
    """The preview as the command prints it."""
    device, phases, plan, domain = report["device"], report["phases_s"], report["plan"], report["domain"]
    out = [f"calibrate plan for {device['key']} ({device['name']}, {device['sm_count']} SMs): "
           f"{report['minutes']:g} minutes = {phases['planning']:.0f} s planning, "
           f"{phases['collection']:.0f} s measuring (compile included), {phases['training']:.0f} s training, "
           f"{phases['after_training']:.0f} s scoring and writing; {plan['compile_workers']} compile workers"]
    start = report["start"]
    if start is None:
        out.append("start: from scratch; classes in the fixed order")
    else:
        order = ("a class of bf16 single GEMMs first, then those it never trained on, then by its members' "
                 "disagreement"
                 if report["order"] == "disagreement" else "a single network: classes in the fixed order")
        out.append(f"start: fine-tunes the {start['device']} model in {start['folder']}; {order}")
    out.append(f"  {'#':>2}  {'compile class':<40} {'tier':<8} {'problems':>8}  why")
    for number, c in enumerate(report["classes"], 1):
        count = f"{c['problems']:>8}" if c["problems"] else f"{'-':>8}"
        why = c["why"] + ("" if c["problems"] else "; does not fit")
        out.append(f"  {number:>2}  {c['class']:<40} {c['tier']:<8} {count}  {why}")
    out.append(f"cost.py: {plan['problems']:,} problems, {plan['rows']:,} rows, {plan['kernels']:,} kernels "
               f"to compile; measuring takes {plan['predicted_wall_s']:.0f} s of {phases['collection']:.0f} "
               f"(planned to {SAFETY:.0%}), {plan['predicted_rows_per_gpu_minute']:,} rows per GPU-minute")
    missing = [s for s in domain["strata"] if s not in domain["claimed"]]
    out.append(f"domain: {len(domain['claimed'])} of {len(domain['strata'])} strata with >= "
               f"{domain['min_training_problems']} training problems"
               + (f" (short: {', '.join(missing)})" if missing else "")
               + f"; layouts {', '.join(plan['layouts'])}")
    out.append(f"planned in {report['planning_s']:.1f} s; nothing written: run without --plan-only, on the "
               f"GPU, to measure into {report['model_dir']}")
    return out
