"""The collection driver: compile and time overlap, wall time is bounded, rows land as they come.

* Compile keys are submitted to a process pool in the order problems will be timed; the timing
  loop waits only for the keys of the problem it is about to time, so the pool compiles problem
  i+1 (and beyond) while the GPU times problem i. Keys already compiled (shared by an earlier
  problem of the same compile class) are never resubmitted: the sampler's groups make most
  problems need no new binary at all. The key holds the operand layout, so a binary is reused
  only by problems of its own layout.
* `max_seconds` bounds the wall time from the start of the run, compile included: the loop stops
  before a problem it does not expect to finish in time, and the pool is torn down.
* After every problem its rows go to a writer thread that appends them (locked, atomic) to the
  output, so a killed run keeps everything up to the last write.
* The run logs its throughput in rows per GPU-minute of wall time, compile included, the seconds
  the GPU waited for compiled kernels (`gpu_tally`), and how much timing it had to redo: chunks
  re-timed after a drained backlog and single samples re-timed for a second opinion
  (`timer.TimingStats`; per problem in the `timing_method` column too), and per compile class the
  seconds a key took in its worker (`CompilePipeline.seconds_line`: what harness/cost.py predicts).

This is the one-GPU driver; `sharding` runs one timing process per GPU off the same compile pool.
"""

from __future__ import annotations

import logging
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pandas as pd

from kernel_select.device import DeviceSpec
from kernel_select.errors import DatasetError
from kernel_select.offline.data import dataset, problem_ids
from kernel_select.offline.harness.bench import (
    BenchOptions,
    _compile_keys,
    compile_workers,
    provenance,
    rows_for,
    time_problem,
)
from kernel_select.offline.harness.gpu_tally import GpuTally, gpu_line
from kernel_select.offline.harness.timer import TimingStats
from kernel_select.offline.harness.bench_plan import CompileKey, PlannedRun, plan, reuse_order
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

COMPILE_BATCH = 4  # keys per pool task: small, so the keys of the next problem arrive early
Problems = Sequence[Problem]  # each timed in its own operand layout (Problem.layout)
Origins = dict[Problem, dict]  # problem -> its family / layer / pass columns


class CompilePipeline:
    """A pool of compile processes fed in timing order; `wait` returns when given keys are done.

    `compile_fn` (a batch of keys -> [(key, error status or None, error text)]) and `executor`
    default to `bench._compile_keys` on a pool of spawned processes; tests pass fakes."""

    def __init__(self, workers: int, compile_fn: Callable = _compile_keys, executor: Executor | None = None):
        self.workers = workers
        self.compile_fn = compile_fn
        self.pool = executor or ProcessPoolExecutor(max_workers=workers,
                                                    mp_context=multiprocessing.get_context("spawn"))
        self.futures: dict[CompileKey, Future] = {}
        self.results: dict[CompileKey, tuple[str | None, str]] = {}
        #: compile class -> [keys, seconds] of the tasks finished so far (CompiledBatch.seconds)
        self.key_seconds: dict[str, list[float]] = {}
        self._lock = threading.Lock()

    def submit(self, keys: Sequence[CompileKey]) -> None:
        fresh = [k for k in dict.fromkeys(keys) if k not in self.futures]
        for i in range(0, len(fresh), COMPILE_BATCH):
            batch = fresh[i:i + COMPILE_BATCH]
            future = self.pool.submit(self.compile_fn, batch)
            future.add_done_callback(self._count_seconds)
            for key in batch:
                self.futures[key] = future

    def _count_seconds(self, future: Future) -> None:
        """Add a finished task's per-key seconds to its keys' classes (runs in the pool's thread)."""
        if future.cancelled() or future.exception() is not None:
            return
        done = future.result()
        with self._lock:
            for (key, _, _), seconds in zip(done, getattr(done, "seconds", ())):
                tally = self.key_seconds.setdefault(compile_class(key), [0, 0.0])
                tally[0] += 1
                tally[1] += seconds

    def seconds_line(self) -> str:
        """Per compile class, the mean seconds a key took in its worker ("" before any was timed): what
        harness/cost.py's COMPILE_CORE_S predicts, measured on this host."""
        with self._lock:
            parts = [f"{name} {seconds / keys:.2f} s ({keys:,} keys)"
                     for name, (keys, seconds) in sorted(self.key_seconds.items())]
        return "compile per key in its worker: " + ", ".join(parts) if parts else ""

    def wait(self, keys: Sequence[CompileKey],
             timeout_s: float) -> dict[CompileKey, tuple[str | None, str]] | None:
        """Each key's (error status or None, error text); None if not all were done in time
        (`timeout_s` may be inf)."""
        deadline = time.monotonic() + timeout_s
        for key in keys:
            if key in self.results:
                continue
            left = None if timeout_s == float("inf") else max(deadline - time.monotonic(), 0.0)
            try:
                done = self.futures[key].result(timeout=left)
            except FutureTimeout:
                return None
            for k, status, text in done:
                self.results[k] = (status, text)
        return {k: self.results[k] for k in keys}

    @property
    def compiled(self) -> int:
        return len(self.results)

    def close(self) -> None:
        """Stop now: drop queued work and end workers still compiling (their output is a cache)."""
        processes = list(getattr(self.pool, "_processes", {}).values())
        self.pool.shutdown(wait=False, cancel_futures=True)
        for proc in processes:
            if proc.is_alive():
                proc.terminate()


