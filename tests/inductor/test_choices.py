"""The choices handler on the CPU: which candidates it hands Inductor, and its fallbacks."""

from __future__ import annotations

import json
import logging
import math
import pickle
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import sympy
import torch

pytest.importorskip("torch._inductor.kernel_template_choice")

from torch._inductor.template_heuristics.params import DictKernelTemplateParams  # noqa: E402

from torch._inductor import config as inductor_config  # noqa: E402

import kernel_select.inductor as ks_inductor  # noqa: E402
import kernel_select.knobs as ks_config  # noqa: E402
from kernel_select import device as device_module  # noqa: E402
from kernel_select import runtime  # noqa: E402
from kernel_select.configs import GemmConfig  # noqa: E402
from kernel_select.device import get_device  # noqa: E402
from kernel_select.inductor import pointwise_epilogue  # noqa: E402
from kernel_select.inductor.inputs import row_bias  # noqa: E402
from kernel_select.model import base as model_base  # noqa: E402
from kernel_select.model.card import GpuIdentity  # noqa: E402
from kernel_select.model.cublas import POINTWISE_KERNEL_MS  # noqa: E402
from kernel_select.problem import Problem  # noqa: E402
from kernel_select.resources import MODELS_DIR_ENV, shipped_dir  # noqa: E402
from kernel_select.decision import select  # noqa: E402
from kernel_select.space import for_problem, shared_memory_bytes  # noqa: E402
from tests.inductor.kit import (  # noqa: E402
    FakeInputs, FakeNode, INDUCTOR_FIRST, LUT_A, LUT_B, SEED, finalize, inductor_candidates,
    params_config, triton_of, use_gate, warnings_of)
from tests.inductor_doubles import BrokenModel, FakeGate, FakeModel, expected_top  # noqa: E402


# -- selection ------------------------------------------------------------------------------------

def test_triton_candidates_become_topk_with_lut_entries_first(lut_file: Path):
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    model = FakeModel()
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, kernel_lut_path=str(lut_file), gemm_model=model,
                                              gemm_device="h100")

    result = finalize(handler, inputs, candidates)

    triton = [c for c in result if c.template.uid == "triton::mm"]
    assert [params_config(c) for c in triton] == expected_top(SEED, 4, pinned=[LUT_A, LUT_B])
    assert model.calls == 1  # one batched estimate over the whole space
    selection = handler.selections[-1]
    assert selection.sources[:2] == ("lut", "lut") and selection.ranked == len(for_problem(SEED, "h100"))


def test_configs_come_from_the_exhaustive_space_not_inductors_list():
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=8, gemm_model=FakeModel(), gemm_device="h100")
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    chosen = [params_config(c) for c in triton]
    assert chosen == expected_top(SEED, 8)
    assert len(set(chosen)) == 8
    inductor_defaults = {params_config(c) for c in inductor_candidates(inputs)["triton::mm"]}
    assert not set(chosen) & inductor_defaults  # none of them came from Inductor's 20


def test_aten_and_other_templates_pass_through_in_order():
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100")
    result = finalize(handler, inputs, candidates)
    assert result[0] is candidates["aten::mm"][0]
    assert result[-1] is candidates["decompose_k"][0]
    assert [c.template.uid for c in result] == ["aten::mm", "triton::mm", "triton::mm", "decompose_k"]


def _addmm_candidates(inputs: FakeInputs) -> dict[str, list]:
    """tuned_addmm's ATen call as torch 2.11 makes it (bias epilogue first), plus Triton."""
    from tests.inductor.kit import ktc

    return {"aten::bias_addmm": [ktc("aten::bias_addmm", inputs)],
            "aten::addmm": [ktc("aten::addmm", inputs)],
            "triton::mm": inductor_candidates(inputs)["triton::mm"]}


def test_addmm_offers_the_bias_epilogue_alone_of_the_aten_choices():
    inputs = FakeInputs(560, 1280, 3420)
    candidates = _addmm_candidates(inputs)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100")
    result = finalize(handler, inputs, candidates, op="addmm")
    assert [c.template.uid for c in result] == ["aten::bias_addmm", "triton::mm", "triton::mm"]
    assert result[0] is candidates["aten::bias_addmm"][0]


