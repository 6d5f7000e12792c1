"""Score models made by `kernel-select calibrate` on the committed H100 data (CPU).

results/calibrate.sh calibrates one H100 treated as a new GPU (from scratch, and from the shipped H100
model); this scores each calibrated model folder on the frozen H100 `test` and `family` splits beside
the shipped H100 model (models/h100, trained on 1,842 problems) and Inductor's DEFAULT list, and plots
score against the minutes the GPU spent collecting. A calibrated model ranks only the dtypes and
layouts it measured, so every method is scored on the problems all calibrated models cover (dtype and
layout; the share of the split they are is `coverage`); the shipped model and the DEFAULT list are
scored on the whole split too.

    python results/calibrate.py --runs OUT/scratch/h100 OUT/finetune/h100 [--prefix-minutes 1,2]

The runs measured on 2026-11-25 are committed as results/calibrate_h100/<run>/ (the model folders and
each run's --json summary); `--runs results/calibrate_h100/scratch/h100 results/calibrate_h100/finetune/h100`
scores them again.

writes results/calibrate.json and results/calibrate.png. --prefix-minutes also retrains, on this CPU,
a model on the problems each run had measured after that many minutes of collection (the plan of a
shorter run is a prefix of a longer one's), as the run trained its own, for more points on the curve.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_select.device import get_device
from kernel_select.model.features import FEATURE_VERSION
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset
from kernel_select.offline.training.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]
DATA = [ROOT / "data" / f"{name}.parquet" for name in ("h100", "h100_coverage", "h100_layers", "h100_bmm")]
SPLITS = ("test", "family")
KS = (1, 2, 4, 8)
DEVICE = "h100"
#: float16 and bfloat16 have the same features: a model trained on one ranks the other (model/mlp.py).
SAME_FEATURES = {"float16": "bfloat16", "bfloat16": "float16"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", required=True, type=Path,
                        help="calibrated model folders (each with calibration.json)")
    parser.add_argument("--data", nargs="+", type=Path, default=DATA,
                        help="H100 datasets (default: the committed ones)")
    parser.add_argument("--prefix-minutes", default="",
                        help="comma-separated minutes of collection to retrain at (default: none)")
    parser.add_argument("--train-seconds", type=float, default=180.0,
                        help="time limit of each retraining (--prefix-minutes)")
    parser.add_argument("--json", type=Path, default=ROOT / "results" / "calibrate.json")
    parser.add_argument("--plot", type=Path, default=ROOT / "results" / "calibrate.png")
    args = parser.parse_args()

    frame = dataset.read_many(args.data)
    models, points = {}, []
    for folder in args.runs:
        summary = json.loads((folder / "calibration.json").read_text())
        name = folder.parent.name or folder.name
        models[name] = MLPModel.load(folder, DEVICE)
        points.append(_point(name, summary, summary["collection"]["seconds"] / 60.0, retrained=False))
        for minutes in [float(x) for x in args.prefix_minutes.split(",") if x.strip()]:
            if minutes * 60.0 < summary["collection"]["seconds"]:
                label = f"{name}@{minutes:g}min"
                model = _retrain(folder, summary, minutes, args.train_seconds)
                if model is not None:
                    models[label] = model
                    points.append(_point(label, summary, minutes, retrained=True, run=name))
    shipped = MLPModel.load(ROOT / "models" / DEVICE, DEVICE)
    report = {"data": [p.name for p in args.data], "runs": points,
              "splits": {split: _score_split(args.data, frame, split, models, shipped) for split in SPLITS}}
    args.json.write_text(json.dumps(report, indent=1) + "\n")
    _plot(report, args.plot)
    _print(report)
    print(f"wrote {args.json} and {args.plot}")


def _point(name: str, summary: dict, minutes: float, *, retrained: bool, run: str | None = None) -> dict:
    """What a run (or a retraining on a prefix of it) measured and where it sits on the time axis."""
    out = {"name": name, "run": run or name, "collection_minutes": round(minutes, 2), "retrained": retrained,
           "start": (summary["start"] or {}).get("device"), "budget_minutes": summary["minutes"]}
    if not retrained:
        out.update(problems=summary["measured"]["problems"], plan=summary["plan"],
                   collection=summary["collection"], training=summary["training"],
                   held_out=_held_out(summary["held_out"]), seconds=summary["seconds"])
    return out


def _held_out(held_out: dict) -> dict:
    """The run's own held-out scores without the per-stratum detail."""
    methods = {name: {k: v for k, v in m.items() if k != "strata"}
               for name, m in held_out.get("methods", {}).items()}
    default = held_out.get("inductor_default", {})
    return {"problems": held_out.get("problems", 0), "methods": methods,
            "inductor_default": {k: v for k, v in default.items() if k != "strata"}}


