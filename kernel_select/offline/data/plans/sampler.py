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
    `kernel_select.offline.data.architectures`, at decode, prefill and training sizes, all timed
    "nn" as the measured plan was (`layer_groups` without `served_layouts`).

`layer_shapes` is the next collection's plan: the same real layer GEMMs in the layouts programs
run them ("nt" forward, "nn" input gradient, "tn" weight gradient for nn.Linear), grouped by a
compile class that includes the layout (the harness compiles one binary per layout).
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import replace

from kernel_select.errors import ProblemError
from kernel_select.layouts import DEFAULT_LAYOUT, LAYOUTS, a_transposed
from kernel_select.offline.data.architectures import GEMM_SOURCES, IN_OUT, LayerGemm, all_layer_gemms
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


def compile_class(dtype: str, n: int, k: int, layout: str = DEFAULT_LAYOUT, m: int | None = None) -> str:
    """Problems with the same class (and M, N, K >= 256) share every compiled binary. A layout
    other than "nn" is part of the class (one binary per layout), and so is M's divisor when A
    is read transposed (M is then A's row stride, compiled in as M_DIV): pass `m` for those."""
    k_div = pow2_divisor(k)
    residue = k % 256 if k_div == 16 else 0
    name = f"{dtype}/n{pow2_divisor(n)}/k{k_div}/r{residue}"  # "nn" classes keep their old names
    if layout != DEFAULT_LAYOUT:
        name += f"/{layout}"
    if a_transposed(layout):
        if m is None:
            raise ProblemError(f"compile class of a {layout!r} problem: needs M (A is read transposed)")
        name += f"/m{pow2_divisor(m)}"
    return name


def shape_class(shape: Shape) -> str:
    """The compile class of a planned problem, in its own layout."""
    return compile_class(shape.dtype, shape.n, shape.k, shape.layout, shape.m)


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


def width_8_mod_16(size: int) -> int:
    """The width of the same size class that is 8 mod 16: aligned to 8 elements, not 16."""
    return size - size % 16 + 8


def eight_mod_16_variants(gemms: list[LayerGemm]) -> list[LayerGemm]:
    """Each GEMM with N, then K, moved to `width_8_mod_16` (where it is not already): the sizes Inductor's
    `pad_mm` hands the GEMM lowering for an odd width in bfloat16 or float16, which it pads to a multiple
    of 8. Measured files held such N and K at compute-bound sizes only with a misaligned M ("tn", M = 2
    mod 4), so a model learnt cuBLAS's penalty there from N (docs/results.md, GPT-2's LM head)."""
    out = []
    for g in gemms:
        if g.n % 16 != 8:
            out.append(replace(g, n=width_8_mod_16(g.n), layer=f"{g.layer} N 8 mod 16"))
        if g.k % 16 != 8:
            out.append(replace(g, k=width_8_mod_16(g.k), layer=f"{g.layer} K 8 mod 16"))
    return out


def layer_groups(dtype: str, cap: float, min_size: int = 8, *, served_layouts: bool = False,
                 source: str = "layers", eight_mod_16: bool = False) -> list[list[Shape]]:
    """Real layer GEMMs within the cap, grouped by compile class, biggest class first; classes
    with fewer than `min_size` problems are pooled into one group per layout ("mixed"), last.

    Without `served_layouts`, the coverage plan's problems: every weight taken as (in, out) and
    every GEMM "nn". With it, each GEMM's (m, n, k) and layout as Inductor sees them in the
    architecture (architectures.GEMM_LAYOUTS); a group never holds two layouts. `source`
    (architectures.GEMM_SOURCES): the layers, or instead the language models' output heads or LoRA
    adapters on the layers (served layouts only). With `eight_mod_16`, their `eight_mod_16_variants`
    instead.
    """
    if source not in GEMM_SOURCES:
        raise ProblemError(f"layer groups: expected a source among {', '.join(GEMM_SOURCES)}, got {source!r}")
    if source != "layers" and not served_layouts:
        raise ProblemError(f"layer groups: {source} GEMMs are planned in their served layouts only")
    gemms = GEMM_SOURCES[source]() if served_layouts else all_layer_gemms(IN_OUT)
    if eight_mod_16:
        gemms = eight_mod_16_variants(gemms)
    by_class: dict[str, dict[tuple[int, int, int], Shape]] = defaultdict(dict)
    for g in gemms:
        if 2.0 * g.m * g.n * g.k <= cap:
            layout = g.layout if served_layouts else DEFAULT_LAYOUT
            cls = compile_class(dtype, g.n, g.k, layout, g.m)
            by_class[cls].setdefault((g.m, g.n, g.k), Shape(
                g.m, g.n, g.k, dtype, f"{g.family} {g.layer} ({g.regime})", family=g.family,
                layer=g.layer, group=cls, layout=layout))
    groups = sorted((list(v.values()) for v in by_class.values()), key=len, reverse=True)
    big = [g for g in groups if len(g) >= min_size]
    mixed: dict[str, list[Shape]] = defaultdict(list)
    for s in (s for g in groups if len(g) < min_size for s in g):
        name = f"{dtype}/mixed" if s.layout == DEFAULT_LAYOUT else f"{dtype}/{s.layout}/mixed"
        mixed[s.layout].append(replace(s, group=name))
    return big + list(mixed.values())


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


