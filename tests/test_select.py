"""select(): a LUT pin alone, else LUT entries first and always kept, then the model's order, k as Triton
reads it ("DEFAULT" and "auto" too), and one cuBLAS decision per GEMM; rank(); kernel_select.top_k."""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import kernel_select
from kernel_select.configs import GemmConfig
from kernel_select.errors import ConfigError, DeviceError, LUTError, ModelError, ProblemError
from kernel_select.lut import ATEN, KernelLUT, LUTEntry, LUTHit, lut_from_rows, save_lut
from kernel_select.model import PerformanceModel, load_default
from kernel_select.model.analytical import AnalyticalModel
from kernel_select.problem import Problem, spread_ms
from kernel_select.decision import Choice, rank, resolve_k, select
from kernel_select.space import for_problem
from tests.inductor_doubles import FakeGate, FakeModel

SEED = Problem(560, 1280, 3420, "bfloat16")


def cfg(bm: int, bn: int = 64, bk: int = 32, stages: int = 3, warps: int = 4) -> GemmConfig:
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=stages, num_warps=warps)


class TableModel(PerformanceModel):
    """Predicts whatever its table says (a fake that makes the expected order obvious), and cuBLAS at
    `aten_ms` (None: it does not predict cuBLAS)."""

    name = "table"

    def __init__(self, runtimes: dict[GemmConfig, float], device: str = "h100",
                 aten_ms: float | None = None) -> None:
        super().__init__(device)
        self.runtimes, self.aten_ms = runtimes, aten_ms
        self.calls = self.aten_calls = 0

    def predict(self, problem, device, configs: Sequence[GemmConfig]) -> np.ndarray:
        self.calls += 1
        return np.array([self.runtimes.get(c, 100.0) for c in configs], dtype=np.float64)

    def estimate_aten(self, problem: Problem) -> float | None:
        self.aten_calls += 1
        return self.aten_ms


class FakeLUT:
    """A lookup table (the decision's LookupTable) with one entry that serves every problem."""

    def __init__(self, configs: list[GemmConfig], pin: object = None) -> None:
        self.configs, self.pin = configs, pin
        self.asked: list[tuple[Problem, str]] = []

    def probe(self, problem: Problem, device: str) -> LUTHit:
        self.asked.append((problem, device))
        return LUTHit(entry=self, configs=tuple(self.configs), pin=self.pin)


A, B, C, D, E = cfg(16), cfg(32), cfg(64), cfg(128), cfg(256)
CANDIDATES = [A, B, C, D, E]
MODEL = TableModel({A: 5.0, B: 1.0, C: 3.0, D: 1.0, E: 2.0})


def chosen(k, lut=None, model=MODEL, **kw) -> list[Choice]:  # noqa: ANN001
    """The choices select() makes among CANDIDATES."""
    return list(select(SEED, model=model, gemm_topk=k, lut=lut, candidates=CANDIDATES, **kw).choices)


def configs_of(choices: Sequence[Choice]) -> list[GemmConfig]:
    return [c.config for c in choices]


def test_model_order_with_stable_ties():
    choices = chosen(5)
    assert configs_of(choices) == [B, D, E, C, A]  # B and D tie at 1.0: candidate order wins
    assert [c.predicted_ms for c in choices] == [1.0, 1.0, 2.0, 3.0, 5.0]
    assert {c.source for c in choices} == {"table"}


def test_the_selection_says_what_was_ranked_for_which_device():
    selection = select(SEED, model=MODEL, gemm_topk=2, candidates=CANDIDATES)
    assert selection.problem == SEED and selection.device == "h100" and selection.ranked == 5
    assert selection.configs == (B, D) and selection.sources == ("table", "table")
    assert selection.pinned is None and selection.cublas is None and not selection.skips_triton


# -- the LUT --------------------------------------------------------------------------------------------

def test_lut_entries_come_first_in_lut_order_and_count_towards_k():
    lut = FakeLUT([C, A])
    choices = chosen(3, lut=lut)
    assert configs_of(choices) == [C, A, B]
    assert [c.source for c in choices] == ["lut", "lut", "table"]
    # LUT entries are scored by the model for display, and looked up for the model's device.
    assert [c.predicted_ms for c in choices[:2]] == [3.0, 5.0]
    assert lut.asked == [(SEED, "h100")]


