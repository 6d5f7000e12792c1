"""The order `kernel-select bench` times problems in: problems that share compiled kernels together."""

from __future__ import annotations

import pytest

from kernel_select.device import get_device
from kernel_select.offline.harness.bench import BenchOptions
from kernel_select.offline.harness.bench_plan import plan, reuse_order
from kernel_select.problem import Problem
from tests.offline.fake_gpu import NoCompilePipeline

H100 = get_device("h100")


def _interleaved() -> list[Problem]:
    # Four compile classes (dtype x layout), each with sizes that share binaries, in round-robin
    # order: the worst case for a bounded run, every problem a new class until all four are seen.
    classes = [("bfloat16", "nn"), ("float16", "nt"), ("float32", "nn"), ("bfloat16", "tn")]
    sizes = [(512, 1024, 4096), (768, 2048, 1024), (1024, 4096, 2048)]
    return [Problem(m, n, k, dtype, layout=layout) for m, n, k in sizes for dtype, layout in classes]


def _keys_after_each(planned):
    seen, counts = set(), []
    for runs in planned:
        seen |= {r.key for r in runs}
        counts.append(len(seen))
    return counts


@pytest.fixture(scope="module")
def planned():
    return plan(_interleaved(), H100, torch_version="2.11.0")


def test_reuse_order_keeps_every_problem_once(planned):
    ordered = reuse_order(planned)
    names = sorted(str(runs[0].problem) for runs in ordered)
    assert names == sorted(str(runs[0].problem) for runs in planned)
    assert len(ordered) == len(planned)


def test_reuse_order_groups_classes_and_keeps_file_order_within_them(planned):
    ordered = reuse_order(planned)
    signatures = [frozenset(r.key for r in runs) for runs in ordered]
    assert len(signatures) == len(_interleaved()) == 12
    # Each class's problems form one run of consecutive positions (never split, never revisited)...
    runs_of_classes = [signature for i, signature in enumerate(signatures)
                       if i == 0 or signature != signatures[i - 1]]
    assert len(runs_of_classes) == len(set(signatures)) == 4
    # ...and keep their file order inside it: the order is the file order, sorted by class.
    file_position = {str(runs[0].problem): i for i, runs in enumerate(planned)}
    positions = [file_position[str(runs[0].problem)] for runs in ordered]
    first_seen = {signature: signatures.index(signature) for signature in signatures}
    assert positions == sorted(positions, key=lambda p: (first_seen[signatures[positions.index(p)]], p))


def test_reuse_order_needs_fewer_kernels_for_every_prefix(planned):
    """What a bounded run gains: after any number of problems, no more compile keys are needed
    than in file order, and strictly fewer early on."""
    reused, in_file = _keys_after_each(reuse_order(planned)), _keys_after_each(planned)
    assert all(r <= f for r, f in zip(reused, in_file))
    assert reused[2] < in_file[2]
    assert reused[-1] == in_file[-1]


def _greedy_by_set_differences(planned):
    """reuse_order's rule as its docstring states it, one set difference per class and step."""
    classes = {}
    for runs in planned:
        classes.setdefault(frozenset(r.key for r in runs), []).append(runs)
    pending, needed, ordered = list(classes), set(), []
    while pending:
        keys = pending.pop(min(range(len(pending)), key=lambda i: (len(pending[i] - needed), i)))
        needed |= keys
        ordered.extend(classes[keys])
    return ordered


def test_reuse_order_is_the_greedy_rule_on_classes_that_share_part_of_their_keys():
    # Small M, N and K clamp tiles and drop offsets hints: classes whose key sets overlap in part,
    # where counting each class's new keys incrementally must pick what the set differences pick.
    sizes = [(1, 64, 80), (3, 4096, 4096), (100, 4096, 4096), (300, 4096, 4096), (16, 200, 4096),
             (40, 4096, 1000), (5000, 4096, 4096), (100, 4096, 4097), (7, 50, 33)]
    problems = [Problem(m, n, k, dtype, layout=layout) for m, n, k in sizes
                for dtype, layout in (("bfloat16", "nn"), ("bfloat16", "tn"))]
    problems += [Problem(m, n, k, "float16", batch=4, op="bmm", layout="nt") for m, n, k in sizes]
    planned = plan(problems, H100, torch_version="2.11.0")
    expected = _greedy_by_set_differences(planned)
    assert [id(runs) for runs in reuse_order(planned)] == [id(runs) for runs in expected]


