"""Offline evaluation: how close to the exhaustive oracle does benchmarking only the top-k get?

For each problem of a split:
  oracle_ms   = fastest measured Triton config of the problem (finite runtime, status ok/capped)
  score(k)    = oracle_ms / (fastest measured runtime among the method's k best-ranked configs)
A method ranks the problem's successfully measured configs (the pruned exhaustive space); the
score is 1.0 when the oracle config is among its top-k. Reported per method: the geometric mean
of score(k) over problems for k = 1, 2, 4, 8, 16.

Layouts: the rows scored are those in the operand layouts the evaluated models were trained on
(the union of their cards' `layouts`; "nn" alone, `dataset.MODELLED_LAYOUTS`, when none names
any). A model's `topk` covers the problems in its own trained layouts, so a model without a
layout input keeps its "nn" figures; `layouts` gives its top-k per layout of every problem scored.

Baselines on the same problems: the analytical model, random k (mean over seeds), Inductor's
DEFAULT list (best of its measured configs; its k is its size), nvMatmulHeuristics' Triton target
when the package is installed, and cuBLAS (the problem's aten row) against the oracle; all but the
models are scored in baseline_scores.py.

Two models or more: `paired` compares each with the first one evaluated, per k: the geomean over
problems of its score(k) / the first's, with a 95% paired-bootstrap interval (`metrics.
paired_bootstrap`; > 1: its top-k holds faster configs), on the problems of both models' trained
layouts. `evaluate_splits` adds the same over the held-out splits together.

Pinned: `evaluate_splits` also scores the shipped model on a fixed slice of each held-out split
(held_out_slice.py: 40 problems per split, chosen by hash), small enough to commit, so a CPU test
can recompute those scores without the dataset and catch a model or scoring change that eval.json
does not record.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from kernel_select.offline.data import dataset, splits
from kernel_select.offline.data.device_rows import dataset_device, device_rows, names_of
from kernel_select.offline.training import baseline_scores, held_out_slice, model_extras
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import DatasetError, KernelSelectError, NoTrainedModelError
from kernel_select.layouts import DEFAULT_LAYOUT
from kernel_select.model import PerformanceModel, get_model
from kernel_select.offline.metrics import (  # noqa: F401 - re-exported for callers
    CONFIDENCE,
    DEFAULT_KS,
    RESAMPLES,
    best_in_top_k,
    geomean,
    oracle_ms,
    measured_lookup,
    paired_bootstrap,
    spearman_per_group,
    topk_dict,
    topk_scores,
)
from kernel_select.offline.training.nvmmh import nvmmh_report
from kernel_select.problem import Problem

if TYPE_CHECKING:
    from kernel_select.model.cublas import CublasGate

log = logging.getLogger(__name__)

USABLE_STATUSES = ("ok", "capped")
WORST_REPORTED = 10  # problems listed per k in a model's "worst" report
_CONFIG_COLS = list(dataset.CONFIG_COLUMNS)

# -- the evaluation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProblemRows:
    """A split's usable Triton rows in the one order every score uses (problem, then config)."""

    rows: pd.DataFrame
    groups: np.ndarray  # each row's problem code
    problem_ids: pd.Index  # code -> problem_id
    runtime: np.ndarray  # each row's measured ms
    problems: pd.DataFrame  # one row per problem: m, n, k, dtype, layout, batch, op, allow_tf32


def problem_rows(df: pd.DataFrame, empty_error: str) -> ProblemRows:
    """`df`'s usable Triton rows, ordered and coded by problem; DatasetError(`empty_error`) if none."""
    rows = usable_triton_rows(df).sort_values(["problem_id", *_CONFIG_COLS], kind="stable")
    if rows.empty:
        raise DatasetError(empty_error)
    rows = rows.reset_index(drop=True)
    groups, problem_ids = pd.factorize(rows["problem_id"], sort=True)
    columns = ["m", "n", "k", "dtype", "layout", "batch", "op"]
    columns += ["allow_tf32"] if "allow_tf32" in rows.columns else []  # a hand-built frame may lack it
    problems = rows.groupby("problem_id", sort=True)[columns].first()
    return ProblemRows(rows=rows, groups=groups, problem_ids=problem_ids,
                       runtime=rows["runtime_ms"].to_numpy(np.float64), problems=problems)


