"""Timing launches on the GPU with CUDA events, behind a GPU sleep, with a check that the sleep held.

A Python loop that records an event, launches a 6 us kernel and records another event measures the
launch overhead, not the kernel: the GPU waits on the host inside the timed interval. So each chunk
of launches is enqueued behind a GPU sleep (`torch.cuda._sleep`) sized from the host's measured
enqueue speed: while the GPU sleeps, the host queues the whole chunk, and the GPU then runs it
back to back.

The sizing is a prediction, and the host can stall (16 compile workers share its cores). If it
stalls long enough for the GPU to finish the sleep and the queued work, the backlog *drains*: the
GPU reaches a start event before the kernel behind it is queued and the interval includes the
stall. The committed H100 data has single samples of 0.2-5 ms for 6 us kernels, most likely from
this (data/README.md, "Timing quality"). So every chunk is checked after it ran, with an event
recorded before the sleep:

  * host: t0 is read before that event is queued, h_i after launch i's end event is queued;
  * GPU: g_i is the time from that event to launch i's start event (sleep + the work before i).

The GPU reaches the first event no earlier than t0, so it reaches start event i no earlier than
t0 + g_i, and launch i and its end event were queued by t0 + h_i. If h_i <= g_i for every launch,
none waited on the host inside its interval. Otherwise the chunk is timed again behind a longer
sleep (the old one plus DRAIN_GROWTH times the largest shortfall h_i - g_i, at most MAX_SLEEP_S),
up to DRAIN_RETRIES times; the counts go to `TimingStats`. The check is conservative: it may
re-time a chunk that did not drain (when h_i > g_i only by the few microseconds the GPU takes to
pick up the first event), never the other way round.
"""

from __future__ import annotations

import contextlib
import math
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from typing import Any

from kernel_select.device import DeviceSpec
from kernel_select.layouts import a_transposed, b_transposed, stored_shape
from kernel_select.offline.harness.bench_plan import KERNEL_OF_OP, CompileKey, PlannedRun
from kernel_select.problem import Problem
from kernel_select.tf32 import TF32_PRECISION

CHUNK = 64  # launches enqueued behind one GPU sleep
HOST_MARGIN = 1.3  # the sleep covers this multiple of the predicted host enqueue time...
GPU_TRUST = 0.8  # ...minus this share of the expected GPU time of the launches queued before
MIN_SLEEP_S = 2e-5
DRAIN_RETRIES = 3  # re-timings of one chunk whose backlog drained; then its last timing is kept
DRAIN_GROWTH = 2.0  # a re-timed chunk sleeps this many shortfalls longer than the last try
MAX_SLEEP_S = 0.05  # bounds the GPU time a retry may idle: host stalls are milliseconds, not more
SLEEP_CLOCK_HZ = 1.98e9  # the sleep spins for cycles; the max boost clock gives the shortest sleep
INITIAL_ENQUEUE_S = 80e-6  # host seconds to queue one launch with its flush, until measured

Item = tuple[object, Callable[[], None]]  # (id, launch): one timed run


@dataclass
class TimingStats:
    """What the timing of one problem (or a whole run) had to redo, for logs and provenance."""

    chunks: int = 0  # chunks of launches timed (first tries)
    chunks_retimed: int = 0  # chunks timed again (once or more) because their backlog drained
    chunks_unresolved: int = 0  # chunks still drained after DRAIN_RETRIES; their last timing is kept
    suspects: int = 0  # single samples re-timed for a second opinion (bench.SUSPECT_RATIO)
    suspects_lowered: int = 0  # ...whose second sample was less than half the first

    def add(self, other: TimingStats) -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def summary(self) -> str:
        return (f"{self.chunks_retimed} of {self.chunks} chunks re-timed after a drained backlog "
                f"({self.chunks_unresolved} still drained after {DRAIN_RETRIES} retries), "
                f"{self.suspects} implausible single samples re-timed ({self.suspects_lowered} lower)")


@dataclass
class _ChunkResult:
    times: dict[object, float] = field(default_factory=dict)  # id -> ms
    errors: dict[object, Any] = field(default_factory=dict)  # id -> error norm (a GPU scalar)
    failures: dict[object, BaseException] = field(default_factory=dict)
    shortfall_s: float = 0.0  # max(h_i - g_i): > 0 means the GPU may have waited inside an interval


def torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def kernel_of(key: CompileKey) -> Any:
    """The Triton kernel a key compiles: mm_kernel or bmm_kernel (imported here: triton loads
    only where kernels are compiled or launched)."""
    if key.kernel == "bmm":
        from kernel_select.offline.harness.bmm_kernel import bmm_kernel

        return bmm_kernel
    from kernel_select.offline.harness.mm_kernel import mm_kernel

    return mm_kernel


