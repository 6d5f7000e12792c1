"""The cuBLAS decision (model/cublas.py): the problem features, the two problem-level networks (the
gate and the cuBLAS time head) on disk, and the one rule, whichever prediction feeds it. Training
them: tests/offline/test_cublas_fit.py."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from tests.synthetic import constant_gate, untrained_mlp, untrained_problem_net

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelCardMismatchError, ModelError
from kernel_select.model.base import PerformanceModel
from kernel_select.model.cublas import (
    DEFAULT_MARGIN,
    EPILOGUE_CHARGE_MAX_MS,
    NO_MARGIN_TIE,
    POINTWISE_KERNEL_MS,
    PROBLEM_FEATURE_NAMES,
    SMALL_GEMM_MS,
    AtenHead,
    CublasDecision,
    CublasGate,
    Epilogue,
    decide,
    epilogue_charge_ms,
    problem_features,
)
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.training.cublas_fit import save_problem_net
from kernel_select.offline.training.train import save_model
from kernel_select.problem import Problem
from kernel_select.decision import select

H100 = get_device("h100")
NAMES = list(PROBLEM_FEATURE_NAMES)
LAYOUT_COLUMNS = ("a_transposed", "b_transposed", "log2_a_contig_align", "log2_b_contig_align")
SEED = Problem(560, 1280, 3420, "bfloat16")


# -- problem features -------------------------------------------------------------------------------

def test_features_are_finite_for_extreme_problems():
    x = problem_features([1, 16384, 7], [16, 32768, 3420], [16, 32768, 28672], [2, 4, 2], [0, 0, 1],
                         [0, 1, 0], H100)
    assert x.shape == (3, len(NAMES)) and x.dtype == np.float32 and np.all(np.isfinite(x))


def test_the_layout_columns_read_each_operands_contiguous_dimension_and_the_rest_ignore_it():
    nn, tn = problem_features([511, 511], [512, 512], [512, 512], [2, 2], [0, 1], [0, 0], H100)
    assert nn[NAMES.index("a_transposed")] == 0 and tn[NAMES.index("a_transposed")] == 1
    # "nn": A is contiguous along K (512); "tn": along M (511, odd)
    assert nn[NAMES.index("log2_a_contig_align")] == 7 and tn[NAMES.index("log2_a_contig_align")] == 0
    sizes = [NAMES.index(name) for name in NAMES if name not in LAYOUT_COLUMNS]
    np.testing.assert_array_equal(nn[sizes], tn[sizes])


def test_the_networks_see_the_problems_layout():
    gate = untrained_problem_net(CublasGate)
    nn, nt = SEED, Problem(SEED.m, SEED.n, SEED.k, SEED.dtype, layout="nt")
    assert gate.predict_log_ratio([nn]) != gate.predict_log_ratio([nt])
    assert gate.predict_log_ratio([]).shape == (0,)


# -- the networks on disk -----------------------------------------------------------------------------

def test_a_gate_round_trips_through_its_checkpoint(tmp_path: Path):
    gate = untrained_problem_net(CublasGate)
    save_problem_net(gate, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cublas_gate.json", "cublas_gate.pt"]
    loaded = CublasGate.load(tmp_path, "h100")
    problems = [SEED, Problem(16, 1024, 4096, "float32", layout="tn")]
    np.testing.assert_array_equal(loaded.predict_log_ratio(problems), gate.predict_log_ratio(problems))
    assert loaded.digest() == gate.digest() and loaded.card == gate.card
    assert loaded.digest() != untrained_problem_net(CublasGate, seed=1).digest()


def test_load_errors_name_the_file(tmp_path: Path):
    with pytest.raises(ModelError, match="no trained cublas_gate model"):
        CublasGate.load(tmp_path, "h100")
    save_problem_net(untrained_problem_net(CublasGate), tmp_path)
    with pytest.raises(ModelCardMismatchError, match="not 'a100'"):
        CublasGate.load(tmp_path, "a100")
    assert CublasGate.load(tmp_path, "h200", allow_same_architecture=True).device.key == "h200"
    (tmp_path / "cublas_gate.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelCardMismatchError, match="cublas_gate.pt"):
        CublasGate.load(tmp_path, "h100")


def test_a_gate_of_another_feature_version_is_refused_with_the_retrain_command(tmp_path: Path):
    # version 1 (no layout columns) is no longer computed: such a gate is retrained, never misread
    save_problem_net(untrained_problem_net(CublasGate), tmp_path)
    card = json.loads((tmp_path / "cublas_gate.json").read_text())
    (tmp_path / "cublas_gate.json").write_text(json.dumps({**card, "feature_version": 1}))
    with pytest.raises(ModelCardMismatchError, match="feature_version 1 .*kernel-select train"):
        CublasGate.load(tmp_path, "h100")


def test_a_gate_card_that_miscounts_its_members_is_refused_naming_the_file(tmp_path: Path):
    # A gate of four averaged networks (MemberMean) and a card saying one, or the other way round, must
    # not load half a model: the weights are checked against the card's architecture before any use.
    save_problem_net(untrained_problem_net(CublasGate), tmp_path)
    card = json.loads((tmp_path / "cublas_gate.json").read_text())
    card["architecture"]["members"] = 4
    (tmp_path / "cublas_gate.json").write_text(json.dumps(card))
    with pytest.raises(ModelCardMismatchError, match=r"cublas_gate.pt: weights do not fit .*4 member"):
        CublasGate.load(tmp_path, "h100")


def test_a_broken_head_file_is_refused_naming_it(tmp_path: Path):
    save_problem_net(untrained_problem_net(AtenHead), tmp_path)
    (tmp_path / "aten.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="aten.pt"):
        AtenHead.load(tmp_path, H100)


def test_the_head_scores_single_gemms_of_its_dtypes():
    head = untrained_problem_net(AtenHead, dtypes=("bfloat16",))
    assert head.supports(SEED) and head.supports(Problem(1, 1024, 4096, "bfloat16", op="addmm"))
    assert not head.supports(Problem(512, 1024, 2048, "bfloat16", op="bmm", batch=4))
    assert not head.supports(Problem(512, 1024, 2048, "float32"))
    ms = head.predict_ms([SEED, Problem(1, 1024, 4096, "bfloat16")])
    assert ms.dtype == np.float64 and np.all(ms > 0)


def test_the_mlp_loads_its_head_and_scores_cublas_only_where_it_can(tmp_path: Path):
    head = untrained_problem_net(AtenHead)
    mlp = untrained_mlp()
    save_model(MLPModel(mlp.device, mlp.net, mlp.card, head), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aten.json", "aten.pt", "mlp.json", "mlp.pt"]
    loaded = MLPModel.load(tmp_path)
    assert loaded.estimate_aten(SEED) == pytest.approx(head.predict_ms([SEED])[0])
    linear = Problem(SEED.m, SEED.n, SEED.k, SEED.dtype, op="addmm")  # a biased nn.Linear: the same GEMM
    assert loaded.estimate_aten(linear) == pytest.approx(head.predict_ms([SEED])[0])
    batched = Problem(512, 1024, 2048, "bfloat16", op="bmm", batch=4)
    assert loaded.estimate_aten(batched) is None  # not measured
    assert loaded.digest() != mlp.digest()  # the head is part of what Inductor's cache keys see
    assert untrained_mlp().estimate_aten(SEED) is None  # no head: no cuBLAS prediction


# -- the rule ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio, prefers_cublas", [(0.84, True), (0.85, True), (0.86, False), (1.0, False),
                                                   (1.2, False)])
def test_cublas_is_preferred_where_predicted_faster_by_the_margin(ratio: float, prefers_cublas: bool):
    decision = decide(ratio, "gate", DEFAULT_MARGIN, predicted_cublas_ms=1.0)
    assert decision.prefers_cublas is prefers_cublas and not decision.no_margin
    assert ("skip the model's Triton picks" in decision.describe()) is prefers_cublas
    assert decision.describe().startswith("cuBLAS decision (gate): predicted cuBLAS / best Triton time")


@pytest.mark.parametrize("ratio, small, skips", [
    (0.95, False, False), (0.95, True, True), (0.84, False, True), (1.0, True, True), (1.01, True, True),
    (1.0 + NO_MARGIN_TIE + 0.001, True, False), (1.2, True, False)])
def test_small_gemms_skip_triton_unless_triton_is_predicted_clearly_faster(ratio: float, small: bool,
                                                                          skips: bool):
    # Below SMALL_GEMM_MS Inductor's benchmark over-times ATen: a near-win for cuBLAS is no longer a
    # tie, and a predicted tie goes to cuBLAS (Inductor cannot fall back to it).
    decision = CublasDecision(predicted_ratio=ratio, source="gate", margin=0.15, small=small)
    assert decision.prefers_cublas is skips
    assert ("small GEMM" in decision.describe()) is small


@pytest.mark.parametrize("ratio, bias_epilogue, skips", [
    (0.90, False, False), (0.90, True, True), (0.99, True, True), (1.01, True, True), (1.03, True, False),
    (1.01, False, False), (0.84, False, True)])
def test_a_bias_epilogue_gemm_skips_triton_on_any_predicted_cublas_win(ratio: float, bias_epilogue: bool,
                                                                      skips: bool):
    # Inductor over-times cuBLAS's bias-epilogue call, so there the margin would hand ties to Triton.
    decision = decide(ratio, "model", 0.15, predicted_cublas_ms=1.0,
                      epilogue=Epilogue(bias_row=bias_epilogue))
    assert decision.prefers_cublas is skips and decision.bias_epilogue is bias_epilogue
    assert ("bias_addmm" in decision.describe()) is bias_epilogue


def test_decide_marks_small_gemms_by_the_predicted_cublas_time():
    assert decide(1.0, "gate", 0.15, SMALL_GEMM_MS / 2).small
    assert not decide(1.0, "gate", 0.15, SMALL_GEMM_MS * 2).small
    assert not decide(1.0, "gate", 0.15, None).small  # no cuBLAS time: the margin alone decides
    assert decide(1.0, "gate", 0.15, None, Epilogue(bias_row=True)).no_margin
    assert not decide(1.0, "gate", 0.15, None).no_margin


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
    decision = decide(ratio, "gate", 0.15, cublas_ms, Epilogue(bias_row=True, separate_pointwise=separate))
    assert decision.prefers_cublas is skips
    assert decision.predicted_ratio == ratio  # the GEMM's own prediction is kept as it was
    expected = 1.0 + POINTWISE_KERNEL_MS / cublas_ms if charged else 1.0
    assert decision.epilogue_factor == pytest.approx(expected)
    assert decision.ratio == pytest.approx(ratio * expected)
    assert ("unfused" in decision.describe()) is charged is decision.charged_epilogue
    launch_sized = cublas_ms is not None and cublas_ms <= EPILOGUE_CHARGE_MAX_MS
    assert epilogue_charge_ms(cublas_ms) == (POINTWISE_KERNEL_MS if launch_sized else 0.0)


def test_the_gates_plain_rule_is_the_margin_on_its_log_ratio():
    gate = untrained_problem_net(CublasGate)
    problems = [SEED, Problem(16, 1024, 4096, "bfloat16"), Problem(8192, 8192, 8192, "float32", layout="nt")]
    log_ratio = gate.predict_log_ratio(problems)
    for margin in (0.0, 0.15, 0.5):
        expected = log_ratio <= math.log(1.0 - margin)
        np.testing.assert_array_equal(gate.skips_triton(problems, margin), expected)


# -- which prediction feeds the rule (select's step 3) --------------------------------------------

class _Fixed(PerformanceModel):
    """Best Triton config predicted at `triton_ms` (the others slower), cuBLAS at `aten_ms`."""

    name = "fixed"

    def __init__(self, triton_ms: float, aten_ms: float | None) -> None:
        super().__init__(H100)
        self.triton_ms, self.aten_ms = triton_ms, aten_ms

    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        return self.triton_ms * (1.0 + 0.01 * np.arange(len(configs)))

    def estimate_aten(self, problem: Problem) -> float | None:
        return self.aten_ms


@pytest.mark.parametrize("triton_ms, prefers_cublas", [(0.90, False), (0.96, False), (1.2, True)])
def test_without_a_gate_the_models_cublas_time_decides_by_the_same_margin(triton_ms: float,
                                                                         prefers_cublas: bool):
    # Triton predicted 4% slower than cuBLAS (ratio 1.04) is within the margin: Triton is benchmarked,
    # as the gate would have it (the rule before 1.0 sent the model's near-ties to cuBLAS).
    decision = select(SEED, model=_Fixed(triton_ms, aten_ms=1.0), cublas_margin=0.15).cublas
    assert decision is not None and decision.source == "model"
    assert decision.predicted_ratio == pytest.approx(1.0 / triton_ms)
    assert decision.prefers_cublas is prefers_cublas and not decision.no_margin
    assert decision.describe().startswith("cuBLAS decision (model)")


@pytest.mark.parametrize("problem, aten_ms, triton_ms, prefers_cublas", [
    (SEED, 0.05, 0.05 / 1.01, True),  # small: no margin, a predicted tie goes to cuBLAS
    (SEED, 0.05, 0.05 / 1.03, False),  # small, Triton clearly faster
    (SEED, 1.0, 1.0 / 1.01, False),  # not small: the margin hands the tie to Triton
    (Problem(SEED.m, SEED.n, SEED.k, SEED.dtype, op="addmm"), 1.0, 1.0 / 1.01, True),  # biased: no margin
])
def test_the_models_cublas_time_gets_the_small_gemm_and_bias_clauses(problem: Problem, aten_ms: float,
                                                                      triton_ms: float, prefers_cublas: bool):
    bias = Epilogue(bias_row=problem.op == "addmm")
    decision = select(problem, model=_Fixed(triton_ms, aten_ms), cublas_margin=0.15, epilogue=bias).cublas
    assert decision is not None and decision.source == "model"
    assert decision.prefers_cublas is prefers_cublas


def test_the_gate_wins_over_the_models_cublas_time_and_gets_its_clauses():
    model = _Fixed(triton_ms=1.0, aten_ms=0.05)  # the model alone: 0.05, cuBLAS by far
    decision = select(SEED, model=model, gate=constant_gate(1.01), cublas_margin=0.15).cublas
    assert decision.source == "gate" and decision.predicted_ratio == pytest.approx(1.01)
    assert decision.small and decision.prefers_cublas  # the model's cuBLAS time marks it small
    charged = select(SEED, model=model, gate=constant_gate(0.9), cublas_margin=0.15,
                     epilogue=Epilogue(separate_pointwise=True)).cublas
    assert charged.epilogue_factor == 1.0  # 0.05 ms is not launch-sized
    tiny = _Fixed(triton_ms=1.0, aten_ms=0.005)
    charged = select(SEED, model=tiny, gate=constant_gate(0.9), cublas_margin=0.15,
                     epilogue=Epilogue(bias_row=True, separate_pointwise=True)).cublas
    assert charged.epilogue_factor == pytest.approx(1.2) and charged.bias_epilogue


def test_no_decision_without_a_margin_or_anything_that_predicts_cublas():
    assert select(SEED, model=_Fixed(1.0, 0.5), cublas_margin=None, gate=constant_gate(0.5)).cublas is None
    assert select(SEED, model=_Fixed(1.0, None), cublas_margin=0.15).cublas is None
