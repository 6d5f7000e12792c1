"""The two calls most users need (kernel_select.api): `estimate` and `top_k` rank with the device's
trained model, loaded once per process, and refuse bad input with the package's own errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kernel_select
from kernel_select import runtime
from kernel_select.errors import ConfigError, NoTrainedModelError, ProblemError
from kernel_select.lut import load_lut
from kernel_select.model.analytical import AnalyticalModel
from kernel_select.model.mlp import MLPModel
from kernel_select.problem import Problem
from kernel_select.resources import MODELS_DIR_ENV, shipped_dir, shipped_lut
from kernel_select.decision import select
from kernel_select.space import for_problem

SEED = Problem(560, 1280, 3420, "bfloat16")
CONFIGS = for_problem(SEED, "h100")[:40]
SEED_LUT = shipped_lut("h100_seed.json")


@pytest.fixture(autouse=True)
def shipped_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty user model directory: the shipped models serve."""
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))


@pytest.fixture(scope="module")
def shipped() -> MLPModel:
    return MLPModel.load(shipped_dir("models") / "h100", "h100")


def test_the_package_exports_the_api():
    assert kernel_select.estimate is kernel_select.api.estimate
    assert kernel_select.top_k is kernel_select.api.top_k
    assert kernel_select.select is select is kernel_select.decision.select and callable(kernel_select.select)


def test_estimate_ranks_with_the_trained_model(shipped: MLPModel):
    np.testing.assert_array_equal(kernel_select.estimate(560, 1280, 3420, "bfloat16", CONFIGS, device="h100"),
                                  shipped.estimate(SEED, CONFIGS))
    batched = Problem(560, 1280, 3420, "bfloat16", op="bmm", batch=4, layout="nt")
    np.testing.assert_array_equal(
        kernel_select.estimate(560, 1280, 3420, "bf16", CONFIGS, "h100", batch=4, layout="nt"),
        shipped.estimate(batched, CONFIGS))


def test_the_model_is_loaded_once_per_process(monkeypatch: pytest.MonkeyPatch):
    loads = []
    load_default = runtime.load_default
    monkeypatch.setattr(runtime, "load_default",
                        lambda device: loads.append(device.key) or load_default(device))
    kernel_select.estimate(560, 1280, 3420, "bfloat16", CONFIGS, device="h100")
    kernel_select.top_k(560, 1280, 3420, device="h100")
    assert loads == ["h100"]


def test_top_k_ranks_with_the_trained_model(shipped: MLPModel):
    choices = kernel_select.top_k(560, 1280, 3420, "bfloat16", gemm_topk=4, device="h100")
    assert choices == list(select(SEED, model=shipped, gemm_topk=4).choices)
    assert len(choices) == 4 and {c.source for c in choices} == {"mlp"}
    predicted = [c.predicted_ms for c in choices]
    assert predicted == sorted(predicted)
    everything = shipped.estimate(SEED, for_problem(SEED, "h100"))
    assert predicted[0] == pytest.approx(everything.min())


def test_top_k_puts_the_luts_entries_first_from_a_path_or_a_table(shipped: MLPModel):
    table = load_lut(SEED_LUT)
    entries = table.lookup(SEED, "h100")
    assert entries  # the seed problem is in the seed LUT
    for lut in (SEED_LUT, str(SEED_LUT), table):
        choices = kernel_select.top_k(560, 1280, 3420, gemm_topk=len(entries) + 2, device="h100", lut=lut)
        assert [c.config for c in choices[:len(entries)]] == list(entries)
        assert [c.source for c in choices] == ["lut"] * len(entries) + ["mlp", "mlp"]


def test_a_model_passed_by_name_or_instance_ranks_instead():
    analytical = AnalyticalModel("h100")
    by_instance = kernel_select.top_k(560, 1280, 3420, device="h100", model=analytical)
    by_name = kernel_select.top_k(560, 1280, 3420, device="h100", model="analytical")
    assert by_instance == by_name and {c.source for c in by_name} == {"analytical"}
    by_name_ms = kernel_select.estimate(560, 1280, 3420, "bfloat16", CONFIGS, "h100", model="analytical")
    np.testing.assert_array_equal(by_name_ms, analytical.estimate(SEED, CONFIGS))


def test_a_device_without_a_trained_model_raises_and_names_the_fix():
    with pytest.raises(NoTrainedModelError, match="no trained model for a100.*model='analytical'"):
        kernel_select.estimate(560, 1280, 3420, "bfloat16", CONFIGS, device="a100")
    with pytest.raises(NoTrainedModelError):
        kernel_select.top_k(560, 1280, 3420, device="a100")
    assert len(kernel_select.top_k(560, 1280, 3420, device="a100", model="analytical")) == 4


@pytest.mark.parametrize("configs, message", [
    ([CONFIGS[0].model_dump()], r"configs\[0\]: expected a GemmConfig, got dict \(GemmConfig\(\*\*d\)"),
    (CONFIGS[0].model_dump(), "configs: expected a sequence of GemmConfig, got dict"),
    ([CONFIGS[0], "64x64x32 s3 w4"], r"configs\[1\]: expected a GemmConfig, got str"),
])
def test_a_config_that_is_not_a_gemm_config_is_a_config_error(configs, message):
    with pytest.raises(ConfigError, match=message):
        kernel_select.estimate(560, 1280, 3420, "bfloat16", configs, device="h100")


def test_bad_sizes_and_k_are_the_packages_errors():
    with pytest.raises(ProblemError):
        kernel_select.estimate(0, 1280, 3420, "bfloat16", CONFIGS, device="h100")
    with pytest.raises(ProblemError):
        kernel_select.top_k(560, 1280, 3420, device="h100", layout="xx")
    with pytest.raises(ConfigError, match="k: a count must be >= 1"):
        kernel_select.top_k(560, 1280, 3420, device="h100", gemm_topk=0)
    assert kernel_select.estimate(560, 1280, 3420, "bfloat16", [], device="h100").shape == (0,)


def test_the_guide_names_every_exported_name():
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide.md").read_text()
    section = guide[guide.index("## Python API"):]
    section = section[: section.index("\n## ", 1)]
    missing = [name for name in kernel_select.__all__ if f"`{name}`" not in section]
    assert not missing, f"docs/guide.md's Python API section does not name {missing}"
