"""Evaluation metrics on tiny hand-made datasets whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kernel_select.offline.data import dataset, problem_ids
from kernel_select.offline.training.evaluate import best_in_top_k, evaluate, spearman_per_group, topk_scores
from kernel_select.offline.training.report import format_report
from kernel_select.model import PerformanceModel
from kernel_select.problem import Problem
from kernel_select.space import for_problem
from tests.synthetic import DEVICE

PROBLEMS = [Problem(256, 256, 256), Problem(512, 128, 1024)]


class TableModel(PerformanceModel):
    """Looks predictions up in a {(m, n, k, config key): ms} table, optionally reversed."""

    name = "table"

    def __init__(self, table, reverse=False):
        super().__init__("h100")
        self.table, self.reverse = table, reverse

    def predict(self, problem, device, configs):
        ms = np.array([self.table[(problem.m, problem.n, problem.k, c.key)] for c in configs])
        return 1.0 / ms if self.reverse else ms


def test_best_in_top_k_and_ties_keep_row_order():
    groups = np.array([0, 0, 0, 1, 1])
    scores = np.array([3.0, 1.0, 1.0, 0.5, 0.2])
    runtime = np.array([1.0, 5.0, 2.0, 4.0, 8.0])
    # group 0 ranks rows 1, 2 (tie: row order), 0; group 1 ranks rows 4, 3
    np.testing.assert_array_equal(best_in_top_k(groups, scores, runtime, (1, 2, 3)),
                                  [[5.0, 2.0, 1.0], [8.0, 4.0, 4.0]])
    np.testing.assert_allclose(topk_scores(groups, scores, runtime, (1, 2)), [[0.2, 0.5], [0.5, 1.0]])


def test_spearman_is_one_for_the_same_order_and_minus_one_reversed():
    groups = np.repeat([0, 1], 5)
    values = np.r_[np.arange(5.0), np.arange(5.0) ** 2]
    np.testing.assert_allclose(spearman_per_group(groups, values, values * 3), [1.0, 1.0])
    np.testing.assert_allclose(spearman_per_group(groups, -values, values), [-1.0, -1.0])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """Two test-split problems, 12 configs each (its DEFAULT configs among them), one aten row each."""
    rng = np.random.default_rng(3)
    rows, table = [], {}
    for p in PROBLEMS:
        configs = for_problem(p, DEVICE)
        default = {c.key for c in for_problem(p, DEVICE, "default", "2.11")}
        chosen = ([c for c in configs if c.key in default][:4]
                  + [c for c in configs if c.key not in default][:8])
        runtime = rng.permutation(np.arange(1, len(chosen) + 1, dtype=float))  # 1 .. 12 ms, oracle 1
        runtime[:4] = [3.0, 4.0, 5.0, 6.0]  # the DEFAULT configs: best of them is 3 ms
        runtime[4:] = rng.permutation([1.0, 2.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0])
        pid = problem_ids.problem_id(p.m, p.n, p.k, p.dtype)
        for c, t in zip(chosen, runtime):
            table[(p.m, p.n, p.k, c.key)] = t
            rows.append({**c.model_dump(), "backend": "triton", "runtime_ms": t, "status": "ok"})
            rows[-1].update(problem_id=pid, m=p.m, n=p.n, k=p.k)
        rows.append({"block_m": 0, "block_n": 0, "block_k": 0, "num_stages": 0, "num_warps": 0, "group_m": 0,
                     "backend": "aten", "runtime_ms": 0.5 if p is PROBLEMS[0] else 2.0, "status": "ok",
                     "problem_id": pid, "m": p.m, "n": p.n, "k": p.k})
        # a failed config is not part of the ranked space
        rows.append({**chosen[0].model_dump(), "block_k": 16, "backend": "triton", "runtime_ms": np.inf,
                     "status": "compile_error", "problem_id": pid, "m": p.m, "n": p.n, "k": p.k})
    frame = pd.DataFrame(rows).assign(
        batch=1, dtype="bfloat16", op="mm", layout="nn", even_k=True, allow_tf32=False, n_runs=1,
        runtime_min_ms=lambda d: d["runtime_ms"], error="", split="test", device_name=DEVICE.name,
        sm_count=132, torch_version="2.11.0", triton_version="3.6.0", git_sha="x", timestamp="t",
        timing_method="synthetic")
    path = tmp_path_factory.mktemp("tiny") / "tiny.parquet"
    dataset.write(frame, path)
    return path, table


def test_perfect_model_scores_one_and_reversed_model_the_worst(tiny):
    path, table = tiny
    report = evaluate(path, "test", [TableModel(table)])
    assert report["problems"] == 2 and report["rows"] == 24
    assert report["methods"]["table"]["topk"] == {str(k): 1.0 for k in (1, 2, 4, 8, 16)}
    assert report["methods"]["table"]["spearman"]["median"] == pytest.approx(1.0)

    worst = evaluate(path, "test", [TableModel(table, reverse=True)])["methods"]["table"]
    # the reversed model ranks 12, 11, 10, ... ms first in both problems: score(k) = 1 / (13 - k)
    for k in (1, 2, 4, 8):
        assert worst["topk"][str(k)] == pytest.approx(1 / (13 - k))
    assert worst["topk"]["16"] == pytest.approx(1.0)
    assert worst["spearman"]["median"] == pytest.approx(-1.0)
    assert [w["score"] for w in worst["worst"]["1"]] == pytest.approx([1 / 12, 1 / 12])


def test_two_models_are_compared_per_problem_with_an_interval(tiny):
    path, table = tiny
    reversed_model = TableModel(table, reverse=True)
    reversed_model.name = "reversed"
    report = evaluate(path, "test", [TableModel(table), reversed_model], random_seeds=2)
    paired = report["paired"]
    assert paired["reference"] == "table" and paired["ks"] == [1, 2, 4, 8, 16]
    result = paired["methods"]["reversed"]
    assert result["problems"] == 2
    # score(k) is 1 / (13 - k) for the reversed model and 1 for the perfect one, on both problems:
    # the same ratio twice, so the interval is that point.
    for k in (1, 2, 4, 8):
        ratio = result["ratio"][str(k)]
        assert (ratio["ratio"], ratio["low"], ratio["high"]) == pytest.approx((1 / (13 - k),) * 3)
    assert result["ratio"]["16"]["ratio"] == pytest.approx(1.0)
    text = format_report(report)
    assert "paired bootstrap: geomean of score(k) / table's" in text
    assert "reversed" in text and "k=1 0.083 [0.083, 0.083]" in text
    assert "paired" not in evaluate(path, "test", [TableModel(table)], random_seeds=2)  # nothing to pair


def test_baselines(tiny):
    path, _ = tiny
    report = evaluate(path, "test", [], random_seeds=25)
    default = report["methods"]["inductor_default"]
    assert default["score"] == pytest.approx(1 / 3)  # best DEFAULT config is 3 ms, the oracle 1 ms
    random = report["methods"]["random"]["topk"]
    assert 1 / 12 < random["1"] < random["4"] < random["8"] < 1.0 and random["16"] == 1.0
    assert report["cublas"] == {"problems": 2, "cublas_wins_fraction": 0.5,
                                "geomean_cublas_over_oracle": pytest.approx(1.0),
                                "median_cublas_over_oracle": pytest.approx(1.25)}
    nvmmh = report["methods"]["nvmatmulheuristics"]
    assert "skipped" in nvmmh or "topk" in nvmmh


def test_a_device_without_a_trained_model_is_reported_as_skipped(tiny, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNEL_SELECT_MODELS_DIR", str(tmp_path))  # nothing of the user's either
    a100 = tmp_path / "a100.parquet"  # rows of the device scored: another's are left out (device_rows)
    dataset.write(dataset.read(tiny[0]).assign(device_name="NVIDIA A100-SXM4-80GB", sm_count=108), a100)
    report = evaluate(a100, "test", ["mlp", "analytical"], device="a100")
    assert "no trained model for a100" in report["methods"]["mlp"]["skipped"]
    assert "topk" in report["methods"]["analytical"]  # the others are still scored


def test_a_model_that_does_not_load_is_reported_as_skipped_naming_the_file(tiny, tmp_path, monkeypatch):
    (tmp_path / "h100").mkdir()
    (tmp_path / "h100" / "mlp.json").write_text("{not json")  # the user's h100 model, broken
    monkeypatch.setenv("KERNEL_SELECT_MODELS_DIR", str(tmp_path))
    report = evaluate(tiny[0], "test", ["mlp"])
    assert str(tmp_path / "h100" / "mlp.json") in report["methods"]["mlp"]["skipped"]


def test_the_cublas_rule_report_asks_about_each_problem_as_it_is():
    # The model's cuBLAS head sees each problem's layout and batch; a batched GEMM, where the head
    # makes no decision (None), is left out of the report rather than scored as a single mm.
    from kernel_select.offline.training.model_extras import cublas_rule_report

    asked = []

    class Head:
        def estimate_aten(self, problem):
            asked.append(problem)
            return None if problem.batch > 1 else 1.0

    problems = [Problem(64, 64, 64, "bfloat16", layout="nt"),
                Problem(64, 64, 64, "bfloat16", batch=8, op="bmm"), Problem(128, 64, 64, "bfloat16")]
    groups = np.array([0, 0, 1, 1, 2, 2])
    runtime = np.array([0.5, 0.6, 0.5, 0.6, 2.0, 2.2])
    report = cublas_rule_report(Head(), problems, groups, runtime, runtime, np.array([1.0, 1.0, 1.0]),
                                np.array([[0.5], [0.5], [2.0]]), [1])
    assert asked == problems
    assert report["problems"] == 2
    # problem 0: Triton predicted at 0.5 against cuBLAS at 1.0, offered; problem 2: cuBLAS predicted
    # faster, skipped
    assert report["margins"]["0"]["triton_skipped"] == pytest.approx(0.5)


def test_train_and_evaluate_share_one_device_rule(tiny, tmp_path, caplog):
    import logging

    from kernel_select.device import get_device
    from kernel_select.errors import DatasetError
    from kernel_select.offline.data.device_rows import device_rows

    path, table = tiny
    frame = dataset.read(path)
    mixed = pd.concat([frame, frame.assign(device_name="NVIDIA A100-SXM4-80GB", sm_count=108)])
    mixed_path = tmp_path / "mixed.parquet"
    dataset.write(mixed, mixed_path)
    with pytest.raises(DatasetError, match=r"mixed.parquet: rows come from 2 devices \(a100, h100\); name"):
        evaluate(mixed_path, "test", [TableModel(table)])
    with caplog.at_level(logging.WARNING):
        named = evaluate(mixed_path, "test", [TableModel(table)], device="h100")
    assert (named["problems"], named["rows"]) == (2, 24)  # the H100 rows only, as on the H100 file
    assert "leaving out 28 rows measured on devices other than h100 (a100)" in caplog.text
    spec, rows = device_rows(mixed, get_device("h100"), [mixed_path])  # what train keeps, too
    assert spec.key == "h100" and len(rows) == len(frame)
    with pytest.raises(DatasetError, match="no rows measured on h200 \\(the rows come from a100, h100\\)"):
        device_rows(mixed, "h200", [mixed_path])
    with pytest.raises(DatasetError, match="tiny.parquet: no rows to use"):  # not "devices []"
        evaluate(path, "family", [TableModel(table)])


class OutsideItsDomain(PerformanceModel):
    """Another model's predictions, from a model whose training covered no problem (domain_gap)."""

    name = "outside"

    def __init__(self, inner):
        super().__init__("h100")
        self.inner = inner

    def predict(self, problem, device, configs):
        return self.inner.predict(problem, device, configs)

    def domain_gap(self, problem):
        return "no training problem like it"


