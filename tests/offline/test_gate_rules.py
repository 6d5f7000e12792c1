"""The gate-rule replay: what a small-GEMM zone and a tie tolerance do to the time taken per problem."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from kernel_select.cli import main
from kernel_select.offline.data import dataset
from kernel_select.offline.training.gate_rules import (
    ALWAYS_CUBLAS,
    DEFAULT_RULES,
    DEFAULT_SCENARIOS,
    NEVER_CUBLAS,
    ONE_CHOICE_THRESHOLDS,
    Rule,
    Scenario,
    SplitCase,
    one_choice,
    outcome,
)
from tests.synthetic import synthetic_frame


def one_problem(cublas: float, top_k: float, ratio: float, predicted_cublas: float) -> SplitCase:
    return SplitCase(top_k_ms=np.array([top_k]), top_1_ms=np.array([top_k]), cublas_ms=np.array([cublas]),
                     oracle_ms=np.array([top_k]),
                     predicted_ratio=np.array([ratio]), predicted_cublas_ms=np.array([predicted_cublas]))


def test_an_over_timed_cublas_hands_a_slower_triton_kernel_the_win_unless_the_gate_skips_triton():
    # cuBLAS 0.054 ms, the top-k's best 0.056 ms; Inductor times cuBLAS at 1.3x: Triton is taken.
    case = one_problem(cublas=0.054, top_k=0.056, ratio=1.002, predicted_cublas=0.051)
    over_timed = Scenario(below_ms=0.055, factor=1.3)
    score, slower, _ = outcome(case, over_timed, Rule(small_ms=0.05, tie=0.0))
    assert slower == 1 and score == pytest.approx(0.054 / 0.056)
    # In the zone with a 2% tie, the predicted tie goes to cuBLAS: eager's time, no loss.
    assert outcome(case, over_timed, Rule(small_ms=0.06, tie=0.02))[:2] == (pytest.approx(1.0), 0)
    # Zone alone is not enough at a predicted ratio just above 1; an honest benchmark needs no rule.
    assert outcome(case, over_timed, Rule(small_ms=0.06, tie=0.0))[1] == 1
    honest = Scenario(below_ms=0.055, factor=1.0)
    assert outcome(case, honest, Rule(small_ms=0.05, tie=0.0))[:2] == (pytest.approx(1.0), 0)


def test_skipping_triton_where_it_is_truly_faster_costs_the_difference():
    case = one_problem(cublas=0.062, top_k=0.054, ratio=0.976, predicted_cublas=0.0547)
    over_timed = Scenario(below_ms=0.066, factor=1.3)
    assert outcome(case, over_timed, Rule(small_ms=0.05, tie=0.0))[:2] == (pytest.approx(1.0), 0)
    score, slower, _ = outcome(case, over_timed, Rule(small_ms=0.06, tie=0.0))
    assert score == pytest.approx(0.054 / 0.062) and slower == 0


def test_outside_the_domain_nothing_is_skipped_and_inductors_list_is_benchmarked_beside_the_picks():
    # Skipping Triton would cost 0.062 / 0.054; outside the domain the handler decides nothing, so
    # Inductor's benchmark sees the picks (0.054), its own list (0.050) and cuBLAS, and takes the list's.
    inside = one_problem(cublas=0.062, top_k=0.054, ratio=0.976, predicted_cublas=0.0547)
    case = dataclasses.replace(inside, outside=np.array([True]), default_ms=np.array([0.050]),
                               oracle_ms=np.array([0.050]))
    honest = Scenario(below_ms=0.066, factor=1.0)
    assert outcome(case, honest, Rule(small_ms=0.06, tie=0.0))[:2] == (pytest.approx(1.0), 0)
    assert outcome(dataclasses.replace(case, outside=np.array([False])), honest,
                   Rule(small_ms=0.06, tie=0.0))[0] == pytest.approx(0.050 / 0.062)


def test_the_margin_skips_triton_outside_the_zone():
    case = one_problem(cublas=0.5, top_k=0.7, ratio=0.8, predicted_cublas=0.5)
    rule = Rule(small_ms=0.06, tie=0.0)
    assert outcome(case, DEFAULT_SCENARIOS[0], rule, margin=0.15)[:2] == (pytest.approx(1.0), 0)
    assert outcome(case, Scenario(below_ms=1.0, factor=2.0), Rule(small_ms=0.06, tie=0.0), margin=0.0)[1] == 0


def test_cli_prints_every_scenario_and_rule_and_marks_the_shipped_rule(tmp_path, capsys):
    data, out = tmp_path / "synthetic.parquet", tmp_path / "rules.json"
    dataset.write(synthetic_frame(configs_per_problem=40), data)
    assert main(["gate-rules", "--data", str(data), "--split", "test", "--gemm-topk", "1,4",
                 "--json-out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert len(rows) == 2 * len(DEFAULT_SCENARIOS) * len(DEFAULT_RULES)
    assert all(0 < r["score"] <= 1 and 0 <= r["slower"] <= r["problems"] for r in rows)
    printed = capsys.readouterr().out
    assert printed.count(" * |") == 2 * len(DEFAULT_SCENARIOS)


@pytest.mark.parametrize("args, message", [(["--split", "tset"], "expected names among"),
                                           (["--gemm-topk", "0"], "expected an integer >= 1")])
def test_cli_rejects_bad_splits_and_k(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["gate-rules", "--data", str(tmp_path / "x.parquet"), *args])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_hedge_offers_the_first_pick_where_the_gate_calls_a_close_one_for_cublas():
    # The gate predicts cuBLAS 20% faster (past the 0.15 margin), but the model's first pick is truly
    # 20% faster than cuBLAS: with a hedge of 0.25 it is offered beside cuBLAS and taken (Inductor times
    # honestly here); without, it is lost.
    case = SplitCase(top_k_ms=np.array([0.8]), top_1_ms=np.array([0.8]), cublas_ms=np.array([1.0]),
                     oracle_ms=np.array([0.8]), predicted_ratio=np.array([0.8]),
                     predicted_cublas_ms=np.array([1.0]))
    honest = Scenario(below_ms=0.0, factor=1.0)
    assert outcome(case, honest, Rule(small_ms=0.06, tie=0.02, hedge=0.0)) == (pytest.approx(0.8), 0, 0)
    assert outcome(case, honest, Rule(small_ms=0.06, tie=0.02, hedge=0.25)) == (pytest.approx(1.0), 0, 1)
    # past the margin and the hedge (cuBLAS predicted 45% faster: 0.55 < 1 - 0.15 - 0.25) it offers nothing
    far = SplitCase(**{**case.__dict__, "predicted_ratio": np.array([0.55])})
    assert outcome(far, honest, Rule(small_ms=0.06, tie=0.02, hedge=0.25))[2] == 0


def test_batched_gemms_are_left_out_as_the_gate_decides_nothing_for_them(tmp_path):
    frame = synthetic_frame(configs_per_problem=40)
    test_ids = sorted(frame.loc[frame["split"] == "test", "problem_id"].unique())
    batched = frame["problem_id"] == test_ids[0]
    frame.loc[batched, "batch"] = 8
    frame.loc[batched, "op"] = "bmm"
    data, out = tmp_path / "synthetic.parquet", tmp_path / "rules.json"
    dataset.write(frame, data)
    assert main(["gate-rules", "--data", str(data), "--split", "test", "--gemm-topk", "4",
                 "--json-out", str(out)]) == 0
    assert {row["problems"] for row in json.loads(out.read_text())} == {len(test_ids) - 1}


def _pair(cublas: list[float], top_1: list[float], ratio: list[float]) -> SplitCase:
    """Problems where the model's first config is also the oracle."""
    return SplitCase(top_k_ms=np.array(top_1), top_1_ms=np.array(top_1), cublas_ms=np.array(cublas),
                     oracle_ms=np.array(top_1), predicted_ratio=np.array(ratio),
                     predicted_cublas_ms=np.array(cublas))


