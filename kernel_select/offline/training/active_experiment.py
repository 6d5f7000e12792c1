"""Does active learning beat random sampling at equal rows? A retrospective (pool-based) experiment.

Every problem of the two H100 files is measured, so collection can be replayed: a problem's rows
are "collected" only when a strategy picks it.

  first pass  the seed file's trainable `train` problems (splits.split_masks)
  pool        the coverage file's trainable `train` problems not in the seed file
  budget      `budget_share` of the pool's rows (a problem costs its configs, as on the GPU)
  committee   `committee_size` MLPs trained on the first pass only, each with its own seed on its
              own random `subsample` of the first-pass problems (bagging without repeated problems)
  arms        first pass only (floor); + random problems (one arm per seed); + the problems the
              committee disagrees on most (offline.data.plans.active); + the whole pool (ceiling)

Every arm trains the same final model: the shipped MLP recipe of train.py (features v2, widths
MLPHParams.hidden_widths, at most `cap` configs per problem, the listwise+MSE "rank" objective the
shipped model selected, best epoch on `val`), with the same seed and epochs, and is scored on the
two files' `val`, `test` and `family` problems (never trained on), every measured config ranked:
geomean over problems of oracle / best measured among the top-k.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from kernel_select.device import DeviceSpec, get_device
from kernel_select.model.card import ModelCard
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION
from kernel_select.model.mlp import MLPModel, architecture
from kernel_select.offline.training.features import featurize_frame
from kernel_select.offline.data import dataset, problem_ids, splits
from kernel_select.offline.data.plans import active
from kernel_select.offline.data.shapes import Shape
from kernel_select.offline.metrics import geomean, topk_scores
from kernel_select.offline.training.fit_loop import MLPHParams, fit, make_split, standardize
from kernel_select.offline.training.training_data import DEFAULT_CAP, cap_rows_per_problem, prepare_rows

log = logging.getLogger(__name__)

REPORT_KS = (1, 2, 4, 8)
EVAL_SPLITS = ("val", "test", "family")
OBJECTIVE = "rank"  # the objective the shipped model's "both" run selected (models/h100/mlp.json)


@dataclasses.dataclass
class Replay:
    """Both files' usable rows, featurized once, with the problem sets the experiment needs."""

    rows: pd.DataFrame  # Triton rows, sorted by problem
    x: np.ndarray  # features v2, unstandardized
    capped: np.ndarray  # row mask: at most `cap` configs per problem (what training sees)
    first_pass: set[str]
    pool: set[str]
    masks: dict[str, np.ndarray]  # splits.split_masks over `rows`


def load_replay(seed_path: str | Path, pool_path: str | Path, spec: DeviceSpec, cap: int) -> Replay:
    """Rows of both files (a problem in both keeps the pool file's rows, as `dataset.append` would)."""
    first_frame, pool_frame = dataset.read(seed_path), dataset.read(pool_path)
    rows, _ = prepare_rows(dataset.read_many([seed_path, pool_path]), spec)
    masks = splits.split_masks(rows)
    trainable = set(rows.loc[masks["train"], "problem_id"])
    first_pass = trainable & set(first_frame["problem_id"])
    pool = (trainable & set(pool_frame["problem_id"])) - set(first_frame["problem_id"])
    return Replay(rows=rows, x=featurize_frame(rows, spec, FEATURE_VERSION),
                  capped=cap_rows_per_problem(rows, cap, 0),
                  first_pass=first_pass, pool=pool, masks=masks)


def fit_model(replay: Replay, train_ids: set[str], spec: DeviceSpec, hp: MLPHParams, seed: int) -> MLPModel:
    """The shipped MLP recipe on `train_ids` (capped rows), best epoch on the `val` problems."""
    in_train = replay.rows["problem_id"].isin(train_ids).to_numpy()
    keep = replay.capped & (in_train | replay.masks["val"])
    rows = replay.rows.loc[keep, ["problem_id", "runtime_ms", "dtype"]].copy()
    rows["split"] = np.where(in_train[keep], "train", "val")
    rows = rows.reset_index(drop=True)
    z, mean, std = standardize(replay.x[keep], (rows["split"] == "train").to_numpy())
    net, _ = fit(OBJECTIVE, make_split(rows, z, "train"), make_split(rows, z, "val"), hp, seed,
                  progress=False)
    names = FEATURE_SETS[FEATURE_VERSION]
    card = ModelCard(model="mlp", device=spec.key, architecture=architecture(len(names), hp.hidden_widths),
                     feature_version=FEATURE_VERSION, feature_names=list(names),
                     feature_mean=mean.tolist(), feature_std=std.tolist(),
                     dtypes=sorted(rows["dtype"].astype(str).unique()),
                     hyperparameters={**dataclasses.asdict(hp), "seed": seed, "objective": OBJECTIVE})
    return MLPModel(spec, net, card)


