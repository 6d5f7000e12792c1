"""Process caches and warn-once: bad LUT paths never block, failures are cached, one warning per cause."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kernel_select import runtime, warn
from kernel_select.device import get_device
from kernel_select.errors import LUTError, ModelError, NoTrainedModelError
from kernel_select.model.cublas import CublasGate
from kernel_select.resources import HIDE_SHIPPED_ENV, MODELS_DIR_ENV
from tests.lut.test_hardening import unread

REPO = Path(__file__).resolve().parent.parent
H100 = get_device("h100")
SEED_LUT = REPO / "luts" / "h100_seed.json"


@pytest.fixture
def fifo(tmp_path: Path) -> str:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    path = tmp_path / "lut.fifo"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "missing"])
def test_unsafe_lut_paths_are_refused_unread_and_still_get_a_cache_key(kind: str, fifo: str, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    path = {"fifo": fifo, "dev-zero": "/dev/zero", "directory": str(tmp_path),
            "missing": str(tmp_path / "x")}[kind]
    if kind == "dev-zero" and not os.path.exists(path):
        pytest.skip("no /dev/zero")
    # refused from its stat, never opened to be parsed; the cache key's digest opens it without waiting
    # and reads none of it (unread: a FIFO would block, /dev/zero never ends)
    monkeypatch.setattr(runtime, "_read_lut", lambda p: pytest.fail(f"{p} was opened to be parsed"))
    with pytest.raises(LUTError, match="regular file|cannot read|no such LUT file"), unread():
        runtime.load_lut(path)
    with unread():
        fingerprint = runtime.lut_fingerprint(path)
    assert fingerprint.startswith(f"{path}:unloadable:")


def test_a_nul_byte_in_a_lut_path_is_a_lut_error_that_shows_it_escaped():
    with pytest.raises(LUTError) as info, unread():
        runtime.load_lut("bad\0path.json")
    assert str(info.value).startswith("bad\\x00path.json: cannot open: not a usable path (it contains a NUL "
                                      "byte); fix "
                                      "kernel_lut_path / TORCHINDUCTOR_KERNEL_LUT_PATH")
    assert runtime.lut_fingerprint("bad\0path.json").startswith("bad\0path.json:unloadable:")


def test_a_lut_over_the_size_cap_is_refused_before_it_is_read(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 2048)
    monkeypatch.setattr(runtime, "LUT_FILE", replace(runtime.LUT_FILE, limit=1024))
    monkeypatch.setattr(runtime, "_read_lut", lambda p: pytest.fail("an oversized LUT was read"))
    with pytest.raises(LUTError, match="2,048 bytes or more is over the LUT size limit of 1,024 bytes.*"
                                       "MAX_LUT_BYTES"):
        runtime.load_lut(str(path))
    assert runtime.lut_fingerprint(str(path)) != runtime.lut_fingerprint(str(tmp_path / "other.json"))


def test_an_invalid_lut_is_parsed_once_per_file_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "lut.json"
    path.write_text('{"schema_version": 1, "bad": ')
    reads = []

    def read(p: str) -> Any:
        reads.append(p)
        raise LUTError(f"{p}: invalid")

    monkeypatch.setattr(runtime, "_read_lut", read)
    for _ in range(5):
        with pytest.raises(LUTError, match="invalid"):
            runtime.load_lut(str(path))
        runtime.lut_fingerprint(str(path))
    assert len(reads) == 1
    path.write_text('{"schema_version": 1, "bad": 2}')  # edited: a new identity, read again
    with pytest.raises(LUTError):
        runtime.load_lut(str(path))
    assert len(reads) == 2


def test_a_valid_lut_is_cached_and_reloaded_when_it_changes(tmp_path: Path):
    path = tmp_path / "lut.json"
    shutil.copy(SEED_LUT, path)
    first = runtime.load_lut(str(path))
    assert runtime.load_lut(str(path)) is first
    key = runtime.lut_fingerprint(str(path))
    path.write_text(SEED_LUT.read_text() + "\n")
    assert runtime.load_lut(str(path)) is not first
    assert runtime.lut_fingerprint(str(path)) == key  # same table, same digest, whatever the bytes


def test_warn_once_is_keyed_by_cause_not_by_message(caplog: pytest.LogCaptureFixture):
    logger = logging.getLogger("kernel_select.test")

    def failure(problem: int) -> ModelError:
        try:
            raise ModelError(f"NaN runtimes for problem {problem}")  # one raise site: one cause
        except ModelError as exc:
            return exc

    with caplog.at_level(logging.WARNING, logger="kernel_select.test"):
        shown = [warn.warn_fallback(failure(i), logger, "falling back") for i in range(50)]
        tagged = failure(0)
        tagged.cause_id = "lut:/some/file.json"  # type: ignore[attr-defined]
        shown.append(warn.warn_fallback(tagged, logger, "falling back"))
    assert shown.count(True) == 2 and len(caplog.records) == 2
    runtime.reset()  # forgets the warnings shown, too
    assert warn.warn_fallback(failure(1), logger, "falling back")


def shipped_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: Callable[[Path], None]) -> Path:
    """A copy of the shipped h100 models with one file damaged, made the user's model directory."""
    root = tmp_path / "models"
    shutil.copytree(REPO / "models" / "h100", root / "h100")
    damage(root / "h100")
    monkeypatch.setenv(MODELS_DIR_ENV, str(root))
    return root


