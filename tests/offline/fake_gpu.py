"""Fakes of the timing harness on CPU: a simulated host and GPU stream for the timer's drain check,
and a host of fake GPUs (compile function, ready queue, timers, a clock per thread) for the
scheduling of `bench --gpus N`.

The stream's host clock advances by a fixed cost per enqueued operation (and by scripted stalls); the GPU
runs operations in order, each starting when it is queued and the previous one is done. Events
take the GPU time at which the stream reaches them, so a kernel whose start event was reached
before the host queued the kernel measures the wait too, as on a real GPU.
"""

from __future__ import annotations

import queue
import threading
import time
import types
from collections import Counter
from collections.abc import Callable
from typing import Any

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


class ThreadClocks:
    """A monotonic clock per thread that moves only when a fake charges it time. Installed as the
    `time` of harness.sharding (monotonic() from it, perf_counter() the real one), it makes each GPU's
    busy and wait seconds the sums of what the fakes charged that GPU's thread: counts, the same on a
    loaded machine as on an idle one."""

    def __init__(self) -> None:
        self._now = threading.local()

    def monotonic(self) -> float:
        return getattr(self._now, "seconds", 0.0)

    def advance(self, seconds: float) -> None:
        self._now.seconds = self.monotonic() + seconds

    @staticmethod
    def perf_counter() -> float:
        return time.perf_counter()


class ReadyQueue(queue.Queue):
    """The ready queue of a host of fake GPUs. It counts, per timing thread, the times it asked for a
    problem and found none ready (`found_empty`), charges each such wait `wait_s` on that thread's
    clock, and lets a fake or a test wait until the queue is in a given state (`until`)."""

    def __init__(self, clock: ThreadClocks, wait_s: float = 0.0):
        super().__init__()
        self.clock, self.wait_s = clock, wait_s
        self.changed = threading.Condition(self.mutex)
        self.waiting = 0  # threads now in get() that found the queue empty
        self.puts = 0
        self.found_empty: Counter[str] = Counter()  # thread name -> gets that found nothing ready

    def _put(self, item: Any) -> None:  # queue.Queue calls it with the mutex held
        super()._put(item)
        self.puts += 1
        self.changed.notify_all()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        with self.mutex:
            empty = not self._qsize()
            if empty:
                self.waiting += 1
                self.found_empty[threading.current_thread().name] += 1
                self.changed.notify_all()
        if empty:
            self.clock.advance(self.wait_s)
        try:
            return super().get(block, timeout)
        finally:
            if empty:
                with self.mutex:
                    self.waiting -= 1

    def until(self, state: Callable[[ReadyQueue], bool], timeout_s: float = 30.0) -> None:
        """Return once `state(self)` holds; a TimeoutError after `timeout_s` (a stuck run fails, never
        hangs)."""
        with self.changed:
            if not self.changed.wait_for(lambda: state(self), timeout_s):
                raise TimeoutError(f"the ready queue did not reach the awaited state in {timeout_s} s "
                                   f"({self.puts} puts, {self.waiting} threads waiting)")


class FakeGpuTimer:
    """Stands in for `bench.time_problem` on a host of fake GPUs: "times" a problem by charging the
    timing thread `seconds_per_row` per row on `clock`, and returns one sample per config (its index,
    in ms). It records which problems were started and the seconds charged to each thread (`busy`),
    and refuses a problem whose keys are not all compiled (`compiled_at`: the keys compiled so far).
    With `lockstep` (a barrier of one party per GPU) every GPU times one problem per round, so which
    GPU times how many problems does not depend on how threads are scheduled."""

    def __init__(self, compiled_at: dict, clock: ThreadClocks, seconds_per_row: float = 2e-5,
                 lockstep: threading.Barrier | None = None):
        self.compiled_at = compiled_at
        self.clock = clock
        self.seconds_per_row = seconds_per_row
        self.lockstep = lockstep
        self.lock = threading.Lock()
        self.started: list[str] = []  # the problems, in the order the GPUs started them
        self.busy: Counter[str] = Counter()  # thread name -> seconds charged

    def __call__(self, runs, compiled, device, options, checked, loaded, stats):
        from kernel_select.offline.harness.bench import _Timed

        with self.lock:
            late = [r.key for r in runs if r.key not in self.compiled_at]
            assert not late, f"{runs[0].problem}: timed before {len(late)} of its keys were compiled"
            assert set(compiled) >= {r.key for r in runs}
            self.started.append(str(runs[0].problem))
        if self.lockstep is not None:
            self.lockstep.wait(timeout=30)
        seconds = self.seconds_per_row * (len(runs) + 1)
        self.clock.advance(seconds)
        with self.lock:
            self.busy[threading.current_thread().name] += seconds
        stats.chunks += 1
        return {i: _Timed(samples=[float(i + 1)]) for i in range(len(runs))}, _Timed(samples=[0.5])


class FakeCompiler:
    """A compile function for `pipeline.CompilePipeline` on a thread pool: sleeps per key, counts
    how often each key is compiled and notes when it finished. `gate`, if given, is called before a
    batch counts as compiled (a test holds compiles back with it)."""

    def __init__(self, seconds_per_key: float = 1e-4, gate: Callable[[], None] | None = None):
        self.seconds_per_key = seconds_per_key
        self.gate = gate
        self.counts: Counter = Counter()
        self.compiled_at: dict = {}
        self.lock = threading.Lock()

    def __call__(self, keys):
        time.sleep(self.seconds_per_key * len(keys))
        if self.gate is not None:
            self.gate()
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

    def seconds_line(self):
        return ""

    def close(self):
        pass
