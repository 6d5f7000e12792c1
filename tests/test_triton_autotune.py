"""The @triton.autotune pruner, with config objects shaped like triton.Config (no triton needed)."""

from __future__ import annotations

import logging
import types

import numpy as np
import pytest

from tests.inductor_doubles import BrokenModel, FakeLUT, FakeModel, score
from kernel_select.configs import GemmConfig
from kernel_select.errors import OptionError
from kernel_select.problem import Problem
from kernel_select.decision import rank
from kernel_select.space import for_problem
from kernel_select.triton_autotune import gemm_config_of, triton_pruner


class Tensor:
    def __init__(self, dtype: str = "torch.bfloat16") -> None:
        self.dtype = dtype
        self.device = types.SimpleNamespace(type="cuda", index=0)


def cfg(bm: int, bn: int, bk: int, stages: int = 3, warps: int = 4, **extra: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(kwargs={"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, **extra},
                                 num_stages=stages, num_warps=warps)


CONFIGS = [cfg(32, 32, 32), cfg(64, 64, 32), cfg(128, 128, 64, 4, 8), cfg(128, 64, 32), cfg(64, 128, 64),
           cfg(128, 128, 32, 2, 8), cfg(256, 128, 64, 3, 8), cfg(16, 16, 16, 1, 1)]
ARGS = {"a_ptr": Tensor(), "b_ptr": Tensor(), "c_ptr": Tensor(), "M": 512, "N": 1024, "K": 4096}
SEED_OF_ARGS = Problem(512, 1024, 4096, "bfloat16")


def by_score(configs):  # noqa: ANN001, ANN201
    return sorted(configs, key=lambda c: score(gemm_config_of(c)))


def prune(configs=CONFIGS, args=ARGS, **kw):  # noqa: ANN001, ANN003, ANN201
    kw.setdefault("model", FakeModel())
    kw.setdefault("device", "h100")
    pruner = triton_pruner(**kw)["early_config_prune"]
    return pruner(list(configs), dict(args))


def test_keeps_the_models_top_k_in_rank_order():
    assert prune(gemm_topk=3) == by_score(CONFIGS)[:3]


def test_fraction_keeps_at_least_one():
    assert prune(gemm_topk=0.5) == by_score(CONFIGS)[:4]
    assert prune(gemm_topk=0.01) == by_score(CONFIGS)[:1]


def test_gemm_topk_at_least_the_config_count_keeps_everything():
    assert prune(gemm_topk=50) == CONFIGS


def test_the_pruner_takes_every_value_the_knob_takes():
    assert prune(gemm_topk="SAME") == CONFIGS  # no pruning
    assert prune(gemm_topk="3") == prune(gemm_topk=3) == by_score(CONFIGS)[:3]
    assert prune(gemm_topk="auto") == by_score(CONFIGS)[:4]  # FakeModel has no estimate: the fixed 4
    default = prune(gemm_topk="DEFAULT")  # as many as Inductor's DEFAULT list for the problem
    inductors = len(for_problem(SEED_OF_ARGS, "h100", "default"))
    assert default == by_score(CONFIGS)[:len(default)] and len(default) == min(len(CONFIGS), inductors)
    assert prune() == by_score(CONFIGS)[:4]  # the default: top-4


def test_lut_entries_come_first_when_they_are_among_the_configs():
    pinned = gemm_config_of(CONFIGS[0])
    absent = GemmConfig(block_m=256, block_n=256, block_k=32, num_stages=2, num_warps=8)
    lut = FakeLUT({(512, 1024, 4096, "bfloat16"): [absent, pinned]})
    kept = prune(gemm_topk=3, lut=lut)
    assert kept[0] is CONFIGS[0]
    assert kept[1:] == [c for c in by_score(CONFIGS) if c is not CONFIGS[0]][:2]


class PrefersBigTiles(FakeModel):
    """Ranks the configs with the largest output tiles first."""

    def predict(self, problem, device, configs):  # noqa: ANN001, ANN201
        return np.array([1e6 / (c.block_m * c.block_n) for c in configs])


UNFIT = cfg(256, 256, 32, 4, 4)  # 512 accumulator registers per thread: it cannot run on an H100


@pytest.mark.parametrize("gemm_topk", [1, 3, 50])
def test_a_config_that_cannot_run_is_dropped_before_ranking(gemm_topk: int):
    model = PrefersBigTiles()
    ranked = rank(SEED_OF_ARGS, [gemm_config_of(c) for c in [*CONFIGS, UNFIT]], model)
    # The model's first pick by its tile, but estimate() gives a config that cannot run inf
    assert model.predict(SEED_OF_ARGS, None, [gemm_config_of(UNFIT)])[0] < ranked[0].predicted_ms
    assert ranked[-1].config == gemm_config_of(UNFIT) and ranked[-1].predicted_ms == float("inf")
    kept = prune([UNFIT, *CONFIGS], gemm_topk=gemm_topk, model=model)
    by_model = {choice.config: i for i, choice in enumerate(ranked)}
    assert kept == sorted(CONFIGS, key=lambda c: by_model[gemm_config_of(c)])[:gemm_topk]


def test_unmappable_configs_are_kept_after_the_ranked_ones():
    odd = types.SimpleNamespace(kwargs={"TILE": 64}, num_stages=2, num_warps=4)
    bad_block = cfg(48, 64, 32)  # not a power of two
    kept = prune(CONFIGS + [odd, bad_block], gemm_topk=2)
    assert kept == by_score(CONFIGS)[:2] + [odd, bad_block]


def test_tutorial_spelling_of_meta_parameters_is_understood():
    tutorial = [types.SimpleNamespace(kwargs={f"BLOCK_SIZE_{d}": c.kwargs[f"BLOCK_{d}"] for d in "MNK"}
                                      | {"GROUP_SIZE_M": 8}, num_stages=c.num_stages, num_warps=c.num_warps)
                for c in CONFIGS]
    kept = [gemm_config_of(c) for c in prune(tutorial, gemm_topk=2)]
    assert kept == [gemm_config_of(c) for c in by_score(CONFIGS)[:2]]


def test_argument_names_dtype_and_keyword_args():
    args = {"a": Tensor("torch.float16"), "b": Tensor("torch.float16"), "rows": 64}
    model = FakeModel()
    seen = []
    original = model.predict

    def spy(problem, device, configs):  # noqa: ANN001, ANN202
        seen.append((problem.m, problem.n, problem.k, problem.dtype))
        return original(problem, device, configs)

    model.predict = spy
    pruner = triton_pruner(gemm_topk=2, m="rows", n="cols", k="depth", model=model,
                           device="h100")["early_config_prune"]
    pruner(CONFIGS, args, cols=256, depth=128)  # Triton passes keyword arguments separately
    assert seen == [(64, 256, 128, "float16")]
    triton_pruner(gemm_topk=2, dtype="fp32", model=model, device="h100")["early_config_prune"](CONFIGS, ARGS)
    assert seen[-1][3] == "float32"


@pytest.mark.parametrize("problem", ["missing-arg", "no-dtype", "broken-model", "int8"])
def test_problems_fall_back_to_all_configs_with_one_warning(problem: str, caplog: pytest.LogCaptureFixture):
    args = dict(ARGS)
    kw: dict[str, object] = {"gemm_topk": 2, "device": "h100", "model": FakeModel()}
    if problem == "missing-arg":
        del args["K"]
    elif problem == "no-dtype":
        args = {"M": 64, "N": 64, "K": 64}
    elif problem == "broken-model":
        kw["model"] = BrokenModel()
    elif problem == "int8":
        args = {**ARGS, "a_ptr": Tensor("torch.int8")}
    pruner = triton_pruner(**kw)["early_config_prune"]
    with caplog.at_level(logging.WARNING, logger="kernel_select.triton_autotune"):
        assert pruner(CONFIGS, args) == CONFIGS
        assert pruner(CONFIGS, args) == CONFIGS
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1


@pytest.mark.parametrize("kw", [{"gemm_topk": 0}, {"gemm_topk": 1.5}, {"gemm_topk": True},
                                {"gemm_topk": "four"},
                                {"m": ""}, {"model": 3}])
def test_bad_arguments_raise_at_decoration_time(kw: dict[str, object]):
    with pytest.raises(OptionError):
        triton_pruner(**kw)


def test_the_old_top_k_argument_warns_and_still_prunes():
    with pytest.warns(DeprecationWarning, match="triton_pruner: 'top_k' is deprecated; use 'gemm_topk'"):
        kept = prune(top_k=3)
    assert kept == by_score(CONFIGS)[:3]


def test_an_unknown_argument_is_an_option_error():
    with pytest.raises(OptionError, match="triton_pruner: unknown knob 'gemm_tpok'"):
        triton_pruner(gemm_tpok=3)


def test_exported_lazily_from_the_package():
    import kernel_select

    assert kernel_select.triton_pruner is triton_pruner
    with pytest.raises(AttributeError):
        kernel_select.no_such_thing  # noqa: B018
