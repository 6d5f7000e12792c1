"""The plan for M beyond the trained range (data/shapes_large_m.json): the Linear GEMMs of many images or
frames at once, M = images x tokens per image from 65,537 to 262,144.

Every committed file stops at M = 65,536 (gap_plan's `large-m` family), so a GEMM such as 100,352 x
96 x 96 (32 images of 56 x 56 tokens through a 96-wide layer: the first stage of a hierarchical vision
model at 224 x 224) lies outside every model's domain: the handler benchmarks Inductor's own list
beside the model's picks, and the zero-benchmark mode benchmarks instead of deciding. This plan draws
such GEMMs from a grid that names no architecture: tokens per image or clip of common stems, batches of
powers of two, layer widths of early stages and the MLP patterns around them (W -> W, W -> 3W, W -> 4W,
4W -> W), forward "nt" (x @ W^T: M = tokens, N = out, K = in), in bfloat16 and float32. Few K residues
keep the compile classes few: the harness compiles a class's kernels once and every problem of it
reuses them (`bench_plan.reuse_order`). Family `large-m-batch`, trained on (not held out).

`python -m kernel_select.offline.data.plans.large_m_plan --out data/shapes_large_m.json` writes it and prints
what collecting it costs (harness/cost.py).
"""

from __future__ import annotations

import argparse
from collections import Counter

from kernel_select.offline.data.plans.sampler import compile_class
from kernel_select.offline.data.shapes import Shape, save
from kernel_select.offline.harness.bench_plan import MAX_INT32, largest_operand
from kernel_select.problem import gemm_flops

FAMILY = "large-m-batch"
MIN_M, MAX_M = 65_537, 262_144
#: Tokens per image or clip: 56 x 56 (patch-4 stems at 224 x 224), 28 x 28, 64 x 64 (patch-4 at 256),
#: 197 (a patch-16 ViT at 224 with its class token), 1,500 (30 s of audio frames).
TOKENS = (3136, 784, 4096, 197, 1500)
#: Early-stage widths: the layer's input width W (K of the forward GEMM, or N for W -> W).
WIDTHS = (64, 96, 128, 192)
#: (out, in) of a layer as multiples of the width: W -> W, W -> 3W (qkv), W -> 4W (MLP up), 4W -> W.
PATTERNS = ((1, 1), (3, 1), (4, 1), (1, 4))
DTYPES = ("bfloat16", "float32")
#: Work per problem: the slowest of ~1,000 configs takes ~50x the fastest's time, so the cap keeps a
#: problem's timing near a second (float32 on CUDA cores: 1/16 the rate).
MAX_FLOP = {"bfloat16": 2e11, "float32": 2.5e10}


def batch_ms(tokens: int) -> list[int]:
    """images x `tokens` for every power-of-two count of images that lands in [MIN_M, MAX_M]."""
    out, images = [], 1
    while images * tokens <= MAX_M:
        if images * tokens >= MIN_M:
            out.append(images * tokens)
        images *= 2
    return out


def large_m_shapes() -> list[Shape]:
    """The plan, grouped by compile class (then by M, N and K) so that a class's problems run together."""
    shapes = []
    for dtype in DTYPES:
        for width in WIDTHS:
            for out_x, in_x in PATTERNS:
                n, k = width * out_x, width * in_x
                for m in sorted({m for tokens in TOKENS for m in batch_ms(tokens)}):
                    if gemm_flops(1, m, n, k) > MAX_FLOP[dtype] or largest_operand(1, m, n, k) > MAX_INT32:
                        continue
                    layer = f"nt out{n} in{k}"
                    shapes.append(Shape(m, n, k, dtype, f"{FAMILY} {layer}", family=FAMILY, layer=layer,
                                        group="mm/" + compile_class(dtype, n, k, "nt", m), layout="nt"))
    return sorted(shapes, key=lambda s: (s.group, s.m, s.n, s.k))


def main(argv: list[str] | None = None) -> int:
    from kernel_select.device import get_device
    from kernel_select.offline.harness import cost
    from kernel_select.offline.harness.bench_plan import plan, reuse_order

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="shapes file to write")
    parser.add_argument("--device", default="h200", help="the GPU the estimate plans for (default: h200)")
    args = parser.parse_args(argv)
    shapes = large_m_shapes()
    save(shapes, args.out)
    classes = Counter(s.group for s in shapes)
    print(f"{args.out}: {len(shapes)} problems in {len(classes)} compile classes: {dict(classes)}")
    problems = [s.problem() for s in shapes]
    planned = reuse_order(plan(problems, get_device(args.device), torch_version="2.11.0"))
    for gpus, workers in ((1, 15), (2, 30), (4, 60)):
        print(f"{gpus} GPU(s), {workers} compile workers:")
        print("\n".join("  " + line for line in cost.estimate(planned, workers, gpus).lines()[:2]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
