"""Where a network's step time goes, kernel by kernel, under each compile method: torch.profiler's device
time per kernel over 30 steps of the Llama decode workload, one fresh process with empty caches per method.
It is how the zero-benchmark mode's Llama decode miss (docs/results.md) was traced to two Triton configs.

    python results/zero_benchmark_profile_h200.py results/zero_benchmark_profile_h200.json \\
        default zero-gemm topk-4-gemm stock-gemm

Needs a CUDA GPU, transformers and Triton. Run from the repository root. Writes, per method, every kernel's
launches and microseconds per step, the GEMMs Inductor autotuned, and the handler's log lines (each GEMM's
decision). The committed JSON (2026-11-28, one H200) was measured by these steps, one method per process:
`default` and `stock-gemm` in one call, `zero-gemm` and `topk-4-gemm` in a later one (a `zero-gemm` run
in the first call gave 909.6 us of kernels per step, against the 908.1 kept).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

WORKLOAD = "llama3-8b-2layer/decode"
STEPS = 30


def profile_one(method_name: str, out: str) -> None:
    """In this process: compile WORKLOAD with the method, then profile STEPS steps."""
    import logging

    import torch
    from torch.profiler import ProfilerActivity, profile

    from kernel_select.offline.e2e.model_methods import select_methods
    from kernel_select.offline.e2e.model_worker import _warm_up, recording_gemms
    from kernel_select.offline.e2e.workloads import build_workload

    decisions: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            decisions.append(record.getMessage())

    logging.getLogger("kernel_select").addHandler(Keep(level=logging.INFO))
    logging.getLogger("kernel_select").setLevel(logging.INFO)
    device = torch.device("cuda")
    method = select_methods(method_name)[0]
    _warm_up(device, method)
    workload = build_workload(WORKLOAD, device=device)
    with recording_gemms() as gemms:
        step = workload.make_step(method.compile(workload.module))
        for _ in range(25):  # compile, then let CUDA graphs record and settle
            torch.compiler.cudagraph_mark_step_begin()
            step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(STEPS):
            torch.compiler.cudagraph_mark_step_begin()
            step()
        torch.cuda.synchronize()
    kernels = sorted(({"name": e.key, "launches_per_step": e.count / STEPS,
                       "us_per_step": e.device_time_total / STEPS, "us_each": e.device_time_total / e.count}
                      for e in prof.key_averages() if e.device_time_total > 0), key=lambda k: -k["us_per_step"])
    with open(out, "w") as f:
        json.dump({"method": method_name, "kernel_us_per_step": sum(k["us_per_step"] for k in kernels),
                   "kernels": kernels, "autotuned_gemms": gemms,
                   "decisions": [d for d in decisions if " on " in d]}, f, indent=1)


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "--one":
        profile_one(argv[1], argv[2])
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, methods = argv[0], argv[1:]
    merged = {"workload": WORKLOAD, "steps": STEPS, "methods": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in methods:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/{name}/inductor",
                       TRITON_CACHE_DIR=f"{tmp}/{name}/triton")
            part = f"{tmp}/{name}.json"
            subprocess.run([sys.executable, __file__, "--one", name, part], env=env, check=True)
            with open(part) as f:
                merged["methods"][name] = json.load(f)
            print(f"{name}: {merged['methods'][name]['kernel_us_per_step']:.1f} us of kernels per step")
    with open(out, "w") as f:
        json.dump(merged, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
