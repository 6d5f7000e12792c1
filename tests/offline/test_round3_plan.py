"""The round-3 H100 plan (data/shapes_round3_h100.json): what the generator writes, what it must never
hold, the strata it fills, and what collecting it in bounded runs costs (harness/cost.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kernel_select.device import get_device
from kernel_select.model.card import stratum
from kernel_select.offline.data import shapes, unseen
from kernel_select.offline.data.plans import (
    round3_groups, round3_plan, round3_schedule, round3_sources, round3_strata,
)
from kernel_select.offline.data.architectures import ARCHITECTURES
from kernel_select.offline.data.problem_ids import id_of
from kernel_select.offline.data.plans.sampler import shape_class
from kernel_select.offline.data.splits import HELD_OUT_FAMILIES
from kernel_select.offline.harness import cost
from kernel_select.offline.harness.bench_plan import check_benchmarkable, plan, pow2_divisor
from kernel_select.problem import Problem

ROOT = Path(__file__).resolve().parents[2]
PLAN_FILE = ROOT / "data" / "shapes_round3_h100.json"
H100 = get_device("h100")


@pytest.fixture(scope="module")
def committed() -> list[shapes.Shape]:
    return shapes.load(PLAN_FILE)


def test_the_committed_plan_is_what_the_generator_writes(tmp_path):
    written = tmp_path / "plan.json"
    shapes.save(round3_plan.round3_plan(), written)
    assert json.loads(written.read_text()) == json.loads(PLAN_FILE.read_text()), (
        "data/shapes_round3_h100.json differs from round3_plan.round3_plan(): regenerate it with "
        "python -m kernel_select.offline.data.plans.round3_plan --out data/shapes_round3_h100.json")


def test_no_problem_is_measured_unseen_held_out_or_planned_twice(committed):
    ids = [id_of(s.problem()) for s in committed]
    assert len(set(ids)) == len(ids)
    assert not set(ids) & round3_strata.excluded_ids()  # the measured H100 files and the unseen split
    assert not any(round3_strata.held_out(s) or unseen.is_unseen_family(s.family) for s in committed)


def test_every_stratum_of_the_card_reaches_the_target_with_its_own_dtype(committed):
    table = round3_strata.strata_table(committed, round3_strata.measured_training_strata())
    assert len(table) == 2 * 3 * 4  # op x dtype x M bucket
    short = [(key, own) for key, _, _, own, _ in table if own < round3_strata.STRATUM_TARGET]
    assert not short
    today = {key: count for key, count, *_ in table}
    assert today["bmm/float32/m<=4096"] == 0 and today["mm/float32/m>4096"] == 31  # what the plan fills


def test_every_problem_is_benchmarkable_and_its_fastest_config_within_the_cap(committed):
    for s in committed:
        problem = s.problem()
        check_benchmarkable(problem)
        assert cost.fastest_config_s(problem) <= round3_groups.MAX_FASTEST_S[s.dtype]
        assert 1 <= s.batch <= round3_groups.MAX_BATCH and s.pass_ == "coverage"


def test_shapes_come_from_the_architecture_table_and_none_from_the_unseen_generator(committed):
    table = {a.name for a in ARCHITECTURES}
    blocks = {b.family for b in round3_sources.ATTENTION}
    assert blocks - {round3_sources.SWEEP_FAMILY} <= table - HELD_OUT_FAMILIES
    planned_families = {s.family for s in committed}
    assert planned_families <= (table - HELD_OUT_FAMILIES) | {round3_sources.SWEEP_FAMILY, "round3-random"}
    unseen_names = {b.name for b in unseen.ATTENTION} | {e.name for e in unseen.EXPERTS}
    assert not {s.family for s in committed} & unseen_names
    assert round3_plan.SEED != unseen.SEED


def test_each_group_is_one_compile_class_in_one_stretch_of_the_file(committed):
    classes: dict[str, set[tuple[str, str]]] = {}
    for s in committed:
        classes.setdefault(s.group, set()).add((s.op, shape_class(s)))
    assert all(len(found) == 1 for found in classes.values())
    groups = [s.group for s in committed]
    starts = [g for i, g in enumerate(groups) if i == 0 or groups[i - 1] != g]
    assert len(starts) == len(set(groups)) == len(round3_schedule.schedule())


def test_the_plan_holds_what_the_issue_asks_for(committed):
    assert len(committed) >= 4000
    bmm = [s for s in committed if s.op == "bmm"]
    attention = [s for s in bmm if " T=" in s.layer]
    assert {(s.dtype, s.layout) for s in attention} == {(d, x) for d in round3_strata.DTYPES
                                                         for x in ("nn", "nt", "tn")}
    assert {stratum(s.op, s.dtype, s.m) for s in bmm} == {f"bmm/{d}/{b}" for d in round3_strata.DTYPES
                                                           for b in round3_strata.BUCKET_NAMES}
    keys = [int(s.layer.split(" T=")[1].split()[0]) for s in attention]
    assert sum(t % 8 != 0 for t in keys) > 0.8 * len(keys)  # token counts off multiples of 8
    assert min(s.batch for s in bmm) == 1 and max(s.batch for s in bmm) == 8192
    head_dims = {int(s.layer.split(" d")[1].split()[0]) for s in attention}
    assert min(head_dims) == 32 and max(head_dims) == 256 and len(head_dims) >= 10
    assert {s.layer[:3] for s in attention if s.layout == "tn"} == {"dK=", "dV="}
    experts = [s for s in bmm if "tokens/expert" in s.layer]
    assert sum(s.m <= 16 for s in experts) >= 30
    single = [s for s in committed if s.op == "mm"]
    assert {pow2_divisor(s.n) for s in single} == {pow2_divisor(s.k) for s in single} == {1, 2, 4, 8, 16}
    assert {s.layout for s in single} == {"nn", "nt", "tn"}
    assert sum(s.dtype == "float32" and s.m > 4096 for s in single) >= 100
    assert max(s.m for s in single if s.dtype == "float32") > 16384


def test_in_class_moves_a_size_into_its_alignment_class():
    for x in (17, 100, 257, 3420, 4097):
        for align in (1, 2, 4, 8):
            y = round3_groups.in_class(x, align)
            assert pow2_divisor(y) == align and abs(y - x) < 2 * align
        assert round3_groups.in_class(x, 16) % 16 == 0 and 0 <= round3_groups.in_class(x, 16) - x < 16
        for residue in (0, 64, 208):
            y = round3_groups.in_class(x, 16, residue)
            assert y % 256 == residue and y >= x and y - x < 256 and y >= 16


def test_single_gemm_ms_between_17_and_256_stay_in_the_groups_octave():
    import random

    rng = random.Random(0)
    ms = [round3_groups.single_m(rng, 1, 64) for _ in range(300)]
    assert all(33 <= m <= 64 or m in round3_groups.OCTAVES for m in ms)
    assert Counter(m in round3_groups.OCTAVES for m in ms)[True] > 50


# -- cost.bounded_runs: a collection in runs of a bounded length ------------------------------------

def _small_plan():
    # two compile classes of four large problems each: timing a problem takes about as long as
    # compiling its class on 64 workers, so a short bound cuts runs inside a class
    problems = [Problem(m, 8192, 8192, dtype) for dtype in ("bfloat16", "float16")
                for m in (8192, 12288, 16000, 16384)]
    return plan(problems, H100, torch_version="2.11.0")


def test_bounded_runs_split_the_plan_into_runs_within_the_bound():
    planned = _small_plan()
    whole = cost.estimate(planned, workers=64)
    bound = whole.wall_s / 3
    runs = cost.bounded_runs(planned, workers=64, max_seconds=bound)
    assert len(runs) >= 3
    assert sum(r.problems for r in runs) == len(planned) and sum(r.rows for r in runs) == whole.rows
    assert all(r.wall_s <= bound for r in runs)
    # every run compiles from an empty cache: a class cut by the bound is compiled again
    assert sum(r.keys for r in runs) > whole.keys
    kept = cost.bounded_runs(planned, workers=64, max_seconds=bound, keep_cache=True)
    assert sum(r.keys for r in kept) <= whole.keys  # a run's keys: those its own problems compile
    assert sum(r.wall_s for r in kept) < sum(r.wall_s for r in runs)


def test_bounded_runs_in_file_order_take_the_plan_as_it_is():
    planned = _small_plan()[::-1]  # float16 first
    whole = cost.estimate(planned, workers=64)
    runs = cost.bounded_runs(planned, workers=64, max_seconds=whole.wall_s / 3, order="file")
    first = cost.estimate(planned[:runs[0].problems], workers=64)
    assert (runs[0].rows, runs[0].keys) == (first.rows, first.keys)
    with pytest.raises(ValueError, match="order: expected 'reuse' or 'file'"):
        cost.bounded_runs(planned, workers=64, order="random")


def test_a_problem_no_run_can_finish_is_refused():
    with pytest.raises(ValueError, match="more than the 5 s bound"):
        cost.bounded_runs(_small_plan(), workers=1, max_seconds=5.0)


def test_collect_sh_passes_order_to_bench_only_when_set(tmp_path):
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    for tool in ("python3", "nvidia-smi"):  # stand-ins: record the bench command line, no GPU
        (bin_dir / tool).write_text(f'#!/usr/bin/env bash\necho "{tool} $*" >> "{calls}"\n')
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TMPDIR": str(tmp_path)}
    for order in ("file", None):
        run_env = {**env, "ORDER": order} if order else {k: v for k, v in env.items() if k != "ORDER"}
        out = tmp_path / "out.parquet"
        command = ["bash", str(ROOT / "data" / "collect.sh"), str(PLAN_FILE), str(out), "4"]
        subprocess.run(command, env=run_env, check=True, capture_output=True, cwd=ROOT)
    bench = [line for line in calls.read_text().splitlines() if "kernel_select.cli bench" in line]
    assert len(bench) == 2
    assert "--order file" in bench[0] and "--gpus 4" in bench[0]
    assert "--order" not in bench[1]
