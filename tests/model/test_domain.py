"""A model's domain bounds the work of a problem as well as each of its dimensions.

A problem whose M, N and K each lie in the trained ranges can still be far larger than anything its
stratum was trained on (a float32 LM head: 8192 x 30522 x 768); the features are logarithms, so the model
extrapolates without a sign of it. Such a problem is outside the domain (card.WORK_SLACK), and the handler
then benchmarks Inductor's own list beside the model's picks instead of trusting one choice.
"""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from kernel_select.model.card import WORK_SLACK, Domain, outside_domain
from kernel_select.offline.training.domain_claim import domain_union as _domain_union
from kernel_select.offline.training.training_data import domain_of
from kernel_select.problem import Problem

RANGES = {"m": (1, 65536), "n": (8, 65536), "k": (8, 65536)}
#: the largest float32 problem trained on at M > 4096: 8192 x 768 x 768
LARGEST = 2.0 * 8192 * 768 * 768
DOMAIN = Domain(strata={"mm/float32/m>4096": 50, "mm/bfloat16/m>4096": 50}, **RANGES,
                work={"mm/float32/m>4096": LARGEST, "mm/bfloat16/m>4096": 1e12})


def fp32(m: int, n: int, k: int) -> Problem:
    return Problem(m, n, k, "float32", layout="nt")


def test_a_problem_far_past_its_strata_largest_is_outside_though_each_dimension_is_inside():
    head = fp32(8192, 30522, 768)  # 39.7x the largest
    reason = outside_domain(head, ["float32", "bfloat16"], DOMAIN)
    assert "39.7x the largest training problem of mm/float32/m>4096" in reason
    assert f"more than {WORK_SLACK:g}x" in reason


def test_up_to_the_slack_past_the_largest_is_inside():
    assert outside_domain(fp32(8192, 768 * 4, 768), ["float32"], DOMAIN) == ""  # 4x: at the slack
    assert outside_domain(fp32(8192, 768 * 4 + 8, 768), ["float32"], DOMAIN) != ""  # just past it


def test_each_stratum_has_its_own_bound_and_fp16_shares_bf16s():
    big = Problem(8192, 30522, 768, "float16", layout="nt")  # bf16's largest is 1e12: inside
    assert outside_domain(big, ["bfloat16"], DOMAIN) == ""
    assert outside_domain(Problem(8192, 65536, 65536, "float16"), ["bfloat16"], DOMAIN) != ""


def test_a_card_from_before_the_work_was_recorded_bounds_no_work():
    old = DOMAIN.model_copy(update={"work": {}})
    assert outside_domain(fp32(8192, 30522, 768), ["float32"], old) == ""


def test_the_training_rows_give_each_stratum_its_largest_work():
    rows = pd.DataFrame({
        "problem_id": ["a", "a", "b", "c"], "m": [8192, 8192, 5000, 16], "n": [768, 768, 3072, 4096],
        "k": [768, 768, 768, 4096], "batch": [1, 1, 1, 4], "dtype": ["float32"] * 3 + ["bfloat16"],
        "op": ["mm", "mm", "mm", "bmm"], "allow_tf32": [False] * 4})
    domain = domain_of(rows)
    assert domain.work == {"bmm/bfloat16/m<=16": pytest.approx(2.0 * 4 * 16 * 4096 * 4096),
                           "mm/float32/m>4096": pytest.approx(2.0 * 5000 * 3072 * 768)}
    assert domain.strata == {"bmm/bfloat16/m<=16": 1, "mm/float32/m>4096": 2}


def test_two_cards_domains_together_keep_each_strata_larger_bound(caplog):
    other = Domain(strata={"mm/float32/m>4096": 30}, **RANGES, work={"mm/float32/m>4096": 4 * LARGEST})
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        both = _domain_union(DOMAIN, other)
    assert both.work == {"mm/float32/m>4096": 4 * LARGEST, "mm/bfloat16/m>4096": 1e12}
    assert not caplog.records
    # a card with no bound on work bounds nothing, so neither does the union; the loss is said aloud
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        assert _domain_union(DOMAIN, other.model_copy(update={"work": {}})).work == {}
    assert "bounds no stratum's work" in caplog.text


def test_the_shipped_h200_model_sends_bert_fp32s_head_to_inductors_list_and_keeps_the_llama_head():
    from kernel_select import runtime

    model = runtime.model(None, "h200")
    assert "FLOPs" in model.domain_gap(fp32(8192, 30522, 768))
    assert model.domain_gap(Problem(2048, 128256, 4096, "bfloat16", layout="nt")) == ""
    assert model.domain_gap(fp32(8192, 3072, 768)) == ""  # the same network's layers
