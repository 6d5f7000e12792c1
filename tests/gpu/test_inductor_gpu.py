"""End to end on a CUDA GPU: torch.compile max-autotune with the handler benchmarks exactly k
Triton configs plus cuBLAS, and the compiled matmul is right."""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.gpu


def _inputs(m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16, generator=gen)
    return a, b


def _check_close(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    reference = a.float() @ b.float()
    # bf16 output of an fp32 accumulation: within a few bf16 ulps of |C| ~ sqrt(K).
    torch.testing.assert_close(out.float(), reference, rtol=2e-2, atol=2e-2 * math.sqrt(a.shape[1]))


@pytest.mark.parametrize("route", ["install", "options"])
def test_compiled_mm_benchmarks_exactly_k_triton_configs_plus_aten(route: str):
    import kernel_select.inductor as ks_inductor

    a, b = _inputs(560, 1280, 3420)  # the seed problem: K = 3420 is not a multiple of any BLOCK_K
    torch._dynamo.reset()
    k = 4 if route == "install" else 2
    with ks_inductor.enabled(gemm_topk=4) as handler, \
            torch._inductor.config.patch(force_disable_caches=True), \
            ks_inductor.record_autotuning() as records:
        if route == "install":
            compiled = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")
        else:  # the per-compile option overrides install(gemm_topk=4)
            options = ks_inductor.max_autotune_options(gemm_topk=2)
            compiled = torch.compile(lambda x, y: x @ y, options=options)
        out = compiled(a, b)
        torch.cuda.synchronize()

    mm = [record for record in records if record.op == "mm"]
    assert len(mm) == 1, records
    assert mm[0].count("triton") == k
    assert mm[0].count("extern") == 1  # cuBLAS always competes
    benchmarked = {t.config for t in mm[0].timings if t.kind == "triton"}
    assert benchmarked == set(handler.selections[-1].configs)
    assert handler.selections[-1].sources[-1] == "mlp"  # the shipped model ranked them, not a fallback
    # every config offered compiled and ran on this GPU (none out of resources), and cuBLAS ran too
    assert all(math.isfinite(t.ms) and t.ms > 0 for t in mm[0].timings), mm[0].timings
    _check_close(out, a, b)
    torch._dynamo.reset()


def test_bmm_and_addmm_are_selected_too():
    import kernel_select.inductor as ks_inductor

    # m = 16: a decode-like batched GEMM, inside the shipped model's domain (a problem outside it gets
    # Inductor's own configs beside the model's: tests/inductor/test_choices.py)
    a = torch.randn(4, 16, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4, 512, 384, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(256, 512, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(384, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    with ks_inductor.enabled(gemm_topk=3) as handler, \
            torch._inductor.config.patch(force_disable_caches=True), \
            ks_inductor.record_autotuning() as records:
        bmm = torch.compile(lambda x, y: torch.bmm(x, y), mode="max-autotune-no-cudagraphs")
        addmm = torch.compile(lambda x, w, c: torch.addmm(c, x, w), mode="max-autotune-no-cudagraphs")
        out_bmm = bmm(a, b)
        out_addmm = addmm(x, b[0], bias)
        torch.cuda.synchronize()
    by_op = {record.op: record for record in records}
    assert by_op["bmm"].count("triton") == 3 and by_op["addmm"].count("triton") == 3
    assert {s.problem.op for s in handler.selections} >= {"bmm", "addmm"}
    assert not any(s.outside for s in handler.selections), [s.outside for s in handler.selections]
    torch.testing.assert_close(out_bmm.float(), a.float() @ b.float(), rtol=2e-2, atol=0.5)
    expected = x.float() @ b[0].float() + bias.float()
    torch.testing.assert_close(out_addmm.float(), expected, rtol=2e-2, atol=0.5)
    torch._dynamo.reset()


def test_the_recipe_tunes_gemms_with_the_handler_and_leaves_a_gemv_on_cublas():
    """README's recipe: gemm_autotune_options() plus install(gemm_topk=4, gemm_precompile_in_process=True)."""
    import kernel_select.inductor as ks_inductor

    a, b = _inputs(560, 1280, 3420)
    torch._dynamo.reset()
    with ks_inductor.enabled(gemm_topk=4, gemm_precompile_in_process=True) as handler, \
            torch._inductor.config.patch(force_disable_caches=True), \
            ks_inductor.record_autotuning() as records:
        options = ks_inductor.gemm_autotune_options(cudagraphs=False)
        out = torch.compile(lambda x, y: x @ y, options=options)(a, b)
        gemv = torch.compile(lambda x, y: x @ y, options=options)(a[:1], b)  # M = 1
        torch.cuda.synchronize()
    mm = [record for record in records if record.op == "mm"]
    assert mm[0].count("triton") == 4 and mm[0].count("extern") == 1
    assert handler.selections[0].problem.m == 560
    _check_close(out, a, b)
    _check_close(gemv, a[:1], b)  # that it stays a GEMM is checked on CPU (tests/inductor/test_modes.py)
    torch._dynamo.reset()


def test_a_relu_after_a_small_linear_is_charged_to_cublas_and_fused_into_triton():
    """The end of the recommendation tower at batch 1: Linear, ReLU, Linear. The first GEMM's ReLU
    would be a kernel of its own beside cuBLAS (the gate charges for it); the last GEMM has none."""
    import kernel_select.inductor as ks_inductor

    torch.manual_seed(0)
    tower = torch.nn.Sequential(torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1))
    tower = tower.to("cuda", torch.bfloat16)
    x = torch.randn(1, 512, device="cuda", dtype=torch.bfloat16)
    torch._dynamo.reset()
    with ks_inductor.enabled(gemm_topk=4) as handler, \
            torch._inductor.config.patch(force_disable_caches=True), \
            torch.no_grad():
        out = torch.compile(tower, options=ks_inductor.gemm_autotune_options(cudagraphs=False))(x)
        expected = tower(x)
        torch.cuda.synchronize()
    by_n = {s.problem.n: s for s in handler.selections}
    # cuBLAS predicted ~5 us: launch-sized, so the separate ReLU kernel is charged
    assert by_n[256].cublas is not None and by_n[256].cublas.epilogue_factor > 1.0, by_n[256]
    # N = 1 lies outside the model's trained sizes: no cuBLAS decision, Inductor's own configs offered too
    assert 1 not in by_n or (by_n[1].outside and by_n[1].cublas is None), by_n.get(1)
    torch.testing.assert_close(out.float(), expected.float(), rtol=2e-2, atol=0.1)
    torch._dynamo.reset()