def test_one_choice_scores_the_gates_pick_against_the_faster_of_cublas_and_the_first_config():
    # Problem 1: cuBLAS 1.0 ms, Triton 0.8 ms, gate says cuBLAS 10% faster (wrong: costs 1.25x).
    # Problem 2: cuBLAS 0.5 ms, Triton 1.0 ms, gate says cuBLAS 20% faster (right).
    case = _pair(cublas=[1.0, 0.5], top_1=[0.8, 1.0], ratio=[0.9, 0.8])
    at_one = one_choice(case, 1.0)
    assert at_one["rule"] == "ratio < 1" and at_one["threshold"] == 1.0
    assert at_one["cublas_taken"] == 1.0 and at_one["sign_accuracy"] == 0.5
    assert at_one["regret"] == pytest.approx(np.sqrt(1.25)) and at_one["worst"] == pytest.approx(1.25)
    assert at_one["slower"] == 0  # cuBLAS taken everywhere: never slower than eager
    # Below 0.85 only the second problem goes to cuBLAS: both picks right, nothing lost.
    assert one_choice(case, 0.85)["sign_accuracy"] == 1.0 and one_choice(case, 0.85)["regret"] == 1.0
    never = one_choice(case, NEVER_CUBLAS)
    assert never["threshold"] is None and never["cublas_taken"] == 0.0 and never["slower"] == 1
    assert never["regret"] == pytest.approx(np.sqrt(2.0))
    assert one_choice(case, ALWAYS_CUBLAS)["regret"] == at_one["regret"]


