"""Active learning: spend a collection's rows on the problems where a committee of models disagrees.

Acquisition score (`committee_regret`). For one problem, every committee member ranks the configs
of its pruned EXHAUSTIVE space (`kernel_select.space.for_problem`). Trusting member i means
running i's top-1; member j (j != i) predicts that this costs pred_j[top1_i] / min(pred_j) of its
own best. The score is the mean of that ratio over all ordered pairs (i, j), minus 1: the
predicted regret of trusting one member, in the units the selector is scored in (0.05 = the
others expect a 5% slower kernel). A committee that agrees on the winner scores exactly 0 however
its absolute times differ, so the score spends nothing on problems whose ranking is settled and
everything on those whose winner is in doubt, which is what top-k selection needs. It needs no
measurement, so it works on problems never measured.

Budget (`select_for_budget`). A problem costs its number of configs (the harness times every
config of the space, so that many rows). Problems are taken in priority order (highest score
first, or a seeded random order for the `random` strategy) while they fit the remaining rows; a
problem that does not fit is skipped and smaller ones after it may still fit, so the budget is
never exceeded. Then the chosen problems are ordered by compile class (`sampler.shape_class`):
classes in the order of their best problem, problems within a class by priority, and each
problem's `group` is its class, so the pipelined harness compiles a class's binaries once and
times all of its problems with them. Choosing per problem first and grouping second keeps the
selection the one the score asked for; the pool (the coverage plan) is itself made of 128-problem
groups of one class, so the chosen problems still share classes (the experiment reports how many).

Default strategy: `random`. Replayed on the measured H100 problems at equal rows, choosing by
disagreement did not beat a random draw from the pool (offline/training/active_experiment.py;
the table is in docs/results.md, "Choosing the next collection"), and a random draw needs no committee.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from kernel_select.device import DeviceSpec, get_device, resolve
from kernel_select.errors import DatasetError, OptionError
from kernel_select.model import PerformanceModel
from kernel_select.offline.data import dataset, problem_ids
from kernel_select.offline.data.plans.sampler import shape_class
from kernel_select.offline.data.shapes import Shape
from kernel_select.offline.data.plans.strategies import DEFAULT_STRATEGY, STRATEGIES, Strategy
from kernel_select.space import for_problem

ACTIVE_PASS = "active"  # the dataset's `pass` column for problems chosen here


@dataclass(frozen=True)
class Candidate:
    """A problem that could be collected: its cost in rows, its compile class and its score."""

    shape: Shape
    rows: int  # configs in its pruned EXHAUSTIVE space = rows the harness would time
    compile_class: str
    score: float = 0.0  # committee_regret; 0 when not scored (random strategy)


def committee_regret(predicted_ms: Sequence[np.ndarray]) -> float:
    """Mean over ordered member pairs (i, j != i) of pred_j[argmin pred_i] / min pred_j, minus 1.

    `predicted_ms`: one array per member, the predicted ms of the same configs in the same order.
    """
    if len(predicted_ms) < 2:
        raise OptionError(f"committee: expected at least 2 members' predictions, got {len(predicted_ms)}")
    preds = np.vstack([np.asarray(p, dtype=np.float64) for p in predicted_ms])
    top1 = preds.argmin(axis=1)  # each member's pick
    best = preds.min(axis=1)  # each member's predicted best time
    ratios = preds[:, top1] / best[:, None]  # [j, i]: member j's view of member i's pick
    members = len(preds)
    return float((ratios.sum() - np.trace(ratios)) / (members * (members - 1)) - 1.0)


def candidates(shapes: Iterable[Shape], device: DeviceSpec | str) -> list[Candidate]:
    """Each shape with its cost on `device` and its compile class (unscored)."""
    spec = get_device(device)
    return [Candidate(s, len(for_problem(s.problem(), spec, "exhaustive")), shape_class(s))
            for s in shapes]


def committee_device(committee: Sequence[PerformanceModel]) -> DeviceSpec:
    """The device every member predicts for (they must agree: scores compare their predictions)."""
    if len(committee) < 2:
        raise OptionError(f"committee: expected at least 2 models, got {len(committee)}")
    keys = {m.device.key for m in committee}
    if len(keys) != 1:
        raise OptionError(f"committee: members predict for different devices ({', '.join(sorted(keys))})")
    return committee[0].device


def score_candidates(committee: Sequence[PerformanceModel], shapes: Iterable[Shape], *,
                     progress: bool = True) -> list[Candidate]:
    """Every shape scored by `committee_regret` over its pruned EXHAUSTIVE space, on the committee's
    device. Raises OptionError for fewer than 2 members or members of different devices, and the
    members' own errors (e.g. UnsupportedProblemError for a dtype a member was not trained on)."""
    spec = committee_device(committee)
    out = []
    for c in tqdm(candidates(shapes, spec), desc="committee", unit="problem", disable=not progress):
        problem = c.shape.problem()
        configs = for_problem(problem, spec, "exhaustive")
        predicted = [member.estimate(problem, configs) for member in committee]
        out.append(replace(c, score=committee_regret(predicted)))
    return out


