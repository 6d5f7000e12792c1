"""The problems `kernel-select calibrate` measures on a GPU without a model of its own, sized to its
time budget.

Compile is the wall of a collection on a fresh machine (about 0.6 core-seconds a bf16 kernel, 3.3x
that in float32; harness/cost.py), and a benchmark kernel serves every problem of its compile class.
So the plan is a list of compile classes (COMPILE_CLASSES, in priority order), each with many
problems, and it takes classes while cost.py predicts that collecting them, compile included, ends
within the time given on this machine's compile workers:

  * the first classes cover the strata the model is scored on: the Linear forward (bf16 "nt"),
    input gradient ("nn") and weight gradient ("tn"), float16, a batched GEMM, float32, and between
    them every N and K alignment class (odd, 2, 4, 8, >= 16 elements); later classes add layouts,
    alignments and residues of K mod 256 to dtypes that have them;
  * within a class, the problems cycle through the M buckets (<= 16, <= 256, <= 4096, > 4096), so
    any prefix of a class covers each bucket; M, N and K are drawn where they reuse the class's
    kernels (M <= 256 and small N or K as powers of two, K a multiple of 256 plus the class's
    residue, and M a multiple of 16 where A is read transposed), and each problem's work is capped;
  * the problems of each class are chosen so that the frozen hash split (dataset.split_of) puts
    about 70% in `train`, 15% in `val` and 15% in `test`: training uses train and val, and the
    test problems are the held-out slice calibrate scores the new model on;
  * a plan that fits all the classes grows every class until the budget is spent.

Problems of one class run together, those needing the fewest new kernels first
(bench_plan.reuse_order within the class), so the GPU starts timing after a few hundred kernels.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from kernel_select.device import DeviceSpec
from kernel_select.errors import OptionError
from kernel_select.layouts import a_transposed
from kernel_select.offline.data.dataset import id_of, split_of
from kernel_select.offline.data.shapes import Shape
from kernel_select.offline.harness import cost
from kernel_select.offline.harness.bench_plan import MAX_INT32, PlannedRun, plan, reuse_order


@dataclass(frozen=True)
class CompileClass:
    """Problems whose kernels are the same binaries: op, dtype, layout, the alignment of N and K
    (the largest power of two dividing them, capped at 16) and, for K aligned to 16, K mod 256
    (which fixes EVEN_K for every BLOCK_K)."""

    op: str  # "mm" or "bmm"
    dtype: str
    layout: str
    n_align: int
    k_align: int
    k_residue: int = 0

    @property
    def name(self) -> str:
        residue = f"r{self.k_residue}" if self.k_align == 16 else ""
        return f"{self.op}/{self.dtype}/{self.layout}/n{self.n_align}/k{self.k_align}{residue}"


#: In priority order. The first seven cover every dtype, layout, alignment class of N and of K (never
#: odd N with odd K: the frozen `family` split holds that class out) and the batched GEMM.
COMPILE_CLASSES: tuple[CompileClass, ...] = (
    CompileClass("mm", "bfloat16", "nt", 16, 16),  # nn.Linear's forward, aligned
    CompileClass("mm", "bfloat16", "nn", 8, 4),  # its input gradient
    CompileClass("mm", "bfloat16", "tn", 2, 8),  # its weight gradient
    CompileClass("mm", "float16", "nt", 4, 1),
    CompileClass("bmm", "bfloat16", "nt", 16, 16),  # attention scores q @ k^T (K: the head dim)
    CompileClass("mm", "float32", "nn", 16, 16),
    CompileClass("mm", "bfloat16", "nt", 1, 2),
    CompileClass("mm", "bfloat16", "nn", 16, 16, 128),
    CompileClass("mm", "float16", "tn", 16, 16),
    CompileClass("bmm", "bfloat16", "nn", 16, 16),  # attention values p @ v, batched experts
    CompileClass("mm", "bfloat16", "tn", 16, 16, 64),
    CompileClass("mm", "float16", "nn", 2, 16),
    CompileClass("mm", "bfloat16", "nt", 16, 8),
    CompileClass("mm", "float32", "nt", 8, 2),
)

#: Problems a class starts with; a budget that fits every class grows them up to MAX_PER_CLASS.
#: At 128, timing a class's problems takes about as long as compiling its kernels on 15 workers
#: (cost.py: ~55 s each for a bf16 class), so neither waits long for the other.
PER_CLASS = 128
MAX_PER_CLASS = 384
MIN_PER_CLASS = 24  # a class cut shorter than this by the budget is left out
GROW_STEP = 32
#: Work per problem: as the batched plan caps it (gap_plan.MAX_FLOP): the mean config takes ~4x the
#: fastest, ~1,000 configs each, and float32 without TF32 runs at 1/16 of the bf16 rate.
MAX_FLOP = {"bfloat16": 5e10, "float16": 5e10, "float32": 6.25e9}
#: Predicted wall time may use this share of the budget: cost.py has been within 4% on whole runs
#: of the layers and coverage plans (and 26% under on an older harness), and a run that reaches
#: the bound stops between problems, losing the rest of the last class.
SAFETY = 0.9
#: The frozen hash split's shares (dataset.split_of): the plan keeps each class near them.
SPLIT_SHARES = {"train": 0.70, "val": 0.15, "test": 0.15}
SIZE_MAX = 16384
BATCHES = (2, 4, 8, 16, 32, 64, 128, 256, 512)
DRAWS = 200  # candidates tried per problem before the sizes fall back to the smallest of the class


@dataclass
class CalibrationPlan:
    """What calibrate will measure, in collection order, and what cost.py predicts for it."""

    shapes: list[Shape]
    planned: list[list[PlannedRun]]  # each problem's runs (bench_plan.plan), same order
    finish_s: list[float]  # predicted end of each problem's timing, from the collection's start
    classes: dict[str, int]  # class name -> problems planned
    estimate: cost.Estimate
    budget_s: float
    workers: int

    def summary(self) -> dict:
        return {"problems": len(self.shapes), "rows": self.estimate.rows, "kernels": self.estimate.keys,
                "classes": dict(self.classes), "predicted_wall_s": round(self.estimate.wall_s, 1),
                "budget_s": round(self.budget_s, 1), "compile_workers": self.workers,
                "predicted_rows_per_gpu_minute": round(self.estimate.rows_per_gpu_minute())}


def plan_calibration(device: DeviceSpec, budget_s: float, workers: int, *, max_problems: int | None = None,
                     classes: Sequence[CompileClass] = COMPILE_CLASSES, seed: int = 0,
                     fp32_precision: str = "ieee", startup_s: float = 10.0) -> CalibrationPlan:
    """The classes and problems that fit `budget_s` seconds of collection (compile included) on one
    GPU with `workers` compile processes, by cost.py's simulation. `max_problems` caps the plan (a
    quick trial); `fp32_precision` is the one the harness will plan float32 with.

    Raises:
        OptionError: the budget fits no class at all (the message says what the first one needs).
    """
    if workers < 1:
        raise OptionError(f"calibrate: need at least one compile worker, got {workers}")
    rng = random.Random(seed)
    pools = {c: class_problems(c, MAX_PER_CLASS, rng) for c in classes}
    limit = budget_s * SAFETY
    cap = max_problems if max_problems is not None else math.inf
    ordered = _ClassOrder(device, fp32_precision)

    def extend(simulation: cost.Simulation, counts: dict[CompileClass, int]) -> cost.Simulation:
        """`simulation` (copied) with the first `count` problems of each class added, class by class."""
        simulation = simulation.copy()
        for c, count in counts.items():
            for runs in ordered(pools[c][:count]):
                simulation.add(runs)
        return simulation

    # Classes in priority order while a useful part of the next one fits; a class's problems never
    # change what the earlier ones cost, so each trial simulates only the class it adds.
    committed, counts = cost.Simulation(workers, startup_s=startup_s), {}
    for c in classes:
        room = cap - sum(counts.values())
        fitted = _largest_fitting(lambda n: extend(committed, {c: n}).wall_s <= limit,
                                  min(PER_CLASS, room), MIN_PER_CLASS if max_problems is None else 1)
        if fitted == 0:
            break
        counts[c] = fitted
        committed = extend(committed, {c: fitted})
        if fitted < PER_CLASS:
            break
    if not counts:
        first = extend(committed, {classes[0]: int(min(cap, MIN_PER_CLASS))})
        raise OptionError(f"calibrate: {budget_s:.0f} s of collection fit no class of problems with "
                          f"{workers} compile workers (the first needs about {first.wall_s / SAFETY:.0f} s); "
                          f"give calibrate more minutes")
    if len(counts) == len(classes) and all(n == PER_CLASS for n in counts.values()):
        # every class fits: give each the same larger number of problems, as many as fit
        fresh = cost.Simulation(workers, startup_s=startup_s)
        most = min(MAX_PER_CLASS, int(cap // len(counts)) if cap != math.inf else MAX_PER_CLASS)
        size = _largest_fitting(lambda n: extend(fresh, dict.fromkeys(counts, n)).wall_s <= limit,
                                most, PER_CLASS)
        counts = dict.fromkeys(counts, max(size, PER_CLASS))
    simulation = cost.Simulation(workers, startup_s=startup_s)
    shapes, planned, finish = [], [], []
    for c, count in counts.items():
        for runs in ordered(pools[c][:count]):
            finish.append(simulation.add(runs))
            planned.append(runs)
            shapes.append(ordered.shape_of[runs[0].problem])
    return CalibrationPlan(shapes=shapes, planned=planned, finish_s=finish,
                           classes={c.name: n for c, n in counts.items()}, estimate=simulation.result(),
                           budget_s=budget_s, workers=workers)


class _ClassOrder:
    """A class's chosen problems planned (bench_plan.plan, each problem once: planning is most of the
    planner's time) and in the harness's reuse order, remembered per choice."""

    def __init__(self, device: DeviceSpec, fp32_precision: str) -> None:
        self.device, self.fp32_precision = device, fp32_precision
        self.runs_of: dict[Shape, list[PlannedRun]] = {}
        self.shape_of: dict[object, Shape] = {}
        self.orders: dict[tuple[Shape, ...], list[list[PlannedRun]]] = {}

    def __call__(self, chosen: Sequence[Shape]) -> list[list[PlannedRun]]:
        key = tuple(chosen)
        if key not in self.orders:
            new = [s for s in chosen if s not in self.runs_of]
            problems = [s.problem() for s in new]
            self.runs_of.update(zip(new, plan(problems, self.device, fp32_precision=self.fp32_precision)))
            self.shape_of.update(zip(problems, new))
            self.orders[key] = reuse_order([self.runs_of[s] for s in chosen])
        return self.orders[key]


def _largest_fitting(fits, most: float, least: int) -> int:  # noqa: ANN001 -- a predicate on counts
    """The largest count in [least, most] for which `fits` holds (it holds for every smaller count
    when it holds for a larger one: a plan's prefix ends no later), or 0 when none does."""
    most = int(most)
    if most < least:
        return 0
    if fits(most):  # the common case: a whole class fits
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


def _grow(counts: dict[CompileClass, int], fits, cap: float) -> dict[CompileClass, int]:  # noqa: ANN001
    """Every class GROW_STEP more problems at a time, in priority order, while the plan fits."""
    counts = dict(counts)
    growing = True
    while growing:
        growing = False
        for c in counts:
            if counts[c] + GROW_STEP > MAX_PER_CLASS or sum(counts.values()) + GROW_STEP > cap:
                continue
            trial = {**counts, c: counts[c] + GROW_STEP}
            if fits(trial):
                counts, growing = trial, True
    return counts


# -- the problems of a class ------------------------------------------------------------------------

def class_problems(c: CompileClass, count: int, rng: random.Random) -> list[Shape]:
    """`count` distinct problems of class `c`: M cycling through the buckets, the hash split's
    shares kept in every prefix (a problem of a full split is drawn again)."""
    quotas = {split: 0 for split in SPLIT_SHARES}
    seen: set[str] = set()
    out: list[Shape] = []
    while len(out) < count:
        bucket = len(out) % len(M_BUCKETS)
        want = _split_wanted(quotas, len(out) + 1)
        for _ in range(DRAWS):
            shape = _draw(c, bucket, rng)
            pid = id_of(shape.problem())
            if pid not in seen and split_of(pid) in want:
                break
        else:  # the wanted splits are rare among this bucket's sizes: take any new problem
            shape = _draw(c, bucket, rng)
            pid = id_of(shape.problem())
            if pid in seen:
                continue
        seen.add(pid)
        quotas[split_of(pid)] += 1
        out.append(shape)
    return out


def _split_wanted(quotas: dict[str, int], total: int) -> set[str]:
    """The splits the next of `total` problems may fall in: train first, then val and test while they
    are below their share (at least one each), else train, so every prefix keeps the shares."""
    if not quotas["train"]:
        return {"train"}
    behind = {split for split, share in SPLIT_SHARES.items()
              if split != "train" and quotas[split] < max(1, round(share * total))}
    return behind or {"train"}


#: M buckets as evaluation and the model card count them (card.M_BUCKETS).
M_BUCKETS = ((1, 16), (17, 256), (257, 4096), (4097, SIZE_MAX))


def _draw(c: CompileClass, bucket: int, rng: random.Random) -> Shape:
    m = _m_in(bucket, c, rng)
    batch = rng.choice(BATCHES) if c.op == "bmm" else 1
    for _ in range(DRAWS):
        n, k = _size(c.n_align, 0, rng), _size(c.k_align, c.k_residue, rng)
        if _fits(c, m, n, k, batch):
            break
        batch = max(1, batch // 2)
    else:
        n, k = _smallest(c.n_align, 0), _smallest(c.k_align, c.k_residue)
        while batch > 1 and not _fits(c, m, n, k, batch):
            batch //= 2
    return Shape(m, n, k, c.dtype, f"calibrate {c.name}", family="calibrate", layer=c.name, group=c.name,
                 layout=c.layout, op=c.op, batch=batch)


def _fits(c: CompileClass, m: int, n: int, k: int, batch: int) -> bool:
    return (2.0 * batch * m * n * k <= MAX_FLOP[c.dtype]
            and batch * max(m * k, k * n, m * n) <= MAX_INT32)


def _m_in(bucket: int, c: CompileClass, rng: random.Random) -> int:
    """M in its bucket where it reuses the class's kernels: up to 256 a power of two (M fixes the
    BLOCK_M tiles are clamped to, and whether the offsets hint applies); where A is read
    transposed, M is A's row stride, compiled in by its divisor: a multiple of 16 there."""
    low, high = M_BUCKETS[bucket]
    transposed = a_transposed(c.layout)
    if high <= 256:
        powers = [p for p in (1, 2, 4, 8, 16, 32, 64, 128, 256)
                  if low <= p <= high and (p >= 16 or not transposed)]
        return rng.choice(powers)
    m = _log_uniform(rng, low, high)
    return max(low + 15, m - m % 16) if transposed else m


def _size(align: int, residue: int, rng: random.Random) -> int:
    """N or K of alignment class `align`: for 16, a quarter of them a power of two from 16 to 128
    (the kernels of larger sizes serve them: smaller tiles of the same binaries), the rest 256 j +
    `residue`; for the others, >= 256 and divisible by `align` but not 2 `align`."""
    if align == 16:
        if residue == 0 and rng.random() < 0.25:
            return 1 << rng.randint(4, 7)
        return max(1, _log_uniform(rng, 256, SIZE_MAX) // 256) * 256 + residue
    x = _log_uniform(rng, 256, SIZE_MAX)
    return x - x % (2 * align) + align


def _smallest(align: int, residue: int) -> int:
    return 16 if align == 16 and residue == 0 else (256 + residue if align == 16 else 256 + align)


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))
