"""The cuBLAS gate: features, training, saving and loading, and the shipped gate's card."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kernel_select.model.gate import (
    DEFAULT_ARCHITECTURE,
    NO_MARGIN_TIE,
    EPILOGUE_CHARGE_MAX_MS,
    POINTWISE_KERNEL_MS,
    SMALL_GEMM_MS,
    GateDecision,
    GATE_FEATURE_NAMES,
    GATE_V1_FEATURE_NAMES,
    GATE_FILE,
    CublasGate,
    fit_gate,
    gate_features,
    gate_metrics,
    load_default_gate,
    epilogue_charge_ms,
    make_decision,
    problem_ratios,
)
from kernel_select.offline.data.dataset import read_many
from kernel_select.offline.data.splits import split_masks
from kernel_select.device import get_device
from kernel_select.errors import ModelError
from kernel_select.model.card import ModelCard
from kernel_select.problem import Problem
from tests.synthetic import synthetic_frame

REPO = Path(__file__).resolve().parents[2]
H100 = get_device("h100")


@pytest.fixture(scope="module")
def frame():
    return synthetic_frame({"train": 24, "val": 8, "test": 2}, configs_per_problem=24, seed=3)


@pytest.fixture(scope="module")
def gate(frame):
    return fit_gate(frame, H100, epochs=60)


def test_features_are_finite_for_extreme_problems():
    x = gate_features([1, 16384, 7], [16, 32768, 3420], [16, 32768, 28672], [2, 4, 2], H100,
                      ["nn", "nt", "tn"])
    assert x.shape == (3, len(GATE_FEATURE_NAMES)) and np.all(np.isfinite(x))


def test_version_2_features_read_each_operands_contiguous_dimension():
    x = gate_features([511, 511], [512, 512], [512, 512], [2, 2], H100, ["nn", "tn"])
    names = list(GATE_FEATURE_NAMES)
    assert x[0, names.index("a_transposed")] == 0 and x[1, names.index("a_transposed")] == 1
    # "nn": A is aligned by K (512); "tn": by M (511, odd)
    assert x[0, names.index("log2_a_contig_align")] > 0 and x[1, names.index("log2_a_contig_align")] == 0
    np.testing.assert_array_equal(x[:, :len(GATE_V1_FEATURE_NAMES)],
                                  gate_features([511, 511], [512, 512], [512, 512], [2, 2], H100))


def test_a_version_1_gate_still_loads_and_scores_every_layout_as_nn(tmp_path):
    import json

    from kernel_select.model.card import build_body

    arch = DEFAULT_ARCHITECTURE.model_copy(update={"inputs": len(GATE_V1_FEATURE_NAMES)})
    names = list(GATE_V1_FEATURE_NAMES)
    card = ModelCard(model="cublas_gate", device="h100", architecture=arch, feature_version=1,
                     feature_names=names, feature_mean=[0.0] * len(names), feature_std=[1.0] * len(names),
                     dtypes=["bfloat16"])
    CublasGate(H100, build_body(arch), card).save(tmp_path)
    assert json.loads((tmp_path / "cublas_gate.json").read_text())["feature_version"] == 1
    gate = CublasGate.load(tmp_path, H100)
    nn, nt = Problem(64, 4096, 4096, "bfloat16"), Problem(64, 4096, 4096, "bfloat16", layout="nt")
    assert gate.predict_log_ratio([nn]) == gate.predict_log_ratio([nt])


def test_problem_ratios_need_both_a_cublas_and_a_triton_row(frame):
    first_aten = (frame["problem_id"] == frame["problem_id"].iloc[0]) & (frame["backend"] == "aten")
    without_aten = frame[~first_aten]
    table = problem_ratios(without_aten)
    assert frame["problem_id"].iloc[0] not in table.index
    assert len(table) == frame["problem_id"].nunique() - 1 and np.all(np.isfinite(table["log_ratio"]))


def test_training_keeps_the_best_validation_epoch_and_reports_it(gate):
    metrics = gate.card.metrics
    assert (metrics["train_problems"], metrics["val_problems"]) == (24, 8)
    assert gate.card.hyperparameters["seed"] == 0
    assert 10 <= metrics["best_epoch"] <= 60 and metrics["best_epoch"] % 10 == 0
    assert metrics["validation"]["problems"] == 8
    assert set(metrics["validation"]["margins"]) == {"0", "0.05", "0.1", "0.15", "0.2", "0.3"}


def test_save_and_load_round_trip(gate, tmp_path: Path):
    gate.save(tmp_path)
    loaded = CublasGate.load(tmp_path, "h100")
    problems = [Problem(560, 1280, 3420, "bfloat16"), Problem(16, 1024, 4096, "float32")]
    np.testing.assert_array_equal(loaded.predict_log_ratio(problems), gate.predict_log_ratio(problems))
    assert loaded.digest() == gate.digest() and loaded.card == gate.card


def test_decisions_follow_the_margin(gate):
    problem = Problem(560, 1280, 3420, "bfloat16")
    ratio = gate.decide(problem).predicted_ratio
    assert gate.decide(problem, margin=0.0).prefers_cublas == (ratio <= 1.0)
    assert not gate.decide(problem, margin=max(0.0, 1.0 - ratio) + 0.01).prefers_cublas
    assert "cuBLAS gate" in gate.decide(problem).describe()



@pytest.mark.parametrize("ratio, small, skips", [
    (0.95, False, False), (0.95, True, True), (0.84, False, True), (1.0, True, True), (1.01, True, True),
    (1.0 + NO_MARGIN_TIE + 0.001, True, False), (1.2, True, False)])
def test_small_gemms_skip_triton_unless_triton_is_predicted_clearly_faster(ratio: float, small: bool,
                                                                          skips: bool):
    # Below SMALL_GEMM_MS Inductor's benchmark over-times ATen: a near-win for cuBLAS is no longer a
    # tie, and a predicted tie goes to cuBLAS (Inductor cannot fall back to it).
    decision = GateDecision(problem=Problem(16, 1024, 4096, "bfloat16"), predicted_ratio=ratio, margin=0.15,
                            small=small)
    assert decision.prefers_cublas is skips
    assert ("small GEMM" in decision.describe()) is small


@pytest.mark.parametrize("ratio, bias_epilogue, skips", [
    (0.90, False, False), (0.90, True, True), (0.99, True, True), (1.01, True, True), (1.03, True, False),
    (1.01, False, False), (0.84, False, True)])
def test_a_bias_epilogue_gemm_skips_triton_on_any_predicted_cublas_win(ratio: float, bias_epilogue: bool,
                                                                      skips: bool):
    # Inductor over-times cuBLAS's bias-epilogue call, so there the margin would hand ties to Triton.
    decision = GateDecision(problem=Problem(8192, 3072, 768, "bfloat16", op="addmm"), predicted_ratio=ratio,
                            margin=0.15, bias_epilogue=bias_epilogue)
    assert decision.prefers_cublas is skips
    assert ("bias_addmm" in decision.describe()) is bias_epilogue


def test_decide_marks_small_gemms_by_the_predicted_cublas_time(gate):
    problem = Problem(16, 1024, 4096, "bfloat16")
    assert gate.decide(problem, 0.15, predicted_cublas_ms=SMALL_GEMM_MS / 2).small
    assert not gate.decide(problem, 0.15, predicted_cublas_ms=SMALL_GEMM_MS * 2).small
    assert not gate.decide(problem, 0.15).small  # no cuBLAS time: the margin alone decides
    assert gate.decide(problem, 0.15, bias_epilogue=True).no_margin
    assert not gate.decide(problem, 0.15).no_margin

@pytest.mark.parametrize("ratio, cublas_ms, separate, skips, charged", [
    (0.90, 0.005, False, True, False),   # small, biased: a predicted cuBLAS win keeps cuBLAS
    (0.90, 0.005, True, False, True),    # + a 1 us ReLU launch: 0.90 x 1.2 = 1.08, Triton clearly faster
    (0.76, 0.005, True, True, True),     # 0.76 x 1.2 = 0.91: cuBLAS still faster with its extra kernel
    (0.92, EPILOGUE_CHARGE_MAX_MS, True, False, True),  # the largest GEMM charged: 0.92 x 1.125
    (0.96, 0.0095, True, True, False),   # ViT-B/16's fc1 at batch 1: not launch-sized, no charge
    (0.90, None, True, True, False),     # no cuBLAS time to charge against: as before
    (0.86, 0.062, True, True, False),    # GPT-2's c_fc at 8192 x 1024
])
def test_a_separate_epilogue_is_charged_to_cublas_where_the_gemm_is_launch_sized(
        ratio: float, cublas_ms: float | None, separate: bool, skips: bool, charged: bool):
    problem = Problem(1, 1024, 3456, "bfloat16", op="addmm")
    decision = make_decision(problem, ratio, 0.15, cublas_ms, bias_epilogue=True,
                             separate_epilogue=separate)
    assert decision.prefers_cublas is skips
    assert decision.predicted_ratio == ratio  # the GEMMs' own prediction is kept as it was
    expected = 1.0 + POINTWISE_KERNEL_MS / cublas_ms if charged else 1.0
    assert decision.epilogue_factor == pytest.approx(expected)
    assert decision.ratio == pytest.approx(ratio * expected)
    assert ("unfused" in decision.describe()) is charged is decision.charged_epilogue
    launch_sized = cublas_ms is not None and cublas_ms <= EPILOGUE_CHARGE_MAX_MS
    assert epilogue_charge_ms(cublas_ms) == (POINTWISE_KERNEL_MS if launch_sized else 0.0)


def test_the_gate_passes_the_epilogue_on(gate):
    problem = Problem(1, 1024, 3456, "bfloat16", op="addmm")
    plain = gate.decide(problem, 0.15, 0.005, bias_epilogue=True)
    charged = gate.decide(problem, 0.15, 0.005, bias_epilogue=True, separate_epilogue=True)
    assert plain.epilogue_factor == 1.0 and charged.epilogue_factor == pytest.approx(1.2)
    assert charged.predicted_ratio == plain.predicted_ratio


def test_load_errors_name_the_file(gate, tmp_path: Path):
    with pytest.raises(ModelError, match="no trained cublas_gate model"):
        CublasGate.load(tmp_path, "h100")
    gate.save(tmp_path)
    with pytest.raises(ModelError, match="not 'a100'"):
        CublasGate.load(tmp_path, "a100")
    (tmp_path / GATE_FILE).write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match=GATE_FILE):
        CublasGate.load(tmp_path, "h100")


def test_shipped_gate_reproduces_its_validation_figures():
    """The card's numbers are what the shipped weights do on the dataset's validation problems."""
    shipped = load_default_gate("h100")
    assert shipped is not None
    # trained on the three H100 files (every layout), validated on their val problems outside the
    # frozen family holdout
    frame = read_many([REPO / "data" / name for name in ("h100.parquet", "h100_coverage.parquet",
                                                         "h100_layers.parquet")])
    table = problem_ratios(frame[split_masks(frame)["val"]])
    recomputed = gate_metrics(shipped, table)
    card = shipped.card.metrics["validation"]
    assert recomputed["problems"] == card["problems"]
    assert recomputed["sign_accuracy"] == pytest.approx(card["sign_accuracy"])
    for margin, figures in card["margins"].items():
        assert recomputed["margins"][margin]["gated"] == pytest.approx(figures["gated"])
        assert recomputed["margins"][margin]["wrongly_gated"] == figures["wrongly_gated"]


def test_no_gate_for_a_device_without_one():
    assert load_default_gate("a100") is None
