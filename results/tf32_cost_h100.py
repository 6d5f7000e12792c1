"""results/tf32_cost_h100.json: what a float32 GEMM with TF32 costs the data engine, for harness/cost.py.

Two measurements on one GPU host (the H100 of the data engine, 16 cores), one command:

  compile   the same configs compiled as float32 keys with ALLOW_TF32 off and on, for the mm and the
            bmm kernel, each set into an empty Triton cache on --workers processes (bench.precompile),
            in alternating rounds: core-seconds per key (wall x workers / keys), the figure
            cost.COMPILE_CORE_S holds per (kernel, dtype);
  timing    PROBLEMS (TF32, mm "nn", N and K multiples of 16, 2e7 to 1.4e11 FLOP) timed by the
            harness (`pipeline.run_bench`, as `kernel-select bench` times) into --rows; from its rows
            the four constants cost.py keeps per precision (`constants`): the fastest config's rate
            on problems over 1e10 FLOP (median), its time on problems under 1e8 FLOP (median), the
            mean config over the fastest (geomean over problems) and the contenders' summed time over
            the fastest (median). The same function on the committed H100 files' float32 and
            bfloat16 rows gives cost.py's values for those (`--check-committed`, any CPU).

    python results/tf32_cost_h100.py --out results/tf32_cost_h100.json --rows results/tf32_cost_h100.parquet
    python results/tf32_cost_h100.py --check-committed
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_select.problem import Problem

PROBLEMS = [Problem(m, n, k, "float32", tf32=True) for m, n, k in (
    (16, 512, 1024), (32, 1024, 1024), (64, 512, 2048), (48, 1024, 512),  # under 1e8 FLOP
    (256, 2048, 2048), (1024, 1024, 1024), (512, 4096, 1024), (2048, 1024, 2048),
    (2048, 4096, 4096), (4096, 4096, 4096), (8192, 2048, 4096), (4096, 8192, 2048),  # over 1e10 FLOP
)]
COMMITTED = ("data/h100.parquet", "data/h100_coverage.parquet", "data/h100_layers.parquet")


def constants(frame: pd.DataFrame) -> dict[str, Any]:
    """cost.py's four timing constants from a dataset frame's rows (module docstring)."""
    triton = frame[(frame["backend"] == "triton") & np.isfinite(frame["runtime_ms"])
                   & (frame["runtime_ms"] > 0) & frame["status"].isin(["ok", "capped"])]
    per_problem = triton.groupby("problem_id")
    best, mean = per_problem["runtime_ms"].min(), per_problem["runtime_ms"].mean()
    sizes = per_problem[["m", "n", "k", "batch"]].first()
    flop = 2.0 * sizes["batch"] * sizes["m"] * sizes["n"] * sizes["k"]
    contenders = triton[triton["status"] == "ok"].groupby("problem_id")["runtime_ms"].sum().reindex(best.index)
    large, small = flop > 1e10, flop < 1e8
    return {"problems": int(len(best)), "over_1e10_flop": int(large.sum()), "under_1e8_flop": int(small.sum()),
            "rate_flop_s": float(np.median(flop[large] / (best[large] * 1e-3))) if large.any() else None,
            "floor_s": float(np.median(best[small] * 1e-3)) if small.any() else None,
            "slowdown": float(np.exp(np.mean(np.log(mean / best)))),
            "contender_sum": float(np.median(contenders / best))}


def compile_rounds(workers: int, per_round: int, rounds: int, seed: int = 0) -> dict[str, Any]:
    """Core-seconds per key of float32 keys without and with TF32, mm and bmm (module docstring)."""
    from kernel_select.device import detect
    from kernel_select.offline.harness.bench import precompile
    from kernel_select.offline.harness.bench_plan import compile_key, plan

    device = detect()
    rng = random.Random(seed)
    out: dict[str, Any] = {"workers": workers, "keys_per_round": per_round, "rounds": rounds, "rounds_s": []}
    for kernel, problem in (("mm", Problem(1024, 1024, 1024, "float32")),
                            ("bmm", Problem(1024, 1024, 1024, "float32", batch=8, op="bmm"))):
        configs = [run.config for run in plan([problem], device)[0]]
        for round_ in range(rounds):
            sample = rng.sample(configs, per_round)
            for tf32 in ((False, True) if round_ % 2 == 0 else (True, False)):  # alternate who goes first
                keys = list(dict.fromkeys(compile_key(problem, config, tf32) for config in sample))
                with tempfile.TemporaryDirectory(prefix="tf32_cost_") as cache:
                    os.environ["TRITON_CACHE_DIR"] = cache  # the spawned workers inherit it
                    started = time.perf_counter()
                    results = precompile(keys, workers=workers, progress=False)
                    wall = time.perf_counter() - started
                failed = sum(1 for status, _ in results.values() if status)
                out["rounds_s"].append({"kernel": kernel, "tf32": tf32, "keys": len(keys), "failed": failed,
                                        "wall_s": wall, "core_s_per_key": wall * workers / len(keys)})
    for kernel in ("mm", "bmm"):
        for tf32 in (False, True):
            per_key = [r["core_s_per_key"] for r in out["rounds_s"] if (r["kernel"], r["tf32"]) == (kernel, tf32)]
            out[f"{kernel}_{'tf32' if tf32 else 'ieee'}_core_s_per_key"] = float(np.mean(per_key))
        out[f"{kernel}_tf32_over_ieee"] = out[f"{kernel}_tf32_core_s_per_key"] / out[f"{kernel}_ieee_core_s_per_key"]
    return out


def timing(rows: Path, workers: int) -> dict[str, Any]:
    from kernel_select.device import detect
    from kernel_select.offline.data import dataset
    from kernel_select.offline.harness import bench, pipeline

    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tf32_cost_") as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        pipeline.run_bench(PROBLEMS, rows, detect(), bench.BenchOptions(workers=workers, progress=False))
    frame = dataset.read(rows)
    return {"wall_s": time.perf_counter() - started, "rows": int(len(frame)),
            "all_allow_tf32": bool(frame["allow_tf32"].all()),
            "statuses": {str(k): int(v) for k, v in frame["status"].value_counts().items()},
            "tf32": constants(frame)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/tf32_cost_h100.json")
    parser.add_argument("--rows", default="results/tf32_cost_h100.parquet")
    parser.add_argument("--workers", type=int, default=15)
    parser.add_argument("--keys", type=int, default=90, help="keys per compile round")
    parser.add_argument("--rounds", type=int, default=2, help="compile rounds per kernel and precision")
    parser.add_argument("--check-committed", action="store_true",
                        help="print `constants` of the committed H100 files' float32 and bfloat16 rows")
    args = parser.parse_args(argv)
    if args.check_committed:
        from kernel_select.offline.data import dataset

        frame = pd.concat([dataset.read(path) for path in COMMITTED], ignore_index=True)
        for dtype in ("float32", "bfloat16"):
            print(dtype, json.dumps(constants(frame[frame["dtype"] == dtype])))
        return 0
    import torch
    import triton

    report = {"device": torch.cuda.get_device_name(), "cores": len(os.sched_getaffinity(0)),
              "torch": torch.__version__, "triton": triton.__version__,
              "date": time.strftime("%Y-%m-%d", time.gmtime()),
              "compile": compile_rounds(args.workers, args.keys, args.rounds),
              "timing": timing(Path(args.rows), args.workers)}
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
