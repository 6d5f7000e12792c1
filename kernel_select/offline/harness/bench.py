"""GPU benchmark harness: time every (problem, config) pair of the pruned space with our
Inductor-equivalent Triton kernel, plus cuBLAS, and write parquet rows with provenance.

This module compiles keys (in worker processes, into Triton's on-disk cache) and times one problem;
the collection driver that overlaps the two is `kernel_select.offline.harness.pipeline`.

How a problem is timed (the way Inductor's benchmarker does it, minus its launch gaps):
  * timing only loads binaries compiled beforehand; a binary's first launch in the process is an
    untimed warm-up;
  * before every timed run the L2 cache is flushed by zeroing a buffer of the L2's size, and the
    run is bracketed by CUDA events;
  * each batch of launches starts behind a GPU sleep long enough for the CPU to enqueue the whole
    batch, so the GPU never waits on Python between the start event and the kernel (a plain
    event-timed Python loop measures launch overhead for small kernels, not the kernel);
  * pass 1 runs every config once into an output poisoned with NaN and checks it against an fp32
    torch.matmul reference (every config, every problem); pass 2 re-times the contenders (within
    CONTENDER_FACTOR of the problem's best, at least MIN_CONTENDERS of them) REPS more times.
    Configs far slower than the best keep their single pass-1 time and status "capped".
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
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


from kernel_select.offline.data import dataset
from kernel_select.offline.harness.bench_plan import CompileKey, PlannedRun, distinct_keys
from kernel_select.device import DeviceSpec
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

CONTENDER_FACTOR = 1.5
MIN_CONTENDERS = 24
REPS = 5
CHUNK = 64  # launches enqueued behind one GPU sleep
CHECKS_PER_KERNEL = 2  # every binary's output is checked on its first problems...
CHECK_FRACTION = 0.1  # ...and on this random fraction of the (problem, config) pairs after that
TIMING_METHOD = ("cuda-events; L2 flushed (zero_ of an L2-sized buffer) before every run; launches "
                 "queued behind a GPU sleep; pass 1 one run per config, pass 2 {reps} more runs for "
                 "configs within {factor}x of the best; runtime_ms = median, runtime_min_ms = min")
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


# -- compiling ----------------------------------------------------------------------------------

def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def _constexprs(key: CompileKey) -> dict:
    import triton.language as tl

    bm, bn, bk, _, _, group_m = key.config
    return dict(N_DIV=key.n_div, K_DIV=key.k_div, EVEN_K=key.even_k, ALLOW_TF32=key.allow_tf32,
                ACC_TYPE=tl.float32, A_HINT=key.a_hint, B_HINT=key.b_hint,
                BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m)


def error_class(exc: BaseException) -> str:
    """Map an exception from compiling or launching a config to a dataset status."""
    name = type(exc).__name__
    text = str(exc).lower()
    if name == "OutOfResources" or "out of resource" in text:
        return "out_of_resources"
    if name in ("CompilationError", "CompileTimeAssertionFailure", "PTXASError") or "ptxas" in text:
        return "compile_error"
    return "runtime_error"


def _compile_keys(keys: list[CompileKey]) -> list[tuple[CompileKey, str | None, str]]:
    """Worker: compile each key into Triton's disk cache. Runs in a spawned process."""
    from kernel_select.offline.harness.mm_kernel import mm_kernel

    out = []
    for key in keys:
        dtype = _torch_dtype(key.dtype)
        _, _, _, stages, warps, _ = key.config
        try:
            mm_kernel.warmup(dtype, dtype, dtype, 1, 1, 1, grid=(1,), num_warps=warps,
                             num_stages=stages, **_constexprs(key))
            out.append((key, None, ""))
        except Exception as exc:  # the failure is data: recorded as this key's status
            out.append((key, error_class(exc), f"{type(exc).__name__}: {str(exc)[:300]}"))
    return out


def distinct_keys_of(runs: Sequence[PlannedRun]) -> list[CompileKey]:
    return distinct_keys([list(runs)])


