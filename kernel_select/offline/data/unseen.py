"""The `unseen` evaluation split: GEMMs drawn the way no training problem is, frozen before it is measured.

The `test` split holds new sizes near trained shapes and `family` whole architectures held out of the
same generators, so both ask the model about what its training data looks like. Users bring shapes
no generator of ours proposed, and the two splits stopped predicting how the model does on them. This
split is drawn by a generator of its own, with a seed no other plan uses, and is never trained on:

  single GEMMs   (70%) M, N and K log-uniform over 1..65,536, each of N and K first given an
                 alignment class (odd, 2, 4 or 8 mod 16, or 16-aligned) with equal odds; dtype and
                 operand layout uniform over bf16/fp16/fp32 and nn/nt/tn/tt
  batched GEMMs  (30%) from architectures outside the architecture table: attention of window,
                 vision and speech encoders and of decoders whose head dims the table lacks (token
                 counts that are not multiples of 8, batch x heads up to 8,192, scores, values and
                 their backward layouts), and MoE experts with few tokens each

Every problem is capped at MAX_MACS multiply-adds and MAX_OPERAND elements per operand (a draw
over either is drawn again), so that every config of the space can be timed on it.

`shapes()` is deterministic: data/shapes_unseen.json is its output, and a test checks they agree
and that none of its problems appears in any other shapes file. Its entries' family starts with
`unseen`, which `splits.split_masks` keeps out of training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The generator's own seed ("unseen" in ASCII): no training plan draws from it.
SEED = 0x756E7365656E
FAMILY_PREFIX = "unseen"
PROBLEMS = 320
BATCHED_SHARE = 0.30
MAX_SIZE = 65_536
MAX_MACS = 2**36  # ~0.14 TFLOP: about 2 ms in fp32 on CUDA cores for the fastest config
MAX_OPERAND = 2**30  # elements in A, B or C (the experts' weights are the largest: 2 GB in bf16)
TRIES = 10_000  # draws for one problem before the generator gives up (a block that can never fit)
DTYPES = ("bfloat16", "float16", "float32")
LAYOUTS = ("nn", "nt", "tn", "tt")
#: N and K alignment classes: the residue mod 16 a size is moved to (None: 16-aligned).
ALIGNMENTS = ("odd", 2, 4, 8, 16)


@dataclass(frozen=True)
class Attention:
    """An attention block outside the architecture table: heads x head_dim, the token counts it
    runs at (per window or sequence), and how many sequences or windows a batch holds."""

    name: str
    heads: int
    head_dim: int
    tokens: tuple[int, int]  # low, high (drawn log-uniform, then moved off multiples of 8)
    sequences: tuple[int, int]  # low, high sequences or windows per call


@dataclass(frozen=True)
class Experts:
    """An MoE layer outside the table: experts, model width, expert FFN width, tokens per expert."""

    name: str
    experts: int
    hidden: int
    ffn: int
    tokens: tuple[int, int]


# Published configs (each model card's config.json). None of these names is in
# offline/data/architectures.py or a data/shapes_*.json file.
ATTENTION: tuple[Attention, ...] = (
    Attention("swin-t", 3, 32, (49, 49), (64, 2048)),  # 7x7 windows, stage 1
    Attention("swin-b", 32, 32, (49, 49), (16, 512)),  # stage 4 heads
    Attention("sam-vit-b", 12, 64, (196, 196), (4, 64)),  # 14x14 windowed attention
    Attention("clip-vit-b32", 12, 64, (50, 50), (8, 512)),  # 7x7 patches + class token
    Attention("whisper-medium", 16, 64, (300, 1500), (1, 16)),  # encoder, up to 30 s of audio
    Attention("phi-2", 32, 80, (17, 2047), (1, 8)),  # head dim 80
    Attention("gemma-7b", 16, 256, (17, 4095), (1, 4)),  # head dim 256
    Attention("stablelm-2-1.6b", 32, 64, (17, 4095), (1, 8)),
    Attention("pixtral-vision", 16, 64, (257, 4095), (1, 4)),
)
EXPERTS: tuple[Experts, ...] = (
    Experts("dbrx-experts", 16, 6144, 10752, (1, 96)),
    Experts("qwen2-moe-57b-experts", 64, 3584, 2560, (1, 48)),
    Experts("jamba-experts", 16, 4096, 14336, (1, 128)),
    Experts("granite-moe-experts", 40, 1536, 512, (1, 200)),
)


def shapes(seed: int = SEED, count: int = PROBLEMS) -> list[dict[str, Any]]:
    """The split's problems as `kernel-select bench` shapes entries, each distinct, in draw order."""
    rng = np.random.default_rng(seed)
    batched = round(count * BATCHED_SHARE)
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    draws = [_single] * (count - batched) + [_batched] * batched
    for draw in draws:
        for _ in _tries():
            entry = draw(rng)
            key = (entry["op"], entry["batch"], entry["m"], entry["n"], entry["k"], entry["dtype"],
                   entry["layout"])
            if key not in seen:
                seen.add(key)
                out.append(entry)
                break
        else:
            raise _gave_up("a problem not drawn before")
    return out


