"""A dataset file is capped in rows as well as bytes (issue 43 row 9: a 0.64 MB parquet of 4M rows
took 4.6 GB to read, one of 40M rows more than 8 GB and was then called "not a readable parquet
file"); the count comes from the footer, before the rows are read, and appends never grow a file
past it."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kernel_select.errors import DatasetError
from kernel_select.offline.data import dataset, problem_ids
from tests.offline.test_bench_plan import _rows


def test_a_file_of_more_rows_than_the_cap_is_refused_from_its_footer(tmp_path, monkeypatch):
    # 4M rows of one repeated value: 20 kB on disk
    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"m": pa.repeat(pa.scalar(1, pa.int64()), 4_000_000)}), path)
    assert path.stat().st_size < 1_000_000

    def read_parquet(*args, **kwargs):
        pytest.fail("the rows were read before their count was checked")

    monkeypatch.setattr(pd, "read_parquet", read_parquet)
    with pytest.raises(DatasetError, match=rf"^{path}: has 4,000,000 rows, over the dataset limit of "
                                           r"3,000,000 rows \(kernel_select.offline.data.dataset."
                                           r"MAX_DATASET_ROWS\)"):
        dataset.read(path)


def test_an_append_that_would_pass_the_cap_keeps_the_file_and_puts_the_new_rows_beside_it(tmp_path,
                                                                                          monkeypatch):
    path = tmp_path / "d.parquet"
    dataset.append(path, _rows(problem_ids.problem_id(16, 16, 16, "bfloat16"), [1.0, 2.0]))
    before = dataset.read(path)
    monkeypatch.setattr(dataset, "MAX_DATASET_ROWS", len(before) + 1)
    with pytest.raises(DatasetError, match=r"would grow to \d+ rows, over the dataset limit of .*; the 2 "
                                           r"new rows are in .*d\.more-[0-9-]+\.parquet$") as info:
        dataset.append(path, _rows(problem_ids.problem_id(32, 16, 16, "bfloat16"), [1.0, 2.0]))
    pd.testing.assert_frame_equal(dataset.read(path), before)  # still readable, as it was
    beside = info.value.args[0].rsplit(" are in ", 1)[1]
    assert len(dataset.read(beside)) == 2
