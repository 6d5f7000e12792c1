"""A TF32 problem in the data: its id, split, shapes-file entry, dataset rows, the harness's plan, and
what training and evaluation read back; and every file written before TF32 reads exactly as before."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.errors import DatasetError, ProblemError
from kernel_select.model.features import FEATURE_VERSION, featurize
from kernel_select.offline.data import dataset, problem_ids, shapes, splits
from kernel_select.offline.harness.bench import BenchOptions, _Timed, rows_for
from kernel_select.offline.harness.bench_plan import plan
from kernel_select.offline.training.evaluate import problem_cases, problem_rows
from kernel_select.offline.training.features import featurize_frame
from kernel_select.offline.training.training_data import domain_of
from kernel_select.problem import Problem

ROOT = Path(__file__).resolve().parents[2]
H100 = get_device("h100")
TF32 = Problem(560, 1280, 3420, "float32", layout="nt", tf32=True)
IEEE = Problem(560, 1280, 3420, "float32", layout="nt")


def test_a_tf32_problem_has_its_own_id_and_its_float32_twins_split():
    assert problem_ids.id_of(IEEE) == "float32/mm/1x560x1280x3420/nt"  # as before
    assert problem_ids.id_of(TF32) == "float32/mm/1x560x1280x3420/nt/tf32"
    nn_tf32 = problem_ids.id_of(Problem(560, 1280, 3420, "float32", tf32=True))
    assert nn_tf32 == "float32/mm/1x560x1280x3420/tf32"
    for m in range(1, 200):
        base = problem_ids.problem_id(m, 1280, 3420, "float32")
        assert splits.split_of(problem_ids.problem_id(m, 1280, 3420, "float32", layout="tn", tf32=True)) \
            == splits.split_of(base)
    assert problem_ids.is_tf32_id(nn_tf32) and not problem_ids.is_tf32_id(problem_ids.id_of(IEEE))


@pytest.mark.parametrize("path", ["tests/fixtures/h100_held_out_slice.parquet", "data/h100_unseen.parquet",
                                  "data/h100_bmm.parquet"])
def test_every_committed_row_keeps_its_id_and_reads_as_before(path: str):
    frame = dataset.read(ROOT / path)
    assert not frame["allow_tf32"].any()
    problems = frame.groupby("problem_id")[["m", "n", "k", "dtype", "op", "batch", "layout"]].first()
    rebuilt = [problem_ids.id_of(Problem(int(m), int(n), int(k), dtype, batch=int(batch), op=op,
                                         layout=layout))
               for m, n, k, dtype, op, batch, layout in problems.itertuples(index=False, name=None)]
    assert rebuilt == list(problems.index)


def _timed_rows(problem: Problem) -> pd.DataFrame:
    runs = plan([problem], H100, torch_version="2.11.0")[0][:5]
    results = {i: _Timed(samples=[0.1 * (i + 1)]) for i in range(len(runs))}
    prov = {"device_name": H100.name, "sm_count": H100.sm_count, "torch_version": "2.11.0",
            "triton_version": "3.6.0", "git_sha": "t", "device_index": 0}
    return pd.DataFrame(rows_for(runs, results, _Timed(samples=[0.05]), prov, BenchOptions()))


def test_bench_rows_of_a_tf32_problem_say_so_and_round_trip(tmp_path: Path):
    rows = _timed_rows(TF32)
    assert rows["allow_tf32"].all() and (rows["problem_id"] == problem_ids.id_of(TF32)).all()
    assert (rows["backend"] == "aten").sum() == 1  # cuBLAS timed with TF32 too
    out = tmp_path / "d.parquet"
    dataset.append(out, rows)
    dataset.append(out, _timed_rows(IEEE))  # measured both ways: two problems, no collision
    frame = dataset.read(out)
    assert set(frame["problem_id"]) == {problem_ids.id_of(TF32), problem_ids.id_of(IEEE)}
    cases = dict((problem_ids.id_of(p), p) for p, _ in problem_cases(*_cases_args(frame)))
    assert cases == {problem_ids.id_of(TF32): TF32, problem_ids.id_of(IEEE): IEEE}
    assert domain_of(frame[frame["backend"] == "triton"]).strata == {"mm/float32/m<=4096": 1,
                                                                      "mm/tf32/m<=4096": 1}
    triton = frame[(frame["backend"] == "triton") & frame["allow_tf32"]].reset_index(drop=True)
    configs = [GemmConfig(**dict(zip(dataset.CONFIG_COLUMNS, map(int, row))))
               for row in triton[list(dataset.CONFIG_COLUMNS)].itertuples(index=False)]
    np.testing.assert_array_equal(featurize_frame(triton, H100, FEATURE_VERSION),
                                  featurize(TF32, configs, H100))


def _cases_args(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = problem_rows(frame, "no rows")
    return rows.rows, rows.problems


def test_a_row_whose_tf32_disagrees_with_its_id_is_refused():
    rows = _timed_rows(IEEE)
    with pytest.raises(DatasetError, match="allow_tf32"):
        dataset.conform(rows.assign(allow_tf32=True))  # TF32 rows filed under a float32 problem
    tf32 = _timed_rows(TF32)
    with pytest.raises(DatasetError, match="allow_tf32"):
        dataset.conform(tf32.assign(allow_tf32=False))
    with pytest.raises(DatasetError, match="dtype"):
        dataset.conform(tf32.assign(dtype="bfloat16"))


def test_the_plan_sets_allow_tf32_from_the_problem_whatever_this_process_allows():
    torch = pytest.importorskip("torch")
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    try:
        for precision in ("tf32", "ieee"):
            matmul.fp32_precision = precision
            tf32, ieee, half = plan([TF32, IEEE, Problem(560, 1280, 3420, "bfloat16")], H100,
                                    torch_version="2.11.0")
            assert {run.key.allow_tf32 for run in tf32} == {True}
            assert {run.key.allow_tf32 for run in ieee + half} == {False}
    finally:
        matmul.fp32_precision = before


@pytest.mark.parametrize(("m", "n", "k"), [(8, 4096, 4096), (64, 4096, 128)])
def test_a_tf32_problem_inductor_2_13_runs_without_tf32_is_refused_there(m: int, n: int, k: int):
    problem = Problem(m, n, k, "float32", tf32=True)
    assert plan([problem], H100, torch_version="2.11.0")  # every float32 GEMM takes TF32 on 2.11
    with pytest.raises(ProblemError, match="runs this GEMM without TF32.*plan it without tf32"):
        plan([problem], H100, torch_version="2.13.0")


def test_a_shapes_file_plans_tf32_and_reads_older_files_as_before(tmp_path: Path):
    planned = [shapes.Shape(560, 1280, 3420, "float32", layout="nt", tf32=True),
               shapes.Shape(560, 1280, 3420, "float32", layout="nt")]
    path = tmp_path / "s.json"
    shapes.save(planned, path)
    written = json.loads(path.read_text())
    assert written[0]["tf32"] is True and "tf32" not in written[1]
    assert shapes.load(path) == planned and [s.problem() for s in planned] == [TF32, IEEE]
    assert len(shapes.dedupe(planned)) == 2
    for committed in sorted((ROOT / "data").glob("shapes_*.json")):
        if committed.name == "shapes_tf32_h100.json":
            continue
        assert not any(s.tf32 for s in shapes.load(committed))
        assert all("tf32" not in entry for entry in json.loads(committed.read_text()))


@pytest.mark.parametrize(("entry", "message"), [
    ({"m": 1, "n": 16, "k": 16, "dtype": "float32", "tf32": "yes"}, r"\[0\]: tf32: expected true or false"),
    ({"m": 1, "n": 16, "k": 16, "dtype": "float32", "tf32": 1}, r"\[0\]: tf32: expected true or false"),
    ({"m": 1, "n": 16, "k": 16, "dtype": "bfloat16", "tf32": True}, r"\[0\]: tf32: TF32 applies to float32"),
    ({"m": 1, "n": 16, "k": 16, "dtype": "float32", "tf_32": True},
     r"unknown key 'tf_32' \(did you mean 'tf32'"),
])
def test_a_bad_tf32_entry_names_the_entry_and_the_field(tmp_path: Path, entry: dict, message: str):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([entry]))
    with pytest.raises(ProblemError, match=message):
        shapes.load(path)


def test_a_failed_tf32_row_is_still_tf32():
    runs = plan([TF32], H100, torch_version="2.11.0")[0][:2]
    prov = {"device_name": H100.name, "sm_count": H100.sm_count, "torch_version": "2.11.0",
            "triton_version": "3.6.0", "git_sha": "t", "device_index": 0}
    rows = rows_for(runs, {0: _Timed(status="compile_error"), 1: _Timed(samples=[1.0])}, _Timed(), prov,
                    BenchOptions())
    assert all(row["allow_tf32"] for row in rows) and math.isinf(rows[0]["runtime_ms"])
