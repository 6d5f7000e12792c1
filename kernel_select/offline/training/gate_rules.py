"""The cuBLAS gate's no-margin zone, replayed on measured data: what a zone and a tie rule cost and save.

Inductor's autotune benchmark times small cuBLAS calls slower than they run in the program
(docs/results.md, "The cuBLAS decision's small-GEMM rule"). Where the gate offers Triton there,
Inductor may take a Triton kernel slower than cuBLAS, and the compiled GEMM is slower than eager. This
module replays that on a dataset split, per problem:

- the model's top-k (the best measured runtime among its k best-ranked configs) and the measured
  cuBLAS time;
- a `Scenario`: Inductor times cuBLAS at `factor` x its true time wherever that is under `below_ms`;
- a `Rule`: Triton is skipped where the gate predicts cuBLAS faster by the margin, or, where the model
  predicts cuBLAS under `small_ms`, wherever Triton is not predicted more than `tie` faster
  (`gate.SMALL_GEMM_MS`, `gate.NO_MARGIN_TIE` for the shipped rule). Where Triton is offered,
  Inductor takes the faster of the over-timed cuBLAS and the top-k's best. As in the handler, a GEMM
  outside the model's domain gets no decision: Inductor benchmarks its DEFAULT list beside the picks.

Single GEMMs only: the gate decides nothing for a batched one. Reported per (split, k, scenario,
rule): `score`, the geomean of min(cuBLAS, oracle) / time taken, and `slower`, the problems whose time
taken is more than 2% above cuBLAS (eager's kernel).

`one_choice` replays the decision of `gemm_topk=1` instead, where no benchmark stands behind it: the
gate alone picks cuBLAS or the model's first config (cuBLAS where its predicted ratio is below a
`threshold`), and the pick is compared with the measured faster of the two. As in the handler, a GEMM
outside the model's domain gets no decision: Inductor benchmarks its own list beside the first config
and cuBLAS, and takes the fastest.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kernel_select.decision import odd_n_and_k
from kernel_select.model.cublas import DEFAULT_MARGIN, NO_MARGIN_TIE, ONE_CHOICE_THRESHOLD, SMALL_GEMM_MS

SHIPPED_HEDGE = 0.0  # the shipped rule offers no Triton pick beside cuBLAS (the hedge lost score)

if TYPE_CHECKING:
    from kernel_select.model import PerformanceModel
    from kernel_select.model.cublas import CublasGate

#: "Slower than eager" as the issue counts it: more than 2% above cuBLAS.
SLOWER_BY = 1.02


@dataclass(frozen=True)
class Scenario:
    """How Inductor's benchmark over-times cuBLAS: `factor` x its time below `below_ms` true time."""

    below_ms: float
    factor: float


@dataclass(frozen=True)
class Rule:
    """The gate's no-margin zone (`small_ms` of predicted cuBLAS), its tie tolerance, and its hedge: where
    Triton is skipped by the margin with cuBLAS predicted faster by less than margin + `hedge` (outside the
    zone, where Inductor's benchmark is trusted), the model's top-1 config is offered beside cuBLAS anyway
    and Inductor's benchmark decides (one compile more per such GEMM)."""

    small_ms: float
    tie: float
    hedge: float = 0.0


#: The boundary measured on the single-GEMM suite (inflated under 0.055 ms, none from 0.066 ms)
#: at the median and a high over-timing factor.
DEFAULT_SCENARIOS = (Scenario(0.055, 1.3), Scenario(0.066, 1.3), Scenario(0.066, 2.0))
DEFAULT_RULES = (*(Rule(s, t) for s in (0.05, SMALL_GEMM_MS, 0.07) for t in (0.0, NO_MARGIN_TIE, 0.05)),
                 *(Rule(SMALL_GEMM_MS, NO_MARGIN_TIE, h) for h in (0.05, 0.1, 0.15)))