def compile_class(key: CompileKey) -> str:
    """How the cost model tells keys apart: kernel and dtype, and whether the sizes are compiled in."""
    return f"{key.kernel} {key.dtype}{' tf32' if key.allow_tf32 else ''}{' literal' if key.sizes else ''}"


class RowWriter:
    """Appends rows to the dataset from a background thread, so timing never waits on parquet."""

    def __init__(self, out: Path):
        self.out = out
        self.queue: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.rows_written = 0
        self.thread = threading.Thread(target=self._loop, name="row-writer", daemon=True)
        self.thread.start()

    def put(self, rows: list[dict]) -> None:
        if self.error:
            raise self.error
        self.queue.put(rows)

    def _loop(self) -> None:
        stop = False
        while not stop:
            batch = [self.queue.get()]
            while not self.queue.empty():
                batch.append(self.queue.get())
            stop = None in batch
            rows = [r for part in batch if part for r in part]
            if rows and not self.error:
                try:
                    dataset.append(self.out, pd.DataFrame(rows))
                    self.rows_written += len(rows)
                except BaseException as exc:  # surfaced to the timing loop by put() / close()
                    self.error = exc

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error:
            raise self.error


def bench_problem_id(p: Problem) -> str:
    return problem_ids.id_of(p)


def todo_problems(problems: Problems, out: str | Path, device_name: str) -> list[Problem]:
    """The problems not yet measured on this device in `out` (resume)."""
    done = dataset.completed_problems(out, device_name=device_name)
    return [p for p in problems if bench_problem_id(p) not in done]


#: Bytes a dataset row takes in a file when the output holds none yet to tell (the committed
#: collections take 5 to 6; the estimate errs high).
BYTES_PER_ROW_GUESS = 8


def check_room(out: str | Path, new_rows: int) -> None:
    """Refuse, before anything is timed, a run whose rows would grow `out` past the dataset read
    limits (dataset.MAX_DATASET_BYTES, MAX_DATASET_ROWS): past the bytes the appends would succeed
    and the next resume (or any reader) would refuse the file; past the rows an append would stop
    the run midway.

    The new rows are costed at the bytes per row the file has now (BYTES_PER_ROW_GUESS when it
    is new or empty).

    Raises:
        DatasetError: naming the file, its size, the estimate and the limit, and what to do.
    """
    path = Path(out)
    size = path.stat().st_size if path.is_file() else 0
    rows = dataset.row_count(path) if size else 0
    per_row = size / rows if rows else BYTES_PER_ROW_GUESS
    estimate = int(new_rows * per_row)
    if size + estimate > dataset.MAX_DATASET_BYTES:
        passed = (f"{size:,} bytes now and about {estimate:,} more for {new_rows:,} rows would pass the "
                  f"dataset read limit of {dataset.MAX_DATASET_BYTES:,} bytes")
    elif rows + new_rows > dataset.MAX_DATASET_ROWS:  # append would refuse the rows mid-run
        passed = (f"{rows:,} rows now and {new_rows:,} more would pass the dataset limit of "
                  f"{dataset.MAX_DATASET_ROWS:,} rows")
    else:
        return
    raise DatasetError(f"{path}: {passed}, and no reader (nor the next resume) could open it; write to "
                       "another --out and read both with a glob (data/part*.parquet)")


