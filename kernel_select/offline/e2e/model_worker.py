"""One (model, method) measurement of `compare-models`, in a process of its own.

    python -m kernel_select.offline.e2e.model_worker SPEC.json RESULT.json

The parent gives every worker empty Inductor and Triton cache directories, so `compile_s` is
a cold compile. The worker
  1. compiles an unrelated elementwise function first, so imports, the CUDA context and the
     compile-worker pool are not billed to the model;
  2. builds the workload (`build_s`) and times the compiled step's first call (`compile_s`: Dynamo,
     Inductor, autotuning, and for training the backward graph too), recording every GEMM
     Inductor autotuned (op, input shapes, the winner, how many choices it timed, their times)
     and how many GEMMs it lowered (`gemms_lowered`): a GEMM given one choice is lowered and
     never benchmarked, so the two counts tell how many a method left to benchmarking;
  3. times the step and the eager step side by side, samples interleaved (`step_ms`,
     `eager_step_ms`: medians per step), so drift hits both alike and their ratio stays honest;
     a fixed piece of host-only work is timed in the same rounds (`host_ref_ms`): how fast the
     host ran meanwhile, which launch-bound steps follow;
     on a GPU it then takes the GPU's view of both, without the host's launch time
     (`step_device_ms`, `eager_device_ms`; step_timing.py says how and why).

Timing uses CUDA events on a GPU (a mode with CUDA graphs replays them inside the step) and
the wall clock on a CPU; tests pass a fake `Timer`.
"""

from __future__ import annotations

import logging
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernel_select.offline.e2e.json_worker import worker_main
from kernel_select.offline.e2e.model_methods import ModelMethod
from kernel_select.offline.e2e.model_results import GEMM_OPS
from kernel_select.offline.e2e.workloads import build_workload
from kernel_select.offline.e2e.step_timing import (
    CudaEventTimer, DeviceTimeTimer, Timer, host_reference, interleaved_ms, relative_iqr, wall_clock_timer)

log = logging.getLogger(__name__)

#: A device-time sample's length: short, so that its steps' launches fit in the launch queue
#: behind the spin (a longer one blocks the host there; step_timing.py).
DEVICE_SAMPLE_MS = 2.0


@contextmanager
def recording_gemms() -> Iterator[list[dict[str, Any]]]:
    """Every op Inductor autotunes inside the block: op, input shapes, winner, choices timed, and
    each choice's time in ms (fastest first; failed choices left out)."""
    import kernel_select.inductor as ks_inductor

    gemms: list[dict[str, Any]] = []
    with ks_inductor.record_autotuning() as records:
        try:
            yield gemms
        finally:
            for record in records:
                winner = record.winner
                # Every choice's time, fastest first: a winner that differs between two runs of
                # one method shows here as which choice Inductor timed differently.
                timings = sorted(record.timings, key=lambda t: t.ms)
                gemms.append({"op": record.op, "shapes": record.shapes,
                              "choice": winner.label() if winner else None,
                              "n_triton": record.count("triton"), "n_choices": len(record.timings),
                              "timings": [[t.label(), round(t.ms, 5)] for t in timings
                                          if t.ms < float("inf")]})


def lowered_gemms() -> int:
    """How many GEMM lowerings (model_results.GEMM_OPS) Inductor has counted in this process, whether or
    not it autotuned them: each adds one to `counters["aten_mm_info"]` (torch 2.11 and 2.13)."""
    from torch._dynamo.utils import counters

    prefixes = tuple(GEMM_OPS.values())
    return sum(count for key, count in counters["aten_mm_info"].items() if key.startswith(prefixes))


def _warm_up(device: Any, method: ModelMethod) -> None:
    """Pay one-time start-up (imports, CUDA context, Inductor's compile pool) before timing."""
    import torch

    if method.mode == "eager":
        return
    x = torch.randn(4096, device=device)
    torch.compile(lambda t: torch.sigmoid(t) * 3.0, backend=method.backend)(x)
    _synchronize(device)
    torch._dynamo.reset()


