"""results/learners_h100.json: learners side by side on the H100 data (issue 39, deliver 1).

Every learner trains on the same rows (training_data.training_rows: the `train` and `val` problems, at
most 384 configs each) with the same features (model/features.py, version 5) and is scored by
`kernel-select eval`'s own code (offline/training/evaluate.py), on every held-out split the data
holds (`test`, `family`, and `unseen` once its rows exist), in one `evaluate` call per split, so all
learners meet the same problems and `paired` compares each with the shipped MLP:

  mlp               the shipped model, models/h100 as it is (the baseline)
  gbdt_lambdarank   LightGBM lambdarank, one query per problem (offline/training/gbdt_fit.py)
  gbdt_regression   LightGBM regression of log runtime
  NAME              with --mlp-dirs NAME=DIR,...: the MLP saved in DIR (a candidate trained apart, the
                    model the shipped one replaced), scored as it is; DIR:i is its member i alone, and
                    DIR+DIR... the average of several (`kernel-select average-models`, not saved)
  mlp_<variant>     with --mlp-variants: the MLP retrained with other hyperparameters (`kernel-select
                    train`'s recipe, MLP_VARIANTS below); about 48 minutes each on 2 CPU cores
  <gbdt>_shortlist  with --shortlist N: the MLP scores every config, the GBDT orders the MLP's N best
                    (the trees then cost N rows a GEMM, not ~1,200); the rest follow in the MLP's order
  <gbdt>_blend      with --shortlist N --blend: the shortlist ordered by the sum of the MLP's and the
                    GBDT's positions in it

Each learner's report: top-k per split, calibration (median |log ratio| over each problem's 16 fastest
configs; for lambdarank its times are no milliseconds and the figure is meaningless), top-1 and top-4
per stratum beside Inductor's DEFAULT list, the paired ratio to the MLP, its fit time and its
`estimate` time over the seed problem's 1,206 configs on one thread.

The whole comparison, one command (needs `pip install '.[train]'`; LightGBM uses every core):

    python results/learners_h100.py

Developing on a small CPU: a hash-chosen share of the problems, the same for every learner:

    python results/learners_h100.py --problem-fraction 0.2 --eval-fraction 0.3 --out /tmp/learners.json

--models DIR keeps each fitted GBDT as a model folder (DIR/<learner>/gbdt.json and gbdt.npz) and loads one
already there instead of fitting it: fit on a many-core host, score anywhere. The committed JSON was
fitted 2026-11-27 by the command above with --threads 2 (its `unseen` rows: the 226 of 320 unseen problems
measured, 191 of them in the trained layouts); the fitted GBDTs (4.5 MB) are not committed.

The shipped model (an average, `kernel-select average-models`) against its two parts, the model it
replaced and the model of the 1.1.0 release, results/learners_h100_averaged.json: RELEASE is models/h100 as
commit 32b5782 (1.1.0) has it, PREVIOUS as commit 32bf568 shipped it, FINE and SCRATCH the fine-tune and the
from-scratch run of docs/design.md's recipe:

    python results/learners_h100.py --learners mlp --out results/learners_h100_averaged.json \
        --splits val,test,family,unseen --mlp-dirs \
        release_1_1=RELEASE,previous=PREVIOUS,fine_tuned=FINE,from_scratch=SCRATCH,pair_0=FINE:0+SCRATCH:0,pair_1=FINE:1+SCRATCH:1

The wide H100 runs of results/widths.py's docstring (seeds 0 and 1, 2 x (256, 128, 64) each, second build,
2026-11-29) against the shipped model, results/learners_h100_wide.json:

    python results/learners_h100.py --learners mlp --out results/learners_h100_wide.json --mlp-dirs \
        wide_average=WIDE_0+WIDE_1,wide_seed_0=WIDE_0,wide_seed_1=WIDE_1

Cost, measured on this project's 2-core CPU with other work beside it (--threads 2): LightGBM lambdarank
1,482 s (613 rounds, 513 kept), regression 497 s (881 rounds, 781 kept), on 745,491 rows; scoring the
seven learners on `test`, `family` and `unseen` 820 s, most of it the trees' numpy walk; the shipped
MLP's training took 2,893 s (its card), about what each MLP variant costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_select.model.base import PerformanceModel
from kernel_select.model.gbdt import GBDTModel
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training.evaluate import evaluate
from kernel_select.offline.training.gbdt_fit import GBDTParams, fit_gbdt, keep_problem_fraction
from kernel_select.problem import Problem
from kernel_select.space import for_problem

ROOT = Path(__file__).resolve().parents[1]

DEVICE = "h100"
SHIPPED = ROOT / "models" / DEVICE
DEFAULT_DATA = sorted((ROOT / "data").glob("h100*.parquet"))
GBDT_LEARNERS = {
    "gbdt_lambdarank": GBDTParams(objective="lambdarank"),
    "gbdt_regression": GBDTParams(objective="regression"),
}
#: MLP variants (--mlp-variants): the shipped recipe (`MLPHParams()`: widths 96-64-32, 2 members,
#: objective rank) with one change each.
MLP_VARIANTS = {
    "wide": {"hidden_widths": (192, 128, 64)},
    "members4": {"members": 4},
    "mse": {"objective": "mse"},
}
SEED_PROBLEM = Problem(560, 1280, 3420, "bfloat16")
KS = (1, 2, 4, 8, 16)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", nargs="+", type=Path, default=DEFAULT_DATA,
                        help="H100 datasets (default: data/h100*.parquet, the unseen split's file included "
                             "once it is there)")
    parser.add_argument("--learners", default=",".join(["mlp", *GBDT_LEARNERS]),
                        help=f"comma-separated, of mlp, {', '.join(GBDT_LEARNERS)} (default: all)")
    parser.add_argument("--mlp-variants", default="",
                        help=f"comma-separated MLP variants to train and score, of {', '.join(MLP_VARIANTS)} "
                             "(default: none; each retrains the MLP)")
    parser.add_argument("--mlp-dirs", default="", metavar="NAME=DIR,...",
                        help="also score the MLPs saved in these model folders, each under its NAME")
    parser.add_argument("--splits", default=",".join(splits.EVAL_SPLITS),
                        help="comma-separated splits to score, of val and the held-out ones (default: "
                             "%(default)s)")
    parser.add_argument("--problem-fraction", type=float, default=1.0,
                        help="train every learner on this share of the train and val problems (default 1)")
    parser.add_argument("--eval-fraction", type=float, default=1.0,
                        help="score on this share of each held-out split's problems (default 1)")
    parser.add_argument("--shortlist", type=int, default=0,
                        help="also score each GBDT re-ordering the MLP's N best configs (default: off)")
    parser.add_argument("--blend", action="store_true",
                        help="with --shortlist: also order the shortlist by the sum of the MLP's and the "
                             "GBDT's ranks")
    parser.add_argument("--rounds", type=int, default=GBDTParams.rounds, help="GBDT: most boosting rounds")
    parser.add_argument("--threads", type=int, default=0, help="LightGBM threads (default: every core)")
    parser.add_argument("--models", type=Path, default=None,
                        help="keep each GBDT in DIR/<learner>/; one already there is loaded, not fitted again")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "learners_h100.json")
    args = parser.parse_args()
    learners = [name.strip() for name in args.learners.split(",") if name.strip()]
    variants = [name.strip() for name in args.mlp_variants.split(",") if name.strip()]
    unknown = [n for n in learners if n != "mlp" and n not in GBDT_LEARNERS]
    unknown += [v for v in variants if v not in MLP_VARIANTS]
    if unknown:
        parser.error(f"unknown learner or variant: {', '.join(unknown)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()

    frame = dataset.read_many(args.data)
    models: dict[str, PerformanceModel] = {}
    fits: dict[str, dict[str, Any]] = {}
    if "mlp" in learners:
        models["mlp"] = MLPModel.load(SHIPPED, DEVICE)
        card = models["mlp"].card
        fits["mlp"] = {"kind": "shipped", "folder": "models/h100", "describe": models["mlp"].describe(),
                       "train_seconds": card.metrics.get("train_seconds"), "trained_at": card.trained_at,
                       "val": {"topk": card.metrics.get("averaged_val", {}).get("topk")}}
    for name, folder in _named_dirs(parser, args.mlp_dirs, learners):
        models[name] = _named_mlp(folder)
        card = models[name].card
        fits[name] = {"kind": "folder", "folder": folder, "describe": models[name].describe(),
                      "digest": models[name].digest(), "trained_at": card.trained_at,
                      "members": card.architecture.members,
                      "recipe": {key: card.hyperparameters.get(key) for key in ("epochs", "lr", "init")},
                      "train_seconds": card.metrics.get("train_seconds")}
    for name in learners:
        if name in GBDT_LEARNERS:
            models[name], fits[name] = gbdt_learner(name, args, frame)
    for variant in variants:
        name = f"mlp_{variant}"
        print(f"training {name} ...", flush=True)
        models[name], fits[name] = train_mlp_variant(variant, args.data, frame, args.problem_fraction)
    if args.shortlist and "mlp" in models:
        for name in [n for n in models if n in GBDT_LEARNERS]:
            models[f"{name}_shortlist"] = Shortlist(models["mlp"], models[name], args.shortlist)
            fits[f"{name}_shortlist"] = {"kind": "shortlist", "first": "mlp", "then": name,
                                         "size": args.shortlist}
            if args.blend:
                models[f"{name}_blend"] = Shortlist(models["mlp"], models[name], args.shortlist, blend=True)
                fits[f"{name}_blend"] = {"kind": "shortlist, ordered by the sum of both ranks", "first": "mlp",
                                         "then": name, "size": args.shortlist}
    for name, model in models.items():
        model.name = name  # evaluate() reports a model under its name; the GBDTs share "gbdt"
        fits[name]["estimate_ms_seed_problem"] = estimate_ms(model)

    eval_frame = keep_problem_fraction(frame, args.eval_fraction)
    reports = {}
    for split in [name.strip() for name in args.splits.split(",") if name.strip()]:
        if not splits.split_masks(eval_frame)[split].any():
            reports[split] = {"problems": 0, "skipped": f"no problems of split {split!r} in the data"}
            continue
        print(f"scoring {split} ...", flush=True)
        reports[split] = evaluate(args.data, split, list(models.values()), device=DEVICE, ks=KS,
                                  frame=eval_frame)
    report = {
        "command": "python results/learners_h100.py " + " ".join(sys.argv[1:]),
        "data": [{"file": p.name, "rows": dataset.row_count(p)} for p in args.data],
        "device": DEVICE, "problem_fraction": args.problem_fraction, "eval_fraction": args.eval_fraction,
        "host": {"cpus": _cpus(), "machine": platform.machine(), "python": platform.python_version()},
        "learners": fits,
        "splits": {split: summarize(report_, list(models)) for split, report_ in reports.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print_table(report)
    print(f"wrote {args.out} in {report['seconds']:.0f} s")


def _named_mlp(spec: str) -> MLPModel:
    """The MLP `spec` names: DIR, DIR:i (member i of it alone) or several joined by '+' (their average)."""
    from kernel_select.offline.training.average import average_models

    parts = spec.split("+")
    models = []
    for part in parts:
        folder, _, member = part.partition(":")
        model = MLPModel.load(folder, DEVICE)
        if member:  # one network of an averaged model: the same card, one member
            card = model.card.model_copy(deep=True)
            card.architecture.members = 1
            model = MLPModel(model.device, model.net.members[int(member)], card, model.aten)
        models.append(model)
    return models[0] if len(models) == 1 else average_models(models, parts)


def _named_dirs(parser: argparse.ArgumentParser, text: str, taken: list[str]) -> list[tuple[str, str]]:
    """--mlp-dirs as (name, folder) pairs; a name without a folder, or one already a learner's, is an error."""
    pairs = [part.strip().partition("=") for part in text.split(",") if part.strip()]
    bad = [name for name, sep, folder in pairs if not sep or not name or not folder or name in taken]
    if bad:
        parser.error(f"--mlp-dirs: expected NAME=DIR with a NAME no learner has, got {', '.join(bad)}")
    return [(name, folder) for name, _, folder in pairs]


