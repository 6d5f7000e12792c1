"""results/bmm_gate_h200.json: the shipped H200 gate's network for batched GEMMs, replayed on the held-out
batched problems of the H200 files.

With it, `gemm_topk=1` gives a batched GEMM one choice like a single GEMM: cuBLAS where the network
predicts it faster, else the model's first config, nothing benchmarked. Without it Inductor timed the
first config against cuBLAS (the "hedge"), which costs a compile and a benchmark in the lowering of every
batched GEMM. Per held-out split, against min(cuBLAS, Triton oracle) as measured:

- `one_choice`: the network's call (cuBLAS below a predicted ratio of 1), else the model's first config;
- `hedge`: the faster of the two, what the benchmark bought;
- `first_alone`: the model's first config, cuBLAS never considered;
- `margin`: with gemm_topk > 1, what the default margin does: the share of problems where Triton is
  skipped and how many of them had a faster Triton config.

CPU only, a minute:  python results/bmm_gate_h200.py
"""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_select.model.cublas import DEFAULT_MARGIN, ONE_CHOICE_THRESHOLD, CublasGate, skips_triton_at
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training import evaluate as ev
from kernel_select.offline.training.cublas_fit import problem_ratios, problems_of

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "results" / "bmm_gate_h200.json"
HELD_OUT = ("test", "family", "unseen")


def first_config_ms(frame: pd.DataFrame, model: MLPModel) -> pd.Series:
    """The measured time of the model's first config, per problem of `frame`."""
    scored = ev.problem_rows(frame, "no Triton rows")
    predicted = ev.predict_cases(model, ev.problem_cases(scored.rows, scored.problems))
    rows = pd.DataFrame({"g": scored.groups, "p": predicted, "r": scored.runtime})
    first = rows.loc[rows.groupby("g")["p"].idxmin()].sort_values("g")["r"].to_numpy()
    return pd.Series(first, index=scored.problem_ids)


def geomean(ratios: np.ndarray) -> float:
    return round(float(np.exp(np.mean(np.log(ratios)))), 4)


def score(table: pd.DataFrame, log_ratio: np.ndarray) -> dict:
    """One choice by the predicted `log_ratio`, the hedge, the first config alone, the margin's skips."""
    triton, first = table["triton"].to_numpy(), table["first"].to_numpy()
    aten = np.exp(table["log_ratio"].to_numpy()) * triton
    best = np.minimum(aten, triton)
    pick = np.where(log_ratio < np.log(ONE_CHOICE_THRESHOLD), aten, first)
    skipped = skips_triton_at(log_ratio, DEFAULT_MARGIN)
    return {"problems": len(table), "cublas_wins": round(float(np.mean(table["log_ratio"] < 0)), 3),
            "sign_accuracy": round(float(np.mean((log_ratio < 0) == (table["log_ratio"] < 0))), 3),
            "one_choice": geomean(best / pick), "hedge": geomean(best / np.minimum(aten, first)),
            "first_alone": geomean(best / first),
            "margin": {"margin": DEFAULT_MARGIN, "skipped": round(float(skipped.mean()), 3),
                       "wrongly": int((skipped & (table["log_ratio"].to_numpy() > 0)).sum())}}


def main() -> None:
    frame = dataset.read_many(sorted(glob.glob(str(ROOT / "data" / "h200*.parquet"))))
    model = MLPModel.load(ROOT / "models" / "h200", "h200")
    gate = CublasGate.load(ROOT / "models" / "h200", "h200")
    if gate.batched is None:
        raise SystemExit("models/h200 holds no cuBLAS gate for batched GEMMs (cublas_gate_bmm.pt)")
    masks = splits.split_masks(frame)
    result = {"data": "data/h200*.parquet", "model": "models/h200", "gate": gate.digest(),
              "trained_on": {k: gate.batched.card.metrics[k] for k in ("train_problems", "val_problems")},
              "splits": {}}
    for split in HELD_OUT:
        part = frame[np.asarray(masks[split]) & (frame["batch"] > 1).to_numpy()]
        table = problem_ratios(part)
        table["triton"] = part[part["backend"] == "triton"].groupby("problem_id")["runtime_ms"].min()
        table = table.join(first_config_ms(part[part["problem_id"].isin(table.index)], model).rename("first"))
        predicted = gate.predict_log_ratio(problems_of(table))
        report = {"all": score(table, predicted)}
        for dtype in sorted(table["dtype"].astype(str).unique()):
            mine = (table["dtype"].astype(str) == dtype).to_numpy()
            report[dtype] = score(table[mine], predicted[mine])
        result["splits"][split] = report
        for name, r in report.items():
            print(f"{split:6s} {name:9s} {r['problems']:4d} problems: cuBLAS wins {r['cublas_wins']:.0%}, "
                  f"sign {r['sign_accuracy']:.3f}, one choice {r['one_choice']:.3f}, hedge {r['hedge']:.3f}, "
                  f"first alone {r['first_alone']:.3f}; margin {DEFAULT_MARGIN}: skipped "
                  f"{r['margin']['skipped']:.0%}, wrongly {r['margin']['wrongly']}")
    OUT.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
