"""Fidelity check: does the standalone harness rank configs the way real Inductor does?

For each single GEMM (mm, in any operand layout), the same configs are timed twice on the GPU:
  * by Inductor itself: `torch.compile(mode="max-autotune-no-cudagraphs")` of `a @ b` on the operand
    views the harness times (a transposed operand is a transposed view, as W in x @ W.t()), with
    kernel_select's choices handler restricted to exactly these configs (a temporary LUT that pins
    them, top-k = their number), Inductor's own per-choice timings read by a feedback saver;
  * by kernel_select's harness (`bench.time_problem`), in the same process.
Reported per problem: the Spearman rank correlation between the two and the median ratio of
Inductor's time to the harness's. Inductor's benchmarker reports the minimum of L2-flushed runs
that include the Python launch gap, so its times carry a small per-launch offset; ranks do not.
`literal_sizes` times the harness's binaries with M, N and K compiled in, as Inductor's are
(bench_plan.py): run the check with and without it to see what the shared binaries cost.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kernel_select.offline.data import dataset, problem_ids
from kernel_select.offline.json_files import read_json_file, write_json_atomic
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.errors import DatasetError
from kernel_select.problem import Problem

log = logging.getLogger(__name__)


@dataclass
class FidelityResult:
    problem: str
    n_configs: int
    spearman_median: float  # Inductor vs harness median
    spearman_min: float  # Inductor vs harness min (Inductor reports a min too)
    median_ratio: float  # median over configs of inductor_ms / harness_ms
    inductor_best: str
    harness_best: str
    compile_s: float
    # Inductor's time of the harness's fastest config over Inductor's fastest: what ranking by the
    # harness loses in Inductor's own measure (1.0: the same config, or one Inductor times as fast)
    harness_best_ratio: float = math.nan


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman rank correlation over the finite pairs; nan for fewer than 3 of them."""
    from kernel_select.offline.training.evaluate import spearman_per_group

    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y)
    if keep.sum() < 3:
        return float("nan")
    return float(spearman_per_group(np.zeros(int(keep.sum()), dtype=np.int64), x[keep], y[keep])[0])


