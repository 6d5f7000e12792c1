"""Serving without autotuning: symbolic M ranked over a spread, multi-kernel hints, pinned entries."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sympy
import torch

pytest.importorskip("torch._inductor.kernel_template_choice")

from torch._inductor import config as inductor_config  # noqa: E402

import kernel_select.inductor as ks_inductor  # noqa: E402
import kernel_select.knobs as ks_config  # noqa: E402
from kernel_select.configs import GemmConfig  # noqa: E402
from kernel_select.inductor import inputs as inductor_inputs  # noqa: E402
from kernel_select.lut import ATEN, LUTEntry, MRange, SizeRange, lut_from_rows, save_lut  # noqa: E402
from kernel_select.problem import default_spread, spread_ms  # noqa: E402
from kernel_select.decision import select  # noqa: E402
from kernel_select.problem import m_values_to_rank  # noqa: E402
from tests.inductor.kit import (  # noqa: E402
    FakeInputs, SEED, finalize, inductor_candidates, params_config, triton_of)
from tests.inductor_doubles import FakeModel  # noqa: E402

M = sympy.Symbol("s0", positive=True, integer=True)
PINNED = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=4, num_warps=4)


class SymbolicInputs(FakeInputs):
    """FakeInputs whose M is a symbol (hinted 560), as with mark_dynamic."""

    def mnk_symbolic(self) -> tuple[object, object, object]:
        return M, self.n, self.k


def write_lut(tmp_path: Path, *entries: LUTEntry, op: str = "mm") -> str:
    path = tmp_path / "pins.json"
    save_lut(lut_from_rows([("h100", op, "bfloat16", entry) for entry in entries]), path)
    return str(path)


# -- symbolic M ---------------------------------------------------------------------------------

def test_a_symbolic_m_is_ranked_over_the_default_spread_around_its_hint():
    inputs = SymbolicInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100")
    triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    selection = handler.selections[-1]
    assert selection.m_values == default_spread(560) and selection.m_values_origin == "hint/4..hint*4"
    expected = select(SEED, model=FakeModel(), gemm_topk=4, m_values=default_spread(560)).configs
    assert [params_config(c) for c in triton] == list(expected)
    assert all(c.params.to_kwargs()["hint_override"] is None for c in triton)


def test_a_static_m_is_ranked_for_itself():
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100")
    finalize(handler, inputs, inductor_candidates(inputs))
    assert handler.selections[-1].m_values == ()


def test_the_dynamic_m_knob_and_option_name_the_ms():
    inputs = SymbolicInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              gemm_dynamic_m="560,1024,8192")
    finalize(handler, inputs, inductor_candidates(inputs))
    selection = handler.selections[-1]
    assert selection.m_values == (560, 1024, 8192) and selection.m_values_origin == "gemm_dynamic_m"
    ks_inductor.register_options()
    with inductor_config.patch({"gemm_dynamic_m": "512..4096"}):
        finalize(handler, inputs, inductor_candidates(inputs))
    assert handler.selections[-1].m_values == spread_ms(512, 4096)


def test_a_lut_entrys_m_range_wins_over_the_knob(tmp_path: Path):
    entry = LUTEntry(m=MRange(min=256, max=2048), n=1280, k=3420, configs=[PINNED])
    path = write_lut(tmp_path, entry)
    inputs = SymbolicInputs(560, 1280, 3420)
    with ks_config.patch(gemm_dynamic_m="1,2,3"):
        handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                                  kernel_lut_path=path)
        triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    assert handler.selections[-1].m_values == spread_ms(256, 2048)
    assert params_config(triton[0]) == PINNED  # the LUT's configs still come first


def test_multi_kernel_hints_get_their_own_configs_tagged_with_the_hint():
    inputs = SymbolicInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=2, gemm_model=FakeModel(), gemm_device="h100")
    with inductor_config.patch(multi_kernel_hints=[64, 8192]):
        triton = triton_of(finalize(handler, inputs, inductor_candidates(inputs)))
    by_hint: dict[object, list[GemmConfig]] = {}
    for choice in triton:
        by_hint.setdefault(choice.params.to_kwargs()["hint_override"], []).append(params_config(choice))
    assert set(by_hint) == {None, 64, 8192} and all(len(v) == 2 for v in by_hint.values())
    for hint in (64, 8192):
        expected = select(dataclasses.replace(SEED, m=hint), model=FakeModel(), gemm_topk=2).configs
        assert by_hint[hint] == list(expected)


def test_a_real_cpu_compile_with_mark_dynamic_gives_the_declared_range(monkeypatch: pytest.MonkeyPatch):
    # Inductor's own symbolic sizes: CPU GEMMs pass through the handler, so record what the
    # dynamic-M helpers see inside the real lowering.
    seen = []
    original = ks_inductor.KernelSelectChoices._replace

    def spy(self, choices, kernel_inputs, op_name, overrides):  # noqa: ANN001, ANN202
        m = inductor_inputs.symbolic_m(kernel_inputs)
        declared = inductor_inputs.declared_range(m) if m is not None else None
        seen.append((m, declared, kernel_inputs.mnk_hinted()[0]))
        return original(self, choices, kernel_inputs, op_name, overrides)

    monkeypatch.setattr(ks_inductor.KernelSelectChoices, "_replace", spy)
    x, w = torch.randn(96, 32), torch.randn(32, 48)
    torch._dynamo.mark_dynamic(x, 0, min=16, max=4096)
    with ks_inductor.enabled(gemm_topk=2, gemm_device="h100"), \
            torch.compiler.config.patch(force_disable_caches=True):
        torch._dynamo.reset()
        compiled = torch.compile(lambda a, b: a @ b)
        torch.testing.assert_close(compiled(x, w), x @ w)
    assert seen, "the handler never saw the GEMM"
    m, declared, hint = seen[0]
    assert m is not None and not m.is_number and hint == 96
    assert declared == (16, 4096)
    assert m_values_to_rank(hint, None, None, declared) == (spread_ms(16, 4096), "declared range")


# -- pinned entries -----------------------------------------------------------------------------

def test_a_triton_pin_is_the_only_choice_inductor_gets(tmp_path: Path):
    path = write_lut(tmp_path, LUTEntry(m=MRange(min=1, max=8192), n=1280, k=3420, pin=PINNED,
                                        note="pretune"))
    inputs = SymbolicInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              kernel_lut_path=path)
    with inductor_config.patch(multi_kernel_hints=[64]):
        result = finalize(handler, inputs, inductor_candidates(inputs))
    assert [c.template.uid for c in result] == ["triton::mm"]
    assert params_config(result[0]) == PINNED and result[0].params.to_kwargs()["hint_override"] is None
    assert handler.selections[-1].pinned == PINNED


def test_a_k_range_pin_serves_a_weight_gradient_at_every_compiles_hint(tmp_path: Path):
    # grad_y.t() @ x under mark_dynamic: M = 1280 and N = 3420 fixed, K = the sequence length,
    # symbolic, hinted with whichever length a compile was for. One entry over the range serves all.
    path = write_lut(tmp_path, LUTEntry(m=1280, n=3420, k=SizeRange(min=560, max=8192), pin=PINNED))
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              kernel_lut_path=path)
    k = sympy.Symbol("s1", positive=True, integer=True)
    for hint in (560, 1024, 2048, 8192):
        inputs = FakeInputs(1280, 3420, hint, k_symbolic=k)
        result = finalize(handler, inputs, inductor_candidates(inputs))
        assert [c.template.uid for c in result] == ["triton::mm"] and params_config(result[0]) == PINNED
        assert result[0].params.to_kwargs()["EVEN_K"] is False  # a symbolic K is never known even
    outside = FakeInputs(1280, 3420, 9000, k_symbolic=k)  # a hint beyond the range: not pinned
    assert len(triton_of(finalize(handler, outside, inductor_candidates(outside)))) == 4


def test_an_aten_pin_offers_only_aten(tmp_path: Path):
    path = write_lut(tmp_path, LUTEntry(m=560, n=1280, k=3420, pin=ATEN))
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              kernel_lut_path=path)
    candidates = inductor_candidates(inputs)
    result = finalize(handler, inputs, candidates)
    assert result == [candidates["aten::mm"][0]]
    assert handler.selections[-1].pinned == ATEN and handler.selections[-1].configs == ()


def test_an_aten_pin_on_addmm_offers_the_bias_epilogue_call(tmp_path: Path):
    # torch 2.11's addmm ATen call lists plain addmm first; the handler leaves it out for bias_addmm
    from tests.inductor.kit import ktc

    path = write_lut(tmp_path, LUTEntry(m=560, n=1280, k=3420, pin=ATEN), op="addmm")
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              kernel_lut_path=path)
    aten_call = {"aten::addmm": [ktc("aten::addmm", inputs)],
                 "aten::bias_addmm": [ktc("aten::bias_addmm", inputs)]}
    result = finalize(handler, inputs, aten_call, op="addmm")
    assert [c.template.uid for c in result] == ["aten::bias_addmm"] and handler.selections[-1].pinned == ATEN
    only_plain = {"aten::addmm": aten_call["aten::addmm"]}
    assert [c.template.uid for c in finalize(handler, inputs, only_plain, op="addmm")] == ["aten::addmm"]


def test_a_pin_for_a_template_inductor_does_not_offer_keeps_inductors_candidates(
        tmp_path: Path, caplog: pytest.LogCaptureFixture):
    path = write_lut(tmp_path, LUTEntry(m=560, n=1280, k=3420, pin=ATEN))
    inputs = FakeInputs(560, 1280, 3420)
    candidates = {uid: items for uid, items in inductor_candidates(inputs).items() if uid != "aten::mm"}
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              kernel_lut_path=path)
    result = finalize(handler, inputs, candidates)
    assert result == [c for items in candidates.values() for c in items]
    assert any("which Inductor does not offer" in r.getMessage() for r in caplog.records)


def test_addmm_drops_aten_in_its_first_call_when_triton_is_pinned(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch):
    from kernel_select.inductor import choice_builder

    path = write_lut(tmp_path, LUTEntry(m=560, n=1280, k=3420, pin=PINNED), op="addmm")
    inputs = FakeInputs(560, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              kernel_lut_path=path)
    aten_call = {"aten::addmm": inductor_candidates(inputs)["aten::mm"]}
    monkeypatch.setattr(choice_builder, "_triton_offered", lambda kernel_inputs: True)
    assert finalize(handler, inputs, aten_call, op="addmm") == []
    monkeypatch.setattr(choice_builder, "_triton_offered", lambda kernel_inputs: False)
    assert len(finalize(handler, inputs, aten_call, op="addmm")) == 1  # no Triton call coming: keep ATen
    triton_call = {"triton::mm": inductor_candidates(inputs)["triton::mm"]}
    assert [params_config(c) for c in finalize(handler, inputs, triton_call, op="addmm")] == [PINNED]


# -- per-bucket pins ------------------------------------------------------------------------------

BUCKET_PIN = GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=3, num_warps=8)


@pytest.mark.parametrize("declared, pin, gap", [((560, 1023), PINNED, False),
                                                ((1024, 8192), BUCKET_PIN, False),
                                                ((560, 8192), PINNED, True)])
def test_a_graph_gets_the_pin_of_its_bucket_and_a_warning_when_it_spans_several(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        declared: tuple[int, int], pin: GemmConfig, gap: bool):
    from kernel_select import warn

    path = write_lut(tmp_path, LUTEntry(m=MRange(min=560, max=1023), n=1280, k=3420, pin=PINNED),
                     LUTEntry(m=MRange(min=1024, max=8192), n=1280, k=3420, pin=BUCKET_PIN))
    # The graph compiled for one length bucket (mark_dynamic(min=, max=)) declares it; its hint lies in it.
    monkeypatch.setattr(inductor_inputs, "declared_range", lambda expr: declared)
    inputs = SymbolicInputs(declared[0], 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              kernel_lut_path=path)
    warn.forget()
    result = finalize(handler, inputs, inductor_candidates(inputs))
    assert [params_config(c) for c in result] == [pin] and handler.selections[-1].pinned == pin
    warned = [r.getMessage() for r in caplog.records if "one kernel serves them all" in r.getMessage()]
    assert bool(warned) == gap
    if gap:
        assert "kernel serves m=560..8192, the pinned entry only m=560..1023" in warned[0]


def test_a_bucket_graph_is_ranked_over_its_bucket_not_the_whole_dynamic_m_knob(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(inductor_inputs, "declared_range", lambda expr: (1024, 2047))
    inputs = SymbolicInputs(1440, 1280, 3420)
    handler = ks_inductor.KernelSelectChoices(gemm_topk=4, gemm_model=FakeModel(), gemm_device="h100",
                                              gemm_dynamic_m="560..8192")
    finalize(handler, inputs, inductor_candidates(inputs))
    selection = handler.selections[-1]
    assert selection.m_values == spread_ms(1024, 2047)
    assert selection.m_values_origin.startswith("declared range")
    assert m_values_to_rank(1440, None, spread_ms(560, 8192), (560, 8192))[1] == "gemm_dynamic_m"
