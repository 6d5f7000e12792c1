"""A simulated host and GPU stream for the timer's drain check on CPU.

The host clock advances by a fixed cost per enqueued operation (and by scripted stalls); the GPU
runs operations in order, each starting when it is queued and the previous one is done. Events
take the GPU time at which the stream reaches them, so a kernel whose start event was reached
before the host queued the kernel measures the wait too, as on a real GPU.
"""

from __future__ import annotations

import types
from collections.abc import Callable

from kernel_select.offline.harness import timer as timer_module


class FakeStream:
    def __init__(self, enqueue_s: float = 10e-6):
        self.host_s = 0.0  # host clock
        self.gpu_free_s = 0.0  # when the GPU has finished everything queued so far
        self.enqueue_s = enqueue_s

    def clock(self) -> float:
        return self.host_s

    def op(self, duration_s: float) -> float:
        """Queue a GPU operation now; returns the GPU time it starts."""
        self.host_s += self.enqueue_s
        start = max(self.host_s, self.gpu_free_s)
        self.gpu_free_s = start + duration_s
        return start

    def synchronize(self) -> None:
        self.host_s = max(self.host_s, self.gpu_free_s)


class FakeEvent:
    def __init__(self, stream: FakeStream):
        self.stream, self.at_s = stream, None

    def record(self) -> None:
        self.at_s = self.stream.op(0.0)

    def elapsed_time(self, other: FakeEvent) -> float:
        return (other.at_s - self.at_s) * 1e3


class FakeBuffer:
    """A flush buffer or output: zeroing / filling it is a short GPU operation."""

    def __init__(self, stream: FakeStream, duration_s: float = 2e-6):
        self.stream, self.duration_s = stream, duration_s

    def zero_(self) -> None:
        self.stream.op(self.duration_s)

    fill_ = zero_


def fake_timer(stream: FakeStream) -> timer_module.ProblemTimer:
    """A ProblemTimer whose torch, buffers and host clock are the simulation's."""
    cuda = types.SimpleNamespace(
        _sleep=lambda cycles: stream.op(cycles / timer_module.SLEEP_CLOCK_HZ),
        synchronize=stream.synchronize)
    timer = object.__new__(timer_module.ProblemTimer)  # skips the CUDA buffers of __init__
    timer.torch = types.SimpleNamespace(cuda=cuda)
    timer.clock, timer.enqueue_s, timer.ref_norm = stream.clock, timer_module.INITIAL_ENQUEUE_S, 1.0
    timer.flush, timer.c = FakeBuffer(stream), FakeBuffer(stream)
    timer.stats = timer_module.TimingStats()
    timer.sleep_event = FakeEvent(stream)
    timer.events = [(FakeEvent(stream), FakeEvent(stream)) for _ in range(timer_module.CHUNK)]
    return timer


def kernel(stream: FakeStream, duration_s: float, stalls_s: list[float] | None = None) -> Callable[[], None]:
    """A launch of `duration_s` on the GPU; each call first pops a host stall from `stalls_s`
    (the host stalls between the start event and the launch, as a preempted Python thread can)."""
    def launch() -> None:
        if stalls_s:
            stream.host_s += stalls_s.pop(0)
        stream.op(duration_s)
    return launch


class FakeGpuTimer:
    """Stands in for `bench.time_problem` on a host of fake GPUs: "times" a problem by sleeping
    `seconds_per_row` per row and returns one sample per config (its index, in ms). It records
    which thread timed which problem and when, and refuses a problem whose keys are not all
    compiled (`compiled_at`: key -> monotonic time its compile finished)."""

    def __init__(self, compiled_at: dict, seconds_per_row: float = 2e-5):
        import threading

        self.compiled_at = compiled_at
        self.seconds_per_row = seconds_per_row
        self.lock = threading.Lock()
        self.started: list[tuple[str, float]] = []  # (problem, monotonic start)

    def __call__(self, runs, compiled, device, options, checked, loaded, stats):
        import time

        from kernel_select.offline.harness.bench import _Timed

        start = time.monotonic()
        with self.lock:
            late = [r.key for r in runs if self.compiled_at.get(r.key, float("inf")) > start]
            assert not late, f"{runs[0].problem}: timed before {len(late)} of its keys were compiled"
            assert set(compiled) >= {r.key for r in runs}
            self.started.append((str(runs[0].problem), start))
        time.sleep(self.seconds_per_row * (len(runs) + 1))
        stats.chunks += 1
        return {i: _Timed(samples=[float(i + 1)]) for i in range(len(runs))}, _Timed(samples=[0.5])


class FakeCompiler:
    """A compile function for `pipeline.CompilePipeline` on a thread pool: sleeps per key, counts
    how often each key is compiled and notes when it finished."""

    def __init__(self, seconds_per_key: float = 1e-4):
        import threading
        from collections import Counter

        self.seconds_per_key = seconds_per_key
        self.counts: Counter = Counter()
        self.compiled_at: dict = {}
        self.lock = threading.Lock()

    def __call__(self, keys):
        import time

        time.sleep(self.seconds_per_key * len(keys))
        with self.lock:
            for key in keys:
                self.counts[key] += 1
                self.compiled_at[key] = time.monotonic()
        return [(key, None, "") for key in keys]


class NoCompilePipeline:
    """Stands in for `pipeline.CompilePipeline` where a test fakes the timing: nothing compiles, every
    key is ready at once."""

    compiled = 0

    def __init__(self, workers):
        pass

    def submit(self, keys):
        pass

    def wait(self, keys, timeout_s):
        return {}

    def close(self):
        pass