#: The dtypes of the next collection's layer plan, in collection order.
LAYER_DTYPES = ("bfloat16", "float16")


def layer_shapes(max_problems: int | None = None, dtypes: tuple[str, ...] = LAYER_DTYPES, *,
                 max_flop: float = 1e11, min_flop: float = 0.0, group_size: int = 128, seed: int = 0,
                 skip: Callable[[Shape], bool] | None = None, source: str = "layers",
                 eight_mod_16: bool = False) -> list[Shape]:
    """Real layer GEMMs in their served layouts (`layer_groups(served_layouts=True)`) of at least
    `min_flop` and at most `max_flop` (both scaled per dtype as in the coverage sampler), each dtype
    after the previous one. A floor plans the large GEMMs that a lower cap left out (prefill and
    training at thousands of tokens) without the small ones measured already.

    `skip` says which problems to leave out (already measured); `source` plans the language models'
    output heads ("heads", architectures.head_gemms) or LoRA adapters ("lora",
    architectures.lora_gemms) instead of the layers; `eight_mod_16` their N and K moved to 8 mod 16
    (`eight_mod_16_variants`). With `max_problems`, each dtype
    gets an equal share of it (what a dtype cannot fill passes to the next) and every compile
    class of the dtype keeps a random part proportional to its size, so the plan keeps the
    architectures' mix. Classes are cut into groups of at most `group_size` (shuffled chunks of
    one class) and the groups take the layouts in turn, so every prefix of whole groups holds
    each layout.
    """
    check_max_flop(max_flop)
    if group_size <= 0 or (max_problems is not None and max_problems <= 0):
        raise ProblemError(f"layer shapes: expected positive group size and problem count, got "
                           f"{group_size}, {max_problems}")
    if not 0.0 <= min_flop < max_flop:  # also rejects NaN
        raise ProblemError(f"layer shapes: the work floor ({min_flop:g} FLOP) must be >= 0 and below "
                           f"the cap ({max_flop:g})")
    rng = random.Random(seed)
    out: list[Shape] = []
    for i, dtype in enumerate(dtypes):
        cap, floor = (flop * FLOP_SCALE.get(dtype, 1.0) for flop in (max_flop, min_flop))
        groups = [kept for g in layer_groups(dtype, cap, served_layouts=True, source=source,
                                             eight_mod_16=eight_mod_16)
                  if (kept := [s for s in g
                               if 2.0 * s.m * s.n * s.k >= floor and not (skip and skip(s))])]
        if max_problems is not None:
            groups = _thin(rng, groups, (max_problems - len(out)) // (len(dtypes) - i))
        out += _layouts_in_turn(rng, groups, group_size)
    return out


def _thin(rng: random.Random, groups: list[list[Shape]], keep: int) -> list[list[Shape]]:
    """A random part of each group, proportional to its size, `keep` problems in all (largest
    remainders round up); all of them when there are no more than `keep`."""
    total = sum(map(len, groups))
    if total <= keep:
        return groups
    quotas = [len(g) * keep / total for g in groups]
    counts = [int(q) for q in quotas]
    by_remainder = sorted(range(len(groups)), key=lambda i: counts[i] - quotas[i])
    for i in by_remainder[:keep - sum(counts)]:
        counts[i] += 1
    return [rng.sample(g, c) for g, c in zip(groups, counts) if c]


def _layouts_in_turn(rng: random.Random, groups: list[list[Shape]], size: int) -> list[Shape]:
    """The groups cut into shuffled chunks of at most `size`, taking the layouts in turn."""
    by_layout: dict[str, list[list[Shape]]] = defaultdict(list)
    for group in groups:
        by_layout[group[0].layout] += _chunks(rng, group, size)
    queues = list(by_layout.values())
    turns = max(map(len, queues), default=0)
    return [s for i in range(turns) for q in queues if i < len(q) for s in q[i]]


def _chunks(rng: random.Random, shapes: list[Shape], size: int) -> list[list[Shape]]:
    shapes = list(shapes)
    rng.shuffle(shapes)
    return [shapes[i:i + size] for i in range(0, len(shapes), size)]


def strata_shares(shapes: list[Shape]) -> dict[str, float]:
    """Share of problems in each stratum of MIN_SHARES, of real layer shapes and of each layout."""
    count = max(len(shapes), 1)
    tally: Counter[str] = Counter()
    for s in shapes:
        tally["m<=256"] += s.m <= 256
        tally[f"n {ALIGNMENT_NAMES[pow2_divisor(s.n)]}"] += 1
        tally[f"k {ALIGNMENT_NAMES[pow2_divisor(s.k)]}"] += 1
        tally[s.dtype] += 1
        tally["layer shapes"] += not s.family.startswith(("sampler:", "random", "unknown"))
        tally[f"layout {s.layout}"] += 1
    layouts = [f"layout {layout}" for layout in LAYOUTS]
    return {key: tally[key] / count for key in [*MIN_SHARES, "layer shapes", *layouts]}


def check_shares(shapes: list[Shape]) -> list[str]:
    """The strata whose share is below its minimum, as readable lines (empty: all met)."""
    shares = strata_shares(shapes)
    return [f"{key}: {shares[key]:.1%} < {low:.0%}" for key, low in MIN_SHARES.items() if shares[key] < low]
