"""Agreement of two collections of the same problems (`kernel-select audit A --compare B`)."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from kernel_select.cli import main
from kernel_select.errors import DatasetError
from kernel_select.offline.data import agreement, dataset
from tests.offline.test_bench_plan import _rows


def _collection(scale: dict[str, list[float]]) -> pd.DataFrame:
    """Problems with configs 16x16.., 32x16.., ... timed as given, plus each problem's cuBLAS row."""
    frames = []
    for pid, runtimes in scale.items():
        rows = _rows(pid, runtimes)
        aten = rows.iloc[[0]].assign(backend="aten", block_m=0, block_n=0, block_k=0, num_stages=0,
                                     num_warps=0, group_m=0, runtime_ms=1.0, runtime_min_ms=1.0)
        frames += [rows, aten]
    return dataset.conform(pd.concat(frames, ignore_index=True))


A, B, C = (f"bfloat16/mm/1x{m}x16x16" for m in (16, 32, 48))


def test_identical_collections_agree_fully():
    first = _collection({A: [1.0, 2.0, 3.0], B: [4.0, 2.0, 8.0]})
    result = agreement.agreement(first, first)
    assert (result.problems, result.rows, result.compared, result.best_matches) == (2, 8, 2, 2)
    assert result.median_ratio == 1.0 and result.median_abs_log_ratio == 0.0
    assert result.best_match_share == 1.0 and result.geomean_regret == 1.0


def test_ratios_are_second_over_first_and_a_swapped_best_costs_its_regret():
    first = _collection({A: [1.0, 1.1, 3.0], B: [2.0, 4.0, 8.0], C: [5.0, 5.0, 5.0]})
    second = _collection({A: [1.21, 1.1, 3.3], B: [2.2, 4.4, 8.8]})  # C is in the first only
    result = agreement.agreement(first, second)
    assert result.problems == 2 and result.rows == 8  # 3 configs + cuBLAS each
    # ratios: A 1.21, 1.0, 1.1, 1.0 (cuBLAS); B 1.1, 1.1, 1.1, 1.0 -> median 1.1
    assert result.median_ratio == pytest.approx(1.1)
    assert (result.compared, result.best_matches, result.best_match_share) == (2, 1, 0.5)
    # A: the first's fastest (1.0) runs 1.21 in the second, whose fastest is 1.1 -> 1.1x
    assert result.worst_regret == pytest.approx(1.1)
    assert result.geomean_regret == pytest.approx(math.sqrt(1.1))
    lines = agreement.report_lines(result, ("one.parquet", "two.parquet"))
    assert lines[0].startswith("two.parquet against one.parquet: 2 problems, 8 (problem, config) rows")
    assert "same fastest Triton config: 1 of 2 problems (50.0%)" in lines[2]


def test_collections_without_a_common_problem_or_with_a_config_twice_are_refused():
    with pytest.raises(DatasetError, match="no \\(problem, config\\) is timed in both"):
        agreement.agreement(_collection({A: [1.0]}), _collection({B: [1.0]}))
    twice = pd.concat([_collection({A: [1.0]}), _collection({A: [1.0]}).assign(device_name="NVIDIA H200")])
    with pytest.raises(DatasetError, match="first: bfloat16/mm/1x16x16x16 has one config timed more than"):
        agreement.agreement(twice, _collection({A: [1.0]}))


def test_the_audit_command_compares_two_files(tmp_path, capsys):
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    dataset.write(_collection({A: [1.0, 2.0], B: [3.0, 1.0]}), one)
    dataset.write(_collection({A: [1.0, 2.2], B: [3.0, 1.1]}), two)
    assert main(["audit", str(one), "--compare", str(two)]) == 0
    out = capsys.readouterr().out
    assert "same fastest Triton config: 2 of 2 problems (100.0%)" in out
    assert main(["audit", str(one), "--compare", str(two), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == 2 and report["best_match_share"] == 1.0 and report["second"] == str(two)
    with pytest.raises(SystemExit) as exited:
        main(["audit", str(one), "--compare", str(two), "--check"])
    assert exited.value.code == 2
    assert "--check and --ratio belong to the stall audit" in capsys.readouterr().err