def test_lut_entries_are_kept_beyond_k_and_outside_the_candidates():
    outsider = cfg(64, 128, 64, 4, 8)
    choices = chosen(1, lut=FakeLUT([E, outsider, D]))
    assert configs_of(choices) == [E, outsider, D]
    assert all(c.source == "lut" for c in choices)


def test_no_duplicates_even_if_lut_and_candidates_repeat():
    choices = select(SEED, model=MODEL, gemm_topk=10, lut=FakeLUT([B, B, D]),
                     candidates=CANDIDATES + [B, A]).choices
    assert configs_of(choices) == [B, D, E, C, A]
    assert [c.source for c in choices] == ["lut", "lut", "table", "table", "table"]


def pinning_lut(pin: GemmConfig | str, entries: Sequence[GemmConfig] = ()) -> KernelLUT:
    """A LUT that pins SEED to `pin` and lists `entries` for another M."""
    rows = [("h100", "mm", "bfloat16", LUTEntry(m=560, n=1280, k=3420, pin=pin))]
    if entries:
        rows.append(("h100", "mm", "bfloat16", LUTEntry(m=1024, n=1280, k=3420, configs=list(entries))))
    return lut_from_rows(rows)


def test_a_triton_pin_is_the_only_choice_and_nothing_else_is_ranked():
    model, gate = TableModel({C: 3.0}), FakeGate(ratio=0.1)
    selection = select(SEED, model=model, gemm_topk=4, lut=pinning_lut(C, entries=[A, B]),
                       candidates=CANDIDATES, gate=gate, cublas_margin=0.15)
    assert selection.choices == (Choice(C, 3.0, "pin"),) and selection.pinned == C
    assert selection.ranked == 0 and selection.cublas is None
    assert model.calls == 1 and model.aten_calls == 0 and gate.calls == 0  # only the pin was scored


def test_an_aten_pin_leaves_no_triton_choice_and_asks_the_model_nothing():
    model = TableModel({})
    selection = select(SEED, model=model, gemm_topk=4, lut=pinning_lut(ATEN))
    assert selection.pinned == ATEN and selection.choices == () and not selection.skips_triton
    assert model.calls == 0


def test_a_pin_serves_only_its_problem():
    lut = pinning_lut(C, entries=[A, B])
    other = select(Problem(1024, 1280, 3420, "bfloat16"), model=MODEL, gemm_topk=3, lut=lut,
                   candidates=CANDIDATES)
    assert other.pinned is None and configs_of(other.choices) == [A, B, D]


def test_a_lookup_pinning_something_else_is_a_lut_error():
    with pytest.raises(LUTError, match="not 'aten' or a GemmConfig"):
        chosen(2, lut=FakeLUT([], pin="cublas"))


def test_a_table_without_the_lookup_protocol_is_a_lut_error():
    class OnlyLookup:
        def lookup(self, problem: Problem, device: str) -> list[GemmConfig]:
            return []

    with pytest.raises(LUTError, match=r"probe\(problem, device\)"):
        chosen(2, lut=OnlyLookup())


def test_the_lut_is_probed_once_per_selection():
    lut = FakeLUT([C])
    chosen(3, lut=lut)
    assert lut.asked == [(SEED, "h100")]


# -- k ---------------------------------------------------------------------------------------------------

def test_fraction_k_is_of_the_candidates_and_keeps_at_least_one():
    assert len(chosen(0.4)) == 2
    assert len(chosen(0.01)) == 1
    assert len(chosen(1.0)) == 5


def test_k_larger_than_the_space_returns_everything_once():
    assert configs_of(chosen(50)) == [B, D, E, C, A]


@pytest.mark.parametrize("problem", [SEED, Problem(16, 32, 64, "bfloat16")])
def test_default_k_is_the_size_of_inductors_default_list_for_the_problem(problem: Problem):
    default_size = len(for_problem(problem, "h100", "default"))
    selection = select(problem, model=FakeModel(), gemm_topk="DEFAULT")
    assert len(selection.choices) == default_size < selection.ranked
    assert selection.configs == tuple(select(problem, model=FakeModel(), gemm_topk=default_size).configs)


def test_default_k_follows_the_problem_not_a_constant():
    sizes = {len(select(p, model=FakeModel(), gemm_topk="DEFAULT").choices)
             for p in (SEED, Problem(16, 32, 64, "bfloat16"))}
    assert len(sizes) == 2


