"""Which compile classes calibrate measures first: those where the model it starts from is least sure.

The classes come in two tiers (offline/calibrate/classes.py): first those that cover the
domain, the shipped models' and the starting model's card's (its strata and layouts), so that the
calibrated model is never narrower than either; then the extras. Within each tier:

  * starting from a model of two or more members (the shipped ones average four networks): first
    the classes it was never trained on (the share of their problems with no training problem in
    their stratum, dtype or layout, `untrained`), then by the members' disagreement
    (offline/data/active.committee_regret, with the members as the committee: the predicted regret
    of trusting one member's first pick, in the units the selector is scored in), highest first.
    Each class is judged on its first SAMPLE problems (two per M bucket of a class over all four),
    the first ones it measures. A stratum with a few training problems (fewer than the card's
    MIN_STRATUM_PROBLEMS) is judged by the disagreement. One class leads whatever the others score:
    the least sure of the bf16 single-GEMM classes over every M bucket (nn.Linear's GEMMs, most of
    a network's). Without it, the 5-minute plan from the H100 model on an H200 measured batched
    GEMMs alone, and the calibrated model, which claims the strata it was trained on, would have
    served fewer GEMMs than the model it started from;
  * from scratch, or from a single network (no committee): the tiers' own order, the order the
    classes are listed in (nn.Linear's forward and its two gradients in bf16, fp16, batched, fp32,
    odd alignments, batched at small M).

The plan (offline/calibrate/plan.py) takes the classes in this order while they fit its
budget and its rate of rows per GPU-minute.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from kernel_select.errors import UnsupportedProblemError
from kernel_select.model.mlp import AveragedRuntimeNet, MLPModel
from kernel_select.offline.calibrate.start import StartModel
from kernel_select.offline.data.plans.active import committee_regret
from kernel_select.offline.calibrate.classes import (ALL_BUCKETS, CompileClass, class_problems,
                                                            covering_classes)
from kernel_select.problem import Problem
from kernel_select.space import for_problem

#: Problems per class the committee judges it on.
SAMPLE = 8
COVERAGE, EXTRA = "coverage", "extra"


@dataclass(frozen=True)
class RankedClass:
    """A class in the order calibrate measures it, with why it comes there."""

    compile_class: CompileClass
    tier: str  # COVERAGE: needed to cover the domain; EXTRA: more where the budget leaves room
    untrained: float | None = None  # share of its sampled problems the starting model never trained on
    disagreement: float | None = None  # mean committee regret over the sampled problems it can rank

    def note(self) -> str:
        if self.untrained is None:
            return "fixed order"
        parts = [f"{self.untrained:.0%} never trained on"] if self.untrained else []
        if self.disagreement is not None:
            parts.append(f"disagreement {self.disagreement:.3f}")
        return ", ".join(parts)

    def record(self) -> dict:
        return {"class": self.compile_class.name, "tier": self.tier, "untrained": self.untrained,
                "disagreement": self.disagreement}


def ranked_classes(start: StartModel | None, seed: int = 0) -> list[RankedClass]:
    """Every class calibrate may measure, in the order it measures them (module docstring)."""
    card = start.model.card if start is not None else None
    strata = card.domain.strata if card is not None and card.domain is not None else {}
    coverage, extra = covering_classes(strata, card.layouts if card is not None else ())
    net = start.model.net if start is not None else None
    if start is None or not isinstance(net, AveragedRuntimeNet) or len(net.members) < 2:
        return [RankedClass(c, COVERAGE) for c in coverage] + [RankedClass(c, EXTRA) for c in extra]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # ~1,000 rows through a small network: threads cost more than they give
    try:                      # (this machine, 2 cores: 0.8 CPU-seconds for every class, 3.0 with 2)
        judged = {tier: [_judged(c, tier, start.model, seed) for c in classes]
                  for tier, classes in ((COVERAGE, coverage), (EXTRA, extra))}
    finally:
        torch.set_num_threads(threads)

    def least_sure_first(r: RankedClass) -> tuple[float, float]:
        return -(r.untrained or 0.0), -(r.disagreement or 0.0)

    coverage_ranked = sorted(judged[COVERAGE], key=least_sure_first)
    lead = next((r for r in coverage_ranked if _linear_layer(r.compile_class)), None)
    if lead is not None:
        coverage_ranked = [lead] + [r for r in coverage_ranked if r is not lead]
    return coverage_ranked + sorted(judged[EXTRA], key=least_sure_first)


def _linear_layer(c: CompileClass) -> bool:
    """A class of bf16 single GEMMs over every M bucket: nn.Linear's forward or a gradient of it."""
    return c.op == "mm" and c.dtype == "bfloat16" and c.m_buckets == ALL_BUCKETS


def never_trained_on(model: MLPModel, problem: Problem) -> bool:
    """No training problem like it: its layout is not the card's, or its stratum (op, dtype, M
    bucket) holds none; for a card without a recorded domain, a batched GEMM (those cards were
    trained on single GEMMs)."""
    if problem.layout not in model.trained_layouts():
        return True
    count = model.training_problems_like(problem)
    return problem.op in ("bmm", "baddbmm") if count is None else count == 0


def member_predictions(model: MLPModel, problem: Problem) -> np.ndarray:
    """(members, configs): each member's predicted ms of the problem's pruned EXHAUSTIVE space, from
    one computation of the features; one row for a single network.

    Raises:
        UnsupportedProblemError: a dtype the model was not trained on.
    """
    configs = for_problem(problem, model.device, "exhaustive")
    model.predict(problem, model.device, configs[:1])  # refuses a dtype the card does not have
    x = (model.features(problem, configs) - model.card.feature_mean) / model.card.feature_std
    with torch.inference_mode():
        inputs = torch.from_numpy(x.astype(np.float32))
        net = model.net
        log_ms = net.member_outputs(inputs) if isinstance(net, AveragedRuntimeNet) else net(inputs)[None]
    return np.exp(log_ms.numpy().astype(np.float64))


def _judged(c: CompileClass, tier: str, model: MLPModel, seed: int) -> RankedClass:
    sample = [shape.problem() for shape in class_problems(c, SAMPLE, seed)]
    untrained, scores = 0, []
    for problem in sample:
        if never_trained_on(model, problem):
            untrained += 1
            continue
        try:
            scores.append(committee_regret(list(member_predictions(model, problem))))
        except UnsupportedProblemError:
            untrained += 1
    return RankedClass(c, tier, untrained=untrained / len(sample),
                       disagreement=sum(scores) / len(scores) if scores else None)