def test_plain_addmm_stays_where_it_is_the_only_aten_choice_or_the_handler_is_off():
    inputs = FakeInputs(560, 1280, 3420)
    only_addmm = {uid: c for uid, c in _addmm_candidates(inputs).items() if uid != "aten::bias_addmm"}
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100")
    assert [c.template.uid for c in finalize(handler, inputs, only_addmm, op="addmm")][0] == "aten::addmm"
    same = ks_inductor.KernelSelectChoices(gemm_topk="SAME", gemm_model=FakeModel(), gemm_device="h100")
    uids = [c.template.uid for c in finalize(same, inputs, _addmm_candidates(inputs), op="addmm")]
    assert uids[:2] == ["aten::bias_addmm", "aten::addmm"] and len(uids) == 22  # Inductor's list, untouched
    mm_call = {"aten::addmm": [c for c in _addmm_candidates(inputs)["aten::addmm"]]}
    assert len(finalize(handler, inputs, {**mm_call, "aten::bias_addmm": []}, op="addmm")) == 1


ROW_BIAS = FakeNode((560, 1280), (0, 1))  # nn.Linear's bias as tuned_addmm expands it


@pytest.mark.parametrize("bias, expected", [
    (ROW_BIAS, True), (FakeNode((1280,), (1,)), True), (FakeNode((560, 1280), (1280, 1)), False),
    (FakeNode((560, 1280), (sympy.Symbol("s0"), 1)), False), (None, False)])
def test_row_bias_reads_whether_the_bias_is_one_row(bias: FakeNode | None, expected: bool):
    inputs = FakeInputs(560, 1280, 3420, bias=bias)
    assert row_bias(inputs, "addmm") is expected
    assert row_bias(inputs, "mm") is False


@pytest.mark.parametrize("bias, skips", [(ROW_BIAS, True), (FakeNode((560, 1280), (1280, 1)), False)])
def test_addmms_triton_call_drops_the_margin_for_a_row_bias(monkeypatch: pytest.MonkeyPatch,
                                                           bias: FakeNode, skips: bool):
    # tuned_addmm asks for the Triton templates in a call of their own, without the ATen choices: the
    # bias input tells that cuBLAS runs the bias-epilogue call there. Ratio 0.9 is inside the 0.15 margin.
    use_gate(monkeypatch, FakeGate(ratio=0.9))
    inputs = FakeInputs(560, 1280, 3420, bias=bias)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              gemm_cublas_margin=0.15)
    triton_call = {"triton::mm": inductor_candidates(inputs)["triton::mm"]}
    triton = triton_of(finalize(handler, inputs, triton_call, op="addmm"))
    assert handler.selections[-1].cublas.bias_epilogue is skips and (triton == []) is skips


def test_synthesized_candidates_keep_inductors_problem_kwargs_and_extras():
    inputs = FakeInputs(512, 1024, 4096)
    candidates = inductor_candidates(inputs)
    base = candidates["triton::mm"][0]
    base.params = DictKernelTemplateParams({**INDUCTOR_FIRST, "ACC_TYPE": "tl.float16", "FUTURE_KNOB": 7})
    handler = ks_inductor.KernelSelectChoices(gemm_topk=3, gemm_model=FakeModel(), gemm_device="h100")

    overrides = {"triton::mm": {"USE_FAST_ACCUM": True}}
    triton = triton_of(finalize(handler, inputs, candidates, overrides=overrides))

    assert len(triton) == 3
    for choice in triton:
        kwargs = choice.params.to_kwargs()
        assert kwargs["EVEN_K"] == (4096 % kwargs["BLOCK_K"] == 0)
        assert kwargs["ACC_TYPE"] == "tl.float16" and kwargs["FUTURE_KNOB"] == 7  # from Inductor's base
        assert kwargs["USE_FAST_ACCUM"] is True  # kwarg_overrides win, as in make_ktc_generator
        assert kwargs["hint_override"] is None and "ALLOW_TF32" not in kwargs
        assert choice.extra_kwargs is base.extra_kwargs
        assert choice.layout is base.layout and choice.inputs is base.inputs
        assert choice.template is base.template