def test_auto_k_asks_the_model_and_falls_back_to_four_without_an_estimate():
    class Unsure(TableModel):
        def auto_topk(self, runtime_ms, cap, problem=None, configs=None) -> int:  # noqa: ANN001
            return 3

    assert len(chosen("auto", model=Unsure(MODEL.runtimes))) == 3
    assert len(chosen("auto")) == 4  # TableModel has no measure of its uncertainty
    assert len(chosen("auto", auto_cap=2)) == 2


@pytest.mark.parametrize("bad", [0, -3, True, False, 0.0, -0.5, 1.5, 4.0, math.nan, math.inf, "four",
                                 "SAMEISH", None])
def test_bad_k_is_a_clear_value_error(bad):
    with pytest.raises(ConfigError, match="k:") as info:
        chosen(bad)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("k, count", [("4", 4), (" 2 ", 2), ("0.5", 2), (0.4, 2), ("same", 5),
                                      ("SAME", 5), ("Default", None)])
def test_k_takes_every_value_the_knob_parser_takes(k: object, count: int | None):
    """select() reads gemm_topk with options.parse_topk, like install(), the pruner and the CLI."""
    if count is None:  # DEFAULT: the size of Inductor's own list for the problem
        count = min(len(for_problem(SEED, "h100", "default")), len(CANDIDATES))
    assert len(chosen(k)) == count


def test_the_default_k_is_four_everywhere():
    from kernel_select import knobs, triton_pruner, top_k
    from kernel_select.options import DEFAULT_TOPK, KNOBS

    assert DEFAULT_TOPK == 4 and KNOBS["gemm_topk"].default == 4 and knobs.gemm_topk == 4
    for function in (select, top_k, triton_pruner):
        assert inspect.signature(function).parameters["gemm_topk"].default == DEFAULT_TOPK
    assert len(select(SEED, model=MODEL, candidates=CANDIDATES).choices) == 4


def test_float_k_above_one_suggests_the_count():
    with pytest.raises(ConfigError, match="write 4"):
        resolve_k(4.0, 100)


@given(k=st.integers(1, 3000), n=st.integers(0, 3000))
def test_resolve_count(k, n):
    assert resolve_k(k, n) == k


@given(k=st.floats(min_value=1e-6, max_value=1.0), n=st.integers(0, 3000))
def test_resolve_fraction_like_triton(k, n):
    assert resolve_k(k, n) == max(1, int(n * k))


def test_resolve_auto_takes_the_cap_for_a_hedged_problem():
    assert resolve_k("auto", 100, model=MODEL, predicted_ms=np.ones(100), cap=6, at_cap=True) == 6
    assert resolve_k("auto", 100, model=MODEL, predicted_ms=np.ones(100), cap=6) == 4
    with pytest.raises(ConfigError, match="needs the model"):
        resolve_k("auto", 100)


@given(data=st.data())
def test_selection_is_a_prefix_of_rank_after_the_lut(data):
    runtimes = data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=5, max_size=5))
    model = TableModel(dict(zip(CANDIDATES, runtimes)))
    pinned = data.draw(st.lists(st.sampled_from(CANDIDATES), max_size=3, unique=True))
    k = data.draw(st.integers(1, 7))
    choices = chosen(k, lut=FakeLUT(pinned), model=model)
    ranked = [c.config for c in rank(SEED, CANDIDATES, model) if c.config not in pinned]
    assert configs_of(choices) == pinned + ranked[: max(0, k - len(pinned))]
    assert len(choices) == max(len(pinned), min(k, len(CANDIDATES)))


def test_rank_orders_everything_ascending_and_stably():
    choices = rank(SEED, CANDIDATES, MODEL)
    assert configs_of(choices) == [B, D, E, C, A]
    assert rank(SEED, [], MODEL) == []


# -- the cuBLAS decision ------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio, skips", [(0.5, True), (0.9, False)])
def test_a_gate_that_prefers_cublas_leaves_only_the_lut_entries(ratio: float, skips: bool):
    gate = FakeGate(ratio)
    selection = select(SEED, model=TableModel(MODEL.runtimes, aten_ms=1.0), gemm_topk=4, lut=FakeLUT([C]),
                       candidates=CANDIDATES, gate=gate, cublas_margin=0.15)
    assert selection.cublas.source == "gate" and selection.cublas.predicted_ratio == pytest.approx(ratio)
    assert selection.skips_triton is skips
    assert configs_of(selection.choices) == ([C] if skips else [C, B, D, E])
    assert selection.sources == (("lut",) if skips else ("lut", "table", "table", "table"))