@dataclass(frozen=True)
class SplitCase:
    """Per problem of one split at one k: measured and predicted times (ms) and the gate's ratio."""

    top_k_ms: np.ndarray  # best measured among the model's top-k
    top_1_ms: np.ndarray  # the measured time of the model's first pick
    cublas_ms: np.ndarray
    oracle_ms: np.ndarray  # best measured Triton config
    predicted_ratio: np.ndarray  # the gate's cuBLAS / best Triton (< 1: cuBLAS faster)
    predicted_cublas_ms: np.ndarray
    # outside the model's domain (PerformanceModel.domain_gap): the handler decides nothing there and
    # benchmarks Inductor's DEFAULT list beside the picks; default_ms is that list's best measured time
    outside: np.ndarray | None = None
    default_ms: np.ndarray | None = None
    # odd N with odd K (decision.odd_n_and_k): no decision either; Inductor benchmarks the picks and cuBLAS
    undecided: np.ndarray | None = None

    def decidable(self) -> np.ndarray:
        """The problems the gate decides for: inside the domain, and not odd N with odd K."""
        outside, _ = self.benchmarked()
        return ~outside if self.undecided is None else ~outside & ~self.undecided

    def benchmarked(self) -> tuple[np.ndarray, np.ndarray]:
        """Which problems lie outside the domain, and the best time Inductor's benchmark finds among
        its own list and the picks there (its DEFAULT list's best, inf where unknown)."""
        size = len(self.cublas_ms)
        outside = np.zeros(size, bool) if self.outside is None else self.outside
        return outside, np.full(size, np.inf) if self.default_ms is None else self.default_ms


def outcome(case: SplitCase, scenario: Scenario, rule: Rule,
            margin: float = DEFAULT_MARGIN) -> tuple[float, int, int]:
    """(score, slower, hedged) of `rule` under `scenario` (see the module docstring); `hedged`: the
    problems where the hedge offered the top-1 beside cuBLAS."""
    zone = case.predicted_cublas_ms < rule.small_ms
    skipped = (case.predicted_ratio <= 1.0 - margin) | (zone & (case.predicted_ratio < 1.0 + rule.tie))
    # only where Inductor's benchmark is trusted to decide (outside the no-margin zone): a close call
    # just past the margin
    hedged = skipped & ~zone & (rule.hedge > 0) & (case.predicted_ratio > 1.0 - margin - rule.hedge)
    outside, default_ms = case.benchmarked()  # no decision there: the list is benchmarked beside the picks
    decided = case.decidable()
    skipped, hedged = skipped & decided, hedged & decided
    timed = np.where(case.cublas_ms < scenario.below_ms, scenario.factor, 1.0) * case.cublas_ms

    def inductor_takes(triton_ms: np.ndarray) -> np.ndarray:
        return np.where(timed <= triton_ms, case.cublas_ms, triton_ms)

    offered = np.where(outside, np.minimum(case.top_k_ms, default_ms), case.top_k_ms)
    taken = np.where(hedged, inductor_takes(case.top_1_ms),
                     np.where(skipped, case.cublas_ms, inductor_takes(offered)))
    best = np.minimum(case.cublas_ms, case.oracle_ms)
    return (float(np.exp(np.mean(np.log(best / taken)))), int(np.sum(taken > SLOWER_BY * case.cublas_ms)),
            int(hedged.sum()))


#: The one-choice thresholds replayed, beside the two rules that need no gate: always the model's first
#: config ("never cuBLAS") and always cuBLAS.
ONE_CHOICE_THRESHOLDS = (0.9, 0.95, 1.0, 1.02, 1.05, 1.1, 1.15, 1.2)
NEVER_CUBLAS, ALWAYS_CUBLAS = "never cuBLAS", "always cuBLAS"


