"""Every command ranks for the GPU it runs on, with that GPU's model (a calibrated one first), and
names it. The GPU is simulated: runtime.current_device reports an H200 (or nothing, as on CPU)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kernel_select import runtime
from kernel_select.device import KNOWN_DEVICES
from kernel_select.resources import MODELS_DIR_ENV, shipped_dir
from tests.cli.test_select_cmds import run

PROBLEM = ["--m", "560", "--n", "1280", "--k", "3420"]


@pytest.fixture
def on_h200(monkeypatch):
    """A process that runs on an H200."""
    monkeypatch.setattr(runtime, "current_device", lambda: KNOWN_DEVICES["h200"])
    runtime.reset()
    yield
    runtime.reset()


@pytest.fixture
def calibrated_h200(monkeypatch, tmp_path: Path) -> Path:
    """A user model directory holding an H200 model (the shipped one's files, as calibrate writes them)."""
    folder = tmp_path / "user-models" / "h200"
    shutil.copytree(shipped_dir("models") / "h200", folder)
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path / "user-models"))
    return folder


def test_topk_ranks_for_the_detected_gpu_with_its_calibrated_model(capsys, on_h200, calibrated_h200: Path):
    # the cuBLAS decision off: which model ranks is the point here, not whether its gate skips Triton
    code, out, err = run(capsys, "topk", *PROBLEM, "--gemm-topk", "2", "--gemm-cublas-margin", "off")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("mm 560x1280x3420 bfloat16 on h200 (detected): 2 of ")
    assert lines[2] == f"model: h200 (calibrated, {calibrated_h200})"
    code, out, _ = run(capsys, "topk", *PROBLEM, "--gemm-topk", "2", "--json")
    payload = json.loads(out)
    assert payload["device"] == "h200" and payload["model_source"] == f"h200 (calibrated, {calibrated_h200})"


def test_an_explicit_device_wins_over_the_detected_one(capsys, on_h200):
    code, out, _ = run(capsys, "topk", *PROBLEM, "--gemm-topk", "2", "--device", "H100")
    assert code == 0 and out.startswith("mm 560x1280x3420 bfloat16 on h100: ")
    assert f"model: h100 (shipped, {shipped_dir('models') / 'h100'})" in out.splitlines()


def test_without_a_gpu_the_default_is_said(capsys, monkeypatch):
    monkeypatch.setattr(runtime, "current_device", lambda: None)
    code, out, _ = run(capsys, "space", "--m", "64", "--n", "64", "--k", "64")
    assert code == 0 and out.startswith("mm 64x64x64 bfloat16 on h100 (no CUDA GPU here: the default; pass "
                                        "--device to choose): ")


@pytest.mark.parametrize("argv", [["demo", "--gemm-topk", "1"],
                                  ["space", "--m", "64", "--n", "64", "--k", "64"]])
def test_demo_and_space_use_the_detected_gpu(capsys, on_h200, argv):
    code, out, _ = run(capsys, *argv)
    assert code == 0 and "h200 (detected)" in out.splitlines()[0]


def test_lut_from_log_keys_the_table_by_the_detected_gpu(capsys, on_h200, tmp_path: Path):
    log = Path(__file__).resolve().parents[1] / "data" / "autotune_h100.log"
    code, out, err = run(capsys, "lut", "from-log", str(log))
    assert code == 0 and '"h200"' in out and "for h200 (detected)" in err


def test_a_device_is_read_in_any_case_and_an_unknown_one_is_one_line(capsys):
    code, out, _ = run(capsys, "space", "--m", "8", "--n", "8", "--k", "8", "--device", "NVIDIA H200")
    assert code == 0 and " on h200: " in out
    code, _, err = run(capsys, "space", "--m", "8", "--n", "8", "--k", "8", "--device", "tpu")
    assert code == 2 and err.count("\n") == 1 and "unknown device 'tpu'" in err