@pytest.mark.parametrize("aten_ms, skips", [(0.5, True), (0.9, False)])
def test_without_a_gate_the_models_cublas_time_decides_the_same_way(aten_ms: float, skips: bool):
    # the best Triton time is 1.0 ms, so the model's cuBLAS time is the ratio; no small-GEMM clause
    model = TableModel(MODEL.runtimes, aten_ms=aten_ms)
    selection = select(SEED, model=model, gemm_topk=4, lut=FakeLUT([C]), candidates=CANDIDATES,
                       cublas_margin=0.15)
    assert selection.cublas.source == "model" and selection.cublas.predicted_ratio == pytest.approx(aten_ms)
    assert selection.skips_triton is skips
    assert configs_of(selection.choices) == ([C] if skips else [C, B, D, E])


def test_a_small_gemm_drops_the_margin_and_ties_go_to_cublas():
    # 0.02 ms: under SMALL_GEMM_MS, where a predicted cuBLAS win of 4% is enough
    model = TableModel({B: 0.0208}, aten_ms=0.02)
    selection = select(SEED, model=model, gemm_topk=2, candidates=[B, D], cublas_margin=0.15)
    assert selection.cublas.small and selection.skips_triton and selection.choices == ()


def test_without_a_gate_or_a_cublas_prediction_or_a_margin_there_is_no_decision():
    gate = FakeGate(0.1)
    assert select(SEED, model=MODEL, gemm_topk=2, candidates=CANDIDATES, cublas_margin=0.15).cublas is None
    off = select(SEED, model=TableModel(MODEL.runtimes, aten_ms=0.01), gemm_topk=2, candidates=CANDIDATES,
                 gate=gate)
    assert off.cublas is None and configs_of(off.choices) == [B, D] and gate.calls == 0


def test_the_cublas_decision_is_made_once_per_gemm_even_over_a_spread_of_m():
    gate, model = FakeGate(0.9), TableModel(MODEL.runtimes, aten_ms=1.0)
    select(SEED, model=model, gemm_topk=2, candidates=CANDIDATES, gate=gate, cublas_margin=0.15,
           m_values=[256, 560, 2048])
    assert gate.calls == 1 and model.aten_calls == 1


# -- the model and its device --------------------------------------------------------------------------

def test_defaults_rank_the_exhaustive_space_of_the_models_device():
    model = load_default("h100")
    choices = select(SEED, model=model, gemm_topk=8).choices
    assert len(choices) == 8 and {c.source for c in choices} == {model.name}
    assert all(c.config in set(for_problem(SEED, "h100")) for c in choices)
    times = [c.predicted_ms for c in choices]
    assert times == sorted(times)


def test_the_space_is_the_one_of_the_models_device():
    selection = select(SEED, model=AnalyticalModel("a100"), gemm_topk=3)
    a100_space = set(for_problem(SEED, "a100"))
    assert selection.device == "a100" and selection.ranked == len(a100_space)
    assert all(c in a100_space for c in selection.configs)


def test_rejects_a_problem_that_is_not_a_problem_and_a_model_that_is_not_a_model():
    with pytest.raises(ProblemError):
        select((560, 1280, 3420), model=MODEL)
    with pytest.raises(ModelError, match="PerformanceModel"):
        select(SEED, model="analytical")


def test_malformed_model_output_is_a_model_error():
    class Broken(TableModel):
        def predict(self, problem, device, configs):
            return np.full(len(configs), np.nan)

    with pytest.raises(ModelError, match="malformed"):
        chosen(2, model=Broken({}))


def test_lut_returning_non_configs_is_a_lut_error():
    with pytest.raises(LUTError, match="GemmConfig"):
        chosen(2, lut=FakeLUT([{"block_m": 64}]))


def test_nothing_to_select_is_a_config_error():
    with pytest.raises(ConfigError, match="nothing to select"):
        select(SEED, model=MODEL, gemm_topk=2, candidates=[])


