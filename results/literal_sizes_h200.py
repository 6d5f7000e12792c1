"""Decode-sized GEMMs timed as a network runs them (a CUDA graph of 8 launches on 8 weights, bf16, x @ W.t()):
the harness's kernel with the sizes passed at run time (how every committed dataset was timed) and with
them compiled in (`bench --literal-sizes`), and Inductor's own kernel for a few of the same configs (pinned
through a LUT, profiled inside a compiled CUDA-graph step, alone and after 32 MB writes). docs/results.md,
"Harness fidelity", cites it.

    python results/literal_sizes_h200.py results/literal_sizes_h200.json

Needs a CUDA GPU and Triton; run from the repository root. The committed JSON (2026-11-28, one H200) was
measured by these steps; its harness rows also carry an `m_literal` column, from a variant of the kernel
with M alone compiled in, which this script does not build.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

PROBLEMS = [(8, 14336, 4096), (8, 4096, 14336), (16, 14336, 4096), (1, 14336, 4096), (8, 4096, 4096),
            (4, 1024, 4096), (64, 14336, 4096)]
CONFIGS = [(16, 128, 128, 4, 2), (16, 128, 128, 4, 4), (16, 64, 128, 4, 4), (16, 32, 128, 5, 2),
           (16, 64, 256, 5, 2), (16, 32, 256, 5, 2), (16, 128, 128, 4, 8), (16, 64, 64, 5, 4),
           (16, 16, 128, 5, 1), (16, 128, 64, 3, 4)]  # BLOCK_M 64 where M > 16
INDUCTOR = [((8, 14336, 4096), c) for c in ((16, 128, 128, 4, 2), (16, 128, 128, 4, 4), (16, 64, 128, 4, 4),
                                            (16, 32, 128, 5, 2))]
INDUCTOR += [((8, 4096, 14336), c) for c in ((16, 32, 256, 5, 2), (16, 64, 256, 5, 2))]


def graph_us(fns: list, reps: int = 30) -> float:
    """Microseconds per launch of `fns` replayed back to back in one CUDA graph (median of `reps`)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns:
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn in fns:
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / len(fns))
    return statistics.median(times)


def harness_rows() -> list[dict]:
    import torch

    from kernel_select.configs import GemmConfig
    from kernel_select.device import detect
    from kernel_select.offline.harness.bench_plan import PlannedRun, compile_key
    from kernel_select.offline.harness.timer import ProblemTimer, operands
    from kernel_select.problem import Problem

    device, rows = detect(), []
    for m, n, k in PROBLEMS:
        problem = Problem(m, n, k, "bfloat16", layout="nt")
        timer = ProblemTimer(problem, device)
        weights = [operands(problem, "cuda", torch.Generator(device="cuda").manual_seed(i))[1] for i in range(8)]
        for bm, bn, bk, stages, warps in CONFIGS:
            config = GemmConfig(block_m=64 if m > 16 else bm, block_n=bn, block_k=bk, num_stages=stages,
                                num_warps=warps)
            row = {"problem": [m, n, k], "config": [config.block_m, bn, bk, stages, warps]}
            for name, literal in (("runtime", False), ("all_literal", True)):
                run = PlannedRun(problem, config, compile_key(problem, config, literal_sizes=literal))

                def launch(b, run=run):
                    timer.b = b
                    timer.launch(run)
                try:
                    row[name] = graph_us([lambda b=b: launch(b) for b in weights])
                except Exception as exc:  # noqa: BLE001 -- out of resources: recorded, as the harness does
                    row[name] = str(exc)[:80]
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def inductor_row(problem: tuple[int, int, int], config: tuple[int, ...]) -> dict:
    """In this process: Inductor's kernel for `config`, pinned, profiled in a compiled CUDA-graph step."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import kernel_select.inductor as ks

    (m, n, k), (bm, bn, bk, stages, warps) = problem, config
    pin = {"block_m": bm, "block_n": bn, "block_k": bk, "num_stages": stages, "num_warps": warps, "group_m": 8}
    lut = {"schema_version": 4, "devices": {"h200": {"mm": {"bfloat16": [
        {"m": m, "n": n, "k": k, "layout": "nt", "pin": pin}]}}}}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(lut, f)
    ks.install(gemm_topk=1, kernel_lut_path=f.name)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
    bigs = [torch.randn(16 * 2**20, device="cuda", dtype=torch.bfloat16) for _ in range(8)]

    def alone(x, *ws):
        return tuple(x @ w.t() for w in ws)

    def after_writes(x, *args):  # each GEMM after a 32 MB write, as a KV-cache update leaves dirty L2
        return tuple(t for w, b in zip(args[:8], args[8:]) for t in (x @ w.t(), b * 2.0))

    row = {"problem": [m, n, k], "config": list(config)}
    for name, fn, args in (("alone_us", alone, (x, *weights)), ("after_writes_us", after_writes,
                                                                 (x, *weights, *bigs))):
        torch._dynamo.reset()
        step = torch.compile(fn, options=ks.gemm_autotune_options(cudagraphs=True))
        for _ in range(5):
            torch.compiler.cudagraph_mark_step_begin()
            step(*args)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(20):
                torch.compiler.cudagraph_mark_step_begin()
                step(*args)
            torch.cuda.synchronize()
        row[name] = next(e.device_time_total / e.count for e in prof.key_averages()
                         if e.key.startswith("triton_tem"))
    return row


def main(argv: list[str]) -> int:
    if argv and argv[0] == "--inductor":  # one config per process: one install, fresh caches
        print(json.dumps(inductor_row(tuple(json.loads(argv[1])), tuple(json.loads(argv[2])))))
        return 0
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    result = {"harness_kernel": harness_rows(), "inductor_kernel": []}
    with tempfile.TemporaryDirectory() as tmp:
        for problem, config in INDUCTOR:
            env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=f"{tmp}/inductor", TRITON_CACHE_DIR=f"{tmp}/triton")
            out = subprocess.run([sys.executable, __file__, "--inductor", json.dumps(problem), json.dumps(config)],
                                 env=env, check=True, capture_output=True, text=True).stdout
            result["inductor_kernel"].append(json.loads(out.strip().splitlines()[-1]))
            print(out.strip().splitlines()[-1], flush=True)
    with open(argv[0], "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