def test_bench_reorders_by_default():
    assert BenchOptions().order == "reuse"


def test_run_bench_times_runs_planned_beforehand_in_their_order_and_reports_each(tmp_path, monkeypatch):
    import pandas as pd

    from kernel_select.offline.data import dataset, problem_ids
    from kernel_select.offline.harness import bench, pipeline

    timed = []

    def fake_time_problem(runs, compiled, device, options, checked, loaded, stats):
        timed.append(runs[0].problem)
        return {i: bench._Timed(samples=[1.0 + i]) for i in range(len(runs))}, bench._Timed(samples=[1.0])

    def refuse_to_plan(*args, **kwargs):
        raise AssertionError("the runs were planned already")

    prov = dict(device_name="fake", sm_count=1, torch_version="t", triton_version="t", git_sha="x",
                device_index=0)
    monkeypatch.setattr(pipeline, "CompilePipeline", NoCompilePipeline)
    monkeypatch.setattr(pipeline, "time_problem", fake_time_problem)
    monkeypatch.setattr(pipeline, "provenance", lambda git_sha="": prov)
    monkeypatch.setattr(pipeline, "plan", refuse_to_plan)
    problems = [Problem(64, 128, 256, "bfloat16"), Problem(96, 128, 256, "bfloat16"),
                Problem(32, 256, 128, "float16", layout="nt")]
    planned = plan(problems, H100)
    out = tmp_path / "rows.parquet"
    earlier = bench.rows_for(planned[1], {i: bench._Timed(samples=[1.0]) for i in range(len(planned[1]))},
                             bench._Timed(), prov, BenchOptions())
    dataset.append(out, pd.DataFrame(earlier))  # the second problem was measured by an earlier run
    reported = []
    pipeline.run_bench(problems, out, H100, BenchOptions(progress=False, order="file"), planned=planned,
                       on_problem=reported.append)
    assert timed == reported == [problems[0], problems[2]]
    assert dataset.completed_problems(out, "fake") == {problem_ids.id_of(p) for p in problems}


def test_a_run_that_would_grow_the_output_past_the_read_limit_is_refused_before_timing(tmp_path,
                                                                                        monkeypatch):
    import pandas as pd

    from kernel_select.errors import DatasetError
    from kernel_select.offline.data import dataset
    from kernel_select.offline.harness import bench, pipeline

    prov = dict(device_name="fake", sm_count=1, torch_version="t", triton_version="t", git_sha="x",
                device_index=0)
    problems = [Problem(64, 128, 256, "bfloat16"), Problem(96, 128, 256, "bfloat16")]
    planned = plan(problems, H100)
    out = tmp_path / "rows.parquet"
    earlier = bench.rows_for(planned[1], {i: bench._Timed(samples=[1.0]) for i in range(len(planned[1]))},
                             bench._Timed(), prov, BenchOptions())
    dataset.append(out, pd.DataFrame(earlier))
    size = out.stat().st_size
    # A limit the file is under now, but that the first problem's rows would pass.
    monkeypatch.setattr(dataset, "MAX_DATASET_BYTES", size + 10)
    monkeypatch.setattr(pipeline, "provenance", lambda git_sha="": prov)
    monkeypatch.setattr(pipeline, "CompilePipeline", lambda *a: pytest.fail("timed before the check"))
    with pytest.raises(DatasetError, match=rf"rows.parquet: {size:,} bytes now and about [\d,]+ more for "
                                           rf"{len(planned[0]) + 1} rows would pass the dataset read limit"):
        pipeline.run_bench(problems, out, H100, BenchOptions(progress=False, order="file"), planned=planned)
    assert dataset.row_count(out) == len(earlier)
    monkeypatch.setattr(dataset, "MAX_DATASET_BYTES", 256 * 1024 * 1024)
    pipeline.check_room(out, 1000)  # room enough: no error
    # The row limit binds before the bytes one on a well-compressed file (the round-3 plan's rows).
    monkeypatch.setattr(dataset, "MAX_DATASET_ROWS", len(earlier) + 999)
    with pytest.raises(DatasetError, match=rf"rows.parquet: {len(earlier):,} rows now and 1,000 more would "
                                           r"pass the dataset limit of [\d,]+ rows"):
        pipeline.check_room(out, 1000)
    pipeline.check_room(out, 999)
