"""`kernel-select doctor` end to end: what would serve here, as text and JSON, exit 0 whatever it finds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernel_select import runtime
from kernel_select.cli import main
from kernel_select.device import KNOWN_DEVICES
from kernel_select.resources import MODELS_DIR_ENV, shipped_dir, shipped_lut
from tests.subprocess_env import package_env

ROOT = Path(__file__).resolve().parents[2]


def doctor(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {name: value for name, value in package_env().items()
             if not name.startswith(("TORCHINDUCTOR_", "KERNEL_SELECT_"))}
    return subprocess.run([sys.executable, "-m", "kernel_select.cli", "doctor", *argv], cwd=ROOT,
                          env={**clean, "CUDA_VISIBLE_DEVICES": "", **env}, capture_output=True, text=True,
                          timeout=300)


def test_doctor_names_the_gpu_model_gate_lut_versions_and_directories(tmp_path: Path):
    done = doctor(TORCHINDUCTOR_GEMM_TOPK="4", KERNEL_SELECT_MODELS_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "gpu: none"
    assert lines[1] == "device: h100 (no GPU: the default)"
    assert lines[2].startswith(f"model: h100 (shipped, {shipped_dir('models') / 'h100'})")
    assert any(line.startswith("  trained on: bfloat16, float16, float32; layouts nn, nt, tn; m 1..")
               for line in lines)
    assert any(line.startswith("cuBLAS gate: h100 (shipped, ")
               and line.endswith("; margin 0.15; single GEMMs only")
               for line in lines)
    assert "lut: none (set kernel_lut_path, e.g. TORCHINDUCTOR_KERNEL_LUT_PATH)" in lines
    assert any(line.startswith("versions: kernel_select ") and "torch " in line for line in lines)
    assert f"user_models: {tmp_path}" in lines and f"{MODELS_DIR_ENV}: {tmp_path}" in lines
    environment = next(line for line in lines if line.startswith("environment: "))
    assert "TORCHINDUCTOR_GEMM_TOPK=4" in environment and f"{MODELS_DIR_ENV}={tmp_path}" in environment


def test_doctor_json_reports_a_broken_lut_and_still_exits_0(tmp_path: Path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"schema_version": 4, "devices": {"h100": {"mm": {"bfloat16": [{"m": 0}]}}}}')
    done = doctor("--json", TORCHINDUCTOR_KERNEL_LUT_PATH=str(broken))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["gpu"] is None and report["device"] == "h100"
    assert report["lut"]["path"] == str(broken) and report["lut"]["valid"] is False
    assert str(broken) in report["lut"]["error"]
    assert report["model"]["loads"] is True and report["model"]["domain"]["layouts"] == ["nn", "nt", "tn"]
    assert set(report["versions"]) == {"kernel_select", "torch", "triton"}


def test_doctor_checks_a_good_lut(tmp_path: Path):
    done = doctor(TORCHINDUCTOR_KERNEL_LUT_PATH=str(shipped_lut("h100_seed.json")))
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("lut: "))
    assert line.startswith(f"lut: {shipped_lut('h100_seed.json')}: ") and "entries (h100)" in line


def test_doctor_on_a_simulated_h200_with_a_calibrated_model(capsys, monkeypatch, tmp_path: Path):
    folder = tmp_path / "h200"
    shutil.copytree(shipped_dir("models") / "h200", folder)
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(runtime, "current_device", lambda: KNOWN_DEVICES["h200"])
    runtime.reset()
    try:
        assert main(["doctor", "--json"]) == 0
    finally:
        runtime.reset()
    report = json.loads(capsys.readouterr().out)
    assert report["gpu"]["key"] == "h200" and report["device_from"] == "detected"
    assert report["model"]["kind"] == "calibrated" and report["model"]["folder"] == str(folder)
    # The folder's own gate, trained on H200 rows (a folder without one borrows the H100's: test_runtime).
    assert report["cublas_gate"]["trained_for"] == "h200"
    assert report["cublas_gate"]["batched_gemms"]  # the H200 gate has a network for batched GEMMs


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_doctor_on_a_full_stdout_names_it():
    env = {**package_env(), "PYTHONUNBUFFERED": ""}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "kernel_select.cli", "doctor"], cwd=ROOT, stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300, env={**os.environ, **env})
    assert done.returncode == 2
    assert done.stderr.endswith("kernel-select: error: <stdout>: No space left on device\n")
