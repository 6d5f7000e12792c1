"""Config patches that keep a compiled GEMV on cuBLAS, as eager runs it.

Why a compiled `a @ b` with M = 1 can be slower than eager (torch 2.11 and 2.13 alike):
`torch.compile(mode="max-autotune")` and `"max-autotune-no-cudagraphs"` turn on
`coordinate_descent_tuning` (torch/_inductor/__init__.py, `list_mode_options`). With it set, on any
device but CPU and MPS, Inductor's decomposition of `aten.mm` (torch/_inductor/decomposition.py,
`mm`) rewrites a GEMM with M == 1 or N == 1 into `(a.unsqueeze(2) * b.unsqueeze(0)).sum(dim=1)`,
and that of `aten.bmm` does the same for a batched GEMV. The product is then no GEMM at all: no
mm autotuning happens (neither cuBLAS nor a Triton template is a candidate), and the program runs
Inductor's own Triton reduction kernel in place of cuBLAS's GEMV. The source's comment says the
rewrite exists because Inductor's GEMV "only achieves peak bandwidth with coordinate descent
tuning"; on the H100 suite it measured 4-39% slower than eager cuBLAS.

`eager_parity_patches()` turns `coordinate_descent_tuning` off, which keeps such GEMMs as
`aten.mm` (cuBLAS). The price: Inductor's pointwise and reduction kernels are no longer
coordinate-descent tuned either. The patches must be applied after the mode's options (pass
them in `torch.compile(options=...)`, as `max_autotune_options(**eager_parity_patches())` does);
`torch.compile(mode="max-autotune")` applies its own `coordinate_descent_tuning=True` over the
global config.
"""

from __future__ import annotations

from typing import Any


def eager_parity_patches() -> dict[str, Any]:
    """Inductor config patches that keep M = 1 / N = 1 GEMMs on cuBLAS (see the module docstring)."""
    return {"coordinate_descent_tuning": False}
