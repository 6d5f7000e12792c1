"""The config space must match Inductor's own heuristic output, count for count."""

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
