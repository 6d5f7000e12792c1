"""What `evaluate` reports for a model beyond its top-k scores: strata, calibration, `topk="auto"`
and the Triton-versus-cuBLAS decision from the model's own cuBLAS prediction.

  strata        top-k per dtype, M bucket and N / K alignment class, next to Inductor's DEFAULT list
  calibration   median |log(predicted / measured)| over each problem's 16 fastest configs
  auto          `topk="auto"` (the model's `auto_topk`): score and mean k, next to fixed top-4
  cublas_rule   with `estimate_aten`: offer Triton only where the best predicted Triton time beats
                the predicted cuBLAS time by the margin (else cuBLAS alone); score with cuBLAS
                always a candidate, share of problems where Triton is skipped, and how many of
                those had a faster Triton config among the model's top-k
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from kernel_select.configs import GemmConfig
from kernel_select.model.base import PerformanceModel
from kernel_select.model.cublas import DEFAULT_MARGIN
from kernel_select.offline.metrics import geomean, oracle_ms, topk_dict
from kernel_select.offline.training.uncertainty import scores_at_k
from kernel_select.problem import TF32, Problem

CALIBRATION_TOP = 16  # calibration is measured where it matters: each problem's fastest configs
AUTO_CAP = 8  # the `auto_topk_cap` knob's default
M_BUCKETS = ((16, "m<=16"), (256, "m<=256"), (4096, "m<=4096"), (np.inf, "m>4096"))


def alignment_class(values: np.ndarray) -> np.ndarray:
    """odd / 2 / 4 / 8 / 16+: the largest power of two (capped at 16) dividing each value."""
    values = np.asarray(values, dtype=np.int64)
    power = np.minimum(values & -values, 16)
    return np.where(power == 1, "odd", np.where(power == 16, "16+", power.astype(str)))


def strata_labels(problems: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per problem (rows of `problems`: m, n, k, dtype, maybe layout and allow_tf32): its precision (the
    dtype, "tf32" for a float32 problem timed with TF32), M bucket, N and K alignment class, and its
    operand layout where `problems` has one."""
    m = problems["m"].to_numpy()
    bucket = np.select([m <= edge for edge, _ in M_BUCKETS], [name for _, name in M_BUCKETS], default="")
    dtype = problems["dtype"].astype(str).to_numpy()
    if "allow_tf32" in problems:
        dtype = np.where(problems["allow_tf32"].to_numpy(bool), TF32, dtype)
    return {"dtype": dtype, "m": bucket,
            "n_align": alignment_class(problems["n"].to_numpy()),
            "k_align": alignment_class(problems["k"].to_numpy()),
            **({"layout": problems["layout"].astype(str).to_numpy()} if "layout" in problems else {}),
            **({"op": np.where(problems["batch"].to_numpy() > 1, "bmm", "mm")}
               if "batch" in problems else {})}


def strata_report(per_problem: np.ndarray, default_ratio: np.ndarray, labels: dict[str, np.ndarray],
                  ks: Sequence[int]) -> dict[str, Any]:
    """{"kind=value": {problems, topk, inductor_default}} for every stratum."""
    out = {}
    for kind, values in labels.items():
        for value in np.unique(values):
            chosen = values == value
            default = default_ratio[chosen & np.isfinite(default_ratio)]
            out[f"{kind}={value}"] = {"problems": int(chosen.sum()),
                                      "topk": topk_dict(per_problem[chosen], ks),
                                      "inductor_default": float(geomean(default)) if default.size else None}
    return out


def calibration(groups: np.ndarray, predicted_ms: np.ndarray, runtime_ms: np.ndarray,
                top: int = CALIBRATION_TOP) -> float:
    """median |log(predicted / measured)| over the `top` fastest measured configs of each problem."""
    order = np.lexsort((runtime_ms, groups))
    g = groups[order]
    rank = np.arange(len(g)) - np.searchsorted(g, g)
    chosen = order[rank < top]
    return float(np.median(np.abs(np.log(predicted_ms[chosen] / runtime_ms[chosen]))))