def _retrain(folder: Path, summary: dict, minutes: float, seconds: float) -> MLPModel | None:
    """A model trained as the run trained its own, on the problems it had measured `minutes` into its
    collection (rows carry the time their problem was timed); None before it had train and val ones."""
    from kernel_select.offline.training.train import MLPHParams, TimeLimit, train
    from kernel_select.offline.training.warm_start import load_warm_start

    rows = dataset.read(folder / "calibration.parquet")
    started = datetime.fromisoformat(summary["collection"]["started_at"])
    stamps = pd.to_datetime(rows["timestamp"], utc=True)
    prefix = rows[stamps <= pd.Timestamp(started + timedelta(minutes=minutes))]
    if not {"train", "val"} <= set(prefix["split"]):
        print(f"{folder.parent.name}: no train and val problems in its first {minutes:g} minutes; skipped")
        return None
    hparams, warm = MLPHParams(), None
    if summary["start"]:  # fine-tuned: from the same device's model in this checkout
        start = ROOT / "models" / summary["start"]["device"]
        card = MLPModel.load(start, summary["start"]["device"]).card
        hparams = MLPHParams(hidden_widths=tuple(card.architecture.hidden_widths),
                             members=card.architecture.members, lr=2e-4)
        warm = load_warm_start(start, get_device(card.device), feature_version=FEATURE_VERSION,
                               hidden_widths=hparams.hidden_widths, members=hparams.members)
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "prefix.parquet"
        dataset.write(prefix, data)
        result = train(data, Path(tmp) / "model", device=DEVICE, objective="rank", hparams=hparams, init=warm,
                       progress=False, time_limit=TimeLimit(time.perf_counter() + seconds))
    problems = prefix["problem_id"].nunique()
    print(f"retrained {folder.parent.name} on its first {minutes:g} minutes: {problems} problems")
    return result.model


def _covered(frame: pd.DataFrame, models: dict) -> pd.Series:
    """Rows of problems every calibrated model was trained on: its dtypes (fp16 and bf16 read alike)
    and its layouts."""
    keep = pd.Series(True, index=frame.index)
    for model in models.values():
        dtypes = set(model.card.dtypes) | {SAME_FEATURES.get(d) for d in model.card.dtypes}
        keep &= frame["dtype"].isin(dtypes) & frame["layout"].isin(model.card.layouts)
    return keep


def _score_split(data: list[Path], frame: pd.DataFrame, split: str, models: dict,
                 shipped: MLPModel) -> dict:
    covered = frame[_covered(frame, models)]
    named = [_named(shipped, "shipped_h100")] + [_named(m, name) for name, m in models.items()]
    common = evaluate(data, split, named, device=DEVICE, frame=covered, ks=KS, random_seeds=5)
    whole = evaluate(data, split, [_named(shipped, "shipped_h100")], device=DEVICE, frame=frame, ks=KS,
                     random_seeds=5)
    return {"problems": whole["problems"], "covered_problems": common["problems"],
            "coverage": round(common["problems"] / max(whole["problems"], 1), 3),
            "common": _methods(common), "whole": _methods(whole)}


