"""The pinned LUT of one `compare-models` workload, for the `pinned-gemm` method: `kernel-select
pretune` over the GEMMs that workload's step runs, in a process of its own.

    python -m kernel_select.offline.e2e.model_pretune SPEC.json RESULT.json

SPEC: {"model", "device", "tiny", "lut" (the LUT to write), "k" (configs per GEMM, default 4)}.
The worker builds the workload, runs its step once eagerly under pretune's GEMM recorder (a
training step runs its backward and optimizer inside the step, so their GEMMs are recorded too),
and pretunes every GEMM at its one size: the workloads have static shapes, so each GEMM is one
bucket, at which Inductor's autotuner times the model's top-k and ATen (`pretune_gpu`, GPU only).
RESULT: {"pretune_s" (wall seconds of discovery and pretuning), "entries", "sites" (pretune's
per-GEMM summary: the pin and its ratio to the best, or why it was skipped), "lut", "k"},
or {"error"}.

pretune keeps its measurements in `<lut>.progress.json` as they arrive, so a worker cut short
(a timeout, the comparison's time budget) resumes where it stopped; `pretune_s` then counts only
the last attempt. The LUT itself is written once, complete, at the end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel_select.offline.e2e.json_worker import run_worker, worker_main

#: Configs the model ranks per GEMM for pretune to benchmark (beside ATen).
DEFAULT_K = 4
MODULE = "kernel_select.offline.e2e.model_pretune"


def discover_sites(workload: Any) -> list[Any]:
    """The distinct GEMMs one eager step of `workload` runs (`discovery.Site`s, static shapes).

    The step is the callable pretune's recorder runs: it takes no inputs and, for a training
    workload, already runs backward and the optimizer, so pretune's own backward pass stays off.
    """
    from kernel_select.offline.serving import discovery

    return discovery.discover(workload.make_step(workload.module), (), {}, backward=False)


def make_pinned_lut(spec: dict[str, Any], *, device_spec: Any = None, benchmark: Any = None,
                    progress: bool = False) -> dict[str, Any]:
    """Build the workload of `spec`, discover its GEMMs and pretune them into `spec["lut"]`.
    `device_spec` (default: the current CUDA device) is what the model ranks for; `benchmark`
    (default: Inductor's autotuner on the GPU) is pretune's, for tests.

    Raises:
        DeviceError: without a CUDA GPU and no `device_spec`.
    """
    from kernel_select import runtime
    from kernel_select.errors import DeviceError
    from kernel_select.offline.e2e.model_worker import worker_device
    from kernel_select.offline.e2e.workloads import build_workload
    from kernel_select.offline.serving import pretune

    device = worker_device(spec["device"])
    device_spec = device_spec or runtime.current_device()
    if device_spec is None:
        raise DeviceError("pinned-gemm: pretune benchmarks on a CUDA GPU and there is none")
    workload = build_workload(spec["model"], device=device, tiny=bool(spec.get("tiny")))
    start = time.perf_counter()
    sites = discover_sites(workload)
    del workload  # pretune benchmarks on the same GPU: give it the memory back
    k = int(spec.get("k", DEFAULT_K))
    # points=1: a static site has one bucket, at its own M, whatever `points` says.
    summary = pretune.pretune(sites, out=spec["lut"], device=device_spec,
                              model=runtime.model(None, device_spec), k=k, points=1,
                              benchmark=benchmark, progress=progress, **pretune.gate_settings(device_spec))
    return {"pretune_s": time.perf_counter() - start, "entries": summary["entries"],
            "sites": summary["sites"], "lut": summary["out"], "k": k}


def run_pretune_in_subprocess(spec: dict[str, Any], log_path: Path, timeout_s: float) -> dict[str, Any]:
    """One pretune worker process with empty caches; its result or an error."""
    return run_worker(MODULE, spec, log_path, timeout_s)


def main(argv: Sequence[str]) -> int:
    from kernel_select.offline.e2e.model_worker import log_autotuning_times

    return worker_main(argv, MODULE, make_pinned_lut, setup=log_autotuning_times)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