def usable_triton_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Triton rows that measured a finite, positive runtime (what both training and evaluation use)."""
    keep = ((df["backend"] == "triton") & df["status"].isin(USABLE_STATUSES)
            & np.isfinite(df["runtime_ms"]) & (df["runtime_ms"] > 0))
    return df[keep]


@dataclass(frozen=True)
class ModelScores:
    """One model's score(k) per problem of a split, and which problems are in its trained layouts."""

    per_problem: np.ndarray  # (problems, len(ks))
    own: np.ndarray  # (problems,) bool


def evaluate(data_path: str | Path | Sequence[str | Path], split: str = "test",
             models: Sequence[str | PerformanceModel] = ("mlp", "analytical"), *,
             device: DeviceSpec | str | None = None, ks: Sequence[int] = DEFAULT_KS,
             random_seeds: int = 20, default_torch_version: str = baseline_scores.DEFAULT_LIST_TORCH,
             frame: pd.DataFrame | None = None, gate: CublasGate | None = None) -> dict[str, Any]:
    """Score models and baselines on one split of a dataset. Returns JSON-serializable data.

    `split` is one of `splits.py`'s: train, val, test (the hash split) or family (held-out
    architecture families and odd N). `models` are registry names (resolved with
    `get_model(name, device)`) or model instances. A model that cannot be loaded is reported as
    skipped with the reason, not raised. `frame`: the dataset, already read from `data_path`.
    `gate`: the cuBLAS gate the "with cuBLAS" figures apply (default: the one serving the device).
    """
    return _evaluate(data_path, split, models, device=device, ks=ks, random_seeds=random_seeds,
                     default_torch_version=default_torch_version, frame=frame, gate=gate)[0]


def _evaluate(data_path: str | Path | Sequence[str | Path], split: str,
              models: Sequence[str | PerformanceModel], *, device: DeviceSpec | str | None,
              ks: Sequence[int], random_seeds: int = 20,
              default_torch_version: str = baseline_scores.DEFAULT_LIST_TORCH,
              frame: pd.DataFrame | None = None, gate: CublasGate | None = None,
              ) -> tuple[dict[str, Any], dict[str, ModelScores]]:
    """`evaluate`'s report, and each evaluated model's per-problem scores (for `paired` over splits)."""
    frame = dataset.read_many(data_path) if frame is None else frame
    frame = splits.split_rows(frame, split)
    spec, frame = device_rows(frame, device, data_path)
    resolved = _resolve_models(models, spec)
    df = dataset.modelled_layout_rows(frame, "evaluation", evaluated_layouts(resolved.values()))
    scored = problem_rows(df, f"{data_path}: no usable Triton rows in split {split!r}")
    rows, groups, problem_ids, runtime, problems = (scored.rows, scored.groups, scored.problem_ids,
                                                    scored.runtime, scored.problems)
    cases = problem_cases(rows, problems)

    report: dict[str, Any] = {
        "data": names_of(data_path), "split": split, "device": spec.key, "ks": list(ks),
        "problems": len(problem_ids), "rows": len(rows), "methods": {},
    }
    methods = report["methods"]
    default_best = baseline_scores.default_best(rows, problems, groups, runtime, spec, default_torch_version)
    aten = baseline_scores.aten_ms(df).reindex(problem_ids).to_numpy(np.float64)
    topk_best: dict[str, np.ndarray] = {}  # model name -> best measured ms in its top-k, per problem
    inside: dict[str, np.ndarray] = {}  # model name -> per problem, whether it lies in the model's domain
    scores: dict[str, ModelScores] = {}
    for name, model in resolved.items():
        try:
            if isinstance(model, str):  # the reason it could not be loaded
                raise KernelSelectError(model)
            predicted = predict_cases(model, cases)
        except (KernelSelectError, ImportError) as exc:
            log.warning("evaluate: skipping model %s: %s", name, exc)
            methods[name] = {"skipped": str(exc)}
            continue
        methods[name] = _model_report(name, model, groups, problem_ids, rows, predicted, runtime, ks)
        methods[name].update(layout_report(model, problems["layout"].to_numpy(), groups, predicted, runtime,
                                           ks))
        topk_best[name] = best_in_top_k(groups, predicted, runtime, ks)
        inside[name] = np.array([not model.domain_gap(problem) for problem, _ in cases], dtype=bool)
        scores[name] = ModelScores(oracle_ms(groups, runtime)[:, None] / topk_best[name],
                                   trained_layout_mask(model, problems["layout"].to_numpy()))
        methods[name].update(_model_extras(model, cases, problems, groups, predicted, runtime, aten,
                                           topk_best[name], default_best, ks))
    if len(scores) >= 2:
        report["paired"] = paired_report(scores, ks)
    methods["random"] = baseline_scores.random_report(groups, runtime, ks, random_seeds)
    methods["inductor_default"] = baseline_scores.default_report(default_best, groups, runtime,
                                                                 default_torch_version)
    methods["nvmatmulheuristics"] = nvmmh_report(rows, problems, groups, runtime, spec, ks)
    report["cublas"] = baseline_scores.cublas_report(df, groups, problem_ids, runtime)
    report["with_cublas"] = baseline_scores.with_cublas_report(df, split, problem_ids, groups, runtime,
                                                               topk_best, default_best, spec, ks, gate,
                                                               inside)
    return report, scores


