"""The coverage sampler: training problems chosen where the model is blind and where compiled
kernels get reused.

Compile is the wall of data collection (~0.6 core-seconds per Triton binary), and the benchmark
kernel is shape-generic: problems with the same *compile class* share every binary. The class is
(dtype, the power-of-two divisor of N, that of K, and K mod 256, which fixes EVEN_K for every
BLOCK_K up to 256); problems of one class with M, N, K >= 256 need exactly the same binaries, and
smaller ones add only the few clamped tiles. So the sampler emits *groups*: many problems (many M)
of one class, one after another, and the harness compiles a group's binaries once.

Strata (each a minimum share of the problems; `check_shares` verifies them, MIN_SHARES documents):
  * M from 1 to 16384, at least half at M <= 256;
  * N and K alignment classes odd / 2 / 4 / 8 / >= 16 elements (the largest power of two dividing
    the size, capped at 16), each at least 10%;
  * bfloat16 >= 50%, float16 >= 15%, float32 >= 15%;
  * real layer shapes (forward and both backward GEMMs) of the open architectures in
    `kernel_select.offline.data.architectures`, at decode, prefill and training sizes.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from dataclasses import replace

from kernel_select.errors import ProblemError
from kernel_select.offline.data.architectures import all_layer_gemms
from kernel_select.offline.harness.bench_plan import pow2_divisor
from kernel_select.offline.data.shapes import Shape, check_max_flop

ALIGNMENTS = (1, 2, 4, 8, 16)  # pow2_divisor of N or K, capped at 16
ALIGNMENT_NAMES = {1: "odd", 2: "2", 4: "4", 8: "8", 16: ">=16"}
#: Order in which groups take dtypes: any prefix of whole cycles is 50% bf16, 25% fp16, 25% fp32.
DTYPE_CYCLE = ("bfloat16", "float16", "bfloat16", "float32")
#: fp32 runs without TF32 at a fraction of the bf16 rate: a smaller cap keeps its timing cheap.
FLOP_SCALE = {"bfloat16": 1.0, "float16": 1.0, "float32": 0.125}
MIN_SHARES = {
    "m<=256": 0.5,
    **{f"n {ALIGNMENT_NAMES[a]}": 0.10 for a in ALIGNMENTS},
    **{f"k {ALIGNMENT_NAMES[a]}": 0.10 for a in ALIGNMENTS},
    "bfloat16": 0.5, "float16": 0.15, "float32": 0.15,
}
M_MAX = 16384
SIZE_MAX = 16384
SMALL_M_SHARE = 0.6  # of sampled groups' problems; layer groups bring fewer small M
K_RESIDUES_256 = (0, 16, 32, 64, 96, 128, 192, 208)  # K mod 256 for the ">= 16" class


def compile_class(dtype: str, n: int, k: int) -> str:
    """Problems with the same class (and M, N, K >= 256) share every compiled binary."""
    k_div = pow2_divisor(k)
    residue = k % 256 if k_div == 16 else 0
    return f"{dtype}/n{pow2_divisor(n)}/k{k_div}/r{residue}"


def _snap(x: int, align: int, residue_256: int = 0) -> int:
    """The nearest size >= 16 whose largest power-of-two divisor (capped at 16) is `align`."""
    if align == 16:
        x = (x // 256) * 256 + residue_256 if x >= 256 else max(16, (x // 16) * 16)
        return x if x >= 16 else 16
    x = max(x, 17)
    return x - x % (2 * align) + align  # == align (mod 2*align): divisor exactly `align`


def _log_uniform(rng: random.Random, low: float, high: float) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(max(high, low))))))


#: Size buckets of a group's N and K: "large" (>= 256, where tiles are never clamped) or one
#: power-of-two bucket (b/2, b] below it: sizes in one bucket clamp tiles alike, so share binaries.
SMALL_BUCKETS = (32, 64, 128, 256)
LARGE_SHARE = 0.75


def _bucket_range(rng: random.Random) -> tuple[int, int]:
    if rng.random() < LARGE_SHARE:
        return 257, SIZE_MAX
    b = rng.choice(SMALL_BUCKETS)
    return b // 2 + 1, b


def _in_class(rng: random.Random, lo: int, hi: int, align: int, residue: int) -> int:
    """A log-uniform size in [lo, hi] snapped to its alignment class (staying >= 16)."""
    for _ in range(8):
        x = _snap(_log_uniform(rng, lo, hi), align, residue)
        if lo <= x <= hi:
            return x
    return _snap(lo, align, residue)


def _sampled_problem(rng: random.Random, n_range: tuple[int, int], k_range: tuple[int, int],
                     aligns: tuple[int, int, int], cap: float) -> tuple[int, int, int]:
    """M first (stratified), then N and K in their buckets within what the cap leaves."""
    n_align, k_align, residue = aligns
    m = _log_uniform(rng, 1, 256) if rng.random() < SMALL_M_SHARE else _log_uniform(rng, 257, M_MAX)
    m = max(1, min(m, int(cap / (2.0 * n_range[0] * k_range[0]))))
    n = _in_class(rng, n_range[0], min(n_range[1], max(n_range[0], int(cap / (2.0 * m * k_range[0])))),
                  n_align, 0)
    k = _in_class(rng, k_range[0], min(k_range[1], max(k_range[0], int(cap / (2.0 * m * n)))),
                  k_align, residue)
    while 2.0 * m * n * k > cap and m > 1:  # snapping can overshoot a tight cap
        m //= 2
    return m, n, k


def sampled_group(rng: random.Random, dtype: str, n_align: int, k_align: int, size: int,
                  cap: float) -> list[Shape]:
    residue = rng.choice(K_RESIDUES_256) if k_align == 16 else 0
    n_range, k_range = _bucket_range(rng), _bucket_range(rng)
    stratum = f"n{ALIGNMENT_NAMES[n_align]}-k{ALIGNMENT_NAMES[k_align]}"
    label = f"{dtype}/n{n_align}/k{k_align}/r{residue}/N<={n_range[1]}/K<={k_range[1]}"
    seen, out = set(), []
    for _ in range(size * 4):
        m, n, k = _sampled_problem(rng, n_range, k_range, (n_align, k_align, residue), cap)
        if (m, n, k) not in seen:
            seen.add((m, n, k))
            out.append(Shape(m, n, k, dtype, f"sampler {stratum}", family=f"sampler:{stratum}",
                             layer="", group=label))
        if len(out) == size:
            break
    return out


def layer_groups(dtype: str, cap: float, min_size: int = 8) -> list[list[Shape]]:
    """Real layer GEMMs within the cap, grouped by compile class, biggest class first; classes
    with fewer than `min_size` problems are pooled into one last group ("mixed")."""
    by_class: dict[str, dict[tuple[int, int, int], Shape]] = defaultdict(dict)
    for g in all_layer_gemms():
        if 2.0 * g.m * g.n * g.k <= cap:
            cls = compile_class(dtype, g.n, g.k)
            by_class[cls].setdefault((g.m, g.n, g.k), Shape(
                g.m, g.n, g.k, dtype, f"{g.family} {g.layer} ({g.regime})", family=g.family,
                layer=g.layer, group=cls))
    groups = sorted((list(v.values()) for v in by_class.values()), key=len, reverse=True)
    big = [g for g in groups if len(g) >= min_size]
    mixed = [replace(s, group=f"{dtype}/mixed") for g in groups if len(g) < min_size for s in g]
    return big + ([mixed] if mixed else [])


def coverage_shapes(total: int, *, seed: int = 0, max_flop: float = 1e11, group_size: int = 128,
                    layer_share: float = 0.25) -> list[Shape]:
    """About `total` problems in groups of one compile class, in collection order.

    Groups cycle through dtypes (DTYPE_CYCLE) and through the 25 (N, K) alignment pairs; about
    `layer_share` of the groups are real layer shapes (split into chunks of `group_size`).
    Collecting any prefix of the list keeps the dtype and alignment shares close to the target.
    """
    check_max_flop(max_flop)
    if total <= 0 or group_size <= 0:
        raise ProblemError(f"coverage: expected positive total and group size, got {total}, {group_size}")
    rng = random.Random(seed)
    # A Latin order of the 25 (N, K) alignment pairs: any 5 consecutive sampled groups cover every
    # N class and every K class once, so the shares hold for every prefix of whole groups.
    size = len(ALIGNMENTS)
    pairs = [(ALIGNMENTS[i % size], ALIGNMENTS[(i + i // size) % size]) for i in range(size * size)]
    layer_pool = {d: [chunk for grp in layer_groups(d, max_flop * FLOP_SCALE[d])
                      for chunk in _chunks(rng, grp, group_size)] for d in FLOP_SCALE}
    out: list[Shape] = []
    seen: set[tuple[int, int, int, str]] = set()
    index = sampled = 0
    while len(out) < total:
        dtype = DTYPE_CYCLE[index % len(DTYPE_CYCLE)]
        cap = max_flop * FLOP_SCALE[dtype]
        use_layers = rng.random() < layer_share and layer_pool[dtype]
        if use_layers:
            group = layer_pool[dtype].pop(0)
        else:
            n_align, k_align = pairs[sampled % len(pairs)]  # 25 pairs, 4 dtypes: coprime cycles
            sampled += 1
            group = sampled_group(rng, dtype, n_align, k_align, group_size, cap)
        for shape in group:
            if (shape.m, shape.n, shape.k, shape.dtype) not in seen:
                seen.add((shape.m, shape.n, shape.k, shape.dtype))
                out.append(shape)
        index += 1
    return out[:total]


def _chunks(rng: random.Random, shapes: list[Shape], size: int) -> list[list[Shape]]:
    shapes = list(shapes)
    rng.shuffle(shapes)
    return [shapes[i:i + size] for i in range(0, len(shapes), size)]


def strata_shares(shapes: list[Shape]) -> dict[str, float]:
    """Share of problems in each stratum of MIN_SHARES, plus layer-shape and family counts."""
    count = max(len(shapes), 1)
    tally: Counter[str] = Counter()
    for s in shapes:
        tally["m<=256"] += s.m <= 256
        tally[f"n {ALIGNMENT_NAMES[pow2_divisor(s.n)]}"] += 1
        tally[f"k {ALIGNMENT_NAMES[pow2_divisor(s.k)]}"] += 1
        tally[s.dtype] += 1
        tally["layer shapes"] += not s.family.startswith(("sampler:", "random", "unknown"))
    return {key: tally[key] / count for key in [*MIN_SHARES, "layer shapes"]}


def check_shares(shapes: list[Shape]) -> list[str]:
    """The strata whose share is below its minimum, as readable lines (empty: all met)."""
    shares = strata_shares(shapes)
    return [f"{key}: {shares[key]:.1%} < {low:.0%}" for key, low in MIN_SHARES.items() if shares[key] < low]
