"""examples/seed_mlp.py: a clear message and a non-zero exit without CUDA; the full run is a GPU test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "seed_mlp.py"
from tests.subprocess_env import package_env


def run(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = package_env(**(env_extra or {}))
    return subprocess.run([sys.executable, str(EXAMPLE), *args], env=env, capture_output=True, text=True,
                          timeout=600, cwd=REPO)


def test_without_cuda_it_says_so_and_exits_1():
    result = run(env_extra={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 1
    assert "needs a CUDA GPU" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.gpu
@pytest.mark.parametrize("route", ["install", "options"])
def test_runs_on_a_gpu(route: str):
    result = run("--route", route, "--topk", "2")
    assert result.returncode == 0, result.stderr
    assert "seq_len  2048" in result.stdout and "Triton configs benchmarked per GEMM" in result.stdout