def paired_report(scores: dict[str, ModelScores], ks: Sequence[int]) -> dict[str, Any]:
    """Each model against the first of `scores`, per k: the geomean over problems of its score(k) /
    the reference's, with its paired-bootstrap interval, on the problems in both models' trained
    layouts (> 1: its top-k holds faster configs than the reference's)."""
    (reference, ref), *others = scores.items()
    methods: dict[str, Any] = {}
    for name, other in others:
        both = ref.own & other.own
        if not both.any():
            methods[name] = {"skipped": f"no problem in both {reference}'s and {name}'s trained layouts"}
            continue
        methods[name] = {"problems": int(both.sum()), "ratio": {
            str(k): paired_bootstrap(other.per_problem[both, j], ref.per_problem[both, j]).as_dict()
            for j, k in enumerate(ks)}}
    return {"reference": reference, "ks": list(ks), "confidence": CONFIDENCE, "resamples": RESAMPLES,
            "methods": methods}


def _resolve_models(models: Sequence[str | PerformanceModel], spec: DeviceSpec,
                    ) -> dict[str, PerformanceModel | str]:
    """name -> the model, or the reason it cannot be loaded (reported as skipped, not raised)."""
    resolved: dict[str, PerformanceModel | str] = {}
    for entry in models:
        name = entry if isinstance(entry, str) else entry.name
        try:
            resolved[name] = get_model(entry, spec) if isinstance(entry, str) else entry
        except (KernelSelectError, ImportError) as exc:
            resolved[name] = str(exc)
    return resolved


def evaluated_layouts(models: Sequence[PerformanceModel | str]) -> tuple[str, ...]:
    """The layouts the models' cards name (those not loaded are strings, and count for none), or
    `dataset.MODELLED_LAYOUTS` when none names any."""
    named = {layout for model in models if not isinstance(model, str)
             for layout in (model.trained_layouts() or ())}
    return tuple(sorted(named)) or dataset.MODELLED_LAYOUTS


def layout_report(model: PerformanceModel, layouts: np.ndarray, groups: np.ndarray, predicted: np.ndarray,
                  runtime: np.ndarray, ks: Sequence[int]) -> dict[str, Any]:
    """The model's `topk` over the problems in its trained layouts (all for a model without any),
    and `layouts`: {layout: {problems, topk}} for every layout scored."""
    per_problem = topk_scores(groups, predicted, runtime, ks)
    trained = model.trained_layouts()
    own = trained_layout_mask(model, layouts)
    by_layout = {str(layout): {"problems": int((layouts == layout).sum()),
                               "topk": topk_dict(per_problem[layouts == layout], ks)}
                 for layout in sorted(set(layouts.tolist()))}
    out: dict[str, Any] = {"layouts": by_layout, "topk_layouts": sorted(trained) if trained else None}
    if own.any():
        out["topk"] = topk_dict(per_problem[own], ks)
    return out


def trained_layout_mask(model: PerformanceModel, layouts: np.ndarray) -> np.ndarray:
    """Which problems (by layout) are in the model's trained layouts; all for a model without any."""
    trained = model.trained_layouts()
    return np.isin(layouts, list(trained)) if trained else np.ones(len(layouts), dtype=bool)


