"""`kernel-select topk` and `kernel-select demo`, end to end through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.subprocess_env import package_env
import kernel_select.knobs as ks_config
from kernel_select.model.gate import DEFAULT_MARGIN, SMALL_GEMM_MS
from kernel_select.cli import main
from kernel_select.configs import GemmConfig
from kernel_select.problem import Problem
from kernel_select.space import for_problem

REPO_ROOT = Path(__file__).resolve().parents[2]
SEED_ARGS = ["--m", "560", "--n", "1280", "--k", "3420", "--dtype", "bf16", "--device", "h100"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_topk_table_names_the_model_and_lists_k_rows(capsys):
    code, out, _ = run(capsys, "topk", *SEED_ARGS, "-k", "4", "--model", "analytical")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("mm 560x1280x3420 bfloat16 on h100: 4 of ")
    assert lines[1].startswith("ranked by: analytical roofline model for h100")
    assert lines[2].split() == ["rank", "config", "predicted", "ms", "source"]
    rows = [line.split() for line in lines[3:7]]
    assert [row[0] for row in rows] == ["1", "2", "3", "4"]
    assert all(row[-1] == "analytical" for row in rows)
    times = [float(row[-2]) for row in rows]
    assert times == sorted(times) and times[0] > 0
    # The analytical model predicts no cuBLAS time; the shipped gate's verdict ends the output. (On
    # the seed problem the retrained gate skips Triton although Triton measured 30% faster: a known
    # miss, docs/model.md "cuBLAS as a candidate".)
    assert lines[7].startswith("cuBLAS gate: predicted cuBLAS / best Triton time ") and len(lines) == 8


def test_topk_prints_the_models_cublas_prediction(capsys):
    code, out, _ = run(capsys, "topk", *SEED_ARGS, "-k", "auto", "--json")
    payload = json.loads(out)
    assert code == 0 and 1 <= len(payload["choices"]) <= 8
    # measured: Triton 0.0248 ms, cuBLAS 0.0355 ms. The round-5 head (gate features v2) predicts
    # 0.068 ms here; the same recipe from seeds 0 / 1 / 2 gives 0.068 / 0.049 / 0.039 at equal
    # validation RMSE (0.335 / 0.338 / 0.336), so one problem is within 2x, not the ~30% of round 4.
    assert 0.0355 / 2 < payload["predicted_cublas_ms"] < 0.0355 * 2


def test_topk_reports_when_the_cublas_gate_would_skip_triton(capsys):
    code, out, _ = run(capsys, "topk", "--m", "16", "--n", "1024", "--k", "4096", "--json")
    gate = json.loads(out)["cublas_gate"]
    assert code == 0 and gate["margin"] == DEFAULT_MARGIN == 0.15
    ratio, small = gate["predicted_cublas_over_triton"], gate["small_gemm"]
    assert small == (json.loads(out)["predicted_cublas_ms"] < SMALL_GEMM_MS)
    assert gate["skips_triton"] == (ratio <= 1 - DEFAULT_MARGIN or (small and ratio < 1))
    with ks_config.patch(cublas_margin=None):
        code, out, _ = run(capsys, "topk", "--m", "16", "--n", "1024", "--k", "4096")
    assert "cuBLAS gate" not in out


def test_topk_json_matches_the_library(capsys):
    from kernel_select.model import get_model
    from kernel_select.select import top_k

    code, out, _ = run(capsys, "topk", *SEED_ARGS, "-k", "6", "--model", "analytical", "--json")
    assert code == 0
    payload = json.loads(out)
    problem = Problem(560, 1280, 3420, "bfloat16")
    expected = top_k(problem, 6, model=get_model("analytical", "h100"))
    assert payload["model"] == "analytical"
    assert payload["candidates"] == len(for_problem(problem, "h100"))
    assert [c["rank"] for c in payload["choices"]] == [1, 2, 3, 4, 5, 6]
    assert [GemmConfig(**c["config"]) for c in payload["choices"]] == [c.config for c in expected]
    assert [c["predicted_ms"] for c in payload["choices"]] == [c.predicted_ms for c in expected]


def test_topk_layout_is_printed_and_auto_takes_its_cap_outside_training(capsys):
    # the shipped model is trained on nn, nt and tn; "tt" is not measured
    code, out, _ = run(capsys, "topk", *SEED_ARGS, "--layout", "tt", "-k", "auto")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("mm 560x1280x3420 bfloat16 tt on h100: 8 of ")  # the cap (default 8)
    assert lines[2] == "-k auto took its cap: layout tt not in the model's training data"
    code, out, _ = run(capsys, "topk", *SEED_ARGS, "--layout", "nt", "-k", "auto")
    assert code == 0 and "took its cap" not in out
    code, out, _ = run(capsys, "topk", *SEED_ARGS, "-k", "auto")
    assert code == 0 and "took its cap" not in out and " nn " not in out.splitlines()[0]
    code, out, _ = run(capsys, "topk", *SEED_ARGS, "--layout", "tn", "-k", "2", "--json")
    assert code == 0 and json.loads(out)["problem"]["layout"] == "tn"


def test_topk_fraction_and_default_search_space(capsys):
    code, out, _ = run(capsys, "topk", *SEED_ARGS, "-k", "0.5", "--search-space", "default", "--json")
    assert code == 0
    payload = json.loads(out)
    assert len(payload["choices"]) == payload["candidates"] // 2


@pytest.mark.parametrize("argv, message", [
    (["-k", "0"], "k: a count must be >= 1"),
    (["-k", "1.5"], "k: a fraction must be in (0, 1]"),
    (["-k", "four"], "-k: expected a count"),
    (["-k", "4", "--model", "nope"], "no model 'nope'"),
    (["-k", "4", "--lut", "/nonexistent/lut.json"], "lut.json"),
])
def test_topk_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, "topk", *SEED_ARGS, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("kernel-select: error: ")
    assert message in err


def test_topk_bad_problem_and_device_exit_2(capsys):
    code, _, err = run(capsys, "topk", "--m", "0", "--n", "8", "--k", "8", "-k", "2")
    assert code == 2 and "m: expected a positive integer" in err
    code, _, err = run(capsys, "topk", *SEED_ARGS[:-2], "--device", "tpu", "-k", "2")
    assert code == 2 and "unknown device 'tpu'" in err
    code, _, err = run(capsys, "topk", *SEED_ARGS[:6], "--dtype", "int8", "-k", "2")
    assert code == 2 and "int8" in err
    code, out, err = run(capsys, "topk", *SEED_ARGS, "--layout", "NT", "-k", "2")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--layout: invalid choice: 'NT'" in err


def test_demo_prints_all_seed_problems_and_the_model(capsys):
    code, out, _ = run(capsys, "demo", "-k", "2", "--device", "h100")
    assert code == 0
    assert "ranked by: mlp model for h100" in out  # the shipped trained model
    assert "lookup table:" in out
    for m in (560, 1024, 2048):
        assert f"mm {m}x1280x3420 bfloat16" in out  # forward
        assert f"mm {m}x3420x1280 bfloat16" in out  # dX = dY @ W^T
        assert f"mm 1280x3420x{m} bfloat16" in out  # dW = X^T @ dY
    assert out.count("\n     1  ") == 9 and out.count("\n     2  ") == 9


def test_demo_with_a_missing_explicit_lut_is_an_error(capsys, tmp_path):
    code, _, err = run(capsys, "demo", "--lut", str(tmp_path / "missing.json"))
    assert code == 2 and "missing.json" in err


def test_demo_runs_as_a_module_in_a_subprocess():
    env = package_env()
    result = subprocess.run([sys.executable, "-m", "kernel_select.cli", "demo", "-k", "3"],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "ranked by:" in result.stdout
    assert result.stdout.count("predicted ms") == 9