def _log_uniform(rng: np.random.Generator, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _aligned(size: int, alignment: Any) -> int:
    """`size` moved to the alignment class: odd, residue 2/4/8 mod 16, or a multiple of 16."""
    if alignment == "odd":
        return size if size % 2 else size + 1
    residue = alignment % 16
    return max(16, size - size % 16) if residue == 0 else size - size % 16 + residue


def _fits(batch: int, m: int, n: int, k: int) -> bool:
    return (batch * m * n * k <= MAX_MACS
            and max(batch * m * k, batch * k * n, batch * m * n) <= MAX_OPERAND
            and max(m, n, k) <= MAX_SIZE)


def _tries() -> range:
    return range(TRIES)


def _gave_up(what: str) -> RuntimeError:
    return RuntimeError(f"unseen: no draw of {what} fits MAX_MACS and MAX_OPERAND in {TRIES} tries")


def _single(rng: np.random.Generator) -> dict[str, Any]:
    for _ in _tries():
        m = _log_uniform(rng, 1, MAX_SIZE)
        n = _aligned(_log_uniform(rng, 1, MAX_SIZE), ALIGNMENTS[rng.integers(len(ALIGNMENTS))])
        k = _aligned(_log_uniform(rng, 1, MAX_SIZE), ALIGNMENTS[rng.integers(len(ALIGNMENTS))])
        if _fits(1, m, n, k):
            break
    else:
        raise _gave_up("a single GEMM")
    return _entry("mm", 1, m, n, k, DTYPES[rng.integers(len(DTYPES))], LAYOUTS[rng.integers(len(LAYOUTS))],
                  f"{FAMILY_PREFIX}-random", "log-uniform")


def _off_eight(tokens: int) -> int:
    """Token counts users meet: a multiple of 8 is moved to the next odd count."""
    return tokens + 1 if tokens % 8 == 0 else tokens


def _batched(rng: np.random.Generator) -> dict[str, Any]:
    dtype = DTYPES[rng.integers(len(DTYPES))]
    if rng.uniform() < 0.25:
        return _experts(rng, EXPERTS[rng.integers(len(EXPERTS))], dtype)
    block = ATTENTION[rng.integers(len(ATTENTION))]
    for _ in _tries():
        tokens = _off_eight(_log_uniform(rng, *block.tokens))
        batch = min(8192, block.heads * _log_uniform(rng, *block.sequences))
        d = block.head_dim
        # (layer, layout, m, n, k): forward scores and values, then the four backward GEMMs.
        role = [("q@k^T", "nt", tokens, tokens, d), ("p@v", "nn", tokens, d, tokens),
                ("dS@k", "nn", tokens, d, tokens), ("dS^T@q", "tn", tokens, d, tokens),
                ("p^T@dO", "tn", tokens, d, tokens), ("dO@v^T", "nt", tokens, tokens, d)
                ][rng.integers(6)]
        layer, layout, m, n, k = role
        if _fits(batch, m, n, k):
            return _entry("bmm", batch, m, n, k, dtype, layout, f"{FAMILY_PREFIX}-{block.name}",
                          f"{layer} T={tokens} d={d}")
    raise _gave_up(block.name)


def _experts(rng: np.random.Generator, moe: Experts, dtype: str) -> dict[str, Any]:
    for _ in _tries():
        tokens = _log_uniform(rng, *moe.tokens)
        up = rng.uniform() < 0.5
        n, k = (moe.ffn, moe.hidden) if up else (moe.hidden, moe.ffn)
        if _fits(moe.experts, tokens, n, k):
            return _entry("bmm", moe.experts, tokens, n, k, dtype, "nn", f"{FAMILY_PREFIX}-{moe.name}",
                          f"{'up' if up else 'down'} tokens/expert={tokens}")
    raise _gave_up(moe.name)


def _entry(op: str, batch: int, m: int, n: int, k: int, dtype: str, layout: str, family: str,
           layer: str) -> dict[str, Any]:
    return {"m": m, "n": n, "k": k, "dtype": dtype, "layout": layout, "op": op, "batch": batch,
            "source": f"{family} {layer}", "family": family, "layer": layer, "pass": "unseen"}


def is_unseen_family(family: str) -> bool:
    """Whether a problem's family puts it in the `unseen` split."""
    return str(family).startswith(FAMILY_PREFIX + "-")
