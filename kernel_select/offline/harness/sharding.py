"""Collection on several GPUs of one host: `bench --gpus N`.

One compile pool for the whole host (every core but one per GPU) compiles each key once, in plan
order (problems sharing compile keys together), into Triton's on-disk cache. One timing process
per GPU (each sees its GPU alone through CUDA_VISIBLE_DEVICES) takes the next problem whose
kernels are ready from one shared queue (`ready_queue`), times it and sends its rows back; this
process writes them to the output as they come (locked, atomic, resumable) with the index of the
GPU that timed them (`device_index`). The run logs, per GPU, rows per GPU-minute and the seconds
it waited for compiled kernels (`gpu_tally`).

Earlier versions gave each GPU whole compile groups, its own compile pool of cores/N - 1 workers
and a part file: on two H200s the cores split in two compiled no faster than one pool, and uneven
shards left one GPU at a quarter of the other's rate (data/README.md, run 5).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_select.device import DeviceSpec
from kernel_select.errors import OptionError
from kernel_select.offline.data import dataset
from kernel_select.offline.harness.bench import (
    BenchOptions,
    compile_workers,
    provenance,
    rows_for,
    time_problem,
)
from kernel_select.offline.harness.bench_plan import CompileKey, PlannedRun, plan, reuse_order
from kernel_select.offline.harness.gpu_tally import GpuTally, gpu_line, run_line
from kernel_select.offline.harness.pipeline import (
    CompilePipeline,
    Origins,
    Problems,
    RowWriter,
    _log_timing,
    run_bench,
    todo_problems,
)
from kernel_select.offline.harness.ready_queue import ReadyDispatcher
from kernel_select.offline.harness.timer import TimingStats

log = logging.getLogger(__name__)

RESULT_POLL_S = 2.0  # how often the collecting loop checks that the timing processes are alive
TimeFn = Callable[..., tuple[dict, Any]]  # bench.time_problem's signature


def run_sharded(problems: Problems, out: str | Path, device: DeviceSpec, gpus: int,
                options: BenchOptions, origins: Origins | None = None) -> pd.DataFrame:
    """Time `problems` on `gpus` GPUs of this host (one GPU: `pipeline.run_bench`), in plan order
    (`options.order`), skipping those already in `out` for this GPU model."""
    if gpus <= 1:
        return run_bench(problems, out, device, options, origins)
    import torch

    started = time.perf_counter()
    if gpus > torch.cuda.device_count():
        raise OptionError(f"--gpus {gpus}: this host has {torch.cuda.device_count()} visible CUDA GPUs")
    todo = todo_problems(list(problems), out, torch.cuda.get_device_properties(0).name)
    if len(todo) < len(problems):
        log.info("resuming: %d of %d problems already in %s", len(problems) - len(todo), len(problems), out)
    if todo:
        planned = plan(todo, device, search_space=options.search_space, literal_sizes=options.literal_sizes)
        if options.order == "reuse":
            planned = reuse_order(planned)
        workers = options.workers or compile_workers(reserved=gpus)  # a core per timing process
        collect_on_host(planned, Path(out), device, options, origins or {}, gpus, workers, started)
    if Path(out).exists():
        return dataset.read(out)
    return dataset.conform(pd.DataFrame(columns=list(dataset.COLUMNS)))


def visible_devices(gpus: int) -> list[str]:
    """The CUDA_VISIBLE_DEVICES value of each timing process: one entry of this process's list
    (or GPU i when it has none)."""
    current = os.environ.get("CUDA_VISIBLE_DEVICES")
    listed = [d for d in current.split(",") if d] if current else [str(i) for i in range(gpus)]
    return listed[:gpus]


def collect_on_host(planned: list[list[PlannedRun]], out: Path, device: DeviceSpec, options: BenchOptions,
                    origins: Origins, gpus: int, workers: int, started: float, *,
                    compiler: CompilePipeline | None = None, start_worker: Callable | None = None,
                    queues: tuple[Any, Any] | None = None) -> list[GpuTally]:
    """Compile on one pool, time on `gpus` timing processes fed from one ready queue, write rows
    here. Returns each GPU's tally. `compiler`, `start_worker` and `queues` are for tests (a fake
    pool, timing threads on a fake GPU, thread queues); by default a pool of `workers` processes
    and one spawned process per GPU."""
    ctx = multiprocessing.get_context("spawn")
    ready, results = queues or (ctx.Queue(), ctx.Queue())
    compiler = compiler or CompilePipeline(workers)
    for runs in planned:
        compiler.submit([r.key for r in runs])
    deadline = _monotonic_deadline(options, started)
    origin_of = [origins.get(runs[0].problem) if runs else None for runs in planned]
    dispatcher = ReadyDispatcher(planned, compiler.futures, _WithOrigin(ready, origin_of), gpus).start()
    start_worker = start_worker or _start_process
    devices = visible_devices(gpus)
    workers_alive = [start_worker(ctx, gpu, devices[gpu], (gpu, device, options, deadline, ready, results))
                     for gpu in range(gpus)]
    writer = RowWriter(out)
    tallies = [GpuTally(gpu) for gpu in range(gpus)]
    timing = TimingStats()
    try:
        _gather(results, workers_alive, writer, tallies, timing, len(planned), options.progress)
    finally:
        dispatcher.stop()
        compile_seconds = compiler.seconds_line()  # before close() cancels what is queued
        compiler.close()
        writer.close()
        for worker in workers_alive:
            worker.join(timeout=30)
        if hasattr(ready, "cancel_join_thread"):
            ready.cancel_join_thread()  # items no GPU took must not hold this process at exit
    wall = time.perf_counter() - started
    log.info("%s; timing: %s", run_line(tallies, wall, len(dispatcher.results), workers), timing.summary())
    for tally in tallies:
        log.info("%s", gpu_line(tally, wall))
    if compile_seconds:
        log.info("%s", compile_seconds)
    if dispatcher.error:
        raise dispatcher.error
    return tallies


class _WithOrigin:
    """The ready queue as the dispatcher fills it: each item gains its problem's origin columns."""

    def __init__(self, ready: Any, origin_of: list[dict | None]):
        self.ready, self.origin_of = ready, origin_of

    def put(self, item: tuple | None) -> None:
        self.ready.put(None if item is None else (*item, self.origin_of[item[0]]))


