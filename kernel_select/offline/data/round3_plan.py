"""The round-3 H100 plan (data/shapes_round3_h100.json): problems where the model is weak and users are.

Where the model is weak: the strata of its card (model/card.py: op x dtype x M bucket). Batched GEMMs
above M = 16 had 5 and 19 bf16 training problems and none in fp16 or fp32, batched fp32 9 in all,
fp32 mm above M = 4096 31; the shipped model scored 0.829 top-1 on batched GEMMs it never saw (issue
38). Where users are: attention at token counts that are not multiples of 8, batched experts with few
tokens each, layer GEMMs at the token counts prompts and images have, and shapes no table lists.

The plan is a list of groups, each one compile class (`sampler.compile_class`: dtype, layout, the
alignment of N and K, K mod 256, and M's alignment where A is read transposed), so that its problems
share every compiled binary, and each drawing a quota of problems per M bucket of the card:

  attention  bmm of the attention blocks of ATTENTION, architectures of the table
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

Never drawn: a problem of MEASURED_FILES, of the `unseen` split (data/shapes_unseen.json), of a
held-out family or of odd N with odd K (the `family` split: not trainable), or one drawn before.
Every problem's operands fit 32-bit offsets (bench_plan.check_benchmarkable) and its fastest
config is estimated under MAX_FASTEST_S (harness/cost.py), so no problem's ~1,000 configs take
long. Every group draws from its own random stream (seeded by SEED and its name), so editing one
group leaves the others' problems as they were (but for a problem both would draw: the first keeps it).

The groups come in `schedule()`'s order, the strata short of 100 training problems first: collected
with `bench --order file` (`ORDER=file bash data/collect.sh ...`), a run bounded by --max-seconds
fills them before anything else, at about the cost of the default reuse order (each group is one
class, whose kernels are compiled once in either order; the estimates are in data/README.md).

`python -m kernel_select.offline.data.round3_plan --out data/shapes_round3_h100.json` writes the
plan and prints its composition, the strata it brings to 100 training problems, and what
collecting it costs (harness/cost.py), whole and run by run of `data/collect.sh` (minutes).
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernel_select.errors import ProblemError
from kernel_select.layouts import a_transposed
from kernel_select.model.card import M_BUCKETS, stratum, stratum_count
from kernel_select.offline.data import splits
from kernel_select.offline.data.architectures import (
    ARCHITECTURES, GEMM_LAYOUTS, OUT_IN, Architecture, layer_gemms_at,
)
from kernel_select.offline.data.dataset import id_of, split_of
from kernel_select.offline.data.shapes import Shape, save
from kernel_select.offline.harness.bench_plan import check_benchmarkable, pow2_divisor
from kernel_select.offline.harness.cost import fastest_config_s
from kernel_select.problem import Problem

#: The plan's own seed ("round3" in ASCII); the unseen split's generator has another.
SEED = 0x726F756E6433
DATA_DIR = Path(__file__).resolve().parents[3] / "data"
#: The H100 files measured before this plan: their problems are not drawn again, and their training
#: problems are what the strata count starts from. Fixed, so the plan stays what the generator writes
#: after its own rows (h100_round3.parquet) are added to data/.
MEASURED_FILES = ("h100.parquet", "h100_coverage.parquet", "h100_layers.parquet", "h100_bmm.parquet")
UNSEEN_FILE = "shapes_unseen.json"
DTYPES = ("bfloat16", "float16", "float32")
#: Training problems every stratum of the card should reach with this plan's (the issue's target).
STRATUM_TARGET = 100
#: M of each card bucket (card.M_BUCKETS) as drawn: the last one to 65,536 (float32 mm reaches it).
BUCKET_RANGES = ((1, 16), (17, 256), (257, 4096), (4097, 65536))
BUCKET_NAMES = tuple(name for _, name in M_BUCKETS)
#: The fastest config's estimated seconds (cost.fastest_config_s), at most: timing a problem costs
#: about 1,000 configs x 4x this (float32 without TF32 runs at 1/16 the rate: a looser cap).
MAX_FASTEST_S = {"bfloat16": 2e-4, "float16": 2e-4, "float32": 5e-4}
MAX_BATCH = 8192
DRAWS = 60  # tries per wanted problem before a group's bucket settles for fewer
SIZE_MAX = 16384  # N and K of random problems (as the coverage sampler draws them)
Quotas = tuple[int, int, int, int]  # problems per M bucket (BUCKET_RANGES)


# -- where the shapes come from -------------------------------------------------------------------

@dataclass(frozen=True)
class AttentionBlock:
    """One attention block: its architecture (a name of the table, or SWEEP_FAMILY), heads and head
    dim (each model's config.json), the token counts it runs at, how many sequences (images,
    requests) one call holds, whether it decodes, and for cross-attention the keys' count."""

    family: str
    heads: int
    head_dim: int
    tokens: tuple[int, int]
    sequences: tuple[int, int]
    decodes: bool = False
    context: int = 0  # cross-attention: the keys are this many text tokens
    level: str = ""  # which of the architecture's attention blocks (UNet levels)


