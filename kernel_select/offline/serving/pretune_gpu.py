"""The GPU step of `pretune`: Inductor's own autotuner times given Triton configs and ATen for one
problem, caches off, its dynamic size (if any) compiled dynamic as serving compiles it. Everything
else in pretune is pure and runs on the CPU."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.errors import KernelSelectError
from kernel_select.lut import BatchedLUTEntry, lut_from_rows, LUTEntry, save_lut
from kernel_select.offline.serving.crossovers import label_of, Timings
from kernel_select.problem import TF32, Problem


class NotAutotunedError(KernelSelectError):
    """Inductor benchmarked no choice for a GEMM: it lowers it without autotuning. pretune leaves
    such a GEMM out of the LUT (a benchmark given to `pretune.pretune` raises it to say so)."""


def benchmark_problem(problem: Problem, configs: list[GemmConfig], device: DeviceSpec,
                      layout: str = "nn", *, dynamic: str | None = None) -> Timings:
    """Inductor's timings of `configs` and ATen for `problem` with operands in `layout`
    (kernel_select.layouts), as {label: ms}.

    A temporary LUT lists exactly `configs` for the problem and the handler adds nothing (gemm_topk=1,
    cuBLAS gate off), so Inductor benchmarks those configs, ATen and whatever other templates it
    adds itself (their timings are dropped: a LUT cannot name them). `dynamic` ("m" or "k") is
    compiled symbolic (`mark_dynamic`), as serving compiles a length: the kernels timed are those
    serving runs (a static M would be a constant the kernel is specialized for), and the next
    length can find them in Triton's cache. Shape padding is off: a static compile may pad K
    (3420 -> 3424) before the GEMM is lowered, so the problem Inductor benchmarks would not be the
    one pinned, and serving's graphs (which pretune's discovery compiles) are not padded either.
    The temporary entry names no layout: it is the compile's only GEMM, and an entry for every
    layout still matches should the handler fail to prove the operands' layout from their strides.
    A float32 entry is written to the "tf32" list too: whichever precision the handler reads for the
    GEMM (kernel_select.tf32), it finds the candidates.
    """
    import torch
    import torch._inductor.config

    import kernel_select.inductor as ks_inductor

    fields = {"m": problem.m, "n": problem.n, "k": problem.k, "configs": configs,
              "note": "pretune candidates"}
    entry = (BatchedLUTEntry(batch=problem.batch, **fields) if problem.op in ("bmm", "baddbmm")
             else LUTEntry(**fields))
    with tempfile.TemporaryDirectory(prefix="pretune-") as tmp:
        lut_path = Path(tmp) / "candidates.json"
        precisions = (problem.dtype, TF32) if problem.dtype == "float32" else (problem.dtype,)
        save_lut(lut_from_rows([(device.key, problem.op, precision, entry) for precision in precisions]),
                 lut_path)
        fn, args = _program(problem, layout, dynamic)
        options = ks_inductor.max_autotune_options("DEFAULT")
        with ks_inductor.enabled(gemm_topk=1, kernel_lut_path=str(lut_path), gemm_cublas_margin="off"), \
                torch._inductor.config.patch(shape_padding=False), \
                ks_inductor.record(device=device.key, pin=True) as recording:
            torch._dynamo.reset()
            # A static problem compiles static; a marked size stays symbolic.
            torch.compile(fn, options=options, dynamic=None if dynamic else False)(*args)
            torch.cuda.synchronize()
    timings: Timings = {}
    for item in recording.feedback:
        # The recorded problem carries the layout its strides prove and the precision Inductor read;
        # `problem` may say "nn", and its precision is the site's.
        if dataclasses.replace(item.problem, layout=problem.layout, tf32=problem.tf32) == problem:
            for t in item.timings:
                label = label_of(t.kind, t.config)
                if label is not None:
                    timings[label] = min(t.ms, timings.get(label, float("inf")))
    if not timings:
        raise NotAutotunedError(f"{problem}: Inductor benchmarked nothing for it (is max-autotune on?)")
    return timings


def _program(problem: Problem, layout: str = "nn", dynamic: str | None = None):  # noqa: ANN202
    """(fn, its CUDA arguments) running the problem's GEMM on operands in `layout`, with the
    `dynamic` size of the arguments marked dynamic. The arguments are row-major buffers; a "t"
    operand is their transpose inside fn, as `x @ W.t()` reads W."""
    import torch

    dtype = getattr(torch, problem.dtype)
    batched = problem.op in ("bmm", "baddbmm")
    batch = (problem.batch,) if batched else ()
    transposed = (layout[0] == "t", layout[1] == "t")
    a = torch.randn(*batch, *((problem.k, problem.m) if transposed[0] else (problem.m, problem.k)),
                    device="cuda", dtype=dtype)
    b = torch.randn(*batch, *((problem.n, problem.k) if transposed[1] else (problem.k, problem.n)),
                    device="cuda", dtype=dtype)
    for tensor, dim in _dynamic_dims(dynamic, transposed, len(batch)):
        torch._dynamo.mark_dynamic((a, b)[tensor], dim)

    def view(x: torch.Tensor, t: bool) -> torch.Tensor:
        return x.transpose(-2, -1) if t else x

    if problem.op in ("addmm", "baddbmm"):
        bias = torch.randn(problem.n, device="cuda", dtype=dtype)
        op = torch.addmm if problem.op == "addmm" else torch.baddbmm
        return (lambda c, x, y: op(c, view(x, transposed[0]), view(y, transposed[1]))), (bias, a, b)
    op = torch.mm if problem.op == "mm" else torch.bmm
    return (lambda x, y: op(view(x, transposed[0]), view(y, transposed[1]))), (a, b)


def _dynamic_dims(dynamic: str | None, transposed: tuple[bool, bool],
                  batch_dims: int) -> list[tuple[int, int]]:
    """(operand 0 = A or 1 = B, dimension of its row-major buffer) that hold the dynamic size."""
    if dynamic == "m":  # A[M, K], stored as [K, M] when transposed
        return [(0, batch_dims + (1 if transposed[0] else 0))]
    if dynamic == "k":  # A[M, K] and B[K, N]: both hold K
        return [(0, batch_dims + (0 if transposed[0] else 1)),
                (1, batch_dims + (1 if transposed[1] else 0))]
    return []