def gate_skipping_everything():
    """A cuBLAS gate that predicts cuBLAS e^5 times faster everywhere: it skips every Triton config."""
    import torch

    from kernel_select.model.cublas import CublasGate
    from tests.synthetic import untrained_problem_net

    gate = untrained_problem_net(CublasGate)
    with torch.no_grad():
        gate.net[-1].weight.zero_()
        gate.net[-1].bias.fill_(-5.0)
    return gate


def test_the_gate_skips_triton_only_where_the_handler_lets_it_decide(tmp_path, monkeypatch):
    """decision.py makes no cuBLAS decision for a problem outside the model's domain (Inductor
    benchmarks cuBLAS and the configs): eval's "+gate" figures skip Triton only inside it."""
    from kernel_select.offline.training import baseline_scores
    from tests.synthetic import synthetic_frame, untrained_mlp

    monkeypatch.setattr(baseline_scores, "odd_n_and_k", lambda problem: False)  # the next test's rule
    path = tmp_path / "d.parquet"
    dataset.write(synthetic_frame({"train": 0, "val": 0, "test": 5}, configs_per_problem=30), path)
    inside = untrained_mlp()
    report = evaluate(path, "test", [inside, OutsideItsDomain(inside)], device="h100",
                      gate=gate_skipping_everything())
    with_cublas = report["with_cublas"]
    assert with_cublas["gate"]["margins"]["0.15"]["gated"] == 1.0
    for k in ("1", "4"):
        assert with_cublas["methods"]["mlp+gate"][k] == pytest.approx(with_cublas["methods"]["cublas"])
        outside = with_cublas["methods"]["outside"][k]
        assert with_cublas["methods"]["outside+gate"][k] == pytest.approx(outside)
    assert with_cublas["gate"]["benchmarked_outside_domain"] == {"mlp": 0, "outside": 5}


def test_the_gate_decides_nothing_for_odd_n_with_odd_k_as_in_the_handler(tmp_path, monkeypatch):
    """decision.odd_n_and_k: no cuBLAS decision there either, so eval's "+gate" figures keep Triton."""
    from kernel_select.offline.training import baseline_scores
    from tests.synthetic import synthetic_frame, untrained_mlp

    monkeypatch.setattr(baseline_scores, "odd_n_and_k", lambda problem: True)
    path = tmp_path / "d.parquet"
    dataset.write(synthetic_frame({"train": 0, "val": 0, "test": 5}, configs_per_problem=30), path)
    report = evaluate(path, "test", [untrained_mlp()], device="h100", gate=gate_skipping_everything())
    with_cublas = report["with_cublas"]
    assert with_cublas["gate"]["margins"]["0.15"]["gated"] == 1.0  # the gate's own call is reported
    for k in ("1", "4"):
        assert with_cublas["methods"]["mlp+gate"][k] == pytest.approx(with_cublas["methods"]["mlp"][k])