@pytest.mark.parametrize("damage, broken, message", [("truncated", "mlp.pt", "cannot be loaded as weights"),
                                                      ("garbage-card", "mlp.json", "invalid JSON")])
def test_a_broken_model_is_an_error_naming_the_file_never_another_model(
        damage: str, broken: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    def truncate(folder: Path) -> None:
        weights = folder / "mlp.pt"
        weights.write_bytes(weights.read_bytes()[:100])

    def garble(folder: Path) -> None:
        (folder / "mlp.json").write_text("{not json")

    root = shipped_copy(tmp_path, monkeypatch, truncate if damage == "truncated" else garble)
    with pytest.raises(ModelError, match=message) as first:
        runtime.model(None, H100)
    assert str(root / "h100" / broken) in str(first.value) and "retrain" in str(first.value)
    # Cached: the next GEMM gets the same error without touching the files again.
    (root / "h100" / "mlp.pt").unlink()
    with pytest.raises(ModelError) as second:
        runtime.model(None, H100)
    assert str(second.value) == str(first.value)


def test_without_a_trained_model_the_default_is_an_error_loaded_once(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    a100 = get_device("a100")
    loads = []
    load_default = runtime.load_default
    monkeypatch.setattr(runtime, "load_default", lambda device: loads.append(device) or load_default(device))
    for _ in range(3):
        with pytest.raises(NoTrainedModelError, match="no trained model for a100"):
            runtime.model(None, a100)
    assert loads == [a100]
    assert runtime.model("analytical", a100).name == "analytical"  # only when asked for by name
    assert runtime.model(None, H100) is runtime.model(None, H100)  # the shipped model, loaded once


def test_gates_are_loaded_once_per_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    gate = runtime.gate(H100)
    assert isinstance(gate, CublasGate) and runtime.gate(H100) is gate
    assert runtime.gate(get_device("a100")) is None


def test_reset_forgets_cached_models_and_devices(monkeypatch: pytest.MonkeyPatch):
    calls = []
    monkeypatch.setattr("kernel_select.device.detect", lambda index: calls.append(index) or H100)
    assert runtime.detected_device(0) is H100 and runtime.detected_device(0) is H100
    assert calls == [0]
    analytical = runtime.model("analytical", H100)
    runtime.reset()
    assert runtime.model("analytical", H100) is not analytical
    runtime.detected_device(0)
    assert calls == [0, 0]


def test_the_h100_gate_serves_an_h200_without_its_own_by_design_without_a_warning(
        user: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    monkeypatch.setenv(HIDE_SHIPPED_ENV, "h200")  # the shipped H200 folder, its gate with it
    with caplog.at_level(logging.INFO, logger="kernel_select"):
        gate = runtime.gate(get_device("h200"))
        runtime.gate(get_device("h200"))
    assert isinstance(gate, CublasGate)
    announced = [r for r in caplog.records if "cublas_gate" in r.getMessage()]
    assert len(announced) == 1 and announced[0].levelno == logging.INFO
    assert "trained on h100" in announced[0].getMessage()


def test_the_h200_is_served_by_its_own_gate_quietly(user: Path, caplog: pytest.LogCaptureFixture):
    with caplog.at_level(logging.INFO, logger="kernel_select"):
        gate = runtime.gate(get_device("h200"))
    assert isinstance(gate, CublasGate) and gate.card.device == "h200"
    assert not [r for r in caplog.records if "cublas_gate" in r.getMessage()]


def test_a_stand_in_performance_model_still_warns(user: Path, monkeypatch: pytest.MonkeyPatch,
                                                  caplog: pytest.LogCaptureFixture):
    monkeypatch.setenv(HIDE_SHIPPED_ENV, "h200")
    with caplog.at_level(logging.INFO, logger="kernel_select"):
        runtime.model(None, get_device("h200"))
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "no mlp model" in r.getMessage()]
    assert len(warned) == 1 and "kernel-select calibrate" in warned[0].getMessage()