def _llm(name: str, heads: int, head_dim: int, positions: int) -> AttentionBlock:
    return AttentionBlock(name, heads, head_dim, (17, positions), (1, 8), decodes=True)


SWEEP_FAMILY = "attn-sweep"
#: Attention of the table's architectures (heads, head dim and context length from config.json;
#: the UNets' heads per level from their diffusers configs, cross-attending to 77 CLIP tokens).
#: Held-out families (splits.HELD_OUT_FAMILIES) are left out: their problems are never trained on.
ATTENTION: tuple[AttentionBlock, ...] = (
    _llm("llama3-8b", 32, 128, 8192), _llm("llama3.2-1b", 32, 64, 32768), _llm("llama3.2-3b", 24, 128, 32768),
    _llm("llama2-7b", 32, 128, 4096), _llm("llama2-13b", 40, 128, 4096), _llm("qwen2.5-0.5b", 14, 64, 32768),
    _llm("qwen2.5-7b", 28, 128, 32768), _llm("qwen2.5-14b", 40, 128, 32768), _llm("gemma2-2b", 8, 256, 8192),
    _llm("tinyllama-1.1b", 32, 64, 2048), _llm("smollm-135m", 9, 64, 2048),
    _llm("mistral-nemo-12b", 32, 128, 32768), _llm("gpt2", 12, 64, 1024), _llm("gpt2-xl", 25, 64, 1024),
    _llm("falcon-7b", 71, 64, 2048), _llm("pythia-2.8b", 32, 80, 2048), _llm("opt-1.3b", 32, 64, 2048),
    _llm("mixtral-8x7b", 32, 128, 32768), _llm("deepseek-moe-16b", 16, 128, 4096),
    _llm("qwen1.5-moe-a2.7b", 16, 128, 8192),
    AttentionBlock("deit-s16", 6, 64, (50, 1025), (1, 256)),  # 224 px: 197 tokens, 384 px: 577
    AttentionBlock("vit-h14", 16, 80, (257, 1370), (1, 64)),  # 224 px: 257, 518 px: 1370
    AttentionBlock("dit-xl2", 16, 72, (64, 4096), (2, 64)),  # latent patches; pairs for guidance
    AttentionBlock("sd1.5-unet", 8, 40, (1024, 16384), (2, 16), level="320"),
    AttentionBlock("sd1.5-unet", 8, 80, (256, 4096), (2, 16), level="640"),
    AttentionBlock("sd1.5-unet", 8, 160, (64, 1024), (2, 16), level="1280"),
    AttentionBlock("sd1.5-unet", 8, 40, (1024, 16384), (2, 16), context=77, level="320"),
    AttentionBlock("sd1.5-unet", 8, 80, (256, 4096), (2, 16), context=77, level="640"),
    AttentionBlock("sd1.5-unet", 8, 160, (64, 1024), (2, 16), context=77, level="1280"),
    AttentionBlock("sdxl-unet", 10, 64, (1024, 16384), (2, 8), level="640"),
    AttentionBlock("sdxl-unet", 20, 64, (256, 4096), (2, 8), level="1280"),
    AttentionBlock("sdxl-unet", 10, 64, (1024, 16384), (2, 8), context=77, level="640"),
    AttentionBlock("sdxl-unet", 20, 64, (256, 4096), (2, 8), context=77, level="1280"),
    AttentionBlock("whisper-base", 8, 64, (50, 1500), (1, 32)),
    AttentionBlock("wav2vec2-base", 12, 64, (50, 3000), (1, 32)),
    AttentionBlock("hubert-large", 16, 64, (50, 3000), (1, 32)),
    AttentionBlock("bert-base", 12, 64, (17, 512), (1, 256)),
    AttentionBlock("bert-large", 16, 64, (17, 512), (1, 256)),
    AttentionBlock("t5-base", 12, 64, (17, 2048), (1, 64)),
    # head dims no architecture of the table has, between its 40 and 256
    *(AttentionBlock(SWEEP_FAMILY, 16, d, (17, 16384), (1, 64), decodes=True)
      for d in (32, 48, 96, 112, 192)),
)
TENSOR_PARALLEL = (1, 2, 4, 8)
DECODE_BATCH = (1, 256)  # requests one decode step serves


