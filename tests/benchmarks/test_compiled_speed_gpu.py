"""The kernel the handler's choice compiles to is about as fast as stock Inductor's and as eager's.

For three GEMMs (the seed problem; a decode GEMM, M = 16; a prefill Linear, x @ W.t() with W stored
[N, K]), `x @ w` is compiled with kernel_select's recipe (install(gemm_topk=4) + gemm_autotune_options():
the model's top 4 Triton configs and cuBLAS benchmarked) and with stock Inductor under the same options
(its own default configs and cuBLAS), each time from a cold cache. Right after each compile its kernel is
timed against eager (cuBLAS), interleaved, each call captured in a CUDA graph over enough input copies
that every call reads its operands from HBM, not L2 (offline/compare/timing.py, as `kernel-select
compare-models` times them). Eager, timed in both rounds, is the common reference of the two ratios.

Tolerances, per shape:
  - at most 5% slower than eager: the handler keeps cuBLAS among the candidates, so Inductor picks it
    unless a Triton config benchmarked faster (or, where the cuBLAS decision prefers cuBLAS, offers it
    alone). What is left is Inductor's own benchmark (L2-warm, few repeats) preferring a kernel that
    is slower when timed L2-cold; stock Inductor is exposed to the same.
  - at most 10% slower than stock: stock benchmarks every default config, the handler four. Over the
    held-out problems the model's top 4 hold a config within 1.5% of the fastest measured one on average
    (models/h100/eval.json, top-4 0.985 on `test`), so 10% leaves the benchmark's misjudgement above
    room to spare, and a wrong cuBLAS decision, a space of the wrong device or a broken model (a random
    top 4 scores 0.61) still fails.
A speed target, so a benchmark: `make bench` runs it on a GPU (one round per shape, the two ratios in
the report's extra_info); `make test` skips it. It runs in under a minute on an H100 (most of it stock
Inductor's autotuning).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

pytestmark = pytest.mark.gpu

MAX_OVER_EAGER = 1.05
MAX_OVER_STOCK = 1.10
TOPK = 4


@dataclass(frozen=True)
class Gemm:
    name: str
    m: int
    n: int
    k: int
    layout: str  # "nn": x @ w with w [K, N]; "nt": x @ w.t() with w stored [N, K]

    def inputs(self, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.randn(self.m, self.k, device="cuda", dtype=torch.bfloat16, generator=generator)
        shape = (self.k, self.n) if self.layout == "nn" else (self.n, self.k)
        w = torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=generator) / math.sqrt(self.k)
        return x, w

    @property
    def fn(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        return _nn if self.layout == "nn" else _nt

    @property
    def operand_bytes(self) -> int:
        return (self.m * self.k + self.k * self.n) * 2


def _nn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w


def _nt(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x @ w.t()


GEMMS = [Gemm("seed", 560, 1280, 3420, "nn"), Gemm("decode", 16, 14336, 4096, "nn"),
         Gemm("prefill-linear", 2048, 4096, 4096, "nt")]


@dataclass(frozen=True)
class Timed:
    ms: float  # the compiled function's median time per call
    eager_ms: float  # eager's, interleaved with it
    triton_benchmarked: int  # Triton configs Inductor benchmarked
    winner: str  # what Inductor's benchmark picked

    @property
    def over_eager(self) -> float:
        return self.ms / self.eager_ms


def compile_and_time(gemm: Gemm, inputs: list[tuple[torch.Tensor, torch.Tensor]], *, kernel_select: bool,
                     ) -> tuple[Timed, object | None]:
    """Compile `gemm` from a cold cache (with the handler or stock), check its result, and time it
    against eager before anything else compiles (a later compile may reset what this one cached)."""
    import kernel_select.inductor as ks_inductor
    from kernel_select.offline.compare.timing import kernel_ms

    torch._dynamo.reset()
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch._inductor.config.patch(force_disable_caches=True))
        handler = stack.enter_context(ks_inductor.enabled(gemm_topk=TOPK)) if kernel_select else None
        records = stack.enter_context(ks_inductor.record_autotuning())
        compiled = torch.compile(gemm.fn, options=ks_inductor.gemm_autotune_options(cudagraphs=False),
                                 dynamic=False)
        out = compiled(*inputs[0])
        torch.cuda.synchronize()
    reference = gemm.fn(*inputs[0]).float()
    torch.testing.assert_close(out.float(), reference, rtol=2e-2, atol=2e-2 * float(reference.abs().max()))
    tuned = [record for record in records if record.op == "mm"]
    assert len(tuned) == 1, f"{gemm.name}: expected one autotuned mm, got {[r.op for r in records]}"
    with torch._dynamo.config.patch(error_on_recompile=True):  # the timed code is the code compiled above
        times, timing = kernel_ms({"compiled": compiled, "eager": gemm.fn}, inputs)
    assert timing == "cuda_graph", f"{gemm.name}: the compiled GEMM could not be captured in a CUDA graph"
    winner = tuned[0].winner
    return Timed(times["compiled"], times["eager"], tuned[0].count("triton"),
                 winner.label() if winner is not None else "nothing ran"), handler


@pytest.mark.parametrize("gemm", GEMMS, ids=lambda gemm: gemm.name)
def test_the_handlers_kernel_is_as_fast_as_stock_inductors_and_eagers(benchmark, gemm: Gemm):
    from kernel_select.offline.compare.timing import input_copies

    generator = torch.Generator(device="cuda").manual_seed(0)
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    inputs = [gemm.inputs(generator) for _ in range(input_copies(gemm.operand_bytes, l2_bytes))]

    def compile_both() -> tuple[Timed, Timed, object]:
        ours, handler = compile_and_time(gemm, inputs, kernel_select=True)
        stock, _ = compile_and_time(gemm, inputs, kernel_select=False)
        torch._dynamo.reset()
        return ours, stock, handler

    # One round: each compile starts from a cold cache, and the kernels are timed inside it.
    ours, stock, handler = benchmark.pedantic(compile_both, rounds=1, iterations=1)

    selection = handler.selections[-1]
    assert (selection.problem.m, selection.problem.n, selection.problem.k) == (gemm.m, gemm.n, gemm.k)
    assert selection.problem.layout == gemm.layout
    # what the handler offered is what Inductor benchmarked: its top k, or cuBLAS alone
    assert ours.triton_benchmarked == len(selection.configs) == (0 if selection.skips_triton else TOPK)
    assert stock.triton_benchmarked > TOPK  # stock really tuned over its own, longer list

    over_stock = ours.over_eager / stock.over_eager
    benchmark.extra_info.update(over_eager=round(ours.over_eager, 4), over_stock=round(over_stock, 4))
    summary = (f"{gemm.name} {gemm.m}x{gemm.n}x{gemm.k} {gemm.layout}: kernel_select {ours.ms * 1e3:.1f} us "
               f"({ours.winner}), stock {stock.ms * 1e3:.1f} us ({stock.winner}), eager "
               f"{ours.eager_ms * 1e3:.1f} us; cuBLAS decision: "
               f"{selection.cublas.describe() if selection.cublas else 'none'}")
    assert ours.over_eager <= MAX_OVER_EAGER, f"{ours.over_eager:.3f}x eager; {summary}"
    assert over_stock <= MAX_OVER_STOCK, f"{over_stock:.3f}x stock; {summary}"