def gbdt_learner(name: str, args: argparse.Namespace, frame: pd.DataFrame) -> tuple[GBDTModel, dict[str, Any]]:
    """The GBDT learner `name`: loaded from --models DIR/<name> when it is there, else fitted (and kept
    there with --models)."""
    folder = args.models / name if args.models is not None else None
    if folder is not None and (folder / "gbdt.json").exists():
        model = GBDTModel.load(folder, DEVICE)
        print(f"loaded {name} from {folder}", flush=True)
    else:
        params = dataclasses.replace(GBDT_LEARNERS[name], rounds=args.rounds, threads=args.threads)
        print(f"fitting {name} ...", flush=True)
        model = fit_gbdt(args.data, device=DEVICE, params=params, problem_fraction=args.problem_fraction,
                         frame=frame).model
        if folder is not None:
            model.save(folder)
    card = model.card
    fit = {"kind": "gbdt", "params": card.hyperparameters, **card.metrics, "trees": card.trees,
           "nodes": card.nodes, "max_depth": card.max_depth}
    print(f"  {name}: {card.trees} trees, val top-k {fit['val']['topk']}, {fit['train_seconds']:.0f} s", flush=True)
    return model, fit


class Shortlist(PerformanceModel):
    """`first` scores every config; `then` orders `first`'s `size` best (with `blend`, the sum of both
    models' positions in the shortlist orders it). Returns `first`'s times with
    the shortlist's sorted times handed out in `then`'s order (the i-th best by `then` gets the i-th
    smallest), so the times stay `first`'s milliseconds; every other config keeps its time, raised
    above the shortlist's slowest."""

    name = "shortlist"

    def __init__(self, first: PerformanceModel, then: PerformanceModel, size: int, blend: bool = False) -> None:
        super().__init__(first.device)
        self.first, self.then, self.size, self.blend = first, then, size, blend

    def predict(self, problem, device, configs):
        ms = np.asarray(self.first.predict(problem, device, configs), dtype=np.float64)
        short = np.argsort(ms, kind="stable")[: self.size]
        key = self.then.predict(problem, device, [configs[i] for i in short])
        if self.blend:  # the sum of the two rankings' positions; `first`'s breaks ties
            key = np.argsort(np.argsort(key, kind="stable"), kind="stable") + np.arange(len(short))
        order = np.argsort(key, kind="stable")
        out = ms.copy()
        out[short[order]] = np.sort(ms[short])
        rest = np.ones(len(ms), dtype=bool)
        rest[short] = False
        out[rest] = np.maximum(out[rest], np.nextafter(ms[short].max(), np.inf))
        return out

    def trained_layouts(self):
        return self.first.trained_layouts()


