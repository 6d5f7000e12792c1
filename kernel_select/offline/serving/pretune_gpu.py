"""The GPU step of `pretune`: Inductor's own autotuner times given Triton configs and ATen for one
static problem, caches off. Everything else in pretune is pure and runs on the CPU."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.lut import BatchedLUTEntry, lut_from_rows, LUTEntry, save_lut
from kernel_select.offline.serving.pretune import NotAutotunedError, Timings, label_of
from kernel_select.problem import Problem


def benchmark_problem(problem: Problem, configs: list[GemmConfig], device: DeviceSpec,
                      layout: str = "nn") -> Timings:
    """Inductor's timings of `configs` and ATen for `problem` with operands in `layout`
    (kernel_select.layouts), as {label: ms}.

    A temporary LUT lists exactly `configs` for the problem and the handler adds nothing (gemm_topk=1,
    cuBLAS gate off), so Inductor benchmarks those configs, ATen and whatever other templates it
    adds itself (their timings are dropped: a LUT cannot name them). Shape padding is off: a
    static compile may pad K (3420 -> 3424) before the GEMM is lowered, so the problem Inductor
    benchmarks would not be the one pinned, while the dynamic graphs pins serve are never padded.
    The temporary entry names no layout: it is the compile's only GEMM, and an entry for every
    layout still matches should the handler fail to prove the operands' layout from their strides.
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
        save_lut(lut_from_rows([(device.key, problem.op, problem.dtype, entry)]), lut_path)
        fn, args = _program(problem, layout)
        options = ks_inductor.max_autotune_options("DEFAULT")
        with ks_inductor.enabled(gemm_topk=1, kernel_lut_path=str(lut_path), gemm_cublas_margin="off"), \
                torch._inductor.config.patch(shape_padding=False), \
                ks_inductor.record(device=device.key, pin=True) as recording:
            torch._dynamo.reset()
            torch.compile(fn, options=options, dynamic=False)(*args)
            torch.cuda.synchronize()
    timings: Timings = {}
    for item in recording.feedback:
        # The recorded problem carries the layout its strides prove; `problem` may say "nn".
        if dataclasses.replace(item.problem, layout=problem.layout) == problem:
            for t in item.timings:
                label = label_of(t.kind, t.config)
                if label is not None:
                    timings[label] = min(t.ms, timings.get(label, float("inf")))
    if not timings:
        raise NotAutotunedError(f"{problem}: Inductor benchmarked nothing for it (is max-autotune on?)")
    return timings


def _program(problem: Problem, layout: str = "nn"):  # noqa: ANN202 -- (callable, its CUDA arguments)
    import torch

    dtype = getattr(torch, problem.dtype)
    batch = (problem.batch,) if problem.op in ("bmm", "baddbmm") else ()

    def operand(rows: int, cols: int, transposed: bool) -> torch.Tensor:
        if transposed:  # a column-major view, as W.t() is
            return torch.randn(*batch, cols, rows, device="cuda", dtype=dtype).transpose(-2, -1)
        return torch.randn(*batch, rows, cols, device="cuda", dtype=dtype)

    a = operand(problem.m, problem.k, layout[0] == "t")
    b = operand(problem.k, problem.n, layout[1] == "t")
    if problem.op in ("addmm", "baddbmm"):
        bias = torch.randn(problem.n, device="cuda", dtype=dtype)
        op = torch.addmm if problem.op == "addmm" else torch.baddbmm
        return (lambda x, y, z: op(x, y, z)), (bias, a, b)
    op = torch.mm if problem.op == "mm" else torch.bmm
    return (lambda x, y: op(x, y)), (a, b)
