"""What the methods other than the models score on a split, on the problems `evaluate` scores:
random configs, Inductor's DEFAULT list, cuBLAS alone, and every method with cuBLAS a candidate (as
Inductor races it), with and without the shipped cuBLAS gate. Scores as in evaluate.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kernel_select.decision import odd_n_and_k
from kernel_select.device import DeviceSpec
from kernel_select.offline.data import dataset
from kernel_select.offline.metrics import geomean, measured_lookup, oracle_ms, topk_dict, topk_scores
from kernel_select.problem import Problem

if TYPE_CHECKING:
    from kernel_select.model.cublas import CublasGate

#: The torch whose DEFAULT list the scores take (the data engine's: the rows were measured under it).
DEFAULT_LIST_TORCH = "2.11"


def random_report(groups: np.ndarray, runtime: np.ndarray, ks: Sequence[int], seeds: int) -> dict[str, Any]:
    per_seed = np.stack([
        geomean(topk_scores(groups, np.random.default_rng(seed).random(len(runtime)), runtime, ks))
        for seed in range(seeds)
    ])
    return {"topk": {str(k): float(v) for k, v in zip(ks, per_seed.mean(axis=0))},
            "topk_std": {str(k): float(v) for k, v in zip(ks, per_seed.std(axis=0))}, "seeds": seeds}


@dataclass(frozen=True)
class DefaultBest:
    """Inductor's DEFAULT list per problem: the fastest of its measured configs (inf if none)."""

    best_ms: np.ndarray
    sizes: np.ndarray  # configs in the list
    found: np.ndarray  # of those, measured


def default_best(rows: pd.DataFrame, problems: pd.DataFrame, groups: np.ndarray, runtime: np.ndarray,
                  spec: DeviceSpec, torch_version: str) -> DefaultBest:
    from kernel_select.space import for_problem

    keys = rows[list(dataset.CONFIG_COLUMNS)].itertuples(index=False, name=None)
    measured = measured_lookup(groups, keys, runtime)
    best, sizes, found = [], [], []
    sizes_dtypes = problems[["m", "n", "k", "dtype"]].itertuples(index=False, name=None)
    for i, (m, n, k, dtype) in enumerate(sizes_dtypes):
        default = for_problem(Problem(int(m), int(n), int(k), str(dtype)), spec, "default", torch_version)
        hits = [measured[(i, c.key)] for c in default if (i, c.key) in measured]
        sizes.append(len(default))
        found.append(len(hits))
        best.append(min(hits) if hits else np.inf)
    return DefaultBest(np.asarray(best), np.asarray(sizes), np.asarray(found))


def default_report(default: DefaultBest, groups: np.ndarray, runtime: np.ndarray,
                    torch_version: str) -> dict[str, Any]:
    """Inductor's DEFAULT list: the best of its configs that were measured (its k is its size)."""
    covered = np.isfinite(default.best_ms)
    scores = oracle_ms(groups, runtime)[covered] / default.best_ms[covered]
    return {
        "score": float(geomean(scores)) if covered.any() else None,
        "k": float(np.mean(default.sizes)), "k_max": int(default.sizes.max()), "torch_version": torch_version,
        "measured_fraction": float(default.found.sum() / max(default.sizes.sum(), 1)),
        "problems": int(covered.sum()),
    }


def with_cublas_report(df: pd.DataFrame, split: str, problem_ids: pd.Index, groups: np.ndarray,
                        runtime: np.ndarray, topk_best: dict[str, np.ndarray], default: DefaultBest,
                        spec: DeviceSpec, ks: Sequence[int], gate: CublasGate | None = None,
                        inside: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
    """What Inductor would get, where cuBLAS is always a candidate too: score = fastest of
    (cuBLAS, every Triton config) / fastest of (cuBLAS, the method's configs). With a cuBLAS gate
    (`gate`, else the one serving `spec`), problems it gates get cuBLAS alone (their Triton
    candidates are skipped), as the handler decides: only where the method's model covers the
    problem (`inside`: per method, per problem of `problem_ids`, whether it lies in the model's
    domain; outside it the handler makes no cuBLAS decision and benchmarks both, decision.py), and
    not for odd N with odd K (decision.odd_n_and_k), where it makes none either."""
    from kernel_select.model import load_gate
    from kernel_select.model.cublas import DEFAULT_MARGIN
    from kernel_select.offline.training.cublas_fit import gate_metrics, problem_ratios, problems_of

    aten = aten_ms(df).reindex(problem_ids).to_numpy()
    have = np.isfinite(aten)
    if not have.any():
        return {"problems": 0}
    aten = aten[have, None]  # (problems, 1): broadcasts over the k columns
    best_all = np.minimum(aten, oracle_ms(groups, runtime)[have, None])

    def scores(best: np.ndarray) -> np.ndarray:
        """best: the method's fastest measured ms per problem, (problems,) or (problems, len(ks))."""
        best = best[have].reshape(len(aten), -1)
        return best_all / np.minimum(aten, best)

    out: dict[str, Any] = {"problems": int(have.sum()), "methods": {
        "cublas": float(geomean(best_all / aten)[0]),
        "inductor_default": float(geomean(scores(default.best_ms))[0]),
        **{name: topk_dict(scores(best), ks) for name, best in topk_best.items()},
    }}
    gate = gate if gate is not None else load_gate(spec)
    if gate is None:
        return out
    # the problems the gate decides (model.cublas.CublasGate.supports: single GEMMs, and batched ones
    # where it has a network for them)
    table = problem_ratios(df).reindex(problem_ids[have]).dropna(subset=["log_ratio"])
    table = table[[gate.supports(p) for p in problems_of(table)]]
    out["gate"] = {"margin": DEFAULT_MARGIN, "split": split, **gate_metrics(gate, table)}
    gated = np.zeros(len(problem_ids), dtype=bool)
    listed = problems_of(table)
    gated[problem_ids.get_indexer(table.index)] = (gate.skips_triton(listed, DEFAULT_MARGIN)
                                                   & ~np.array([odd_n_and_k(p) for p in listed], dtype=bool))
    left = {}
    for name, best in topk_best.items():  # a skipped problem gets cuBLAS alone
        decided = gated & inside[name] if inside is not None and name in inside else gated
        left[name] = int((gated & ~decided).sum())
        out["methods"][f"{name}+gate"] = topk_dict(scores(np.where(decided[:, None], np.inf, best)), ks)
    # problems the gate would skip that the handler benchmarks anyway, outside the method's model's domain
    out["gate"]["benchmarked_outside_domain"] = left
    return out


def aten_ms(df: pd.DataFrame) -> pd.Series:
    """The fastest finite cuBLAS (aten) time per problem_id."""
    aten = df[(df["backend"] == "aten") & np.isfinite(df["runtime_ms"])]
    return aten.groupby("problem_id")["runtime_ms"].min()


def cublas_report(df: pd.DataFrame, groups: np.ndarray, problem_ids: pd.Index,
                   runtime: np.ndarray) -> dict[str, Any]:
    aten = aten_ms(df)
    oracle = pd.Series(oracle_ms(groups, runtime), index=problem_ids)
    both = pd.concat({"aten": aten, "oracle": oracle}, axis=1, join="inner")
    if both.empty:
        return {"problems": 0}
    ratio = (both["aten"] / both["oracle"]).to_numpy()  # < 1: cuBLAS beats every Triton config
    return {"problems": len(both), "cublas_wins_fraction": float(np.mean(ratio < 1.0)),
            "geomean_cublas_over_oracle": float(geomean(ratio)),
            "median_cublas_over_oracle": float(np.median(ratio))}
