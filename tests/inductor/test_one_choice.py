"""gemm_topk=1, the zero-benchmark mode: the cuBLAS decision alone hands Inductor one choice per GEMM
(ATen, or the model's first config), and the GEMMs it cannot decide are benchmarked as before."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch._inductor.kernel_template_choice")

import kernel_select.inductor as ks_inductor  # noqa: E402
from kernel_select.decision import ATEN  # noqa: E402
from kernel_select.inductor import choice_builder, pointwise_epilogue  # noqa: E402
from kernel_select.lut import LUTEntry, lut_from_rows, save_lut  # noqa: E402
from kernel_select.problem import Problem  # noqa: E402
from tests.inductor.kit import (  # noqa: E402
    FakeInputs, LUT_A, LUT_B, SEED, finalize, inductor_candidates, ktc, params_config, triton_of, use_gate)
from tests.inductor_doubles import FakeGate, FakeModel, expected_top  # noqa: E402

FIRST = expected_top(SEED, 1)[0]  # FakeModel's first config for the seed problem


def one_choice_handler(**knobs: object) -> ks_inductor.KernelSelectChoices:
    defaults = {"gemm_topk": 1, "gemm_model": FakeModel(), "gemm_device": "h100", "gemm_cublas_margin": 0.15}
    return ks_inductor.KernelSelectChoices(**{**defaults, **knobs})


def uids(result: list) -> list[str]:  # noqa: ANN001
    return [c.template.uid for c in result]


@pytest.mark.parametrize("ratio", [1.3, 1.05])
def test_where_triton_is_predicted_faster_its_first_config_is_the_only_choice(
        monkeypatch: pytest.MonkeyPatch, ratio: float):
    use_gate(monkeypatch, FakeGate(ratio=ratio))
    inputs = FakeInputs(560, 1280, 3420)
    handler = one_choice_handler()
    result = finalize(handler, inputs, inductor_candidates(inputs))
    # No ATen, no decompose_k: a one-choice list, which Inductor compiles without benchmarking.
    assert uids(result) == ["triton::mm"] and params_config(result[0]) == FIRST
    selection = handler.selections[-1]
    assert selection.sole == FIRST and selection.cublas.alone and not selection.skips_triton


@pytest.mark.parametrize("ratio", [0.99, 0.9])
def test_where_cublas_is_predicted_faster_aten_is_the_only_choice_even_inside_the_margin(
        monkeypatch: pytest.MonkeyPatch, ratio: float):
    # 0.99 and 0.9 lie inside the 0.15 margin, where gemm_topk=4 benchmarks the model's picks against
    # cuBLAS; with nothing benchmarked the faster predicted is taken.
    use_gate(monkeypatch, FakeGate(ratio=ratio))
    inputs = FakeInputs(560, 1280, 3420)
    candidates = inductor_candidates(inputs)
    handler = one_choice_handler()
    assert finalize(handler, inputs, candidates) == [candidates["aten::mm"][0]]
    assert handler.selections[-1].sole == ATEN
    assert "nothing benchmarked" in handler.selections[-1].summary()
    four = one_choice_handler(gemm_topk=4)
    assert len(triton_of(finalize(four, inputs, inductor_candidates(inputs)))) == 4


def test_a_pointwise_epilogue_cublas_leaves_unfused_is_charged_in_the_one_choice_too(
        monkeypatch: pytest.MonkeyPatch):
    # cuBLAS predicted 2% faster, but beside it a ReLU runs as a kernel of its own: 1 us on a 5 us GEMM.
    class LaunchSizedCublas(FakeModel):
        def estimate_aten(self, problem: Problem) -> float:
            return 0.005

    monkeypatch.setattr(pointwise_epilogue, "lowering_has_separate_epilogue", lambda elements: True)
    use_gate(monkeypatch, FakeGate(ratio=0.98))
    inputs = FakeInputs(1, 1024, 3456)
    result = finalize(one_choice_handler(gemm_model=LaunchSizedCublas()), inputs, inductor_candidates(inputs))
    assert uids(result) == ["triton::mm"]


@pytest.mark.parametrize("aten_ms, choice", [(1.0, "triton::mm"), (0.001, "aten::mm")])
def test_without_a_gate_the_models_cublas_time_decides_the_one_choice(monkeypatch: pytest.MonkeyPatch,
                                                                      aten_ms: float, choice: str):
    class Cublas(FakeModel):  # FakeModel's best Triton time for the seed problem is a few hundredths of a ms
        def estimate_aten(self, problem: Problem) -> float:
            return aten_ms

    use_gate(monkeypatch, None)
    inputs = FakeInputs(560, 1280, 3420)
    handler = one_choice_handler(gemm_model=Cublas())
    assert uids(finalize(handler, inputs, inductor_candidates(inputs))) == [choice]
    assert handler.selections[-1].cublas.source == "model"


class Narrow(FakeModel):
    """A model whose domain leaves out every problem."""

    def domain_gap(self, problem: Problem) -> str:
        return "n outside the trained range"


def test_a_problem_outside_the_models_domain_is_benchmarked_with_inductors_own_configs(
        monkeypatch: pytest.MonkeyPatch):
    use_gate(monkeypatch, FakeGate(ratio=0.5))
    inputs = FakeInputs(560, 1280, 3420)
    handler = one_choice_handler(gemm_model=Narrow())
    result = finalize(handler, inputs, inductor_candidates(inputs))
    assert uids(result).count("triton::mm") == 21 and "aten::mm" in uids(result)  # Inductor's 20 + the pick
    assert handler.selections[-1].sole is None and handler.selections[-1].cublas is None


def test_a_launch_bound_gemm_outside_the_domain_keeps_one_choice_the_models_first_config(
        monkeypatch: pytest.MonkeyPatch):
    # 64 x 2 x 768 (a two-class head): 2e5 FLOPs. Benchmarking Inductor's list would compile a dozen
    # kernels that differ by microseconds; the mode hands Inductor the model's first config instead.
    use_gate(monkeypatch, FakeGate(ratio=0.5))  # no cuBLAS decision outside the domain
    inputs = FakeInputs(64, 2, 768)
    handler = one_choice_handler(gemm_model=Narrow())
    result = finalize(handler, inputs, inductor_candidates(inputs))
    first = expected_top(Problem(64, 2, 768, "bfloat16"), 1)[0]
    assert uids(result) == ["triton::mm"] and params_config(result[0]) == first
    selection = handler.selections[-1]
    assert selection.launch_bound and selection.sole == first and selection.cublas is None
    assert "but launch-bound" in selection.summary() and "nothing benchmarked" in selection.summary()
    # at another k, or above the bound, Inductor's own configs are benchmarked beside the picks as before
    four = one_choice_handler(gemm_model=Narrow(), gemm_topk=4)
    assert "aten::mm" in uids(finalize(four, inputs, inductor_candidates(inputs)))
    assert not four.selections[-1].launch_bound
    big = FakeInputs(64, 2048, 64)  # 1.7e7 FLOPs: 4x the bound
    wide = one_choice_handler(gemm_model=Narrow())
    assert len(uids(finalize(wide, big, inductor_candidates(big)))) > 1 and wide.selections[-1].sole is None


def test_a_batched_gemm_without_a_cublas_prediction_benchmarks_the_first_config_against_cublas(
        monkeypatch: pytest.MonkeyPatch):
    use_gate(monkeypatch, FakeGate(ratio=0.5))  # the gate decides single GEMMs only
    inputs = FakeInputs(128, 256, 512, batch=6)
    handler = one_choice_handler()
    result = finalize(handler, inputs, inductor_candidates(inputs, triton_uid="triton::bmm"), op="bmm")
    assert uids(result) == ["aten::mm", "triton::bmm", "decompose_k"]
    selection = handler.selections[-1]
    assert selection.sole is None and selection.undecided.startswith("a batched GEMM")


@pytest.mark.parametrize("ratio, sole", [(0.5, ATEN), (1.3, "first")])
def test_a_gate_with_a_batched_network_gives_a_batched_gemm_one_choice(monkeypatch: pytest.MonkeyPatch,
                                                                       ratio: float, sole: str):
    # The network for batched GEMMs decides them as the gate's own decides single GEMMs: nothing benchmarked.
    use_gate(monkeypatch, FakeGate(ratio=ratio, batched=True))
    inputs = FakeInputs(128, 256, 512, batch=6)
    handler = one_choice_handler()
    result = finalize(handler, inputs, inductor_candidates(inputs, triton_uid="triton::bmm"), op="bmm")
    selection = handler.selections[-1]
    assert selection.cublas is not None and selection.cublas.alone and not selection.undecided
    if sole == ATEN:
        assert uids(result) == ["aten::mm"] and selection.sole == ATEN
    else:
        assert uids(result) == ["triton::bmm"] and selection.sole == params_config(result[0])


@pytest.mark.parametrize("n, k, sole", [(1001, 999, False), (1001, 1000, True), (1000, 999, True)])
def test_odd_n_with_odd_k_benchmarks_the_first_config_against_cublas(monkeypatch: pytest.MonkeyPatch,
                                                                     n: int, k: int, sole: bool):
    # No cuBLAS network trained on odd N with odd K (the family split holds the class out): the gate's
    # call is not trusted there, whichever way it goes; one odd dimension alone is an ordinary problem.
    use_gate(monkeypatch, FakeGate(ratio=0.5))
    inputs = FakeInputs(128, n, k)
    handler = one_choice_handler()
    result = finalize(handler, inputs, inductor_candidates(inputs))
    selection = handler.selections[-1]
    if sole:
        assert uids(result) == ["aten::mm"] and selection.sole == ATEN
    else:
        assert "aten::mm" in uids(result) and uids(result).count("triton::mm") == 1
        assert selection.sole is None and selection.cublas is None and not selection.outside
        assert selection.undecided.startswith("odd N and odd K")
        assert "no cuBLAS decision (odd N" in selection.summary()


def test_lut_entries_are_benchmarked_against_cublas(monkeypatch: pytest.MonkeyPatch, lut_file: Path):
    use_gate(monkeypatch, FakeGate(ratio=1.3))
    inputs = FakeInputs(560, 1280, 3420)
    result = finalize(one_choice_handler(kernel_lut_path=str(lut_file)), inputs, inductor_candidates(inputs))
    assert [params_config(c) for c in triton_of(result)] == [LUT_A, LUT_B] and "aten::mm" in uids(result)


def test_a_lut_pin_wins_over_the_one_choice_decision(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    use_gate(monkeypatch, FakeGate(ratio=0.5))  # the decision alone would take ATen
    pins = tmp_path / "pins.json"
    save_lut(lut_from_rows([("h100", "mm", "bfloat16", LUTEntry(m=560, n=1280, k=3420, pin=LUT_B))]), pins)
    inputs = FakeInputs(560, 1280, 3420)
    result = finalize(one_choice_handler(kernel_lut_path=str(pins)), inputs, inductor_candidates(inputs))
    assert uids(result) == ["triton::mm"] and [params_config(c) for c in result] == [LUT_B]


@pytest.mark.parametrize("knobs", [{"gemm_cublas_margin": "off"}, {"gemm_topk": 0.0001}, {"gemm_topk": 2}])
def test_without_the_decision_or_at_another_k_inductor_benchmarks_the_picks_against_cublas(
        monkeypatch: pytest.MonkeyPatch, knobs: dict):
    # A fraction that comes to one config is not the mode: only the count 1 is.
    use_gate(monkeypatch, FakeGate(ratio=1.3))
    inputs = FakeInputs(560, 1280, 3420)
    result = finalize(one_choice_handler(**knobs), inputs, inductor_candidates(inputs))
    assert uids(result)[0] == "aten::mm" and uids(result)[-1] == "decompose_k" and triton_of(result)


@pytest.mark.parametrize("ratio, aten_call, triton_call", [(1.3, [], ["triton::mm"]),
                                                           (0.9, ["aten::bias_addmm"], [])])
def test_addmm_gets_one_choice_over_its_split_calls(monkeypatch: pytest.MonkeyPatch, ratio: float,
                                                    aten_call: list[str], triton_call: list[str]):
    # tuned_addmm asks for ATen, then the contiguous-bias subgraph, then the Triton templates, in calls
    # of their own; each call decides the same and keeps its part of the one choice.
    use_gate(monkeypatch, FakeGate(ratio=ratio))
    monkeypatch.setattr(choice_builder, "_triton_offered", lambda kernel_inputs: True)
    monkeypatch.setattr(choice_builder, "_aten_offered", lambda: True)
    inputs = FakeInputs(560, 1280, 3420)
    handler = one_choice_handler()
    aten = {"aten::addmm": [ktc("aten::addmm", inputs)],
            "aten::bias_addmm": [ktc("aten::bias_addmm", inputs)]}
    subgraph = {"contiguous_addmm": [ktc("contiguous_addmm", inputs)]}
    triton = {"triton::mm": inductor_candidates(inputs)["triton::mm"]}
    calls = [uids(finalize(handler, inputs, call, op="addmm")) for call in (aten, subgraph, triton)]
    assert calls == [aten_call, [], triton_call]
    assert len(handler.selections) == 1  # recorded once, by the call that offers the choice
