"""Dataset files survive concurrent writers, kills and foreign content."""

from __future__ import annotations

import json
import math
import re
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernel_select.errors import DatasetError
from kernel_select.offline.data import dataset, problem_ids
from kernel_select.offline.data.dataset_io import exclusive_lock, lock_path
from tests.offline.test_bench_plan import _rows


def _pid(i: int) -> str:
    return problem_ids.problem_id(16 + i, 16, 16, "bfloat16")


def _append_many(path: str, offset: int, count: int) -> None:
    for i in range(count):
        dataset.append(path, _rows(_pid(offset + i), [1.0, 2.0]))


def test_two_processes_appending_concurrently_keep_every_row(tmp_path):
    out = tmp_path / "d.parquet"
    dataset.append(out, _rows(_pid(999), [5.0] * 50))  # rows already there must survive too
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(str(out), 1000 * w, 15)) for w in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    df = dataset.read(out)
    assert df["problem_id"].nunique() == 31 and len(df) == 50 + 30 * 2
    assert not list(tmp_path.glob("*.tmp"))


def test_a_second_writer_waits_then_fails_with_a_clear_error(tmp_path):
    out = tmp_path / "d.parquet"
    with exclusive_lock(out, timeout_s=1):
        started = time.monotonic()
        with pytest.raises(DatasetError, match="another process is writing"):
            dataset.append(out, _rows(_pid(1), [1.0]), timeout_s=0.3)
        assert time.monotonic() - started >= 0.3
    dataset.append(out, _rows(_pid(1), [1.0]), timeout_s=0.3)  # free again
    assert dataset.completed_problems(out) == {_pid(1)}


def test_unknown_columns_are_refused_with_the_fix():
    with pytest.raises(DatasetError, match=r"unknown columns \['surprise'\].*drop them"):
        dataset.conform(_rows(_pid(1), [1.0]).assign(surprise=1))


def test_unknown_dataset_version_is_refused(tmp_path):
    out = tmp_path / "d.parquet"
    dataset.write(_rows(_pid(1), [1.0]), out)
    table = pq.read_table(out)
    meta = {**table.schema.metadata, b"kernel_select": json.dumps({"dataset_version": 99}).encode()}
    pq.write_table(table.replace_schema_metadata(meta), out)
    with pytest.raises(DatasetError, match="dataset_version 99.*upgrade"):
        dataset.read(out)


def test_version_1_files_are_read_with_provenance_filled(tmp_path):
    out = tmp_path / "v1.parquet"
    old = dataset.conform(_rows(_pid(1), [1.0])).drop(columns=["family", "layer", "pass"])
    pq.write_table(__import__("pyarrow").Table.from_pandas(old, preserve_index=False), out)
    df = dataset.read(out)
    assert (df["family"] == "unknown").all() and (df["pass"] == "coverage").all()


def test_a_repeated_minimum_is_stored_empty_and_read_back(tmp_path):
    # Version 4: a single-sample row's runtime_min_ms (its runtime_ms again) is a null in the file,
    # which `read` fills back in; a row timed several times keeps its own minimum, a failed one inf.
    out = tmp_path / "d.parquet"
    rows = dataset.conform(_rows(_pid(1), [1.0, 2.0, math.inf, 3.0]))
    rows.loc[1, "runtime_min_ms"] = 1.5
    dataset.write(rows, out)
    table = pq.read_table(out)
    version = json.loads(table.schema.metadata[b"kernel_select"])["dataset_version"]
    assert version == dataset.DATASET_VERSION == 4
    assert table.column("runtime_min_ms").to_pylist() == [None, 1.5, None, None]
    pd.testing.assert_frame_equal(dataset.read(out), rows, check_exact=True)


def test_version_3_files_with_every_minimum_are_read_as_they_are(tmp_path):
    out = tmp_path / "v3.parquet"
    rows = dataset.conform(_rows(_pid(1), [1.0, 2.0]))
    table = pa.Table.from_pandas(rows, preserve_index=False)
    meta = {**(table.schema.metadata or {}), b"kernel_select": json.dumps({"dataset_version": 3}).encode()}
    pq.write_table(table.replace_schema_metadata(meta), out)
    pd.testing.assert_frame_equal(dataset.read(out), rows, check_exact=True)


def test_resume_is_keyed_by_device(tmp_path):
    out = tmp_path / "d.parquet"
    dataset.append(out, _rows(_pid(1), [1.0]).assign(device_name="NVIDIA A100-SXM4-80GB"))
    assert dataset.completed_problems(out, device_name="NVIDIA H100 80GB HBM3") == set()
    dataset.append(out, _rows(_pid(1), [2.0]))  # the H100 rows join, the A100 rows stay
    df = dataset.read(out)
    assert sorted(df["device_name"]) == ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"]
    assert dataset.completed_problems(out, device_name="NVIDIA H100 80GB HBM3") == {_pid(1)}


_KILLED_WRITER = """
import sys, pyarrow.parquet as pq
from tests.offline.test_bench_plan import _rows
from kernel_select.offline.data import dataset, problem_ids
def slow(*a, **k):
    open(sys.argv[2], "w").write("writing")
    import time; time.sleep(60)
pq.write_table = slow
dataset.append(sys.argv[1], _rows(problem_ids.problem_id(16, 16, 16, "bfloat16"), [1.0]))
"""


