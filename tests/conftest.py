"""Shared test setup: hypothesis profiles, GPU gating and the user model directory, for the whole suite."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

# One intra-op thread per torch process, this one and the CLI and worker processes tests start (they
# inherit the variable). The suite runs as two pytest workers on a 2-core machine, each starting
# processes of its own: a second OpenMP thread per process oversubscribes the cores, and then every
# small network step waits on a descheduled thread (the cuBLAS gate's 1,500-step fit took 17 s on one
# thread and 169 s on two on the loaded 2-core machine). The tests' networks are too small to gain from
# a second thread. A test that is about threads sets its own count.
os.environ.setdefault("OMP_NUM_THREADS", "1")
if "torch" in sys.modules:  # imported before this file (a plugin): the variable is read too late
    sys.modules["torch"].set_num_threads(1)

# "ci" keeps the property suite fast on a 2-core CI machine while still trying many examples;
# "dev" is the same with a little more patience; "thorough" is for a local soak.
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", deadline=None, max_examples=5000,
                          suppress_health_check=[HealthCheck.too_slow])
# "mutation" is "ci" without shrinking: .ci/mutation only asks whether a test fails on a mutant, and
# shrinking the failing example to a minimal one took most of the slowest mutants' time.
settings.register_profile("mutation", parent=settings.get_profile("ci"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def fresh_runtime():
    """Every test starts with empty process caches and no warnings shown yet, and leaves none behind:
    a LUT, model or warning cached by one test must not decide what another one sees."""
    from kernel_select import runtime

    runtime.reset()
    yield
    runtime.reset()


@pytest.fixture
def user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user model directory, named by KERNEL_SELECT_MODELS_DIR (where `calibrate` writes and
    where models are looked for before the shipped ones)."""
    from kernel_select.resources import MODELS_DIR_ENV

    folder = tmp_path / "user-models"
    folder.mkdir()
    monkeypatch.setenv(MODELS_DIR_ENV, str(folder))
    return folder


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
