"""Which trained model serves a device (model/folders.py): the user's model directory before the
shipped models, the device's own folder before a same-architecture stand-in (with one warning), a
broken checkpoint is an error and never a fallback, and a KERNEL_SELECT_MODELS_DIR that is not a
folder is reported once while the shipped models serve."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from tests.synthetic import untrained_mlp, untrained_problem_net

from kernel_select.device import get_device
from kernel_select.errors import ModelCardMismatchError, ModelError, NoTrainedModelError
from kernel_select.model import load_default, load_gate
from kernel_select.model.cublas import AtenHead, CublasGate
from kernel_select.model.folders import find_checkpoint, model_folders
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.training.cublas_fit import save_problem_net
from kernel_select.offline.training.train import save_model
from kernel_select.problem import Problem
from kernel_select.resources import MODELS_DIR_ENV, model_roots, shipped_dir, user_models_dir
from kernel_select.space import for_problem

SHIPPED = shipped_dir("models")
SEED = Problem(560, 1280, 3420, "bfloat16")
CONFIGS = for_problem(SEED, "h100")[:64]



def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def _same_net(a: MLPModel, b: MLPModel) -> bool:
    return np.array_equal(a.estimate(SEED, CONFIGS), b.estimate(SEED, CONFIGS))


def test_the_folders_are_tried_device_first_then_stand_ins_each_user_before_shipped(user: Path):
    assert model_roots() == [user, SHIPPED]
    pcie = get_device("h100-pcie")
    folders = [(str(folder), trained_for.key) for folder, trained_for in model_folders(pcie)]
    assert folders == [(str(user / "h100-pcie"), "h100-pcie"), (str(SHIPPED / "h100-pcie"), "h100-pcie"),
                       (str(user / "h100"), "h100"), (str(SHIPPED / "h100"), "h100"),
                       (str(user / "h200"), "h200"), (str(SHIPPED / "h200"), "h200")]
    assert [(str(f), d.key) for f, d in model_folders(get_device("a100"))] == [
        (str(user / "a100"), "a100"), (str(SHIPPED / "a100"), "a100")]


def test_a_model_in_the_user_directory_serves_before_the_shipped_one(user: Path, caplog):
    mine = untrained_mlp()
    save_model(mine, user / "h100")
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        model = load_default("h100")
    assert _same_net(model, mine) and not _same_net(model, MLPModel.load(SHIPPED / "h100", "h100"))
    # The user's folder has no cuBLAS time head: the first folder that has one lends it.
    assert model.aten is not None and model.aten.card.device == "h100"
    assert model.estimate_aten(SEED) == MLPModel.load(SHIPPED / "h100", "h100").estimate_aten(SEED)
    assert not _warnings(caplog)  # the device's own model: nothing to announce


def test_a_gate_and_a_head_in_the_user_directory_serve_before_the_shipped_ones(user: Path):
    mine = untrained_mlp()
    mine.aten = untrained_problem_net(AtenHead, seed=1)
    save_model(mine, user / "h100")
    gate = untrained_problem_net(CublasGate, seed=2)
    save_problem_net(gate, user / "h100")
    assert load_default("h100").estimate_aten(SEED) == pytest.approx(float(mine.aten.predict_ms([SEED])[0]))
    loaded = load_gate("h100")
    assert loaded is not None and loaded.digest() == gate.digest()
    assert loaded.digest() != CublasGate.load(SHIPPED / "h100", "h100").digest()


def test_without_a_user_model_the_shipped_ones_serve(user: Path):
    model, gate = load_default("h100"), load_gate("h100")
    assert _same_net(model, MLPModel.load(SHIPPED / "h100", "h100"))
    assert gate is not None and gate.digest() == CublasGate.load(SHIPPED / "h100", "h100").digest()


def test_the_default_user_directory_is_the_per_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(MODELS_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert user_models_dir() == tmp_path / "kernel_select" / "models"
    assert model_roots() == [SHIPPED]  # not created yet: skipped, and nothing to warn about
    mine = untrained_mlp()
    save_model(mine, user_models_dir() / "h100")
    assert model_roots() == [user_models_dir(), SHIPPED]
    assert _same_net(load_default("h100"), mine)


def test_a_device_with_its_own_folder_is_served_by_it_before_any_stand_in(user: Path, caplog):
    save_model(untrained_mlp(), user / "h100")  # a stand-in for the H200, in the folder searched first
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        model = load_default("h200")
    assert model.card.device == model.device.key == "h200"
    assert _same_net(model, MLPModel.load(SHIPPED / "h200", "h200"))
    assert not [m for m in _warnings(caplog) if "no mlp model trained on" in m]


def test_a_device_without_a_folder_gets_a_same_architecture_stand_in_with_one_warning(user: Path, caplog):
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        model = load_default("h100-pcie")
        again = load_default("h100-pcie")
        gate = load_gate("h100-pcie")
    assert isinstance(model, MLPModel) and isinstance(again, MLPModel)
    assert model.device.key == "h100-pcie" and model.card.device == "h100"  # the first stand-in, h100
    assert "measured on h100" in model.describe()
    assert gate is not None and gate.device.key == "h100-pcie" and gate.card.device == "h100"
    mlp_warnings = [m for m in _warnings(caplog) if "no mlp model trained on h100-pcie" in m]
    assert len(mlp_warnings) == 1
    assert str(SHIPPED / "h100") in mlp_warnings[0] and "sm_90" in mlp_warnings[0]
    assert "kernel-select calibrate" in mlp_warnings[0]
    # the gate serves its architecture by design (model.load_gate): announced at INFO, not warned
    assert not [m for m in _warnings(caplog) if "no cublas_gate model trained on h100-pcie" in m]


def test_a_stand_in_in_the_user_directory_comes_before_the_shipped_one(user: Path):
    mine = untrained_mlp()
    save_model(mine, user / "h100")
    model = load_default("h100-pcie")
    assert model.device.key == "h100-pcie" and model.card == mine.card
    assert find_checkpoint(get_device("h100-pcie"), "mlp") == (user / "h100", get_device("h100"))


def test_another_architecture_never_borrows_a_model(user: Path):
    save_model(untrained_mlp(), user / "h100")
    with pytest.raises(NoTrainedModelError, match="no trained model for a100"):
        load_default("a100")
    assert load_gate("a100") is None
    assert find_checkpoint(get_device("a100"), "mlp") is None


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.mark.parametrize("broken", ["mlp.pt", "mlp.json", "aten.pt"])
def test_a_broken_user_checkpoint_raises_and_never_falls_back(user: Path, broken: str, caplog):
    mine = untrained_mlp()
    mine.aten = untrained_problem_net(AtenHead)
    save_model(mine, user / "h100")
    _truncate(user / "h100" / broken)
    with caplog.at_level(logging.WARNING, logger="kernel_select"), \
            pytest.raises(ModelCardMismatchError) as info:
        load_default("h100")
    assert str(user / "h100" / broken) in str(info.value) and "kernel-select train" in str(info.value)
    assert not _warnings(caplog)  # an error, not a warning and a quiet substitute


def test_a_broken_gate_raises(user: Path):
    save_model(untrained_mlp(), user / "h100")  # a gate serves only beside its MLP
    save_problem_net(untrained_problem_net(CublasGate), user / "h100")
    (user / "h100" / "cublas_gate.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="cublas_gate.pt"):
        load_gate("h100")


def test_a_broken_stand_in_raises_too(user: Path):
    save_model(untrained_mlp(), user / "h100")
    _truncate(user / "h100" / "mlp.pt")
    with pytest.raises(ModelCardMismatchError, match=str(user / "h100" / "mlp.pt")):
        load_default("h100-pcie")


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_a_models_dir_that_is_not_a_folder_warns_once_and_the_shipped_models_serve(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog):
    target = tmp_path / "models"
    if kind == "file":
        target.write_text("not a folder")
    monkeypatch.setenv(MODELS_DIR_ENV, str(target))
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        model, again, gate = load_default("h100"), load_default("h200"), load_gate("h100")
    assert _same_net(model, MLPModel.load(SHIPPED / "h100", "h100"))
    assert again.card.device == "h200" and gate.card.device == "h100"  # the h100's gate serves both
    warnings = _warnings(caplog)
    assert len(warnings) == 1
    assert MODELS_DIR_ENV in warnings[0] and str(target) in warnings[0] and "shipped models" in warnings[0]
    assert model_roots() == [SHIPPED]


def test_a_gate_without_an_mlp_in_the_user_directory_is_passed_over_with_one_warning(user: Path, caplog):
    # issue 43: a folder holding only a gate (what an interrupted write left) changed the cuBLAS
    # decision of the shipped MLP (predicted ratio 1.25 -> 1.72)
    shipped_gate = load_gate("h100")
    folder = user / "h100"
    save_problem_net(untrained_problem_net(CublasGate, seed=3), folder)
    assert sorted(p.name for p in folder.iterdir()) == ["cublas_gate.json", "cublas_gate.pt"]
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        for _ in range(2):
            gate = load_gate("h100")
            assert gate is not None and shipped_gate is not None and gate.digest() == shipped_gate.digest()
    warnings = _warnings(caplog)
    assert len(warnings) == 1
    assert f"ignoring {folder}: it holds a cublas_gate checkpoint but no MLP" in warnings[0]
