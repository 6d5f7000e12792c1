"""CPU-testable parts of the GPU harness: rank correlation, config picking, row building."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from kernel_select.offline.harness import bench
from kernel_select.offline.data import dataset, problem_ids, splits
from kernel_select.offline.harness.bench_plan import plan
from kernel_select.device import get_device
from kernel_select.offline.harness.fidelity import pick_configs, spearman
from kernel_select.problem import Problem

H100 = get_device("h100")


def test_spearman_matches_the_definition():
    x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    assert spearman(x, x ** 3) == pytest.approx(1.0)
    assert spearman(x, -x) == pytest.approx(-1.0)
    # d = rank differences (1, -1, 0, 0, 0): rho = 1 - 6 * 2 / (5 * 24) = 0.9
    assert spearman(x, np.array([2.0, 1.0, 3.0, 4.0, 5.0])) == pytest.approx(0.9)
    assert math.isnan(spearman([1.0, 2.0], [1.0, 2.0]))  # too few points
    assert spearman([1, 2, 3, math.inf], [1, 2, 3, 0]) == pytest.approx(1.0)  # non-finite dropped


def test_pick_configs_spreads_over_the_measured_ranking():
    problem = Problem(560, 1280, 3420)
    space = plan([problem], H100)[0]
    runtimes = np.linspace(1.0, 5.0, len(space))
    pid = problem_ids.problem_id(560, 1280, 3420, "bfloat16")
    rows = pd.DataFrame([dict(problem_id=pid, backend="triton",
                              runtime_ms=ms, **dict(zip(dataset.CONFIG_COLUMNS, run.config.key)))
                         for run, ms in zip(space, runtimes)])
    picked = pick_configs(problem, H100, 40, rows)
    assert len(picked) == 40 == len(set(picked))
    assert picked[:8] == [run.config for run in space[:8]]  # the fastest eight first
    assert picked[-1] in {run.config for run in space[-len(space) // 3:]}  # reaches the slow end
    sampled = pick_configs(problem, H100, 40, None)  # never measured: a seeded sample
    assert sampled == pick_configs(problem, H100, 40, None) and len(set(sampled)) == 40


def test_pick_configs_reads_the_rows_of_the_problems_own_layout():
    # An nt problem's ranking is its own rows', not those of the nn twin with the same sizes.
    nt, nn = Problem(16, 1280, 3420, layout="nt"), Problem(16, 1280, 3420)
    space = plan([nt], H100)[0]
    fast_first = np.linspace(1.0, 5.0, len(space))

    def rows(problem: Problem, runtimes: np.ndarray) -> pd.DataFrame:
        return pd.DataFrame([dict(problem_id=problem_ids.id_of(problem), backend="triton", runtime_ms=ms,
                                  **dict(zip(dataset.CONFIG_COLUMNS, run.config.key)))
                             for run, ms in zip(space, runtimes)])

    data = pd.concat([rows(nt, fast_first), rows(nn, fast_first[::-1])])
    assert pick_configs(nt, H100, 12, data)[:8] == [run.config for run in space[:8]]
    assert pick_configs(nn, H100, 12, data)[:8] == [run.config for run in space[::-1][:8]]


def test_fidelity_pins_the_configs_for_the_problems_layout(tmp_path):
    from kernel_select.lut import load_lut
    from kernel_select.offline.harness.fidelity import _pinning_lut

    problem = Problem(16, 1280, 3420, layout="nt")
    configs = [run.config for run in plan([problem], H100)[0][:3]]
    path = tmp_path / "pins.json"
    _pinning_lut(problem, H100, configs, path)
    lut = load_lut(path)
    assert lut.probe(problem, H100).configs == tuple(configs)
    assert lut.probe(Problem(16, 1280, 3420), H100) is None  # the nn twin is another problem


def test_rows_record_medians_failures_and_cublas():
    problem = Problem(100, 272, 3420)
    runs = plan([problem], H100)[0][:3]
    results = {0: bench._Timed(samples=[3.0, 1.0, 2.0]), 1: bench._Timed(samples=[5.0], status="capped"),
               2: bench._Timed(status="out_of_resources", error="OutOfResources: smem")}
    cublas = bench._Timed(samples=[4.0, 6.0])
    prov = dict(device_name="NVIDIA H100 80GB HBM3", sm_count=132, torch_version="2.11.0",
                triton_version="3.6.0", git_sha="abc")
    df = dataset.conform(pd.DataFrame(bench.rows_for(runs, results, cublas, prov, bench.BenchOptions())))
    assert list(df["runtime_ms"][:2]) == [2.0, 5.0] and math.isinf(df["runtime_ms"][2])
    assert list(df["runtime_min_ms"][:2]) == [1.0, 5.0] and list(df["n_runs"]) == [3, 1, 0, 2]
    assert list(df["status"]) == ["ok", "capped", "out_of_resources", "ok"]
    assert list(df["backend"]) == ["triton"] * 3 + ["aten"] and df["runtime_ms"].iloc[-1] == 5.0
    assert (df["split"] == splits.split_of(df["problem_id"][0])).all()


@pytest.mark.parametrize("name,text,status", [
    ("OutOfResources", "out of resource: shared memory, Required: 262144", "out_of_resources"),
    ("CompilationError", "at 10:4: oops", "compile_error"),
    ("PTXASError", "ptxas fatal", "compile_error"),
    ("RuntimeError", "CUDA error: an illegal memory access", "runtime_error"),
])
def test_failures_are_classified(name, text, status):
    exc = type(name, (Exception,), {})(text)
    assert bench.error_class(exc) == status


def test_fidelity_summary_leaves_out_problems_without_triton_choices_and_round_trips(tmp_path):
    import math

    from kernel_select.offline.harness import fidelity

    def result(name: str, rho: float, n: int = 40) -> fidelity.FidelityResult:
        return fidelity.FidelityResult(problem=name, n_configs=n, spearman_median=rho, spearman_min=rho,
                                       median_ratio=0.98 if n else math.nan, inductor_best="",
                                       harness_best="", compile_s=1.0)

    results = [result("mm 560x1280x3420 bfloat16", 0.9), result("mm 1x4096x4096 bfloat16", math.nan, n=0),
               result("mm 16x4096x4096 bfloat16", 0.8), result("mm 64x64x64 bfloat16", 1.0)]
    summary = fidelity.summarize(results)
    assert summary["problems"] == 3 and summary["median_spearman"] == 0.9 and summary["min_spearman"] == 0.8
    assert summary["without_triton_choices"] == ["mm 1x4096x4096 bfloat16"]
    path = tmp_path / "fidelity.json"
    fidelity.write_json(summary, path)  # strict JSON: the NaNs are written as null
    back = fidelity.read_json(path)
    assert [r.problem for r in back] == [r.problem for r in results] and math.isnan(back[1].spearman_median)


def test_fidelity_resume_needs_a_json_path(capsys):
    from kernel_select.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fidelity", "--shapes", "data/fidelity_shapes.json", "--resume"])
    assert exit_info.value.code == 2 and "--resume needs --json" in capsys.readouterr().err


def test_fidelity_result_uses_only_the_configs_both_sides_timed():
    from kernel_select.configs import GemmConfig
    from kernel_select.offline.harness import fidelity

    configs = [GemmConfig.from_key((bm, 64, 32, 3, 4, 8)) for bm in (16, 32, 64, 128, 256)]
    inductor = {c: float(i + 1) for i, c in enumerate(configs[:4])}  # Inductor skipped the last one
    inductor[configs[3]] = math.inf  # ... and failed to time this one
    harness = {c: 2.0 * (len(configs) - i) for i, c in enumerate(configs)}  # the reverse order
    result = fidelity._result(Problem(64, 64, 64), configs, inductor, harness, harness, compile_s=1.5)
    assert result.n_configs == 3
    assert result.spearman_median == pytest.approx(-1.0) and result.spearman_min == pytest.approx(-1.0)
    # Ratios 1/10, 2/8, 3/6: the median is 0.25.
    assert result.median_ratio == pytest.approx(0.25)
    assert result.inductor_best == configs[0].short() and result.harness_best == configs[2].short()


def test_rows_name_the_commit_and_a_dirty_working_tree(tmp_path, monkeypatch):
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("needs git")
    monkeypatch.delenv("KERNEL_SELECT_GIT_SHA", raising=False)

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "f.txt").write_text("a")
    git("add", "f.txt")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    assert bench._git_sha(tmp_path) == head
    (tmp_path / "new.txt").write_text("untracked files do not count")
    assert bench._git_sha(tmp_path) == head
    (tmp_path / "f.txt").write_text("b")
    assert bench._git_sha(tmp_path) == f"{head}-dirty"
    monkeypatch.setenv("KERNEL_SELECT_GIT_SHA", "abc123")
    assert bench._git_sha(tmp_path) == "abc123"
