"""Score models made by `kernel-select calibrate` on the committed data of their GPU (CPU).

results/calibrate.sh calibrates a GPU treated as new (its shipped model hidden), from scratch or from a
model of another GPU; this scores each calibrated model folder on the GPU's frozen held-out splits beside
the shipped model of that GPU, the start model as it is (another GPU's, where a run started from one) and
Inductor's DEFAULT list, and plots score against the minutes the GPU spent collecting. A calibrated model
ranks only the dtypes and layouts it measured, so every method is scored on the problems all calibrated
models cover (dtype and layout; the share of the split they are is `coverage`, the `common` figures) and
on the whole split (`whole`: a calibrated model ranks problems it never measured as well).

    python results/calibrate.py --device h200 --runs results/calibrate_h200/5min/h200 \
        results/calibrate_h200/10min/h200 results/calibrate_h200/15min/h200
    python results/calibrate.py --device h100 --runs results/calibrate_h100/scratch/h100 \
        results/calibrate_h100/finetune/h100

A run folder holds what calibrate wrote (calibration.json, the model, calibration.parquet). A run
resumed after a stop (a machine that ends commands at 10 minutes) has a run.json beside it saying when
the stopped part collected (`earlier_collection`); its minutes are both parts'. A model
fine-tuned from a start keeps the start's members beside its own; its fine-tuned members are also scored
alone (`<run> fine-tuned alone`), to show what keeping the start does.
`--prefix-minutes` also retrains, on this CPU, a model on the problems each run had measured after that
many minutes of collection, for more points on the curve. A retraining gets --train-seconds (default 180,
calibrate's training share of 15 minutes); calibrate trains on the GPU host's cores, so on a small CPU
give it longer for the same epochs (each retraining prints the epochs it ran).

writes results/calibrate_<device>.json and .png.
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
from kernel_select.errors import DatasetError
from kernel_select.model.mlp import AveragedRuntimeNet, MLPModel
from kernel_select.offline.calibrate.run import train_calibrated
from kernel_select.offline.calibrate.start import resolve_start
from kernel_select.offline.data import dataset
from kernel_select.offline.training.average import with_start_domain
from kernel_select.offline.training.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[1]
SPLITS = ("test", "family", "unseen")
KS = (1, 2, 4, 8)
#: float16 and bfloat16 have the same features: a model trained on one ranks the other (model/mlp.py).
SAME_FEATURES = {"float16": "bfloat16", "bfloat16": "float16"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="h100", help="the GPU the runs calibrated (default: h100)")
    parser.add_argument("--runs", nargs="+", required=True, type=Path,
                        help="calibrated model folders (each with calibration.json)")
    parser.add_argument("--data", nargs="+", type=Path,
                        help="the GPU's datasets (default: the committed data/<device>*.parquet)")
    parser.add_argument("--prefix-minutes", default="",
                        help="comma-separated minutes of collection to retrain at (default: none)")
    parser.add_argument("--train-seconds", type=float, default=180.0,
                        help="time limit of each retraining (--prefix-minutes)")
    parser.add_argument("--start-domain", action="store_true",
                        help="score each calibrated model claiming its start's domain where the start is of "
                             "the GPU's architecture, as calibrate writes it since 2026-11-28 (runs before "
                             "then claim what they measured)")
    parser.add_argument("--json", type=Path, help="default: results/calibrate_<device>.json")
    parser.add_argument("--plot", type=Path, help="default: results/calibrate_<device>.png")
    args = parser.parse_args()
    spec = get_device(args.device)
    data = args.data or sorted((ROOT / "data").glob(f"{spec.key}*.parquet"))
    out_json = args.json or ROOT / "results" / f"calibrate_{spec.key}.json"
    out_plot = args.plot or ROOT / "results" / f"calibrate_{spec.key}.png"

    frame = dataset.read_many(data)
    models, points = {}, []
    prefixes = sorted({float(x) for x in args.prefix_minutes.split(",") if x.strip()})
    for folder in args.runs:
        name = folder.parent.name or folder.name
        summary = _summary(folder)
        seconds = summary["collection"]["seconds"]
        models[name] = MLPModel.load(folder, spec)
        if args.start_domain and summary["start"]:
            models[name] = _claiming_start_domain(models[name], summary["start"]["device"], spec, folder)
        alone = _fine_tuned_alone(models[name])
        method = f"calibrate --from {(summary['start'] or {}).get('device', 'none')}"
        points.append(_point(name, summary, seconds / 60.0, retrained=False,
                             series=method + (", the start's members kept" if alone else "")))
        if alone is not None:
            models[f"{name} fine-tuned alone"] = alone
            points.append(_point(f"{name} fine-tuned alone", summary, seconds / 60.0, retrained=False,
                                 series=method + ", its fine-tuned members alone"))
        for label, minutes in [(f"{name}@{m:g}min", m) for m in prefixes if m * 60.0 < seconds]:
            model, problems = _retrain(folder, summary, minutes, args.train_seconds, spec)
            if model is not None:
                models[label] = model
                points.append(_point(label, summary, minutes, retrained=True, run=name, problems=problems))
    references = {f"shipped_{spec.key}": MLPModel.load(ROOT / "models" / spec.key, spec)}
    for start in sorted({p["start"] for p in points if p["start"] and p["start"] != spec.key}):
        # a device key names its model folder; the out folder matters only to --from auto
        references[f"{start}_model_as_is"] = resolve_start(start, spec, ROOT / "models" / spec.key).model
    report = {"device": spec.key, "data": [p.name for p in data], "runs": points,
              "references": list(references), "splits": {}}
    for split in SPLITS:
        try:
            report["splits"][split] = _score_split(data, frame, split, spec, models, references)
        except DatasetError as exc:  # a GPU without that split in its data
            print(f"{split}: not scored ({exc})")
    out_json.write_text(json.dumps(report, indent=1) + "\n")
    _plot(report, out_plot)
    _print(report)
    print(f"wrote {out_json} and {out_plot}")


def _summary(folder: Path) -> dict:
    """The run's calibration.json; a resumed run's collection is both parts' (module docstring)."""
    summary = json.loads((folder / "calibration.json").read_text())
    run_file = folder.parent / "run.json"
    if run_file.is_file():  # resumed: the stopped part collected first, in the same plan
        earlier = json.loads(run_file.read_text())["earlier_collection"]
        first = (datetime.fromisoformat(earlier["stopped_at"])
                 - datetime.fromisoformat(earlier["started_at"])).total_seconds()
        collection = summary["collection"]
        collection.update(started_at=earlier["started_at"], part_seconds=[first, collection["seconds"]])
        collection["seconds"] = sum(collection["part_seconds"])
        rows = summary["measured"]["rows"]
        collection.update(problems=summary["measured"]["problems"], rows=rows,
                          rows_per_gpu_minute=round(60.0 * rows / collection["seconds"]))
    return summary


