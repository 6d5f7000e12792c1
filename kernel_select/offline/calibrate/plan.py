"""What `kernel-select calibrate` measures within its time budget: how many problems of each compile
class (classes.py), sized by cost.py's simulation of the collection, compile included, on
this machine's compile workers and one GPU.

The classes come in priority order (offline/calibrate/priority.py puts first those where the
starting model is least sure), and the plan follows it:

  1. each class in turn, while it fits, with as many problems as the GPU times while the class's
     kernels compile (`balanced_count`: compile is the wall on a fresh machine, about 0.6 core-seconds
     a bf16 kernel and 3.3x that in float32, and a class's kernels serve all of its problems), at
     least PER_BUCKET_FOR_DOMAIN per M bucket (so the calibrated model claims its strata) and at
     most MAX_PER_CLASS; a class that does not fit with the fewest is passed over, and a cheaper one
     after it may still fit. Where that leaves out a class that the fewest of every class, taken
     first, would reach (a long early float32 class crowding out a later stratum), the plan is made
     that way instead: every class's fewest, then each up to its balanced count as far as it fits;
  2. what is left of the budget goes to more problems of the classes taken, GROW_STEP at a time in
     priority order: their kernels are compiled by then, so these cost GPU time alone;
  3. a plan that would collect fewer than MIN_ROWS_PER_GPU_MINUTE rows per GPU-minute (a class of
     small batched problems early in a short plan) passes over the class that adds rows slowest
     (`class_rate`) and is made again without it.

Problems of one class run together, those needing the fewest new kernels first
(bench_plan.reuse_order), so the GPU starts timing after a few hundred kernels; a run that ends early
(the harness's max_seconds) loses the end of the plan, the least important part.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kernel_select.device import DeviceSpec
from kernel_select.errors import OptionError
from kernel_select.model.card import stratum
from kernel_select.offline.calibrate.classes import (
    COMPILE_CLASSES,
    PER_BUCKET_FOR_DOMAIN,
    CompileClass,
    class_problems,
)
from kernel_select.offline.data.problem_ids import id_of
from kernel_select.offline.data.splits import split_of
from kernel_select.offline.data.shapes import Shape
from kernel_select.offline.harness import cost
from kernel_select.offline.harness.bench_plan import PlanMemo, PlannedRun, distinct_keys, plan, reuse_order

#: The most problems of one class: 384 bf16 problems time for about 2.5 minutes (cost.py).
MAX_PER_CLASS = 384
#: Problems added to a class at a time once every class that fits is in the plan.
GROW_STEP = 32
#: Predicted wall time may use this share of the budget: cost.py has been within 4% on whole runs
#: of the layers and coverage plans (and 26% under on an older harness), and a run that reaches
#: the bound stops between problems, losing the end of the plan.
SAFETY = 0.9
#: A class's first problems, whose kernels and timing bound from below what the class adds to the plan
#: (the first 8 of a class already need nearly all of its kernels).
SAMPLE = 8
#: What a plan keeps to, predicted over the whole collection from a cold compile cache: issue 41's
#: target for a new machine. Problems of a class that only cost GPU time add rows faster than that,
#: small batched ones slower (about 20,000 for batched float32 at M <= 16).
MIN_ROWS_PER_GPU_MINUTE = 30_000
#: The splits training reads (the others are held out: `test` scores the calibrated model).
TRAINING_SPLITS = ("train", "val")


@dataclass
class CalibrationPlan:
    """What calibrate will measure, in collection order, and what cost.py predicts for it."""

    shapes: list[Shape]
    planned: list[list[PlannedRun]]  # each problem's runs (bench_plan.plan), same order
    finish_s: list[float]  # predicted end of each problem's timing, from the collection's start
    classes: dict[str, int]  # class name -> problems planned, the classes in the order measured
    estimate: cost.Estimate
    budget_s: float
    workers: int
    passed_over: list[str] = field(default_factory=list)  # classes that did not fit, in priority order

    def summary(self) -> dict:
        return {"problems": len(self.shapes), "rows": self.estimate.rows, "kernels": self.estimate.keys,
                "classes": dict(self.classes), "passed_over": list(self.passed_over),
                "predicted_wall_s": round(self.estimate.wall_s, 1),
                "budget_s": round(self.budget_s, 1), "compile_workers": self.workers,
                "predicted_rows_per_gpu_minute": round(self.estimate.rows_per_gpu_minute()),
                "training_problems": self.training_problems(),
                "layouts": sorted({s.layout for s in self.shapes})}

    def training_problems(self) -> dict[str, int]:
        """Domain stratum (card.stratum) -> the plan's problems in it that training reads (the hash
        split's train and val): once measured, the calibrated model's card records these counts, and
        it claims a stratum from MIN_STRATUM_PROBLEMS on."""
        counts = Counter(stratum(s.op, s.dtype, s.m) for s in self.shapes
                         if split_of(id_of(s.problem())) in TRAINING_SPLITS)
        return dict(sorted(counts.items()))


def least_count(c: CompileClass) -> int:
    """The fewest problems a class is planned with: enough in each of its M buckets for the calibrated
    model to claim the bucket's stratum."""
    return PER_BUCKET_FOR_DOMAIN * len(c.m_buckets)