@dataclass(frozen=True)
class ExpertLayer:
    """One batched expert GEMM of an MoE of the table: experts, in and out features (its layer)."""

    family: str
    layer: str
    experts: int
    fan_in: int
    fan_out: int


def _experts() -> tuple[ExpertLayer, ...]:
    """The expert layers of the table's MoE architectures (the router and the shared expert are
    not batched), held-out families left out."""
    return tuple(ExpertLayer(arch.name, layer, EXPERTS[arch.name], fan_in, fan_out)
                 for arch in ARCHITECTURES if arch.name in EXPERTS
                 for layer, fan_in, fan_out in arch.layers if layer.startswith("expert"))


#: Routed experts of the table's MoEs (config.json: num_local_experts / n_routed_experts / num_experts).
EXPERTS = {"mixtral-8x7b": 8, "deepseek-moe-16b": 64, "qwen1.5-moe-a2.7b": 60}
EXPERT_PARALLEL = (1, 2, 4, 8)


# -- groups ---------------------------------------------------------------------------------------

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


def _bucket_of(m: int) -> int:
    return next(i for i, (low, high) in enumerate(BUCKET_RANGES) if low <= m <= high)


@dataclass(frozen=True)
class AttentionGroup:
    """Batched attention GEMMs of one compile class (module docstring): `layout` "nt" takes the
    blocks of head dim `head_dim`, "nn" and "tn" every head dim whose divisor is `head_align`;
    the key count (N in "nt", K in "nn", M and K in "tn") is of alignment class `align` (and
    `residue` mod 256 where it is 16 and is K). `experts`: an "nn" group of 16-aligned key counts
    also draws the MoE experts, which share its class."""

    dtype: str
    layout: str
    align: int
    quotas: Quotas
    head_dim: int = 0
    head_align: int = 16
    residue: int = 0
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
    layers = [e for e in _experts() if e.fan_in % 256 == residue and pow2_divisor(e.fan_out) == 16]
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


