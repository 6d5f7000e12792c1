"""The audit of implausible single samples: the rule on a small hand-made frame, and the CLI."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from kernel_select.cli import main
from kernel_select.offline.data import audit, dataset

BASE = dict(m=64, n=64, k=64, batch=1, op="mm", layout="nn", backend="triton", block_k=32, num_stages=2,
            num_warps=4, group_m=8, even_k=True, allow_tf32=False, error="", split="train",
            device_name="NVIDIA H100", sm_count=132, torch_version="2.11", triton_version="3.6",
            git_sha="x", timestamp="2026-01-01T00:00:00Z", timing_method="test")


def row(pid: str, tile: tuple[int, int], ms: float, status: str = "capped", **extra) -> dict:
    n_runs = 0 if not math.isfinite(ms) else 1 if status == "capped" else 6
    return dict(BASE, problem_id=pid, dtype=pid.split("/")[0], block_m=tile[0], block_n=tile[1],
                runtime_ms=ms, runtime_min_ms=ms, status=status, n_runs=n_runs) | extra


def frame() -> pd.DataFrame:
    a, b = "bfloat16/mm/1x64x64x64", "float16/mm/1x64x64x64"
    rows = [
        row(a, (64, 64), 0.01, "ok"), row(a, (64, 64), 0.05), row(a, (64, 64), 0.09),  # 9x: suspect
        row(a, (64, 64), 0.08),  # exactly 8x: not over the ratio
        row(a, (128, 128), 0.2), row(a, (128, 128), 1.7),  # 8.5x its own tile: suspect
        row(a, (128, 128), math.inf, "out_of_resources"),
        row(a, (0, 0), 0.001, "ok", backend="aten"),  # cuBLAS is no tile's fastest
        row(b, (64, 64), 0.01, "ok"), row(b, (64, 64), 0.5, "ok"),  # 50x, but measured six times
        row(b, (32, 32), 0.3),  # 30x the problem's best, alone in its tile
    ]
    return dataset.conform(pd.DataFrame(rows))


def test_capped_rows_over_the_ratio_of_their_tiles_fastest_are_suspect():
    df = frame()
    assert list(df.index[audit.suspect_rows(df)]) == [2, 5]
    counts = audit.audit(df)
    assert counts["bfloat16"] == audit.AuditCounts(rows=8, capped_rows=5, suspect_rows=2, problems=1,
                                                   problems_affected=1, worst_ratio=pytest.approx(9.0))
    assert (counts["float16"].suspect_rows, counts["float16"].problems_affected) == (0, 0)
    assert (counts["all"].rows, counts["all"].suspect_rows, counts["all"].problems) == (11, 2, 2)
    assert audit.audit(df, ratio=8.6)["all"].suspect_rows == 1


def test_the_tile_is_per_device():
    df = frame()
    other = df.iloc[[0]].assign(device_name="NVIDIA H200", runtime_ms=0.001, runtime_min_ms=0.001)
    both = pd.concat([df, other], ignore_index=True)
    assert list(both.index[audit.suspect_rows(both)]) == [2, 5]


def test_cli_prints_a_table_and_json_and_check_exits_1(tmp_path, capsys):
    path = tmp_path / "d.parquet"
    dataset.write(frame(), path)
    assert main(["audit", str(path)]) == 0
    table = capsys.readouterr().out
    assert "over 8x" in table and "1 of 1" in table and "bfloat16" in table
    assert main(["audit", str(tmp_path / "*.parquet"), "--json", "--ratio", "8.6"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ratio"] == 8.6 and report["files"][str(path)]["all"]["suspect_rows"] == 1
    assert main(["audit", str(path), "--check"]) == 1
    assert main(["audit", str(path), "--check", "--ratio", "1000"]) == 0


@pytest.mark.parametrize("argv, message", [
    (["audit", "missing.parquet"], "no such dataset file"),
    (["audit", "nothing-*.parquet"], "no dataset file matches"),
    (["audit", "x.parquet", "--ratio", "0"], "expected a finite number > 0"),
])
def test_cli_bad_input_is_a_one_line_error(tmp_path, monkeypatch, capsys, argv, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(("column", "value"), [("dtype", None), ("dtype", "int8"), ("op", None),
                                               ("status", None)])
def test_a_null_or_unknown_dtype_or_op_is_a_one_line_error_naming_the_column(tmp_path, capsys, column,
                                                                             value):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = frame().astype(object)
    rows[column] = value
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), path)
    with pytest.raises(SystemExit) as exc:
        main(["audit", str(path)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    shown = "null" if value is None else value
    assert f"column {column!r} has unknown values ['{shown}']" in err and err.count("\n") == 1
