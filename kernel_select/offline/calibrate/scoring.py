"""How the calibrated model does on what calibrate measured but never trained on.

The held-out slice is the `test` problems of the calibration data: the frozen hash split
(splits.split_of) puts about 15% of the planned problems there (plan.py keeps every class
near that share), and training reads only `train` and `val`. On them the new model is scored beside
the model it started from and Inductor's DEFAULT list, by offline/training/evaluate.py: the top-1 and
top-4 score (oracle / the best measured config among the k ranked first, geometric mean over
problems), overall and per stratum (dtype, M bucket, N and K alignment, layout, op).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernel_select.device import DeviceSpec
from kernel_select.errors import DatasetError
from kernel_select.model import PerformanceModel

HELD_OUT_SPLIT = "test"
KS = (1, 4)
INDUCTOR_DEFAULT = "inductor_default"


def held_out_scores(data: Path, spec: DeviceSpec, models: Mapping[str, PerformanceModel]) -> dict[str, Any]:
    """{problems, methods: {name: {top1, top4, strata}}, inductor_default: {score, k, strata}} on the
    held-out slice of `data` for each of `models` (by the name given here); {problems: 0, skipped}
    when the slice is empty."""
    from kernel_select.offline.training.evaluate import evaluate

    named = [_named(model, name) for name, model in models.items()]
    try:
        report = evaluate(data, HELD_OUT_SPLIT, named, device=spec, ks=KS, random_seeds=5)
    except DatasetError as exc:
        return {"problems": 0, "skipped": str(exc)}
    methods: dict[str, Any] = {}
    default_strata: dict[str, Any] = {}
    for name in models:
        method = report["methods"].get(name, {})
        if "topk" not in method:
            methods[name] = {"skipped": method.get("skipped", "no problem in its trained layouts")}
            continue
        strata = method.get("strata", {})
        methods[name] = {"top1": method["topk"]["1"], "top4": method["topk"]["4"],
                         "strata": {label: {"problems": s["problems"], "top1": s["topk"]["1"],
                                            "top4": s["topk"]["4"]} for label, s in strata.items()}}
        default_strata = default_strata or {label: s["inductor_default"] for label, s in strata.items()}
    default = report["methods"][INDUCTOR_DEFAULT]
    return {"problems": report["problems"], "methods": methods,
            INDUCTOR_DEFAULT: {"score": default["score"], "k": default["k"], "strata": default_strata}}


def _named(model: PerformanceModel, name: str) -> PerformanceModel:
    """A shallow copy of `model` reported under `name` (two MLPs are both "mlp" otherwise)."""
    twin = copy.copy(model)
    twin.name = name
    return twin


def lines(scores: Mapping[str, Any]) -> list[str]:
    """The scores in a few lines: each method's top-1 and top-4, then Inductor's DEFAULT list."""
    if not scores.get("problems"):
        return [f"held-out problems: none ({scores.get('skipped', 'nothing measured in the test split')})"]
    out = [f"held-out problems ({scores['problems']}, never trained on): best of top-k / fastest config"]
    for name, method in scores["methods"].items():
        if "skipped" in method:
            out.append(f"  {name:<12} skipped: {method['skipped']}")
        else:
            out.append(f"  {name:<12} top-1 {method['top1']:.3f}  top-4 {method['top4']:.3f}")
    default = scores[INDUCTOR_DEFAULT]
    if default["score"] is not None:
        out.append(f"  {'Inductor DEFAULT':<12} {default['score']:.3f} (its {default['k']:.0f} configs)")
    return out