def one_choice(case: SplitCase, threshold: float | str) -> dict[str, float | int | str | None]:
    """The one-choice decision on `case`: per problem the gate takes cuBLAS where its predicted cuBLAS /
    best Triton ratio is below `threshold` (or NEVER_CUBLAS, ALWAYS_CUBLAS), else the model's first
    config, and nothing is benchmarked. Returns the rule (`threshold`: None for the two named rules) and

    - `cublas_taken`: the share of problems given cuBLAS;
    - `sign_accuracy`: the share where the pick is the measured faster of cuBLAS and the first config;
    - `regret`, `worst`: the geomean and the largest of time taken / that faster one's time (1.0: no loss);
    - `score`: the geomean of min(cuBLAS, Triton oracle) / time taken, as `outcome` scores;
    - `slower`: the problems whose time taken is more than 2% above cuBLAS (eager's kernel);
    - `benchmarked`: the problems the handler benchmarks, the fastest taken: outside the model's domain
      (Inductor's list, the first config and cuBLAS) or with odd N and odd K (the first config and
      cuBLAS, decision.odd_n_and_k); the other figures but `score` and `slower` are over the problems
      decided.
    """
    outside, default_ms = case.benchmarked()
    if isinstance(threshold, str):
        takes_cublas = np.full(len(case.cublas_ms), threshold == ALWAYS_CUBLAS)
        rule, value = threshold, None
    else:
        takes_cublas = case.predicted_ratio < threshold
        rule, value = f"ratio < {threshold:g}", float(threshold)
    faster_of_two = np.minimum(case.cublas_ms, case.top_1_ms)
    decided = case.decidable()
    taken = np.where(outside, np.minimum(faster_of_two, default_ms),
                     np.where(~decided, faster_of_two, np.where(takes_cublas, case.cublas_ms, case.top_1_ms)))
    right = takes_cublas == (case.cublas_ms <= case.top_1_ms)
    regret = taken / faster_of_two

    def over_decided(values: np.ndarray, reduce, empty: float) -> float:
        # a split with nothing decided (every problem outside) has no wrong call and no regret
        return float(reduce(values[decided])) if decided.any() else empty

    best = np.minimum(case.cublas_ms, case.oracle_ms)
    return {"rule": rule, "threshold": value, "problems": len(taken), "benchmarked": int((~decided).sum()),
            "cublas_taken": over_decided(takes_cublas, np.mean, 0.0),
            "sign_accuracy": over_decided(right, np.mean, 1.0),
            "regret": over_decided(np.log(regret), lambda v: np.exp(np.mean(v)), 1.0),
            "worst": over_decided(regret, np.max, 1.0),
            "score": float(np.exp(np.mean(np.log(best / taken)))),
            "slower": int(np.sum(taken > SLOWER_BY * case.cublas_ms))}


def split_case(frame: pd.DataFrame, split: str, k: int, model: PerformanceModel,
               gate: CublasGate) -> SplitCase:
    """The single GEMMs of `split` that have a cuBLAS row, in the layouts `model` was trained on (the
    gate decides for batch 1 only; Inductor benchmarks a batched GEMM's cuBLAS and Triton choices),
    with which of them lie outside the model's domain and the best measured config of Inductor's
    DEFAULT list for each."""
    from kernel_select.offline.training.cublas_fit import problems_of
    from kernel_select.offline.data import dataset, splits
    from kernel_select.offline.metrics import best_in_top_k, oracle_ms
    from kernel_select.offline.training import baseline_scores, evaluate

    single = splits.split_rows(frame, split)
    single = single[single["batch"] == 1] if "batch" in single.columns else single
    df = dataset.modelled_layout_rows(single, "evaluation",
                                      evaluate.evaluated_layouts([model]))
    scored = evaluate.problem_rows(df, f"no usable Triton rows in split {split!r}")
    groups, runtime = scored.groups, scored.runtime
    predicted = evaluate.predict_cases(model, evaluate.problem_cases(scored.rows, scored.problems))
    cublas = baseline_scores.aten_ms(df).reindex(scored.problem_ids).to_numpy(np.float64)
    have = np.isfinite(cublas)
    listed = [p for p, h in zip(problems_of(scored.problems), have) if h]
    best = best_in_top_k(groups, predicted, runtime, [1, k])
    default = baseline_scores.default_best(scored.rows, scored.problems, groups, runtime, model.device,
                                           baseline_scores.DEFAULT_LIST_TORCH)
    return SplitCase(top_k_ms=best[have, 1], top_1_ms=best[have, 0], cublas_ms=cublas[have],
                     oracle_ms=oracle_ms(groups, runtime)[have],
                     predicted_ratio=np.exp(gate.predict_log_ratio(listed)),
                     predicted_cublas_ms=np.array([model.estimate_aten(p) or np.inf for p in listed]),
                     outside=np.array([bool(model.domain_gap(p)) for p in listed], dtype=bool),
                     default_ms=default.best_ms[have],
                     undecided=np.array([odd_n_and_k(p) for p in listed], dtype=bool))