def test_batched_problem_reaches_the_model():
    model = load_default("h100")
    single = select(Problem(512, 512, 512, op="bmm"), model=model, gemm_topk=1).choices[0]
    batched = select(Problem(512, 512, 512, batch=64, op="bmm"), model=model, gemm_topk=1).choices[0]
    assert batched.predicted_ms > single.predicted_ms


# -- kernel_select.top_k ---------------------------------------------------------------------------------

def test_top_k_returns_selects_choices_with_the_devices_trained_model(tmp_path: Path):
    expected = select(SEED, model=load_default("h100"), gemm_topk=6).choices
    assert kernel_select.top_k(560, 1280, 3420, "bfloat16", gemm_topk=6, device="h100") == list(expected)
    lut_path = tmp_path / "lut.json"
    save_lut(pinning_lut(C), lut_path)
    pinned = kernel_select.top_k(560, 1280, 3420, "bfloat16", device="h100", lut=str(lut_path))
    assert [c.config for c in pinned] == [C] and pinned[0].source == "pin"


def test_top_k_without_a_device_or_a_gpu_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="no CUDA device found; pass a device name"):
        kernel_select.top_k(560, 1280, 3420, "bfloat16")


# -- decide(request, policy): the adapters' entry point --------------------------------------------------

def test_a_static_request_is_decided_as_select_decides_its_problem():
    from kernel_select.decision import GemmRequest, Policy, decide

    lut = FakeLUT([C])
    (selection,) = decide(GemmRequest(SEED), Policy(MODEL, lut, gemm_topk=3))
    assert selection == select(SEED, model=MODEL, gemm_topk=3, lut=FakeLUT([C]))
    assert lut.asked == [(SEED, "h100")]  # one probe for the whole decision


def test_without_a_triton_template_only_a_pin_is_decided():
    from kernel_select.decision import GemmRequest, Policy, decide

    assert decide(GemmRequest(SEED), Policy(MODEL, FakeLUT([C])), rank_triton=False) == ()
    (pinned,) = decide(GemmRequest(SEED), Policy(MODEL, pinning_lut(ATEN)), rank_triton=False)
    assert pinned.pinned == ATEN and pinned.choices == ()


def test_a_dynamic_m_is_ranked_over_its_ms_then_once_per_multi_kernel_hint():
    from kernel_select.decision import GemmRequest, Policy, decide

    request = GemmRequest(SEED, dynamic_m=True, served={"m": (256, 2048)}, hints=(64, 4096))
    over, *hinted = decide(request, Policy(MODEL, gemm_topk=2, dynamic_m=(128, 8192)))
    assert over.m_values_origin == "declared range (a bucket of gemm_dynamic_m)"
    assert over.m_values == spread_ms(256, 2048) and over.hint is None
    assert [(s.hint, s.problem.m, s.m_values) for s in hinted] == [(64, 64, ()), (4096, 4096, ())]
    static = decide(GemmRequest(SEED, hints=(64,)), Policy(MODEL, gemm_topk=2))
    assert [s.hint for s in static] == [None]  # hints are read for a dynamic M only


@pytest.mark.parametrize("ratio, sole", [(1.3, "first"), (0.95, ATEN)])
def test_one_choice_serves_a_dynamic_m_alone_with_no_variant_per_hint(ratio: float, sole: object):
    from kernel_select.decision import GemmRequest, Policy, decide

    request = GemmRequest(SEED, dynamic_m=True, served={"m": (256, 2048)}, hints=(64, 4096))
    (only,) = decide(request, Policy(MODEL, gate=FakeGate(ratio), gemm_topk=1, cublas_margin=0.15))
    assert only.sole == (only.choices[0].config if sole == "first" else ATEN) and only.cublas.alone
    assert len(only.choices) == (1 if sole == "first" else 0)
    with_margin_off = decide(request, Policy(MODEL, gate=FakeGate(ratio), gemm_topk=1))
    assert len(with_margin_off) == 3 and with_margin_off[0].sole is None


def test_the_policy_refuses_what_cannot_decide():
    from kernel_select.decision import Policy

    with pytest.raises(ModelError, match="PerformanceModel"):
        Policy(model="mlp")  # type: ignore[arg-type]
    with pytest.raises(LUTError, match="probe"):
        Policy(MODEL, lut=["not", "a", "table"])  # type: ignore[arg-type]