def constexprs(key: CompileKey) -> dict:
    """The compile-time arguments of `mm_kernel` for one compile key."""
    import triton.language as tl

    bm, bn, bk, _, _, group_m = key.config
    return dict(M_DIV=key.m_div, N_DIV=key.n_div, K_DIV=key.k_div, EVEN_K=key.even_k,
                ALLOW_TF32=key.allow_tf32, ACC_TYPE=tl.float32,
                A_T=a_transposed(key.layout), B_T=b_transposed(key.layout), A_HINT=key.a_hint,
                B_HINT=key.b_hint, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group_m,
                **dict(zip(("M_LIT", "N_LIT", "K_LIT"), key.sizes or (0, 0, 0))))


@contextlib.contextmanager
def fp32_matmul_precision(torch: Any, precision: str) -> Iterator[None]:
    """torch.backends.cuda.matmul.fp32_precision set to `precision` ("ieee" or "tf32") for a block,
    then restored: what cuBLAS and torch.matmul on float32 operands run with."""
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = precision
    try:
        yield
    finally:
        matmul.fp32_precision = previous


def operands(problem: Problem, device: str = "cuda", generator: Any = None) -> tuple[Any, Any]:
    """A[M, K] and B[K, N] for `problem` (for bmm / baddbmm A[batch, M, K] and B[batch, K, N]),
    each a view of a contiguous buffer stored as its layout says (a transposed operand is stored
    [K, M] resp. [N, K], per batch, and read through a transposed view, as W in x @ W.t() or k in
    q @ k.transpose(-2, -1)). Random values scaled so that outputs stay O(1) in every dtype; never
    zeros (they run faster). An mm problem draws the values it always drew."""
    import torch

    dtype = torch_dtype(problem.dtype)
    batched = KERNEL_OF_OP[problem.op] == "bmm"

    def operand(rows: int, cols: int, transposed: bool, scale: float) -> Any:
        stored = stored_shape(rows, cols, transposed)
        buffer = torch.randn(*((problem.batch,) if batched else ()), *stored, device=device,
                             generator=generator)
        buffer = (buffer / scale if scale != 1.0 else buffer).to(dtype)  # still contiguous
        return buffer.transpose(-2, -1) if transposed else buffer

    a = operand(problem.m, problem.k, a_transposed(problem.layout), 1.0)
    b = operand(problem.k, problem.n, b_transposed(problem.layout), math.sqrt(problem.k))
    return a, b