def score_splits(model: MLPModel, replay: Replay) -> dict[str, dict[str, float]]:
    """Geomean top-k score on each evaluation split, every measured config ranked."""
    mean = np.asarray(model.card.feature_mean, dtype=np.float32)
    std = np.asarray(model.card.feature_std, dtype=np.float32)
    out = {}
    for name in EVAL_SPLITS:
        mask = replay.masks[name]
        groups = pd.factorize(replay.rows.loc[mask, "problem_id"])[0]
        with torch.inference_mode():
            log_ms = model.net(torch.from_numpy((replay.x[mask] - mean) / std)).numpy().astype(np.float64)
        runtime = replay.rows.loc[mask, "runtime_ms"].to_numpy(np.float64)
        scores = geomean(topk_scores(groups, log_ms, runtime, REPORT_KS))
        out[name] = {f"top{k}": round(float(s), 4) for k, s in zip(REPORT_KS, scores)}
    return out


def pool_shapes(replay: Replay) -> list[Shape]:
    """The pool's problems as shapes (what the acquisition function sees: sizes, dtype, family)."""
    pool = replay.rows[replay.rows["problem_id"].isin(replay.pool)]
    firsts = pool.groupby("problem_id", sort=True)[["m", "n", "k", "dtype", "family"]].first()
    return [Shape(int(m), int(n), int(k), str(d), family=str(f)) for m, n, k, d, f in
            firsts.itertuples(index=False, name=None)]


def train_committee(replay: Replay, spec: DeviceSpec, hp: MLPHParams, size: int,
                    subsample: float) -> list[MLPModel]:
    """`size` MLPs on the first pass, each with its own seed and random share of its problems."""
    ids = sorted(replay.first_pass)
    members = []
    for seed in tqdm(range(size), desc="committee", unit="model"):
        rng = np.random.default_rng(1000 + seed)
        chosen = set(rng.choice(ids, size=int(round(subsample * len(ids))), replace=False))
        members.append(fit_model(replay, chosen, spec, hp, seed))
    return members


def _arm(name: str, chosen: Sequence[active.Candidate], replay: Replay, spec: DeviceSpec,
         hp: MLPHParams, seed: int) -> dict[str, Any]:
    """Train the final recipe (model seed `seed`) on first pass + `chosen` and score it; what the arm cost."""
    started = time.perf_counter()
    added = {problem_ids.problem_id(c.shape.m, c.shape.n, c.shape.k, c.shape.dtype) for c in chosen}
    model = fit_model(replay, replay.first_pass | added, spec, hp, seed)
    result = {"arm": name, "model_seed": seed, "problems": len(chosen),
              "rows": int(sum(c.rows for c in chosen)),
              "compile_classes": len({c.compile_class for c in chosen}), **score_splits(model, replay),
              "train_seconds": round(time.perf_counter() - started, 1)}
    log.info("%s", result)
    return result