def run_bench(problems: Problems, out: str | Path, device: DeviceSpec,
              options: BenchOptions | None = None, origins: Origins | None = None, *,
              planned: Sequence[list[PlannedRun]] | None = None,
              on_problem: Callable[[Problem], None] | None = None) -> pd.DataFrame:
    """Benchmark `problems` in order (skipping those already in `out` for this GPU), appending
    each problem's rows to `out` as soon as it is timed. Returns the whole output.

    Each problem is timed in its own operand layout; `origins` maps a problem to its family /
    layer / pass columns. `planned`: the problems' runs already planned (bench_plan.plan, same
    order as `problems`), so they are not planned again;
    `on_problem` is called with each problem once it is timed (its rows handed to the writer)."""
    import torch

    options = options or BenchOptions()
    started = time.perf_counter()
    prov = provenance(options.git_sha)
    todo = todo_problems(problems, out, prov["device_name"])
    if len(todo) < len(problems):
        log.info("resuming: %d of %d problems already in %s", len(problems) - len(todo), len(problems), out)
    if todo:
        if planned is None:
            planned = plan(todo, device, search_space=options.search_space,
                           literal_sizes=options.literal_sizes)
        else:
            wanted = set(todo)
            planned = [runs for runs in planned if runs and runs[0].problem in wanted]
        check_room(out, sum(len(runs) + 1 for runs in planned))
        if options.order == "reuse":
            planned = reuse_order(planned)
        workers = options.workers or compile_workers(reserved=1)  # one core launches kernels
        stats = _collect(list(planned), Path(out), device, options, prov, origins or {}, workers, started,
                         on_problem)
        wall = time.perf_counter() - started
        log.info("%d problems, %d rows in %.1f s wall (compile included; %d kernels compiled on %d "
                 "workers): %.0f rows per GPU-minute; timing: %s", stats["problems"], stats["rows"], wall,
                 stats["compiled"], workers, 60 * stats["rows"] / max(wall, 1e-9), stats["timing"].summary())
        log.info("%s", gpu_line(stats["tally"], wall))
        if stats["compile_seconds"]:
            log.info("%s", stats["compile_seconds"])
        torch.cuda.empty_cache()
    if Path(out).exists():
        return dataset.read(out)
    return dataset.conform(pd.DataFrame(columns=list(dataset.COLUMNS)))


def _collect(planned: list[list[PlannedRun]], out: Path, device: DeviceSpec, options: BenchOptions,
             prov: dict, origins: Origins, workers: int, started: float,
             on_problem: Callable[[Problem], None] | None = None) -> dict:
    """The timing loop over planned problems, with compiling ahead and writing behind."""
    import torch
    from tqdm import tqdm

    compiler, writer = CompilePipeline(workers), RowWriter(out)
    for runs in planned:
        compiler.submit([r.key for r in runs])
    deadline = started + options.max_seconds if options.max_seconds else float("inf")
    checked: dict[CompileKey, int] = {}
    loaded: set[CompileKey] = set()
    tally = GpuTally(int(prov.get("device_index", 0)))
    stats = {"problems": 0, "rows": 0, "compiled": 0, "timing": TimingStats(), "tally": tally,
             "compile_seconds": ""}
    per_problem_s = 0.0  # running estimate of one problem's timing, to stop before the bound
    bar = tqdm(planned, desc="bench", unit="problem", disable=not options.progress)
    try:
        for runs in bar:
            if not runs:
                continue
            now = time.perf_counter()
            compiled = compiler.wait([r.key for r in runs], deadline - now - per_problem_s)
            tally.wait_s += time.perf_counter() - now
            if compiled is None or time.perf_counter() + per_problem_s > deadline:
                log.info("stopping at the %.0f s bound (--max-seconds); re-run to resume",
                         options.max_seconds)
                tally.stopped_at_bound = True
                break
            t0 = time.perf_counter()
            timing = TimingStats()
            results, cublas = time_problem(runs, compiled, device, options, checked, loaded, timing)
            timed = runs[0].problem
            writer.put(rows_for(runs, results, cublas, prov, options, origins.get(timed), timing))
            _log_timing(timed, timing)
            stats["timing"].add(timing)
            per_problem_s = max(per_problem_s * 0.7, time.perf_counter() - t0)
            tally.add_problem(len(runs) + 1, time.perf_counter() - t0)
            stats["problems"] += 1
            stats["rows"] += len(runs) + 1
            if on_problem is not None:
                on_problem(timed)
            rate = 60 * stats["rows"] / max(time.perf_counter() - started, 1e-9)
            bar.set_postfix(rows=stats["rows"], compiled=compiler.compiled, rows_per_gpu_min=f"{rate:.0f}",
                            retimed_chunks=stats["timing"].chunks_retimed)
            del results
            torch.cuda.empty_cache()
    finally:
        stats["compile_seconds"] = compiler.seconds_line()  # before close() cancels what is queued
        compiler.close()
        writer.close()
        stats["compiled"] = compiler.compiled
    return stats


def _log_timing(problem: Problem, timing: TimingStats) -> None:
    """One line per problem; at INFO only when timing had to be redone, so clean runs stay quiet."""
    redone = timing.chunks_retimed or timing.suspects
    log.log(logging.WARNING if timing.chunks_unresolved else logging.INFO if redone else logging.DEBUG,
            "%s: %s", problem, timing.summary())
