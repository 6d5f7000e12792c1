"""Feature version 3: v2 plus per-operand memory instructions, with the same two entry points."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.model import features_v2 as v2
from kernel_select.model import features_v3 as v3
from kernel_select.problem import Problem
from kernel_select.space import for_problem

CONFIG = GemmConfig(block_m=64, block_n=128, block_k=32, num_stages=3, num_warps=4)


def _value(name: str, m: int, n: int, k: int, dtype: str = "float16", config: GemmConfig = CONFIG) -> float:
    return float(v3.featurize(m, n, k, dtype, [config], "h100")[0, v3.FEATURE_NAMES.index(name)])


def test_v2_is_a_prefix_and_the_frame_path_equals_the_config_path():
    problems = [Problem(560, 1280, 3420, "bfloat16"), Problem(17, 4095, 101, "float16"),
                Problem(9, 130, 66, "float32")]
    configs = [for_problem(p, "h100")[:40] for p in problems]
    per_problem = [v3.featurize(p.m, p.n, p.k, p.dtype, c, "h100") for p, c in zip(problems, configs)]
    for p, c, x in zip(problems, configs, per_problem):
        assert x.shape == (len(c), len(v3.FEATURE_NAMES)) and x.dtype == np.float32 and np.isfinite(x).all()
        v2_part = v2.featurize(p.m, p.n, p.k, p.dtype, c, "h100")
        np.testing.assert_array_equal(x[:, :len(v2.FEATURE_NAMES)], v2_part)
    frame = pd.DataFrame([{"m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, **cfg.model_dump()}
                          for p, c in zip(problems, configs) for cfg in c])
    np.testing.assert_array_equal(v3.featurize_frame(frame, "h100"), np.concatenate(per_problem))


def test_loads_count_vector_width_per_operand():
    # 128 threads; A tile 64x32 fp16 = 4 KiB, B tile 32x128 = 8 KiB
    assert np.exp(_value("log_a_loads_per_thread_step", 512, 512, 512)) == pytest.approx(4096 / 16 / 128)
    assert np.exp(_value("log_b_loads_per_thread_step", 512, 512, 512)) == pytest.approx(8192 / 16 / 128)
    # odd K: A rows start on 2-byte boundaries, so A needs 8x the loads; B is unchanged
    assert np.exp(_value("log_a_loads_per_thread_step", 512, 512, 511)) == pytest.approx(4096 / 2 / 128)
    assert _value("log_b_loads_per_thread_step", 512, 512, 511) == _value("log_b_loads_per_thread_step",
                                                                          512, 512, 512)
    # odd N narrows B loads and C stores; both odd adds the two operands' costs
    both = np.exp(_value("log_loads_per_thread_step", 512, 511, 511))
    assert both == pytest.approx(4096 / 2 / 128 + 8192 / 2 / 128)
    assert _value("log_c_stores_per_thread", 512, 511, 512) > _value("log_c_stores_per_thread", 512, 512, 512)


def test_fp32_vectors_reach_16_bytes_at_4_elements():
    assert _value("log_b_loads_per_thread_step", 64, 4, 64, "float32") == pytest.approx(
        _value("log_b_loads_per_thread_step", 64, 4096, 64, "float32"))
    assert _value("log_b_loads_per_thread_step", 64, 6, 64, "float32") > _value(
        "log_b_loads_per_thread_step", 64, 4, 64, "float32")


def test_empty_config_list():
    assert v3.featurize(64, 64, 64, "bfloat16", [], "h100").shape == (0, len(v3.FEATURE_NAMES))
