"""The feature function: one definition for a frame of dataset rows and for a list of configs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.errors import ProblemError
from kernel_select.model.features import FEATURE_NAMES, featurize, featurize_frame
from kernel_select.problem import Problem
from kernel_select.space import for_problem

SEED = Problem(560, 1280, 3420, "bfloat16")


def _column(name: str) -> int:
    return FEATURE_NAMES.index(name)


def test_shape_dtype_and_finite_over_the_seed_space():
    configs = for_problem(SEED, "h100")
    x = featurize(SEED.m, SEED.n, SEED.k, "bf16", configs, "h100")
    assert x.shape == (len(configs), len(FEATURE_NAMES))
    assert x.dtype == np.float32
    assert np.isfinite(x).all()
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)


def test_frame_path_equals_config_path():
    configs = for_problem(SEED, "h100")[:50] + for_problem(Problem(17, 4096, 100, "float32"), "h100")[:50]
    problems = [SEED] * 50 + [Problem(17, 4096, 100, "float32")] * 50
    frame = pd.DataFrame([{"m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, **c.model_dump()}
                          for p, c in zip(problems, configs)])
    expected = np.concatenate([featurize(SEED.m, SEED.n, SEED.k, "bfloat16", configs[:50], "h100"),
                               featurize(17, 4096, 100, "float32", configs[50:], "h100")])
    np.testing.assert_array_equal(featurize_frame(frame, "h100"), expected)


def test_geometry_features_have_their_meaning():
    config = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
    row = featurize(100, 256, 96, "bfloat16", [config], "h100")[0]
    assert row[_column("tile_eff_m")] == pytest.approx(100 / 128)  # two 64-row tiles
    assert row[_column("tile_eff_n")] == pytest.approx(1.0)
    assert row[_column("tile_eff_k")] == pytest.approx(96 / 128)
    assert row[_column("even_k")] == 0.0
    assert row[_column("log_ctas")] == pytest.approx(np.log(2 * 2))
    assert row[_column("log_k_iters")] == pytest.approx(np.log(2))
    assert row[_column("log2_k_align")] == pytest.approx(5)  # 96 = 3 * 32
    assert row[_column("log2_n_align")] == pytest.approx(7)  # capped at 128
    assert row[_column("log_acc_regs_per_thread")] == pytest.approx(np.log(64 * 128 / 128))
    assert row[_column("last_wave_fill")] == pytest.approx(4 / 132)


def test_unknown_dtype_is_a_problem_error():
    with pytest.raises(ProblemError, match="dtype"):
        featurize(64, 64, 64, "int8", for_problem(Problem(64, 64, 64), "h100"), "h100")


def test_empty_config_list():
    assert featurize(64, 64, 64, "bfloat16", [], "h100").shape == (0, len(FEATURE_NAMES))