def auto_report(model: PerformanceModel, groups: np.ndarray, predicted_ms: np.ndarray, runtime_ms: np.ndarray,
                cap: int = AUTO_CAP, cases: Sequence[tuple[Problem, Sequence[GemmConfig]]] | None = None,
                ) -> dict[str, Any] | None:
    """`topk="auto"` on these problems (None when the model has no `auto_topk`). `cases`: each
    problem and its configs, in group order (rows contiguous per problem), for models whose rule
    looks at them again (a spread of members); without them a model decides from its predictions."""
    bounds = np.r_[0, np.cumsum(np.bincount(groups))]
    cases = cases if cases is not None else [(None, None)] * (len(bounds) - 1)
    ks = [model.auto_topk(predicted_ms[lo:hi], cap, problem, configs)
          for lo, hi, (problem, configs) in zip(bounds[:-1], bounds[1:], cases)]
    if any(k is None for k in ks):
        return None
    k = np.asarray(ks, dtype=np.int64)
    per_problem = scores_at_k(groups, predicted_ms, runtime_ms, k)
    top4 = scores_at_k(groups, predicted_ms, runtime_ms, np.full(len(k), 4))
    return {"cap": cap, "score": float(geomean(per_problem)), "mean_k": float(k.mean()),
            "k_counts": {str(v): int((k == v).sum()) for v in np.unique(k)},
            "top4_score": float(geomean(top4))}


def cublas_rule_report(model: PerformanceModel, problems: Sequence[Problem], groups: np.ndarray,
                       predicted_ms: np.ndarray, runtime_ms: np.ndarray, aten_ms: np.ndarray,
                       best_topk: np.ndarray, ks: Sequence[int],
                       margins: Sequence[float] = (0.0, 0.05, 0.1, DEFAULT_MARGIN)) -> dict[str, Any] | None:
    """The two-sided rule from the model's own cuBLAS prediction (None without `estimate_aten`).

    `aten_ms`: measured cuBLAS per problem (nan where none); `best_topk`: (problems, len(ks)) the
    fastest measured config among the model's top-k."""
    # each problem as it is (batch, op, layout): the head answers None where it makes no decision
    predicted_aten = np.array([np.nan if (v := model.estimate_aten(p)) is None else v for p in problems])
    have = np.isfinite(aten_ms) & np.isfinite(predicted_aten)
    if not have.any():
        return None
    best_pred = np.full(len(problems), np.inf)
    np.minimum.at(best_pred, groups, predicted_ms)
    oracle = oracle_ms(groups, runtime_ms)
    truth = np.log(aten_ms[have] / oracle[have])  # > 0: some Triton config beats cuBLAS
    out: dict[str, Any] = {
        "problems": int(have.sum()),
        "aten_calibration_median_abs_log": float(np.median(np.abs(np.log(predicted_aten[have]
                                                                          / aten_ms[have])))),
        "sign_accuracy": float(np.mean((np.log(predicted_aten[have] / best_pred[have]) < 0) == (truth < 0))),
        "margins": {}}
    best_all = np.minimum(aten_ms[have], oracle[have])[:, None]
    for margin in margins:
        offer = best_pred[have] <= (1.0 - margin) * predicted_aten[have]
        got = np.where(offer[:, None], np.minimum(aten_ms[have, None], best_topk[have]), aten_ms[have, None])
        out["margins"][f"{margin:g}"] = {
            "triton_skipped": float(np.mean(~offer)), "wrongly_skipped": int(((~offer) & (truth > 0)).sum()),
            "with_cublas": topk_dict(best_all / got, ks)}
    return out


def held_out_summary(report: dict[str, Any], name: str) -> dict[str, Any]:
    """What a model card keeps of an `evaluate_splits` report for model `name`: per split its top-k
    (Triton only and with cuBLAS), Inductor's DEFAULT list, calibration, `auto`, top-1/top-4 per
    stratum and the 10 worst problems at k = 4 with what it picked and what won."""
    out: dict[str, Any] = {}
    for split, r in report["splits"].items():
        method = r.get("methods", {}).get(name)
        if method is None or "topk" not in method:
            continue
        with_cublas = r.get("with_cublas", {}).get("methods", {})
        out[split] = {
            "problems": r["problems"], "topk": method["topk"], "with_cublas": with_cublas.get(name),
            "inductor_default": r["methods"]["inductor_default"].get("score"),
            "inductor_default_with_cublas": with_cublas.get("inductor_default"),
            "calibration_median_abs_log_top16": method["calibration_median_abs_log_top16"],
            "auto": method.get("auto"),
            "strata": {key: {"problems": s["problems"], "top1": s["topk"].get("1"),
                             "top4": s["topk"].get("4"), "inductor_default": s["inductor_default"]}
                       for key, s in method["strata"].items()},
            "worst_top4": method["worst"].get("4", []),
        }
    return out