def test_even_k_is_false_when_k_is_symbolic():
    import sympy

    inputs = FakeInputs(256, 256, 4096, k_symbolic=sympy.Symbol("s0", positive=True, integer=True))
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100")
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert triton and not any(c.params.to_kwargs()["EVEN_K"] for c in triton)


def test_bmm_uses_the_batch_and_the_bmm_template():
    inputs = FakeInputs(128, 256, 512, batch=6)
    candidates = inductor_candidates(inputs, triton_uid="triton::bmm")
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100")
    triton = [c for c in finalize(handler, inputs, candidates, op="bmm") if c.template.uid == "triton::bmm"]
    assert len(triton) == 2
    assert handler.selections[-1].problem == Problem(128, 256, 512, "bfloat16", batch=6, op="bmm")


def test_default_topk_benchmarks_as_many_as_inductors_default_list():
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk="DEFAULT", gemm_model=FakeModel(), gemm_device="h100")
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert len(triton) == len(for_problem(SEED, "h100", "default"))


@pytest.mark.parametrize("case", ["same", "cpu", "op", "dtype", "no-triton", "empty-triton"])
def test_pass_through_cases(case: str):
    inputs = FakeInputs(560, 1280, 3420, dtype=torch.int8 if case == "dtype" else torch.bfloat16,
                        device_type="cpu" if case == "cpu" else "cuda")
    candidates = inductor_candidates(inputs)
    if case == "no-triton":
        del candidates["triton::mm"]
    if case == "empty-triton":  # the template is listed but its heuristic yields nothing
        candidates["triton::mm"] = []
    model = FakeModel()
    topk = "SAME" if case == "same" else 2
    handler = ks_inductor.KernelSelectChoices(gemm_topk=topk, gemm_model=model, gemm_device="h100")
    result = finalize(handler, inputs, candidates, op="mm-ah" if case == "op" else "mm")
    assert result == [c for items in candidates.values() for c in items]
    assert model.calls == 0


# -- failures fall back to Inductor's own candidates -------------------------------------------------

def run_two_gemms(handler, caplog):  # noqa: ANN001, ANN201
    results = []
    for m in (560, 1024):
        inputs = FakeInputs(m, 1280, 3420)
        candidates = inductor_candidates(inputs)
        with caplog.at_level(logging.WARNING, logger="kernel_select.inductor"):
            results.append((finalize(handler, inputs, candidates), candidates))
    return results


@pytest.mark.parametrize("broken", ["lut-garbage", "lut-missing", "model-estimate", "model-name", "inputs"])
def test_failures_fall_back_with_exactly_one_warning(broken: str, lut_file: Path, tmp_path: Path,
                                                     caplog: pytest.LogCaptureFixture):
    kwargs: dict[str, object] = {"gemm_topk": 4, "gemm_device": "h100", "gemm_model": FakeModel()}
    if broken == "lut-garbage":
        lut_file.write_text("{ this is not a LUT")
        kwargs["kernel_lut_path"] = str(lut_file)
    elif broken == "lut-missing":
        kwargs["kernel_lut_path"] = str(tmp_path / "nope.json")
    elif broken == "model-estimate":
        kwargs["gemm_model"] = BrokenModel()
    elif broken == "model-name":
        kwargs["gemm_model"] = "no-such-model"
    handler = ks_inductor.KernelSelectChoices(**kwargs)

    if broken == "inputs":
        for m in (560, 1024):
            inputs = FakeInputs(m, 1280, 3420)
            candidates = inductor_candidates(inputs)
            with caplog.at_level(logging.WARNING, logger="kernel_select.inductor"):
                result = finalize(handler, object(), candidates)  # not a KernelInputs at all
            assert result == [c for items in candidates.values() for c in items]
    else:
        for result, candidates in run_two_gemms(handler, caplog):
            assert result == [c for items in candidates.values() for c in items]  # all 22, same objects
    assert len(warnings_of(caplog)) == 1


def test_invalid_torch_option_value_falls_back(caplog: pytest.LogCaptureFixture):
    assert ks_inductor.register_options()
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100")
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    with inductor_config.patch(gemm_topk="lots"), caplog.at_level(logging.WARNING):
        result = finalize(handler, inputs, candidates)
    assert len(result) == 22
    assert "gemm_topk" in warnings_of(caplog)[0].getMessage()


