"""Batched GEMMs on a real GPU: the bmm kernel multiplies like torch.bmm and the harness's rows are
complete (every config ok or capped, a finite cuBLAS row, outputs checked)."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)


def test_two_tiny_bmm_problems_are_timed_and_their_rows_are_complete(tmp_path):
    from kernel_select.device import detect
    from kernel_select.offline.harness import bench, pipeline
    from kernel_select.problem import Problem

    problems = [Problem(4, 160, 64, "bfloat16", batch=8, op="bmm", layout="nt"),  # decode scores
                Problem(40, 64, 136, "float16", batch=3, op="bmm", layout="tn")]  # K and M unaligned
    out = tmp_path / "rows.parquet"
    df = pipeline.run_bench(problems, out, detect(), bench.BenchOptions(search_space="default", reps=2,
                                                                         progress=False))
    assert df["problem_id"].nunique() == 2
    assert set(df["op"]) == {"bmm"} and set(df["batch"]) == {8, 3}
    assert set(df["status"]) <= {"ok", "capped"}  # none incorrect: every binary checked on its first problems
    aten = df[df["backend"] == "aten"]
    assert len(aten) == 2 and aten["runtime_ms"].map(math.isfinite).all()
    assert (df["runtime_ms"] > 0).all() and df["runtime_ms"].map(math.isfinite).all()
    assert set(df["device_index"]) == {torch.cuda.current_device()}


@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_the_bmm_kernel_multiplies_like_torch_bmm_on_the_same_operands(layout):
    from kernel_select.device import detect
    from kernel_select.offline.harness import bench
    from kernel_select.offline.harness.bench_plan import plan
    from kernel_select.offline.harness.timer import ProblemTimer
    from kernel_select.problem import Problem

    device = detect()
    problem = Problem(100, 72, 136, "float16", batch=5, op="bmm", layout=layout)  # nothing divides 16
    runs = plan([problem], device)[0][::13]
    assert len(runs) >= 10, f"{problem}: only {len(runs)} configs to check"
    keys = list(dict.fromkeys(run.key for run in runs))
    compiled = {key: status for key, status, _ in bench._compile_keys(keys)}
    assert not any(compiled.values()), compiled
    timer = ProblemTimer(problem, device)
    expected = torch.bmm(timer.a, timer.b).float()
    for run in runs:
        timer.c.fill_(float("nan"))
        timer.launch(run)
        torch.cuda.synchronize()
        err = torch.linalg.vector_norm(timer.c.float() - expected) / torch.linalg.vector_norm(expected)
        assert err < 1e-2, run.config
