"""The handler and TF32: it reads Inductor's own ALLOW_TF32 for each float32 GEMM, and a GEMM that runs
with TF32, which no shipped model was trained on, gets Inductor's own candidates beside the model's picks
(the outside path), with the reason logged; record() and from-log file such GEMMs under the LUT's "tf32"."""

from __future__ import annotations

import logging

import pytest
import torch

pytest.importorskip("torch._inductor.kernel_template_choice")

from torch._inductor.kernel_template_choice import KernelTemplateChoice  # noqa: E402
from torch._inductor.template_heuristics.params import DictKernelTemplateParams  # noqa: E402

import kernel_select.inductor as ks_inductor  # noqa: E402
from kernel_select.configs import GemmConfig, torch_minor_version  # noqa: E402
from kernel_select.inductor import inputs  # noqa: E402
from kernel_select.inductor.probe import ChoiceTiming  # noqa: E402
from kernel_select.inductor.record import Feedback, lut_from_feedback  # noqa: E402
from kernel_select.lut.autotune_log import lut_from_autotune_log  # noqa: E402
from kernel_select.problem import Problem  # noqa: E402
from tests.inductor.kit import (  # noqa: E402
    FakeInputs, FakeTemplate, INDUCTOR_FIRST, finalize, params_config, triton_of)
from tests.inductor_doubles import FakeModel  # noqa: E402


def _candidates(inputs_: FakeInputs, allow_tf32: bool) -> dict[str, list]:
    """Inductor-like choices whose Triton candidates carry ALLOW_TF32 as Inductor's heuristic sets it."""
    def choice(uid: str, **params: object) -> KernelTemplateChoice:
        return KernelTemplateChoice(template=FakeTemplate(uid), params=DictKernelTemplateParams(dict(params)),
                                    extra_kwargs={"ALLOW_TF32": allow_tf32}, layout="layout", inputs=inputs_)

    triton = [choice("triton::mm", **{**INDUCTOR_FIRST, "num_stages": 1 + i % 5, "BLOCK_K": 16 << (i % 3)})
              for i in range(12)]
    return {"aten::mm": [choice("aten::mm")], "triton::mm": triton}


@pytest.fixture
def fp32_inputs() -> FakeInputs:
    return FakeInputs(560, 1280, 3420, dtype=torch.float32)


def test_a_gemm_inductor_runs_with_tf32_gets_inductors_own_configs_beside_the_models(
        fp32_inputs: FakeInputs, caplog: pytest.LogCaptureFixture):
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_device="h100")  # the shipped H100 model
    own = _candidates(fp32_inputs, allow_tf32=True)
    with caplog.at_level(logging.INFO, logger="kernel_select"):
        result = triton_of(finalize(handler, fp32_inputs, own))
    selection = handler.selections[-1]
    assert selection.problem == Problem(560, 1280, 3420, "float32", tf32=True)
    assert "TF32" in selection.outside and selection.cublas is None
    inductors = [params_config(c) for c in own["triton::mm"]]
    assert [params_config(c) for c in result[:len(inductors)]] == inductors  # Inductor's own, first
    assert {params_config(c) for c in result} == set(inductors) | set(selection.configs)
    assert all(c.extra_kwargs == {"ALLOW_TF32": True} for c in result)  # compiled as Inductor would
    assert any("TF32" in r.getMessage() and "Inductor's own configs beside" in r.getMessage()
               for r in caplog.records)


def test_a_float32_gemm_without_tf32_is_ranked_by_the_model_alone(fp32_inputs: FakeInputs):
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_device="h100")
    result = triton_of(finalize(handler, fp32_inputs, _candidates(fp32_inputs, allow_tf32=False)))
    selection = handler.selections[-1]
    assert selection.problem.tf32 is False and selection.outside == ""
    assert [params_config(c) for c in result] == list(selection.configs)


def test_a_bf16_gemm_is_never_tf32_whatever_inductor_emits():
    half = FakeInputs(560, 1280, 3420, dtype=torch.bfloat16)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100")
    finalize(handler, half, _candidates(half, allow_tf32=True))  # Inductor emits it; tl.dot ignores it
    assert handler.selections[-1].problem.tf32 is False


def _with_precision(precision: str):  # noqa: ANN202
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = precision
    return before


@pytest.mark.parametrize("precision", ["tf32", "ieee"])
def test_without_a_triton_candidate_the_rule_decides_under_the_running_precision(precision: str):
    before = _with_precision(precision)
    try:
        large = inputs.runs_tf32(FakeInputs(560, 1280, 3420, dtype=torch.float32))
        decode = inputs.runs_tf32(FakeInputs(4, 1280, 3420, dtype=torch.float32))
    finally:
        torch.backends.cuda.matmul.fp32_precision = before
    assert large is (precision == "tf32")
    # torch 2.13 runs M < 16 without TF32; torch 2.11 runs every float32 GEMM with it
    assert decode is (precision == "tf32" and torch_minor_version() < (2, 13))


def test_inductors_own_flag_wins_over_the_rule():
    before = _with_precision("ieee")
    try:
        fp32 = FakeInputs(560, 1280, 3420, dtype=torch.float32)
        assert inputs.runs_tf32(fp32, _candidates(fp32, allow_tf32=True)["triton::mm"][:1])
    finally:
        torch.backends.cuda.matmul.fp32_precision = before


def test_record_files_a_tf32_gemm_under_the_tf32_list():
    config = GemmConfig(block_m=64, block_n=128, block_k=32, num_stages=3, num_warps=4)
    timings = (ChoiceTiming("triton_mm_1", "triton", 0.1, config), ChoiceTiming("mm", "extern", 0.2, None))
    tf32 = Feedback(Problem(560, 1280, 3420, "float32", tf32=True), None, timings, "nn")
    ieee = Feedback(Problem(560, 1280, 3420, "float32"), None, timings, "nn")
    rows = list(lut_from_feedback([tf32, ieee], "h100").entries())
    assert sorted(row.dtype for row in rows) == ["float32", "tf32"]


def test_from_log_files_a_gemm_whose_template_ran_with_allow_tf32_under_tf32():
    def block(tf32: bool, m: int) -> str:
        return (f"AUTOTUNE mm({m}x3420, 3420x1280)\nstrides: [3420, 1], [1280, 1]\n"
                "dtypes: torch.float32, torch.float32\n"
                f"  triton_mm_1 0.0303 ms 100.0% ACC_TYPE='tl.float32', ALLOW_TF32={tf32}, BLOCK_K=32, "
                "BLOCK_M=64, BLOCK_N=128, EVEN_K=False, GROUP_M=8, USE_FAST_ACCUM=False, num_stages=3, "
                "num_warps=4\n  mm 0.0400 ms 75.8%\n")
    lut = lut_from_autotune_log(block(True, 560) + block(False, 1024), "h100")
    assert {(row.dtype, row.entry.m) for row in lut.entries()} == {("tf32", 560), ("float32", 1024)}