class ProblemTimer:
    """Times one problem's configs on the current CUDA device (see the module docstring)."""

    def __init__(self, problem: Problem, device: DeviceSpec, flush_bytes: int = 0):
        """`flush_bytes`: the buffer zeroed before every run to flush the L2; 0 = the device's L2 size."""
        import torch

        self.torch = torch
        self.problem = problem
        gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(str(problem).encode()))
        self.a, self.b = operands(problem, "cuda", gen)  # views in the problem's layout
        self.batched = KERNEL_OF_OP[problem.op] == "bmm"
        shape = (problem.batch, problem.m, problem.n) if self.batched else (problem.m, problem.n)
        self.c = torch.empty(*shape, device="cuda", dtype=torch_dtype(problem.dtype))
        # The reference is exact float32 whatever this process allows; cuBLAS runs a TF32 problem with
        # TF32, as it does in a program that allows it (the Triton kernels' ALLOW_TF32 is their key's).
        self.cublas_precision = TF32_PRECISION if problem.tf32 else "ieee"
        with fp32_matmul_precision(torch, "ieee"):
            self.ref = torch.matmul(self.a.float(), self.b.float())
        self.ref_norm = float(torch.linalg.vector_norm(self.ref))
        flush_bytes = flush_bytes or device.l2_bytes
        self.flush = torch.empty(flush_bytes // 4, dtype=torch.int32, device="cuda")
        self.clock = time.perf_counter  # the host clock that h_i is read from
        self.enqueue_s = INITIAL_ENQUEUE_S  # learned from every chunk
        self.stats = TimingStats()
        self.sleep_event = torch.cuda.Event(enable_timing=True)
        self.events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                       for _ in range(CHUNK)]

    def launch(self, run: PlannedRun) -> None:
        key, cfg, p = run.key, run.config, self.problem
        tiles = math.ceil(p.m / cfg.block_m) * math.ceil(p.n / cfg.block_n)
        grid = (tiles, p.batch, 1) if key.kernel == "bmm" else (tiles,)
        kernel_of(key)[grid](self.a, self.b, self.c, p.m // key.m_div, p.n // key.n_div, p.k // key.k_div,
                             num_warps=cfg.num_warps, num_stages=cfg.num_stages, **constexprs(key))

    def launch_cublas(self) -> None:
        # The same views: cuBLAS reads a transposed operand in place (a transpose flag, no copy).
        # Setting the precision costs about a microsecond of host time, queued behind the sleep.
        with fp32_matmul_precision(self.torch, self.cublas_precision):
            if self.batched:
                self.torch.bmm(self.a, self.b, out=self.c)
            else:
                self.torch.mm(self.a, self.b, out=self.c)

    def time_pass(self, items: list[Item], *, check: set | None = None,
                  gpu_ms: dict | None = None) -> dict[object, tuple[float, object]]:
        """One timed run of each item; returns id -> (ms, relative error, nan, or the exception).

        Items whose id is in `check` run into a NaN-poisoned output that is then compared with the
        fp32 reference. `gpu_ms` (expected GPU time per item) shortens the sleep: the backlog only
        has to cover the CPU's lead over the GPU. A chunk whose backlog drained is timed again
        (module docstring); `self.stats` counts both.
        """
        check = check or set()
        merged = _ChunkResult()
        for start in range(0, len(items), CHUNK):
            chunk = items[start:start + CHUNK]
            sleep_s = self._backlog_s(chunk, check, gpu_ms or {})
            result = self._time_chunk(chunk, check, sleep_s)
            self.stats.chunks += 1
            self.stats.chunks_retimed += result.shortfall_s > 0
            for _ in range(DRAIN_RETRIES):
                if result.shortfall_s <= 0:
                    break
                sleep_s = min(sleep_s + DRAIN_GROWTH * result.shortfall_s, MAX_SLEEP_S)
                result = self._time_chunk(chunk, check, sleep_s)
            self.stats.chunks_unresolved += result.shortfall_s > 0
            for name in ("times", "errors", "failures"):
                getattr(merged, name).update(getattr(result, name))
        out: dict[object, tuple[float, object]] = {}
        for ident, ms in merged.times.items():
            err = merged.errors.get(ident)
            out[ident] = (ms, float("nan") if err is None else float(err) / max(self.ref_norm, 1e-30))
        for ident, exc in merged.failures.items():
            out[ident] = (math.inf, exc)
        return out

    def _backlog_s(self, chunk: list[Item], check: set, gpu_ms: dict) -> float:
        """The sleep that lets the host queue launch i (and its end event) before the GPU reaches
        launch i's start event, for every i: the GPU time before i is the sleep plus the expected
        time of the launches before i, so the worst i decides."""
        need, host_s, gpu_s = MIN_SLEEP_S, 0.0, 0.0
        for ident, _ in chunk:
            host_s += self.enqueue_s * (3 if ident in check else 1)  # a check queues two more ops
            need = max(need, HOST_MARGIN * host_s - GPU_TRUST * gpu_s)
            gpu_s += gpu_ms.get(ident, 0.0) / 1e3
        return need

    def _time_chunk(self, chunk: list[Item], check: set, sleep_s: float) -> _ChunkResult:
        """Time `chunk` behind a sleep of `sleep_s`, and measure how far the host fell behind."""
        torch, result = self.torch, _ChunkResult()
        t0 = self.clock()
        self.sleep_event.record()
        torch.cuda._sleep(int(sleep_s * SLEEP_CLOCK_HZ))
        pending, ops = [], 0
        for slot, (ident, fn) in enumerate(chunk):
            if ident in check:
                self.c.fill_(float("nan"))  # poison: an unwritten element fails the check
                ops += 2
            self.flush.zero_()
            begin, end = self.events[slot]
            begin.record()
            try:
                fn()
            except Exception as exc:  # out of resources at load time, launch errors
                result.failures[ident] = exc
                continue
            end.record()
            pending.append((ident, begin, end, self.clock() - t0))
            if ident in check:
                result.errors[ident] = torch.linalg.vector_norm(self.c.float() - self.ref)
        spent = (self.clock() - t0) / max(len(chunk) + ops, 1)
        self.enqueue_s = 0.5 * self.enqueue_s + 0.5 * spent
        torch.cuda.synchronize()  # the event pool is reused by the next chunk
        for ident, begin, end, host_s in pending:
            result.times[ident] = begin.elapsed_time(end)
            gpu_s = self.sleep_event.elapsed_time(begin) / 1e3
            result.shortfall_s = max(result.shortfall_s, host_s - gpu_s)
        return result