def test_one_choice_leaves_a_gemm_outside_the_domain_to_inductors_benchmark():
    # Problem 2 lies outside the model's domain: the handler gives it no decision and benchmarks
    # Inductor's list (best 0.6 ms) beside cuBLAS and the first config, so the gate's wrong call there
    # (cuBLAS, 1.0 ms) costs nothing and is not counted.
    inside = _pair(cublas=[0.5, 1.0], top_1=[1.0, 0.8], ratio=[0.8, 0.9])
    case = dataclasses.replace(inside, outside=np.array([False, True]), default_ms=np.array([0.7, 0.6]),
                               oracle_ms=np.array([1.0, 0.5]))
    at_one = one_choice(case, 1.0)
    assert at_one["benchmarked"] == 1 and at_one["problems"] == 2
    assert at_one["sign_accuracy"] == 1.0 and at_one["regret"] == 1.0 and at_one["cublas_taken"] == 1.0
    # score: problem 1 takes cuBLAS (its best), problem 2 the list's 0.6 against its Triton oracle's 0.5
    assert at_one["score"] == pytest.approx(np.sqrt(0.5 / 0.6))
    assert one_choice(inside, 1.0)["benchmarked"] == 0 and one_choice(inside, 1.0)["sign_accuracy"] == 0.5


def test_odd_n_with_odd_k_is_benchmarked_against_cublas_as_the_handler_does():
    # Problem 2 has odd N and odd K (decision.odd_n_and_k): the handler makes no cuBLAS decision, so
    # Inductor benchmarks the first config (0.8 ms) against cuBLAS (1.0 ms), and the gate's wrong call
    # for cuBLAS there costs nothing; nor does the margin skip its Triton picks.
    inside = _pair(cublas=[0.5, 1.0], top_1=[1.0, 0.8], ratio=[0.8, 0.8])
    case = dataclasses.replace(inside, undecided=np.array([False, True]))
    at_one = one_choice(case, 1.0)
    assert at_one["benchmarked"] == 1 and at_one["sign_accuracy"] == 1.0 and at_one["score"] == 1.0
    assert one_choice(inside, 1.0)["score"] == pytest.approx(np.sqrt(0.8))
    honest = Scenario(below_ms=0.0, factor=1.0)
    assert outcome(case, honest, Rule(small_ms=0.0, tie=0.0))[0] == 1.0
    assert outcome(inside, honest, Rule(small_ms=0.0, tie=0.0))[0] == pytest.approx(np.sqrt(0.8))


def test_cli_one_choice_replays_every_threshold_and_marks_the_shipped_one(tmp_path, capsys):
    data, out = tmp_path / "synthetic.parquet", tmp_path / "one.json"
    dataset.write(synthetic_frame(configs_per_problem=40), data)
    assert main(["gate-rules", "--data", str(data), "--split", "test", "--one-choice",
                 "--json-out", str(out)]) == 0
    rows = json.loads(out.read_text())  # plain JSON: no Infinity
    assert [r["threshold"] for r in rows] == [None, *ONE_CHOICE_THRESHOLDS, None]
    assert all(0 <= r["sign_accuracy"] <= 1 and r["regret"] >= 1 for r in rows)
    assert capsys.readouterr().out.count(" * |") == 1
