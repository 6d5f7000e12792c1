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
* The run logs its throughput in rows per GPU-minute of wall time, compile included, and how much
  timing it had to redo: chunks re-timed after a drained backlog and single samples re-timed for
  a second opinion (`timer.TimingStats`; per problem in the `timing_method` column too).
* `run_sharded` spreads whole compile groups over the GPUs of one host: one process per GPU, each
  with its own CUDA_VISIBLE_DEVICES and part file, merged into the output at the end.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import pandas as pd

from kernel_select.device import DeviceSpec
from kernel_select.errors import OptionError
from kernel_select.offline.data import dataset
from kernel_select.offline.harness.bench import (
    BenchOptions,
    _compile_keys,
    provenance,
    rows_for,
    time_problem,
)
from kernel_select.offline.harness.timer import TimingStats
from kernel_select.offline.harness.bench_plan import CompileKey, PlannedRun, plan, pow2_divisor, reuse_order
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

COMPILE_BATCH = 4  # keys per pool task: small, so the keys of the next problem arrive early
Problems = Sequence[Problem]  # each timed in its own operand layout (Problem.layout)
Origins = dict[Problem, dict]  # problem -> its family / layer / pass columns


class CompilePipeline:
    """A pool of compile processes fed in timing order; `wait` returns when given keys are done."""

    def __init__(self, workers: int):
        self.workers = workers
        self.pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
        self.futures: dict[CompileKey, Future] = {}
        self.results: dict[CompileKey, tuple[str | None, str]] = {}
        self.busy_s = 0.0

    def submit(self, keys: Sequence[CompileKey]) -> None:
        fresh = [k for k in dict.fromkeys(keys) if k not in self.futures]
        for i in range(0, len(fresh), COMPILE_BATCH):
            batch = fresh[i:i + COMPILE_BATCH]
            future = self.pool.submit(_compile_keys, batch)
            for key in batch:
                self.futures[key] = future

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
    return dataset.id_of(p)


def todo_problems(problems: Problems, out: str | Path, device_name: str) -> list[Problem]:
    """The problems not yet measured on this device in `out` (resume)."""
    done = dataset.completed_problems(out, device_name=device_name)
    return [p for p in problems if bench_problem_id(p) not in done]


def _fp32_precision() -> str:
    import torch

    return str(getattr(torch.backends.cuda.matmul, "fp32_precision", "ieee"))


def run_bench(problems: Problems, out: str | Path, device: DeviceSpec,
              options: BenchOptions | None = None, origins: Origins | None = None) -> pd.DataFrame:
    """Benchmark `problems` in order (skipping those already in `out` for this GPU), appending
    each problem's rows to `out` as soon as it is timed. Returns the whole output.

    Each problem is timed in its own operand layout; `origins` maps a problem to its family /
    layer / pass columns."""
    import torch

    options = options or BenchOptions()
    started = time.perf_counter()
    prov = provenance(options.git_sha)
    todo = todo_problems(problems, out, prov["device_name"])
    if len(todo) < len(problems):
        log.info("resuming: %d of %d problems already in %s", len(problems) - len(todo), len(problems), out)
    if todo:
        planned = plan(todo, device, search_space=options.search_space, fp32_precision=_fp32_precision())
        if options.order == "reuse":
            planned = reuse_order(planned)
        workers = options.workers or max(1, (os.cpu_count() or 2) - 1)  # one core launches kernels
        stats = _collect(planned, Path(out), device, options, prov, origins or {}, workers, started)
        wall = time.perf_counter() - started
        log.info("%d problems, %d rows in %.1f s wall (compile included; %d kernels compiled on %d "
                 "workers): %.0f rows per GPU-minute; timing: %s", stats["problems"], stats["rows"], wall,
                 stats["compiled"], workers, 60 * stats["rows"] / max(wall, 1e-9), stats["timing"].summary())
        torch.cuda.empty_cache()
    if Path(out).exists():
        return dataset.read(out)
    return dataset.conform(pd.DataFrame(columns=list(dataset.COLUMNS)))


