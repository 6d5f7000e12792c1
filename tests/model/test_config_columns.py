"""The config-column table: what it returns equals reading the configs afresh, whatever it holds."""

from __future__ import annotations

import threading

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.model.features import FIELDS, ConfigColumns, read_columns
from kernel_select.problem import Problem
from kernel_select.space import for_problem


def _configs(count: int, stages: int = 3) -> list[GemmConfig]:
    blocks = (16, 32, 64, 128)
    return [GemmConfig(block_m=blocks[i % 4], block_n=blocks[i // 4 % 4], block_k=blocks[i // 16 % 4],
                       num_stages=stages, num_warps=(2, 4, 8)[i % 3], group_m=1 + i % 8)
            for i in range(count)]


def test_columns_are_the_fields_in_order():
    config = GemmConfig(block_m=64, block_n=128, block_k=32, num_stages=4, num_warps=8, group_m=4)
    np.testing.assert_array_equal(ConfigColumns()([config]), [[64], [128], [32], [4], [8], [4]])
    assert FIELDS == tuple(GemmConfig.model_fields)  # read_columns relies on no other field


def test_cached_and_unseen_configs_together_in_any_order():
    space = for_problem(Problem(560, 1280, 3420, "bfloat16"), "h100")
    columns = ConfigColumns()
    np.testing.assert_array_equal(columns(space), read_columns(space))
    mixed = _configs(20)[::-1] + space[::7] + [space[3], space[3]]  # unseen, seen, repeated
    np.testing.assert_array_equal(columns(mixed), read_columns(mixed))
    assert len(columns) == len(space) + 20
    assert columns([]).shape == (len(FIELDS), 0)


def test_an_equal_config_in_another_object_and_a_full_table():
    columns = ConfigColumns(max_configs=30)
    first, second = _configs(20), _configs(20, stages=4)  # same tiles, other stages
    np.testing.assert_array_equal(columns(first), read_columns(first))
    np.testing.assert_array_equal(columns(second), read_columns(second))  # over the bound: starts over
    assert len(columns) == 20
    copies = [config.model_copy() for config in second]  # equal values, new objects
    np.testing.assert_array_equal(columns(copies), read_columns(second))


def test_threads_filling_one_table_read_their_own_columns():
    columns, failures = ConfigColumns(max_configs=100), []
    lists = [_configs(40, stages=s) for s in range(1, 9)]

    def work(configs: list[GemmConfig]) -> None:
        for _ in range(20):
            if not np.array_equal(columns(configs), read_columns(configs)):
                failures.append(configs[0].num_stages)

    threads = [threading.Thread(target=work, args=(configs,)) for configs in lists]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
