"""GPU benchmark harness: time every (problem, config) pair of the pruned space with our
Inductor-equivalent Triton kernel, plus cuBLAS, and write parquet rows with provenance. A problem
is timed in one operand layout (kernel_select.layouts; "nn" unless its shapes-file entry says
otherwise): the Triton kernel and cuBLAS read the same views.

This module compiles keys (in worker processes, into Triton's on-disk cache) and times one problem;
the collection driver that overlaps the two is `kernel_select.offline.harness.pipeline`.

How a problem is timed (the way Inductor's benchmarker does it, minus its launch gaps):
  * timing only loads binaries compiled beforehand; a binary's first launch in the process is an
    untimed warm-up;
  * before every timed run the L2 cache is flushed by zeroing a buffer of the L2's size, and the
    run is bracketed by CUDA events;
  * each batch of launches starts behind a GPU sleep long enough for the CPU to enqueue the whole
    batch, so the GPU never waits on Python between the start event and the kernel (a plain
    event-timed Python loop measures launch overhead for small kernels, not the kernel); after the
    batch ran, events show whether the host fell behind the GPU anyway (a stalled host drains the
    backlog), and such a batch is timed again behind a longer sleep (`timer.py`);
  * pass 1 runs every config once into an output poisoned with NaN and checks it against an fp32
    torch.matmul reference (every binary on its first problems, a fraction after that); a
    single sample more than SUSPECT_RATIO times the fastest of the configs with its output tile
    is timed once more and keeps the smaller sample (a stall only adds time); pass 2 re-times
    the contenders (within CONTENDER_FACTOR of the problem's best, at least MIN_CONTENDERS of
    them) REPS more times. Configs far slower than the best keep their single pass-1 time and
    status "capped".
  * a config that fails to compile or to load (out of shared memory / registers) becomes a row
    with infinite runtime and its error class; it never stops the run.
"""

from __future__ import annotations

import logging
import math
import os
import subprocess
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


from kernel_select.offline.data import dataset, problem_ids, splits
from kernel_select.offline.data.audit import LITERAL_SIZES, SUSPECT_RATIO
from kernel_select.offline.harness.bench_plan import CompileKey, PlannedRun, distinct_keys
from kernel_select.offline.harness.timer import ProblemTimer, TimingStats, constexprs, kernel_of, torch_dtype
from kernel_select.device import DeviceSpec

log = logging.getLogger(__name__)

CONTENDER_FACTOR = 1.5
MIN_CONTENDERS = 24
REPS = 5
CHECKS_PER_KERNEL = 2  # every binary's output is checked on its first problems...
CHECK_FRACTION = 0.1  # ...and on this random fraction of the (problem, config) pairs after that
TIMING_METHOD = ("cuda-events; L2 flushed (zero_ of an L2-sized buffer) before every run; launches "
                 "queued behind a GPU sleep, a chunk re-timed when events show its backlog drained; "
                 "pass 1 one run per config, a second run for single samples > {suspect:g}x the fastest "
                 "of their tile (the smaller kept); pass 2 {reps} more runs for configs within "
                 "{factor}x of the best; runtime_ms = median, runtime_min_ms = min")
# Relative Frobenius error vs an fp32 reference above which an output is called wrong.
TOLERANCE = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 1e-4}
TOLERANCE_TF32 = 5e-3


@dataclass
class BenchOptions:
    search_space: str = "exhaustive"
    workers: int = 0  # compile processes; 0 = one per CPU core
    reps: int = REPS
    contender_factor: float = CONTENDER_FACTOR
    git_sha: str = ""
    progress: bool = True
    flush_bytes: int = 0  # 0 = the device's L2 size
    max_seconds: float = 0.0  # wall-time bound, compile included (stops between problems); 0 = none
    order: str = "reuse"  # "reuse": problems sharing compile keys together (bench_plan.reuse_order); "file"
    literal_sizes: bool = False  # one binary per shape with M, N, K compiled in, as Inductor has them


# -- compiling ----------------------------------------------------------------------------------

def error_class(exc: BaseException) -> str:
    """Map an exception from compiling or launching a config to a dataset status."""
    name = type(exc).__name__
    text = str(exc).lower()
    if name == "OutOfResources" or "out of resource" in text:
        return "out_of_resources"
    if name in ("CompilationError", "CompileTimeAssertionFailure", "PTXASError") or "ptxas" in text:
        return "compile_error"
    return "runtime_error"