def _collect(planned: list[list[PlannedRun]], out: Path, device: DeviceSpec, options: BenchOptions,
             prov: dict, origins: Origins, workers: int, started: float) -> dict:
    """The timing loop over planned problems, with compiling ahead and writing behind."""
    import torch
    from tqdm import tqdm

    compiler, writer = CompilePipeline(workers), RowWriter(out)
    for runs in planned:
        compiler.submit([r.key for r in runs])
    deadline = started + options.max_seconds if options.max_seconds else float("inf")
    checked: dict[CompileKey, int] = {}
    loaded: set[CompileKey] = set()
    stats = {"problems": 0, "rows": 0, "compiled": 0, "timing": TimingStats()}
    per_problem_s = 0.0  # running estimate of one problem's timing, to stop before the bound
    bar = tqdm(planned, desc="bench", unit="problem", disable=not options.progress)
    try:
        for runs in bar:
            if not runs:
                continue
            now = time.perf_counter()
            compiled = compiler.wait([r.key for r in runs], deadline - now - per_problem_s)
            if compiled is None or time.perf_counter() + per_problem_s > deadline:
                log.info("stopping at the %.0f s bound (--max-seconds); re-run to resume",
                         options.max_seconds)
                break
            t0 = time.perf_counter()
            timing = TimingStats()
            results, cublas = time_problem(runs, compiled, device, options, checked, loaded, timing)
            timed = runs[0].problem
            writer.put(rows_for(runs, results, cublas, prov, options, origins.get(timed), timing))
            _log_timing(timed, timing)
            stats["timing"].add(timing)
            per_problem_s = max(per_problem_s * 0.7, time.perf_counter() - t0)
            stats["problems"] += 1
            stats["rows"] += len(runs) + 1
            rate = 60 * stats["rows"] / max(time.perf_counter() - started, 1e-9)
            bar.set_postfix(rows=stats["rows"], compiled=compiler.compiled, rows_per_gpu_min=f"{rate:.0f}",
                            retimed_chunks=stats["timing"].chunks_retimed)
            del results
            torch.cuda.empty_cache()
    finally:
        compiler.close()
        writer.close()
        stats["compiled"] = compiler.compiled
    return stats


def _log_timing(problem: Problem, timing: TimingStats) -> None:
    """One line per problem; at INFO only when timing had to be redone, so clean runs stay quiet."""
    redone = timing.chunks_retimed or timing.suspects
    log.log(logging.WARNING if timing.chunks_unresolved else logging.INFO if redone else logging.DEBUG,
            "%s: %s", problem, timing.summary())


# -- several GPUs ----------------------------------------------------------------------------------

#: Row-equivalents (at about 1,000 rows a second on one GPU) for what a problem costs besides its
#: rows (operands, reference, cuBLAS, checks), and for compiling one key on one GPU's share of the
#: cores (0.65 core-seconds on 15 of them).
PROBLEM_COST_ROWS = 200
KEY_COST_ROWS = 43


def shard_problems(problems: Problems, groups: Sequence[str], gpus: int,
                   costs: Sequence[float] | None = None) -> list[list[int]]:
    """Indices of the problems each GPU times: whole groups (problems sharing compile keys) go to
    one GPU, so no binary is compiled twice. Groups go largest first (by `costs` summed over the
    group, else by problem count) to the GPU with the least work so far, so the GPUs finish
    together. Order within a GPU follows the input."""
    by_group: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        by_group.setdefault(group, []).append(i)
    weight = [1.0] * len(groups) if costs is None else list(costs)
    totals = {g: sum(weight[i] for i in members) for g, members in by_group.items()}
    shards: list[list[int]] = [[] for _ in range(gpus)]
    load = [0.0] * gpus
    for group in sorted(by_group, key=lambda g: -totals[g]):  # stable: ties keep input order
        gpu = min(range(gpus), key=lambda i: load[i])
        shards[gpu].extend(by_group[group])
        load[gpu] += totals[group]
    return [sorted(s) for s in shards]


def group_costs(problems: Problems, groups: Sequence[str], device: DeviceSpec,
                search_space: str) -> list[float]:
    """Each problem's estimated share of its group's work, in rows: its rows plus a fixed cost,
    or its share of compiling the group's distinct keys where that is larger (compile and timing
    overlap, so the slower of the two bounds the group)."""
    planned = plan(problems, device, search_space=search_space)
    timing = [len(runs) + 1 + PROBLEM_COST_ROWS for runs in planned]
    keys: dict[str, set[CompileKey]] = {}
    members: dict[str, int] = {}
    for group, runs in zip(groups, planned):
        keys.setdefault(group, set()).update(r.key for r in runs)
        members[group] = members.get(group, 0) + 1
    group_timing: dict[str, float] = {}
    for group, t in zip(groups, timing):
        group_timing[group] = group_timing.get(group, 0.0) + t
    scale = {g: max(1.0, KEY_COST_ROWS * len(keys[g]) / group_timing[g]) for g in keys}
    return [t * scale[g] for g, t in zip(groups, timing)]


def default_group(problem: Problem) -> str:
    """The group of a problem its plan gave none: what most of its compile keys depend on."""
    return f"{problem.dtype}/{problem.layout}/n{pow2_divisor(problem.n)}/k{pow2_divisor(problem.k)}"