def plan_calibration(device: DeviceSpec, budget_s: float, workers: int, *, max_problems: int | None = None,
                     classes: Sequence[CompileClass] = COMPILE_CLASSES, seed: int = 0,
                     startup_s: float = 10.0,
                     min_rows_per_gpu_minute: float = MIN_ROWS_PER_GPU_MINUTE) -> CalibrationPlan:
    """The problems of `classes` (in priority order) that fit `budget_s` seconds of collection, compile
    included, on one GPU with `workers` compile processes, by cost.py's simulation (module
    docstring). Where the plan would collect fewer than `min_rows_per_gpu_minute`, the class that
    adds rows slowest is passed over and the plan made again. `max_problems` caps the plan (a quick
    trial: then a class may have a single problem, and the rate is not held).

    Raises:
        OptionError: the budget fits no class at all (the message says what the cheapest one needs).
    """
    if workers < 1:
        raise OptionError(f"calibrate: need at least one compile worker, got {workers}")
    cap = max_problems if max_problems is not None else math.inf
    runs = _ClassRuns(device, seed)  # planned once, whatever the plans made of them
    slow: list[CompileClass] = []
    whole = max_problems is None
    while True:
        def made(fewest_first: bool) -> _Build:
            build = _Build(runs, cost.Simulation(workers, startup_s=startup_s), limit=budget_s * SAFETY)
            _take_classes(build, [c for c in classes if c not in slow], cap, whole, workers, fewest_first)
            return build

        build = made(fewest_first=False)
        # A class's balanced problems, timed while the next class compiles, cost the plan little; but
        # many of them early (float32's) can leave a later class out. Then the fewest of every class
        # come first, and the balanced ones after them.
        fewest = made(fewest_first=True) if whole else build
        if set(fewest.taken) - set(build.taken):
            build = fewest
        if not build.taken:
            cheapest = min(wall_floor(build.simulation, runs.ordered(c, 0, SAMPLE), 1) for c in classes)
            raise OptionError(f"calibrate: {budget_s:.0f} s of collection fit no class of problems with "
                              f"{workers} compile workers (the cheapest needs more than "
                              f"{cheapest / SAFETY:.0f} s); give calibrate more minutes")
        _grow(build, cap)
        if (max_problems is not None or len(build.taken) == 1
                or build.simulation.result().rows_per_gpu_minute() >= min_rows_per_gpu_minute):
            break
        slow.append(min(build.taken, key=lambda c: class_rate(runs.ordered(c, 0, build.taken[c]), workers)))
    return CalibrationPlan(shapes=build.shapes, planned=build.planned, finish_s=build.finish_s,
                           classes={c.name: n for c, n in build.taken.items()},
                           estimate=build.simulation.result(), budget_s=budget_s, workers=workers,
                           passed_over=[c.name for c in classes if c not in build.taken])


