"""The plan for what the H100 data lacks: batched GEMMs, M > 4096, and float32.

Every committed H100 row is op = mm, the largest M is 16,384 with few above 4,096, and float32 is
13.6% of the problems. This plan (data/shapes_bmm_h100.json) adds, each problem tagged with the
`family` of its source so the `family` split can hold one out:

  attn-scores    q @ k^T of eager attention, bmm "nt" (k read transposed): M = queries, N = keys,
                 K = head dim; prefill (queries = keys) and decode (1-16 queries, long keys)
  attn-values    p @ v, bmm "nn": M = queries, N = head dim, K = keys
  attn-backward  dV = p^T @ dO, bmm "tn" (p read transposed): M = keys, N = head dim, K = queries
  moe-experts    batched expert GEMMs, bmm "nn", batch = experts: up (M = tokens per expert,
                 N = expert width, K = hidden) and down (K = expert width, N = hidden)
  large-m        mm with M from 8,192 to 65,536 in the layouts of a Linear's three GEMMs
  fp32-buckets   float32 mm across the M buckets (1 to 16,384), N and K multiples of 16
  fp32-odd-k     float32 mm with odd K (1337 and friends): a masked K loop and scalar loads

Batch x heads is 8 to 1,024 (the attention families' batch), sized so that every operand fits
32-bit offsets (the kernels' index type) and each problem's work stays under a cap, as the
coverage sampler caps it. Compile is the wall of a collection, so the problems of a family come
in few compile classes (dtype, layout, N and K alignment, K mod 256): the harness compiles a
class's kernels once and every problem of the class reuses them (`bench_plan.reuse_order`).
`python -m kernel_select.offline.data.plans.gap_plan --out FILE` writes the plan and prints what
collecting it costs (`harness.cost`).
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Iterable

from kernel_select.offline.data.plans.sampler import compile_class
from kernel_select.offline.data.shapes import Shape, save
from kernel_select.offline.harness.bench_plan import MAX_INT32, largest_operand
from kernel_select.problem import gemm_flops

#: Work per problem: half the coverage sampler's cap (timing a problem costs about its configs' mean
#: time, 3.9x the fastest's, times ~1,000 configs), float32 an eighth of that (no TF32: 1/16 the rate).
MAX_FLOP = {"bfloat16": 5e10, "float16": 5e10, "float32": 6.25e9}
BATCH_HEADS = (8, 32, 128, 512, 1024)
PREFILL = (128, 256, 512, 1024, 2048, 4096, 8192)
DECODE_QUERIES = (1, 2, 4, 8, 16)
DECODE_KEYS = (1024, 2048, 4096, 8192)
#: (experts, hidden, expert width): Mixtral-8x7B, Qwen2-57B-A14B, DeepSeek-V3, OLMoE-1B-7B,
#: Qwen1.5-MoE-A2.7B (each model's config.json: num_local_experts / n_routed_experts, hidden_size,
#: moe_intermediate_size or intermediate_size).
MOE = ((8, 4096, 14336), (64, 3584, 2560), (64, 7168, 2048), (64, 2048, 1024), (60, 2048, 1408))
MOE_TOKENS = (16, 64, 256, 1024, 4096)
LARGE_M = (8192, 16384, 32768, 65536)
LARGE_M_FLOP = 6e11  # 65,536 tokens through a 4096 x 1024 Linear; the slowest configs take ~50x 1 ms
#: (N, K) of Linear layers (out, in) whose three GEMMs the large-m family times: Llama-3-8B's
#: q_proj and down_proj, a 1024-wide ViT-L MLP.
LARGE_M_LAYERS = ((4096, 4096), (4096, 14336), (4096, 1024))
FP32_M = (1, 16, 64, 256, 1024, 4096, 16384, 65536)
#: float32 problems keep N at 64 (a recommendation tower's width): block_n then stays <= 64 and
#: the class compiles 755 kernels instead of 1,178 (float32 kernels compile 3.3x slower than bf16).
FP32_NK = ((64, 1024), (64, 512))
FP32_ODD_K = ((64, 1337), (64, 999))


def _fits(batch: int, m: int, n: int, k: int, dtype: str) -> bool:
    return largest_operand(batch, m, n, k) <= MAX_INT32 and gemm_flops(batch, m, n, k) <= MAX_FLOP[dtype]


def _bmm(family: str, layer: str, dtype: str, layout: str, batch: int, m: int, n: int, k: int) -> Shape:
    group = "bmm/" + compile_class(dtype, n, k, layout, m)
    return Shape(m, n, k, dtype, f"{family} {layer}", family=family, layer=layer, group=group,
                 layout=layout, op="bmm", batch=batch)


def _batches(m: int, n: int, k: int, dtype: str, count: int) -> list[int]:
    """The `count` largest batch x heads (of BATCH_HEADS) that fit, largest first."""
    return [b for b in sorted(BATCH_HEADS, reverse=True) if _fits(b, m, n, k, dtype)][:count]


def attention(dtype: str, head_dims: Iterable[int], *, prefill: Iterable[int] = PREFILL,
              decode_keys: Iterable[int] = DECODE_KEYS, decode_queries: Iterable[int] = DECODE_QUERIES,
              backward: Iterable[int] = (), batches: int = 1) -> list[Shape]:
    """Scores and values of eager attention at each head dim; decode against long keys; the
    backward dV GEMM at the `backward` lengths."""
    out = []
    for d in head_dims:
        for s in prefill:
            for b in _batches(s, s, d, dtype, batches):
                out.append(_bmm("attn-scores", f"q@k^T d{d} prefill", dtype, "nt", b, s, s, d))
                out.append(_bmm("attn-values", f"p@v d{d} prefill", dtype, "nn", b, s, d, s))
        for s in decode_keys:
            for q in decode_queries:
                for b in _batches(q, s, d, dtype, batches):
                    out.append(_bmm("attn-scores", f"q@k^T d{d} decode", dtype, "nt", b, q, s, d))
                    out.append(_bmm("attn-values", f"p@v d{d} decode", dtype, "nn", b, q, d, s))
        for s in backward:
            for b in _batches(s, d, s, dtype, batches):
                out.append(_bmm("attn-backward", f"p^T@dO d{d}", dtype, "tn", b, s, d, s))
    return out


def moe_experts(dtype: str, models=MOE, tokens: Iterable[int] = MOE_TOKENS) -> list[Shape]:
    """Up and down expert GEMMs of each MoE model, batch = experts, at each tokens-per-expert."""
    out = []
    for experts, hidden, width in models:
        for t in tokens:
            for layer, n, k in (("up", width, hidden), ("down", hidden, width)):
                if _fits(experts, t, n, k, dtype):
                    out.append(_bmm("moe-experts", f"experts {layer} h{hidden} w{width}", dtype, "nn",
                                    experts, t, n, k))
    return out


def _mm(family: str, layer: str, dtype: str, layout: str, m: int, n: int, k: int) -> Shape:
    return Shape(m, n, k, dtype, f"{family} {layer}", family=family, layer=layer,
                 group=compile_class(dtype, n, k, layout, m), layout=layout)


def large_m(dtype: str, layouts: Iterable[str], layers=LARGE_M_LAYERS,
            tokens: Iterable[int] = LARGE_M) -> list[Shape]:
    """A Linear (out, in)'s GEMMs at M > 4096 tokens: forward x @ W^T "nt" (M = tokens, N = out,
    K = in), input gradient "nn" (N = in, K = out), weight gradient "tn" (M = out, N = in,
    K = tokens: the large dimension is K there, so "tn" rows have M = out)."""
    out = []
    for n_out, k_in in layers:
        for t in tokens:
            for layout in layouts:
                m, n, k = {"nt": (t, n_out, k_in), "nn": (t, k_in, n_out), "tn": (n_out, k_in, t)}[layout]
                if gemm_flops(1, m, n, k) <= LARGE_M_FLOP and largest_operand(1, m, n, k) <= MAX_INT32:
                    out.append(_mm("large-m", f"{layout} out{n_out} in{k_in}", dtype, layout, m, n, k))
    return out


def fp32_mm(ms: Iterable[int] = FP32_M, sizes=FP32_NK, odd_k=FP32_ODD_K) -> list[Shape]:
    """float32 mm ("nn") across the M buckets, and a few odd K."""
    out = []
    for family, pairs in (("fp32-buckets", sizes), ("fp32-odd-k", odd_k)):
        for n, k in pairs:
            for m in ms:
                if 2.0 * m * n * k <= MAX_FLOP["float32"]:
                    out.append(_mm(family, f"n{n} k{k}", "float32", "nn", m, n, k))
    return out


def gap_plan() -> list[Shape]:
    """data/shapes_bmm_h100.json: every family above in as few compile classes as cover it (the
    choice and its cost: data/README.md, "Batched GEMMs, M > 4096 and float32")."""
    shapes = (
        attention("bfloat16", (64, 128), backward=())
        + attention("bfloat16", (80, 96, 256), prefill=(), decode_keys=(2048, 8192))
        + attention("bfloat16", (64,), prefill=(), decode_keys=(), backward=(1024, 2048, 4096, 8192),
                    batches=2)
        + moe_experts("bfloat16")
        + attention("float16", (64, 128), prefill=(), decode_keys=(1024, 4096))
        + [s for s in attention("float32", (64,), prefill=(), decode_keys=(1024, 2048, 4096, 8192),
                                decode_queries=(1, 4, 16)) if s.family == "attn-values"]
        + large_m("bfloat16", ("nt",))
        + fp32_mm(sizes=())
    )
    return _grouped(shapes)


def _grouped(shapes: list[Shape]) -> list[Shape]:
    """Unique problems, each compile class together (classes in first-seen order)."""
    seen: dict[tuple, Shape] = {}
    for s in shapes:
        seen.setdefault((s.m, s.n, s.k, s.dtype, s.layout, s.op, s.batch), s)
    order = {g: i for i, g in enumerate(dict.fromkeys(s.group for s in seen.values()))}
    return sorted(seen.values(), key=lambda s: order[s.group])


def composition(shapes: list[Shape]) -> dict[str, Counter]:
    """Problems per family, per dtype, per layout and per op."""
    return {name: Counter(getattr(s, name) for s in shapes) for name in ("family", "dtype", "layout", "op")}


def main(argv: list[str] | None = None) -> int:
    from kernel_select.device import get_device
    from kernel_select.offline.harness import cost
    from kernel_select.offline.harness.bench_plan import plan, reuse_order

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="shapes file to write")
    parser.add_argument("--cores", type=int, default=32,
                        help="the collecting host's cores (default: %(default)s, two H100s' host); the "
                             "estimate also shows one GPU with 15 compile workers")
    args = parser.parse_args(argv)
    shapes = gap_plan()
    save(shapes, args.out)
    planned = reuse_order(plan([s.problem() for s in shapes], get_device("h100"), torch_version="2.11.0"))
    print(f"{args.out}: {len(shapes)} problems in {len({s.group for s in shapes})} compile classes")
    for name, counts in composition(shapes).items():
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    for gpus, workers in ((1, 15), (1, args.cores - 1), (2, args.cores - 2)):  # a core per timing process
        print(f"estimate, {gpus} GPU(s), {workers} compile workers:")
        print("\n".join("  " + line for line in cost.estimate(planned, workers, gpus).lines()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