# -- the cuBLAS gate ------------------------------------------------------------------------------

def test_gate_that_prefers_cublas_leaves_only_aten_and_other_templates(monkeypatch: pytest.MonkeyPatch):
    use_gate(monkeypatch, FakeGate(ratio=0.8))
    inputs = FakeInputs(16, 1024, 4096)
    candidates = inductor_candidates(inputs)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              gemm_cublas_margin=0.05)
    result = finalize(handler, inputs, candidates)
    assert [c.template.uid for c in result] == ["aten::mm", "decompose_k"]
    selection = handler.selections[-1]
    assert selection.configs == () and selection.skips_triton


def test_gate_keeps_lut_entries_when_it_skips_the_model_ranking(monkeypatch: pytest.MonkeyPatch,
                                                                lut_file: Path):
    use_gate(monkeypatch, FakeGate(ratio=0.5))
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, kernel_lut_path=str(lut_file),
                                              gemm_model=FakeModel(), gemm_device="h100",
                                              gemm_cublas_margin=0.05)
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert [params_config(c) for c in triton] == [LUT_A, LUT_B]


@pytest.mark.parametrize("ratio, margin", [(0.96, 0.05), (1.3, 0.0)])
def test_gate_within_its_margin_changes_nothing(monkeypatch: pytest.MonkeyPatch, ratio: float, margin: float):
    use_gate(monkeypatch, FakeGate(ratio=ratio))
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              gemm_cublas_margin=margin)
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert [params_config(c) for c in triton] == expected_top(SEED, 4)
    assert not handler.selections[-1].cublas.prefers_cublas



class SmallCublasModel(FakeModel):
    """FakeModel that predicts cuBLAS at `aten_ms` for every problem."""

    def __init__(self, aten_ms: float) -> None:
        super().__init__()
        self.aten_ms = aten_ms

    def estimate_aten(self, problem: Problem) -> float:
        return self.aten_ms


@pytest.mark.parametrize("aten_ms, skips", [(0.01, True), (0.2, False)])
def test_a_small_gemm_skips_triton_on_any_predicted_cublas_win(monkeypatch: pytest.MonkeyPatch,
                                                               aten_ms: float, skips: bool):
    # Ratio 0.96 is within the 0.15 margin; below SMALL_GEMM_MS the margin no longer applies.
    use_gate(monkeypatch, FakeGate(ratio=0.96))
    inputs = FakeInputs(16, 1024, 4096)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=SmallCublasModel(aten_ms),
                                              gemm_device="h100", gemm_cublas_margin=0.15)
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert handler.selections[-1].cublas.small is skips and (triton == []) is skips

@pytest.mark.parametrize("separate", [True, False])
def test_a_pointwise_epilogue_cublas_leaves_unfused_is_charged_to_it(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture,
                                                                     separate: bool):
    # 1 x 1024 x 3456 (the recommendation tower at batch 1): cuBLAS predicted 5 us and 4% faster than
    # Triton, but beside it a ReLU runs as a kernel of its own (~1 us), which a Triton template fuses.
    asked: list[int] = []
    monkeypatch.setattr(pointwise_epilogue, "lowering_has_separate_epilogue",
                        lambda elements: asked.append(elements) or separate)
    use_gate(monkeypatch, FakeGate(ratio=0.96))
    inputs = FakeInputs(1, 1024, 3456)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=SmallCublasModel(0.005),
                                              gemm_device="h100", gemm_cublas_margin=0.15)
    with caplog.at_level(logging.INFO, logger="kernel_select.inductor.choices"):
        triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    decision = handler.selections[-1].cublas
    assert ("leaves unfused" in caplog.text) is separate  # the log line gives both ratios
    assert asked == [1 * 1024] and (decision.epilogue_factor == pytest.approx(1.2)) is separate
    assert (len(triton) == 4) is separate and (triton == []) is not separate