def _take_classes(build: _Build, classes: Sequence[CompileClass], cap: float, whole: bool, workers: int,
                  fewest_first: bool) -> None:
    """Each class in turn with its fewest problems, and up to its balanced count: right after its
    fewest, or (`fewest_first`) once every class has its fewest."""
    for c in classes:
        if cap - build.total >= 1:
            _take_class(build, c, cap, whole)
            if not fewest_first and c in build.taken:
                _balance_class(build, c, cap, workers)
    if fewest_first:
        for c in list(build.taken):
            _balance_class(build, c, cap, workers)


def _take_class(build: _Build, c: CompileClass, cap: float, whole: bool) -> None:
    """Class `c` into the plan with its fewest problems (with `whole`, `least_count`: enough to claim
    its strata; else one), or not at all."""
    least = int(min(cap - build.total, least_count(c) if whole else 1))
    # A bound from a class's first few problems costs planning those few only: a class that cannot
    # fit is passed over without planning more.
    if wall_floor(build.simulation, build.runs.ordered(c, 0, min(least, SAMPLE)), least) > build.limit:
        return
    if build.fits(c)(least):
        build.take(c, least)


def _balance_class(build: _Build, c: CompileClass, cap: float, workers: int) -> None:
    """More of class `c`, up to `balanced_count` (the problems its GPU times while the class's kernels
    compile), as many as fit."""
    first = build.taken[c]
    most = min(first + cap - build.total, balanced_count(build.runs.ordered(c, 0, first), workers, first))
    if most > first:
        build.take(c, _largest_fitting(build.fits(c), most, first))


def _grow(build: _Build, cap: float) -> None:
    """The budget left: GROW_STEP more problems of each class taken at a time, in priority order,
    their kernels compiled by then, while the plan fits."""
    while cap - build.total >= 1:
        steps = {c: int(min(GROW_STEP, MAX_PER_CLASS - n)) for c, n in build.taken.items()}
        if all(step < 1 for step in steps.values()):
            return
        for c, step in steps.items():
            step = int(min(step, cap - build.total))
            if step < 1:
                continue
            first = build.taken[c]
            end = _largest_fitting(build.fits(c), first + step, first + 1)
            build.take(c, end)
            if end < first + step:  # the budget (or the cap) is spent
                return


def class_rate(planned: Sequence[list[PlannedRun]], workers: int) -> float:
    """Rows per GPU-minute of a class's problems alone: their rows over their kernels' compile on
    `workers` processes and their timing (cost.py), which the plan overlaps, so a lower bound."""
    compile_s = sum(cost.COMPILE_CORE_S[(key.kernel, key.dtype)] for key in distinct_keys(list(planned)))
    timing_s = sum(cost.problem_timing_s(problem_runs, 0) for problem_runs in planned)
    return 60.0 * sum(len(problem_runs) + 1 for problem_runs in planned) / (compile_s / workers + timing_s)


class _Build:
    """A plan as it grows: problems join its end a slice of one class at a time, and cost.py's
    simulation of it so far (what a later slice costs never changes what came before)."""

    def __init__(self, runs: _ClassRuns, simulation: cost.Simulation, limit: float) -> None:
        self.runs, self.simulation, self.limit = runs, simulation, limit
        self.taken: dict[CompileClass, int] = {}  # class -> its problems in the plan (a prefix of its pool)
        self.shapes: list[Shape] = []
        self.planned: list[list[PlannedRun]] = []
        self.finish_s: list[float] = []
        self._last: tuple[tuple[CompileClass, int, int], cost.Simulation, list[float]] | None = None

    @property
    def total(self) -> int:
        return sum(self.taken.values())

    def trial(self, c: CompileClass, first: int, end: int) -> cost.Simulation:
        """The plan with problems first..end of class `c` added (the plan itself is unchanged)."""
        if self._last is None or self._last[0] != (c, first, end):
            after, finish = self.simulation.copy(), []
            for problem_runs in self.runs.ordered(c, first, end):
                finish.append(after.add(problem_runs))
            self._last = ((c, first, end), after, finish)
        return self._last[1]

    def fits(self, c: CompileClass) -> Callable[[int], bool]:
        """Whether the plan with class `c`'s problems up to a count still ends within the limit."""
        first = self.taken.get(c, 0)
        return lambda end: self.trial(c, first, end).wall_s <= self.limit

    def take(self, c: CompileClass, end: int) -> bool:
        """Add class `c`'s problems up to `end` (none where `end` is 0); whether any were added."""
        first = self.taken.get(c, 0)
        if end <= first:
            return False
        self.simulation = self.trial(c, first, end)
        assert self._last is not None
        self.finish_s += self._last[2]
        for problem_runs in self.runs.ordered(c, first, end):
            self.planned.append(problem_runs)
            self.shapes.append(self.runs.shape_of[problem_runs[0].problem])
        self.taken[c] = end
        self._last = None
        return True


