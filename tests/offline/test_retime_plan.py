"""Re-timing the host stalls of the older H100 files: which rows count as unconfirmed, the committed
plan (data/shapes_retime_h100.json), and how its rows take the old ones' place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_select.offline.data import audit, dataset, shapes

from kernel_select.offline.data.plans import retime_plan
from kernel_select.offline.harness.bench import TIMING_METHOD
from tests.offline.test_audit import frame

ROOT = Path(__file__).resolve().parents[2]
PLAN_FILE = ROOT / "data" / "shapes_retime_h100.json"


def test_a_suspect_is_unconfirmed_only_where_its_harness_took_no_second_opinion():
    old = frame()  # timing_method "test": no second opinion
    assert list(old.index[audit.unconfirmed_suspects(old)]) == [2, 5]
    method = TIMING_METHOD.format(reps=5, factor=1.5, suspect=audit.SUSPECT_RATIO)
    assert audit.SECOND_OPINION in method  # what today's harness writes
    new = old.assign(timing_method=method)
    assert audit.suspect_rows(new).sum() == 2 and not audit.unconfirmed_suspects(new).any()


def test_the_plan_lists_each_problem_with_a_suspect_row_once_with_its_provenance(tmp_path):
    path = tmp_path / "d.parquet"
    dataset.write(frame().assign(family="sampler:n16-k16", layer="n16-k16"), path)
    planned = retime_plan.retime_shapes([path])
    assert [(s.m, s.n, s.k, s.dtype, s.family, s.pass_) for s in planned] == [
        (64, 64, 64, "bfloat16", "sampler:n16-k16", "coverage")]


@pytest.fixture(scope="module")
def committed() -> list[shapes.Shape]:
    return shapes.load(PLAN_FILE)


def test_the_committed_plan_is_what_the_generator_writes(tmp_path, committed):
    written = tmp_path / "plan.json"
    shapes.save(retime_plan.retime_shapes([ROOT / "data" / n for n in retime_plan.AUDITED_FILES]), written)
    assert json.loads(written.read_text()) == json.loads(PLAN_FILE.read_text())
    assert len(committed) == 1613  # data/README.md, "Timing quality"


def test_retimed_rows_replace_every_row_of_their_problem_under_the_h100_glob(tmp_path):
    old = frame()
    retimed = old[old["problem_id"] == "bfloat16/mm/1x64x64x64"].assign(runtime_ms=0.02, runtime_min_ms=0.02)
    dataset.write(old, tmp_path / "h100_coverage.parquet")
    dataset.write(retimed, tmp_path / retime_plan.RETIMED_FILE)
    both = dataset.read_many(str(tmp_path / "h100*.parquet"))
    mine = both[both["problem_id"] == "bfloat16/mm/1x64x64x64"]
    assert len(mine) == len(retimed) and set(mine["runtime_ms"]) == {0.02}
    untouched = old["problem_id"] == "float16/mm/1x64x64x64"
    assert (both["problem_id"] == "float16/mm/1x64x64x64").sum() == untouched.sum()


def test_the_retimed_file_sorts_after_every_audited_file_in_the_h100_glob(tmp_path):
    for name in (*retime_plan.AUDITED_FILES, retime_plan.RETIMED_FILE):
        (tmp_path / name).touch()
    order = [p.name for p in dataset.expand_paths(str(tmp_path / "h100*.parquet"))]
    assert order[-1] == retime_plan.RETIMED_FILE
