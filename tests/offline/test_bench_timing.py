"""The timing driver's bookkeeping on CPU: the GPU timer is replaced by a scripted fake, so what is
checked here is which configs are warmed up, checked, re-timed and marked capped or incorrect."""

from __future__ import annotations

import dataclasses
import math

import pytest

from kernel_select.device import get_device
from kernel_select.offline.harness import bench
from kernel_select.offline.harness.bench_plan import plan
from kernel_select.offline.harness.timer import TimingStats
from kernel_select.problem import Problem

PROBLEM = Problem(512, 1024, 2048, "bfloat16")
DEVICE = get_device("h100")


class FakeTimer:
    """Config i runs (i + 1) ** 0.25 microseconds (ordered by i, all within 6x of each other, as
    configs of one tile are); `wrong` configs return a large relative error; `stalled` ones take
    100x longer the first time they are timed (a host stall); the launches made outside timed
    passes (warm-ups) are counted."""

    instances: list[FakeTimer] = []

    def __init__(self, problem: Problem, device: object, options: object, wrong: frozenset = frozenset(),
                 stalled: frozenset = frozenset()):
        self.layout = problem.layout
        self.torch = type("T", (), {"cuda": type("C", (), {"synchronize": staticmethod(lambda: None)})})
        self.wrong, self.stalled, self.warmups, self.passes = wrong, set(stalled), 0, []
        self.stats = TimingStats()
        FakeTimer.instances.append(self)

    def launch(self, run: object) -> None:
        self.warmups += 1

    def launch_cublas(self) -> None:
        self.warmups += 1

    def time_pass(self, items: list, *, check: set | None = None, gpu_ms: dict | None = None) -> dict:
        self.passes.append([ident for ident, _ in items])
        out = {}
        for ident, _fn in items:
            ms = 0.5 if ident == "aten" else (ident + 1) ** 0.25 * 1e-3
            if ident in self.stalled:
                ms *= 100
                self.stalled.discard(ident)
            err = 1.0 if ident in self.wrong else 0.0
            out[ident] = (ms, err if check is not None and ident in check else math.nan)
        return out


@pytest.fixture()
def runs(monkeypatch: pytest.MonkeyPatch):
    FakeTimer.instances.clear()
    planned = plan([PROBLEM], DEVICE)[0]
    monkeypatch.setattr(bench, "ProblemTimer",
                        lambda p, d, o: FakeTimer(p, d, o, frozenset({3})))
    return planned


def test_the_timer_builds_operands_in_the_planned_layout(monkeypatch: pytest.MonkeyPatch):
    FakeTimer.instances.clear()
    monkeypatch.setattr(bench, "ProblemTimer", FakeTimer)
    for layout in ("nn", "tn"):
        runs = plan([dataclasses.replace(PROBLEM, layout=layout)], DEVICE)[0]
        bench.time_problem(runs, {}, DEVICE, bench.BenchOptions(reps=1))
        assert FakeTimer.instances[-1].layout == layout


def test_contenders_are_retimed_and_the_rest_capped(runs):
    options = bench.BenchOptions(reps=3, contender_factor=1.5)
    results, cublas = bench.time_problem(runs, {}, DEVICE, options)
    timer = FakeTimer.instances[-1]
    assert len(timer.passes) == 1 + 3  # pass 1, then `reps` passes over the contenders
    retimed = {i for i in timer.passes[1] if i != "aten"}
    assert retimed == set(range(bench.MIN_CONTENDERS + 1)) - {3}  # the 24 fastest correct ones + ...
    assert all(len(results[i].samples) == 4 for i in retimed)
    capped = {i for i, r in results.items() if r.status == "capped"}
    assert capped == set(range(len(runs))) - retimed - {3}
    assert all(len(results[i].samples) == 1 for i in capped)
    assert results[3].status == "incorrect"  # checked on its binary's first problem
    assert len(cublas.samples) == 4 and cublas.status == "ok"


def test_compile_failures_are_reported_not_timed_and_loaded_binaries_not_warmed(runs):
    failed = {runs[0].key: ("compile_error", "boom")}
    loaded = {run.key for run in runs[1:]}
    results, _ = bench.time_problem(runs, failed, DEVICE, bench.BenchOptions(reps=1), loaded=loaded)
    timer = FakeTimer.instances[-1]
    assert results[0].status == "compile_error" and results[0].samples == []
    assert 0 not in timer.passes[0]
    # only cuBLAS was warmed: every binary but the failed one was already loaded by this process
    assert timer.warmups == 1


def test_each_binary_is_checked_on_its_first_problems_only(runs):
    checked: dict = {}
    for _ in range(bench.CHECKS_PER_KERNEL):
        bench.time_problem(runs, {}, DEVICE, bench.BenchOptions(reps=1), checked=checked)
    keys = {run.key for run in runs}
    assert all(checked[key] >= bench.CHECKS_PER_KERNEL for key in keys)


def test_an_implausible_single_sample_gets_a_second_opinion(runs, monkeypatch):
    stalled = frozenset({200, 201})
    monkeypatch.setattr(bench, "ProblemTimer",
                        lambda p, d, o: FakeTimer(p, d, o, frozenset({3}), stalled))
    stats = bench.TimingStats()
    results, _ = bench.time_problem(runs, {}, DEVICE, bench.BenchOptions(reps=1), stats=stats)
    timer = FakeTimer.instances[-1]
    assert timer.passes[1] == [200, 201]  # only the two stalled samples are timed again
    assert results[200].samples == [pytest.approx(201 ** 0.25 * 1e-3)]  # the smaller sample is kept
    assert results[200].status == "capped"
    assert (stats.suspects, stats.suspects_lowered) == (2, 2)
    assert len(timer.passes) == 1 + 1 + 1  # pass 1, the second opinions, one contender pass


def test_the_suspect_ratio_is_measured_against_the_configs_of_the_same_tile(runs, monkeypatch):
    # 100x the fastest config overall, but not 8x the fastest config of its own tile: no second opinion
    first_of_tile = {}
    for i, run in enumerate(runs):
        first_of_tile.setdefault((run.config.block_m, run.config.block_n), i)
    target = max(first_of_tile.values())
    tile_mates = [i for i, run in enumerate(runs) if i != target and (run.config.block_m, run.config.block_n)
                  == (runs[target].config.block_m, runs[target].config.block_n)]

    class Slow(FakeTimer):
        def time_pass(self, items, **kw):
            out = super().time_pass(items, **kw)
            return {i: (ms * 100 if i == target or i in tile_mates else ms, e) for i, (ms, e) in out.items()}

    monkeypatch.setattr(bench, "ProblemTimer", lambda p, d, o: Slow(p, d, o))
    stats = bench.TimingStats()
    bench.time_problem(runs, {}, DEVICE, bench.BenchOptions(reps=1), stats=stats)
    assert stats.suspects == 0