def wall_floor(simulation: cost.Simulation, sample: Sequence[list[PlannedRun]], count: int) -> float:
    """A lower bound on the wall time of `simulation` with `count` problems added, `sample` among
    them: the compile pool's clock once the sample's keys it has not compiled are compiled, or the
    GPU's end plus the sample's timing and cost.PROBLEM_S for each other problem (one GPU times them
    one after another, after what it has)."""
    new = [key for key in distinct_keys(list(sample)) if key not in simulation.key_done]
    compiled = simulation.compile_clock + sum(cost.COMPILE_CORE_S[(key.kernel, key.dtype)]
                                              for key in new) / simulation.workers
    timed = (simulation.end + sum(cost.problem_timing_s(problem_runs, 0) for problem_runs in sample)
             + max(count - len(sample), 0) * cost.PROBLEM_S)
    return max(compiled, timed)


def balanced_count(first_runs: Sequence[list[PlannedRun]], workers: int, least: int) -> int:
    """How many problems of a class the GPU times while its kernels compile on `workers` processes,
    estimated from its first problems' runs: the class's kernels (those of its first problems: a
    few dozen already need nearly all of them) over the mean problem's timing (cost.py); within
    [least, MAX_PER_CLASS]."""
    compile_s = sum(cost.COMPILE_CORE_S[(key.kernel, key.dtype)] for key in distinct_keys(list(first_runs)))
    timing_s = sum(cost.problem_timing_s(problem_runs, 0) for problem_runs in first_runs) / len(first_runs)
    return int(min(max(math.ceil(compile_s / workers / timing_s), least), MAX_PER_CLASS))


class _ClassRuns:
    """Each class's problems (classes.class_problems, drawn once up to MAX_PER_CLASS),
    planned once each (bench_plan.plan: planning is most of the planner's time) and handed out in
    the harness's reuse order, a slice of a class at a time."""

    def __init__(self, device: DeviceSpec, seed: int) -> None:
        self.device, self.seed = device, seed
        self.pools: dict[CompileClass, list[Shape]] = {}
        self.runs_of: dict[Shape, list[PlannedRun]] = {}
        self.shape_of: dict[object, Shape] = {}
        self.orders: dict[tuple[CompileClass, int, int], list[list[PlannedRun]]] = {}
        # one memo for every slice planned: a key shared by two slices (or classes) is then one
        # object, which the simulation's lookups match by identity (comparing equal copies field by
        # field was a third of the planner's time), and a signature is planned once
        self.memo = PlanMemo()

    def ordered(self, c: CompileClass, first: int, end: int) -> list[list[PlannedRun]]:
        """Problems first..end of class `c`, planned, in reuse order."""
        key = (c, first, end)
        if key not in self.orders:
            if c not in self.pools:
                self.pools[c] = class_problems(c, MAX_PER_CLASS, self.seed)
            chosen = self.pools[c][first:end]
            new = [s for s in chosen if s not in self.runs_of]
            problems = [s.problem() for s in new]
            self.runs_of.update(zip(new, plan(problems, self.device, memo=self.memo)))
            self.shape_of.update(zip(problems, new))
            self.orders[key] = reuse_order([self.runs_of[s] for s in chosen])
        return self.orders[key]


def _largest_fitting(fits: Callable[[int], bool], most: float, least: int) -> int:
    """The largest count in [least, most] for which `fits` holds (it holds for every smaller count
    when it holds for a larger one: a plan's prefix ends no later), or 0 when none does."""
    most = int(most)
    if most < least:
        return 0
    if fits(most):  # the common case: all of it fits
        return most
    if not fits(least):
        return 0
    low, high = least, most - 1  # fits(low) holds
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low