def _model_extras(model: PerformanceModel, cases: Sequence[tuple[Problem, list[GemmConfig]]],
                  problems: pd.DataFrame, groups: np.ndarray,
                  predicted: np.ndarray, runtime: np.ndarray, aten: np.ndarray, best: np.ndarray,
                  default: baseline_scores.DefaultBest, ks: Sequence[int]) -> dict[str, Any]:
    """Strata, calibration, `topk="auto"` and the model's own cuBLAS rule (model_extras.py)."""
    per_problem = oracle_ms(groups, runtime)[:, None] / best
    default_ratio = oracle_ms(groups, runtime) / default.best_ms
    out: dict[str, Any] = {
        "strata": model_extras.strata_report(per_problem, default_ratio, model_extras.strata_labels(problems),
                                             ks),
        "calibration_median_abs_log_top16": model_extras.calibration(groups, predicted, runtime)}
    auto = model_extras.auto_report(model, groups, predicted, runtime, cases=cases)
    if auto is not None:
        out["auto"] = auto
    rule = model_extras.cublas_rule_report(model, [problem for problem, _ in cases], groups, predicted,
                                           runtime, aten, best, ks)
    if rule is not None:
        out["cublas_rule"] = rule
    return out


def problem_cases(rows: pd.DataFrame, problems: pd.DataFrame) -> list[tuple[Problem, list[GemmConfig]]]:
    """Each problem with its configs, in `problems` order (rows are sorted by problem the same way);
    problems without a `layout` column are "nn", without `batch` and `op` single mm, without
    `allow_tf32` float32 on CUDA cores."""
    columns = problems.reindex(columns=["m", "n", "k", "dtype", "layout"], fill_value=DEFAULT_LAYOUT)
    batch = problems["batch"].to_numpy() if "batch" in problems else np.ones(len(problems), dtype=np.int64)
    op = problems["op"].astype(str).to_numpy() if "op" in problems else np.full(len(problems), "mm")
    tf32 = (problems["allow_tf32"].to_numpy(bool) if "allow_tf32" in problems
            else np.zeros(len(problems), dtype=bool))
    bounds = np.r_[0, np.cumsum(rows.groupby("problem_id", sort=True).size().to_numpy())]
    return [(Problem(int(m), int(n), int(k), str(dtype), batch=int(batch[i]), op=str(op[i]),
                     layout=str(layout), tf32=bool(tf32[i])),
             configs_of(rows.iloc[bounds[i]:bounds[i + 1]]))
            for i, (m, n, k, dtype, layout) in enumerate(columns.itertuples(index=False, name=None))]


def evaluate_splits(data_path: str | Path | Sequence[str | Path],
                    models: Sequence[str | PerformanceModel] = ("mlp", "analytical"),
                    *, device: DeviceSpec | str | None = None, ks: Sequence[int] = DEFAULT_KS,
                    frame: pd.DataFrame | None = None, **options: Any) -> dict[str, Any]:
    """`evaluate` on both frozen held-out splits, plus `shipped`: what `load_default` returns for the
    device (the method users get). The shape of models/<device>/eval.json."""
    from kernel_select.model import load_default

    frame = dataset.read_many(data_path) if frame is None else frame
    spec = get_device(device) if device is not None else dataset_device(frame, data_path)
    reports: dict[str, Any] = {}
    scores: list[dict[str, ModelScores]] = []
    for name in splits.EVAL_SPLITS:
        if not splits.split_masks(frame)[name].any():  # e.g. no held-out family measured yet
            reports[name] = {"split": name, "problems": 0, "skipped": f"no problems in split {name!r}"}
            continue
        reports[name], split_scores = _evaluate(data_path, name, models, device=spec, ks=ks, frame=frame,
                                                **options)
        scores.append(split_scores)
    try:
        shipped = load_default(spec)
        served = {"shipped": shipped.name, "shipped_model": shipped.describe(),
                  "pinned": pinned_report(frame, shipped)}
    except NoTrainedModelError as exc:  # a GPU being calibrated: nothing serves it yet
        served = {"shipped": None, "shipped_model": str(exc)}
    out = {"data": names_of(data_path), "device": spec.key, **served, "splits": reports}
    # Over the splits together: models evaluated on every split, in the order of the first.
    together = {name: ModelScores(np.concatenate([s[name].per_problem for s in scores]),
                                  np.concatenate([s[name].own for s in scores]))
                for name in (scores[0] if scores else {}) if all(name in s for s in scores)}
    if len(scores) >= 2 and len(together) >= 2:
        out["paired"] = {"splits": [name for name in splits.EVAL_SPLITS if "skipped" not in reports[name]],
                         **paired_report(together, ks)}
    return out


