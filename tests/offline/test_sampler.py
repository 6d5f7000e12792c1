"""The coverage sampler, the architecture table, the family split and GPU sharding (CPU only)."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from kernel_select.device import get_device
from kernel_select.errors import ProblemError
from kernel_select.offline.data import sampler, shapes
from kernel_select.offline.data.architectures import ARCHITECTURES, KINDS, layer_gemms
from kernel_select.offline.harness.bench_plan import distinct_keys, plan
from kernel_select.offline.harness.pipeline import RowWriter
from kernel_select.offline.harness.sharding import merge_parts, part_path, shard_problems, sharded_summary
from kernel_select.offline.data.splits import family_holdout
from kernel_select.problem import Problem
from tests.offline.test_bench_plan import _rows


@pytest.fixture(scope="module")
def coverage():
    return sampler.coverage_shapes(2000, seed=1)


def test_coverage_meets_every_minimum_share(coverage):
    assert len(coverage) == 2000
    assert sampler.check_shares(coverage) == []
    assert all(1 <= s.m <= 16384 and 2.0 * s.m * s.n * s.k <= 1e11 for s in coverage)
    assert len({s.family for s in coverage if not s.family.startswith("sampler:")}) >= 30


def test_groups_are_contiguous_and_share_compiled_binaries(coverage):
    runs = [list(g) for _, g in itertools.groupby(coverage, key=lambda s: s.group)]
    assert len(coverage) / len(runs) >= 64  # problems of a group are collected in long stretches
    group = next(g for g in runs if len(g) >= 100 and "/N<=16384/K<=16384" in g[0].group)[:40]
    planned = plan([s.problem() for s in group], get_device("h100"))
    pairs = sum(map(len, planned))
    assert pairs / len(distinct_keys(planned)) > 8  # one binary serves many problems


def test_architecture_table_covers_kinds_and_backward_gemms():
    assert len(ARCHITECTURES) >= 30 and {a.kind for a in ARCHITECTURES} == set(KINDS)
    llama = next(a for a in ARCHITECTURES if a.name == "llama3-8b")
    gemms = {(g.layer, g.m, g.n, g.k, g.layout) for g in layer_gemms(llama)}
    # nn.Linear(14336 -> 4096): W stored (4096, 14336); dW has W's shape
    assert {("down_proj fwd", 4096, 4096, 14336, "nt"), ("down_proj dX", 4096, 14336, 4096, "nn"),
            ("down_proj dW", 4096, 14336, 4096, "tn")} <= gemms


@pytest.mark.parametrize("cap", [0, -1, float("nan"), 100])
def test_a_cap_no_problem_meets_is_refused(cap):
    with pytest.raises(ProblemError, match="max_flop"):
        shapes.random_shapes(3, max_flop=cap)
    with pytest.raises(ProblemError, match="max_flop"):
        sampler.coverage_shapes(3, max_flop=cap)


def test_a_tiny_cap_still_returns_quickly():
    small = shapes.random_shapes(20, max_flop=shapes.SMALLEST_FLOP)
    assert all((s.m, s.n, s.k) == (1, 16, 16) for s in small)


def test_shapes_cli_max_flop_zero_exits_2_at_once(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "kernel_select.cli", "shapes", "--out",
                           str(tmp_path / "s.json"), "--max-flop", "0"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "--max-flop" in proc.stderr and proc.stderr.count("\n") == 1


def test_coverage_roundtrips_with_provenance(tmp_path, coverage):
    path = tmp_path / "c.json"
    shapes.save(coverage[:50], path)
    loaded = shapes.load(path)
    assert loaded == coverage[:50]
    assert {"family", "layer", "pass"} == set(loaded[0].provenance())


def test_family_holdout_names_architectures_and_one_alignment_class():
    assert family_holdout({"family": "gemma2-9b", "n": 4096, "k": 3584})
    assert family_holdout({"family": "sampler:nodd-kodd", "n": 33, "k": 101})
    assert not family_holdout({"family": "sampler:nodd-k8", "n": 33, "k": 104})
    assert not family_holdout({"family": "llama3-8b", "n": 4096, "k": 4096})


def test_sharding_keeps_groups_whole_and_balances_gpus():
    problems = [Problem(m, 256, 256) for m in range(1, 101)]
    groups = [f"g{i // 10}" for i in range(70)] + [f"h{i}" for i in range(30)]
    shards = shard_problems(problems, groups, 2)
    assert sorted(i for s in shards for i in s) == list(range(100))
    for shard in shards:
        assert shard == sorted(shard)
    owner = {groups[i]: g for g, s in enumerate(shards) for i in s}
    assert all(owner[groups[i]] == g for g, s in enumerate(shards) for i in s)  # no group split
    assert abs(len(shards[0]) - len(shards[1])) <= 10


def test_sharding_weighs_groups_by_cost_so_the_gpus_finish_together():
    problems = [Problem(m, 256, 256) for m in range(1, 9)]
    groups = ["big", "a", "a", "b", "b", "c", "c", "c"]
    costs = [9.0] + [1.0] * 7  # one expensive problem outweighs three cheap groups
    shards = shard_problems(problems, groups, 2, costs)
    assert shards == [[0], [1, 2, 3, 4, 5, 6, 7]]
    assert shard_problems(problems, groups, 2) == [[0, 5, 6, 7], [1, 2, 3, 4]]  # by count: 4 and 4


def test_group_costs_charge_compile_where_a_group_needs_many_keys():
    from kernel_select.offline.harness.sharding import group_costs

    device = get_device("h100")
    shared = [Problem(m, 4096, 4096, "bfloat16") for m in (512, 1024, 2048)]  # one key set, reused
    odd = [Problem(512, n, 4096, "bfloat16") for n in (4095, 4093, 4091)]  # same keys too, fewer reuses
    costs = group_costs(shared + odd[:1], ["s"] * 3 + ["o"], device, "exhaustive")
    rows = len(plan(shared[:1], device)[0]) + 1
    assert costs[0] == costs[1] == costs[2] >= rows  # timing bound: rows plus the fixed cost
    assert costs[3] > costs[0]  # a lone problem pays its whole compile


def test_gpu_parts_merge_into_the_output_and_the_summary_counts_each_gpu(tmp_path):
    from kernel_select.offline.data import dataset

    out = tmp_path / "d.parquet"
    dataset.append(out, _rows("bfloat16/mm/1x8x16x16", [1.0]))
    parts = [part_path(out, gpu) for gpu in range(3)]
    dataset.append(parts[0], _rows("bfloat16/mm/1x16x16x16", [1.0, 2.0]))
    dataset.append(parts[0], _rows("bfloat16/mm/1x17x16x16", [1.0, 2.0]))
    dataset.append(parts[2], _rows("bfloat16/mm/1x18x16x16", [3.0]))  # GPU 1 wrote nothing
    merged = merge_parts(out, parts)
    assert merged == [(2, 4), (0, 0), (1, 1)]
    assert not any(p.exists() for p in parts)
    assert dataset.read(out)["problem_id"].nunique() == 4
    line = sharded_summary(merged, 30.0)
    assert line.startswith("3 GPUs: 3 problems, 5 rows in 30.0 s wall")
    assert "10 rows per minute, 3 per GPU-minute" in line and "GPU 1: 0 problems, 0 rows" in line


def test_row_writer_appends_in_the_background(tmp_path):
    out = tmp_path / "d.parquet"
    writer = RowWriter(out)
    for m in (16, 17, 18):
        writer.put(_rows(f"bfloat16/mm/1x{m}x16x16", [1.0]).to_dict("records"))
    writer.close()
    assert writer.rows_written == 3
    from kernel_select.offline.data import dataset
    assert dataset.read(out)["problem_id"].nunique() == 3


def test_sharded_run_merges_leftover_parts_then_gives_each_gpu_whole_groups(tmp_path, monkeypatch):
    """The parent's flow with the GPU workers replaced by in-process fakes that write their parts."""
    import types

    import torch

    from kernel_select.offline.data import dataset
    from kernel_select.offline.harness import bench, sharding

    out = tmp_path / "d.parquet"
    leftover = _rows("bfloat16/mm/1x16x16x16", [1.0])  # a killed run's part: counts as measured
    dataset.append(sharding.part_path(out, 1), leftover)
    name = leftover["device_name"][0]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(name=name))
    given: dict[int, list] = {}

    def fake_worker(ctx, gpu, args):
        problems, part = args[0], args[1]
        given[gpu] = problems
        for p in problems:
            dataset.append(part, _rows(f"bfloat16/mm/1x{p.m}x{p.n}x{p.k}", [float(gpu + 1)]))
        return types.SimpleNamespace(join=lambda: None, exitcode=0)

    monkeypatch.setattr(sharding, "_start_on_gpu", fake_worker)
    problems = [Problem(m, 16, 16) for m in (16, 17, 18, 19, 20)]
    df = sharding.run_sharded(problems, out, get_device("h100"), 2, bench.BenchOptions(),
                              groups=["a", "a", "b", "b", "c"])
    assert sorted(p.m for ps in given.values() for p in ps) == [17, 18, 19, 20]  # 16 was in the part
    # whole groups, each to the GPU with the least work so far; compiling one key set outweighs
    # timing two tiny problems, so a, b and c weigh the same: a -> 0, b -> 1, c -> 0
    assert {gpu: [p.m for p in ps] for gpu, ps in given.items()} == {0: [17, 20], 1: [18, 19]}
    assert df["problem_id"].nunique() == 5
    assert not list(tmp_path.glob("d.gpu*.parquet"))


def test_more_gpus_than_the_host_has_is_refused(tmp_path, monkeypatch):
    import torch

    from kernel_select.errors import OptionError
    from kernel_select.offline.harness import bench, sharding

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(OptionError, match="--gpus 2: this host has 1"):
        sharding.run_sharded([Problem(16, 16, 16)], tmp_path / "d.parquet", get_device("h100"), 2,
                             bench.BenchOptions())