def _named(model: MLPModel, name: str) -> MLPModel:
    twin = MLPModel(model.device, model.net, model.card, model.aten)
    twin.name = name
    return twin


def _methods(report: dict) -> dict:
    out = {}
    for name, method in report["methods"].items():
        if "topk" in method:
            strata = {label: {"problems": s["problems"], "top1": s["topk"]["1"], "top4": s["topk"]["4"]}
                      for label, s in method.get("strata", {}).items()}
            out[name] = {"topk": method["topk"], "strata": strata}
        elif name == "inductor_default":
            out[name] = {"score": method["score"], "k": method["k"]}
    return out


def _print(report: dict) -> None:
    for split, scores in report["splits"].items():
        print(f"{split}: {scores['covered_problems']} of {scores['problems']} problems covered by every "
              f"calibrated model ({scores['coverage']:.0%})")
        for name, method in scores["common"].items():
            if "topk" in method:
                print(f"  {name:<24} top-1 {method['topk']['1']:.3f}  top-4 {method['topk']['4']:.3f}")
        print(f"  {'Inductor DEFAULT':<24} {scores['common']['inductor_default']['score']:.3f}")
        whole = scores["whole"]
        print(f"  whole split: shipped H100 top-4 {whole['shipped_h100']['topk']['4']:.3f}, Inductor DEFAULT "
              f"{whole['inductor_default']['score']:.3f}")
    for point in report["runs"]:
        if not point["retrained"]:
            c = point["collection"]
            print(f"{point['name']}: {point['problems']} problems in {c['seconds']:.0f} s of collection, "
                  f"{c['rows_per_gpu_minute']:,} rows per GPU-minute (cost.py predicted "
                  f"{point['plan']['predicted_rows_per_gpu_minute']:,})")


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(SPLITS), figsize=(6 * len(SPLITS), 4.2), sharey=True)
    colors = {}
    for ax, split in zip(np.atleast_1d(axes), SPLITS):
        scores = report["splits"][split]["common"]
        for point in sorted(report["runs"], key=lambda p: p["collection_minutes"]):
            color = colors.setdefault(point["run"], f"C{len(colors)}")
            topk = scores[point["name"]]["topk"]
            for k, marker in (("4", "o"), ("1", "s")):
                ax.plot(point["collection_minutes"], topk[k], marker, color=color,
                        fillstyle="full" if k == "4" else "none")
        for run, color in colors.items():
            line = sorted((p["collection_minutes"], scores[p["name"]]["topk"]["4"])
                          for p in report["runs"] if p["run"] == run)
            ax.plot(*zip(*line), "-", color=color, label=f"{run} (top-4 filled, top-1 hollow)")
        shipped = scores["shipped_h100"]["topk"]
        ax.axhline(shipped["4"], color="k", ls="--", lw=1, label="shipped H100 model, top-4")
        ax.axhline(shipped["1"], color="k", ls=":", lw=1, label="shipped H100 model, top-1")
        default = scores["inductor_default"]["score"]
        if default is not None and not math.isnan(default):
            ax.axhline(default, color="r", ls="--", lw=1, label="Inductor DEFAULT (~18 configs)")
        split_report = report["splits"][split]
        ax.set_title(f"H100 {split}: {split_report['covered_problems']} problems "
                     f"({split_report['coverage']:.0%} of the split)")
        ax.set_xlabel("minutes of collection on the GPU (compile included)")
        # a score against the minutes it cost, from nothing measured
        ax.set_xlim(0, 1.1 * max(p["collection_minutes"] for p in report["runs"]))
        ax.grid(alpha=0.3)
    np.atleast_1d(axes)[0].set_ylabel("oracle / best of the top-k (geomean)")
    np.atleast_1d(axes)[0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
