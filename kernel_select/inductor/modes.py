"""torch.compile options for the ways kernel_select is meant to be used.

`torch.compile` takes either a `mode` or `options`, never both, so a mode plus a kernel_select
option (`gemm_topk`, ...) has to be spelled as the mode's options plus ours.

    max_autotune_options()   exactly mode="max-autotune-no-cudagraphs" (what the offline tools and
                             experiments compare against), plus a GEMM search space and extras
    gemm_autotune_options()  what kernel_select recommends for whole models: autotune the GEMMs
                             (kernel_select hands Inductor the top-k), replay CUDA graphs, and skip
                             what max-autotune also does that kernel_select cannot make cheaper:
                             pointwise/reduction autotuning and coordinate-descent tuning

Why the second exists, measured on the H100 (docs/results.md, "Whole models"): beyond
mode="default"'s compile, the max-autotune modes cost 20-45 s per model however few GEMM choices
there are, and that fixed part is not GEMM tuning; docs/results.md compares the handler against
Inductor with these same GEMM-only options ("stock-gemm"). Without coordinate descent, Inductor also
keeps GEMVs (M = 1) on cuBLAS, as eager does (kernel_select.inductor.eager_parity).
"""

from __future__ import annotations

from typing import Any


def max_autotune_options(search_space: str = "DEFAULT", **extra: Any) -> dict[str, Any]:
    """torch.compile options equal to mode="max-autotune-no-cudagraphs" with the given GEMM search
    space (torch.compile takes either a mode or options, not both).

    Caches are not an option here: `force_disable_caches` is an alias of
    torch.compiler.config.force_disable_caches, which torch.compile(options=...) rejects; use
    `torch.compiler.config.patch(force_disable_caches=True)` or TORCHINDUCTOR_FORCE_DISABLE_CACHES=1.
    """
    import torch._inductor as torch_inductor

    options = dict(torch_inductor.list_mode_options("max-autotune-no-cudagraphs"))
    options["max_autotune_gemm_search_space"] = search_space.upper()
    options.update(extra)
    return options


def gemm_autotune_options(cudagraphs: bool = True, **extra: Any) -> dict[str, Any]:
    """torch.compile options that autotune GEMMs only (Inductor's `max_autotune_gemm`), with
    Inductor's CUDA graphs unless `cudagraphs=False`; `extra` (e.g. gemm_topk=4) goes on top.

        ks_inductor.install()   # the defaults: gemm_topk=4, in-process precompile
        model = torch.compile(model, options=ks_inductor.gemm_autotune_options())
    """
    options: dict[str, Any] = {"max_autotune_gemm": True, "triton.cudagraphs": cudagraphs}
    options.update(extra)
    return options
