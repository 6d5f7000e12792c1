"""The nvMatmulHeuristics baseline: each problem asked about in its own layout, its suggestions mapped
onto measured configs; with a stand-in for the library, and with the real one when installed."""

from __future__ import annotations

import enum
import sys
import types
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from kernel_select.device import get_device
from kernel_select.offline.data import problem_ids
from kernel_select.offline.training.evaluate import problem_rows
from kernel_select.offline.training.nvmmh import nvmmh_report
from kernel_select.problem import Problem
from kernel_select.space import for_problem

H100 = get_device("h100")
CONFIG = ["block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m"]


def measured(problems: list[tuple[Problem, list[tuple[int, ...]], list[float]]]):
    """The scored rows of problems measured at the given config keys and times."""
    rows = [{**dict(zip(CONFIG, key)), "backend": "triton", "status": "ok", "runtime_ms": ms,
             "problem_id": problem_ids.problem_id(p.m, p.n, p.k, p.dtype, layout=p.layout),
             "m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, "layout": p.layout, "batch": p.batch, "op": p.op}
            for p, keys, times in problems for key, ms in zip(keys, times)]
    return problem_rows(pd.DataFrame(rows), "no rows")


class Layout(enum.IntEnum):
    NN_ROW_MAJOR = 0
    NT_ROW_MAJOR = 1
    TN_ROW_MAJOR = 2
    TT_ROW_MAJOR = 3


@dataclass
class Kernel:
    cta_tile_m: int
    cta_tile_n: int
    cta_tile_k: int
    warp_tile_m: int
    warp_tile_n: int
    stages: int
    split_k: int = 1


def stand_in(suggestions: dict[Layout, list[Kernel]], asked: list[tuple[int, int, int, Layout]]):
    """An nvMatmulHeuristics module whose suggestions depend on the layout only (and that records
    every query in `asked`)."""

    class Heuristics:
        def __init__(self, **_: object) -> None:
            pass

        def makeNvMatmulHeuristicsProblem(self, m, n, k, layout):  # noqa: N802 - its API's name
            return (m, n, k, Layout(layout))

        def get(self, problem, count, precision):
            asked.append(problem)
            return [{"kernel": kernel} for kernel in suggestions[problem[3]][:count]]

    return types.SimpleNamespace(
        NvMatmulHeuristicsInterfaceEx=Heuristics, NvMatmulHeuristicsMatmulLayout=Layout,
        NvMatmulHeuristicsTarget=types.SimpleNamespace(TRITON=3),
        NvMatmulHeuristicsFlags=types.SimpleNamespace(PERF_MODEL_BASED_AUTO_TUNING=8),
        NvMatmulHeuristicsNvidiaGpu=types.SimpleNamespace(H100_SXM=9000))


def test_each_problem_is_asked_about_in_its_own_layout(monkeypatch):
    # One size in two layouts: 64x128x64 s4 w4 is fastest in "nn", 128x64x32 s3 w8 in "nt", and
    # the stand-in suggests exactly that per layout.
    nn_best, nt_best = (64, 128, 64, 4, 4, 8), (128, 64, 32, 3, 8, 8)
    nn, nt = Problem(512, 512, 512, layout="nn"), Problem(512, 512, 512, layout="nt")
    scored = measured([(nn, [nn_best, nt_best], [1.0, 2.0]), (nt, [nn_best, nt_best], [2.0, 1.0])])
    asked: list = []
    nn_kernel, nt_kernel = Kernel(64, 128, 64, 32, 64, 4), Kernel(128, 64, 32, 32, 32, 3)
    library = stand_in({Layout.NN_ROW_MAJOR: [nn_kernel], Layout.NT_ROW_MAJOR: [nt_kernel, nn_kernel]}, asked)
    monkeypatch.setitem(sys.modules, "nvMatmulHeuristics", library)
    report = nvmmh_report(scored.rows, scored.problems, scored.groups, scored.runtime, H100, ks=(1, 2))
    assert [(problem[:3], problem[3]) for problem in asked] == [((512, 512, 512), Layout.NN_ROW_MAJOR),
                                                                ((512, 512, 512), Layout.NT_ROW_MAJOR)]
    assert report == {"topk": {"1": 1.0, "2": 1.0}, "problems": 2, "mapped_fraction": 1.0,
                      "failed_queries": 0}


def test_split_k_repeats_and_unmeasured_suggestions_are_dropped(monkeypatch):
    problem = Problem(512, 512, 512)
    scored = measured([(problem, [(64, 128, 64, 4, 4, 8), (128, 128, 32, 3, 8, 8)], [2.0, 1.0])])
    library = stand_in({Layout.NN_ROW_MAJOR: [
        Kernel(128, 128, 32, 64, 32, 3, split_k=2),  # split-K: Inductor's mm template has none
        Kernel(64, 128, 64, 32, 64, 4),  # 64x128x64 s4 w4: measured, 2 ms
        Kernel(64, 128, 64, 64, 32, 4),  # the same config again (another warp tile, as many warps)
        Kernel(256, 256, 64, 64, 64, 3),  # not measured
        Kernel(128, 128, 32, 64, 32, 3),  # 128x128x32 s3 w8: measured, 1 ms (the oracle)
    ]}, [])
    monkeypatch.setitem(sys.modules, "nvMatmulHeuristics", library)
    report = nvmmh_report(scored.rows, scored.problems, scored.groups, scored.runtime, H100, ks=(1, 2, 8))
    # k counts the suggestions that could be scored: the oracle is the second of them.
    assert report["topk"] == {"1": 0.5, "2": 1.0, "8": 1.0}
    assert report["mapped_fraction"] == pytest.approx(2 / 5)


def test_the_real_library_suggests_measured_configs_in_every_layout():
    pytest.importorskip("nvMatmulHeuristics")
    rng = np.random.default_rng(0)
    problems = []
    for layout in ("nn", "nt", "tn"):
        problem = Problem(4096, 4096, 4096, layout=layout)
        keys = [c.key for c in for_problem(problem, H100)]
        problems.append((problem, keys, list(rng.uniform(1.0, 2.0, len(keys)))))
    scored = measured(problems)
    report = nvmmh_report(scored.rows, scored.problems, scored.groups, scored.runtime, H100, ks=(1, 4, 16))
    assert report["problems"] == 3 and report["failed_queries"] == 0 and report["mapped_fraction"] > 0
    scores = [report["topk"][k] for k in ("1", "4", "16")]
    assert 0 < scores[0] <= scores[1] <= scores[2] <= 1
