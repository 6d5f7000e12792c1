"""A stand-in for the benchmark harness on CPU: `pipeline.run_bench`'s signature, rows built by the
harness's own `rows_for` with runtimes from tests/synthetic.py's roofline, appended problem by problem
as the harness appends them; it can stop after a number of problems as a killed run does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_select.device import DeviceSpec
from kernel_select.offline.data import dataset, problem_ids
from kernel_select.offline.harness import bench
from kernel_select.offline.harness.bench_plan import PlannedRun
from kernel_select.problem import Problem
from tests.synthetic import synthetic_runtime_ms


class Killed(KeyboardInterrupt):
    """What a kill looks like to calibrate: the run stops between two problems."""


class FakeHarness:
    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.asked: list[Problem] = []  # the problems each call was given, in order
        self.timed: list[Problem] = []
        self.max_seconds: list[float] = []

    def __call__(self, problems: Sequence[Problem], out: str | Path, device: DeviceSpec,
                 options: bench.BenchOptions, origins: dict | None = None, *,
                 planned: Sequence[list[PlannedRun]] | None = None,
                 on_problem: Callable[[Problem], None] | None = None) -> pd.DataFrame:
        self.asked += list(problems)
        self.max_seconds.append(options.max_seconds)
        assert planned is not None and [runs[0].problem for runs in planned] == list(problems)
        done = dataset.completed_problems(out, device.name)
        prov = {"device_name": device.name, "sm_count": device.sm_count, "torch_version": "2.11.0",
                "triton_version": "3.6.0", "git_sha": "fake", "device_index": 0}
        for runs in planned:
            problem = runs[0].problem
            assert problem_ids.id_of(problem) not in done, f"{problem} was measured already"
            if self.stop_after is not None and len(self.timed) == self.stop_after:
                raise Killed()
            results, cublas = _fake_results(runs)
            rows = bench.rows_for(runs, results, cublas, prov, options, (origins or {}).get(problem))
            dataset.append(out, pd.DataFrame(rows))
            self.timed.append(problem)
            if on_problem is not None:
                on_problem(problem)
        return dataset.read(out)


def _fake_results(runs: list[PlannedRun]) -> tuple[dict[int, bench._Timed], bench._Timed]:
    p = runs[0].problem
    keys = np.array([run.config.key for run in runs], dtype=np.float64)
    ms = synthetic_runtime_ms(p.m, p.n, p.k * p.batch, *(keys[:, j] for j in range(5)), p.dtype_bytes)
    results = {i: bench._Timed(samples=[float(t)] * 3) for i, t in enumerate(ms)}
    return results, bench._Timed(samples=[float(ms.min()) * 0.95] * 3)