def test_without_a_gate_the_models_cublas_time_decides_and_is_charged_too(monkeypatch: pytest.MonkeyPatch):
    # cuBLAS predicted at 0.005 ms against FakeModel's best Triton time of over 1 ms at M = 1
    monkeypatch.setattr(pointwise_epilogue, "lowering_has_separate_epilogue", lambda elements: True)
    use_gate(monkeypatch, None)
    inputs = FakeInputs(1, 1024, 3456)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=SmallCublasModel(0.005),
                                              gemm_device="h100", gemm_cublas_margin=0.15)
    result = finalize(handler, inputs, inductor_candidates(inputs))
    assert [c.template.uid for c in result] == ["aten::mm", "decompose_k"]
    decision = handler.selections[-1].cublas
    assert decision.source == "model" and decision.charged_epilogue
    assert decision.epilogue_factor == pytest.approx(1 + POINTWISE_KERNEL_MS / 0.005)
    assert "leaves unfused" in decision.describe()


def user_model_folder(root: Path, device: str, cublas_scale: float) -> None:
    """A model folder for `device` in the user's model directory, as a training on that GPU leaves it:
    an MLP and its cuBLAS time head (the shipped H100 weights, with the head's predictions scaled
    by `cublas_scale`), and no cuBLAS gate."""
    shipped, folder = shipped_dir("models") / "h100", root / device
    folder.mkdir(parents=True)
    for stem in ("mlp", "aten"):
        card = json.loads((shipped / f"{stem}.json").read_text())
        gpu = GpuIdentity.of(get_device(device)).model_dump(mode="json")  # the card names the GPU it was on
        (folder / f"{stem}.json").write_text(json.dumps({**card, "device": device, "gpu": gpu}))
        state = torch.load(shipped / f"{stem}.pt", weights_only=True)
        if stem == "aten":  # the head predicts log ms: its output layer's bias scales every prediction
            output_bias = max((name for name in state if name.endswith(".bias")),
                              key=lambda name: int(name.split(".")[0]))
            state[output_bias] += math.log(cublas_scale)
        torch.save(state, folder / f"{stem}.pt")


@pytest.mark.parametrize("cublas_scale, offers_triton", [(0.01, False), (100.0, True)])
def test_without_a_gate_file_a_user_models_cublas_time_decides_what_inductor_receives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cublas_scale: float, offers_triton: bool):
    # No gate for an A100 anywhere (its own folder, a same-architecture one, the shipped models).
    user_model_folder(tmp_path / "models", "a100", cublas_scale)
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "models"))
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_device="a100", gemm_cublas_margin=0.15)
    result = finalize(handler, inputs, candidates)
    assert runtime.gate(get_device("a100")) is None
    selection = handler.selections[-1]
    assert selection.cublas.source == "model" and selection.cublas.prefers_cublas is not offers_triton
    if offers_triton:
        # the A100's own space, ranked: an H100 config may not fit the A100's shared memory
        a100_space = for_problem(SEED, "a100")
        assert selection.device == "a100" and selection.ranked == len(a100_space)
        assert [params_config(c) for c in triton_of(result)] == list(selection.configs)
        assert len(selection.configs) == 4 and set(selection.configs) <= set(a100_space)
        assert result[0] is candidates["aten::mm"][0]
    else:
        assert result == [candidates["aten::mm"][0], candidates["decompose_k"][0]]


def test_a_device_without_a_trained_model_keeps_inductors_candidates_with_one_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))  # an empty model directory; nothing shipped for an A100
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_device="a100")
    for result, candidates in run_two_gemms(handler, caplog):
        assert result == [c for items in candidates.values() for c in items]
    messages = [r.getMessage() for r in warnings_of(caplog)]
    assert len(messages) == 1 and "no trained model for a100" in messages[0]
    assert not handler.selections


class SharedMemoryHungry(FakeModel):
    """Ranks the configs that use the most shared memory first: on an H100 those are configs an A100
    cannot run, so the top configs differ between the two devices' candidate spaces."""

    def predict(self, problem: Problem, device: object, configs: Sequence[GemmConfig]) -> np.ndarray:
        return np.array([1e6 / shared_memory_bytes(c, problem.dtype_bytes) for c in configs])


