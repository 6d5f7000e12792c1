"""Side-by-side model selection on the frozen `test` and `family` splits (see splits.py).

One command (`run_selection`) fits every candidate of train_candidates.py on the trainable
problems (hash train/val minus the family holdout; configs per problem capped so the recipe scales
to millions of rows), then scores each on both held-out splits:

  topk            oracle / best measured among the top-k, Triton configs only (k = 1..16)
  with_cublas     the same where cuBLAS is always a candidate: min(cuBLAS, oracle) / min(cuBLAS, top-k)
  strata          top-4 per dtype and per N alignment class, next to Inductor's DEFAULT list
  calibration     median |log(predicted / measured)| over each problem's 16 fastest configs
  latency_ms      median wall time of featurize + predict for ~1,400 configs on one CPU thread
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from kernel_select.device import DeviceSpec, get_device
from kernel_select.model import features as v1
from kernel_select.model import features_v2 as v2
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training import uncertainty
from kernel_select.offline.training.evaluate import _default_best
from kernel_select.offline.metrics import (
    DEFAULT_KS, best_in_top_k, geomean, oracle_ms, spearman_per_group, topk_scores,
)
from kernel_select.offline.training.train import MLPHParams
from kernel_select.offline.training.training_data import cap_rows_per_problem, prepare_rows
from kernel_select.offline.training.train_candidates import (
    Candidate, GBMParams, TrainData, ensemble, fit_fast_autotune, fit_gbm_rank,
    fit_gbm_reg, fit_mlp_v1, fit_mlp_v2,
)
from kernel_select.problem import Problem
from kernel_select.space import for_problem

log = logging.getLogger(__name__)

#: The seed problem of the latency budget: 1,206 configs in its pruned EXHAUSTIVE space on H100.
LATENCY_PROBLEM = Problem(560, 1280, 3420, "bfloat16")
SHORTLIST = 64  # configs per problem the tree model re-scores (keeps estimate() within 2 ms)
CALIBRATION_TOP = 16  # calibration is measured where it matters: each problem's fastest configs


def build_train_data(rows: pd.DataFrame, x: np.ndarray, masks: dict[str, np.ndarray], cap: int,
                     seed: int) -> TrainData:
    keep = (masks["train"] | masks["val"]) & cap_rows_per_problem(rows, cap, seed)
    return TrainData(x=x[keep], log_ms=np.log(rows["runtime_ms"].to_numpy(np.float64)[keep]),
                     groups=pd.factorize(rows.loc[keep, "problem_id"])[0], is_val=masks["val"][keep])


NETS = (fit_mlp_v1, fit_mlp_v2, fit_fast_autotune)


def fit_candidates(data: TrainData, hp: MLPHParams, gbm: GBMParams, seed: int,
                   progress: bool = True, fast_autotune: bool = False) -> list[Candidate]:
    """Every candidate on the same rows. The fast_autotune net is opt-in: it measured ~20 ms per
    estimate (ten times the budget) and trains for ~13 minutes on 2 cores."""
    fitted = []
    optional = (fit_fast_autotune,) if fast_autotune else ()
    fits = (fit_mlp_v1, fit_mlp_v2, *optional, fit_gbm_reg, fit_gbm_rank)
    for fit in tqdm(fits, desc="candidates", disable=not progress):
        started = time.perf_counter()
        candidate = fit(data, hp, seed, progress=False) if fit in NETS else fit(data, gbm, seed)
        candidate.info["train_seconds"] = round(time.perf_counter() - started, 1)
        fitted.append(candidate)
    by_name = {c.name: c for c in fitted}
    pair = [by_name["mlp_v1"], by_name["gbm_reg"]]
    fitted.append(ensemble("ensemble", pair))
    fitted.append(ensemble("ensemble_shortlist", pair, shortlist=SHORTLIST))
    return fitted


class HeldOut:
    """One held-out split's rows, grouped by problem, with everything scores need precomputed."""

    def __init__(self, rows: pd.DataFrame, x: np.ndarray, mask: np.ndarray, aten: pd.Series,
                 spec: DeviceSpec, torch_version: str) -> None:
        self.rows, self.x = rows[mask].reset_index(drop=True), x[mask]
        self.groups, self.problem_ids = pd.factorize(self.rows["problem_id"], sort=True)
        self.runtime = self.rows["runtime_ms"].to_numpy(np.float64)
        self.problems = self.rows.groupby("problem_id", sort=True)[["m", "n", "k", "dtype"]].first()
        self.aten = aten.reindex(self.problem_ids).to_numpy(np.float64)
        self.default_ms = _default_best(self.rows, self.problems, self.groups, self.runtime, spec,
                                        torch_version).best_ms
        self.strata = {
            "dtype": self.problems["dtype"].astype(str).to_numpy(),
            "n_align": np.where(self.problems["n"].to_numpy() % 8 == 0, "n%8==0", "n%8!=0"),
        }

    def report(self, scores: np.ndarray, calibrated: bool, ks=DEFAULT_KS) -> dict[str, Any]:
        per_problem = topk_scores(self.groups, scores, self.runtime, ks)
        best = best_in_top_k(self.groups, scores, self.runtime, ks)
        out: dict[str, Any] = {"topk": _by_k(geomean(per_problem), ks)}
        have = np.isfinite(self.aten)
        if have.any():
            best_all = np.minimum(self.aten, oracle_ms(self.groups, self.runtime))[have, None]
            out["with_cublas"] = _by_k(geomean(best_all / np.minimum(self.aten[have, None], best[have])), ks)
        k4 = list(ks).index(4)
        out["strata_top4"] = {f"{kind}={value}": float(geomean(per_problem[labels == value, k4]))
                              for kind, labels in self.strata.items() for value in np.unique(labels)}
        if calibrated:
            out["calibration_median_abs_log"] = self.calibration(scores)
        out["per_problem"] = per_problem
        return out

    def calibration(self, log_pred: np.ndarray) -> float:
        """median |log(pred/measured)| over the CALIBRATION_TOP fastest measured configs per problem."""
        order = np.lexsort((self.runtime, self.groups))
        g = self.groups[order]
        rank = np.arange(len(g)) - np.searchsorted(g, g)
        top = order[rank < CALIBRATION_TOP]
        return float(np.median(np.abs(log_pred[top] - np.log(self.runtime[top]))))

    def default_report(self) -> dict[str, Any]:
        covered = np.isfinite(self.default_ms)
        ratio = np.where(covered, oracle_ms(self.groups, self.runtime) / self.default_ms, np.nan)
        out = {"score": float(geomean(ratio[covered])),
               "strata": {f"{kind}={value}": float(geomean(ratio[(labels == value) & covered]))
                          for kind, labels in self.strata.items() for value in np.unique(labels)}}
        have = np.isfinite(self.aten) & covered
        if have.any():
            best_all = np.minimum(self.aten, oracle_ms(self.groups, self.runtime))[have]
            out["with_cublas"] = float(geomean(best_all / np.minimum(self.aten[have], self.default_ms[have])))
        return out


