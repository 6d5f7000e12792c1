"""How the cuBLAS time head and the cuBLAS gate err per operand layout.

Both are problem-level nets over (m, n, k, dtype) with no layout input (gate.py's features,
version 1), trained on "nn" problems. cuBLAS picks other kernels for "nt" and "tn", and the
Triton oracle moves too, so their error may grow outside "nn"; this measures it on the frozen
held-out problems (splits.EVAL_SPLITS: never trained on) of every layout in the data:

  aten_rmse_log_ms     RMSE of log(predicted / measured cuBLAS ms)
  gate_sign_accuracy   share of problems where the gate's predicted sign of log(cuBLAS / Triton
                       oracle) is the measured one
  gate_rmse_log_ratio  RMSE of the gate's predicted log(cuBLAS / Triton oracle)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kernel_select.model.aten import AtenHead
from kernel_select.model.gate import CublasGate, problem_ratios, problems_of
from kernel_select.offline.data import splits


def cublas_errors_by_layout(frame: pd.DataFrame, head: AtenHead | None,
                            gate: CublasGate | None) -> dict[str, dict[str, Any]]:
    """{layout: {problems, aten_rmse_log_ms?, gate_sign_accuracy?, gate_rmse_log_ratio?}} on the
    held-out single GEMMs of `frame` (a dataset frame) with a cuBLAS and a Triton time."""
    masks = splits.split_masks(frame)
    held_out = np.logical_or.reduce([np.asarray(masks[name]) for name in splits.EVAL_SPLITS])
    rows = frame[held_out & (frame["batch"] == 1).to_numpy()]
    table = problem_ratios(rows)
    aten = rows[(rows["backend"] == "aten") & np.isfinite(rows["runtime_ms"])]
    table["aten_ms"] = aten.groupby("problem_id")["runtime_ms"].min().reindex(table.index)
    table["layout"] = rows.groupby("problem_id")["layout"].first().reindex(table.index).astype(str)
    out: dict[str, dict[str, Any]] = {}
    for layout, part in table.groupby("layout", sort=True):
        problems = problems_of(part)
        entry: dict[str, Any] = {"problems": len(part)}
        if head is not None:
            supported = [head.supports(p) for p in problems]
            chosen = [p for p, ok in zip(problems, supported) if ok]
            error = np.log(head.predict_ms(chosen)) - np.log(part["aten_ms"].to_numpy()[supported])
            entry["aten_rmse_log_ms"] = _rmse(error)
        if gate is not None:
            predicted, truth = gate.predict_log_ratio(problems), part["log_ratio"].to_numpy()
            entry["gate_sign_accuracy"] = float(np.mean((predicted < 0) == (truth < 0)))
            entry["gate_rmse_log_ratio"] = _rmse(predicted - truth)
        out[str(layout)] = entry
    return out


def _rmse(error: np.ndarray) -> float | None:
    return float(np.sqrt(np.mean(error ** 2))) if error.size else None
