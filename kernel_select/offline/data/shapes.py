"""Training problems: layer shapes of widely used open models plus log-uniform random problems.

A problem is (m, n, k, dtype) with m = tokens (rows of the activation), k = input features and
n = output features of a linear layer: y[m, n] = x[m, k] @ W[k, n]. The forward GEMM of every
projection is listed; the seed layer also gets its two backward GEMMs.

Each problem's work is capped (MAX_FLOP) so that slow configs on huge problems cannot eat the GPU
budget. Shapes files (JSON) are what `kernel-select bench` and `compare` read; an entry may name
the operands' memory layout (`"layout"`, kernel_select.layouts; default "nn", A and B row-major)
and a batched op (`"op": "bmm"` with `"batch"`: C[batch, m, n] = A[batch, m, k] @ B[batch, k, n];
default "mm", batch 1), and a float32 GEMM timed with TF32 (`"tf32": true`: Problem.tf32; bench
sets ALLOW_TF32 and times cuBLAS with TF32, and refuses a GEMM Inductor of its torch would not run
so). Every field is read strictly (shape_fields.py): sizes are integers from 1 to 2^31 - 1, tf32 a
JSON boolean, and an unknown key (a misspelled "layuot") is refused, not ignored.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from kernel_select.atomic_write import write_atomic
from kernel_select.errors import first_line, ProblemError
from kernel_select.layouts import DEFAULT_LAYOUT, check_layout
from kernel_select.offline.data import shape_fields
from kernel_select.problem import Problem

MAX_FLOP = 1e12  # ~1.3 ms at the H100's achievable bf16 rate; the slowest configs take ~50x that
SMALLEST_FLOP = 2.0 * 1 * 16 * 16
#: What a shapes-file entry may hold (`Shape.to_json`); any other key is refused, not ignored.
SHAPE_KEYS = ("m", "n", "k", "dtype", "source", "family", "layer", "pass", "group", "layout", "op", "batch",
              "tf32")
REJECTION_TRIES = 1000

# (model, layer, k = in_features, n = out_features). Sources: each model's published config.json
# (hidden_size, intermediate_size, num_key_value_heads x head_dim) on its model card.
MODEL_LAYERS: tuple[tuple[str, str, int, int], ...] = (
    # Llama-3-8B: hidden 4096, 8 KV heads x 128, intermediate 14336
    ("llama3-8b", "q_proj/o_proj", 4096, 4096), ("llama3-8b", "k_proj/v_proj", 4096, 1024),
    ("llama3-8b", "qkv_proj", 4096, 6144), ("llama3-8b", "gate_up_proj", 4096, 28672),
    ("llama3-8b", "up_proj", 4096, 14336), ("llama3-8b", "down_proj", 14336, 4096),
    # Llama-3-70B: hidden 8192, 8 KV heads x 128, intermediate 28672
    ("llama3-70b", "q_proj", 8192, 8192), ("llama3-70b", "k_proj", 8192, 1024),
    ("llama3-70b", "up_proj", 8192, 28672), ("llama3-70b", "down_proj", 28672, 8192),
    # Llama-2-7B: hidden 4096, intermediate 11008
    ("llama2-7b", "up_proj", 4096, 11008), ("llama2-7b", "down_proj", 11008, 4096),
    # Qwen2.5-7B: hidden 3584, 4 KV heads x 128, intermediate 18944
    ("qwen2.5-7b", "q_proj", 3584, 3584), ("qwen2.5-7b", "k_proj", 3584, 512),
    ("qwen2.5-7b", "up_proj", 3584, 18944), ("qwen2.5-7b", "down_proj", 18944, 3584),
    # Phi-3-mini: hidden 3072, fused qkv 9216, fused gate_up 16384, intermediate 8192
    ("phi3-mini", "qkv_proj", 3072, 9216), ("phi3-mini", "gate_up_proj", 3072, 16384),
    ("phi3-mini", "down_proj", 8192, 3072),
    # GPT-2 small: hidden 768, fused qkv 2304, MLP 3072
    ("gpt2", "c_attn", 768, 2304), ("gpt2", "c_fc", 768, 3072), ("gpt2", "c_proj_mlp", 3072, 768),
    # ViT-B/16 and ViT-L/14: hidden 768/1024, MLP 3072/4096
    ("vit-b16", "qkv", 768, 2304), ("vit-b16", "fc1", 768, 3072), ("vit-b16", "fc2", 3072, 768),
    ("vit-l14", "qkv", 1024, 3072), ("vit-l14", "fc1", 1024, 4096), ("vit-l14", "fc2", 4096, 1024),
)
# Token counts: LLM decode batches and prefill lengths; ViT: tokens per image (197 for ViT-B/16 at
# 224 px, 257 for ViT-L/14) times a batch.
LLM_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
VIT_TOKENS = {"vit-b16": (197, 197 * 8, 197 * 32), "vit-l14": (257, 257 * 8, 257 * 32)}

# The seed program: nn.Linear(3420 -> 1280) at sequence lengths 560, 1024, 2048.
SEED_M = (560, 1024, 2048)
SEED_IN, SEED_OUT = 3420, 1280


@dataclass(frozen=True)
class Shape:
    """One planned problem and where it came from (the dataset's provenance columns).

    `family` is the architecture ("llama3-8b"), "random", or "sampler:<stratum>"; `layer` the
    layer and GEMM ("q_proj fwd"); `pass_` the collection pass ("coverage" or "active", JSON key
    "pass"); `group` the compile class the sampler grouped it in (problems of one group share
    compiled binaries); `layout` the operands' memory layout (kernel_select.layouts); `tf32` that
    the float32 GEMM runs with TF32.
    """

    m: int
    n: int
    k: int
    dtype: str
    source: str = ""
    family: str = ""
    layer: str = ""
    pass_: str = "coverage"
    group: str = ""
    layout: str = DEFAULT_LAYOUT
    op: str = "mm"
    batch: int = 1
    tf32: bool = False

    def problem(self) -> Problem:
        return Problem(self.m, self.n, self.k, self.dtype, batch=self.batch, op=self.op, layout=self.layout,
                       tf32=self.tf32)

    def provenance(self) -> dict[str, str]:
        """The dataset columns family / layer / pass; older files derive them from `source`."""
        family, _, layer = self.source.partition(" ")
        return {"family": self.family or family or "unknown", "layer": self.layer or layer,
                "pass": self.pass_}

    def to_json(self) -> dict:
        out = {"m": self.m, "n": self.n, "k": self.k, "dtype": self.dtype, "source": self.source}
        if self.family:
            out.update(family=self.family, layer=self.layer, group=self.group)
        out["pass"] = self.pass_
        if self.layout != DEFAULT_LAYOUT:  # files of "nn" shapes stay as they were
            out["layout"] = self.layout
        if self.op != "mm":  # and files of mm shapes too
            out.update(op=self.op, batch=self.batch)
        if self.tf32:  # and files without TF32
            out["tf32"] = True
        return out


def seed_shapes(dtype: str = "bfloat16") -> list[Shape]:
    """The seed layer's forward GEMM and its two backward GEMMs at each sequence length."""
    out = []
    for m in SEED_M:
        out.append(Shape(m, SEED_OUT, SEED_IN, dtype, f"seed fwd, seq {m}"))
        out.append(Shape(m, SEED_IN, SEED_OUT, dtype, f"seed dX, seq {m}"))  # dY[m,1280] @ W[1280,3420]
        out.append(Shape(SEED_OUT, SEED_IN, m, dtype, f"seed dW, seq {m}"))  # dY^T[1280,m] @ X[m,3420]
    return out


def model_shapes(dtype: str = "bfloat16", max_flop: float = MAX_FLOP) -> list[Shape]:
    """Forward GEMMs of MODEL_LAYERS at realistic token counts, capped at `max_flop`."""
    out = []
    for model, layer, k, n in MODEL_LAYERS:
        for m in VIT_TOKENS.get(model, LLM_TOKENS):
            if 2.0 * m * n * k <= max_flop:
                out.append(Shape(m, n, k, dtype, f"{model} {layer}"))
    return out


def check_max_flop(max_flop: float) -> None:
    """The smallest problem the generators make is 1 x 16 x 16; a cap below it cannot be met."""
    if not max_flop >= SMALLEST_FLOP:  # also rejects NaN
        raise ProblemError(f"max_flop: {max_flop:g} is below the smallest problem's work "
                           f"({SMALLEST_FLOP:g} FLOP, 1 x 16 x 16); pass a larger cap, e.g. 1e11")


def _shrink_to_cap(m: int, n: int, k: int, max_flop: float) -> tuple[int, int, int]:
    """Halve the largest size that can still shrink (m to 1, n and k to 16) until the cap holds;
    check_max_flop guarantees that 1 x 16 x 16 does."""
    while 2.0 * m * n * k > max_flop:
        sizes = {"m": (m, 1), "n": (n, 16), "k": (k, 16)}
        name = max((x for x, (v, low) in sizes.items() if v > low), key=lambda x: sizes[x][0])
        if name == "m":
            m //= 2
        elif name == "n":
            n = max(16, n // 2)
        else:
            k = max(16, k // 2)
    return m, n, k


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))


def _snap(rng: random.Random, value: int) -> int:
    """Snap a drawn size to the alignments that matter, keeping the number of distinct kernels
    the benchmark must compile bounded.

    Below 256, sizes become powers of two (as decode batches and small layers are). Above, 70%
    become multiples of 64 (as real layers are) and 30% land on 4 mod 8, the "unaligned" class of
    the seed's K = 3420: masked K loop, 8-byte instead of 16-byte vector loads.
    """
    if value < 256:
        return 1 << round(math.log2(max(value, 1)))
    if rng.random() < 0.7:
        return max(64, round(value / 64) * 64)
    return (value // 8) * 8 + 4


def random_shapes(count: int, dtype: str = "bfloat16", seed: int = 0,
                  max_flop: float = MAX_FLOP) -> list[Shape]:
    """Log-uniform problems: m in [1, 16384], n and k in [16, 32768], work capped at `max_flop`."""
    check_max_flop(max_flop)
    if count < 0:
        raise ProblemError(f"count: expected a number of problems >= 0, got {count}")
    rng = random.Random(seed)
    out: list[Shape] = []
    while len(out) < count:
        for _ in range(REJECTION_TRIES):
            m = _snap(rng, _log_uniform(rng, 1, 16384))
            n = max(16, _snap(rng, _log_uniform(rng, 16, 32768)))
            k = max(16, _snap(rng, _log_uniform(rng, 16, 32768)))
            if 2.0 * m * n * k <= max_flop:
                break
        else:  # a tiny cap: rejection alone would (almost) never end, so halve the largest size
            m, n, k = _shrink_to_cap(m, n, k, max_flop)
        out.append(Shape(m, n, k, dtype, f"random seed={seed}", family="random", layer=""))
    return out


def model_subset(dtype: str, tokens: tuple[int, ...], max_flop: float) -> list[Shape]:
    """MODEL_LAYERS at a few token counts, for the smaller fp16 / fp32 parts of the dataset."""
    return [Shape(m, n, k, dtype, f"{model} {layer}")
            for model, layer, k, n in MODEL_LAYERS for m in tokens if 2.0 * m * n * k <= max_flop]


def dedupe(shapes: list[Shape]) -> list[Shape]:
    """First occurrence of each problem (sizes, dtype, layout, op, batch and TF32) wins (keeps the most
    descriptive source)."""
    seen: dict[tuple, Shape] = {}
    for shape in shapes:
        seen.setdefault((shape.m, shape.n, shape.k, shape.dtype, shape.layout, shape.op, shape.batch,
                         shape.tf32), shape)
    return list(seen.values())


def save(shapes: list[Shape], path: str | Path) -> None:
    """Replace `path` with a shapes file, atomically (a kill or a full disk leaves the old file);
    a read-only or hard-linked target is refused, as every writer of the package refuses it.

    Raises:
        ProblemError: one line naming the file and why it cannot be written.
    """
    path = Path(path)
    if path.is_dir():
        raise ProblemError(f"{path}: is a directory; pass a file name such as {path / 'shapes.json'}")
    try:
        write_atomic(path, json.dumps([s.to_json() for s in shapes], indent=1) + "\n")
    except OSError as exc:
        raise ProblemError(f"{path}: cannot write shapes file ({exc.strerror})") from None


def load(path: str | Path) -> list[Shape]:
    """Read a shapes file: a JSON list of {m, n, k, dtype[, source][, layout][, op, batch][, tf32]}
    objects (and the provenance keys `Shape.to_json` writes), every field checked (shape_fields).

    Raises:
        ProblemError: one line naming the file, the entry and the field, for a bad size (not an
            integer from 1 to 2^31 - 1), dtype, layout, op, batch or tf32 (not a boolean, or with a
            dtype other than float32), or an unknown key.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM, as LUTs accept it
    except (OSError, ValueError, RecursionError) as exc:
        raise ProblemError(f"{path}: cannot read shapes file ({first_line(exc)})") from None
    if not isinstance(raw, list):
        raise ProblemError(f"{path}: expected a JSON list of {{m, n, k, dtype}} objects")
    shapes = []
    for i, item in enumerate(raw):
        try:
            item = shape_fields.entry(item, SHAPE_KEYS)
            problem = Problem(shape_fields.size(item, "m"), shape_fields.size(item, "n"),
                              shape_fields.size(item, "k"), shape_fields.text(item, "dtype", "bfloat16"),
                              batch=shape_fields.size(item, "batch", default=1),
                              op=shape_fields.text(item, "op", "mm"),
                              layout=check_layout(shape_fields.text(item, "layout", DEFAULT_LAYOUT)),
                              tf32=shape_fields.flag(item, "tf32"))
            shape = Shape(problem.m, problem.n, problem.k, problem.dtype,
                          *(shape_fields.text(item, key, "") for key in ("source", "family", "layer")),
                          shape_fields.text(item, "pass", "coverage"), shape_fields.text(item, "group", ""),
                          problem.layout, problem.op, problem.batch, problem.tf32)
        except (ValueError, ProblemError) as exc:
            raise ProblemError(f"{path}[{i}]: {exc}") from None
        shapes.append(shape)
    return shapes
