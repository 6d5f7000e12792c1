"""How `compare-models` times a step: the host's view (`step_ms`) and the GPU's (`step_device_ms`).

`CudaEventTimer` brackets back-to-back steps with CUDA events. For a step bound by kernel
launches (a small model, a decode step, or a CUDA-graph replay with its input copies) the GPU
spends much of that interval waiting for the host, so the time moves with the host: on the H100
two processes of the same method on the recsys tower measured 0.190 and 0.148 ms, and one
process's samples spread 22% (interquartile range over median). That is a real cost of the
step, but not one the GEMM choices make.

`DeviceTimeTimer` takes the GPU's view, as the dataset harness times kernels
(`offline/harness/timer.py`): a spin kernel is queued ahead of the start event, longer than the
host takes to enqueue the sample's steps, so the GPU runs them back to back and the interval holds
only their kernels. A sample is checked after it ran: if the host was still enqueueing when the
GPU reached the start event, it is timed again behind a longer spin (up to the harness's
DRAIN_RETRIES times), and counted in `uncovered` if it never was covered. The wall clock stands
in on a CPU; tests pass their own timer.

`host_reference` is a fixed piece of pure-Python work with no GPU work in it. Timed beside the
steps, it shows how fast the host itself ran while they were timed. On the H100 machine its
30 samples spread 7-50% (interquartile range over median) and its median moved 1.7x across 18
such sets in six processes, with no garbage collection, context switch or stolen time counted:
the spread that launch-bound step times inherit (docs/inductor.md, "fifth run").
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from kernel_select.offline.harness.timer import DRAIN_GROWTH, DRAIN_RETRIES, SLEEP_CLOCK_HZ

#: Calls of each step before its first sample (compiled code's lazy work, allocator growth).
WARMUP_STEPS = 3
#: Iterations of `host_reference`: about 0.2 ms of work on the H100 machine's host.
HOST_REFERENCE_ITERATIONS = 4000


class Timer(Protocol):
    def __call__(self, step: Callable[[], Any], repeats: int) -> float:
        """Milliseconds that `repeats` back-to-back calls of `step` take."""


class CudaEventTimer:
    """CUDA events around the steps as the host issues them: a launch-bound step includes host time."""

    def __init__(self) -> None:
        import torch

        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def __call__(self, step: Callable[[], Any], repeats: int) -> float:
        self._enqueue(step, repeats)
        return self._elapsed_ms()

    def _enqueue(self, step: Callable[[], Any], repeats: int) -> None:
        self._start.record()
        for _ in range(repeats):
            step()
        self._end.record()

    def _elapsed_ms(self) -> float:
        self._end.synchronize()
        return float(self._start.elapsed_time(self._end))


class DeviceTimeTimer(CudaEventTimer):
    """CUDA events around the steps with the GPU kept busy while the host enqueues them (module doc)."""

    #: The longest spin: a step that fills the launch queue blocks the host behind the spin, and
    #: a longer spin would only make it wait longer.
    MAX_SPIN_MS = 200.0

    def __init__(self, spin_ms: float = 1.0) -> None:
        super().__init__()
        import torch

        self._torch = torch
        self._spin_start = torch.cuda.Event(enable_timing=True)
        self.spin_ms = spin_ms
        self.uncovered = 0  # samples still uncovered after DRAIN_RETRIES longer spins

    def __call__(self, step: Callable[[], Any], repeats: int) -> float:
        for attempt in range(DRAIN_RETRIES + 1):
            started = time.perf_counter()
            self._spin(self.spin_ms)
            self._enqueue(step, repeats)
            host_ms = (time.perf_counter() - started) * 1e3
            elapsed = self._elapsed_ms()
            # The drain check of the harness's timer: the host queued the last step before the GPU
            # reached the start event, so no step waited on the host inside the interval.
            shortfall = host_ms - self._gpu_lead_ms()
            if shortfall <= 0:
                return elapsed
            self.spin_ms = min(self.MAX_SPIN_MS, self.spin_ms + DRAIN_GROWTH * shortfall)
        self.uncovered += 1
        return elapsed

    def _spin(self, ms: float) -> None:
        self._spin_start.record()
        self._torch.cuda._sleep(int(ms * 1e-3 * SLEEP_CLOCK_HZ))

    def _gpu_lead_ms(self) -> float:
        """GPU time from the spin's start to the start event: how long the host had to queue the steps."""
        return float(self._spin_start.elapsed_time(self._start))


def wall_clock_timer(step: Callable[[], Any], repeats: int) -> float:
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    return (time.perf_counter() - start) * 1e3


def host_reference() -> int:
    """The host's speed gauge (module docstring): the same pure-Python work on every call."""
    return sum(i * i for i in range(HOST_REFERENCE_ITERATIONS))


def interleaved_ms(steps: dict[str, Callable[[], Any]], timer: Timer, *, samples: int,
                   min_sample_ms: float) -> dict[str, list[float]]:
    """Per-step milliseconds of each step, `samples` samples each, taken in rounds (one sample of
    every step per round). A sample runs enough steps to last about `min_sample_ms`."""
    repeats = {}
    for name, step in steps.items():
        for _ in range(WARMUP_STEPS):
            step()
        once = timer(step, 1)
        repeats[name] = max(1, math.ceil(min_sample_ms / max(once, 1e-3)))
    per_step: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(samples):
        for name, step in steps.items():
            per_step[name].append(timer(step, repeats[name]) / repeats[name])
    return per_step


def relative_iqr(values: Sequence[float]) -> float | None:
    """Interquartile range over median: the within-run spread of a step's samples."""
    if len(values) < 4:
        return None
    q1, median, q3 = statistics.quantiles(values, n=4)
    return (q3 - q1) / median if median > 0 else None