def pinned_report(frame: pd.DataFrame, model: PerformanceModel) -> dict[str, Any]:
    """eval.json's `pinned`: the model (its description and digest) and, per held-out split, the
    problems of its fixed slice (held_out_slice.slice_ids of the problems the split's evaluation
    scores) with the model's top-k (held_out_slice.PINNED_KS) and calibration on them, computed as the
    split's report computes them. A split without problems, or one the model cannot score, is
    reported as skipped with the reason."""
    ks = held_out_slice.PINNED_KS
    layouts = evaluated_layouts([model])
    report: dict[str, Any] = {"rule": held_out_slice.RULE, "ks": list(ks), "model": model.describe(),
                              "digest": model.digest(), "splits": {}}
    for split in splits.EVAL_SPLITS:
        rows = dataset.modelled_layout_rows(splits.split_rows(frame, split), "evaluation", layouts)
        try:
            scored = problem_rows(rows, f"no usable Triton rows in split {split!r}")
            ids = held_out_slice.slice_ids(scored.problem_ids)
            chosen = problem_rows(scored.rows[scored.rows["problem_id"].isin(ids)], "")
            predicted = predict_cases(model, problem_cases(chosen.rows, chosen.problems))
        except (KernelSelectError, ImportError) as exc:
            report["splits"][split] = {"skipped": str(exc)}
            continue
        report["splits"][split] = {
            "problems": ids,
            "topk": topk_dict(topk_scores(chosen.groups, predicted, chosen.runtime, ks), ks),
            "calibration_median_abs_log_top16": model_extras.calibration(chosen.groups, predicted,
                                                                         chosen.runtime)}
    return report


def configs_of(frame: pd.DataFrame) -> list[GemmConfig]:
    """GemmConfigs of dataset rows, in row order (dataset values are already validated)."""
    return [GemmConfig.model_construct(block_m=bm, block_n=bn, block_k=bk, num_stages=s, num_warps=w,
                                       group_m=g)
            for bm, bn, bk, s, w, g in frame[_CONFIG_COLS].itertuples(index=False, name=None)]


def predict_cases(model: PerformanceModel, cases: Sequence[tuple[Problem, list[GemmConfig]]]) -> np.ndarray:
    """The model's predictions for every row, problem after problem (`problem_cases` order)."""
    return np.concatenate([model.estimate(problem, configs) for problem, configs in cases])

def _model_report(name: str, model: PerformanceModel, groups: np.ndarray, problem_ids: pd.Index,
                  rows: pd.DataFrame, predicted: np.ndarray, runtime: np.ndarray,
                  ks: Sequence[int]) -> dict[str, Any]:
    per_problem = topk_scores(groups, predicted, runtime, ks)
    rho = spearman_per_group(groups, predicted, runtime)
    q25, median, q75 = np.nanpercentile(rho, [25, 50, 75])
    out: dict[str, Any] = {
        "model": model.describe(), "topk": topk_dict(per_problem, ks),
        "spearman": {"median": float(median), "q25": float(q25), "q75": float(q75)},
        "worst": {},
    }
    # Which config the model put first, and which one was fastest, for the worst problems.
    first = rows.iloc[np.lexsort((predicted, groups))].groupby("problem_id", sort=True).head(1)
    fastest = rows.iloc[np.lexsort((runtime, groups))].groupby("problem_id", sort=True).head(1)
    for k in (1, 4):
        if k not in ks:
            continue
        scores = per_problem[:, list(ks).index(k)]
        out["worst"][str(k)] = [
            {"problem_id": problem_ids[i], "score": float(scores[i]),
             "top1": configs_of(first.iloc[[i]])[0].short(),
             "oracle": configs_of(fastest.iloc[[i]])[0].short(),
             "oracle_ms": float(fastest["runtime_ms"].iloc[i])}
            for i in np.argsort(scores, kind="stable")[:WORST_REPORTED]
        ]
    return out