def _monotonic_deadline(options: BenchOptions, started: float) -> float:
    """--max-seconds as a time.monotonic() deadline, which every process of the host shares."""
    if not options.max_seconds:
        return float("inf")
    return time.monotonic() + options.max_seconds - (time.perf_counter() - started)


def _gather(results: Any, workers: list, writer: RowWriter, tallies: list[GpuTally], timing: TimingStats,
            total: int, progress: bool) -> None:
    """Write each problem's rows as a GPU sends them, until every GPU has reported its tally."""
    from tqdm import tqdm

    done: set[int] = set()
    bar = tqdm(total=total, desc="bench", unit="problem", disable=not progress)
    try:
        while len(done) < len(tallies):
            try:
                message = results.get(timeout=RESULT_POLL_S)
            except queue.Empty:
                dead = [g for g, w in enumerate(workers) if g not in done and not w.is_alive()]
                for gpu in dead:  # exited without its tally: crashed; its written rows are kept
                    log.warning("GPU %d's timing process exited with code %s; its written problems are kept",
                                gpu, getattr(workers[gpu], "exitcode", None))
                    done.add(gpu)
                continue
            kind, gpu = message[0], message[1]
            if kind == "rows":
                _, _, rows, stats = message
                writer.put(rows)
                timing.add(stats)
                tallies[gpu].add_problem(len(rows), 0.0)  # replaced by the GPU's own tally at its end
                bar.update(1)
                bar.set_postfix(rows=sum(t.rows for t in tallies), retimed_chunks=timing.chunks_retimed)
            elif kind == "done":
                tallies[gpu] = message[2]
                done.add(gpu)
    finally:
        bar.close()


def _start_process(ctx: Any, gpu: int, visible: str, args: tuple) -> Any:
    """Start GPU `gpu`'s timing process; it sees only that GPU (CUDA_VISIBLE_DEVICES is read when
    CUDA starts, and a spawned child inherits the environment as it is when it starts)."""
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    try:
        proc = ctx.Process(target=_gpu_main, args=args, name=f"bench-gpu{gpu}", daemon=True)
        proc.start()
    finally:
        if previous is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous
    return proc


def _gpu_main(gpu: int, device: DeviceSpec, options: BenchOptions, deadline: float, ready: Any,
              results: Any) -> None:
    logging.basicConfig(level=logging.INFO, format=f"[GPU {gpu}] %(message)s")
    time_on_gpu(gpu, device, options, deadline, ready, results, provenance(options.git_sha, device_index=gpu),
                _time_and_release)


def _time_and_release(*args: Any) -> tuple[dict, Any]:
    """bench.time_problem, then the problem's operands go back to the allocator's free pool at
    once (as pipeline._collect does), so problems of very different sizes do not pile up."""
    import torch

    out = time_problem(*args)
    torch.cuda.empty_cache()
    return out


def time_on_gpu(gpu: int, device: DeviceSpec, options: BenchOptions, deadline: float, ready: Any,
                results: Any, prov: dict, time_fn: TimeFn = time_problem) -> GpuTally:
    """A timing process's loop: take the next ready problem, time it, send its rows; stop at the
    queue's end or before a problem it does not expect to finish by `deadline` (monotonic).
    Sends ("rows", gpu, rows, stats) per problem and ("done", gpu, tally) at the end."""
    tally = GpuTally(gpu)
    checked: dict[CompileKey, int] = {}
    loaded: set[CompileKey] = set()
    per_problem_s = 0.0  # running estimate of one problem's timing, as pipeline._collect keeps it
    try:
        while True:
            waited_from = time.monotonic()
            timeout = None if deadline == float("inf") else deadline - waited_from - per_problem_s
            if timeout is not None and timeout <= 0:
                tally.stopped_at_bound = True
                break
            try:
                item = ready.get(timeout=timeout)
            except queue.Empty:
                tally.stopped_at_bound = True
                break
            tally.wait_s += time.monotonic() - waited_from
            if item is None:
                break
            _, runs, compiled, origin = item
            t0 = time.monotonic()
            if t0 + per_problem_s > deadline:
                tally.stopped_at_bound = True
                break
            stats = TimingStats()
            timed, cublas = time_fn(runs, compiled, device, options, checked, loaded, stats)
            rows = rows_for(runs, timed, cublas, prov, options, origin, stats)
            results.put(("rows", gpu, rows, stats))
            _log_timing(runs[0].problem, stats)
            seconds = time.monotonic() - t0
            per_problem_s = max(per_problem_s * 0.7, seconds)
            tally.add_problem(len(rows), seconds)
    finally:
        results.put(("done", gpu, tally))
    return tally
