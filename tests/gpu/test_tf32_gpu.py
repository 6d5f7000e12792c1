"""TF32 on a CUDA GPU: under torch.set_float32_matmul_precision("high") the handler reads that Inductor
compiles a float32 GEMM with ALLOW_TF32 and offers Inductor's own configs beside the model's (no
shipped model was trained on TF32); the harness times a TF32 problem with ALLOW_TF32 and cuBLAS in TF32."""

from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")


@pytest.fixture
def high_precision():  # noqa: ANN201
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    yield
    torch.set_float32_matmul_precision(before)


def test_a_float32_gemm_under_tf32_gets_inductors_own_configs_beside_the_models(
        high_precision):  # noqa: ANN001
    import kernel_select.inductor as ks_inductor

    a = torch.randn(560, 3420, device="cuda")
    b = torch.randn(3420, 1280, device="cuda")
    torch._dynamo.reset()
    with ks_inductor.enabled(gemm_topk=4) as handler, \
            torch._inductor.config.patch(force_disable_caches=True), \
            ks_inductor.record_autotuning() as records:
        out = torch.compile(lambda x, y: x @ y, mode="max-autotune-no-cudagraphs")(a, b)
        torch.cuda.synchronize()
    selection = handler.selections[-1]
    assert selection.problem.tf32 and "TF32" in selection.outside, selection
    mm = [record for record in records if record.op == "mm"]
    assert mm[0].count("triton") > 4  # Inductor's own list, and the model's picks beside it
    assert set(selection.configs) <= {t.config for t in mm[0].timings if t.kind == "triton"}
    # TF32 error: about 1e-3 relative to |C| ~ sqrt(K)
    torch.testing.assert_close(out, a @ b, rtol=1e-2, atol=1e-2 * math.sqrt(a.shape[1]))
    torch._dynamo.reset()


def test_the_harness_times_a_tf32_problem_with_allow_tf32_and_cublas_in_tf32(tmp_path):  # noqa: ANN001
    from kernel_select.device import detect
    from kernel_select.offline.harness import bench, pipeline
    from kernel_select.problem import Problem

    problem = Problem(16, 512, 512, "float32", tf32=True)  # M >= 16, min(N, K) >= 512: TF32 on 2.11 and 2.13
    before = torch.backends.cuda.matmul.fp32_precision
    df = pipeline.run_bench([problem], tmp_path / "rows.parquet", detect(),
                            bench.BenchOptions(progress=False, reps=2))
    assert torch.backends.cuda.matmul.fp32_precision == before  # the process's setting is left alone
    assert df["allow_tf32"].all() and df["problem_id"].str.endswith("/tf32").all()
    assert set(df["status"]) <= {"ok", "capped"}  # every config within the TF32 tolerance of float32
    assert (df["runtime_ms"] > 0).all() and df["runtime_ms"].map(math.isfinite).all()
