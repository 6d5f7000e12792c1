"""Planning the benchmark: compile keys, shapes files and the dataset schema and resume logic."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest

from kernel_select.offline.data import dataset, problem_ids, shapes, splits
from kernel_select.offline.harness.bench_plan import PlanMemo, compile_key, distinct_keys, plan, pow2_divisor
from kernel_select.space import for_problem
from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.errors import DatasetError, ProblemError
from kernel_select.problem import Problem

H100 = get_device("h100")


def test_pow2_divisor_matches_what_a_literal_tells_the_compiler():
    assert [pow2_divisor(x) for x in (3420, 1280, 4096, 7, 24)] == [4, 16, 16, 1, 8]


def test_compile_key_carries_inductor_specializations():
    cfg = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
    key = compile_key(Problem(560, 1280, 3420), cfg, allow_tf32=True)
    assert (key.even_k, key.k_div, key.n_div, key.a_hint, key.b_hint) == (False, 4, 16, True, True)
    assert key.allow_tf32 is False  # only fp32 inputs take TF32
    small = compile_key(Problem(1, 1280, 4096), GemmConfig(block_m=16, block_n=128, block_k=64,
                                                           num_stages=3, num_warps=4), True)
    assert small.even_k and not small.a_hint  # M < BLOCK_M: Inductor drops the contiguity hint


def test_problems_with_one_alignment_share_binaries():
    planned = plan([Problem(560, 1280, 3420), Problem(2048, 1280, 3420)], H100)
    assert len(distinct_keys(planned)) == len(planned[0]) == len(planned[1])


def test_shape_generators_respect_caps_and_roundtrip(tmp_path):
    random_ = shapes.random_shapes(200, seed=3, max_flop=1e11)
    assert len(random_) == 200
    assert all(2 * s.m * s.n * s.k <= 1e11 for s in random_)
    assert all(s.m >= 1 and s.n >= 16 and s.k >= 16 for s in random_)
    # Sizes below 256 are powers of two; larger ones are multiples of 64 or 4 mod 8.
    for s in random_:
        for x in (s.m, s.n, s.k):
            assert (x < 256 and x & (x - 1) == 0) or (x >= 256 and (x % 64 == 0 or x % 8 == 4))
    assert shapes.random_shapes(50, seed=3) == shapes.random_shapes(50, seed=3)
    seed = shapes.seed_shapes()
    assert {(s.m, s.n, s.k) for s in seed} >= {(560, 1280, 3420), (560, 3420, 1280), (1280, 3420, 560)}
    path = tmp_path / "shapes.json"
    shapes.save(seed, path)
    assert shapes.load(path) == seed


def test_shapes_file_errors_name_the_entry(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([{"m": 1, "n": 2, "k": 3}, {"m": -1, "n": 2, "k": 3}]))
    with pytest.raises(ProblemError, match=r"bad.json\[1\].*m"):
        shapes.load(path)


def _rows(pid: str, runtimes: list[float]) -> pd.DataFrame:
    m, n, k = (int(x) for x in pid.split("/")[2].split("x")[1:])
    base = dict(problem_id=pid, m=m, n=n, k=k, batch=1, dtype="bfloat16", op="mm", layout="nn",
                backend="triton", group_m=8, even_k=False, allow_tf32=False, n_runs=1, status="ok",
                error="", split=splits.split_of(pid), device_name="NVIDIA H100 80GB HBM3", sm_count=132,
                torch_version="2.11.0", triton_version="3.6.0", git_sha="abc", timestamp="t",
                timing_method="events")
    # A distinct valid config per row: 7 block_m x 7 block_n x 8 stages before one repeats.
    return pd.DataFrame([dict(base, block_m=16 << i % 7, block_n=16 << i // 7 % 7, block_k=16,
                              num_stages=1 + i // 49 % 8, num_warps=1, runtime_ms=ms, runtime_min_ms=ms)
                         for i, ms in enumerate(runtimes)])


def test_dataset_append_resumes_and_replaces_problems(tmp_path):
    out = tmp_path / "d.parquet"
    a, b = problem_ids.problem_id(16, 16, 16, "bfloat16"), problem_ids.problem_id(32, 16, 16, "bfloat16")
    dataset.append(out, _rows(a, [1.0, 2.0]))
    dataset.append(out, _rows(b, [3.0, math.inf]))
    assert dataset.completed_problems(out) == {a, b}
    dataset.append(out, _rows(a, [5.0]))  # a re-run of a problem replaces its rows
    df = dataset.read(out)
    assert sorted(df[df.problem_id == a].runtime_ms) == [5.0]
    assert len(df) == 3
    assert dataset.read(out, split=splits.split_of(b))["problem_id"].str.contains(b).any()


def test_dataset_schema_errors(tmp_path):
    with pytest.raises(DatasetError, match="missing columns"):
        dataset.conform(pd.DataFrame({"m": [1]}))
    bad = _rows(problem_ids.problem_id(16, 16, 16, "bfloat16"), [1.0]).assign(status="weird")
    with pytest.raises(DatasetError, match="status"):
        dataset.conform(bad)
    (tmp_path / "x.parquet").write_text("not parquet")
    with pytest.raises(DatasetError, match="parquet"):
        dataset.read(tmp_path / "x.parquet")


def test_split_is_by_problem_and_fixed():
    ids = [problem_ids.problem_id(m, 128, 256, "bfloat16") for m in range(1, 2000)]
    drawn = [splits.split_of(p) for p in ids]
    share = {s: drawn.count(s) / len(drawn) for s in dataset.SPLITS}
    assert 0.65 < share["train"] < 0.75 and 0.1 < share["val"] < 0.2 and 0.1 < share["test"] < 0.2
    assert splits.split_of("bfloat16/mm/1x560x1280x3420") == splits.split_of("bfloat16/mm/1x560x1280x3420")


def test_literal_sizes_give_each_shape_its_own_binaries_and_change_nothing_else():
    # bench --literal-sizes: M, N and K compiled in as Inductor's template has them, so two shapes that
    # share every runtime-size binary share none; the keys differ from the shared ones by the sizes alone.
    problems = [Problem(560, 1280, 3420), Problem(2048, 1280, 3420)]
    shared = plan(problems, H100)
    literal = plan(problems, H100, literal_sizes=True)
    assert len(distinct_keys(literal)) == 2 * len(distinct_keys(shared))
    for shared_runs, literal_runs, problem in zip(shared, literal, problems):
        assert [r.config for r in literal_runs] == [r.config for r in shared_runs]
        assert {r.key.sizes for r in literal_runs} == {(problem.m, problem.n, problem.k)}
        assert [dataclasses.replace(r.key, sizes=None) for r in literal_runs] == [r.key for r in shared_runs]
    assert {r.key.sizes for runs in shared for r in runs} == {None}
    cfg = shared[0][0].config
    assert compile_key(problems[0], cfg, literal_sizes=True) == literal[0][0].key


def test_a_memo_shared_by_literal_and_runtime_plans_keeps_them_apart():
    memo = PlanMemo()
    problem = Problem(512, 4096, 4096)
    runtime = plan([problem], H100, memo=memo)[0]
    literal = plan([problem, Problem(1024, 4096, 4096)], H100, memo=memo, literal_sizes=True)
    assert runtime[0].key.sizes is None
    assert [runs[0].key.sizes for runs in literal] == [(512, 4096, 4096), (1024, 4096, 4096)]


def test_committed_dataset_meets_its_datasheet():
    df = dataset.read("data/h100.parquet")
    assert df["problem_id"].nunique() >= 400
    assert (df["runtime_ms"] < float("inf")).sum() >= 250_000
    per_dtype = df.groupby("dtype")["problem_id"].nunique()
    assert per_dtype["bfloat16"] > per_dtype.drop("bfloat16").sum()
    assert {"float16", "float32"} <= set(per_dtype.index)
    assert (df.groupby("problem_id")["backend"].apply(lambda b: (b == "aten").sum()) == 1).all()


def test_committed_coverage_dataset_meets_its_datasheet():
    df = dataset.read("data/h100_coverage.parquet")
    problems = df.drop_duplicates("problem_id")
    assert len(problems) == 1691 and len(df) == 1_160_609  # runs 1-4, data/README.md
    assert (df["runtime_ms"] < float("inf")).all()
    assert problems["family"].str.startswith("sampler:").sum() == 1307  # 389 of them odd-N
    assert problems.loc[~problems["family"].str.startswith("sampler:"), "family"].nunique() >= 30


@pytest.mark.parametrize("command", ["bench", "fidelity"])
def test_gpu_commands_fail_cleanly_without_a_gpu(command, capsys, tmp_path, monkeypatch):
    import torch

    from kernel_select.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    shapes_file = tmp_path / "s.json"
    shapes.save(shapes.seed_shapes()[:1], shapes_file)
    extra = ["--out", str(tmp_path / "o.parquet")] if command == "bench" else []
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--shapes", str(shapes_file), *extra])
    assert exit_info.value.code == 2
    assert f"{command}: needs a CUDA GPU" in capsys.readouterr().err


def test_plan_gives_each_problem_its_own_configs_and_keys_where_it_shares_a_signature():
    # plan() computes configs and keys once per key_signature: every problem must still get exactly
    # what for_problem and compile_key give it, across sizes around the block thresholds (powers
    # of two and their neighbours), K residues mod 256, every layout, mm and bmm, and fp32 with TF32.
    sizes = (1, 2, 15, 16, 17, 31, 64, 65, 128, 255, 256, 257, 511, 4096, 4100, 3420, 1337)
    problems = [Problem(m, n, k, dtype, batch=batch, op=op, layout=layout)
                for i, (m, n, k) in enumerate(zip(sizes, sizes[5:] + sizes[:5], sizes[9:] + sizes[:9]))
                for dtype, op, batch in (("bfloat16", "mm", 1), ("float32", "bmm", 3))
                for layout in ("nn", "nt", "tn", "tt")]
    problems += [Problem(512, 4096, k, "bfloat16") for k in (4096, 4096 + 16, 4096 + 48, 4096 + 256)]
    # TF32 is the problem's own flag: float32 problems with it, aligned as Inductor 2.11 wants them
    # under force_same_precision (check_benchmarkable refuses the others), beside their IEEE twins.
    tf32_sizes = ((16, 512, 512), (64, 1024, 520), (4096, 4096, 4096 + 256), (256, 4096, 4096 + 48))
    problems += [Problem(m, n, k, "float32", batch=batch, op=op, layout=layout, tf32=tf32)
                 for m, n, k in tf32_sizes for op, batch in (("mm", 1), ("bmm", 3))
                 for layout in ("nn", "nt", "tn") for tf32 in (False, True)]
    assert any(p.tf32 for p in problems)
    planned = plan(problems, H100, torch_version="2.11.0")
    for problem, runs in zip(problems, planned):
        configs = for_problem(problem, H100, "exhaustive", "2.11.0")
        assert [r.config for r in runs] == configs
        assert [r.key for r in runs] == [compile_key(problem, c) for c in configs], problem
        assert all(r.key.allow_tf32 is problem.tf32 for r in runs)
        assert all(r.problem is problem for r in runs)


def test_calls_sharing_a_memo_plan_what_calls_of_their_own_plan_and_share_key_objects():
    # A planner planning slice by slice shares one memo: a signature met again (here under another
    # device, search space and torch version too) must still be planned for what the call asks.
    problems = [Problem(m, n, k, dtype) for dtype in ("bfloat16", "float32")
                for m, n, k in ((64, 4096, 4096), (4096, 4096, 4096), (100, 1000, 513))]
    calls = [(problems[:3], H100, "exhaustive", None), (problems, get_device("a100"), "exhaustive", None),
             (problems[2:], H100, "default", None), (problems, H100, "exhaustive", "2.11.0"),
             (problems[1:], H100, "exhaustive", None)]
    memo = PlanMemo()
    shared = [plan(p, device, search_space=space, torch_version=torch, memo=memo)
              for p, device, space, torch in calls]
    for (p, device, space, torch), planned in zip(calls, shared):
        alone = plan(p, device, search_space=space, torch_version=torch)
        assert [[(r.problem, r.config, r.key) for r in runs] for runs in planned] == \
            [[(r.problem, r.config, r.key) for r in runs] for runs in alone]
    # the same problem (100 x 1000 x 513, bf16) under three calls: three spaces
    assert len({len(runs) for runs in (shared[0][2], shared[1][2], shared[2][0])}) == 3
    objects = {}
    for planned in shared:
        for runs in planned:
            for run in runs:
                assert objects.setdefault(run.key, run.key) is run.key  # one object per distinct key
