"""The feature function: one definition for a list of configs (inference) and for a frame of dataset
rows (training), versions 4 and 5."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.model.features import FEATURE_SETS, FEATURE_VERSION, V4_NAMES, featurize
from kernel_select.offline.training.features import featurize_frame
from kernel_select.problem import Problem
from kernel_select.space import for_problem

H100 = get_device("h100")
SEED = Problem(560, 1280, 3420, "bfloat16")
V5_NAMES = FEATURE_SETS[5]


def _column(name: str) -> int:
    return V5_NAMES.index(name)


def test_the_versions_are_4_and_5_and_new_models_use_5():
    assert set(FEATURE_SETS) == {4, 5} and FEATURE_VERSION == 5
    assert len(V4_NAMES) == 59 and V5_NAMES == V4_NAMES + ("log_batch",)
    assert len(set(V5_NAMES)) == len(V5_NAMES)


@pytest.mark.parametrize("version", [4, 5])
def test_shape_dtype_and_finite_over_the_seed_space(version: int):
    configs = for_problem(SEED, H100)
    x = featurize(SEED, configs, H100, version)
    assert x.shape == (len(configs), len(FEATURE_SETS[version]))
    assert x.dtype == np.float32
    assert np.isfinite(x).all()


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_version_5_of_one_gemm_is_version_4_and_a_zero_log_batch(layout: str, dtype: str):
    problem = Problem(1000, 1001, 999, dtype, layout=layout)
    configs = for_problem(problem, H100)
    v4, v5 = featurize(problem, configs, H100, 4), featurize(problem, configs, H100, 5)
    np.testing.assert_array_equal(v5[:, :-1], v4)
    np.testing.assert_array_equal(v5[:, -1], np.zeros(len(configs), dtype=np.float32))


def test_version_5_counts_the_batch_and_version_4_describes_one_gemm_of_it():
    config = [GemmConfig(block_m=64, block_n=64, block_k=64, num_stages=3, num_warps=4)]
    one, eight = Problem(128, 64, 64, "bfloat16"), Problem(128, 64, 64, "bfloat16", op="bmm", batch=8)
    np.testing.assert_array_equal(featurize(eight, config, H100, 4), featurize(one, config, H100, 4))
    single, batched = featurize(one, config, H100, 5)[0], featurize(eight, config, H100, 5)[0]
    assert batched[_column("log_batch")] == pytest.approx(np.log(8))
    assert batched[_column("log_ctas")] == pytest.approx(np.log(2 * 8))  # 2 tiles per GEMM, 8 GEMMs
    gflop = _column("log_total_gflop")
    assert batched[gflop] == pytest.approx(single[gflop] + np.log(8))
    assert batched[_column("log_m")] == single[_column("log_m")]  # each GEMM's own sizes are unchanged


def _frame(problems: list[Problem], configs: list[GemmConfig]) -> pd.DataFrame:
    return pd.DataFrame([{"m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, "layout": p.layout,
                          "batch": p.batch, **c.model_dump()} for p, c in zip(problems, configs)])


@pytest.mark.parametrize("version", [4, 5])
def test_the_frame_path_equals_the_config_path_row_for_row(version: int):
    """Training featurizes a whole frame of mixed problems at once; each row must be what inference
    computes for its problem alone."""
    problems = [SEED, Problem(17, 4096, 100, "float32", layout="nt"),
                Problem(3420, 1280, 560, "float16", layout="tn"),
                Problem(128, 64, 64, "bfloat16", op="bmm", batch=8, layout="tt"),
                Problem(33, 65, 127, "float32", op="bmm", batch=3)]
    rows_problems, rows_configs, expected = [], [], []
    for problem in problems:
        configs = for_problem(problem, H100)[::37]
        rows_problems += [problem] * len(configs)
        rows_configs += configs
        expected.append(featurize(problem, configs, H100, version))
    order = np.random.default_rng(0).permutation(len(rows_configs))  # problems interleaved in the frame
    frame = _frame([rows_problems[i] for i in order], [rows_configs[i] for i in order])
    np.testing.assert_array_equal(featurize_frame(frame, H100, version), np.concatenate(expected)[order])


def test_a_frame_without_layout_or_batch_columns_is_nn_single_gemms():
    configs = for_problem(SEED, H100)[:20]
    frame = _frame([SEED] * len(configs), configs).drop(columns=["layout", "batch"])
    np.testing.assert_array_equal(featurize_frame(frame, "h100", 5), featurize(SEED, configs, H100, 5))


def test_geometry_features_have_their_meaning():
    config = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
    row = featurize(Problem(100, 256, 96, "bfloat16"), [config], H100)[0]
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
    assert row[_column("log_batch")] == 0.0


def test_the_layout_columns_read_each_operands_contiguous_dimension():
    config = [GemmConfig(block_m=64, block_n=64, block_k=64, num_stages=3, num_warps=4)]
    nn, tn = (featurize(Problem(511, 512, 512, "bfloat16", layout=layout), config, H100)[0]
              for layout in ("nn", "tn"))
    assert nn[_column("a_transposed")] == 0 and tn[_column("a_transposed")] == 1
    # "nn": A is contiguous along K (512 elements); "tn": along M (511, odd: one element, 2 bytes)
    assert nn[_column("log2_a_contig_align_bytes")] > tn[_column("log2_a_contig_align_bytes")] == 1


@pytest.mark.parametrize("version", [4, 5])
def test_empty_config_list(version: int):
    assert featurize(SEED, [], H100, version).shape == (0, len(FEATURE_SETS[version]))
