"""Whether Inductor runs a float32 GEMM with TF32: the one rule the handler and the harness share.

Inductor's `triton::mm` and `triton::bmm` templates multiply float32 operands in TF32 on tensor cores
(`tl.dot(a, b, allow_tf32=ALLOW_TF32)`) when the user allows it, with
`torch.set_float32_matmul_precision("high")` or `torch.backends.cuda.matmul.fp32_precision = "tf32"`
(what torch's own warning recommends on every float32 compile), and the GEMM's sizes pass a test that
changed between torch versions (`inductor_allow_tf32`). Such a GEMM is another problem than the same
sizes on CUDA cores (`Problem.tf32`): about 7x the rate, and another ranking of its configs.

Who reads it:
  * the Inductor handler (kernel_select.inductor.inputs) takes ALLOW_TF32 from Inductor's own first
    Triton candidate for the GEMM, and where the lowering offers none in that call (addmm's ATen-only
    call) computes it here, from the running torch's settings;
  * the benchmark harness (kernel_select.offline.harness.bench_plan) times a TF32 problem with
    ALLOW_TF32 on, and refuses one that Inductor of the running torch would not run with TF32.

Nothing here imports torch._inductor: the callers read Inductor's `force_same_precision` (torch 2.11's
only; gone in 2.13) and pass it in.
"""

from __future__ import annotations

from typing import Union

from kernel_select.configs import torch_minor_version

#: torch.backends.cuda.matmul.fp32_precision when float32 matmuls may use TF32.
TF32_PRECISION = "tf32"
#: The torch version whose Inductor tests the sizes (M >= 16, min(N, K) >= 512) instead of their
#: alignment (torch 2.11: only under `force_same_precision`).
SIZE_RULE_SINCE = (2, 13)
#: 2.13's size test: the smallest M and the smallest of N and K that run with TF32.
MIN_M, MIN_NK = 16, 512

#: A size as Inductor knows it at compile time: an int, or for a symbolic size the (low, high) range
#: the graph accepts (what `statically_known_true` can prove about it).
Size = Union[int, tuple[int, int]]


def inductor_allow_tf32(m: Size, n: Size, k: Size, *, fp32_precision: str | None = None,
                        torch_version: str | None = None, force_same_precision: bool = False) -> bool:
    """ALLOW_TF32 as Inductor's mm template heuristic sets it for a float32 GEMM of these sizes
    (`get_extra_kwargs` of torch/_inductor/template_heuristics/triton.py).

    Every version requires `fp32_precision == "tf32"` (default: the running process's,
    `running_fp32_precision`); then
      2.13 and newer:  M >= 16 and min(N, K) >= 512, provably for every size the graph accepts
                       (a symbolic size: its lower bound);
      2.12 and older:  not force_same_precision, or M % 16 == 0, N % 16 == 0 and K % 8 == 0 (sympy
                       cannot prove a symbolic size's residue, so a symbolic size fails this).
    `torch_version` defaults to the installed torch's. For float16 and bfloat16 tl.dot ignores the
    flag (Inductor still emits it): callers ask for float32 GEMMs only.
    """
    if fp32_precision is None:
        fp32_precision = running_fp32_precision()
    if fp32_precision != TF32_PRECISION:
        return False
    if torch_minor_version(torch_version) >= SIZE_RULE_SINCE:
        return _low(m) >= MIN_M and min(_low(n), _low(k)) >= MIN_NK
    if not force_same_precision:
        return True
    sizes = [_static(size) for size in (m, n, k)]
    if None in sizes:
        return False
    m_value, n_value, k_value = sizes
    return m_value % 16 == 0 and n_value % 16 == 0 and k_value % 8 == 0  # type: ignore[operator]


def running_fp32_precision() -> str:
    """torch.backends.cuda.matmul.fp32_precision in this process: "tf32" after
    `torch.set_float32_matmul_precision("high")`; "ieee", or "none" (inherit: Inductor reads it as not
    TF32), otherwise; "ieee" without torch."""
    try:
        import torch
    except ImportError:
        return "ieee"
    return str(getattr(torch.backends.cuda.matmul, "fp32_precision", "ieee"))


def _low(size: Size) -> int:
    return size[0] if isinstance(size, tuple) else size


def _static(size: Size) -> int | None:
    """The size's one value, or None for a symbolic size that takes several."""
    if isinstance(size, tuple):
        return size[0] if size[0] == size[1] else None
    return size
