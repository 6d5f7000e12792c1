"""Collection on several GPUs of one host: `bench --gpus N`.

Whole compile groups (problems sharing compile keys) go to one GPU each, so no binary is compiled
twice, largest estimated cost first to the GPU with the least work so far. One process per GPU,
each with its own CUDA_VISIBLE_DEVICES, compile pool (its share of the cores) and part file, runs
`pipeline.run_bench`; the parts are merged into the output at the end, and at the start of the
next run if a killed run left some. The GPUs share the host's cores, so a compile-bound plan gains
nothing from a second GPU (data/README.md, run 5).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from kernel_select.device import DeviceSpec
from kernel_select.errors import OptionError
from kernel_select.offline.data import dataset
from kernel_select.offline.harness.bench import BenchOptions
from kernel_select.offline.harness.bench_plan import CompileKey, plan, pow2_divisor
from kernel_select.offline.harness.pipeline import Origins, Problems, run_bench, todo_problems
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

#: Row-equivalents (at about 1,000 rows a second on one GPU) for what a problem costs besides its
#: rows (operands, reference, cuBLAS, checks), and for compiling one key on one GPU's share of the
#: cores (0.65 core-seconds on 15 of them).
PROBLEM_COST_ROWS = 200
KEY_COST_ROWS = 43


def shard_problems(problems: Problems, groups: Sequence[str], gpus: int,
                   costs: Sequence[float] | None = None) -> list[list[int]]:
    """Indices of the problems each GPU times: whole groups (problems sharing compile keys) go to
    one GPU, so no binary is compiled twice. Groups go largest first (by `costs` summed over the
    group, else by problem count) to the GPU with the least work so far, so the GPUs finish
    together. Order within a GPU follows the input."""
    by_group: dict[str, list[int]] = {}
    for i, group in enumerate(groups):
        by_group.setdefault(group, []).append(i)
    weight = [1.0] * len(groups) if costs is None else list(costs)
    totals = {g: sum(weight[i] for i in members) for g, members in by_group.items()}
    shards: list[list[int]] = [[] for _ in range(gpus)]
    load = [0.0] * gpus
    for group in sorted(by_group, key=lambda g: -totals[g]):  # stable: ties keep input order
        gpu = min(range(gpus), key=lambda i: load[i])
        shards[gpu].extend(by_group[group])
        load[gpu] += totals[group]
    return [sorted(s) for s in shards]


def group_costs(problems: Problems, groups: Sequence[str], device: DeviceSpec,
                search_space: str) -> list[float]:
    """Each problem's estimated share of its group's work, in rows: its rows plus a fixed cost,
    or its share of compiling the group's distinct keys where that is larger (compile and timing
    overlap, so the slower of the two bounds the group)."""
    planned = plan(problems, device, search_space=search_space)
    timing = [len(runs) + 1 + PROBLEM_COST_ROWS for runs in planned]
    keys: dict[str, set[CompileKey]] = {}
    group_timing: dict[str, float] = {}
    for group, runs, t in zip(groups, planned, timing):
        keys.setdefault(group, set()).update(r.key for r in runs)
        group_timing[group] = group_timing.get(group, 0.0) + t
    scale = {g: max(1.0, KEY_COST_ROWS * len(keys[g]) / group_timing[g]) for g in keys}
    return [t * scale[g] for g, t in zip(groups, timing)]


def default_group(problem: Problem) -> str:
    """The group of a problem its plan gave none: what most of its compile keys depend on."""
    return f"{problem.dtype}/{problem.layout}/n{pow2_divisor(problem.n)}/k{pow2_divisor(problem.k)}"


def run_sharded(problems: Problems, out: str | Path, device: DeviceSpec, gpus: int,
                options: BenchOptions, origins: Origins | None = None,
                groups: Sequence[str] | None = None) -> pd.DataFrame:
    """Shard problems over `gpus` GPUs of this host (one process each), then merge the parts."""
    if gpus <= 1:
        return run_bench(problems, out, device, options, origins)
    import torch

    started = time.perf_counter()
    if gpus > torch.cuda.device_count():
        raise OptionError(f"--gpus {gpus}: this host has {torch.cuda.device_count()} visible CUDA GPUs")
    out = Path(out)
    parts = [part_path(out, i) for i in range(gpus)]
    leftover = merge_parts(out, sorted(out.parent.glob(f"{out.stem}.gpu*{out.suffix}")))
    if any(rows for _, rows in leftover):  # a killed sharded run: its timed problems count as done
        log.info("merged %d problems from part files of an earlier run", sum(p for p, _ in leftover))
    problems = list(problems)
    groups = [g or default_group(p) for g, p in zip(groups or [""] * len(problems), problems)]
    group_of = dict(zip(problems, groups))
    problems = todo_problems(problems, out, torch.cuda.get_device_properties(0).name)
    if not problems:
        log.info("every problem is already in %s for this GPU", out)
        return dataset.read(out)
    groups = [group_of[p] for p in problems]
    workers = options.workers or max(1, (os.cpu_count() or 2) // gpus - 1)
    shard_options = BenchOptions(**{**options.__dict__, "workers": workers})
    ctx = multiprocessing.get_context("spawn")
    procs = []
    costs = group_costs(problems, groups, device, options.search_space)
    for gpu, indices in enumerate(shard_problems(problems, groups, gpus, costs)):
        chosen = [problems[i] for i in indices]
        shard_origins = {p: (origins or {}).get(p) for p in chosen}
        args = (chosen, parts[gpu], device, shard_options, shard_origins, gpu == 0)
        procs.append(_start_on_gpu(ctx, gpu, args))
    for proc in procs:
        proc.join()
    merged = merge_parts(out, parts)
    log.info("%s", sharded_summary(merged, time.perf_counter() - started))
    failed = [i for i, p in enumerate(procs) if p.exitcode != 0]
    if failed:
        log.warning("GPU workers %s exited with an error; their finished problems were kept", failed)
    return dataset.read(out)


def part_path(out: Path, gpu: int) -> Path:
    return out.with_name(f"{out.stem}.gpu{gpu}{out.suffix}")


def merge_parts(out: Path, parts: Sequence[Path]) -> list[tuple[int, int]]:
    """Append every existing part file to `out`, then remove the parts. Returns each part's
    (problems, rows), (0, 0) for a GPU that wrote none."""
    merged = []
    for part in parts:
        if not part.exists():
            merged.append((0, 0))
            continue
        rows = dataset.read(part)
        dataset.append(out, rows)
        part.unlink()
        merged.append((int(rows["problem_id"].nunique()), len(rows)))
    return merged


def sharded_summary(merged: Sequence[tuple[int, int]], wall_s: float) -> str:
    """The whole run's throughput, compile included: rows per minute of wall time on all GPUs,
    then per GPU-minute (what one GPU adds), then each GPU's share."""
    problems, rows = sum(p for p, _ in merged), sum(r for _, r in merged)
    per_minute = 60 * rows / max(wall_s, 1e-9)
    shares = ", ".join(f"GPU {i}: {p} problems, {r} rows" for i, (p, r) in enumerate(merged))
    return (f"{len(merged)} GPUs: {problems} problems, {rows} rows in {wall_s:.1f} s wall (compile "
            f"included): {per_minute:.0f} rows per minute, {per_minute / len(merged):.0f} per "
            f"GPU-minute ({shares})")


def _start_on_gpu(ctx, gpu: int, args: tuple) -> multiprocessing.process.BaseProcess:
    """Start a worker that sees only GPU `gpu` (CUDA_VISIBLE_DEVICES is read when CUDA starts,
    and a spawned child inherits the environment as it is when it starts)."""
    previous = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = previous.split(",") if previous else None
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[gpu] if visible else str(gpu)
    try:
        proc = ctx.Process(target=_shard_main, args=args, name=f"bench-gpu{gpu}")
        proc.start()
    finally:
        if previous is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = previous
    return proc


def _shard_main(problems: list[Problem], part: Path, device: DeviceSpec, options: BenchOptions,
                origins: Origins, show_progress: bool) -> None:
    logging.basicConfig(level=logging.INFO, format=f"[{os.environ.get('CUDA_VISIBLE_DEVICES')}] %(message)s")
    shard_options = BenchOptions(**{**options.__dict__, "progress": show_progress})
    run_bench(problems, part, device, shard_options, origins)
