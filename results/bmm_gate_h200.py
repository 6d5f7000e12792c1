"""results/bmm_gate_h200.json: would a cuBLAS gate that sees the batch let the zero-benchmark mode give
batched GEMMs one choice?

With gemm_topk=1 a batched GEMM is still benchmarked: no shipped gate or cuBLAS head sees a batch, so
Inductor times the model's first config against cuBLAS (the "hedge"). This trains the gate's network
(cublas_fit.fit_problem_net, the shipped architecture) with log(batch) as one more problem feature on the
H200 files' `train` problems (`val` picks the epoch), two ways: on batched problems only, and on single
and batched ones together. Per held-out split it scores, against min(cuBLAS, Triton oracle) as measured:

- `one_choice`: cuBLAS where the gate predicts it faster, else the shipped model's first config;
- `hedge`: the faster of the two, what the benchmark buys today;
- `first_alone`: the model's first config, cuBLAS never considered;
- for single GEMMs, the shipped gate's one choice beside it.

CPU only, a few minutes:  python results/bmm_gate_h200.py
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from kernel_select.device import get_device
from kernel_select.model.card import Architecture
from kernel_select.model.cublas import CublasGate
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training import cublas_fit
from kernel_select.offline.training import evaluate as ev

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "bmm_gate_h200.json"
SPLITS = ("train", "val", "test", "family", "unseen")  # a problem takes the first split it is in
HELD_OUT = ("test", "family", "unseen")


def problem_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Per problem without TF32: its shape, split, log(cuBLAS / Triton oracle), both times."""
    frame = frame[~frame["allow_tf32"].to_numpy(bool)]
    masks = splits.split_masks(frame)
    label = np.full(len(frame), "", dtype=object)
    for name in SPLITS:
        label[np.asarray(masks[name]) & (label == "")] = name
    frame = frame.assign(split=label)
    finite = frame[np.isfinite(frame["runtime_ms"]) & (frame["runtime_ms"] > 0)]
    aten = finite[finite["backend"] == "aten"].groupby("problem_id")["runtime_ms"].min()
    triton = finite[finite["backend"] == "triton"].groupby("problem_id")["runtime_ms"].min()
    meta = frame.groupby("problem_id")[["m", "n", "k", "dtype", "split", "layout", "batch"]].first()
    table = meta.join(pd.concat({"aten": aten, "triton": triton}, axis=1, join="inner"), how="inner")
    table["log_ratio"] = np.log(table["aten"] / table["triton"])
    return table[table["split"] != ""]


def features(table: pd.DataFrame, spec) -> np.ndarray:  # noqa: ANN001
    return np.c_[cublas_fit.table_features(table, spec), np.log(table["batch"].to_numpy(np.float64))]


def first_config_ms(frame: pd.DataFrame, problem_ids: pd.Index, model: MLPModel) -> pd.Series:
    """The measured time of the model's first config, per problem."""
    scored = ev.problem_rows(frame[frame["problem_id"].isin(problem_ids)], "no Triton rows")
    predicted = ev.predict_cases(model, ev.problem_cases(scored.rows, scored.problems))
    rows = pd.DataFrame({"g": scored.groups, "p": predicted, "r": scored.runtime})
    first = rows.loc[rows.groupby("g")["p"].idxmin()].sort_values("g")["r"].to_numpy()
    return pd.Series(first, index=scored.problem_ids)


def geomean(ratios: np.ndarray) -> float:
    return round(float(np.exp(np.mean(np.log(ratios)))), 4)


def score(table: pd.DataFrame, log_ratio: np.ndarray) -> dict:
    """One choice by `log_ratio` (< 0: cuBLAS), the hedge and the first config alone."""
    best = np.minimum(table["aten"], table["triton"]).to_numpy()
    aten, first = table["aten"].to_numpy(), table["first"].to_numpy()
    pick = np.where(log_ratio < 0, aten, first)
    return {"problems": len(table), "cublas_wins": round(float(np.mean(table["log_ratio"] < 0)), 3),
            "sign_accuracy": round(float(np.mean((log_ratio < 0) == (table["log_ratio"] < 0))), 3),
            "one_choice": geomean(best / pick), "hedge": geomean(best / np.minimum(aten, first)),
            "first_alone": geomean(best / first)}


def main() -> None:
    spec = get_device("h200")
    frame = dataset.read_many(sorted(glob.glob(str(ROOT / "data" / "h200*.parquet"))))
    table = problem_table(frame)
    model = MLPModel.load(ROOT / "models" / "h200", "h200")
    shipped = CublasGate.load(ROOT / "models" / "h200", "h200")
    held = table[table["split"].isin(HELD_OUT)]
    table = table.join(first_config_ms(frame, held.index, model).rename("first"))
    result = {"data": "data/h200*.parquet", "model": "models/h200", "variants": {}}
    for variant, rows in (("batched only", table[table["batch"] > 1]), ("single and batched", table)):
        train, val = rows[rows["split"] == "train"], rows[rows["split"] == "val"]
        arch = Architecture(inputs=features(train, spec).shape[1], hidden_widths=[32, 32], activation="silu")
        fitted = cublas_fit.fit_problem_net(features(train, spec), train["log_ratio"].to_numpy(),
                                            features(val, spec), val["log_ratio"].to_numpy(), arch)
        out = {"train_problems": len(train), "val_problems": len(val), "val_rmse": round(fitted.val_rmse, 4),
               "splits": {}}
        for split in HELD_OUT:
            part = table[table["split"] == split]
            with torch.no_grad():
                x = torch.tensor((features(part, spec) - fitted.mean) / fitted.std, dtype=torch.float32)
                predicted = fitted.net(x).squeeze(1).numpy()
            batched = (part["batch"] > 1).to_numpy()
            report = {"bmm": score(part[batched], predicted[batched]),
                      "bmm_by_dtype": {d: score(part[batched & (part["dtype"] == d).to_numpy()],
                                                predicted[batched & (part["dtype"] == d).to_numpy()])
                                       for d in sorted(part.loc[batched, "dtype"].astype(str).unique())}}
            if variant == "single and batched":
                single = part[~batched]
                report["mm"] = score(single, predicted[~batched])
                report["mm_shipped_gate"] = score(single, shipped.predict_log_ratio(cublas_fit.problems_of(single)))
            out["splits"][split] = report
        result["variants"][variant] = out
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    for variant, out in result["variants"].items():
        for split, report in out["splits"].items():
            for kind in ("bmm", "mm", "mm_shipped_gate"):
                if kind in report:
                    r = report[kind]
                    print(f"{variant:18s} {split:6s} {kind:15s} {r['problems']:4d} problems: sign "
                          f"{r['sign_accuracy']:.3f}, one choice {r['one_choice']:.3f}, hedge {r['hedge']:.3f}, "
                          f"first alone {r['first_alone']:.3f}")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
