"""The timer's drain check on a real GPU: a pass of small launches needs no more than the allowed
re-timings, and its samples are the kernel's time, not the launch overhead."""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_pass_of_small_launches_resolves_every_chunk():
    from kernel_select.device import detect
    from kernel_select.offline.harness.timer import CHUNK, ProblemTimer
    from kernel_select.problem import Problem

    timer = ProblemTimer(Problem(5, 1656, 152, "float16"), detect())
    timer.launch_cublas()  # warm-up: cuBLAS picks its kernel on the first call
    torch.cuda.synchronize()
    items = [(i, timer.launch_cublas) for i in range(3 * CHUNK)]
    out = timer.time_pass(items, check={0})
    assert timer.stats.chunks == 3 and timer.stats.chunks_unresolved == 0
    times = sorted(ms for ms, _ in out.values())
    assert all(math.isfinite(ms) and ms > 0 for ms in times)
    assert out[0][1] < 1e-2  # the checked launch is correct
    # a 5x1656x152 GEMM runs in microseconds; a drained backlog would show the ~0.1 ms launch gaps
    assert times[len(times) // 2] < 0.05
