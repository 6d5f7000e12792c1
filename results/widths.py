"""results/widths.json: wider MLPs, fewer of them, at the same cost per GEMM.

The H200 model shipped when this ran averaged 8 networks of widths 96, 64, 32; a network of widths 256,
128, 64 costs about four of those (56,000 multiply-adds per config against 13,900). This scores, per device, models
trained the same way but for their widths, on every held-out split as `eval` scores them (Triton configs
only), and times each model's `estimate` over the seed problem's 1,206 configs (median of 50 calls, one
CPU thread, side by side in one process). Trained on this project's 2-core CPU, each run two members
and one seed (--seed 0, 1 or 2), from scratch on the H100 files, then fine-tuned on the H200 files from
the H100 run of its width and seed (WIDTHS 256,128,64 or 96,64,32):

    kernel-select train --data 'data/h100*.parquet' --out H100_RUN --objective rank --members 2 \\
        --epochs 60 --widths WIDTHS --gate models/h100 [--seed 1 | --seed 2 | --epochs 120]
    kernel-select train --data 'data/h200*.parquet' --out H200_RUN --init H100_RUN --widths WIDTHS \\
        --members 2 --lr 5e-4 --epochs 10 --objective rank --weight 'data/h200_literal*.parquet=8' \\
        --gate models/h200 [--seed 1 | --seed 2]
    python results/widths.py --h100 wide=H100_WIDE narrow=H100_NARROW ... \\
        --h200 wide=H200_WIDE narrow=H200_NARROW ...          # CPU, about 5 minutes

The shipped models are scored beside them (`shipped`), though they were trained by longer recipes
(docs/design.md, "Training").
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from kernel_select.device import get_device
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset
from kernel_select.offline.training.evaluate import evaluate
from kernel_select.problem import Problem
from kernel_select.space import for_problem

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "widths.json"
SEED = Problem(560, 1280, 3420, "bfloat16")


def named(path: Path, name: str, device: str) -> MLPModel:
    model = MLPModel.load(path, get_device(device))
    model.name = name
    return model


def estimate_ms(models: list[MLPModel]) -> dict[str, float]:
    """Median ms of one prediction over the seed problem's configs, per model, interleaved so that the
    machine's state is shared."""
    configs = list(for_problem(SEED, models[0].device))
    times: dict[str, list[float]] = {model.name: [] for model in models}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as inside a compile worker
    try:
        for model in models:
            model.predict(SEED, model.device, configs)  # warm
        for _ in range(50):
            for model in models:
                start = time.perf_counter()
                model.predict(SEED, model.device, configs)
                times[model.name].append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(threads)
    return {name: round(float(np.median(t)) * 1e3, 2) for name, t in times.items()}


def describe(model: MLPModel) -> dict:
    arch = model.card.architecture
    return {"widths": list(arch.hidden_widths), "members": arch.members}


def score_device(device: str, runs: list[str]) -> dict:
    spec = get_device(device)
    files = sorted((ROOT / "data").glob(f"{spec.key}*.parquet"))
    frame = dataset.read_many(files)
    models = [named(ROOT / "models" / spec.key, "shipped", device)]
    for run in runs:
        name, _, path = run.partition("=")
        models.append(named(Path(path), name, device))
    report: dict = {"models": {m.name: describe(m) for m in models}, "estimate_ms": estimate_ms(models)}
    for split in ("test", "family", "unseen"):
        scored = evaluate(files, split, models, device=spec, frame=frame, ks=(1, 4), random_seeds=2)
        methods = scored["methods"]
        report[split] = {"problems": scored["problems"],
                         "inductor_default": round(methods["inductor_default"]["score"], 4),
                         **{m.name: {"top1": round(methods[m.name]["topk"]["1"], 4),
                                     "top4": round(methods[m.name]["topk"]["4"], 4)} for m in models}}
        print(device, split, json.dumps(report[split]), flush=True)
    print(device, "estimate ms", json.dumps(report["estimate_ms"]))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--h100", nargs="+", default=[], metavar="NAME=DIR", help="H100 runs to score")
    parser.add_argument("--h200", nargs="+", default=[], metavar="NAME=DIR", help="H200 runs to score")
    args = parser.parse_args()
    asked = (("h100", args.h100), ("h200", args.h200))
    report = {device: score_device(device, runs) for device, runs in asked if runs}
    OUT.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
