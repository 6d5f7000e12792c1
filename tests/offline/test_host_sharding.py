"""`bench --gpus N` scheduling on CPU: one compile pool, a ready queue, a timing worker per fake GPU.

The GPUs are threads whose time is what the fakes charge them (fake_gpu.ThreadClocks), and the tests
hold compiles or GPUs back on the ready queue's state rather than on sleeps: what they check is counted,
not timed, so a loaded machine cannot change it."""

from __future__ import annotations

import logging
import math
import pickle
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from kernel_select.device import get_device
from kernel_select.offline.data import dataset
from kernel_select.offline.harness import bench, pipeline, sharding
from kernel_select.offline.harness.bench_plan import plan, reuse_order
from kernel_select.offline.harness.gpu_tally import GpuTally, gpu_line, run_line
from kernel_select.offline.harness.pipeline import CompilePipeline
from kernel_select.offline.harness.ready_queue import ReadyDispatcher
from kernel_select.problem import Problem
from tests.offline.fake_gpu import FakeCompiler, FakeGpuTimer, ReadyQueue, ThreadClocks

H100 = get_device("h100")
PROV = {"device_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "torch_version": "2.11.0",
        "triton_version": "3.6.0", "git_sha": "test"}


def _planned(count: int = 12):
    # three compile classes (dtype x layout), each with sizes that share binaries
    classes = [("bfloat16", "nn", "mm", 1), ("float16", "nt", "bmm", 4), ("bfloat16", "tn", "bmm", 8)]
    problems = [Problem(m, 64, 128, dtype, batch=batch, op=op, layout=layout)
                for dtype, layout, op, batch in classes for m in (16 * (i + 1) for i in range(count // 3))]
    return reuse_order(plan(problems, H100, search_space="default", torch_version="2.11.0"))


def _thread_worker(timer, before_start: Callable[[], None] = lambda: None):
    def start(ctx, gpu, visible, args):
        before_start()
        thread = threading.Thread(target=sharding.time_on_gpu, name=f"gpu{gpu}",
                                  args=(*args, {**PROV, "device_index": gpu}, timer), daemon=True)
        thread.start()
        return thread
    return start


@pytest.fixture
def clock(monkeypatch) -> ThreadClocks:
    """sharding's monotonic clock, one per thread, moved only by the fakes: the tallies' busy and wait
    seconds are then sums of what the fakes charged, not measurements of a loaded machine."""
    clocks = ThreadClocks()
    monkeypatch.setattr(sharding, "time", clocks)
    return clocks


def _collect(tmp_path, planned, compiler_fn, timer, ready, gpus=2, max_seconds=0.0, all_ready_first=False):
    """Collect `planned` on `gpus` timing threads fed from `ready`; with `all_ready_first` the GPUs
    start only once every problem (and each GPU's end marker) is on the queue."""
    options = bench.BenchOptions(progress=False, max_seconds=max_seconds)
    compiler = CompilePipeline(2, compile_fn=compiler_fn, executor=ThreadPoolExecutor(2))
    out = tmp_path / "rows.parquet"
    everything_queued = lambda: ready.until(lambda q: q.puts == len(planned) + gpus)  # noqa: E731
    start = _thread_worker(timer, everything_queued if all_ready_first else lambda: None)
    tallies = sharding.collect_on_host(planned, out, H100, options, {}, gpus, 2, time.perf_counter(),
                                       compiler=compiler, start_worker=start, queues=(ready, queue.Queue()))
    return out, tallies


def test_two_gpus_time_every_problem_once_from_one_compile_pool(tmp_path, caplog, clock):
    planned = _planned()
    compiler = FakeCompiler(seconds_per_key=2e-4)
    timer = FakeGpuTimer(compiler.compiled_at, clock, seconds_per_row=5e-4, lockstep=threading.Barrier(2))
    with caplog.at_level(logging.INFO, logger=sharding.__name__):
        out, tallies = _collect(tmp_path, planned, compiler, timer, ReadyQueue(clock))
    df = dataset.read(out)
    assert df["problem_id"].nunique() == len(planned)
    assert sorted(timer.started) == sorted(str(runs[0].problem) for runs in planned)
    assert set(compiler.counts.values()) == {1}  # each key compiled once, for both GPUs
    assert len(compiler.counts) == len({r.key for runs in planned for r in runs})
    # every row says which GPU timed it, and both GPUs took work from the shared queue
    assert set(df["device_index"]) == {0, 1}
    per_gpu = df.groupby("device_index")["problem_id"].nunique().to_dict()
    assert [t.problems for t in tallies] == [per_gpu[0], per_gpu[1]]
    assert sum(t.rows for t in tallies) == len(df)
    assert all(t.wait_s >= 0 and not t.stopped_at_bound for t in tallies)
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith(f"2 GPUs: {len(planned)} problems, {len(df)} rows in") for line in lines)
    assert sum(line.startswith("GPU ") and "rows per GPU-minute" in line and "waited" in line
               for line in lines) == 2


def test_a_gpu_never_idles_while_ready_work_waits(tmp_path, clock):
    """Every problem is ready before the GPUs start: each GPU takes the next one whenever it is free
    (in lockstep, one each per round), so they split the plan evenly, and neither ever waits."""
    planned = _planned(24)
    compiler = FakeCompiler(seconds_per_key=0.0)
    timer = FakeGpuTimer(compiler.compiled_at, clock, seconds_per_row=2e-4, lockstep=threading.Barrier(2))
    ready = ReadyQueue(clock, wait_s=1.0)
    _, tallies = _collect(tmp_path, planned, compiler, timer, ready, all_ready_first=True)
    assert [t.problems for t in tallies] == [len(planned) // 2] * 2
    assert sum(ready.found_empty.values()) == 0  # no GPU ever asked for work and found none ready
    assert [t.wait_s for t in tallies] == [0.0, 0.0]
    assert [t.busy_s for t in tallies] == pytest.approx([timer.busy["gpu0"], timer.busy["gpu1"]])


def test_waits_are_counted_when_compile_is_behind(tmp_path, clock):
    """Each compile finishes only once both GPUs wait for work: every wait is charged 1 s, every
    timing far less, and each GPU's tally holds exactly what it was charged for each."""
    planned = _planned()
    ready = ReadyQueue(clock, wait_s=1.0)
    compiler = FakeCompiler(seconds_per_key=0.0, gate=lambda: ready.until(lambda q: q.waiting == 2))
    timer = FakeGpuTimer(compiler.compiled_at, clock, seconds_per_row=1e-5)
    _, tallies = _collect(tmp_path, planned, compiler, timer, ready)
    assert sum(t.problems for t in tallies) == len(planned)
    for tally in tallies:
        waits = ready.found_empty[f"gpu{tally.gpu}"]
        assert waits >= 1  # both GPUs waited for the first compile
        assert tally.wait_s == pytest.approx(waits * 1.0)
        assert tally.busy_s == pytest.approx(timer.busy[f"gpu{tally.gpu}"])
    assert sum(t.wait_s for t in tallies) > sum(t.busy_s for t in tallies)


def test_the_time_bound_stops_both_gpus_and_keeps_what_they_timed(tmp_path, clock):
    planned = _planned(24)  # 435 rows: 4.35 s of timing, over 2 s on each of the two GPUs
    compiler = FakeCompiler(seconds_per_key=0.0)
    timer = FakeGpuTimer(compiler.compiled_at, clock, seconds_per_row=1e-2)
    out, tallies = _collect(tmp_path, planned, compiler, timer, ReadyQueue(clock), max_seconds=1.0,
                            all_ready_first=True)
    timed = dataset.read(out)["problem_id"].nunique()
    assert 0 < timed < len(planned)  # stopped before the plan was done...
    assert len(timer.started) == timed  # ...and every problem a GPU started is in the output
    assert all(t.stopped_at_bound and 0 < t.busy_s <= 1.0 for t in tallies)


def test_the_dispatcher_releases_a_problem_only_when_its_last_key_is_compiled():
    planned = _planned(6)
    first_keys = list(dict.fromkeys(r.key for r in planned[0]))
    rest = {r.key for runs in planned[1:] for r in runs} - set(first_keys)
    batch = Future()  # the other problems' keys: one compile batch, done at once
    futures = {key: Future() for key in first_keys} | {key: batch for key in rest}
    ready: queue.Queue = queue.Queue()
    dispatcher = ReadyDispatcher(planned, futures, ready, consumers=2).start()
    for key in first_keys[:-1]:
        futures[key].set_result([(key, None, "")])
    time.sleep(0.3)
    assert ready.empty()  # one key of the first problem is still compiling
    futures[first_keys[-1]].set_result([(first_keys[-1], "out_of_resources", "too big")])
    index, runs, compiled = ready.get(timeout=5)
    assert index == 0 and compiled[first_keys[-1]] == ("out_of_resources", "too big")
    batch.set_result([(key, None, "") for key in rest])
    items = [ready.get(timeout=5) for _ in range(len(planned) + 1)]  # the rest, then two ends
    assert [item[0] for item in items[:-2]] == list(range(1, len(planned)))  # ready together: plan order
    assert items[-2:] == [None, None]
    dispatcher.stop()
    assert dispatcher.dispatched == len(planned) and dispatcher.error is None


def test_a_broken_compile_pool_stops_dispatching_and_says_why():
    planned = _planned(3)
    futures = {r.key: Future() for runs in planned for r in runs}
    ready: queue.Queue = queue.Queue()
    dispatcher = ReadyDispatcher(planned, futures, ready, consumers=1).start()
    next(iter(futures.values())).set_exception(RuntimeError("a compile worker died"))
    assert ready.get(timeout=5) is None
    dispatcher.stop()
    assert isinstance(dispatcher.error, RuntimeError)


def test_each_timing_process_sees_its_own_gpu(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert sharding.visible_devices(2) == ["0", "1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6")
    assert sharding.visible_devices(2) == ["3", "5"]


def test_throughput_lines_name_rows_per_gpu_minute_and_waits():
    tallies = [GpuTally(0, problems=3, rows=600, busy_s=50.0, wait_s=7.5),
               GpuTally(1, problems=2, rows=300, busy_s=40.0, wait_s=12.0, stopped_at_bound=True)]
    assert run_line(tallies, 60.0, 1234, 30) == (
        "2 GPUs: 5 problems, 900 rows in 60.0 s wall (compile included; 1234 kernels compiled on 30 "
        "workers): 900 rows per minute, 450 per GPU-minute")
    line = gpu_line(tallies[1], 60.0)
    assert line.startswith("GPU 1: 2 problems, 300 rows, 300 rows per GPU-minute, busy 40.0 s, waited 12.0 s")
    assert "stopped at the --max-seconds bound" in line
    assert math.isclose(float(gpu_line(tallies[0], 30.0).split(", ")[2].split()[0]), 1200.0)


def test_more_gpus_than_the_host_has_is_refused(tmp_path, monkeypatch):
    import torch

    from kernel_select.errors import OptionError

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(OptionError, match="--gpus 2: this host has 1"):
        sharding.run_sharded([Problem(16, 16, 16)], tmp_path / "d.parquet", H100, 2, bench.BenchOptions())


def test_the_compile_pool_is_sized_by_the_cores_this_process_may_use(monkeypatch):
    # a 32-core machine that gives this process 16 (taskset, a container's cpuset): 15 workers, not 31
    monkeypatch.setattr(bench.os, "cpu_count", lambda: 32)
    monkeypatch.setattr(bench.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert bench.compile_workers(reserved=1) == 15
    assert bench.compile_workers(reserved=2) == 14 and bench.compile_workers() == 16
    assert bench.compile_workers(reserved=40) == 1


def test_the_compile_pool_reports_each_classes_seconds_per_key_as_its_workers_measured():
    # what harness/cost.py's COMPILE_CORE_S predicts, measured per class: the large-M float32 run
    # took 2.5x the cost model's time, and a log that says which class was slow re-fits it
    keys = [r.key for runs in _planned() for r in runs]
    classes = {pipeline.compile_class(key) for key in keys}
    assert classes == {"mm bfloat16", "bmm float16", "bmm bfloat16"}

    def compile_fn(batch):
        done = bench.CompiledBatch((key, None, "") for key in batch)
        done.seconds = [4.0 if key.kernel == "bmm" else 1.5 for key in batch]
        return done

    compiler = CompilePipeline(2, compile_fn=compile_fn, executor=ThreadPoolExecutor(2))
    assert compiler.seconds_line() == ""
    compiler.submit(keys)
    compiler.wait(keys, math.inf)
    compiler.pool.shutdown(wait=True)  # every done-callback has run
    line = compiler.seconds_line()
    distinct = {key for key in keys}
    per_class = {name: sum(pipeline.compile_class(k) == name for k in distinct) for name in classes}
    assert line == ("compile per key in its worker: "
                    f"bmm bfloat16 4.00 s ({per_class['bmm bfloat16']:,} keys), "
                    f"bmm float16 4.00 s ({per_class['bmm float16']:,} keys), "
                    f"mm bfloat16 1.50 s ({per_class['mm bfloat16']:,} keys)")


def test_a_compile_tasks_seconds_survive_the_trip_back_from_its_worker_process():
    done = bench.CompiledBatch([("key", None, "")])
    done.seconds = [2.5]
    back = pickle.loads(pickle.dumps(done))
    assert list(back) == [("key", None, "")] and back.seconds == [2.5]