def run_sharded(problems: Problems, out: str | Path, device: DeviceSpec, gpus: int,
                options: BenchOptions, origins: Origins | None = None,
                groups: Sequence[str] | None = None) -> pd.DataFrame:
    """Shard problems over `gpus` GPUs of this host (one process each), then merge the parts."""
    if gpus <= 1:
        return run_bench(problems, out, device, options, origins)
    import torch

    started = time.perf_counter()
    if gpus > torch.cuda.device_count():
        raise OptionError(f"--gpus {gpus}: this host has {torch.cuda.device_count()} visible CUDA GPUs")
    out = Path(out)
    parts = [part_path(out, i) for i in range(gpus)]
    leftover = merge_parts(out, sorted(out.parent.glob(f"{out.stem}.gpu*{out.suffix}")))
    if any(rows for _, rows in leftover):  # a killed sharded run: its timed problems count as done
        log.info("merged %d problems from part files of an earlier run", sum(p for p, _ in leftover))
    problems = list(problems)
    groups = [g or default_group(p) for g, p in zip(groups or [""] * len(problems), problems)]
    group_of = dict(zip(problems, groups))
    problems = todo_problems(problems, out, torch.cuda.get_device_properties(0).name)
    if not problems:
        log.info("every problem is already in %s for this GPU", out)
        return dataset.read(out)
    groups = [group_of[p] for p in problems]
    workers = options.workers or max(1, (os.cpu_count() or 2) // gpus - 1)
    shard_options = BenchOptions(**{**options.__dict__, "workers": workers})
    ctx = multiprocessing.get_context("spawn")
    procs = []
    costs = group_costs(problems, groups, device, options.search_space)
    for gpu, indices in enumerate(shard_problems(problems, groups, gpus, costs)):
        chosen = [problems[i] for i in indices]
        shard_origins = {p: (origins or {}).get(p) for p in chosen}
        args = (chosen, parts[gpu], device, shard_options, shard_origins, gpu == 0)
        procs.append(_start_on_gpu(ctx, gpu, args))
    for proc in procs:
        proc.join()
    merged = merge_parts(out, parts)
    log.info("%s", sharded_summary(merged, time.perf_counter() - started))
    failed = [i for i, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        log.warning("GPU workers %s exited with an error; their finished problems were kept", failed)
    return dataset.read(out)


def part_path(out: Path, gpu: int) -> Path:
    return out.with_name(f"{out.stem}.gpu{gpu}{out.suffix}")


def merge_parts(out: Path, parts: Sequence[Path]) -> list[tuple[int, int]]:
    """Append every existing part file to `out`, then remove the parts. Returns each part's
    (problems, rows), (0, 0) for a GPU that wrote none."""
    merged = []
    for part in parts:
        if not part.exists():
            merged.append((0, 0))
            continue
        rows = dataset.read(part)
        dataset.append(out, rows)
        part.unlink()
        merged.append((int(rows["problem_id"].nunique()), len(rows)))
    return merged


def sharded_summary(merged: Sequence[tuple[int, int]], wall_s: float) -> str:
    """The whole run's throughput, compile included: rows per minute of wall time on all GPUs,
    then per GPU-minute (what one GPU adds), then each GPU's share."""
    problems, rows = sum(p for p, _ in merged), sum(r for _, r in merged)
    per_minute = 60 * rows / max(wall_s, 1e-9)
    shares = ", ".join(f"GPU {i}: {p} problems, {r} rows" for i, (p, r) in enumerate(merged))
    return (f"{len(merged)} GPUs: {problems} problems, {rows} rows in {wall_s:.1f} s wall (compile "
            f"included): {per_minute:.0f} rows per minute, {per_minute / len(merged):.0f} per "
            f"GPU-minute ({shares})")


def _start_on_gpu(ctx, gpu: int, args: tuple) -> multiprocessing.process.BaseProcess:
    """Start a worker that sees only GPU `gpu` (CUDA_VISIBLE_DEVICES is read when CUDA starts,
    and a spawned child inherits the environment as it is when it starts)."""
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = previous.split(",") if previous else None
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[gpu] if visible else str(gpu)
    try:
        proc = ctx.Process(target=_shard_main, args=args, name=f"bench-gpu{gpu}")
        proc.start()
    finally:
        if previous is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous
    return proc


def _shard_main(problems: list[Problem], part: Path, device: DeviceSpec, options: BenchOptions,
                origins: Origins, show_progress: bool) -> None:
    logging.basicConfig(level=logging.INFO, format=f"[{os.environ.get('CUDA_VISIBLE_DEVICES')}] %(message)s")
    shard_options = BenchOptions(**{**options.__dict__, "progress": show_progress})
    run_bench(problems, part, device, shard_options, origins)
