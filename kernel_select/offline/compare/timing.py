"""Kernel timing for the comparison's worker: L2-cold inputs, CUDA-graph replays, interleaved
samples. Needs a GPU to run; `input_copies` is plain arithmetic."""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

#: Input copies per timing loop: enough to stream at least this many L2 sizes between reuses.
L2_MULTIPLE = 2


MAX_INPUT_COPIES = 1024


def input_copies(bytes_per_call: int, l2_bytes: int) -> int:
    """How many input sets to rotate over so that L2_MULTIPLE x L2 bytes stream between reuses."""
    if bytes_per_call <= 0:
        raise ValueError(f"bytes_per_call must be positive, got {bytes_per_call}")
    return max(2, min(MAX_INPUT_COPIES, math.ceil(L2_MULTIPLE * l2_bytes / bytes_per_call)))


def kernel_ms(fns: dict[str, Callable[..., Any]], inputs: list[tuple[Any, ...]], *, samples: int = 30,
              min_sample_ms: float = 2.0) -> tuple[dict[str, float], str]:
    """Median per-call time of each fn over back-to-back calls that rotate through `inputs` (each a
    tuple of a call's arguments).

    The functions' samples are interleaved (a sample of each, then the next round), so slow drift
    in clocks or temperature affects them alike and their ratio stays honest.
    """
    import torch

    replays, timing = {}, "cuda_graph"
    for name, fn in fns.items():
        try:
            replays[name] = _capture(fn, inputs)
        except Exception as exc:  # noqa: BLE001 -- fall back to plain launches (includes launch overhead)
            log.warning("CUDA graph capture of %s failed (%s); timing eager launches", name, exc)
            replays[name], timing = _launches(fn, inputs), "events"
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample(replay: Callable[[], None], repeats: int) -> float:
        start.record()
        for _ in range(repeats):
            replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    repeats = {}
    for name, replay in replays.items():
        replay()  # warm-up
        torch.cuda.synchronize()
        repeats[name] = max(1, math.ceil(min_sample_ms / max(sample(replay, 1), 1e-3)))
    per_call: dict[str, list[float]] = {name: [] for name in replays}
    for _ in range(samples):
        for name, replay in replays.items():
            per_call[name].append(sample(replay, repeats[name]) / (repeats[name] * len(inputs)))
    return {name: statistics.median(values) for name, values in per_call.items()}, timing


def _launches(fn: Callable[..., Any], inputs: list[tuple[Any, ...]]) -> Callable[[], None]:
    def replay() -> None:
        for args in inputs:
            fn(*args)

    return replay


def _capture(fn: Callable[..., Any], inputs: list[tuple[Any, ...]]) -> Callable[[], None]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as CUDA graphs require
        for args in inputs[:3]:
            fn(*args)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for args in inputs:
            fn(*args)
    return graph.replay
