"""The config space matches Inductor's own heuristic output, count for count, and holds only configs that
pass its one hardware check (`unfit_reason`, which hand-written LUT configs go through too)."""

from __future__ import annotations

from collections import Counter

import pytest

from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.problem import Problem
from kernel_select.space import (
    default_grid,
    exhaustive_grid,
    fits_shared_memory,
    for_problem,
    inductor_configs,
    shared_memory_bytes,
    unfit_reason,
)

SEED = Problem(560, 1280, 3420, "bfloat16")


def test_raw_grid_sizes():
    assert len(exhaustive_grid()) == 1875
    assert len(default_grid("2.11")) == 20
    assert len(default_grid("2.13")) == 21  # 2.13 adds 128x256x64 s4 w8


def test_seed_problem_counts_match_inductor():
    # Counts from running Inductor's heuristic for bf16 560x3420 @ 3420x1280 (2.11 and 2.13).
    assert len(inductor_configs(SEED, "default", "2.11")) == 20
    exhaustive = inductor_configs(SEED, "exhaustive")
    assert len(exhaustive) == 1400
    assert Counter(c[4] for c in exhaustive) == {1: 25, 2: 450, 4: 475, 8: 450}


def test_smem_rule_removes_128x128x128_s4_w8_on_h100():
    h100 = get_device("h100")
    big = GemmConfig(block_m=128, block_n=128, block_k=128, num_stages=4, num_warps=8)
    assert shared_memory_bytes(big, 2) == 262144 + 128
    assert not fits_shared_memory(big, 2, h100)
    assert big not in for_problem(SEED, "h100", "default", "2.11")
    assert len(for_problem(SEED, "h100", "default", "2.11")) == 19


def test_blocks_clamp_to_small_problems():
    configs = for_problem(Problem(1, 4096, 4096), "h100")
    assert {c.block_m for c in configs} == {16}
    assert all(c.num_warps <= c.block_m * c.block_n // 256 for c in configs)
    assert len(set(configs)) == len(configs)


@pytest.mark.parametrize("m,n,k", [(1, 16, 16), (7, 33, 100), (560, 1280, 3420), (8192, 8192, 8192)])
def test_space_is_deduplicated_and_fits(m, n, k):
    problem = Problem(m, n, k, "float32")
    configs = for_problem(problem, "a100")
    assert len(set(configs)) == len(configs)
    assert all(fits_shared_memory(c, 4, get_device("a100")) for c in configs)


@pytest.mark.parametrize("search_space", ["exhaustive", "default"])
@pytest.mark.parametrize("m,n,k", [(1, 300, 5000), (200, 257, 9000), (512, 8192, 130), (4097, 16384, 16383)])
def test_the_cached_space_of_large_dimensions_is_the_problems_own(search_space: str, m: int, n: int, k: int):
    # for_problem caches by the dimensions' powers of two clamped to the largest block: problems
    # beyond it share a list, which must be what Inductor's heuristic gives each of them.
    problem = Problem(m, n, k, "bfloat16")
    own = [GemmConfig.from_key(raw) for raw in inductor_configs(problem, search_space, "2.13")
           if fits_shared_memory(raw, 2, get_device("h100"))]
    assert for_problem(problem, "h100", search_space, "2.13") == own


@pytest.mark.parametrize("config, dtype, reason", [
    (GemmConfig(block_m=128, block_n=128, block_k=128, num_stages=4, num_warps=8), "bfloat16",
     "128x128x128 s4 w8 needs 262,272 B of shared memory per block for bfloat16; h100 allows 232,448 B"),
    (GemmConfig(block_m=256, block_n=256, block_k=32, num_stages=4, num_warps=4), "bfloat16",
     "256x256x32 s4 w4 needs 512 accumulator registers per thread; a thread may use 255"),
    (GemmConfig(block_m=512, block_n=256, block_k=16, num_stages=1, num_warps=32), "bfloat16",
     "512x256x16 s1 w32 needs 131,072 accumulator registers per block; h100 has 65,536 per SM"),
    (GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=4, num_warps=8), "float32",
     "128x128x64 s4 w8 needs 262,272 B of shared memory per block for float32; h100 allows 232,448 B"),
    (GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=4, num_warps=8), "bfloat16", None),
])
def test_unfit_reason_names_the_figure_and_the_limit(config: GemmConfig, dtype: str, reason: str | None):
    assert unfit_reason(config, dtype, get_device("h100")) == reason


def test_the_lut_check_is_the_spaces_one_check():
    from kernel_select.lut import hardware

    assert hardware.unfit_reason is unfit_reason


@pytest.mark.parametrize("device", ["h100", "a100"])
@pytest.mark.parametrize("problem", [SEED, Problem(8192, 8192, 8192, "float32"),
                                     Problem(1, 4096, 4096, "float16")])
def test_every_config_the_space_proposes_can_run(device: str, problem: Problem):
    # what the space proposes and what a LUT may hold are limited by the same check
    spec = get_device(device)
    assert all(unfit_reason(c, problem.dtype, spec) is None for c in for_problem(problem, spec))


@pytest.mark.parametrize("version", ["0.1", "3.0", "2.10", "abc", ""])
def test_a_torch_version_whose_lists_are_not_known_is_refused_naming_the_known_ones(version):
    from kernel_select.errors import ConfigError
    from kernel_select.space import check_torch_version

    with pytest.raises(ConfigError, match=r"the config space is known for torch 2.11, 2.12, 2.13 only"):
        for_problem(Problem(64, 64, 64), "h100", "default", torch_version=version)
    assert check_torch_version("2.13.0.dev20250101") == "2.13.0.dev20250101"
    big = Problem(4096, 4096, 4096)
    assert for_problem(big, "h100", "default", "2.12") == for_problem(big, "h100", "default", "2.11")
