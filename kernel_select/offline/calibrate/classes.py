"""The compile classes `kernel-select calibrate` measures, which ones cover a model's domain, and the
problems of each.

A compile class is a set of problems whose benchmark kernels are the same binaries (op, dtype,
layout, the alignment of N and K, K mod 256 for aligned K). Compile is the wall of a collection on a
fresh machine (harness/cost.py), and one class's kernels serve every problem of it, so calibrate
plans a few classes with many problems each (plan.py sizes them).

Which classes, in two tiers:

  * COVERAGE_CLASSES reach every stratum the shipped models' domains list (model/card.py: op x dtype
    x M bucket): single GEMMs in bf16, fp16 and fp32 at every M bucket, batched GEMMs in bf16 and fp16
    at every M bucket and in fp32 at M <= 16 (as far as the H100 model's data reaches: a batched fp32
    class over every bucket compiles 3,380 core-seconds, 40% of a 15-minute plan on 15 workers),
    the layouts nn, nt and tn, and every alignment class of N and K (odd, 2, 4, 8, >= 16; never odd N
    with odd K, which the frozen `family` split holds out). `covering_classes` adds a class for any
    stratum or layout of a starting model's card that these miss, so the calibrated model is never
    narrower than the model it starts from;
  * EXTRA_CLASSES add layouts, alignments and K residues to dtypes that have them, where the budget
    leaves room.

Within a class the problems cycle through its M buckets, so any prefix of a class covers each; M, N
and K are drawn where they reuse the class's kernels (M <= 256 and small N or K as powers of two, K a
multiple of 256 plus the class's residue, M a multiple of 16 where A is read transposed), each
problem's work is capped, and the frozen hash split (splits.split_of) puts about 70% in `train`,
15% in `val` and 15% in `test` in every prefix of each bucket's problems: training reads train and
val, and the test problems are the held-out slice calibrate scores the new model on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from kernel_select.layouts import a_transposed
from kernel_select.model.card import M_BUCKETS as CARD_M_BUCKETS
from kernel_select.model.card import MIN_STRATUM_PROBLEMS
from kernel_select.offline.data.problem_ids import id_of
from kernel_select.offline.data.splits import split_of
from kernel_select.offline.data.shapes import Shape
from kernel_select.offline.harness.bench_plan import MAX_INT32, largest_operand
from kernel_select.problem import gemm_flops

SIZE_MAX = 16384
#: M buckets as evaluation and the model card count them (card.M_BUCKETS), as (lowest, highest) M.
M_BUCKETS = ((1, 16), (17, 256), (257, 4096), (4097, SIZE_MAX))
BUCKET_NAMES = tuple(name for _, name in CARD_M_BUCKETS)
ALL_BUCKETS = tuple(range(len(M_BUCKETS)))
DTYPES = ("bfloat16", "float16", "float32")
OPS = ("mm", "bmm")


@dataclass(frozen=True)
class CompileClass:
    """Problems whose kernels are the same binaries: op, dtype, layout, the alignment of N and K
    (the largest power of two dividing them, capped at 16) and, for K aligned to 16, K mod 256
    (which fixes EVEN_K for every BLOCK_K); `m_buckets` are the M buckets (indices into M_BUCKETS)
    its problems cycle through."""

    op: str  # "mm" or "bmm"
    dtype: str
    layout: str
    n_align: int
    k_align: int
    k_residue: int = 0
    m_buckets: tuple[int, ...] = ALL_BUCKETS

    @property
    def name(self) -> str:
        residue = f"r{self.k_residue}" if self.k_align == 16 else ""
        buckets = ("" if self.m_buckets == ALL_BUCKETS
                   else "/" + "+".join(BUCKET_NAMES[b] for b in self.m_buckets))
        return f"{self.op}/{self.dtype}/{self.layout}/n{self.n_align}/k{self.k_align}{residue}{buckets}"

    @property
    def strata(self) -> list[str]:
        """The domain strata (card.stratum) its problems fall in."""
        return [f"{self.op}/{self.dtype}/{BUCKET_NAMES[b]}" for b in self.m_buckets]


SMALL_M = (0,)  # M <= 16 alone
#: In priority order (the order calibrate measures them in when it starts from no model).
COVERAGE_CLASSES: tuple[CompileClass, ...] = (
    CompileClass("mm", "bfloat16", "nt", 16, 16),  # nn.Linear's forward, aligned
    CompileClass("mm", "bfloat16", "nn", 8, 4),  # its input gradient
    CompileClass("mm", "bfloat16", "tn", 2, 8),  # its weight gradient
    CompileClass("mm", "float16", "nt", 4, 1),
    CompileClass("bmm", "bfloat16", "nt", 16, 16),  # attention scores q @ k^T (K: the head dim)
    CompileClass("mm", "float32", "nn", 16, 16),
    CompileClass("mm", "bfloat16", "nt", 1, 2),
    CompileClass("bmm", "float16", "nn", 16, 16),  # batched decode steps, prefill attention values
    CompileClass("bmm", "float32", "nt", 16, 16, m_buckets=SMALL_M),
)
EXTRA_CLASSES: tuple[CompileClass, ...] = (
    CompileClass("mm", "bfloat16", "nn", 16, 16, 128),
    CompileClass("mm", "float16", "tn", 16, 16),
    CompileClass("bmm", "bfloat16", "nn", 16, 16),  # attention values p @ v, batched experts
    CompileClass("mm", "bfloat16", "tn", 16, 16, 64),
    CompileClass("mm", "float16", "nn", 2, 16),
    CompileClass("mm", "bfloat16", "nt", 16, 8),
    CompileClass("mm", "float32", "nt", 8, 2),
)
COMPILE_CLASSES = COVERAGE_CLASSES + EXTRA_CLASSES


def strata_of(classes: Iterable[CompileClass]) -> set[str]:
    return {s for c in classes for s in c.strata}


def layouts_of(classes: Iterable[CompileClass]) -> set[str]:
    return {c.layout for c in classes}


def covering_classes(strata: Iterable[str] = (), layouts: Iterable[str] = ()
                     ) -> tuple[list[CompileClass], list[CompileClass]]:
    """(coverage tier, extra tier) for a model whose card lists domain `strata` ("mm/float16/m<=16")
    and `layouts`: COVERAGE_CLASSES, plus an aligned class for each stratum they miss (per op and
    dtype, over the missing M buckets) and a bf16 mm class for each layout they miss; then
    EXTRA_CLASSES. A stratum that names no op, dtype or bucket calibrate measures is left out."""
    coverage = list(COVERAGE_CLASSES)
    covered = strata_of(coverage)
    missing: dict[tuple[str, str], list[int]] = {}
    for stratum in sorted(set(strata) - covered):
        parts = stratum.split("/")
        if len(parts) == 3 and parts[0] in OPS and parts[1] in DTYPES and parts[2] in BUCKET_NAMES:
            missing.setdefault((parts[0], parts[1]), []).append(BUCKET_NAMES.index(parts[2]))
    for (op, dtype), buckets in missing.items():
        coverage.append(CompileClass(op, dtype, "nn" if op == "mm" else "nt", 16, 16,
                                     m_buckets=tuple(sorted(buckets))))
    for layout in sorted(set(layouts) - layouts_of(coverage)):
        coverage.append(CompileClass("mm", "bfloat16", layout, 16, 16))
    return coverage, [c for c in EXTRA_CLASSES if c not in coverage]


# -- the problems of a class ------------------------------------------------------------------------

#: The frozen hash split's shares (splits.split_of): every prefix of a class keeps near them.
SPLIT_SHARES = {"train": 0.70, "val": 0.15, "test": 0.15}
#: Problems per M bucket for the calibrated model to claim the bucket's stratum: the card's
#: MIN_STRATUM_PROBLEMS training (train and val) problems, at the hash split's shares.
PER_BUCKET_FOR_DOMAIN = math.ceil(MIN_STRATUM_PROBLEMS / (1.0 - SPLIT_SHARES["test"]))
#: Work per problem: as the batched plan caps it (gap_plan.MAX_FLOP): the mean config takes ~4x the
#: fastest, ~1,000 configs each, and float32 without TF32 runs at 1/16 of the bf16 rate.
MAX_FLOP = {"bfloat16": 5e10, "float16": 5e10, "float32": 6.25e9}
BATCHES = (2, 4, 8, 16, 32, 64, 128, 256, 512)
DRAWS = 200  # candidates tried per problem before the sizes fall back to the smallest of the class


def class_rng(c: CompileClass, seed: int) -> random.Random:
    """The class's own random stream: its problems do not depend on which classes come before it."""
    return random.Random(f"{seed}:{c.name}")


def class_problems(c: CompileClass, count: int, seed: int = 0) -> list[Shape]:
    """The first `count` distinct problems of class `c` (a longer list starts with a shorter one):
    M cycling through its buckets, the hash split's shares kept in every prefix of each bucket's
    problems (a problem of a full split is drawn again), so that PER_BUCKET_FOR_DOMAIN problems of a
    bucket hold MIN_STRATUM_PROBLEMS that training reads."""
    rng = class_rng(c, seed)
    quotas = {bucket: {split: 0 for split in SPLIT_SHARES} for bucket in c.m_buckets}
    seen: set[str] = set()
    out: list[Shape] = []
    while len(out) < count:
        bucket = c.m_buckets[len(out) % len(c.m_buckets)]
        want = _split_wanted(quotas[bucket], sum(quotas[bucket].values()) + 1)
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
        quotas[bucket][split_of(pid)] += 1
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
    return gemm_flops(batch, m, n, k) <= MAX_FLOP[c.dtype] and largest_operand(batch, m, n, k) <= MAX_INT32


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