def _synchronize(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _marking_steps(step: Callable[[], Any]) -> Callable[[], Any]:
    """`step`, telling Inductor's CUDA graphs that a new step begins (their outputs of the last
    step may be overwritten; without it a training step's replay can refuse to run)."""
    import torch

    def marked() -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        return step()

    return marked


def worker_device(name: str) -> Any:
    """The torch device a worker runs on, made current (a CUDA one with its index)."""
    import torch

    device = torch.device(name)
    if device.type == "cuda":
        # "cuda" without an index means the first GPU; set_device insists on an index.
        device = torch.device("cuda", device.index or 0)
        torch.cuda.set_device(device)
    return device


def measure(spec: dict[str, Any], timer: Timer | None = None) -> dict[str, Any]:
    """Run one (model, method) measurement described by `spec` (keys: model, method, device,
    tiny, samples, min_sample_ms); returns the raw result the driver stores as a run."""
    device = worker_device(spec["device"])
    method = ModelMethod(**spec["method"])
    _warm_up(device, method)
    started = time.perf_counter()
    workload = build_workload(spec["model"], device=device, tiny=bool(spec.get("tiny")))
    eager_step = workload.make_step(workload.module)
    result: dict[str, Any] = {"compile_s": 0.0, "gemms": [], "gemms_lowered": 0, "sizes": workload.sizes,
                              "build_s": time.perf_counter() - started}
    step = eager_step
    if method.mode != "eager":
        step = _marking_steps(workload.make_step(method.compile(workload.module)))
        lowered_before = lowered_gemms()
        with recording_gemms() as gemms:
            _synchronize(device)
            start = time.perf_counter()
            step()
            _synchronize(device)
            result["compile_s"] = time.perf_counter() - start
        result["gemms"] = gemms
        result["gemms_lowered"] = lowered_gemms() - lowered_before
    if timer is None:
        timer = CudaEventTimer() if device.type == "cuda" else wall_clock_timer
    steps = {"step": step} if method.mode == "eager" else {"step": step, "eager": eager_step}
    result["host_before_timing"] = host_state()
    count = int(spec.get("samples", 30))
    samples = interleaved_ms({**steps, "host": host_reference}, timer, samples=count,
                             min_sample_ms=float(spec.get("min_sample_ms", 20.0)))
    samples.setdefault("eager", samples["step"])
    result["step_ms"] = statistics.median(samples["step"])
    result["eager_step_ms"] = statistics.median(samples["eager"])
    result["step_iqr"] = relative_iqr(samples["step"])
    result["host_ref_ms"] = statistics.median(samples["host"])
    result["host_ref_iqr"] = relative_iqr(samples["host"])
    result["timing"] = "cuda_events" if device.type == "cuda" else "wall_clock"
    if device.type == "cuda":
        result.update(device_times(steps, DeviceTimeTimer(), count))
    return result


def device_times(steps: dict[str, Callable[[], Any]], timer: DeviceTimeTimer,
                 samples: int) -> dict[str, Any]:
    """The GPU's view of the same steps (step_timing.py): `step_device_ms`, `eager_device_ms`, the
    samples' spread and how many samples the host was still enqueueing when the spin ended."""
    times = interleaved_ms(steps, timer, samples=samples, min_sample_ms=DEVICE_SAMPLE_MS)
    times.setdefault("eager", times["step"])
    return {"step_device_ms": statistics.median(times["step"]),
            "eager_device_ms": statistics.median(times["eager"]),
            "step_device_iqr": relative_iqr(times["step"]), "device_uncovered": timer.uncovered}


def host_state() -> dict[str, Any]:
    """What else runs on the host while steps are timed. Eager steps timed after a max-autotune
    compile were 8-25% slower than after a default compile (docs/inductor.md); these are the
    first suspects: load, the compile workers still alive, threads left running."""
    import os
    import threading

    state: dict[str, Any] = {"threads": threading.active_count()}
    try:
        state["loadavg_1m"] = os.getloadavg()[0]
    except OSError:  # not on every platform
        pass
    children = _child_processes(os.getpid())
    if children is not None:
        state["child_processes"] = children
    return state


def _child_processes(pid: int) -> int | None:
    """Processes whose parent is `pid`, from /proc (None where there is no /proc)."""
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    count = 0
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # The fields after the command name (which may hold spaces) start at the last ")".
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended meanwhile
        count += fields[1] == str(pid)
    return count


def log_autotuning_times() -> None:
    """Put Inductor's own per-choice lines ("Precompiling benchmark choice ... took 1.23s") into
    the worker's log, with timestamps: they split a run's compile time into precompiling,
    benchmarking and the rest, which the summary's totals cannot."""
    import torch._logging

    try:
        torch._logging.set_logs(modules={"torch._inductor.select_algorithm": logging.INFO})
    except (TypeError, ValueError) as exc:  # an older torch without `modules`: the log is only poorer
        log.warning("cannot turn on Inductor's autotuning log (%s)", exc)


def main(argv: Sequence[str]) -> int:
    return worker_main(argv, "kernel_select.offline.e2e.model_worker", measure, setup=log_autotuning_times)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