class CompiledBatch(list):
    """A compile task's (key, error status or None, error text) triples, with the seconds each key
    took in its worker (`seconds`, in the same order; one worker process per core, so these are the
    core-seconds harness/cost.py's COMPILE_CORE_S estimates). Pickles with them, being a list."""

    seconds: list[float]


def _compile_keys(keys: list[CompileKey]) -> CompiledBatch:
    """Worker: compile each key into Triton's disk cache, timing each. Runs in a spawned process."""
    out, seconds = CompiledBatch(), []
    for key in keys:
        dtype = torch_dtype(key.dtype)
        _, _, _, stages, warps, _ = key.config
        started = time.perf_counter()
        try:
            kernel_of(key).warmup(dtype, dtype, dtype, 1, 1, 1, grid=(1,), num_warps=warps,
                                  num_stages=stages, **constexprs(key))
            out.append((key, None, ""))
        except Exception as exc:  # the failure is data: recorded as this key's status
            out.append((key, error_class(exc), f"{type(exc).__name__}: {str(exc)[:300]}"))
        seconds.append(time.perf_counter() - started)
    out.seconds = seconds
    return out


def distinct_keys_of(runs: Sequence[PlannedRun]) -> list[CompileKey]:
    return distinct_keys([list(runs)])


def compile_workers(reserved: int = 0) -> int:
    """Compile workers for this host: the cores this process may run on, less `reserved` for timing
    processes. The CPU affinity, not os.cpu_count(): under taskset or a container's cpuset the machine
    has more cores than the process gets, and a pool sized by the machine oversubscribes them."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, cores - reserved)


def precompile(keys: Sequence[CompileKey], workers: int = 0, progress: bool = True,
               batch: int = 6) -> dict[CompileKey, tuple[str | None, str]]:
    """Compile every key in parallel; returns key -> (error status or None, error text)."""
    import multiprocessing

    from tqdm import tqdm

    workers = workers or compile_workers()
    batches = [list(keys[i:i + batch]) for i in range(0, len(keys), batch)]
    results: dict[CompileKey, tuple[str | None, str]] = {}
    started = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool, \
            tqdm(total=len(keys), desc="compile", unit="kernel", disable=not progress) as bar:
        futures = [pool.submit(_compile_keys, b) for b in batches]
        for future in as_completed(futures):
            for key, status, text in future.result():
                results[key] = (status, text)
            bar.update(len(future.result()))
    elapsed = time.perf_counter() - started
    failed = sum(1 for s, _ in results.values() if s)
    log.info("compiled %d kernels in %.1f s with %d workers (%.2f core-s each), %d failed",
             len(keys), elapsed, workers, elapsed * workers / max(len(keys), 1), failed)
    return results


# -- timing -------------------------------------------------------------------------------------

@dataclass
class _Timed:
    samples: list[float] = field(default_factory=list)
    status: str = "ok"
    error: str = ""


def time_problem(runs: list[PlannedRun], compiled: dict[CompileKey, tuple[str | None, str]],
                 device: DeviceSpec, options: BenchOptions,
                 checked: dict[CompileKey, int] | None = None,
                 loaded: set[CompileKey] | None = None,
                 stats: TimingStats | None = None) -> tuple[dict[int, _Timed], _Timed]:
    """Time all `runs` of one problem; returns per-run results (by index) and the cuBLAS result.

    `checked` counts correctness checks per binary across problems, `loaded` the binaries this
    process has already launched (both updated here): only new binaries get an untimed warm-up.
    `stats` (updated here) counts re-timed chunks and second opinions.
    """
    import random

    problem = runs[0].problem
    timer = ProblemTimer(problem, device, options.flush_bytes)
    checked = {} if checked is None else checked
    rng = random.Random(zlib.crc32(str(problem).encode()))
    results = {i: _Timed() for i in range(len(runs))}
    items = []
    for i, run in enumerate(runs):
        status, text = compiled.get(run.key, (None, ""))
        if status:
            results[i].status, results[i].error = status, text
        else:
            items.append((i, (lambda r=run: timer.launch(r))))
    items.append(("aten", timer.launch_cublas))
    cublas = _Timed()
    _warm_up(items, runs, set() if loaded is None else loaded)
    timer.torch.cuda.synchronize()

    tol = TOLERANCE_TF32 if runs[0].key.allow_tf32 else TOLERANCE[problem.dtype]
    to_check = _choose_checks(items, runs, checked, rng)
    t0 = time.perf_counter()
    first = timer.time_pass(items, check=to_check)
    t1 = time.perf_counter()
    _record_first_pass(first, results, cublas, to_check, tol)
    _second_opinion(items, runs, results, timer)
    contenders = _retime_contenders(items, results, cublas, timer, options)
    log.debug("%s: pass 1 %.2f s (%d checked), pass 2 %.2f s (%d contenders x %d); %s", problem,
              t1 - t0, len(to_check), time.perf_counter() - t1, len(contenders), options.reps,
              timer.stats.summary())
    if stats is not None:
        stats.add(timer.stats)
    return results, cublas


def _warm_up(items: list, runs: list[PlannedRun], loaded: set[CompileKey]) -> None:
    """Untimed launch of binaries not launched yet: loads their modules so pass 1 does not time
    first-launch costs. Binaries reused from earlier problems are already loaded."""
    for ident, fn in items:
        if ident != "aten" and runs[ident].key in loaded:
            continue
        try:
            fn()
        except Exception:  # noqa: BLE001 -- a failing binary is classified by the timed pass
            pass
        if ident != "aten":
            loaded.add(runs[ident].key)


def _choose_checks(items: list, runs: list[PlannedRun], checked: dict[CompileKey, int], rng: Any) -> set:
    """Which launches pass 1 checks for correctness: cuBLAS, every binary's first few problems,
    and a random fraction of the rest."""
    to_check: set = {"aten"}
    for ident, _ in items:
        if ident == "aten":
            continue
        key = runs[ident].key
        if checked.get(key, 0) < CHECKS_PER_KERNEL or rng.random() < CHECK_FRACTION:
            to_check.add(ident)
            checked[key] = checked.get(key, 0) + 1
    return to_check


def _record_first_pass(first: dict, results: dict[int, _Timed], cublas: _Timed, to_check: set,
                       tol: float) -> None:
    for ident, (ms, err) in first.items():
        slot = cublas if ident == "aten" else results[ident]
        if isinstance(err, BaseException):
            slot.status, slot.error = error_class(err), f"{type(err).__name__}: {str(err)[:300]}"
        elif ident in to_check and not (err <= tol):  # also catches NaN
            slot.status, slot.error = "incorrect", f"relative error {err:.3g} > {tol:g}"
            slot.samples.append(ms)
        else:
            slot.samples.append(ms)


def _second_opinion(items: list, runs: list[PlannedRun], results: dict[int, _Timed],
                    timer: ProblemTimer) -> None:
    """Time once more every config whose single pass-1 sample is more than SUSPECT_RATIO times the
    fastest pass-1 sample of the configs sharing its (block_m, block_n), and keep the smaller of
    the two: a host stall inside a timed interval only ever adds time (see `audit.py`)."""
    first = {i: t.samples[0] for i, t in results.items() if t.status == "ok" and t.samples}
    fastest: dict[tuple[int, int], float] = {}
    for i, ms in first.items():
        tile = (runs[i].config.block_m, runs[i].config.block_n)
        fastest[tile] = min(fastest.get(tile, math.inf), ms)
    suspects = {i for i, ms in first.items()
                if ms > SUSPECT_RATIO * fastest[(runs[i].config.block_m, runs[i].config.block_n)]}
    if not suspects:
        return
    for i, (ms, err) in timer.time_pass([(i, fn) for i, fn in items if i in suspects]).items():
        if isinstance(err, BaseException) or not math.isfinite(ms):
            continue  # it ran in pass 1: a failure now says nothing about that sample
        timer.stats.suspects_lowered += ms < 0.5 * first[i]
        results[i].samples[0] = min(first[i], ms)
    timer.stats.suspects += len(suspects)


def _retime_contenders(items: list, results: dict[int, _Timed], cublas: _Timed,
                       timer: ProblemTimer, options: BenchOptions) -> set[int]:
    """Pass 2: re-time the fastest configs (and cuBLAS) `options.reps` times; the others keep
    their single pass-1 sample and are marked `capped`. Returns the contenders."""
    ok = {i: t.samples[0] for i, t in results.items() if t.status == "ok" and t.samples}
    best = min(ok.values(), default=math.inf)
    ranked = sorted(ok, key=ok.get)
    near_best = {i for i, ms in ok.items() if ms <= options.contender_factor * best}
    contenders = set(ranked[:MIN_CONTENDERS]) | near_best
    again = [(i, fn) for i, fn in items if i in contenders] + [("aten", timer.launch_cublas)]
    expected = {i: ms for i, ms in ok.items() if i in contenders}
    if cublas.samples and math.isfinite(cublas.samples[0]):
        expected["aten"] = cublas.samples[0]
    for _ in range(options.reps):
        for ident, (ms, _err) in timer.time_pass(again, gpu_ms=expected).items():
            (cublas if ident == "aten" else results[ident]).samples.append(ms)
    for i in ok:
        if i not in contenders:
            results[i].status = "capped"
    return contenders


# -- rows, provenance, driver --------------------------------------------------------------------

def provenance(git_sha: str = "", device_index: int | None = None) -> dict:
    """The provenance columns of every row this process times: the GPU (its name, SM count and
    index on the host, by default the current CUDA device's index), the torch and triton
    versions and the commit."""
    import torch
    import triton

    index = torch.cuda.current_device() if device_index is None else device_index
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"device_name": props.name, "sm_count": props.multi_processor_count,
            "torch_version": torch.__version__, "triton_version": triton.__version__,
            "git_sha": git_sha or _git_sha(), "device_index": int(index)}


def _git_sha(here: Path | None = None) -> str:
    """The commit the harness runs from (`here`: this file's checkout), "-dirty" when tracked files
    differ from it (a copy of a working tree whose .git lags its files would otherwise stamp rows
    with an older commit)."""
    sha = os.environ.get("KERNEL_SELECT_GIT_SHA")
    if sha:
        return sha
    here = here or Path(__file__).parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=here).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, check=True, cwd=here).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}-dirty" if changed else head


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])


def rows_for(runs: list[PlannedRun], results: dict[int, _Timed], cublas: _Timed, prov: dict,
             options: BenchOptions, origin: dict | None = None,
             stats: TimingStats | None = None) -> list[dict]:
    """Dataset rows of one timed problem; `origin` holds its family / layer / pass columns and
    `stats` (this problem's re-timings) is appended to the `timing_method` text."""
    problem = runs[0].problem
    pid = problem_ids.id_of(problem)
    method = TIMING_METHOD.format(reps=options.reps, factor=options.contender_factor, suspect=SUSPECT_RATIO)
    if options.literal_sizes:
        method += f"; {LITERAL_SIZES} (one binary per shape, as Inductor's template)"
    if stats is not None:
        method += f"; this problem: {stats.summary()}"
    stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
    origin = {c: (origin or {}).get(c, dataset.OPTIONAL_DEFAULTS[c]) for c in dataset.ORIGIN_COLUMNS}
    base = dict(problem_id=pid, **origin, m=problem.m, n=problem.n,
                k=problem.k, batch=problem.batch, dtype=problem.dtype, op=problem.op, layout=problem.layout,
                split=splits.split_of(pid), timestamp=stamp, timing_method=method, **prov)
    rows = []

    def row(backend: str, cfg: tuple[int, ...], even_k: bool, tf32: bool, timed: _Timed) -> dict:
        finite = [s for s in timed.samples if math.isfinite(s)]
        failed = timed.status not in ("ok", "capped") or not finite
        return dict(base, backend=backend, **dict(zip(dataset.CONFIG_COLUMNS, cfg)), even_k=even_k,
                    allow_tf32=tf32,
                    runtime_ms=math.inf if failed else _median(finite),
                    runtime_min_ms=math.inf if failed else min(finite),
                    n_runs=len(finite), status=timed.status, error=timed.error)

    for i, run in enumerate(runs):
        rows.append(row("triton", run.config.key, run.key.even_k, run.key.allow_tf32, results[i]))
    rows.append(row("aten", (0, 0, 0, 0, 0, 0), False, problem.tf32, cublas))  # cuBLAS ran as TF32 too
    return rows