def train_mlp_variant(variant: str, data: list[Path], frame: pd.DataFrame,
                      fraction: float) -> tuple[MLPModel, dict[str, Any]]:
    """The MLP trained as `kernel-select train` trains the shipped one, with the variant's change, on
    the same problems as the GBDTs (a fraction below 1 writes those problems' rows to a temporary
    dataset first)."""
    from kernel_select.offline.training.train import MLPHParams, train

    change = dict(MLP_VARIANTS[variant])
    objective = change.pop("objective", "rank")
    hparams = dataclasses.replace(MLPHParams(), **change)
    with tempfile.TemporaryDirectory() as tmp:
        paths = data
        if fraction < 1:
            held_out = splits.split_masks(frame)
            trainable = ~(held_out["test"] | held_out["family"] | held_out["unseen"])
            chosen = keep_problem_fraction(frame[trainable], fraction)
            paths = [Path(tmp) / "rows.parquet"]
            dataset.write(pd.concat([chosen, frame[~trainable]], ignore_index=True), paths[0])
        result = train(paths, Path(tmp) / "model", device=DEVICE, objective=objective, hparams=hparams,
                       progress=False)
        model = MLPModel.load(Path(tmp) / "model", DEVICE)
    fit = {"kind": "mlp", "hyperparameters": dataclasses.asdict(hparams), "objective": objective,
           "seconds": round(result.seconds, 1), "val": result.metrics.get("averaged_val") or result.metrics["val"]}
    return model, fit


