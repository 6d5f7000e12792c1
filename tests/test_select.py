"""top_k and rank: LUT entries first and always kept, then the model's order, k as Triton reads it."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_select import device as device_module
from kernel_select.model.analytical import AnalyticalModel
from kernel_select.configs import GemmConfig
from kernel_select.errors import ConfigError, DeviceError, LUTError, ModelError, ProblemError
from kernel_select.model import PerformanceModel
from kernel_select.problem import Problem
from kernel_select.model import load_default
from kernel_select.select import Choice, rank, resolve_k, top_k
from kernel_select.space import for_problem

SEED = Problem(560, 1280, 3420, "bfloat16")


def cfg(bm: int, bn: int = 64, bk: int = 32, stages: int = 3, warps: int = 4) -> GemmConfig:
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=stages, num_warps=warps)


class TableModel(PerformanceModel):
    """Predicts whatever its table says: a fake that makes the expected order obvious."""

    name = "table"

    def __init__(self, runtimes: dict[GemmConfig, float], device: str = "h100") -> None:
        super().__init__(device)
        self.runtimes = runtimes
        self.calls = 0

    def predict(self, problem, device, configs: Sequence[GemmConfig]) -> np.ndarray:
        self.calls += 1
        return np.array([self.runtimes.get(c, 100.0) for c in configs], dtype=np.float64)


class FakeLUT:
    def __init__(self, configs: list[GemmConfig]) -> None:
        self.configs = configs
        self.asked: list[tuple[Problem, str]] = []

    def lookup(self, problem: Problem, device: str) -> list[GemmConfig]:
        self.asked.append((problem, device))
        return list(self.configs)


A, B, C, D, E = cfg(16), cfg(32), cfg(64), cfg(128), cfg(256)
CANDIDATES = [A, B, C, D, E]
MODEL = TableModel({A: 5.0, B: 1.0, C: 3.0, D: 1.0, E: 2.0})


def configs_of(choices: list[Choice]) -> list[GemmConfig]:
    return [c.config for c in choices]


def test_model_order_with_stable_ties():
    choices = top_k(SEED, 5, model=MODEL, candidates=CANDIDATES)
    assert configs_of(choices) == [B, D, E, C, A]  # B and D tie at 1.0: candidate order wins
    assert [c.predicted_ms for c in choices] == [1.0, 1.0, 2.0, 3.0, 5.0]
    assert {c.source for c in choices} == {"table"}


def test_lut_entries_come_first_in_lut_order_and_count_towards_k():
    lut = FakeLUT([C, A])
    choices = top_k(SEED, 3, lut=lut, model=MODEL, candidates=CANDIDATES)
    assert configs_of(choices) == [C, A, B]
    assert [c.source for c in choices] == ["lut", "lut", "table"]
    # LUT entries are scored by the model for display, and looked up for the model's device.
    assert [c.predicted_ms for c in choices[:2]] == [3.0, 5.0]
    assert lut.asked == [(SEED, "h100")]


def test_lut_entries_are_kept_beyond_k_and_outside_the_candidates():
    outsider = cfg(64, 128, 64, 4, 8)
    choices = top_k(SEED, 1, lut=FakeLUT([E, outsider, D]), model=MODEL, candidates=CANDIDATES)
    assert configs_of(choices) == [E, outsider, D]
    assert all(c.source == "lut" for c in choices)


def test_no_duplicates_even_if_lut_and_candidates_repeat():
    choices = top_k(SEED, 10, lut=FakeLUT([B, B, D]), model=MODEL, candidates=CANDIDATES + [B, A])
    assert configs_of(choices) == [B, D, E, C, A]
    assert [c.source for c in choices] == ["lut", "lut", "table", "table", "table"]


def test_fraction_k_is_of_the_candidates_and_keeps_at_least_one():
    assert len(top_k(SEED, 0.4, model=MODEL, candidates=CANDIDATES)) == 2
    assert len(top_k(SEED, 0.01, model=MODEL, candidates=CANDIDATES)) == 1
    assert len(top_k(SEED, 1.0, model=MODEL, candidates=CANDIDATES)) == 5


def test_k_larger_than_the_space_returns_everything_once():
    assert configs_of(top_k(SEED, 50, model=MODEL, candidates=CANDIDATES)) == [B, D, E, C, A]


@pytest.mark.parametrize("bad", [0, -3, True, False, 0.0, -0.5, 1.5, 4.0, math.nan, math.inf, "4", None])
def test_bad_k_is_a_clear_value_error(bad):
    with pytest.raises(ConfigError, match="k:") as info:
        top_k(SEED, bad, model=MODEL, candidates=CANDIDATES)
    assert isinstance(info.value, ValueError)


def test_float_k_above_one_suggests_the_count():
    with pytest.raises(ConfigError, match="write 4"):
        resolve_k(4.0, 100)


@given(k=st.integers(1, 3000), n=st.integers(0, 3000))
def test_resolve_count(k, n):
    assert resolve_k(k, n) == k


@given(k=st.floats(min_value=1e-6, max_value=1.0), n=st.integers(0, 3000))
def test_resolve_fraction_like_triton(k, n):
    assert resolve_k(k, n) == max(1, int(n * k))


@given(data=st.data())
def test_top_k_is_a_prefix_of_rank_after_the_lut(data):
    runtimes = data.draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=5, max_size=5))
    model = TableModel(dict(zip(CANDIDATES, runtimes)))
    pinned = data.draw(st.lists(st.sampled_from(CANDIDATES), max_size=3, unique=True))
    k = data.draw(st.integers(1, 7))
    choices = top_k(SEED, k, lut=FakeLUT(pinned), model=model, candidates=CANDIDATES)
    ranked = [c.config for c in rank(SEED, CANDIDATES, model) if c.config not in pinned]
    assert configs_of(choices) == pinned + ranked[: max(0, k - len(pinned))]
    assert len(choices) == max(len(pinned), min(k, len(CANDIDATES)))


def test_rank_orders_everything_ascending_and_stably():
    choices = rank(SEED, CANDIDATES, MODEL)
    assert configs_of(choices) == [B, D, E, C, A]
    assert rank(SEED, [], MODEL) == []


def test_defaults_rank_the_exhaustive_space_with_the_default_model():
    choices = top_k(SEED, 8, device="h100")
    assert len(choices) == 8
    assert {c.source for c in choices} == {load_default("h100").name}
    assert all(c.config in set(for_problem(SEED, "h100")) for c in choices)
    times = [c.predicted_ms for c in choices]
    assert times == sorted(times)


def test_device_defaults_to_the_models_device():
    model = AnalyticalModel("a100")
    choices = top_k(SEED, 3, model=model)
    a100_space = set(for_problem(SEED, "a100"))
    assert all(c.config in a100_space for c in choices)


def test_device_and_model_must_agree():
    with pytest.raises(ModelError, match="h200"):
        top_k(SEED, 3, model=AnalyticalModel("h100"), device="h200")


def test_no_device_and_no_gpu_says_how_to_fix_it(monkeypatch):
    def no_gpu(index: int = 0):
        raise DeviceError("device: no CUDA device found")

    monkeypatch.setattr(device_module, "detect", no_gpu)
    with pytest.raises(DeviceError, match='device="h100"'):
        top_k(SEED, 3)


def test_rejects_a_problem_that_is_not_a_problem():
    with pytest.raises(ProblemError):
        top_k((560, 1280, 3420), 3, model=MODEL)


def test_malformed_model_output_is_a_model_error():
    class Broken(TableModel):
        def predict(self, problem, device, configs):
            return np.full(len(configs), np.nan)

    with pytest.raises(ModelError, match="malformed"):
        top_k(SEED, 2, model=Broken({}), candidates=CANDIDATES)


def test_lut_returning_non_configs_is_a_lut_error():
    with pytest.raises(LUTError, match="GemmConfig"):
        top_k(SEED, 2, lut=FakeLUT([{"block_m": 64}]), model=MODEL, candidates=CANDIDATES)


def test_batched_problem_reaches_the_model():
    problem = Problem(512, 512, 512, batch=64, op="bmm")
    single = top_k(Problem(512, 512, 512, op="bmm"), 1, device="h100")[0]
    batched = top_k(problem, 1, device="h100")[0]
    assert batched.predicted_ms > single.predicted_ms


def test_selecting_from_a_full_exhaustive_space_is_fast():
    model = AnalyticalModel("h100")
    candidates = for_problem(SEED, "h100")
    top_k(SEED, 8, model=model, candidates=candidates)
    timings = []
    for _ in range(30):
        start = time.perf_counter()
        top_k(SEED, 8, model=model, candidates=candidates)
        timings.append(time.perf_counter() - start)
    # About 0.7 ms here; the bound leaves room for a slow shared CI core.
    assert np.median(timings) < 5e-3