@pytest.mark.parametrize("device_from", ["knob", "detected"])
def test_configs_are_ranked_in_the_candidate_space_of_the_device_compiled_for(
        monkeypatch: pytest.MonkeyPatch, device_from: str):
    monkeypatch.setitem(model_base._REGISTRY, ("*", "smem-hungry"), SharedMemoryHungry)
    a100_top = select(SEED, model=SharedMemoryHungry("a100"), gemm_topk=3).configs
    h100_top = select(SEED, model=SharedMemoryHungry("h100"), gemm_topk=3).configs
    assert not set(a100_top) & set(h100_top)  # so a space resolved for the wrong device shows
    if device_from == "detected":
        monkeypatch.setattr(device_module, "detect", lambda index=0: get_device("a100"))
        handler = ks_inductor.KernelSelectChoices(gemm_topk=3, gemm_model="smem-hungry")
    else:
        handler = ks_inductor.KernelSelectChoices(gemm_topk=3, gemm_model="smem-hungry", gemm_device="a100")
    inputs = FakeInputs(560, 1280, 3420)
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert [params_config(c) for c in triton] == list(a100_top)
    assert handler.selections[-1].device == "a100"


def test_gate_off_is_never_consulted(monkeypatch: pytest.MonkeyPatch):
    gate = FakeGate(ratio=0.1)
    use_gate(monkeypatch, gate)
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              gemm_cublas_margin="off")
    assert len(triton_of(finalize(handler, inputs, inductor_candidates(inputs)))) == 4
    assert gate.calls == 0 and handler.selections[-1].cublas is None


def test_gate_off_survives_install_and_the_factory(monkeypatch: pytest.MonkeyPatch):
    gate = FakeGate(ratio=0.1)
    use_gate(monkeypatch, gate)
    with ks_config.patch(gemm_cublas_margin=0.05):  # the knob says "on"; the install() argument wins
        handler = ks_inductor.install(gemm_topk=4, gemm_model="analytical", gemm_device="h100",
                                      gemm_cublas_margin="off")
        rebuilt = inductor_config.inductor_choices_class()  # what Inductor instantiates per compile
        unpickled = pickle.loads(pickle.dumps(inductor_config.inductor_choices_class))()
        assert [h.settings().gemm_cublas_margin for h in (handler, rebuilt, unpickled)] == [None, None, None]
        inputs = FakeInputs(560, 1280, 3420)
        assert len(triton_of(finalize(rebuilt, inputs, inductor_candidates(inputs)))) == 4 and gate.calls == 0


def test_uuid_follows_the_gate_margin_and_weights(monkeypatch: pytest.MonkeyPatch):
    use_gate(monkeypatch, FakeGate(ratio=1.0, tag="weights-1"))
    keys = {margin: ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_device="h100",
                                                    gemm_cublas_margin=margin).uuid()
            for margin in ("off", 0.05, 0.1)}
    assert len(set(keys.values())) == 3
    use_gate(monkeypatch, FakeGate(ratio=1.0, tag="weights-2"))
    assert ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_device="h100",
                                           gemm_cublas_margin=0.05).uuid() != keys[0.05]


def test_uuid_follows_the_decisions_own_rules(monkeypatch: pytest.MonkeyPatch):
    # a rule of decision.py that changes what Inductor receives (odd N with odd K, launch-bound GEMMs)
    # must not let a cache serve choices made under the old rule
    from kernel_select.inductor import cache_key

    before = ks_inductor.KernelSelectChoices(gemm_topk=1, gemm_device="h100").uuid()
    monkeypatch.setattr(cache_key, "RULES", "another rule")
    assert ks_inductor.KernelSelectChoices(gemm_topk=1, gemm_device="h100").uuid() != before


def test_broken_gate_file_falls_back_to_inductors_candidates(monkeypatch: pytest.MonkeyPatch,
                                                             caplog: pytest.LogCaptureFixture):
    from kernel_select.errors import ModelError

    def broken(device: object) -> None:
        raise ModelError("models/h100/cublas_gate.pt: cannot load the cuBLAS gate (truncated)")

    monkeypatch.setattr(runtime, "gate", broken)
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              gemm_cublas_margin=0.05)
    with caplog.at_level(logging.WARNING):
        result = finalize(handler, inputs, candidates)
    assert triton_of(result) == candidates["triton::mm"]
    assert len(warnings_of(caplog)) == 1 and "cublas_gate.pt" in warnings_of(caplog)[0].getMessage()
    handler.uuid()  # a broken gate never breaks the cache key


