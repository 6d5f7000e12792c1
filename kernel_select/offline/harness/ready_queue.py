"""Hands problems to the GPUs of a host the moment their kernels are compiled.

The compile pool works through the keys in plan order (problems sharing compile keys together,
`bench_plan.reuse_order`). A dispatcher thread follows the pool's finished batches and puts each
problem on one shared queue as soon as its last key is done, in plan order among those that
became ready together; a timing process per GPU takes the next item whenever it is free. So a GPU
never idles while a problem it could time is ready, and no problem waits for a GPU while another
is idle. Each key is compiled once, into Triton's on-disk cache that every process of the host
reads.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from kernel_select.offline.harness.bench_plan import CompileKey, PlannedRun

log = logging.getLogger(__name__)

CompileResults = dict[CompileKey, tuple[str | None, str]]  # key -> (error status or None, error text)
#: An item the timing processes take: (problem index in the plan, its runs, its keys' results).
ReadyItem = tuple[int, list[PlannedRun], CompileResults]


class ReadyDispatcher:
    """A thread that puts each planned problem on `ready` once all of its keys are compiled, then
    one None per consumer. `futures` maps every key of the plan to the future compiling it (a
    future returns [(key, status, text)] for its batch); keys in `done` need no compile.

    A failed future (the pool broke) stops dispatching; `error` holds the exception."""

    def __init__(self, planned: Sequence[list[PlannedRun]], futures: dict[CompileKey, Future],
                 ready: Any, consumers: int, done: CompileResults | None = None,
                 on_ready: Callable[[int], None] | None = None):
        self.planned = planned
        self.ready = ready
        self.consumers = consumers
        self.results: CompileResults = dict(done or {})
        self.on_ready = on_ready
        self.error: BaseException | None = None
        self.dispatched = 0
        self._finished: queue.Queue[Future] = queue.Queue()
        self._stop = threading.Event()
        self._missing = [{r.key for r in runs} - self.results.keys() for runs in planned]
        self._waiting: dict[CompileKey, list[int]] = {}
        for index, keys in enumerate(self._missing):
            for key in keys:
                if key not in futures:
                    raise KeyError(f"{key}: no compile submitted for this key of problem {index}")
                self._waiting.setdefault(key, []).append(index)
        for future in {id(f): f for key, f in futures.items() if key in self._waiting}.values():
            future.add_done_callback(self._finished.put)  # runs in the pool's thread: only enqueue
        self.thread = threading.Thread(target=self._run, name="ready-dispatcher", daemon=True)

    def start(self) -> ReadyDispatcher:
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop dispatching (items already queued stay queued)."""
        self._stop.set()
        self.thread.join()

    def _run(self) -> None:
        try:
            self._release([i for i, keys in enumerate(self._missing) if not keys])
            while self.dispatched < len(self.planned) and not self._stop.is_set():
                try:
                    future = self._finished.get(timeout=0.2)
                except queue.Empty:
                    continue
                newly = []
                for key, status, text in future.result():  # raises if the pool broke
                    self.results[key] = (status, text)
                    for index in self._waiting.pop(key, []):
                        self._missing[index].discard(key)
                        if not self._missing[index]:
                            newly.append(index)
                self._release(sorted(newly))
        except BaseException as exc:  # noqa: BLE001 -- surfaced by the caller through .error
            self.error = exc
            log.error("compiling failed, no more problems are handed out: %s", exc)
        finally:
            for _ in range(self.consumers):
                self.ready.put(None)

    def _release(self, indices: list[int]) -> None:
        for index in indices:
            runs = self.planned[index]
            self.ready.put((index, runs, {r.key: self.results[r.key] for r in runs}))
            self.dispatched += 1
            if self.on_ready:
                self.on_ready(index)