def run_experiment(seed_path: str | Path, pool_path: str | Path, device: DeviceSpec | str, *,
                   budget_share: float = 0.4, seeds: int = 3, committee_size: int = 3,
                   subsample: float = 0.8, epochs: int = 30, cap: int = DEFAULT_CAP) -> dict[str, Any]:
    """Every arm side by side (see the module docstring); a JSON-ready report."""
    started = time.perf_counter()
    torch.set_num_threads(1)  # the arms are compared, not raced: one core keeps the machine usable
    spec = get_device(device)
    hp = MLPHParams(epochs=epochs)
    replay = load_replay(seed_path, pool_path, spec, cap)
    committee = train_committee(replay, spec, hp, committee_size, subsample)
    scored = active.score_candidates(committee, pool_shapes(replay))
    budget = int(budget_share * sum(c.rows for c in scored))
    disagreement = active.select_for_budget(scored, budget, "disagreement")
    # Random arm s: selection seed s and model seed s; the disagreement arm is trained with the same
    # model seeds, so both means and spreads include the final model's training noise.
    arms = [("first pass only", [], 0),
            *((f"random (seed {s})", active.select_for_budget(scored, budget, "random", s), s)
              for s in range(seeds)),
            *((f"disagreement (seed {s})", disagreement, s) for s in range(seeds)),
            ("whole pool (ceiling)", scored, 0)]
    results = [_arm(name, chosen, replay, spec, hp, seed)
               for name, chosen, seed in tqdm(arms, desc="arms", unit="arm")]
    return {"device": spec.key, "data": [Path(seed_path).name, Path(pool_path).name],
            "first_pass_problems": len(replay.first_pass), "pool_problems": len(scored),
            "pool_rows": int(sum(c.rows for c in scored)), "budget_rows": budget,
            "budget_share": budget_share,
            "committee": {"size": committee_size, "subsample": subsample,
                          "pool_score_quantiles": _quantiles([c.score for c in scored])},
            "recipe": {"objective": OBJECTIVE, "epochs": epochs, "cap_rows_per_problem": cap,
                       "hidden_widths": list(hp.hidden_widths), "seed": 0},
            "arms": results, "summary": {arm: _summary(results, arm) for arm in ("random", "disagreement")},
            "verdict": verdict(results),
            "seconds": round(time.perf_counter() - started, 1)}


HELD_OUT = ("test", "family")


def held_out_score(result: dict[str, Any]) -> float:
    """One number per trained model: the mean of its top-1/2/4/8 scores on `test` and `family`."""
    return float(np.mean([result[split][f"top{k}"] for split in HELD_OUT for k in REPORT_KS]))


def verdict(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Which strategy the next collection uses. Disagreement needs a committee and a model per
    collection; it is kept only when its mean held-out score beats random's by more than twice the
    standard error of the difference over the seeds. Otherwise random (simpler, unbiased) wins."""
    by_arm = {arm: np.array([held_out_score(r) for r in results if r["arm"].startswith(arm)])
              for arm in active.STRATEGIES}
    diff = float(by_arm["disagreement"].mean() - by_arm["random"].mean())
    se = float(np.sqrt(sum(v.var(ddof=1) / len(v) for v in by_arm.values()))) if all(
        len(v) > 1 for v in by_arm.values()) else float("inf")
    return {"held_out_mean": {arm: round(float(v.mean()), 4) for arm, v in by_arm.items()},
            "difference": round(diff, 4), "standard_error": round(se, 4),
            "winner": "disagreement" if diff > 2 * se else "random"}


def _quantiles(values: Sequence[float]) -> dict[str, float]:
    qs = np.quantile(np.asarray(values, dtype=np.float64), [0.1, 0.5, 0.9, 1.0])
    return {name: round(float(q), 4) for name, q in zip(("p10", "p50", "p90", "max"), qs)}


def _summary(results: Sequence[dict[str, Any]], arm: str) -> dict[str, dict[str, dict[str, float]]]:
    """Mean and spread (max - min) over the seeds of one arm, per split and k."""
    runs = [r for r in results if r["arm"].startswith(arm)]
    out: dict[str, dict[str, dict[str, float]]] = {}
    for split in EVAL_SPLITS:
        out[split] = {}
        for key in runs[0][split] if runs else ():
            values = np.array([r[split][key] for r in runs])
            out[split][key] = {"mean": round(float(values.mean()), 4),
                               "spread": round(float(values.max() - values.min()), 4)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """python -m kernel_select.offline.training.active_experiment [--epochs N] [--out FILE]"""
    import argparse
    import json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed-data", default="data/h100.parquet")
    parser.add_argument("--pool-data", default="data/h100_coverage.parquet")
    parser.add_argument("--device", required=True, help="the device both files were measured on, e.g. h100")
    parser.add_argument("--budget-share", type=float, default=0.4)
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the random and disagreement arms")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--out", default=None, help="write the JSON report here too")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    report = run_experiment(args.seed_data, args.pool_data, args.device, budget_share=args.budget_share,
                            seeds=args.seeds, epochs=args.epochs)
    text = json.dumps(report, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
