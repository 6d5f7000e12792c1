"""The kinds of group the round-3 plan draws (round3_plan.py, round3_schedule.py): each group is one
compile class (`sampler.compile_class`: dtype, layout, the alignment of N and K, K mod 256, and M's
alignment where A is read transposed), so that its problems share every compiled binary, and draws
problems one M bucket of the card at a time (BUCKET_RANGES):

  attention  bmm of the attention blocks of round3_sources.ATTENTION, architectures of the table
             (offline/data/architectures.py) with their published heads and head dims, plus
             SWEEP head dims the table lacks (32 to 192). "nt": scores q @ k^T and dP = dO @ v^T
             (M queries, N keys, K the head dim: a group is one head dim and one alignment class
             of the key count); "nn": values p @ v and dQ = dS @ k (N the head dim, K the keys: a
             group takes every head dim of one alignment); "tn": dV = p^T @ dO and dK = dS^T @ q
             (M keys, N the head dim, K queries). M <= 16 is decode (1-16 queries against a KV
             cache of any length); above, self-attention at a token count of the group's class
             (mostly not a multiple of 8), and cross-attention of the UNets to 77 text tokens.
             batch x heads is sequences x the heads of one GPU (heads / tensor-parallel degree),
             1 to 8,192.
  experts    bmm of the table's MoE experts ("nn", batch = experts of one GPU, M = tokens per
             expert, mostly few), in the group of 16-aligned key counts whose class they share.
  random     mm with random N and K of one alignment pair (odd, 2, 4, 8 mod 16 or 16-aligned;
             never odd with odd, the `family` split's class) in one layout, M across the buckets;
             in "tn" M's alignment is part of the class.
  layers     mm of the table's layers in the layouts programs run them (forward "nt", input
             gradient "nn", weight gradient "tn" with the tokens as K), at token counts of every
             alignment.

Every problem a group draws fits 32-bit offsets (bench_plan.check_benchmarkable) and its fastest
config is estimated under MAX_FASTEST_S (harness/cost.py), so no problem's ~1,000 configs take long.
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from kernel_select.errors import ProblemError
from kernel_select.layouts import a_transposed
from kernel_select.offline.data.architectures import GEMM_LAYOUTS, OUT_IN, layer_gemms_at
from kernel_select.offline.data.plans.round3_sources import (
    ATTENTION, DECODE_BATCH, EXPERT_PARALLEL, TENSOR_PARALLEL, AttentionBlock, expert_layers,
    trainable_architectures,
)
from kernel_select.offline.data.shapes import Shape
from kernel_select.offline.harness.bench_plan import check_benchmarkable, pow2_divisor
from kernel_select.offline.harness.cost import fastest_config_s
from kernel_select.problem import Problem

#: M of each card bucket (card.M_BUCKETS) as drawn: the last one to 65,536 (float32 mm reaches it).
BUCKET_RANGES = ((1, 16), (17, 256), (257, 4096), (4097, 65536))
#: The fastest config's estimated seconds (cost.fastest_config_s), at most: timing a problem costs
#: about 1,000 configs x 4x this (float32 without TF32 runs at 1/16 the rate: a looser cap).
MAX_FASTEST_S = {"bfloat16": 2e-4, "float16": 2e-4, "float32": 5e-4}
MAX_BATCH = 8192
SIZE_MAX = 16384  # N and K of random problems (as the coverage sampler draws them)
Quotas = tuple[int, int, int, int]  # problems per M bucket (BUCKET_RANGES)
#: The octave of M in 17..256 each single-GEMM group draws from (`single_m`).
OCTAVES = (32, 64, 128, 256)


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return round(math.exp(rng.uniform(math.log(low), math.log(max(low, high)))))


def in_class(x: int, align: int, residue: int | None = None) -> int:
    """A size next to `x` whose power-of-two divisor (capped at 16) is `align`: for 1 to 8, the
    one of x's run of 2 * align sizes that is `align` mod 2 * align; for 16, the next multiple of
    16 from x, or with `residue` (where K mod 256 is part of the class) the next size from x that
    is `residue` mod 256 (a multiple of 256 for 0)."""
    if align < 16:
        return x - x % (2 * align) + align
    if residue is None:
        return max(16, x + (-x) % 16)
    return max(256 if residue == 0 else residue, x + (residue - x) % 256)


def _fits(problem_args: tuple[int, int, int, str, str, str, int]) -> bool:
    m, n, k, dtype, op, layout, batch = problem_args
    problem = Problem(m, n, k, dtype, batch=batch, op=op, layout=layout)
    try:
        check_benchmarkable(problem)
    except ProblemError:
        return False
    return fastest_config_s(problem) <= MAX_FASTEST_S[dtype]


def _largest_fitting(low: int, high: int, fits: Callable[[int], bool]) -> int:
    """The largest x in [low, high] with fits(x), for fits monotone (true, then false); 0 if none."""
    if not fits(low):
        return 0
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def single_m(rng: random.Random, bucket: int, octave: int) -> int:
    """M of a single GEMM in M bucket `bucket`. Between 17 and 256 M decides which BLOCK_M the
    tiles are clamped to and whether the offsets hint holds (M >= BLOCK_M), so Ms of every octave
    would double a group's kernels (2,186 instead of 1,206 for bf16 at large N and K): a group
    draws them from one octave (`octave` / 2, `octave`], and a third as powers of two, which
    the group's larger Ms' kernels already serve."""
    low, high = BUCKET_RANGES[bucket]
    if bucket != 1:
        return _log_uniform(rng, low, high)
    if rng.random() < 1 / 3:
        return rng.choice(OCTAVES)
    return _log_uniform(rng, octave // 2 + 1, octave)


@dataclass(frozen=True, kw_only=True)
class Group(ABC):
    """Problems of one compile class of `dtype`, drawn `quotas[b]` to M bucket b (BUCKET_RANGES) by
    round3_plan.fill, from a random stream of the group's own (seeded by its name, so a group's name
    is part of what the plan draws)."""

    dtype: str
    quotas: Quotas
    residue: int = 0  # K mod 256 where K is 16-aligned (part of the class: it fixes EVEN_K)

    @property
    @abstractmethod
    def name(self) -> str:
        """The group's name in the plan's entries (`Shape.group`): its kind, then its class."""

    @abstractmethod
    def draw(self, rng: random.Random, bucket: int) -> Shape | None:
        """One problem of the group's class with M in `bucket`, or None where this draw found none."""


