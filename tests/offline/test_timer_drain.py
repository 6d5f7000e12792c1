"""The timer's drain check on a simulated host and GPU (tests/offline/fake_gpu.py): a host stall
that outlasts the GPU's backlog is detected from the events, and the chunk is timed again."""

from __future__ import annotations

import pytest

from kernel_select.offline.harness import timer as timer_module
from tests.offline.fake_gpu import FakeStream, NoCompilePipeline, fake_timer, kernel

KERNEL_S = 6e-6


def items_with_stall(stream: FakeStream, count: int, stalled: int, stalls_s: list[float]) -> list:
    return [(i, kernel(stream, KERNEL_S, stalls_s if i == stalled else None)) for i in range(count)]


def test_without_stalls_every_kernel_measures_its_own_time_and_nothing_is_retimed():
    stream = FakeStream()
    timer = fake_timer(stream)
    out = timer.time_pass(items_with_stall(stream, 100, -1, []))
    assert {i: ms for i, (ms, _) in out.items()} == {i: pytest.approx(KERNEL_S * 1e3) for i in range(100)}
    assert (timer.stats.chunks, timer.stats.chunks_retimed, timer.stats.chunks_unresolved) == (2, 0, 0)


def test_a_stall_longer_than_the_backlog_is_measured_unless_the_chunk_is_retimed(monkeypatch):
    stream = FakeStream()
    monkeypatch.setattr(timer_module, "DRAIN_RETRIES", 0)
    unchecked = fake_timer(stream).time_pass(items_with_stall(stream, 64, 5, [0.01]))
    assert unchecked[5][0] > 1.0  # the simulation reproduces the bug: a 6 us kernel timed at > 1 ms

    monkeypatch.undo()
    stream = FakeStream()
    timer = fake_timer(stream)
    out = timer.time_pass(items_with_stall(stream, 64, 5, [0.01]))
    assert out[5][0] == pytest.approx(KERNEL_S * 1e3)
    assert (timer.stats.chunks, timer.stats.chunks_retimed, timer.stats.chunks_unresolved) == (1, 1, 0)


def test_a_short_stall_the_backlog_absorbs_is_not_retimed():
    stream = FakeStream()
    timer = fake_timer(stream)
    out = timer.time_pass(items_with_stall(stream, 64, 5, [0.001]))  # the sleep is ~6.6 ms
    assert out[5][0] == pytest.approx(KERNEL_S * 1e3)
    assert timer.stats.chunks_retimed == 0


def test_retries_are_bounded_and_a_chunk_that_keeps_draining_is_counted():
    stream = FakeStream()
    timer = fake_timer(stream)
    stalls = [0.2] * 10  # longer than MAX_SLEEP_S, every time
    timer.time_pass(items_with_stall(stream, 64, 5, stalls))
    assert len(stalls) == 10 - (1 + timer_module.DRAIN_RETRIES)
    assert (timer.stats.chunks_retimed, timer.stats.chunks_unresolved) == (1, 1)


def test_expected_gpu_time_shortens_the_sleep_only_for_the_launches_queued_after_it():
    # a long kernel last in the chunk cannot cover the host's queueing of the launches before it
    stream = FakeStream()
    timer = fake_timer(stream)
    items = [(i, kernel(stream, KERNEL_S)) for i in range(63)] + [(63, kernel(stream, 0.05))]
    expected = {i: KERNEL_S * 1e3 for i in range(63)} | {63: 50.0}
    out = timer.time_pass(items, gpu_ms=expected)
    assert timer.stats.chunks_retimed == 0
    assert out[0][0] == pytest.approx(KERNEL_S * 1e3) and out[63][0] == pytest.approx(50.0)


def test_the_run_reports_retimings_per_problem_and_in_its_summary(tmp_path, monkeypatch, caplog):
    from kernel_select.device import get_device
    from kernel_select.offline.data import dataset
    from kernel_select.offline.harness import bench, pipeline
    from kernel_select.offline.harness.bench_plan import plan
    from kernel_select.problem import Problem

    def fake_time_problem(runs, compiled, device, options, checked, loaded, stats):
        stats.add(timer_module.TimingStats(chunks=4, chunks_retimed=1, suspects=2, suspects_lowered=1))
        results = {i: bench._Timed(samples=[1.0]) for i in range(len(runs))}
        return results, bench._Timed(samples=[1.0])

    monkeypatch.setattr(pipeline, "CompilePipeline", NoCompilePipeline)
    monkeypatch.setattr(pipeline, "time_problem", fake_time_problem)
    device = get_device("h100")
    planned = plan([Problem(64, 128, 256, "bfloat16"), Problem(96, 128, 256, "bfloat16")], device)
    prov = dict(device_name="fake", sm_count=1, torch_version="t", triton_version="t", git_sha="x")
    out = tmp_path / "rows.parquet"
    caplog.set_level("INFO", logger=pipeline.log.name)
    stats = pipeline._collect(planned, out, device, bench.BenchOptions(progress=False), prov, {}, 1, 0.0)
    assert (stats["timing"].chunks, stats["timing"].chunks_retimed, stats["timing"].suspects) == (8, 2, 4)
    assert sum("1 of 4 chunks re-timed" in r.getMessage() for r in caplog.records) == 2
    methods = set(dataset.read(out)["timing_method"])
    assert len(methods) == 1 and methods.pop().endswith(
        "this problem: 1 of 4 chunks re-timed after a drained backlog (0 still drained after "
        f"{timer_module.DRAIN_RETRIES} retries), 2 implausible single samples re-timed (1 lower)")