def estimate_ms(model: PerformanceModel, repeats: int = 20) -> dict[str, float]:
    """`estimate` over the seed problem's 1,206 configs on one thread (as the benchmark times it):
    the median and the fastest of `repeats` calls, in ms."""
    import torch

    configs = for_problem(SEED_PROBLEM, DEVICE)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model.estimate(SEED_PROBLEM, configs)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            model.estimate(SEED_PROBLEM, configs)
            times.append((time.perf_counter() - start) * 1e3)
    finally:
        torch.set_num_threads(threads)
    return {"configs": len(configs), "median": round(statistics.median(times), 3), "min": round(min(times), 3)}


def summarize(report: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """What the comparison keeps of an `evaluate` report: per learner its top-k, calibration, Spearman,
    top-1 and top-4 per stratum, and its paired ratio to the first learner; the baselines' scores."""
    if "skipped" in report:
        return report
    methods = report["methods"]
    out: dict[str, Any] = {"problems": report["problems"], "rows": report["rows"], "learners": {},
                           "inductor_default": methods["inductor_default"].get("score"),
                           "random": methods["random"]["topk"]}
    for name in names:
        method = methods.get(name, {})
        if "topk" not in method:
            out["learners"][name] = {"skipped": method.get("skipped", "not scored")}
            continue
        out["learners"][name] = {
            "topk": method["topk"], "spearman_median": method["spearman"]["median"],
            "calibration_median_abs_log_top16": method["calibration_median_abs_log_top16"],
            "strata": {key: {"problems": s["problems"], "top1": s["topk"]["1"], "top4": s["topk"]["4"],
                             "inductor_default": s["inductor_default"]}
                       for key, s in method["strata"].items()},
        }
    paired = report.get("paired")
    if paired:
        out["paired"] = {"reference": paired["reference"], "methods": {
            name: {k: {"ratio": v["ratio"], "low": v["low"], "high": v["high"]}
                   for k, v in entry["ratio"].items() if k in ("1", "4")}
            for name, entry in paired["methods"].items() if "ratio" in entry}}
    return out


def print_table(report: dict[str, Any]) -> None:
    print(f"{'split':8} {'learner':26} {'top-1':>7} {'top-4':>7} {'calib':>7}   estimate ms")
    for split, r in report["splits"].items():
        if "skipped" in r:
            print(f"{split:8} {r['skipped']}")
            continue
        for name, m in r["learners"].items():
            if "topk" not in m:
                print(f"{split:8} {name:26} {m['skipped']}")
                continue
            ms = report["learners"][name]["estimate_ms_seed_problem"]["median"]
            print(f"{split:8} {name:26} {m['topk']['1']:7.4f} {m['topk']['4']:7.4f} "
                  f"{m['calibration_median_abs_log_top16']:7.4f}   {ms:.2f}")
        print(f"{split:8} {'inductor DEFAULT':26} {r['inductor_default'] or math.nan:7.4f}")


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


if __name__ == "__main__":
    main()