def _claiming_start_domain(model: MLPModel, start: str, spec, folder: Path) -> MLPModel:
    """The model as calibrate writes it now from a start that stands in for the GPU (its card claims
    the start's dtypes, layouts and domain too); as it is from another."""
    resolved = resolve_start(start, spec, folder)
    return with_start_domain(model, resolved.model) if resolved.stands_in_for(spec) else model


def _fine_tuned_alone(model: MLPModel) -> MLPModel | None:
    """The fine-tuned members of a calibrated model that kept its start's (they come first, with the
    card's standardization: training/average.py), as a model of their own; None for other models."""
    averaged = model.card.hyperparameters.get("averaged") or []
    if len(averaged) != 2 or not isinstance(model.net, AveragedRuntimeNet):
        return None
    own = averaged[0]["hyperparameters"]["members"]
    members = list(model.net.members)[:own]
    net = AveragedRuntimeNet(members).eval() if own > 1 else members[0]
    card = model.card.model_copy(update={"architecture": model.card.architecture.model_copy(
        update={"members": own})})
    return MLPModel(model.device, net, card, model.aten)


def _point(name: str, summary: dict, minutes: float, *, retrained: bool, run: str | None = None,
           problems: int | None = None, series: str | None = None) -> dict:
    """What a run (or a retraining on a prefix of it) measured and where it sits on the time axis;
    `series`: the line of the plot it is on (default: its run's, with the run's prefixes)."""
    out = {"name": name, "run": run or name, "series": series or run or name,
           "collection_minutes": round(minutes, 2), "retrained": retrained,
           "start": (summary["start"] or {}).get("device"), "budget_minutes": summary["minutes"]}
    if not retrained:
        out.update(problems=summary["measured"]["problems"], plan=summary["plan"],
                   collection=summary["collection"], training=summary["training"],
                   held_out=_held_out(summary["held_out"]), seconds=summary["seconds"])
    else:
        out.update(problems=problems, collection=summary["collection"])
    return out


def _held_out(held_out: dict) -> dict:
    """The run's own held-out scores without the per-stratum detail."""
    methods = {name: {k: v for k, v in m.items() if k != "strata"}
               for name, m in held_out.get("methods", {}).items()}
    default = held_out.get("inductor_default", {})
    return {"problems": held_out.get("problems", 0), "methods": methods,
            "inductor_default": {k: v for k, v in default.items() if k != "strata"}}


def _retrain(folder: Path, summary: dict, minutes: float, seconds: float,
             spec) -> tuple[MLPModel | None, int]:
    """A model trained as calibrate trains its own, on the problems the run had measured `minutes` into
    its collection (rows carry the time their problem was timed); None before it had train and val ones."""
    rows = dataset.read(folder / "calibration.parquet")
    started = datetime.fromisoformat(summary["collection"]["started_at"])
    stamps = pd.to_datetime(rows["timestamp"], utc=True)
    prefix = rows[stamps <= pd.Timestamp(started + timedelta(minutes=minutes, seconds=1))]
    problems = int(prefix["problem_id"].nunique())
    if not {"train", "val"} <= set(prefix["split"]):
        print(f"{folder.parent.name}: no train and val problems in its first {minutes:g} minutes; skipped")
        return None, problems
    start = None
    if summary["start"]:  # fine-tuned: from that device's model in this checkout
        start = resolve_start(summary["start"]["device"], spec, folder)
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "prefix.parquet"
        dataset.write(prefix, data)
        result = train_calibrated(data, Path(tmp) / "model", spec, start, began + seconds)
    epochs = result.metrics["val"]["rank"].get("epochs_run")
    print(f"retrained {folder.parent.name} on its first {minutes:g} minutes: {problems} problems, "
          f"{epochs} epochs in {time.perf_counter() - began:.0f} s")
    return result.model, problems


