"""results/unseen_distance_<device>.json: does a model rank an `unseen` problem worse the farther it lies
from every problem it trained on?

For each `unseen` problem of a device's files, the distance to the nearest training problem (the `train`
split, as `kernel-select train` reads it) of the same op and layout, in log2 of (M, N, K, batch), and the
shipped model's top-1 and top-4 on it (Triton configs only, as `eval` scores them). It prints and writes
the scores by quartile of that distance, the Spearman correlation of distance and top-1 loss, and per
(op, layout) the training problems and the median distance: where the training data is thin, and what
that costs.

    python results/unseen_distance.py --device h200     # CPU, about a minute
    python results/unseen_distance.py --mlp-dir /tmp/candidate --out /tmp/candidate_distance.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from kernel_select.device import get_device
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.metrics import geomean, topk_scores
from kernel_select.offline.training.evaluate import (
    evaluated_layouts, predict_cases, problem_cases, problem_rows,
)
from kernel_select.resources import shipped_dir

ROOT = Path(__file__).resolve().parent.parent
SIZES = ["m", "n", "k", "batch"]


def log_sizes(problems: pd.DataFrame) -> np.ndarray:
    return np.log2(problems.reindex(columns=SIZES, fill_value=1).to_numpy(np.float64))


def training_problems(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per training problem: op, layout and sizes."""
    rows = splits.split_rows(frame, "train")
    return rows.drop_duplicates("problem_id")[["problem_id", "op", "layout", *SIZES]].reset_index(drop=True)


def nearest_distance(problems: pd.DataFrame, trained: pd.DataFrame) -> np.ndarray:
    """Per problem, the log2-size distance to the nearest training problem of its op and layout (inf
    where there is none)."""
    ours, theirs = log_sizes(problems), log_sizes(trained)
    out = np.full(len(problems), np.inf)
    for i, (op, layout) in enumerate(zip(problems["op"], problems["layout"])):
        same = (trained["op"].to_numpy() == op) & (trained["layout"].to_numpy() == layout)
        if same.any():
            out[i] = np.sqrt(((theirs[same] - ours[i]) ** 2).sum(axis=1)).min()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="h200",
                        help="the device whose files and shipped model (default: h200)")
    parser.add_argument("--mlp-dir", type=Path, default=None,
                        help="score the model saved in DIR (`train --out`) instead of the shipped one")
    parser.add_argument("--out", type=Path, default=None,
                        help="where the JSON goes (default: results/unseen_distance_<device>.json)")
    args = parser.parse_args(argv)
    spec = get_device(args.device)
    pattern = str(ROOT / "data" / f"{spec.key}*.parquet")
    frame = dataset.read_many(pattern)
    model = MLPModel.load(args.mlp_dir or shipped_dir("models") / spec.key, spec)
    unseen = dataset.modelled_layout_rows(splits.split_rows(frame, "unseen"), "evaluation",
                                          evaluated_layouts([model]))
    scored = problem_rows(unseen, f"{pattern}: no unseen rows")
    predicted = predict_cases(model, problem_cases(scored.rows, scored.problems))
    scores = topk_scores(scored.groups, predicted, scored.runtime, (1, 4))
    trained = training_problems(frame)
    problems = scored.problems.reset_index(drop=True)
    problems["distance"] = nearest_distance(problems, trained)
    problems["top1"], problems["top4"] = scores[:, 0], scores[:, 1]

    quartile = pd.qcut(problems["distance"], 4)
    by_quartile = [{"distance": [round(float(q.left), 2), round(float(q.right), 2)], "problems": len(g),
                    "top1": round(float(geomean(g["top1"].to_numpy())), 4),
                    "top4": round(float(geomean(g["top4"].to_numpy())), 4)}
                   for q, g in problems.groupby(quartile, observed=True)]
    by_layout = []
    for (op, layout), g in problems.groupby(["op", "layout"]):
        own = int(((trained["op"] == op) & (trained["layout"] == layout)).sum())
        by_layout.append({"op": op, "layout": layout, "unseen": len(g), "training_problems": own,
                          "median_distance": round(float(np.median(g["distance"])), 2),
                          "top1": round(float(geomean(g["top1"].to_numpy())), 4),
                          "top4": round(float(geomean(g["top4"].to_numpy())), 4)})
    rho = spearmanr(problems["distance"], -np.log(problems["top1"])).statistic
    report = {"device": spec.key, "data": pattern.removeprefix(str(ROOT) + "/"), "model": model.describe(),
              "problems": len(problems), "spearman_distance_top1_loss": round(float(rho), 3),
              "by_distance_quartile": by_quartile, "by_op_layout": by_layout}
    out = args.out or ROOT / "results" / f"unseen_distance_{spec.key}.json"
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"{len(problems)} unseen problems; Spearman(distance, top-1 loss) {rho:.3f}")
    for row in by_quartile:
        low, high = row["distance"]
        print(f"  distance {low:5.2f}-{high:5.2f}: {row['problems']:3d} problems, "
              f"top-1 {row['top1']:.3f}, top-4 {row['top4']:.3f}")
    for row in by_layout:
        print(f"  {row['op']:3s} {row['layout']}: {row['unseen']:3d} unseen, "
              f"{row['training_problems']:4d} trained, median distance {row['median_distance']:5.2f}, "
              f"top-1 {row['top1']:.3f}, top-4 {row['top4']:.3f}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