def select_for_budget(pool: Sequence[Candidate], rows: int, strategy: Strategy = DEFAULT_STRATEGY,
                      seed: int = 0) -> list[Candidate]:
    """Problems for a budget of `rows`, in collection order (grouped by compile class).

    `disagreement` takes the highest scores first; `random` a seeded random order. Never exceeds
    the budget (see the module docstring).
    """
    if strategy not in STRATEGIES:
        raise OptionError(f"strategy: expected one of {STRATEGIES}, got {strategy!r}")
    if rows < 0:
        raise OptionError(f"rows: expected a budget >= 0, got {rows}")
    order = list(pool)
    if strategy == "random":
        random.Random(seed).shuffle(order)
    else:
        order.sort(key=lambda c: c.score, reverse=True)  # stable: ties keep the pool's order
    chosen, left = [], rows
    for c in order:
        if 0 < c.rows <= left:
            chosen.append(c)
            left -= c.rows
    return group_by_class(chosen)


def group_by_class(chosen: Sequence[Candidate]) -> list[Candidate]:
    """Problems of one compile class next to each other; classes in order of first appearance."""
    first_seen: dict[str, int] = {}
    for i, c in enumerate(chosen):
        first_seen.setdefault(c.compile_class, i)
    return sorted(chosen, key=lambda c: first_seen[c.compile_class])  # stable within a class


def measured_check(measured: Iterable[str | Path]) -> Callable[[Shape], bool]:
    """Whether a shape's problem (in its layout) is in one of the `measured` dataset files (any device)."""
    done: set[str] = set()
    for path in measured:
        if not Path(path).exists():
            raise DatasetError(f"{path}: no such dataset file (given as already measured)")
        done |= dataset.completed_problems(path)
    return lambda s: problem_ids.problem_id(s.m, s.n, s.k, s.dtype, layout=s.layout) in done


def unmeasured(shapes: Iterable[Shape], measured: Iterable[str | Path]) -> list[Shape]:
    """The shapes whose problem (in its layout) is in none of the `measured` dataset files (any device)."""
    is_measured = measured_check(measured)
    return [s for s in shapes if not is_measured(s)]


def plan_collection(pool: Sequence[Shape], rows: int, *, strategy: Strategy = DEFAULT_STRATEGY,
                    committee: Sequence[PerformanceModel] = (), device: DeviceSpec | str | None = None,
                    seed: int = 0, progress: bool = True) -> list[Candidate]:
    """The next collection's problems from `pool`: `select_for_budget` over the pool scored by the
    committee (`disagreement`) or unscored (`random`, on `device`: default the committee's, else
    the GPU this process runs on)."""
    if strategy == "disagreement":
        scored = score_candidates(committee, pool, progress=progress)
    else:
        scored = candidates(pool, committee[0].device if committee and device is None else resolve(device))
    return select_for_budget(scored, rows, strategy, seed)


def as_shapes(chosen: Iterable[Candidate], strategy: Strategy = DEFAULT_STRATEGY) -> list[Shape]:
    """The chosen problems as a shapes file's entries, group = compile class. Their `pass` (the
    dataset's provenance column) is `active` when a committee chose them; a random draw from the
    pool keeps the pool's own pass (usually `coverage`), as it is still the coverage sampler's."""
    by_committee = strategy == "disagreement"
    return [replace(c.shape, group=c.compile_class, pass_=ACTIVE_PASS if by_committee else c.shape.pass_)
            for c in chosen]