def _covered(frame: pd.DataFrame, models: dict) -> pd.Series:
    """Rows of problems every calibrated model was trained on: its dtypes (fp16 and bf16 read alike)
    and its layouts."""
    keep = pd.Series(True, index=frame.index)
    for model in models.values():
        dtypes = set(model.card.dtypes) | {SAME_FEATURES.get(d) for d in model.card.dtypes}
        keep &= frame["dtype"].isin(dtypes) & frame["layout"].isin(model.card.layouts)
    return keep


def _score_split(data: list[Path], frame: pd.DataFrame, split: str, spec, models: dict,
                 references: dict) -> dict:
    named = [_named(m, name) for name, m in {**references, **models}.items()]
    common = evaluate(data, split, named, device=spec, frame=frame[_covered(frame, models)], ks=KS,
                      random_seeds=5)
    whole = evaluate(data, split, named, device=spec, frame=frame, ks=KS, random_seeds=5)
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
            layouts = method.get("topk_layouts") or list(method.get("layouts", {}))
            problems = sum(method.get("layouts", {}).get(layout, {}).get("problems", 0) for layout in layouts)
            out[name] = {"problems": problems, "layouts": layouts, "topk": method["topk"], "strata": strata}
        elif name == "inductor_default":
            out[name] = {"score": method["score"], "k": method["k"]}
    return out


def _print(report: dict) -> None:
    for split, scores in report["splits"].items():
        print(f"{split}: {scores['covered_problems']} of {scores['problems']} problems covered by every "
              f"calibrated model ({scores['coverage']:.0%}); top-1 / top-4 on those | on the whole split")
        for name, method in scores["common"].items():
            if "topk" in method:
                whole = scores["whole"].get(name, {}).get("topk")
                tail = f"{whole['1']:.3f} / {whole['4']:.3f}" if whole else "-"
                count = scores["whole"].get(name, {}).get("problems")
                print(f"  {name:<28} {method['topk']['1']:.3f} / {method['topk']['4']:.3f} | {tail}"
                      + (f" ({count} problems: {'/'.join(method['layouts'])})" if count else ""))
        print(f"  {'Inductor DEFAULT':<28} {scores['common']['inductor_default']['score']:.3f} | "
              f"{scores['whole']['inductor_default']['score']:.3f}")
    for point in report["runs"]:
        c = point["collection"]
        print(f"{point['name']}: {point['problems']} problems in {point['collection_minutes'] * 60:.0f} s of "
              f"collection; the run: {c['rows_per_gpu_minute']:,} rows per GPU-minute"
              + (f" (cost.py predicted {point['plan']['predicted_rows_per_gpu_minute']:,})"
                 if "plan" in point else ""))


def _plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = list(report["splits"])
    device = report["device"].upper()
    fig, axes = plt.subplots(1, len(splits), figsize=(6 * len(splits), 4.2), sharey=True)
    colors = {}
    for ax, split in zip(np.atleast_1d(axes), splits):
        scores = report["splits"][split]["common"]
        for point in sorted(report["runs"], key=lambda p: p["collection_minutes"]):
            color = colors.setdefault(point["series"], f"C{len(colors)}")
            topk = scores[point["name"]]["topk"]
            for k, marker in (("4", "o"), ("1", "s")):
                ax.plot(point["collection_minutes"], topk[k], marker, color=color,
                        fillstyle="full" if k == "4" else "none")
        for run, color in colors.items():
            line = sorted((p["collection_minutes"], scores[p["name"]]["topk"]["4"])
                          for p in report["runs"] if p["series"] == run)
            ax.plot(*zip(*line), "-", color=color, label=f"{run} (top-4 filled, top-1 hollow)")
        for i, name in enumerate(report["references"]):
            ref = scores[name]["topk"]
            ax.axhline(ref["4"], color=f"C{7 + i}", ls="--", lw=1, label=f"{name}, top-4")
            ax.axhline(ref["1"], color=f"C{7 + i}", ls=":", lw=1, label=f"{name}, top-1")
        default = scores["inductor_default"]["score"]
        if default is not None and not math.isnan(default):
            ax.axhline(default, color="r", ls="--", lw=1, label="Inductor DEFAULT (~18 configs)")
        split_report = report["splits"][split]
        ax.set_title(f"{device} {split}: {split_report['covered_problems']} problems "
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