@dataclass(frozen=True)
class RandomGroup:
    """mm problems of one compile class: N and K random of alignment `n_align` and `k_align` (K
    `residue` mod 256 where 16-aligned), each either large (257 to SIZE_MAX) or in one small
    power-of-two bucket (`n_bucket`, `k_bucket`: (b/2, b]; 0 for large), M random in each bucket
    (of alignment `m_align` in "tn", where it is compiled in)."""

    dtype: str
    layout: str
    n_align: int
    k_align: int
    quotas: Quotas
    residue: int = 0
    m_align: int = 1
    n_bucket: int = 0
    k_bucket: int = 0
    octave: int = 256

    @property
    def name(self) -> str:
        residue = f"r{self.residue}" if self.k_align == 16 else ""
        m = f"/m{self.m_align}" if a_transposed(self.layout) else ""
        small = "".join(f"/{x}<={b}" for x, b in (("N", self.n_bucket), ("K", self.k_bucket)) if b)
        return f"random/{self.dtype}/{self.layout}/n{self.n_align}/k{self.k_align}{residue}{m}{small}"

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


@dataclass(frozen=True)
class LayerGroup:
    """GEMMs `gemm` ("fwd", "dX" or "dW") of the table's layers whose class is the group's: N of
    `n_align`, K of `k_align` and `residue`, in the layout the layer's weight storage gives (M of
    `m_align` in "tn"). The tokens are M ("fwd", "dX") or K ("dW", of the group's class)."""

    dtype: str
    gemm: str
    n_align: int
    k_align: int
    quotas: Quotas
    residue: int = 0
    m_align: int = 16
    octave: int = 256

    @property
    def name(self) -> str:
        residue = f"r{self.residue}" if self.k_align == 16 else ""
        m = f"/m{self.m_align}" if self.gemm == "dW" else ""
        return f"layers/{self.dtype}/{self.gemm}/n{self.n_align}/k{self.k_align}{residue}{m}"

    def draw(self, rng: random.Random, bucket: int) -> Shape | None:
        low, high = BUCKET_RANGES[bucket]
        if self.gemm == "dW":  # the tokens are K, of the group's class; M is the weight's rows
            tokens = in_class(_log_uniform(rng, 17, 16384), self.k_align, self.residue)
        else:
            tokens = min(single_m(rng, bucket, self.octave), 32768)
        layout = GEMM_LAYOUTS[OUT_IN][self.gemm]  # nn.Linear's; GPT-2's Conv1D swaps fwd and dX
        candidates = [g for arch in _trainable_architectures()
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


def _trainable_architectures() -> list[Architecture]:
    return [a for a in ARCHITECTURES if a.name not in splits.HELD_OUT_FAMILIES]


Group = AttentionGroup | RandomGroup | LayerGroup


# -- the schedule ---------------------------------------------------------------------------------

def _attention(dtype: str, quotas: Quotas, rows: Iterable[tuple]) -> list[Group]:
    """Attention groups of `dtype` from rows ("nt", head dim, key alignment[, quotas]) and ("nn" or
    "tn", head dims' alignment, key alignment[, quotas[, residue, experts]]); "tn" groups draw no
    M <= 16 (no decode step runs a backward GEMM)."""
    out: list[Group] = []
    for layout, dim, align, *rest in rows:
        own = rest[0] if rest else quotas
        if layout == "tn":
            own = (0, *own[1:])
        if layout == "nt":
            out.append(AttentionGroup(dtype, layout, align, own, head_dim=dim))
        else:
            residue, experts = rest[1:3] if len(rest) > 1 else (0, False)
            out.append(AttentionGroup(dtype, layout, align, own, head_align=dim, residue=residue,
                                      experts=experts))
    return out


#: Random single GEMMs of bf16 and fp16: (layout, N alignment, K alignment, K residue, M alignment
#: in "tn", N bucket, K bucket), in the layouts no random problem was measured in first ("nt", "tn"),
#: each alignment class of N and of K in three groups, never odd N with odd K.
RANDOM_MM: tuple[tuple[str, int, int, int, int, int, int], ...] = (
    ("nt", 1, 2, 0, 1, 0, 0), ("tn", 2, 4, 0, 1, 0, 0), ("nt", 4, 8, 0, 1, 0, 0), ("tn", 8, 16, 64, 2, 0, 0),
    ("nt", 16, 1, 0, 1, 0, 0), ("tn", 1, 8, 0, 4, 0, 0), ("nt", 2, 16, 192, 1, 64, 0),
    ("tn", 4, 1, 0, 8, 0, 0), ("nt", 8, 2, 0, 1, 0, 256), ("tn", 16, 4, 0, 16, 128, 0),
    ("nn", 1, 16, 96, 1, 0, 0), ("nn", 2, 1, 0, 1, 0, 128), ("nn", 4, 2, 0, 1, 0, 0),
    ("nn", 8, 4, 0, 1, 32, 0), ("nn", 16, 8, 0, 1, 0, 0),
)
#: The octave of M in 17..256 each single-GEMM group draws from (`single_m`).
OCTAVES = (32, 64, 128, 256)


def schedule() -> list[Group]:
    """The groups of the plan, the strata below 100 training problems first, those that fill most
    strata for the least compile first among them (in `--order file` a bounded run reaches
    them first): batched fp16 (4 strata, kernels of 0.58 core-s), bf16 (3), float32 mm (2, at
    2 core-s a kernel), batched float32 (4, at 3.4); then random single GEMMs and layers at
    users' token counts."""
    groups: list[Group] = []
    groups += _attention("float16", (24, 20, 20, 20), [
        ("nt", 64, 1), ("nn", 16, 1), ("tn", 16, 1, (0, 24, 24, 24)), ("nt", 128, 4),
        ("nn", 16, 16, (24, 20, 20, 12), 0, True), ("nt", 40, 1, (0, 0, 24, 24)), ("nn", 16, 2),
        ("tn", 16, 2, (0, 24, 24, 24)),
    ])
    groups += _attention("bfloat16", (16, 20, 20, 20), [
        ("nt", 128, 1), ("nn", 16, 1), ("tn", 16, 1), ("nt", 64, 2),
        ("nn", 16, 16, (16, 20, 20, 10), 0, True), ("nt", 72, 1, (0, 24, 24, 0)),
        ("nn", 8, 1, (0, 20, 20, 20)), ("tn", 16, 2), ("nt", 256, 4), ("nn", 16, 4), ("nt", 32, 1),
        ("nn", 16, 16, (16, 20, 20, 10), 128, True), ("tn", 8, 1), ("nt", 80, 2, (16, 24, 24, 0)),
        ("nt", 128, 16), ("nn", 16, 8),
    ])
    groups += [RandomGroup("float32", "nn", 16, 16, (10, 30, 15, 40), octave=128),
               RandomGroup("float32", "nt", 2, 8, (0, 0, 20, 45)),
               RandomGroup("float32", "tn", 4, 1, (0, 0, 20, 45), m_align=16)]
    groups += _attention("float32", (34, 24, 24, 28), [
        ("nt", 64, 1), ("nn", 16, 1), ("tn", 16, 1, (0, 28, 28, 30)), ("nt", 128, 2),
        ("nn", 16, 16, (34, 24, 24, 12), 0, True), ("nn", 8, 4, (0, 24, 24, 28)),
    ])
    for i, (layout, n, k, residue, m_align, n_bucket, k_bucket) in enumerate(RANDOM_MM):
        dtype = ("bfloat16", "float16")[i // 2 % 2]  # RANDOM_MM alternates nt and tn: both get both
        groups.append(RandomGroup(dtype, layout, n, k, (24, 24, 28, 20),
                                  residue=residue, m_align=m_align, n_bucket=n_bucket, k_bucket=k_bucket,
                                  octave=OCTAVES[i % len(OCTAVES)]))
    for i, (dtype, gemm, n, k, residue) in enumerate((
            ("bfloat16", "fwd", 16, 16, 0), ("float16", "dX", 16, 16, 0), ("bfloat16", "dW", 16, 1, 0),
            ("float16", "fwd", 16, 16, 128), ("bfloat16", "dX", 16, 16, 0), ("float16", "dW", 16, 2, 0),
            ("bfloat16", "fwd", 16, 16, 64), ("float16", "fwd", 16, 16, 0))):
        quotas = (0, 0, 40, 40) if gemm == "dW" else (20, 24, 24, 16)
        groups.append(LayerGroup(dtype, gemm, n, k, quotas, residue=residue,
                                 octave=OCTAVES[i % len(OCTAVES)]))
    return groups


# -- drawing the plan -----------------------------------------------------------------------------

def excluded_ids(data_dir: Path = DATA_DIR) -> set[str]:
    """Problem ids the plan must not hold: every problem of MEASURED_FILES and of the unseen split."""
    import pandas as pd

    from kernel_select.offline.data.shapes import load

    ids: set[str] = set()
    for name in MEASURED_FILES:
        ids |= set(pd.read_parquet(data_dir / name, columns=["problem_id"])["problem_id"].astype(str))
    ids |= {id_of(s.problem()) for s in load(data_dir / UNSEEN_FILE)}
    return ids


def held_out(shape: Shape) -> bool:
    """Whether the problem is in the `family` split (a held-out family, or odd N with odd K)."""
    return splits.family_holdout({"family": shape.family, "n": shape.n, "k": shape.k})


def trainable(shape: Shape) -> bool:
    """Whether training would read the problem: hash split train or val, and not held out."""
    return split_of(id_of(shape.problem())) in ("train", "val") and not held_out(shape)


def fill(group: Group, excluded: set[str], seed: int = SEED) -> list[Shape]:
    """The group's problems: up to its quota per M bucket (taken in turn, so a prefix holds each
    bucket), none in `excluded` (which gains them) and none held out in the `family` split."""
    rng = random.Random(f"{seed}:{group.name}")
    wanted = list(group.quotas)
    tries = [DRAWS * q for q in wanted]
    out: list[Shape] = []
    while any(w > 0 and t > 0 for w, t in zip(wanted, tries)):
        for bucket in range(len(wanted)):
            while wanted[bucket] > 0 and tries[bucket] > 0:
                tries[bucket] -= 1
                shape = group.draw(rng, bucket)
                if shape is None:
                    continue
                pid = id_of(shape.problem())
                if pid in excluded or held_out(shape):
                    continue
                excluded.add(pid)
                out.append(shape)
                wanted[bucket] -= 1
                break
    return out


def round3_plan(data_dir: Path = DATA_DIR, seed: int = SEED) -> list[Shape]:
    """data/shapes_round3_h100.json: every group of `schedule()` filled, in schedule order."""
    excluded = excluded_ids(data_dir)
    return [shape for group in schedule() for shape in fill(group, excluded, seed)]


# -- what it brings -------------------------------------------------------------------------------

def measured_training_strata(data_dir: Path = DATA_DIR) -> Counter:
    """Training problems per card stratum in MEASURED_FILES (what a model trained on them counts)."""
    import pandas as pd

    frames = [pd.read_parquet(data_dir / name, columns=["problem_id", "m", "n", "k", "dtype", "op", "split",
                                                         "family"]).drop_duplicates("problem_id")
              for name in MEASURED_FILES]
    frame = pd.concat(frames).drop_duplicates("problem_id", keep="last").reset_index(drop=True)
    masks = splits.split_masks(frame)
    rows = frame[masks["train"] | masks["val"]]
    return Counter(stratum(op, str(dtype), int(m))
                   for op, dtype, m in zip(rows["op"], rows["dtype"], rows["m"]))


def strata_table(planned: Sequence[Shape], today: Counter) -> list[tuple[str, int, int, int, int]]:
    """(stratum, training problems today, this plan's training problems, own total, total as the card
    counts it: its dtype's or its twin's, `card.stratum_count`) for every op x dtype x M bucket."""
    added = Counter(stratum(s.op, s.dtype, s.m) for s in planned if trainable(s))
    keys = [f"{op}/{dtype}/{bucket}" for op in ("mm", "bmm") for dtype in DTYPES for bucket in BUCKET_NAMES]
    totals = {key: today[key] + added[key] for key in keys}
    return [(key, today[key], added[key], totals[key], stratum_count(key, totals)) for key in keys]


def composition(shapes: Sequence[Shape]) -> dict[str, Counter]:
    """Problems per kind of group, op, dtype, layout and M bucket."""
    return {"kind": Counter(s.group.split("/")[0] for s in shapes), "op": Counter(s.op for s in shapes),
            "dtype": Counter(s.dtype for s in shapes), "layout": Counter(s.layout for s in shapes),
            "M bucket": Counter(BUCKET_NAMES[_bucket_of(s.m)] for s in shapes)}


#: The hosts the cost is estimated for: (GPUs, compile workers): one H100 of a 16-core host, and the
#: four H100s of a 64-core host (collect.sh's default: a core per timing process).
HOSTS = ((1, 15), (4, 60))
#: collect.sh's MAX_SECONDS: a run fits one device call of 10 minutes with its start and summary.
RUN_SECONDS = 540.0


def cost_lines(shapes: Sequence[Shape], hosts: Iterable[tuple[int, int]] = HOSTS,
               run_seconds: float = RUN_SECONDS) -> list[str]:
    """What collecting the plan costs on each host (harness/cost.py): the whole plan in one run, and
    run by run of `run_seconds` in file order (`bench --order file`), from an empty Triton cache
    each (collect.sh's default) and with the cache kept between runs, with the strata still under
    STRATUM_TARGET after each run; and in the harness's default reuse order."""
    from kernel_select.device import get_device
    from kernel_select.offline.harness import cost
    from kernel_select.offline.harness.bench_plan import plan

    planned = plan([s.problem() for s in shapes], get_device("h100"), torch_version="2.11.0")
    today = measured_training_strata()
    out = []
    for gpus, workers in hosts:
        out.append(f"{gpus} H100(s), {workers} compile workers, the whole plan in one run:")
        out += ["  " + line for line in cost.estimate(planned, workers, gpus).lines()]
        for order, keep in (("file", False), ("file", True), ("reuse", False)):
            runs = cost.bounded_runs(planned, workers, gpus, run_seconds, keep_cache=keep, order=order)
            cache = "the Triton cache kept between runs" if keep else "each from an empty Triton cache"
            out.append(f"  in runs of {run_seconds:.0f} s, --order {order}, {cache}: {len(runs)} runs, "
                       f"{sum(r.wall_s for r in runs) / 60:.1f} min")
            if order != "file":
                continue
            done = 0
            for i, r in enumerate(runs, 1):
                done += r.problems
                short = sum(own < STRATUM_TARGET for _, _, _, own, _ in strata_table(shapes[:done], today))
                out.append(f"    run {i}: {r.problems} problems, {r.rows} rows, {r.keys} kernels compiled "
                           f"for them, {r.wall_s:.0f} s, {r.rows_per_gpu_minute():.0f} rows per GPU-minute; "
                           f"strata under {STRATUM_TARGET} after it: {short}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="shapes file to write")
    parser.add_argument("--no-cost", action="store_true",
                        help="skip the cost estimate (planning every config of the plan takes minutes)")
    args = parser.parse_args(argv)
    planned = round3_plan()
    save(planned, args.out)
    print(f"{args.out}: {len(planned)} problems in {len({s.group for s in planned})} groups")
    for name, counts in composition(planned).items():
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print("training problems per stratum: today + this plan = total; as the card counts (dtype twin's too)")
    for key, today, added, total, counted in strata_table(planned, measured_training_strata()):
        flag = "" if counted >= STRATUM_TARGET else f"  < {STRATUM_TARGET}"
        print(f"  {key:22s} {today:5d} + {added:4d} = {total:5d}   card {counted:5d}{flag}")
    if not args.no_cost:
        print("\n".join(cost_lines(planned)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