AUTO_METHOD = "ensemble_shortlist"


def _auto_inputs(by_name: dict[str, Candidate], held: HeldOut) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(ensemble scores, runtimes, per-problem spread of the ensemble's members) on a split."""
    ensemble_scores = by_name[AUTO_METHOD].score(held.x, held.groups)
    members = [by_name[m].score(held.x, held.groups) for m in by_name[AUTO_METHOD].info["members"]]
    spread = uncertainty.problem_spread(held.groups, *members, ensemble_scores)
    return ensemble_scores, held.runtime, spread


def auto_report(held: HeldOut, by_name: dict[str, Candidate], s0: float) -> dict[str, Any]:
    """`topk="auto"` on a split: its score and mean k, next to fixed top-4."""
    scores, runtime, spread = _auto_inputs(by_name, held)
    k = uncertainty.auto_k(spread, s0)
    per_problem = uncertainty.auto_scores(held.groups, scores, runtime, k)
    top4 = topk_scores(held.groups, scores, runtime, (4,))[:, 0]
    return {"score": float(geomean(per_problem)), "mean_k": float(k.mean()),
            "k_counts": {str(v): int((k == v).sum()) for v in np.unique(k)},
            "top4_score": float(geomean(top4)),
            # does a larger spread go with a larger top-1 loss? (the premise of the rule)
            "spread_vs_top1_loss_spearman": float(spearman_per_group(
                np.zeros(len(spread), dtype=np.int64), spread,
                -np.log(topk_scores(held.groups, scores, runtime, (1,))[:, 0]))[0])}


def _by_k(values: np.ndarray, ks) -> dict[str, float]:
    return {str(k): float(v) for k, v in zip(ks, values)}


def estimate_latency_ms(candidate: Candidate, spec: DeviceSpec, repeats: int = 30) -> float:
    """Median ms of featurize + score for one problem's exhaustive space (~1,400 configs), 1 thread."""
    problem = LATENCY_PROBLEM
    configs = for_problem(problem, spec, "exhaustive")
    columns = candidate.info.get("features", len(v2.FEATURE_NAMES))
    featurize = v2.featurize if columns > len(v1.FEATURE_NAMES) or "booster" in candidate.info \
        or "members" in candidate.info else v1.featurize
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            x = featurize(problem.m, problem.n, problem.k, problem.dtype, configs, spec)
            if x.shape[1] < len(v2.FEATURE_NAMES):  # v1 features: pad so prefix slicing is uniform
                x = np.pad(x, ((0, 0), (0, len(v2.FEATURE_NAMES) - x.shape[1])))
            candidate.score(x, None)
            times.append((time.perf_counter() - started) * 1e3)
    finally:
        torch.set_num_threads(threads)
    return statistics.median(times)


def run_selection(data_path: str | Path | Sequence[str | Path], device: DeviceSpec | str, *, cap: int = 384,
                  seed: int = 0, hp: MLPHParams | None = None, gbm: GBMParams | None = None,
                  torch_version: str = "2.11", progress: bool = True,
                  fast_autotune: bool = False) -> tuple[dict[str, Any], list[Candidate]]:
    """Fit every candidate and score it on `test` and `family`; returns a JSON-ready report.
    `data_path`: one dataset file, several, or glob patterns (read as one, see dataset.read_many)."""
    spec = get_device(device)
    hp = hp or MLPHParams(epochs=30)
    frame = dataset.read_many(data_path)
    rows, aten = prepare_rows(frame, spec)
    x = v2.featurize_frame(rows, spec)
    masks = splits.split_masks(rows)
    data = build_train_data(rows, x, masks, cap, seed)
    candidates = fit_candidates(data, hp, gbm or GBMParams(), seed, progress, fast_autotune)
    report: dict[str, Any] = {"data": [p.name for p in dataset.expand_paths(data_path)], "device": spec.key,
                              "cap_rows_per_problem": cap,
                              "train_rows": int(len(data.log_ms)),
                              "split_problems": splits.split_summary(rows),
                              "splits": {}, "candidates": {}}
    for c in candidates:
        report["candidates"][c.name] = {
            "calibrated": c.calibrated, "latency_ms": round(estimate_latency_ms(c, spec), 3),
            **{k: v for k, v in c.info.items() if k not in ("net", "booster", "mean", "std")}}
    by_name = {c.name: c for c in candidates}
    val = HeldOut(rows, x, masks["val"], aten, spec, torch_version)
    s0 = uncertainty.choose_threshold(val.groups, *_auto_inputs(by_name, val))
    report["auto"] = {"threshold": s0, "cap": uncertainty.AUTO_CAP, "method": AUTO_METHOD}
    for name in splits.EVAL_SPLITS:
        held = HeldOut(rows, x, masks[name], aten, spec, torch_version)
        report["auto"][name] = auto_report(held, by_name, s0)
        split_report: dict[str, Any] = {"problems": len(held.problem_ids), "methods": {},
                                        "inductor_default": held.default_report()}
        for c in candidates:
            split_report["methods"][c.name] = held.report(c.score(held.x, held.groups), c.calibrated)
            split_report["methods"][c.name].pop("per_problem")
        report["splits"][name] = split_report
    return report, candidates
