"""Precompile Triton choices in the compiling process, so benchmarking reuses them (opt-in).

Why: `AlgorithmSelectorCache.make_precompile_fn` precompiles each Triton template choice in
Inductor's compile-worker subprocess pool once that pool is up (`AsyncCompile.use_process_pool()`
is True). The compiled kernel stays in the worker; the compiling process then misses Triton's
cache for it and compiles every choice again, one after the other, when it benchmarks. Only a
process's first autotuned op is spared: the pool is not ready yet, so each choice's own
`precompile()` runs in a thread pool of the compiling process, and benchmarking finds it compiled.

What: while `make_precompile_fn` runs (torch 2.11 and 2.13 both create their `AsyncCompile` and
run the whole submit loop inside it, before returning the function that waits), the calling
thread sees `AsyncCompile.use_process_pool()` as False, so every choice takes that thread-pool
path. Nothing else changes: other threads, and this thread outside the call, see torch's own
answer, and `use_process_pool` is torch's own attribute again as soon as no call is in flight.

    hold(wanted)      wrap make_precompile_fn (process-wide, reference-counted); the wrapper
                      asks `wanted()` at every call whether to precompile in process
    release()         drop a hold; the last one restores torch's make_precompile_fn
    in_process_precompile()  the gate itself: use_process_pool() is False in this thread

If this torch does not have that shape (the attributes are missing, or make_precompile_fn no
longer consults use_process_pool), nothing is patched and one warning says so.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kernel_select import warn

log = logging.getLogger(__name__)

_CONSEQUENCE = "Triton choices are precompiled as torch does it (in the worker pool once it is up)"
_ORIGINAL = "__kernel_select_original__"  # on our wrappers: the attribute they replaced

_lock = threading.Lock()  # guards the counters and every swap of a torch attribute
_thread = threading.local()  # .depth: make_precompile_fn calls of this thread under the gate


class _State:
    holders: tuple[Callable[[], bool], ...] = ()  # replaced, never mutated: read without the lock
    gate_users = 0  # make_precompile_fn calls, in any thread, under the gate right now


_state = _State()


def torch_shape_problem() -> str | None:
    """Why this torch cannot be patched, or None when it has the expected shape."""
    try:
        from torch._inductor.async_compile import AsyncCompile
        from torch._inductor.select_algorithm import AlgorithmSelectorCache
    except Exception as exc:  # noqa: BLE001 -- any import failure means "leave torch alone"
        return f"cannot import Inductor's autotuning ({type(exc).__name__}: {exc})"
    make_fn = AlgorithmSelectorCache.__dict__.get("make_precompile_fn")  # its own, not inherited
    code = getattr(getattr(make_fn, _ORIGINAL, make_fn), "__code__", None)
    if code is None:
        return "torch._inductor.select_algorithm.AlgorithmSelectorCache has no make_precompile_fn"
    if not isinstance(AsyncCompile.__dict__.get("use_process_pool"), classmethod):
        return "torch._inductor.async_compile.AsyncCompile.use_process_pool is not a classmethod"
    # The gate only matters if the call consults it: check the names its own code uses.
    if "use_process_pool" not in code.co_names:
        return "AlgorithmSelectorCache.make_precompile_fn no longer consults use_process_pool"
    return None


def warn_once(reason: str) -> None:
    """One warning per process: a compile goes on without the patch either way."""
    warn.warn_once("precompile_in_process unavailable", log,
                   "kernel_select: gemm_precompile_in_process is on, but %s; %s", reason, _CONSEQUENCE)


@contextlib.contextmanager
def in_process_precompile() -> Iterator[None]:
    """While inside, `AsyncCompile.use_process_pool()` answers False in this thread only."""
    problem = torch_shape_problem()
    if problem is not None:
        warn_once(problem)
        yield
        return
    from torch._inductor.async_compile import AsyncCompile

    with _lock:
        if _state.gate_users == 0:
            AsyncCompile.use_process_pool = _gated(AsyncCompile.__dict__["use_process_pool"])
        _state.gate_users += 1
    _thread.depth = getattr(_thread, "depth", 0) + 1
    try:
        yield
    finally:
        _thread.depth -= 1
        with _lock:
            _state.gate_users -= 1
            if _state.gate_users == 0:
                _restore(AsyncCompile, "use_process_pool")


def _gated(original: classmethod) -> classmethod:
    def use_process_pool(cls: type) -> bool:
        if getattr(_thread, "depth", 0):
            return False
        return original.__func__(cls)

    gated = classmethod(functools.wraps(original.__func__)(use_process_pool))
    setattr(gated, _ORIGINAL, original)
    return gated


def _restore(owner: type, name: str) -> None:
    """Put torch's attribute back, unless someone patched over ours meanwhile (then theirs stays:
    restoring ours would undo their patch)."""
    current = owner.__dict__.get(name)
    original = getattr(current, _ORIGINAL, None)
    if original is not None:
        setattr(owner, name, original)
    else:
        log.debug("kernel_select: %s.%s was replaced by someone else; left as it is", owner.__name__, name)


def hold(wanted: Callable[[], bool]) -> bool:
    """Wrap `AlgorithmSelectorCache.make_precompile_fn` so that, whenever one of the held
    `wanted()` answers True in the calling thread, the call runs under in_process_precompile().
    Returns False, patching nothing, where this torch lacks the expected shape (the caller
    decides whether that deserves the warning: see warn_once)."""
    if torch_shape_problem() is not None:
        return False
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    with _lock:
        if not _state.holders:
            original = AlgorithmSelectorCache.__dict__["make_precompile_fn"]
            AlgorithmSelectorCache.make_precompile_fn = _wrapped(original)
        _state.holders = (*_state.holders, wanted)
    return True


def release(wanted: Callable[[], bool]) -> None:
    """Drop one hold of `wanted`; the last one restores torch's make_precompile_fn."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    with _lock:
        holders = list(_state.holders)
        if wanted not in holders:
            return
        holders.remove(wanted)
        _state.holders = tuple(holders)
        if not holders:
            _restore(AlgorithmSelectorCache, "make_precompile_fn")


def _wrapped(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def make_precompile_fn(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not _wanted():
            return original(self, *args, **kwargs)
        with in_process_precompile():
            return original(self, *args, **kwargs)

    setattr(make_precompile_fn, _ORIGINAL, original)
    return make_precompile_fn


def _wanted() -> bool:
    try:
        return any(wanted() for wanted in set(_state.holders))
    except Exception as exc:  # noqa: BLE001 -- deciding must never break a compile
        warn_once(f"deciding whether it applies failed ({type(exc).__name__}: {exc})")
        return False
