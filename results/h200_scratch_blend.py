"""results/h200_scratch_blend.json: does an H200 model trained from scratch, alone or blended with the
fine-tune, rank better than the shipped H200 model (a fine-tune that starts from the H100 model)?

On the H100 the average of a fine-tune and a from-scratch model ranked best (docs/results.md, "Learners
side by side"). The H200 has fewer rows of its own, so this scores, on every H200 file's held-out splits
as `eval` scores them (Triton configs only):

- `shipped`: models/h200;
- `fine`: the shipped recipe again on every file (FINE, docs/design.md "Training");
- `scratch`: `train --objective rank --members 8` on the H200 files alone (SCRATCH);
- `fine+scratch`, `shipped+scratch`: the mean of two models' log-ms predictions. `average-models`
  cannot build these (16 members, over its limit of 8), so the blend is scored, not shipped.

    kernel-select train --data 'data/h200*.parquet' --out SCRATCH --objective rank --members 8 \\
        --weight 'data/h200_literal*.parquet=8'
    python results/h200_scratch_blend.py --fine FINE --scratch SCRATCH     # CPU, about 5 minutes
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from kernel_select.device import get_device
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset
from kernel_select.offline.training.evaluate import evaluate

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "h200_scratch_blend.json"


class Blend(MLPModel):
    """Two models' predictions, averaged in log ms (each model already averages its members)."""

    def __init__(self, first: MLPModel, second: MLPModel, name: str) -> None:
        super().__init__(first.device, first.net, first.card, first.aten)
        self.first, self.second, self.name = first, second, name

    def predict(self, problem, device, configs):  # noqa: ANN001, ANN201 - PerformanceModel.predict
        return np.exp(0.5 * (np.log(self.first.predict(problem, device, configs))
                             + np.log(self.second.predict(problem, device, configs))))


def named(model: MLPModel, name: str) -> MLPModel:
    out = MLPModel(model.device, model.net, model.card, model.aten)
    out.name = name
    return out


def scores(method: dict) -> dict[str, float]:
    return {"top1": round(method["topk"]["1"], 4), "top4": round(method["topk"]["4"], 4),
            "calibration": round(method["calibration_median_abs_log_top16"], 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fine", type=Path, required=True, help="the shipped recipe, trained again")
    parser.add_argument("--scratch", type=Path, required=True, help="the model trained from scratch")
    args = parser.parse_args()
    spec = get_device("h200")
    files = sorted((ROOT / "data").glob("h200*.parquet"))
    frame = dataset.read_many(files)
    shipped = MLPModel.load(ROOT / "models" / "h200", spec)
    fine, scratch = MLPModel.load(args.fine, spec), MLPModel.load(args.scratch, spec)
    models = [named(shipped, "shipped"), named(fine, "fine"), named(scratch, "scratch"),
              Blend(fine, scratch, "fine+scratch"), Blend(shipped, scratch, "shipped+scratch")]
    report = {}
    for split in ("test", "family", "unseen"):
        scored = evaluate(files, split, models, device=spec, frame=frame, ks=(1, 4), random_seeds=2)
        methods = scored["methods"]
        report[split] = {"problems": scored["problems"],
                         "inductor_default": round(methods["inductor_default"]["score"], 4),
                         **{m.name: scores(methods[m.name]) for m in models}}
        print(split, json.dumps(report[split]))
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