def pick_configs(problem: Problem, device: DeviceSpec, count: int, data: pd.DataFrame | None,
                 seed: int = 0) -> list[GemmConfig]:
    """`count` configs of the problem's space spread over its measured ranking (the 8 fastest and
    the rest evenly spaced), or a seeded random sample when the problem was never measured."""
    from kernel_select.space import for_problem

    space = for_problem(problem, device, "exhaustive")
    rows = None
    if data is not None:
        pid = problem_ids.id_of(problem)  # the problem's layout: its rows, not the nn twin's
        rows = data[(data["problem_id"] == pid) & (data["backend"] == "triton")
                    & np.isfinite(data["runtime_ms"])]
    if rows is None or rows.empty:
        rng = np.random.default_rng(seed)
        idx = rng.choice(len(space), size=min(count, len(space)), replace=False)
        return [space[i] for i in sorted(idx)]
    ordered = rows.sort_values("runtime_ms")
    keys = [tuple(int(v) for v in r) for r in ordered[list(dataset.CONFIG_COLUMNS)].to_numpy()]
    top = keys[:8]
    rest = keys[8:]
    step = max(1, len(rest) // max(count - len(top), 1))
    chosen = top + rest[::step][: max(count - len(top), 0)]
    return [GemmConfig.from_key(k) for k in chosen]


def _pinning_lut(problem: Problem, device: DeviceSpec, configs: list[GemmConfig], path: Path) -> None:
    from kernel_select.lut import parse_lut, save_lut
    from kernel_select.lut.schema import SCHEMA_VERSION

    raw = {"schema_version": SCHEMA_VERSION, "devices": {device.key: {problem.op: {problem.dtype: [
        {"m": problem.m, "n": problem.n, "k": problem.k, "layout": problem.layout,
         "configs": [c.model_dump() for c in configs], "note": "fidelity check"}]}}}}
    save_lut(parse_lut(json.dumps(raw), source="<fidelity>"), path)


def inductor_timings(problem: Problem, device: DeviceSpec, configs: list[GemmConfig],
                     workdir: Path) -> tuple[dict[GemmConfig, float], float]:
    """Inductor's own timing of each config (ms) and the compile's wall time."""
    import torch

    from kernel_select import inductor
    from kernel_select.offline.harness.timer import operands

    lut_path = workdir / f"fidelity_{problem.m}x{problem.n}x{problem.k}_{problem.layout}.json"
    _pinning_lut(problem, device, configs, lut_path)
    a, b = operands(problem, "cuda")  # the harness's views: Inductor compiles for their strides
    torch._dynamo.reset()
    with inductor.enabled(gemm_topk=len(configs), kernel_lut_path=str(lut_path), gemm_device=device.key), \
            inductor.record_autotuning() as records:
        # No padding: Inductor would otherwise time a padded problem (e.g. N 3420 -> 3424).
        compiled = torch.compile(lambda x, y: x @ y, options=inductor.max_autotune_options(
            max_autotune_gemm_backends="TRITON,ATEN", shape_padding=False, comprehensive_padding=False))
        start = time.perf_counter()
        compiled(a, b)
        torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    timings: dict[GemmConfig, float] = {}
    for record in records:
        for t in record.timings:
            if t.kind == "triton" and t.config is not None:
                timings[t.config] = min(t.ms, timings.get(t.config, math.inf))
    return timings, elapsed


def _planned(problem: Problem, configs: list[GemmConfig], literal_sizes: bool = False) -> list:
    from kernel_select.offline.harness.bench_plan import PlannedRun, compile_key

    return [PlannedRun(problem, c, compile_key(problem, c, False, literal_sizes=literal_sizes))
            for c in configs]


def harness_timings(problem: Problem, device: DeviceSpec, configs: list[GemmConfig], compiled: dict,
                    literal_sizes: bool = False) -> tuple[dict[GemmConfig, float], dict[GemmConfig, float]]:
    """The harness's median and min per config (every config re-timed as a contender)."""
    from kernel_select.offline.harness import bench

    runs = _planned(problem, configs, literal_sizes)
    options = bench.BenchOptions(contender_factor=math.inf)
    results, _ = bench.time_problem(runs, compiled, device, options)
    med, low = {}, {}
    for i, run in enumerate(runs):
        samples = [s for s in results[i].samples if math.isfinite(s)]
        if samples and results[i].status in ("ok", "capped"):
            med[run.config] = float(np.median(samples))
            low[run.config] = min(samples)
    return med, low


def check(problems: list[Problem], device: DeviceSpec, *, configs_per_problem: int = 40,
          data: pd.DataFrame | None = None, literal_sizes: bool = False,
          on_result: Callable[[FidelityResult], None] | None = None) -> list[FidelityResult]:
    """Fidelity of every problem; `on_result` sees each result as soon as it is measured (the CLI
    writes the JSON there, so a run stopped part-way keeps what it finished)."""
    from tqdm import tqdm

    from kernel_select.offline.harness import bench

    picked = {p: pick_configs(p, device, configs_per_problem, data) for p in problems}
    keys = bench.distinct_keys_of([r for p, cs in picked.items() for r in _planned(p, cs, literal_sizes)])
    compiled = bench.precompile(keys)  # all harness binaries at once, in parallel
    out = []
    with tempfile.TemporaryDirectory() as tmp, \
            _environ("TORCHINDUCTOR_CACHE_DIR", str(Path(tmp) / "inductor")):
        # Every problem has its own shape, so no cache can serve one problem's timings to another;
        # a fresh cache directory keeps earlier runs on this machine out as well.
        for problem in tqdm(problems, desc="fidelity", unit="problem"):
            configs = picked[problem]
            ind, compile_s = inductor_timings(problem, device, configs, Path(tmp))
            med, low = harness_timings(problem, device, configs, compiled, literal_sizes)
            result = _result(problem, configs, ind, med, low, compile_s)
            log.info("%s", result)
            out.append(result)
            if on_result is not None:
                on_result(result)
    return out


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the block, then restore it (the caller's process goes on)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def _result(problem: Problem, configs: list[GemmConfig], ind: dict[GemmConfig, float],
            med: dict[GemmConfig, float], low: dict[GemmConfig, float], compile_s: float) -> FidelityResult:
    """Inductor's timings against the harness's, over the configs both timed."""
    common = [c for c in configs if c in ind and c in med and math.isfinite(ind[c])]
    x = np.array([ind[c] for c in common])
    return FidelityResult(
        problem=str(problem), n_configs=len(common),
        spearman_median=spearman(x, np.array([med[c] for c in common])),
        spearman_min=spearman(x, np.array([low[c] for c in common])),
        median_ratio=float(np.median(x / np.array([med[c] for c in common]))) if common else math.nan,
        inductor_best=min(common, key=ind.get).short() if common else "",
        harness_best=min(common, key=med.get).short() if common else "",
        compile_s=compile_s,
        harness_best_ratio=ind[min(common, key=med.get)] / min(x) if common else math.nan)


def summarize(results: list[FidelityResult]) -> dict:
    """Medians over the problems where Inductor timed Triton choices; the others (M = 1, which
    Inductor does not lower to the mm template) are listed under `without_triton_choices`."""
    timed = [r for r in results if r.n_configs >= 3 and math.isfinite(r.spearman_median)]
    rho = [r.spearman_median for r in timed]
    return {"problems": len(timed),
            "median_spearman": float(np.median(rho)) if rho else None,
            "min_spearman": float(np.min(rho)) if rho else None,
            "median_time_ratio": float(np.median([r.median_ratio for r in timed])) if timed else None,
            "median_harness_best_ratio": _finite(np.median, [r.harness_best_ratio for r in timed]),
            "max_harness_best_ratio": _finite(np.max, [r.harness_best_ratio for r in timed]),
            "without_triton_choices": [r.problem for r in results if r not in timed],
            "results": [{k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                         for k, v in asdict(r).items()} for r in results]}


def _finite(statistic: Callable[[list[float]], Any], values: list[float]) -> float | None:
    """`statistic` of the finite values (results read from files written before a field have none)."""
    finite = [v for v in values if math.isfinite(v)]
    return float(statistic(finite)) if finite else None


def write_json(summary: dict, path: str | Path) -> None:
    """Write atomically, so a reader (or a resumed run) never sees half a file."""
    write_json_atomic(summary, path)


def read_json(path: str | Path) -> list[FidelityResult]:
    """The per-problem results of a JSON written by `write_json`.

    Raises:
        DatasetError: naming the file when it cannot be read or is not a fidelity summary.
    """
    raw = read_json_file(path, "fidelity results")
    try:
        return [FidelityResult(**{k: math.nan if v is None else v for k, v in entry.items()})
                for entry in raw["results"]]
    except (KeyError, TypeError, AttributeError) as exc:
        raise DatasetError(f"{path}: not a fidelity results file ({type(exc).__name__}: {exc})") from None
