"""The benchmark harness on a real GPU: rows are complete, correct and plausibly timed."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.gpu

triton = pytest.importorskip("triton")


def test_harness_times_a_small_problem_end_to_end(tmp_path):
    import pandas as pd

    from kernel_select.offline.harness import bench, pipeline
    from kernel_select.offline.data import dataset
    from kernel_select.device import detect
    from kernel_select.problem import Problem

    problem = Problem(100, 272, 3420, "bfloat16")  # unaligned M and K: masked K loop, wrapped rows
    out = tmp_path / "rows.parquet"
    df = pipeline.run_bench([problem], out, detect(), bench.BenchOptions(progress=False, reps=2))
    assert df["problem_id"].nunique() == 1
    triton_rows = df[df["backend"] == "triton"]
    assert len(triton_rows) > 100
    assert (df["backend"] == "aten").sum() == 1
    assert set(df["status"]) <= {"ok", "capped"}  # nothing incorrect, nothing failed
    assert (df["runtime_ms"] > 0).all() and df["runtime_ms"].map(math.isfinite).all()
    # Re-running resumes: nothing new is timed, the file is unchanged.
    again = pipeline.run_bench([problem], out, detect(), bench.BenchOptions(progress=False))
    pd.testing.assert_frame_equal(dataset.read(out), again)


def test_every_config_of_a_problem_is_correct_against_torch():
    import torch

    from kernel_select.offline.harness.bench_plan import plan
    from kernel_select.device import detect
    from kernel_select.offline.harness.mm_kernel import mm_kernel  # noqa: F401 -- compiles on first launch
    from kernel_select.offline.harness.timer import ProblemTimer
    from kernel_select.problem import Problem

    device = detect()
    problem = Problem(33, 80, 100, "float16")
    runs = plan([problem], device)[0][::7]  # a spread of the space; compiling all takes minutes
    assert len(runs) >= 10, f"{problem}: only {len(runs)} configs to check"
    timer = ProblemTimer(problem, device)
    for run in runs:
        timer.c.fill_(float("nan"))
        timer.launch(run)
        torch.cuda.synchronize()
        err = torch.linalg.vector_norm(timer.c.float() - timer.ref) / torch.linalg.vector_norm(timer.ref)
        assert err < 1e-2, run.config


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_every_layout_is_timed_and_multiplies_like_torch_mm_on_the_same_operands(layout):
    import torch

    from kernel_select.device import detect
    from kernel_select.layouts import layout_of
    from kernel_select.offline.harness import bench
    from kernel_select.offline.harness.bench_plan import plan
    from kernel_select.offline.harness.timer import ProblemTimer
    from kernel_select.problem import Problem

    device = detect()
    problem = Problem(100, 272, 136, "float16", layout=layout)  # M = 4 mod 8: M_DIV 4 when A is transposed
    runs = plan([problem], device)[0][::11]
    assert len(runs) >= 10, f"{problem}: only {len(runs)} configs to check"
    keys = list(dict.fromkeys(run.key for run in runs))[:3]
    compiled = {key: (status, text) for key, status, text in bench._compile_keys(keys)}  # workers' path
    assert all(status is None for status, _ in compiled.values()), compiled
    timer = ProblemTimer(problem, device)
    assert layout_of(timer.a, timer.b) == layout
    _assert_every_run_multiplies_like(torch.mm, timer, runs, 1e-2)  # cuBLAS on the same views
    results, cublas = bench.time_problem(runs, compiled, device, bench.BenchOptions(reps=1))
    assert sorted(results) == list(range(len(runs)))  # one result per run, every one timed
    assert cublas.status == "ok" and all(r.status in ("ok", "capped") for r in results.values())
    assert all(0 < s < 10 for r in [cublas, *results.values()] for s in r.samples)


@pytest.mark.parametrize("op", ["mm", "bmm"])
def test_literal_size_binaries_multiply_like_torch_and_are_timed(op):
    # bench --literal-sizes compiles M, N and K into each binary (the kernels' M_LIT branch); the
    # workers' compile path and the timer's launch must agree on every constexpr.
    import torch

    from kernel_select.device import detect
    from kernel_select.offline.harness import bench
    from kernel_select.offline.harness.bench_plan import plan
    from kernel_select.offline.harness.timer import ProblemTimer
    from kernel_select.problem import Problem

    device = detect()
    batch = 3 if op == "bmm" else 1
    problem = Problem(8, 272, 136, "bfloat16", batch=batch, op=op, layout="nt")
    runs = plan([problem], device, literal_sizes=True)[0][::17]
    assert len(runs) >= 5 and all(run.key.sizes == (8, 272, 136) for run in runs)
    compiled = {key: (status, text) for key, status, text in bench._compile_keys([r.key for r in runs])}
    assert all(status is None for status, _ in compiled.values()), compiled
    timer = ProblemTimer(problem, device)
    _assert_every_run_multiplies_like(torch.bmm if op == "bmm" else torch.mm, timer, runs, 2e-2)
    results, cublas = bench.time_problem(runs, compiled, device, bench.BenchOptions(reps=1))
    assert cublas.status == "ok" and all(r.status in ("ok", "capped") for r in results.values())


def _assert_every_run_multiplies_like(reference, timer, runs, tolerance: float) -> None:
    """Each run's output, launched into a NaN-poisoned C, within `tolerance` (relative Frobenius) of
    `reference` (torch.mm or torch.bmm) on the timer's own operand views."""
    import torch

    expected = reference(timer.a, timer.b).float()
    for run in runs:
        timer.c.fill_(float("nan"))
        timer.launch(run)
        torch.cuda.synchronize()
        err = torch.linalg.vector_norm(timer.c.float() - expected) / torch.linalg.vector_norm(expected)
        assert err < tolerance, (run.problem, run.config)