def test_a_killed_append_leaves_the_file_intact_and_no_stale_temp(tmp_path):
    out = tmp_path / "d.parquet"
    dataset.append(out, _rows(_pid(7), [3.0]))
    flag = tmp_path / "started"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_WRITER, str(out), str(flag)],
                            env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.monotonic() + 60
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flag.exists()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert list(tmp_path.glob(".d.parquet.*.tmp"))  # the killed writer's temp...
    assert dataset.completed_problems(out) == {_pid(7)}  # ...never replaced the file
    dataset.append(out, _rows(_pid(8), [1.0]))  # the next writer cleans it up
    assert not list(tmp_path.glob(".d.parquet.*.tmp"))
    assert dataset.completed_problems(out) == {_pid(7), _pid(8)}


# -- symlinks: written through, locked by the file they name -----------------------------------

def test_append_through_a_symlink_writes_the_real_file_and_keeps_the_link(tmp_path):
    real, link = tmp_path / "real.parquet", tmp_path / "link.parquet"
    dataset.append(real, _rows(_pid(1), [1.0]))
    link.symlink_to("real.parquet")
    dataset.append(link, _rows(_pid(2), [2.0]))
    assert link.is_symlink() and os.readlink(link) == "real.parquet"
    assert dataset.completed_problems(real) == {_pid(1), _pid(2)}
    assert lock_path(link) == lock_path(real) == tmp_path / ".real.parquet.lock"


def test_writers_through_a_link_and_the_real_path_exclude_each_other(tmp_path):
    real, link = tmp_path / "real.parquet", tmp_path / "link.parquet"
    link.symlink_to("real.parquet")
    with exclusive_lock(real, timeout_s=1):
        with pytest.raises(DatasetError, match="another process is writing"):
            dataset.append(link, _rows(_pid(1), [1.0]), timeout_s=0.3)
    with exclusive_lock(link, timeout_s=1):
        with pytest.raises(DatasetError, match="another process is writing"):
            dataset.append(real, _rows(_pid(1), [1.0]), timeout_s=0.3)
    assert not real.exists()


# -- values a measurement cannot have ----------------------------------------------------------

@pytest.mark.parametrize("column, value, shown", [
    ("m", 2**62, "4611686018427387904"), ("k", 0, "0"), ("batch", -1, "-1"),
    ("block_m", 0, "0"), ("block_n", 48, "48"), ("num_warps", 0, "0"), ("num_stages", 9, "9"),
    ("group_m", 0, "0"), ("runtime_ms", -1.0, "-1.0"), ("runtime_min_ms", float("nan"), "nan"),
    ("runtime_ms", 0.0, "0.0"), ("n_runs", -2, "-2"), ("sm_count", 0, "0"),
])
def test_out_of_range_values_are_refused_naming_row_column_and_value(tmp_path, column, value, shown):
    rows = _rows(_pid(1), [1.0, 2.0, 3.0])
    rows.loc[2, column] = value
    expected = f"row 2 \\(problem '{_pid(1)}'\\): column '{column}' is {shown}; expected "
    with pytest.raises(DatasetError, match=f"^{tmp_path}/d.parquet: rows to append: {expected}"):
        dataset.append(tmp_path / "d.parquet", rows)
    assert not (tmp_path / "d.parquet").exists()
    # A file written without the checks (another tool, an older version) is refused when read.
    import pyarrow as pa

    pq.write_table(pa.Table.from_pandas(rows, preserve_index=False), tmp_path / "raw.parquet")
    with pytest.raises(DatasetError, match=f"^{tmp_path}/raw.parquet: {expected}"):
        dataset.read(tmp_path / "raw.parquet")


def test_inf_marks_a_failed_config_and_cublas_rows_carry_no_config():
    rows = _rows(_pid(1), [1.0, float("inf")])
    rows.loc[0, ["backend", "block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m"]] = \
        ["aten", 0, 0, 0, 0, 0, 0]
    assert list(dataset.conform(rows)["runtime_ms"]) == [1.0, float("inf")]


# -- what a path is, when it is not a dataset file ----------------------------------------------

@pytest.mark.parametrize("make, what", [
    (lambda p: os.mkfifo(p), "a FIFO (named pipe)"),
    (lambda p: p.mkdir(), "a directory"),
])
def test_a_special_path_is_named_for_what_it_is(tmp_path, make, what):
    path = tmp_path / "d.parquet"
    make(path)
    for read in (dataset.read, dataset.row_count):
        with pytest.raises(DatasetError, match=f"^{path}: is {re.escape(what)}, not a regular file"):
            read(path)
    with pytest.raises(DatasetError, match="^/dev/null: is a character device, not a regular file"):
        dataset.read("/dev/null")
    with pytest.raises(DatasetError, match=f"^{tmp_path}/none.parquet: no such dataset file"):
        dataset.read(tmp_path / "none.parquet")


def test_row_count_reads_the_footer(tmp_path):
    dataset.write(_rows(_pid(1), [1.0, 2.0, 3.0]), tmp_path / "three.parquet")
    dataset.write(_rows(_pid(1), [1.0]).iloc[:0], tmp_path / "empty.parquet")
    assert [dataset.row_count(tmp_path / name) for name in ("three.parquet", "empty.parquet")] == [3, 0]
