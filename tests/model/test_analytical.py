"""The analytical roofline model predicts what physics demands: sane bounds and sane winners."""

from __future__ import annotations


import numpy as np
import pytest

from kernel_select.model.analytical import AnalyticalModel
from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.errors import ProblemError, UnsupportedProblemError
from kernel_select.problem import Problem
from kernel_select.space import for_problem

H100 = get_device("h100")
MODEL = AnalyticalModel(H100)
TILE = GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=3, num_warps=4)


def _score(problem: Problem, configs, model: AnalyticalModel = MODEL) -> np.ndarray:
    return model.estimate(problem, configs)


def test_bigger_problems_take_longer():
    sizes = [(64, 64, 64), (256, 256, 256), (1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)]
    configs = for_problem(Problem(8192, 8192, 8192), H100)
    times = np.stack([_score(Problem(m, n, k), configs) for m, n, k in sizes])
    assert np.all(np.diff(times, axis=0) >= 0)
    assert np.all(times[-1] > 100 * times[0])


@pytest.mark.parametrize("m,n", [(16, 4096), (560, 1280), (4096, 4096)])
def test_runtime_is_monotone_in_k(m, n):
    configs = for_problem(Problem(m, n, 8192), H100)
    times = np.stack([_score(Problem(m, n, k), configs) for k in (16, 100, 512, 3420, 8192, 65536)])
    assert np.all(np.diff(times, axis=0) >= 0)
    assert np.all(times[-1] > times[0])


def test_large_bf16_prefers_a_large_tile_near_peak():
    problem = Problem(8192, 8192, 8192, "bfloat16")
    configs = for_problem(problem, H100)
    times = _score(problem, configs)
    best = configs[int(np.argmin(times))]
    assert best.block_m >= 128 and best.block_n >= 128, best
    ideal_ms = problem.flops / H100.peak_flops("bfloat16") * 1e3
    assert ideal_ms < times.min() < 2 * ideal_ms


@pytest.mark.parametrize("n,k", [(4096, 4096), (1280, 3420), (28672, 4096)])
def test_tiny_m_prefers_small_block_m(n, k):
    problem = Problem(16, n, k, "bfloat16")
    # The space of a large problem has every block_m; the model, not clamping, must reject the
    # padded rows of a 16-row problem.
    configs = for_problem(Problem(4096, 4096, 4096), H100)
    times = _score(problem, configs)
    block_m = np.array([c.block_m for c in configs])
    assert times[block_m <= 32].min() <= times[block_m >= 64].min()
    assert times[block_m <= 32].min() < times[block_m == 256].min()
    # Same config but for block_m: 16 rows never lose to 128 rows of which 112 are padding.
    by_key = {c.key: t for c, t in zip(configs, times)}
    pairs = [(t, by_key[(128, *key[1:])]) for key, t in by_key.items()
             if key[0] == 16 and (128, *key[1:]) in by_key]
    # (Where reading B dominates, padded rows are free and ties are honest.)
    assert pairs and all(small <= big for small, big in pairs)


def test_tiny_m_strictly_prefers_small_block_m_when_tiles_matter():
    problem = Problem(16, 4096, 4096, "bfloat16")
    configs = for_problem(Problem(4096, 4096, 4096), H100)
    times = _score(problem, configs)
    block_m = np.array([c.block_m for c in configs])
    assert times[block_m <= 32].min() < times[block_m >= 128].min()
    small = {c.key[1:]: t for c, t in zip(configs, times) if c.block_m == 16}
    big = {c.key[1:]: t for c, t in zip(configs, times) if c.block_m == 128}
    shared = small.keys() & big.keys()
    assert sum(small[key] < big[key] for key in shared) > len(shared) // 2


@pytest.mark.parametrize("device", ["h100", "h200", "a100"])
@pytest.mark.parametrize("m,n,k,dtype", [
    (1, 16, 16, "float16"), (7, 33, 100, "float32"), (560, 1280, 3420, "bfloat16"),
    (32, 28672, 32, "bfloat16"), (8192, 8192, 8192, "float16"), (4096, 4096, 4096, "float32"),
])
def test_never_faster_than_the_roofline(device, m, n, k, dtype):
    spec = get_device(device)
    model = AnalyticalModel(spec)
    problem = Problem(m, n, k, dtype)
    times_s = _score(problem, for_problem(problem, spec), model) / 1e3
    assert np.all(times_s >= problem.flops / spec.peak_flops(dtype))
    assert np.all(times_s >= problem.min_bytes / spec.hbm_bytes_per_s)


def test_fp32_uses_cuda_cores_unless_tf32():
    problem = Problem(4096, 4096, 4096, "float32")
    configs = for_problem(problem, H100)
    ieee = _score(problem, configs).min()
    tf32 = _score(problem, configs, AnalyticalModel(H100, allow_tf32=True)).min()
    assert ieee >= problem.flops / H100.peak_flops_fp32 * 1e3
    assert tf32 < ieee / 3
    assert "TF32" in AnalyticalModel(H100, allow_tf32=True).describe()


def test_batch_multiplies_the_work():
    configs = for_problem(Problem(512, 512, 512), H100)
    one = _score(Problem(512, 512, 512, batch=1, op="bmm"), configs)
    many = _score(Problem(512, 512, 512, batch=64, op="bmm"), configs)
    # More CTAs of the same kernel: never cheaper, never worse than 64 launches in a row, and
    # big tiles that leave most SMs idle at batch 1 gain the most from batching.
    assert np.all(many > one)
    assert np.all(many <= 64 * one)
    assert (many / one).min() < 8


def test_addmm_pays_for_reading_the_bias_input():
    problem = Problem(32, 28672, 32)  # memory-bound: C dominates the traffic
    mm = _score(problem, [TILE])
    addmm = _score(Problem(32, 28672, 32, op="addmm"), [TILE])
    assert addmm[0] > mm[0]


def test_fewer_stages_cannot_hide_latency_on_a_compute_bound_loop():
    problem = Problem(8192, 8192, 8192)
    # 128x256 with 8 warps needs all of an SM's registers: one CTA per SM, nobody to overlap with.
    configs = [GemmConfig(block_m=128, block_n=256, block_k=64, num_stages=s, num_warps=8) for s in (1, 2, 3)]
    one, two, three = _score(problem, configs)
    assert one > two >= three


def test_rejects_what_it_cannot_score():
    with pytest.raises(UnsupportedProblemError, match="dtype"):
        MODEL.estimate(16, 16, 16, "int8", [TILE])
    with pytest.raises(ProblemError, match="op"):
        MODEL.estimate(Problem(16, 16, 16, "bfloat16", op="conv"), [TILE])
    with pytest.raises(ProblemError):
        MODEL.estimate(0, 16, 16, "bfloat16", [TILE])
