"""Why a bf16 GEMM with a dynamic length compiled more than once on torch 2.11 (docs/guide.md,
"Serving"): Inductor's shape-padding heuristic compares K with M, and with a symbolic M that
comparison becomes a guard on the length. If torch changes the heuristic, this test says the
documentation's explanation needs another look."""

from __future__ import annotations

import torch
from torch._dynamo.source import ConstantSource
from torch._inductor.fx_passes.pad_mm import is_mm_compute_bound
from torch.fx.experimental.symbolic_shapes import ShapeEnv


def test_a_symbolic_length_below_k_turns_into_a_guard_on_the_length() -> None:
    env = ShapeEnv()
    length = env.create_symintnode(env.create_symbol(560, ConstantSource("length")), hint=560)
    # The serving program's input gradient: grad_y[length, 1280] @ W[1280, 3420].
    is_mm_compute_bound(length, 1280, 3420, torch.bfloat16)
    guards = [str(guard.expr) for guard in env.guards]
    assert len(guards) == 1 and guards[0].endswith("< 1280"), guards

