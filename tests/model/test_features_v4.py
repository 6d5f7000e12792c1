"""Feature version 4: v3 plus the operand layout and the alignment each layout makes matter."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.errors import ProblemError
from kernel_select.model import features_v3 as v3
from kernel_select.model import features_v4 as v4
from kernel_select.problem import Problem
from kernel_select.space import for_problem

CONFIG = GemmConfig(block_m=64, block_n=128, block_k=32, num_stages=3, num_warps=4)


def _value(name: str, m: int, n: int, k: int, layout: str, dtype: str = "float16",
           config: GemmConfig = CONFIG) -> float:
    x = v4.featurize(m, n, k, dtype, [config], "h100", layout=layout)
    return float(x[0, v4.FEATURE_NAMES.index(name)])


def test_v3_is_a_prefix_and_the_frame_path_equals_the_config_path():
    problems = [Problem(560, 1280, 3420, "bfloat16"), Problem(17, 4095, 101, "float16", layout="nt"),
                Problem(9, 130, 66, "float32", layout="tn"), Problem(33, 48, 7, "float16", layout="tt")]
    configs = [for_problem(p, "h100")[:40] for p in problems]
    per_problem = [v4.featurize(p.m, p.n, p.k, p.dtype, c, "h100", layout=p.layout)
                   for p, c in zip(problems, configs)]
    for p, c, x in zip(problems, configs, per_problem):
        assert x.shape == (len(c), len(v4.FEATURE_NAMES)) and x.dtype == np.float32 and np.isfinite(x).all()
        v3_part = v3.featurize(p.m, p.n, p.k, p.dtype, c, "h100")
        np.testing.assert_array_equal(x[:, :len(v3.FEATURE_NAMES)], v3_part)
    frame = pd.DataFrame([{"m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, "layout": p.layout,
                           **cfg.model_dump()} for p, c in zip(problems, configs) for cfg in c])
    np.testing.assert_array_equal(v4.featurize_frame(frame, "h100"), np.concatenate(per_problem))


def test_nn_layout_columns_repeat_what_v3_sees():
    # "nn": A is read along K, B along N, exactly v3's per-operand alignment and loads
    for m, n, k in ((512, 512, 512), (512, 511, 512), (512, 512, 511), (17, 96, 4095)):
        assert _value("a_transposed", m, n, k, "nn") == 0 and _value("b_transposed", m, n, k, "nn") == 0
        for layout_name, v3_name in (("log2_a_contig_align_bytes", "log2_k_align_bytes"),
                                     ("log2_b_contig_align_bytes", "log2_n_align_bytes")):
            assert _value(layout_name, m, n, k, "nn") == _value(v3_name, m, n, k, "nn")
        assert _value("log_a_layout_loads_per_thread_step", m, n, k, "nn") == pytest.approx(
            _value("log_a_loads_per_thread_step", m, n, k, "nn"))


def test_a_transposed_operand_is_aligned_by_its_contiguous_dimension():
    # "tn": A is stored [K, M], so odd M (not odd K) narrows its loads; B is unchanged
    assert _value("a_transposed", 512, 512, 512, "tn") == 1
    assert _value("a_contig_vector_aligned", 512, 512, 511, "tn") == 1
    assert _value("a_contig_vector_aligned", 511, 512, 512, "tn") == 0
    assert np.exp(_value("log_a_layout_loads_per_thread_step", 511, 512, 512, "tn")) == pytest.approx(
        64 * 32 * 2 / 2 / 128)
    # a problem narrower than the tile loses the contiguity hint on M: one element per load
    assert _value("a_offsets_hinted", 48, 512, 512, "tn") == 0
    assert _value("a_offsets_hinted", 48, 512, 512, "nn") == 1
    assert np.exp(_value("log_a_layout_loads_per_thread_step", 48, 512, 512, "tn")) == pytest.approx(
        64 * 32 * 2 / 2 / 128)


def test_b_transposed_operand_is_aligned_by_k():
    # "nt" (x @ W.t()): B is stored [N, K], read along K; odd N no longer narrows B, odd K does
    assert _value("b_contig_vector_aligned", 512, 511, 512, "nt") == 1
    assert _value("b_contig_vector_aligned", 512, 512, 511, "nt") == 0
    assert _value("b_contig_vector_aligned", 512, 511, 512, "nn") == 0
    assert _value("b_offsets_hinted", 512, 64, 512, "nt") == 1  # K offsets are an arange
    assert _value("b_offsets_hinted", 512, 64, 512, "nn") == 0  # N = 64 < BLOCK_N = 128


def test_unknown_layout_and_empty_config_list():
    with pytest.raises(ProblemError, match="layout"):
        v4.featurize(64, 64, 64, "bfloat16", [CONFIG], "h100", layout="xx")
    assert v4.featurize(64, 64, 64, "bfloat16", [], "h100", layout="nt").shape == (0, len(v4.FEATURE_NAMES))
