"""The TF32 plan (data/shapes_tf32_h100.json): float32 GEMMs that run with TF32, sized for one H100.

Every float32 row the project has measured ran on CUDA cores (`allow_tf32` false), while a float32
program compiled after `torch.set_float32_matmul_precision("high")`, what torch's own warning
recommends on every float32 compile, runs its GEMMs with TF32 on tensor cores (kernel_select.tf32):
another problem, that no model has data for (`Problem.tf32`). This plan is the first data for it,
every entry `"tf32": true`. Its groups, in the order the plan takes them:

  layers-fwd      the forward GEMM of float32 models' nn.Linear layers ("nt": x @ W.t()), encoders,
                  speech and small decoders of the architecture table, N and K multiples of 256, at
                  token counts in every M bucket from 16 (powers of two up to 256, so that every
                  problem of a layout needs the same binaries)
  attn-decode     eager attention at decode, batched: scores q @ k^T ("nt", M = queries 1..16, N =
                  keys, K = head dim 64) and values p @ v ("nn", N = 64, K = keys)
  moe-experts     batched expert GEMMs with few tokens per expert ("nn", batch = experts, M = 1..16)
  layers-dW       the weight gradient ("tn": M = out, N = in, K = tokens)
  layers-dX       the input gradient ("nn": M = tokens, N = in, K = out)
  attn-prefill    scores ("nt", M = N = sequence, K = 64) and values ("nn") at prefill lengths
  random          single GEMMs of random sizes (M log-uniform over 1..16384), one N and K
                  alignment class each (odd, 2, 4, 8 mod 16)
  layers-decode   the forward GEMM at M = 1..8

Every problem is tagged with its group's family (the architecture's name for the layers): a layer of
a held-out architecture is not taken, and the experts are `moe-experts`, held out whole as their
bfloat16 kin are (offline/data/splits.py). Work is capped at MAX_FLOP per problem.

Size. The plan takes the candidates in that order while cost.py's simulation of one GPU with 15
compile workers ends within BUDGET_S (a candidate that would pass it is left out, and later, cheaper
ones may still come), then orders them for compile reuse (`bench_plan.reuse_order`). A TF32 key is
a float32 key of the same kernel with the ALLOW_TF32 constexpr on, costed at float32's compile
factors (no measurement says otherwise yet: results/tf32_cost_h100.py measures it on a GPU). Its
timing is costed at float32's CUDA-core constants too, which overstate a TF32 kernel's time (the
H100 datasheet's TF32 rate is 7.4x its FP32 rate): the estimate is an upper bound, and a run bounded
at the budget reaches the whole plan.

Torch. The plan is for torch 2.11 (the data engine's), whose Inductor runs every float32 GEMM with
TF32 when fp32_precision is "tf32". Torch 2.13's runs only M >= 16 with min(N, K) >= 512 so, so
`bench` on 2.13 refuses the other problems (attention's head dim 64 is always under 512); `main`
prints how many of the plan's problems are TF32 on both.

    python -m kernel_select.offline.data.plans.tf32_plan --out data/shapes_tf32_h100.json
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter
from collections.abc import Iterable

from kernel_select.offline.data.architectures import ARCHITECTURES, Architecture
from kernel_select.offline.data.plans.gap_plan import MOE
from kernel_select.offline.data.plans.sampler import compile_class
from kernel_select.offline.data.shapes import Shape
from kernel_select.offline.data.splits import HELD_OUT_FAMILIES
from kernel_select.offline.harness.bench_plan import (MAX_GRID_Y, MAX_INT32, PlannedRun, largest_operand,
                                                     plan, reuse_order)
from kernel_select.problem import gemm_flops
from kernel_select.tf32 import MIN_M, MIN_NK, inductor_allow_tf32

#: What the plan is sized for: one H100, 15 compile workers (a 16-core host), about 8 minutes.
BUDGET_S = 480.0
WORKERS = 15
TORCH_VERSION = "2.11.0"
#: Work per problem: timing is costed at the float32 CUDA-core rate (32 TFLOP/s), where 2e10 FLOP
#: takes 0.6 ms for the fastest config and about 1,000 configs take 3 s.
MAX_FLOP = 6e10
#: The float32 models' layers: encoders, speech, small decoders and a recommendation tower.
LAYER_MODELS = ("bert-base", "bert-large", "t5-base", "whisper-base", "wav2vec2-base", "hubert-large",
                "deit-s16", "vit-h14", "dit-xl2", "llama3.2-1b", "llama3.2-3b", "tinyllama-1.1b",
                "smollm-135m", "dlrm-criteo")
#: Token counts per M bucket: powers of two up to 256 (every block_m divides them, so they need the
#: binaries of M >= 256), then any.
TOKENS = {"m<=16": (16,), "m<=256": (32, 64, 128, 256), "m<=4096": (512, 1024, 1576, 2048, 4096),
          "m>4096": (6304, 8192, 16384)}
TRAINING_TOKENS = (512, 1024, 2048, 4096, 8192)
#: Problems of the forward GEMM per M bucket, and of each backward GEMM: enough for a model's card to
#: claim the stratum (MIN_STRATUM_PROBLEMS training problems, about 85% of the problems).
PER_BUCKET = 48
DECODE_M = (1, 2, 4, 8)
HEAD_DIM = 64
DECODE_QUERIES = (1, 2, 4, 8, 16)
DECODE_KEYS = (512, 1024, 2048, 4096)
PREFILL = (256, 512, 1024, 2048, 4096)
BATCH_HEADS = (256, 64, 16, 4)
EXPERT_TOKENS = (1, 2, 4, 8, 16)
#: N and K residues mod 16 of the random group's classes (16: aligned), one class each; odd N with
#: odd K is the `family` split's held-out class and is left out.
RANDOM_CLASSES = ((8, 1), (2, 4), (1, 8), (4, 2), (16, 1), (1, 16))
RANDOM_PER_CLASS = 12
SEED = 0x746633  # "tf3"


def _shape(family: str, layer: str, layout: str, m: int, n: int, k: int, op: str = "mm",
           batch: int = 1) -> Shape:
    group = ("bmm/" if op == "bmm" else "") + compile_class("float32", n, k, layout, m) + "/tf32"
    return Shape(m, n, k, "float32", f"{family} {layer}", family=family, layer=layer, group=group,
                 layout=layout, op=op, batch=batch, tf32=True)


def _fits(m: int, n: int, k: int, batch: int = 1) -> bool:
    return (gemm_flops(batch, m, n, k) <= MAX_FLOP and largest_operand(batch, m, n, k) <= MAX_INT32
            and batch <= MAX_GRID_Y)


def _layers(gemm: str = "fwd") -> list[tuple[Architecture, str, int, int]]:
    """(architecture, layer, in, out) of LAYER_MODELS whose `gemm` ("fwd", "dW" or "dX") keeps one
    compile class: K a multiple of 256 (EVEN_K for every BLOCK_K), N (and M, read transposed in "tn")
    multiples of 16."""
    chosen = [a for a in ARCHITECTURES if a.name in LAYER_MODELS and a.name not in HELD_OUT_FAMILIES]
    k_of = {"fwd": lambda fan_in, fan_out: fan_in, "dX": lambda fan_in, fan_out: fan_out,
            "dW": lambda fan_in, fan_out: 256}[gemm]
    return [(a, layer, fan_in, fan_out) for a in chosen for layer, fan_in, fan_out in a.layers
            if k_of(fan_in, fan_out) % 256 == 0 and fan_in % 16 == 0 and fan_out % 16 == 0]


def layers_forward(tokens: dict[str, tuple[int, ...]] = TOKENS, per_bucket: int = PER_BUCKET) -> list[Shape]:
    """The forward GEMM of the layers, `per_bucket` problems in each M bucket: the bucket's token
    counts in turn, each with the next layer, so that every bucket holds many layers and sizes."""
    layers = _layers()
    out = []
    for counts in tokens.values():
        taken, step = 0, 0
        while taken < per_bucket and step < per_bucket * len(layers):
            arch, layer, fan_in, fan_out = layers[step % len(layers)]
            t = counts[step % len(counts)]
            step += 1
            if _fits(t, fan_out, fan_in):
                out.append(_shape(arch.name, f"{layer} fwd", "nt", t, fan_out, fan_in))
                taken += 1
    return _dedupe(out)


def layers_backward(gemm: str, count: int = PER_BUCKET) -> list[Shape]:
    """`count` weight gradients ("dW", "tn") or input gradients ("dX", "nn") at training token
    counts, each layer with the next token count in turn."""
    layers = _layers(gemm)
    out = []
    for step in range(count * len(TRAINING_TOKENS)):
        arch, layer, fan_in, fan_out = layers[step % len(layers)]
        t = TRAINING_TOKENS[step % len(TRAINING_TOKENS)]
        m, n, k, layout = ((fan_out, fan_in, t, "tn") if gemm == "dW" else (t, fan_in, fan_out, "nn"))
        if _fits(m, n, k):
            out.append(_shape(arch.name, f"{layer} {gemm}", layout, m, n, k))
    return _dedupe(out)[:count]


def layers_decode() -> list[Shape]:
    return [_shape(arch.name, f"{layer} fwd", "nt", m, fan_out, fan_in)
            for m in DECODE_M for arch, layer, fan_in, fan_out in _layers()]


def _batches(m: int, n: int, k: int) -> list[int]:
    return [b for b in BATCH_HEADS if _fits(m, n, k, b)][:1]


def attention(queries: Iterable[int], keys: Iterable[int], family: str, decode: bool) -> list[Shape]:
    """Scores ("nt": queries x keys x head dim) and values ("nn": queries x head dim x keys)."""
    out = []
    for s in keys:
        for q in (queries if decode else (s,)):
            for b in _batches(q, s, HEAD_DIM):
                out.append(_shape(family, f"q@k^T d{HEAD_DIM}", "nt", q, s, HEAD_DIM, "bmm", b))
                out.append(_shape(family, f"p@v d{HEAD_DIM}", "nn", q, HEAD_DIM, s, "bmm", b))
    return out


def experts() -> list[Shape]:
    """Up and down expert GEMMs of gap_plan's MoE models (widths multiples of 256) at few tokens."""
    out = []
    for t in EXPERT_TOKENS:
        for count, hidden, width in MOE:
            if hidden % 256 or width % 256:
                continue
            for layer, n, k in (("up", width, hidden), ("down", hidden, width)):
                if _fits(t, n, k, count):
                    out.append(_shape("moe-experts", f"experts {layer} h{hidden} w{width}", "nn", t, n, k,
                                      "bmm", count))
    return out


