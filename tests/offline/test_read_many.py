"""Several dataset files (or glob patterns) read as one; what models record about them."""

from __future__ import annotations

import hashlib

import pandas as pd
import pytest

from kernel_select.errors import DatasetError
from kernel_select.offline.data import audit, dataset
from kernel_select.offline.training.training_data import file_hashes
from tests.synthetic import synthetic_frame


@pytest.fixture
def two_files(tmp_path):
    first = synthetic_frame({"train": 3, "val": 1, "test": 0}, configs_per_problem=8, seed=1)
    second = synthetic_frame({"train": 2, "val": 0, "test": 1}, configs_per_problem=8, seed=2)
    # the second file measured one problem of the first again: its rows replace the first's
    again = first[first["problem_id"] == first["problem_id"].iloc[0]].assign(runtime_ms=1.0)
    dataset.write(first, tmp_path / "a.parquet")
    dataset.write(__import__("pandas").concat([second, again], ignore_index=True), tmp_path / "b.parquet")
    return tmp_path, first, second, again


def test_a_glob_reads_every_file_and_later_files_win(two_files):
    folder, first, second, again = two_files
    frame = dataset.read_many(str(folder / "*.parquet"))
    assert frame["problem_id"].nunique() == first["problem_id"].nunique() + second["problem_id"].nunique()
    assert len(frame) == len(first) + len(second)
    assert (frame.loc[frame["problem_id"] == again["problem_id"].iloc[0], "runtime_ms"] == 1.0).all()


def test_paths_named_twice_are_read_once_and_missing_patterns_are_errors(two_files):
    folder = two_files[0]
    assert dataset.expand_paths([folder / "a.parquet", str(folder / "a.parquet")]) == [folder / "a.parquet"]
    with pytest.raises(DatasetError, match="no dataset file matches"):
        dataset.expand_paths(str(folder / "none*.parquet"))
    with pytest.raises(DatasetError, match="no dataset file given"):
        dataset.expand_paths([])


def test_each_file_is_hashed_and_one_file_keeps_its_own_hash(two_files):
    folder = two_files[0]
    paths = [folder / "a.parquet", folder / "b.parquet"]
    files, combined = file_hashes(paths)
    own = [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]
    assert [f.sha256 for f in files] == own
    assert combined == hashlib.sha256("".join(own).encode()).hexdigest()
    assert file_hashes(paths[:1])[1] == own[0]


def test_a_row_is_kept_unless_a_later_file_measured_its_problem_on_its_device(tmp_path):
    pool = synthetic_frame({"train": 3, "val": 1, "test": 0}, configs_per_problem=4, seed=3)
    ids = list(pool["problem_id"].unique())
    other_device = "NVIDIA H200"

    def rows(*picks: tuple[int, str]) -> pd.DataFrame:
        return pd.concat([pool[pool["problem_id"] == ids[i]].assign(device_name=device)
                          for i, device in picks], ignore_index=True)

    device = pool["device_name"].iloc[0]
    files = [rows((0, device), (1, device), (2, device), (3, other_device)),
             rows((1, device), (3, device)),          # replaces problem 1 of the first file
             rows((0, device), (3, other_device)),    # replaces problem 0 of the first, 3 (H200) of the first
             rows((2, other_device))]                 # another device: replaces nothing
    paths = []
    for i, frame in enumerate(files):
        paths.append(tmp_path / f"{i}.parquet")
        dataset.write(frame.assign(timestamp=f"file {i}"), paths[-1])
    # the reference: row by row, against the keys of every later file
    keys = [set(zip(f["problem_id"], f["device_name"])) for f in files]
    expected = [(pid, dev, f"file {i}") for i, f in enumerate(files)
                for pid, dev in zip(f["problem_id"], f["device_name"])
                if not any((pid, dev) in later for later in keys[i + 1:])]
    frame = dataset.read_many(paths)
    assert list(zip(frame["problem_id"], frame["device_name"], frame["timestamp"])) == expected
    assert frame.index.equals(pd.RangeIndex(len(expected)))
    # the same frame, and each row's file (train --weight weighs a problem by it)
    same, source = dataset.read_many_with_sources(paths)
    assert same.equals(frame) and list(frame["timestamp"]) == [f"file {i}" for i in source]
    one, source = dataset.read_many_with_sources(paths[:1])
    assert one.equals(dataset.read(paths[0])) and source.tolist() == [0] * len(one)


def test_literal_size_rows_replace_shared_binary_rows_whatever_the_order(tmp_path):
    # bench --literal-sizes times a problem as Inductor's kernels run; a file of such rows read before
    # or after the shared-binary file of the same problems wins either way, and a later literal file
    # wins over an earlier one.
    pool = synthetic_frame({"train": 3, "val": 0, "test": 0}, configs_per_problem=4, seed=4)
    ids = list(pool["problem_id"].unique())
    literal = f"cuda-events; {audit.LITERAL_SIZES} (one binary per shape)"

    def rows(i: int, method: str, ms: float) -> pd.DataFrame:
        chosen = pool[pool["problem_id"] == ids[i]]
        return chosen.assign(timing_method=method, runtime_ms=ms, runtime_min_ms=ms)

    dataset.write(pd.concat([rows(0, literal, 2.0), rows(1, literal, 2.0)]), tmp_path / "a_literal.parquet")
    shared = pd.concat([rows(i, "cuda-events", 1.0) for i in range(3)])
    dataset.write(shared, tmp_path / "b_shared.parquet")
    dataset.write(rows(1, literal, 3.0), tmp_path / "c_literal.parquet")
    frame = dataset.read_many(str(tmp_path / "*.parquet"))
    ms = frame.groupby("problem_id")["runtime_ms"].unique().map(list).to_dict()
    assert ms == {ids[0]: [2.0], ids[1]: [3.0], ids[2]: [1.0]}
    literal_rows = len(rows(0, literal, 0.0)) + len(rows(1, literal, 0.0))
    assert audit.timed_with_literal_sizes(frame).sum() == literal_rows