def simulate(data: str | Path | Sequence[str | Path], splits: Sequence[str] = ("test", "family"),
             ks: Sequence[int] = (1, 4), scenarios: Sequence[Scenario] = DEFAULT_SCENARIOS,
             rules: Sequence[Rule] = DEFAULT_RULES, device: str | None = None,
             mlp_dir: str | Path | None = None) -> list[dict]:
    """One row per (split, k, scenario, rule) with the shipped model and gate for the data's device
    (`mlp_dir`: the MLP saved there instead, see `_model_for`)."""
    frame, model, gate = _model_for(data, device, mlp_dir)
    out = []
    for split in splits:
        for k in ks:
            case = split_case(frame, split, k, model, gate)
            for scenario in scenarios:
                for rule in rules:
                    score, slower, hedged = outcome(case, scenario, rule)
                    out.append({"split": split, "k": k, "problems": len(case.cublas_ms), **asdict(scenario),
                                **asdict(rule), "score": score, "slower": slower, "hedged": hedged})
    return out


def _model_for(data: str | Path | Sequence[str | Path], device: str | None,
               mlp_dir: str | Path | None = None) -> tuple[pd.DataFrame, PerformanceModel, CublasGate]:
    """The dataset's rows, and the shipped model and gate for its device (or `device`); with `mlp_dir`,
    the MLP saved there and the cuBLAS gate saved beside it (else the serving gate), as `eval --mlp-dir`."""
    from kernel_select.device import get_device
    from kernel_select.errors import ModelError
    from kernel_select.model import load_default, load_gate
    from kernel_select.model.folders import gate_in
    from kernel_select.model.mlp import MLPModel
    from kernel_select.offline.data import dataset
    from kernel_select.offline.data.device_rows import dataset_device

    frame = dataset.read_many(data)
    first = data if isinstance(data, (str, Path)) else data[0]
    spec = get_device(dataset_device(frame, first) if device is None else device)
    if mlp_dir is None:
        model, gate = load_default(spec), load_gate(spec)
    else:
        model, gate = MLPModel.load(mlp_dir, spec.key), gate_in(mlp_dir, spec) or load_gate(spec)
    if gate is None:
        raise ModelError(f"no cuBLAS gate is shipped for {getattr(spec, 'key', spec)}: nothing to simulate")
    return frame, model, gate


def simulate_one_choice(data: str | Path | Sequence[str | Path], splits: Sequence[str] = ("test", "family"),
                        thresholds: Sequence[float] = ONE_CHOICE_THRESHOLDS,
                        device: str | None = None, mlp_dir: str | Path | None = None) -> list[dict]:
    """Rows of `one_choice` per split, with the shipped model and gate for the data's device (or those of
    `mlp_dir`, see `_model_for`): never cuBLAS, each threshold, always cuBLAS."""
    frame, model, gate = _model_for(data, device, mlp_dir)
    out = []
    for split in splits:
        case = split_case(frame, split, 1, model, gate)
        out += [{"split": split, **one_choice(case, rule)}
                for rule in (NEVER_CUBLAS, *thresholds, ALWAYS_CUBLAS)]
    return out


def format_one_choice_table(rows: Sequence[dict]) -> str:
    """A markdown table of `simulate_one_choice`'s rows, the shipped threshold marked with *."""
    lines = ["| split (benchmarked: outside the domain, or odd N and odd K) | cuBLAS where | cuBLAS taken "
             "| sign accuracy "
             "| regret (geomean, worst) | score | slower than cuBLAS > 2% |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = " *" if r["threshold"] == ONE_CHOICE_THRESHOLD else ""
        lines.append(f"| {r['split']} ({r['problems']}; {r['benchmarked']}) | {r['rule']}{mark} "
                     f"| {r['cublas_taken']:.2f} | {r['sign_accuracy']:.3f} "
                     f"| {r['regret']:.4f}, {r['worst']:.2f} | {r['score']:.4f} | {r['slower']} |")
    return "\n".join(lines)


def format_table(rows: Sequence[dict]) -> str:
    """A markdown table, the shipped rule marked with *."""
    lines = ["| split | k | cuBLAS timed (below ms, x) | zone ms | tie | hedge | score "
             "| slower than cuBLAS > 2% | hedged |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        shipped = (r["small_ms"], r["tie"], r["hedge"]) == (SMALL_GEMM_MS, NO_MARGIN_TIE, SHIPPED_HEDGE)
        mark = " *" if shipped else ""
        lines.append(f"| {r['split']} ({r['problems']}) | {r['k']} | {r['below_ms']:g}, {r['factor']:g} "
                     f"| {r['small_ms']:g}{mark} | {r['tie']:g} | {r['hedge']:g} | {r['score']:.4f} "
                     f"| {r['slower']} | {r['hedged']} |")
    return "\n".join(lines)