def random_shapes(seed: int = SEED) -> list[Shape]:
    """RANDOM_PER_CLASS problems of each RANDOM_CLASSES alignment class, "nn", sizes log-uniform."""
    rng = random.Random(seed)
    out = []
    for n_residue, k_residue in RANDOM_CLASSES:
        drawn = 0
        while drawn < RANDOM_PER_CLASS:
            m = int(round(math.exp(rng.uniform(0.0, math.log(16384)))))
            n, k = (_residue(int(round(math.exp(rng.uniform(math.log(64), math.log(8192))))), r)
                    for r in (n_residue, k_residue))
            if _fits(m, n, k):
                out.append(_shape("tf32-random", f"n{n_residue} k{k_residue}", "nn", m, n, k))
                drawn += 1
    return out


def _residue(size: int, residue: int) -> int:
    """`size` moved to its class: a multiple of 256 for 16 (every BLOCK_K divides it), else residue mod 16
    (1: odd)."""
    if residue == 16:
        return max(256, size // 256 * 256)
    return size // 16 * 16 + residue


def candidates() -> list[Shape]:
    """Every candidate, in the order the plan takes them (module docstring)."""
    return (layers_forward() + attention(DECODE_QUERIES, DECODE_KEYS, "attn-decode", decode=True)
            + experts() + layers_backward("dW") + layers_backward("dX")
            + attention((), PREFILL, "attn-prefill", decode=False) + random_shapes() + layers_decode())


def tf32_plan(budget_s: float = BUDGET_S, workers: int = WORKERS) -> list[Shape]:
    """data/shapes_tf32_h100.json: the candidates that fit `budget_s` (module docstring), in reuse order."""
    from kernel_select.device import get_device
    from kernel_select.offline.harness import cost

    device = get_device("h100")
    chosen = _dedupe(candidates())
    runs = dict(zip(chosen, plan([s.problem() for s in chosen], device, torch_version=TORCH_VERSION)))
    simulation = cost.Simulation(workers)
    kept: list[Shape] = []
    for shape in chosen:
        trial = simulation.copy()
        if trial.add(runs[shape]) <= budget_s:
            simulation = trial
            kept.append(shape)
    while True:  # reuse order reorders the classes, which moves the end a little
        ordered = reuse_order([runs[s] for s in kept])
        if cost.estimate(ordered, workers).wall_s <= budget_s:
            break
        kept.pop()
    by_runs = {id(runs[s]): s for s in kept}
    return [by_runs[id(r)] for r in ordered]


def _dedupe(shapes: list[Shape]) -> list[Shape]:
    return list({s.problem(): s for s in reversed(shapes)}.values())[::-1]


def runs_tf32_on_2_13(shape: Shape) -> bool:
    """Whether torch 2.13's Inductor runs this GEMM with TF32 too (kernel_select.tf32)."""
    return inductor_allow_tf32(shape.m, shape.n, shape.k, fp32_precision="tf32", torch_version="2.13.0")


def composition(shapes: list[Shape]) -> dict[str, Counter]:
    """Problems per family, layout, op and (op, M bucket) stratum."""
    from kernel_select.model.card import stratum

    return {"family": Counter(s.family for s in shapes), "layout": Counter(s.layout for s in shapes),
            "op": Counter(s.op for s in shapes),
            "stratum": Counter(stratum(s.op, s.problem().precision, s.m) for s in shapes)}


def estimate_lines(shapes: list[Shape], workers: int = WORKERS) -> list[str]:
    """What collecting `shapes` in file order costs on one GPU (cost.py)."""
    from kernel_select.device import get_device
    from kernel_select.offline.harness import cost

    planned: list[list[PlannedRun]] = plan([s.problem() for s in shapes], get_device("h100"),
                                           torch_version=TORCH_VERSION)
    return cost.estimate(planned, workers).lines()


def main(argv: list[str] | None = None) -> int:
    from kernel_select.offline.data.shapes import save

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="shapes file to write")
    args = parser.parse_args(argv)
    shapes = tf32_plan()
    save(shapes, args.out)
    both = sum(runs_tf32_on_2_13(s) for s in shapes)
    print(f"{args.out}: {len(shapes)} float32 problems with TF32 of {len(_dedupe(candidates()))} candidates, "
          f"in {len({s.group for s in shapes})} compile classes; {both} of them run with TF32 on torch 2.13 "
          f"too (M >= {MIN_M}, min(N, K) >= {MIN_NK})")
    for name, counts in composition(shapes).items():
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    print(f"estimate (cost.py, float32 compile factors and CUDA-core timing), 1 GPU, {WORKERS} compile "
          "workers:")
    print("\n".join("  " + line for line in estimate_lines(shapes)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
