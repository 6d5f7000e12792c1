"""results/gpt2_lm_head_h200.json: what the zero-benchmark mode gives GPT-2's LM head, against the harness.

GPT-2 small's prefill (8 x 1,024 tokens) ends in an 8192 x 50257 x 768 bfloat16 GEMM, `x @ W.t()`
("nt"). Inductor's `pad_mm` pass pads N to 50,264 (a multiple of 8) where padded cuBLAS benchmarks faster,
so the handler sees 8192 x 50264 x 768. `results/gpt2_lm_head_h200.parquet` times every config of its
pruned space and cuBLAS at N = 50,257 (as declared), 50,264 (as padded) and 50,304 (padded to 64, as
nanoGPT declares it), collected on one H200 with

    bash data/collect.sh results/gpt2_lm_head_h200_shapes.json results/gpt2_lm_head_h200.parquet 1

For each N and each model folder this prints and writes: cuBLAS's and the Triton oracle's measured times,
the model's first config and its measured time, the predicted cuBLAS time and ratio, and the one choice
`gemm_topk=1` makes (cuBLAS or that config) with its measured time over the faster of the two.

CPU only, seconds:  python results/gpt2_lm_head_h200.py [MODEL_DIR ...]   (default: models/h200)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

from kernel_select.decision import select
from kernel_select.model.cublas import CublasGate
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset
from kernel_select.offline.training.evaluate import configs_of
from kernel_select.options import DEFAULT_CUBLAS_MARGIN
from kernel_select.problem import Problem

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "results" / "gpt2_lm_head_h200.parquet"
OUT = ROOT / "results" / "gpt2_lm_head_h200.json"


def measured_ms(rows: pd.DataFrame, config) -> float:
    """The harness's median time for one config of one problem's Triton rows."""
    return float(rows["runtime_ms"].iloc[configs_of(rows).index(config)])


def one_model(rows: pd.DataFrame, problem: Problem, model_dir: Path) -> dict:
    model = MLPModel.load(model_dir, "h200")
    gate = CublasGate.load(model_dir, "h200") if (model_dir / "cublas_gate.pt").exists() else None
    chosen = select(problem, model=model, gemm_topk=1, gate=gate, cublas_margin=DEFAULT_CUBLAS_MARGIN)
    ranked = select(problem, model=model, gemm_topk=1)  # the first config, whatever the decision
    first = ranked.configs[0]
    triton = rows[rows["backend"] == "triton"]
    cublas_ms = float(rows.loc[rows["backend"] == "aten", "runtime_ms"].min())
    first_ms = measured_ms(triton, first)
    taken_ms = cublas_ms if chosen.sole == "aten" else first_ms
    return {
        "model": str(model_dir.relative_to(ROOT) if model_dir.is_relative_to(ROOT) else model_dir),
        "first_config": first.short(),
        "first_config_ms": first_ms,
        "first_config_predicted_ms": float(model.estimate(problem, [first])[0]),
        "cublas_predicted_ms": model.estimate_aten(problem),
        "predicted_cublas_over_triton": chosen.cublas.predicted_ratio if chosen.cublas else None,
        "one_choice": "cublas" if chosen.sole == "aten" else "triton",
        "one_choice_ms": taken_ms,
        "one_choice_over_faster": taken_ms / min(cublas_ms, float(triton["runtime_ms"].min())),
    }


def main(model_dirs: list[Path]) -> dict:
    frame = dataset.read(DATA)
    report = {"data": DATA.name, "problems": []}
    for n, rows in frame.groupby("n", sort=True):
        triton = rows[rows["backend"] == "triton"]
        best = triton.loc[[triton["runtime_ms"].idxmin()]]
        problem = Problem(m=int(rows["m"].iloc[0]), n=int(n), k=int(rows["k"].iloc[0]), dtype="bfloat16",
                          layout=str(rows["layout"].iloc[0]))
        report["problems"].append({
            "m": problem.m, "n": problem.n, "k": problem.k, "layout": problem.layout,
            "cublas_ms": float(rows.loc[rows["backend"] == "aten", "runtime_ms"].min()),
            "triton_oracle_ms": float(best["runtime_ms"].iloc[0]),
            "triton_oracle": configs_of(best)[0].short(),
            "models": [one_model(rows, problem, d) for d in model_dirs],
        })
    return report


def show(report: dict) -> None:
    print(f"{'N':>6} {'cuBLAS ms':>9} {'Triton oracle ms':>16}  model: first config (ms, predicted), "
          "cuBLAS predicted ms, one choice (ms, over the faster)")
    for p in report["problems"]:
        for i, m in enumerate(p["models"]):
            head = (f"{p['n']:>6} {p['cublas_ms']:>9.3f} {p['triton_oracle_ms']:>16.3f}" if i == 0
                    else " " * 33)
            cublas = "-" if m["cublas_predicted_ms"] is None else f"{m['cublas_predicted_ms']:.3f}"
            print(f"{head}  {m['model']}: {m['first_config']} ({m['first_config_ms']:.3f}, "
                  f"{m['first_config_predicted_ms']:.3f}), {cublas}, {m['one_choice']} "
                  f"({m['one_choice_ms']:.3f}, {m['one_choice_over_faster']:.3f}x)")


if __name__ == "__main__":
    dirs = [Path(d).resolve() for d in sys.argv[1:]] or [ROOT / "models" / "h200"]
    result = main(dirs)
    show(result)
    if not sys.argv[1:]:  # the committed file is the shipped model's
        OUT.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {OUT.relative_to(ROOT)}")
