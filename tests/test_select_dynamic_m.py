"""Ranking over a spread of M (a dynamic sequence length) instead of one hinted M."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.errors import ProblemError
from kernel_select.model import PerformanceModel
from kernel_select.problem import Problem, default_spread, spread_ms
from kernel_select.decision import select

SMALL = GemmConfig(block_m=32, block_n=64, block_k=64, num_stages=3, num_warps=4)
LARGE = GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=3, num_warps=8)
STEADY = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
PROBLEM = Problem(512, 1280, 3420, "bfloat16")


class TileModel(PerformanceModel):
    """SMALL wins at M <= 512 and loses 3x above; LARGE the reverse; STEADY is 10% behind the
    winner everywhere. Every other config is 5x slower."""

    name = "tiles"

    def predict(self, problem: Problem, device: object, configs: Sequence[GemmConfig]) -> np.ndarray:
        m = problem.m
        small_wins = m <= 512
        table = {SMALL: 1.0 if small_wins else 3.0, LARGE: 3.0 if small_wins else 1.0, STEADY: 1.1}
        return np.array([table.get(c, 5.0) * m for c in configs])


def test_one_m_ranks_for_that_m_and_a_spread_for_all_of_them():
    model = TileModel("h100")
    tiny = GemmConfig(block_m=16, block_n=16, block_k=16, num_stages=1, num_warps=1)
    candidates = [SMALL, LARGE, STEADY, tiny]
    assert select(PROBLEM, model=model, gemm_topk=1, candidates=candidates).configs == (SMALL,)
    at_4096 = select(PROBLEM, model=model, gemm_topk=1, candidates=candidates, m_values=[4096])
    assert at_4096.configs == (LARGE,)
    over = select(PROBLEM, model=model, gemm_topk=3, candidates=candidates,
                  m_values=[2048, 128, 8192, 512, 128])
    assert over.configs == (STEADY, SMALL, LARGE)
    assert over.choices[0].predicted_ms == pytest.approx(1.1 * 512)  # reported at the hinted M
    assert over.m_values == (128, 512, 2048, 8192)  # sorted, once each


def test_the_default_space_for_a_spread_is_the_one_of_its_largest_m():
    chosen = select(Problem(16, 1280, 3420, "bfloat16"), model=TileModel("h100"), gemm_topk=1,
                    m_values=[16, 4096])
    assert chosen.configs == (STEADY,)  # a 128-row tile only exists in the space of a large M


def test_spreads_are_log_spaced_and_include_their_ends():
    assert spread_ms(560, 8192) == (560, 1095, 2142, 4189, 8192)
    assert spread_ms(7, 7) == (7,) and spread_ms(1, 2) == (1, 2)
    assert default_spread(1024) == spread_ms(256, 4096)
    assert default_spread(1)[0] == 1
    with pytest.raises(ProblemError):
        spread_ms(10, 5)


@pytest.mark.parametrize("ms", [[], [0], [1.5], [True]])
def test_bad_ms_are_refused(ms: list):
    with pytest.raises(ProblemError, match="m_values: expected positive integers"):
        select(PROBLEM, model=TileModel("h100"), gemm_topk=1, candidates=[SMALL], m_values=ms)


def test_a_pin_covering_part_of_the_served_range_is_used_and_says_what_it_leaves_out():
    from kernel_select.lut import LUTEntry, SizeRange, lut_from_rows

    lut = lut_from_rows([("h100", "mm", "bfloat16", LUTEntry(m=SizeRange(min=256, max=1023), n=1280, k=3420,
                                                             pin=SMALL)),
                         ("h100", "mm", "bfloat16", LUTEntry(m=SizeRange(min=1024, max=8192), n=1280, k=3420,
                                                             pin=LARGE))])
    model = TileModel("h100")
    inside = select(PROBLEM, model=model, lut=lut, served={"m": (256, 1023)})
    assert inside.pinned == SMALL and inside.pin_gap == ""  # a graph per bucket: its bucket's pin
    across = select(PROBLEM, model=model, lut=lut, served={"m": (256, 8192)})
    assert across.pinned == SMALL and across.pin_gap == (
        "the kernel serves m=256..8192, the pinned entry only m=256..1023 (the LUT pins other m separately)")
    assert select(PROBLEM, model=model, lut=lut).pin_gap == ""  # nothing known of the served range