def precompile(keys: Sequence[CompileKey], workers: int = 0, progress: bool = True,
               batch: int = 6) -> dict[CompileKey, tuple[str | None, str]]:
    """Compile every key in parallel; returns key -> (error status or None, error text)."""
    import multiprocessing

    from tqdm import tqdm

    workers = workers or os.cpu_count() or 1
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


class ProblemTimer:
    """Times one problem's configs on the current CUDA device (see the module docstring)."""

    def __init__(self, problem: Problem, device: DeviceSpec, options: BenchOptions):
        import torch

        self.torch = torch
        self.problem = problem
        self.options = options
        dtype = _torch_dtype(problem.dtype)
        gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(str(problem).encode()))
        # Scaled so that outputs stay O(1) in every dtype; never zeros (they run faster).
        self.a = torch.randn(problem.m, problem.k, device="cuda", generator=gen).to(dtype)
        self.b = (torch.randn(problem.k, problem.n, device="cuda", generator=gen) / math.sqrt(problem.k)).to(dtype)
        self.c = torch.empty(problem.m, problem.n, device="cuda", dtype=dtype)
        self.ref = torch.matmul(self.a.float(), self.b.float())
        self.ref_norm = float(torch.linalg.vector_norm(self.ref))
        flush_bytes = options.flush_bytes or device.l2_bytes
        self.flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
        self.clock_hz = 1.98e9  # the sleep kernel spins for cycles; max boost clock = shortest sleep
        self.enqueue_s = 80e-6  # CPU seconds to enqueue one launch with its flush; learned below
        self.events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(CHUNK)]

    def launch(self, run: PlannedRun) -> None:
        from kernel_select.offline.harness.mm_kernel import mm_kernel

        key, cfg, p = run.key, run.config, self.problem
        grid = (math.ceil(p.m / cfg.block_m) * math.ceil(p.n / cfg.block_n),)
        mm_kernel[grid](self.a, self.b, self.c, p.m, p.n // key.n_div, p.k // key.k_div,
                        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **_constexprs(key))

    def launch_cublas(self) -> None:
        self.torch.mm(self.a, self.b, out=self.c)

    def time_pass(self, items: list[tuple[object, Callable[[], None]]], *, check: set | None = None,
                  gpu_ms: dict | None = None) -> dict[object, tuple[float, object]]:
        """One timed run of each item; returns id -> (ms, relative error, nan, or the exception).

        Items whose id is in `check` run into a NaN-poisoned output that is then compared with the
        fp32 reference. `gpu_ms` (expected GPU time per item) shortens the sleep: the backlog only
        has to cover the CPU's lead over the GPU.
        """
        torch = self.torch
        check = check or set()
        times, errors, failures = {}, {}, {}
        for start in range(0, len(items), CHUNK):
            chunk = items[start:start + CHUNK]
            n_checks = sum(1 for ident, _ in chunk if ident in check)
            cpu_s = self.enqueue_s * (len(chunk) + 2 * n_checks)
            gpu_s = sum(gpu_ms.get(ident, 0.0) for ident, _ in chunk) / 1e3 if gpu_ms else 0.0
            self.torch.cuda._sleep(int(max(1.3 * cpu_s - 0.8 * gpu_s, 2e-5) * self.clock_hz))
            t0 = time.perf_counter()
            pending = []
            for slot, (ident, fn) in enumerate(chunk):
                if ident in check:
                    self.c.fill_(float("nan"))  # poison: an unwritten element fails the check
                self.flush.zero_()
                begin, end = self.events[slot]
                begin.record()
                try:
                    fn()
                except Exception as exc:  # out of resources at load time, launch errors
                    failures[ident] = exc
                    continue
                end.record()
                pending.append((ident, begin, end))
                if ident in check:
                    errors[ident] = torch.linalg.vector_norm(self.c.float() - self.ref)
            spent = (time.perf_counter() - t0) / (len(chunk) + 2 * n_checks)
            self.enqueue_s = 0.5 * self.enqueue_s + 0.5 * spent
            torch.cuda.synchronize()  # the event pool is reused by the next chunk
            for ident, begin, end in pending:
                times[ident] = begin.elapsed_time(end)
        out: dict[object, tuple[float, object]] = {}
        for ident, ms in times.items():
            err = float(errors[ident]) / max(self.ref_norm, 1e-30) if ident in errors else float("nan")
            out[ident] = (ms, err)
        for ident, exc in failures.items():
            out[ident] = (math.inf, exc)
        return out