@dataclass(frozen=True, kw_only=True)
class SingleGemmGroup(Group):
    """An mm group (RandomGroup, LayerGroup): N of alignment `n_align`, K of `k_align` (and `residue`
    where 16), M of `m_align` where A is read transposed (its alignment is compiled in there), and
    Ms between 17 and 256 from one octave (`single_m`)."""

    n_align: int
    k_align: int
    m_align: int = 1
    octave: int = 256

    @property
    def _nk_class(self) -> str:
        residue = f"r{self.residue}" if self.k_align == 16 else ""
        return f"n{self.n_align}/k{self.k_align}{residue}"


@dataclass(frozen=True, kw_only=True)
class AttentionGroup(Group):
    """Batched attention GEMMs of one compile class (module docstring): `layout` "nt" takes the
    blocks of head dim `head_dim`, "nn" and "tn" every head dim whose divisor is `head_align`;
    the key count (N in "nt", K in "nn", M and K in "tn") is of alignment class `align` (and
    `residue` mod 256 where it is 16 and is K). `experts`: an "nn" group of 16-aligned key counts
    also draws the MoE experts, which share its class."""

    layout: str
    align: int
    head_dim: int = 0
    head_align: int = 16
    experts: bool = False

    @property
    def name(self) -> str:
        what = f"d{self.head_dim}" if self.layout == "nt" else f"d%{self.head_align}"
        residue = f"r{self.residue}" if self.align == 16 and self.layout != "nt" else ""
        return (f"attention/{self.dtype}/{self.layout}/{what}/T{self.align}{residue}"
                + ("+experts" if self.experts else ""))

    @property
    def _key_residue(self) -> int | None:
        """The key count's residue mod 256 where it is K (its class then fixes EVEN_K); in "nt" it
        is N, where any multiple of 16 is of the aligned class."""
        return None if self.layout == "nt" else self.residue

    def blocks(self) -> list[AttentionBlock]:
        if self.layout == "nt":
            return [b for b in ATTENTION if b.head_dim == self.head_dim]
        return [b for b in ATTENTION if pow2_divisor(b.head_dim) == self.head_align]

    def draw(self, rng: random.Random, bucket: int) -> Shape | None:
        if self.experts and rng.random() < 0.6:
            return _draw_experts(rng, self.dtype, bucket, self.residue, self.name)
        block = rng.choice(self.blocks())
        low, high = BUCKET_RANGES[bucket]
        if bucket == 0:  # decode: 1-16 queries against a KV cache of the group's class
            if not block.decodes or self.layout == "tn":
                return None
            queries = _log_uniform(rng, 1, 16)
            keys = in_class(_log_uniform(rng, *block.tokens), self.align, self._key_residue)
            role = "decode"
        elif block.context:  # cross-attention: latent tokens attend to the text tokens
            if pow2_divisor(block.context) != self.align or self.layout == "tn":
                return None
            queries = _log_uniform(rng, max(low, block.tokens[0]), min(high, block.tokens[1]))
            keys, role = block.context, "cross"
        else:  # self-attention at a token count of the group's class
            lo, hi = max(low, block.tokens[0]), min(high, block.tokens[1])
            if lo > hi:
                return None
            queries = keys = in_class(_log_uniform(rng, lo, hi), self.align, self._key_residue)
            role = "prefill"
        gemm, (m, n, k) = _attention_gemm(rng, self.layout, queries, keys, block.head_dim, role != "decode")
        if not low <= m <= high:
            return None
        heads = block.heads // rng.choice([t for t in TENSOR_PARALLEL if block.heads % t == 0])
        per_call = DECODE_BATCH if role == "decode" else block.sequences
        args = (m, n, k, self.dtype, "bmm", self.layout)
        most = _largest_fitting(1, min(per_call[1], MAX_BATCH // heads), lambda s: _fits((*args, s * heads)))
        if most < per_call[0]:
            return None
        # a tenth of the problems as many sequences as fit: batch x heads reaches 8,192 (decode)
        batch = heads * (most if rng.random() < 0.1 else _log_uniform(rng, per_call[0], most))
        level = f" {block.level}" if block.level else ""
        layer = f"{gemm}{level} d{block.head_dim} {role} T={keys}"
        layer += f" q={queries}" if queries != keys else ""
        return Shape(m, n, k, self.dtype, f"{block.family} {layer}", family=block.family, layer=layer,
                     group=self.name, layout=self.layout, op="bmm", batch=batch)


def _attention_gemm(rng: random.Random, layout: str, queries: int, keys: int, d: int,
                    backward: bool) -> tuple[str, tuple[int, int, int]]:
    """One of the attention GEMMs of `layout` (the forward one, or with `backward` either of the
    layout's) and its (m, n, k)."""
    if layout == "nt":
        return rng.choice(("q@k^T", "dP=dO@v^T")[:1 + backward]), (queries, keys, d)
    if layout == "nn":
        return rng.choice(("p@v", "dQ=dS@k")[:1 + backward]), (queries, d, keys)
    return rng.choice(("dV=p^T@dO", "dK=dS^T@q")), (keys, d, queries)


def _draw_experts(rng: random.Random, dtype: str, bucket: int, residue: int, group: str) -> Shape | None:
    """A batched expert GEMM of an "nn" class of 16-aligned N, K `residue` mod 256."""
    layers = [e for e in expert_layers() if e.fan_in % 256 == residue and pow2_divisor(e.fan_out) == 16]
    if not layers:
        return None
    expert = rng.choice(layers)
    tokens = _log_uniform(rng, *BUCKET_RANGES[bucket][:2]) if bucket < 3 else _log_uniform(rng, 4097, 16384)
    m, n, k = tokens, expert.fan_out, expert.fan_in
    parallel = rng.choice([p for p in EXPERT_PARALLEL if expert.experts % p == 0])
    batch = expert.experts // parallel
    while batch > 1 and not _fits((m, n, k, dtype, "bmm", "nn", batch)):
        batch //= 2
    if not _fits((m, n, k, dtype, "bmm", "nn", batch)):
        return None
    layer = f"{expert.layer} batched tokens/expert={tokens}"
    return Shape(m, n, k, dtype, f"{expert.family} {layer}", family=expert.family, layer=layer,
                 group=group, layout="nn", op="bmm", batch=batch)


@dataclass(frozen=True, kw_only=True)
class RandomGroup(SingleGemmGroup):
    """mm problems of one compile class: N and K random of alignment `n_align` and `k_align` (K
    `residue` mod 256 where 16-aligned), each either large (257 to SIZE_MAX) or in one small
    power-of-two bucket (`n_bucket`, `k_bucket`: (b/2, b]; 0 for large), M random in each bucket
    (of alignment `m_align` in "tn", where it is compiled in)."""

    layout: str
    n_bucket: int = 0
    k_bucket: int = 0

    @property
    def name(self) -> str:
        m = f"/m{self.m_align}" if a_transposed(self.layout) else ""
        small = "".join(f"/{x}<={b}" for x, b in (("N", self.n_bucket), ("K", self.k_bucket)) if b)
        return f"random/{self.dtype}/{self.layout}/{self._nk_class}{m}{small}"

    def draw(self, rng: random.Random, bucket: int) -> Shape | None:
        low, high = BUCKET_RANGES[bucket]
        m = single_m(rng, bucket, self.octave)
        if a_transposed(self.layout):
            m = in_class(m, self.m_align) if self.m_align < 16 else max(16, m - m % 16)
            if not low <= m <= high:
                return None
        n = self._size(rng, self.n_align, None, self.n_bucket)
        k = self._size(rng, self.k_align, self.residue, self.k_bucket)
        if not _fits((m, n, k, self.dtype, "mm", self.layout, 1)):
            return None
        stratum_ = f"n{self.n_align}-k{self.k_align}"
        return Shape(m, n, k, self.dtype, f"round3-random {stratum_} {self.layout}", family="round3-random",
                     layer=f"{stratum_} {self.layout}", group=self.name, layout=self.layout)

    @staticmethod
    def _size(rng: random.Random, align: int, residue: int | None, bucket: int) -> int:
        low, high = (bucket // 2 + 1, bucket) if bucket else (257, SIZE_MAX)
        for _ in range(8):
            x = in_class(_log_uniform(rng, low, high), align, residue)
            if low <= x <= high:
                return x
        return in_class(low, align, residue)


@dataclass(frozen=True, kw_only=True)
class LayerGroup(SingleGemmGroup):
    """GEMMs `gemm` ("fwd", "dX" or "dW") of the table's layers whose class is the group's: N of
    `n_align`, K of `k_align` and `residue`, in the layout the layer's weight storage gives (M of
    `m_align` in "tn"). The tokens are M ("fwd", "dX") or K ("dW", of the group's class)."""

    gemm: str
    m_align: int = 16

    @property
    def name(self) -> str:
        m = f"/m{self.m_align}" if self.gemm == "dW" else ""
        return f"layers/{self.dtype}/{self.gemm}/{self._nk_class}{m}"

    def draw(self, rng: random.Random, bucket: int) -> Shape | None:
        low, high = BUCKET_RANGES[bucket]
        if self.gemm == "dW":  # the tokens are K, of the group's class; M is the weight's rows
            tokens = in_class(_log_uniform(rng, 17, 16384), self.k_align, self.residue)
        else:
            tokens = min(single_m(rng, bucket, self.octave), 32768)
        layout = GEMM_LAYOUTS[OUT_IN][self.gemm]  # nn.Linear's; GPT-2's Conv1D swaps fwd and dX
        candidates = [g for arch in trainable_architectures()
                      for g in layer_gemms_at(arch, tokens, "round3", (self.gemm,))
                      if g.layout == layout and self._holds(g.m, g.n, g.k)]
        candidates = [g for g in candidates if low <= g.m <= high]
        if not candidates:
            return None
        g = rng.choice(candidates)
        if not _fits((g.m, g.n, g.k, self.dtype, "mm", g.layout, 1)):
            return None
        return Shape(g.m, g.n, g.k, self.dtype, f"{g.family} {g.layer} (tokens {tokens})", family=g.family,
                     layer=g.layer, group=self.name, layout=g.layout)

    def _holds(self, m: int, n: int, k: int) -> bool:
        k_ok = pow2_divisor(k) == self.k_align and (self.k_align < 16 or k % 256 == self.residue)
        m_ok = self.gemm != "dW" or pow2_divisor(m) == self.m_align
        return pow2_divisor(n) == self.n_align and k_ok and m_ok