def time_problem(runs: list[PlannedRun], compiled: dict[CompileKey, tuple[str | None, str]],
                 device: DeviceSpec, options: BenchOptions,
                 checked: dict[CompileKey, int] | None = None,
                 loaded: set[CompileKey] | None = None) -> tuple[dict[int, _Timed], _Timed]:
    """Time all `runs` of one problem; returns per-run results (by index) and the cuBLAS result.

    `checked` counts correctness checks per binary across problems, `loaded` the binaries this
    process has already launched (both updated here): only new binaries get an untimed warm-up.
    """
    import random

    problem = runs[0].problem
    timer = ProblemTimer(problem, device, options)
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
    contenders = _retime_contenders(items, first, results, cublas, timer, options)
    log.debug("%s: pass 1 %.2f s (%d checked), pass 2 %.2f s (%d contenders x %d)", problem,
              t1 - t0, len(to_check), time.perf_counter() - t1, len(contenders), options.reps)
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


def _retime_contenders(items: list, first: dict, results: dict[int, _Timed], cublas: _Timed,
                       timer: ProblemTimer, options: BenchOptions) -> set[int]:
    """Pass 2: re-time the fastest configs (and cuBLAS) `options.reps` times; the others keep
    their single pass-1 sample and are marked `capped`. Returns the contenders."""
    ok = {i: t.samples[0] for i, t in results.items() if t.status == "ok" and t.samples}
    best = min(ok.values(), default=math.inf)
    ranked = sorted(ok, key=ok.get)
    contenders = set(ranked[:MIN_CONTENDERS]) | {i for i, ms in ok.items() if ms <= options.contender_factor * best}
    again = [(i, fn) for i, fn in items if i in contenders] + [("aten", timer.launch_cublas)]
    expected = {i: first[i][0] for i, _ in again if math.isfinite(first.get(i, (math.inf,))[0])}
    for _ in range(options.reps):
        for ident, (ms, _err) in timer.time_pass(again, gpu_ms=expected).items():
            (cublas if ident == "aten" else results[ident]).samples.append(ms)
    for i in ok:
        if i not in contenders:
            results[i].status = "capped"
    return contenders


# -- rows, provenance, driver --------------------------------------------------------------------

def provenance(git_sha: str = "") -> dict:
    import torch
    import triton

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"device_name": props.name, "sm_count": props.multi_processor_count,
            "torch_version": torch.__version__, "triton_version": triton.__version__,
            "git_sha": git_sha or _git_sha()}


def _git_sha() -> str:
    sha = os.environ.get("KERNEL_SELECT_GIT_SHA")
    if sha:
        return sha
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True, cwd=Path(__file__).parent).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if len(s) % 2 else 0.5 * (s[len(s) // 2 - 1] + s[len(s) // 2])


def rows_for(runs: list[PlannedRun], results: dict[int, _Timed], cublas: _Timed, prov: dict,
             options: BenchOptions, origin: dict | None = None) -> list[dict]:
    """Dataset rows of one timed problem; `origin` holds its family / layer / pass columns."""
    problem = runs[0].problem
    pid = dataset.problem_id(problem.m, problem.n, problem.k, problem.dtype, problem.op, problem.batch)
    base = dict(problem_id=pid, **(origin or dataset.OPTIONAL_DEFAULTS), m=problem.m, n=problem.n, k=problem.k, batch=problem.batch,
                dtype=problem.dtype, op=problem.op, layout="nn", split=dataset.split_of(pid),
                timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                timing_method=TIMING_METHOD.format(reps=options.reps, factor=options.contender_factor),
                **prov)
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
    rows.append(row("aten", (0, 0, 0, 0, 0, 0), False, runs[0].key.allow_tf32, cublas))
    return rows
