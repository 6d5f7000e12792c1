"""Batched GEMMs on CPU: compile keys, the config space, rows, operands, shapes files, the gap plan
(data/shapes_bmm_h100.json), its cost estimate and its splits."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.errors import ProblemError
from kernel_select.layouts import layout_of
from kernel_select.offline.data import dataset, problem_ids, shapes, splits
from kernel_select.offline.data.plans import gap_plan
from kernel_select.offline.harness import bench, cost
from kernel_select.offline.harness.bench_plan import compile_key, distinct_keys, plan, reuse_order
from kernel_select.offline.harness.timer import operands
from kernel_select.problem import Problem
from kernel_select.space import for_problem

H100 = get_device("h100")
ROOT = Path(__file__).resolve().parents[2]
PLAN_FILE = ROOT / "data" / "shapes_bmm_h100.json"
CFG = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)


def test_a_bmm_key_names_the_bmm_kernel_and_takes_the_bmm_templates_hint_rule():
    decode = Problem(4, 2048, 128, "bfloat16", batch=32, op="bmm", layout="nt")
    key = compile_key(decode, CFG, allow_tf32=False)
    assert key.kernel == "bmm"
    # triton_bmm tests the strides only: M = 4 < BLOCK_M keeps the hint that triton_mm would drop
    assert key.a_hint and key.b_hint
    assert not compile_key(Problem(4, 2048, 128, "bfloat16", layout="nt"), CFG, False).a_hint
    assert compile_key(Problem(4, 2048, 128, "bfloat16", layout="nt"), CFG, False).kernel == "mm"
    baddbmm = Problem(4, 2048, 128, "bfloat16", batch=32, op="baddbmm", layout="nt")
    assert compile_key(baddbmm, CFG, False) == key  # timed as bmm: same kernel, same binary


def test_batch_and_m_are_runtime_arguments_so_their_problems_share_binaries():
    row_major = [Problem(m, 1024, 128, "bfloat16", batch=b, op="bmm", layout="nt")
                 for m, b in ((256, 8), (512, 64), (1024, 512))]
    planned = plan(row_major, H100, torch_version="2.11.0")
    assert len(distinct_keys(planned)) == len(planned[0])
    # A read transposed: M is A's row stride, its divisor is compiled in (as mm does)
    tn = [Problem(m, 64, 1024, "bfloat16", batch=8, op="bmm", layout="tn") for m in (1024, 1032)]
    keys = [compile_key(p, CFG, False) for p in tn]
    assert (keys[0].m_div, keys[1].m_div) == (16, 8)


def test_the_bmm_space_is_the_mm_space_of_the_per_batch_sizes():
    """Inductor 2.11 registers one heuristic class for triton::mm and triton::bmm and feeds it the
    per-batch (m, n, k); the batch size plays no part."""
    for m, n, k in ((1, 4096, 64), (2048, 2048, 128), (512, 80, 8192)):
        mm = for_problem(Problem(m, n, k, "float16"), H100)
        for batch in (8, 1024):
            assert for_problem(Problem(m, n, k, "float16", batch=batch, op="bmm", layout="nt"), H100) == mm


def test_problems_past_32_bit_offsets_or_the_grid_are_refused():
    with pytest.raises(ProblemError, match="bmm 64x8192x8192x128.*64-bit offsets"):
        plan([Problem(8192, 8192, 128, batch=64, op="bmm")], H100)
    with pytest.raises(ProblemError, match="batch 70000 exceeds"):
        plan([Problem(1, 16, 16, batch=70000, op="bmm")], H100)


def test_shapes_files_carry_op_and_batch(tmp_path):
    planned = [shapes.Shape(16, 2048, 64, "bfloat16", "attn-scores q@k^T", family="attn-scores",
                            layout="nt", op="bmm", batch=32),
               shapes.Shape(16, 2048, 64, "bfloat16", "seed fwd")]
    path = tmp_path / "s.json"
    shapes.save(planned, path)
    entries = json.loads(path.read_text())
    assert entries[0]["op"] == "bmm" and entries[0]["batch"] == 32
    assert "op" not in entries[1] and "batch" not in entries[1]  # mm files stay as they were
    assert shapes.load(path) == planned
    assert planned[0].problem() == Problem(16, 2048, 64, "bfloat16", batch=32, op="bmm", layout="nt")
    path.write_text(json.dumps([{"m": 1, "n": 2, "k": 3, "batch": 4}]))
    with pytest.raises(ProblemError, match=r"s.json\[0\].*no batch dimension"):
        shapes.load(path)


def test_rows_of_a_bmm_problem_name_it_and_the_gpu_that_timed_it():
    problem = Problem(16, 2048, 64, "bfloat16", batch=32, op="bmm", layout="nt")
    runs = plan([problem], H100, search_space="default", torch_version="2.11.0")[0]
    timed = {i: bench._Timed(samples=[1.0 + i]) for i in range(len(runs))}
    prov = {"device_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "torch_version": "2.11.0",
            "triton_version": "3.6.0", "git_sha": "abc", "device_index": 1}
    rows = pd.DataFrame(bench.rows_for(runs, timed, bench._Timed(samples=[0.5]), prov, bench.BenchOptions(),
                                       {"family": "attn-scores", "layer": "q@k^T", "pass": "coverage"}))
    frame = dataset.conform(rows)
    assert set(frame["problem_id"]) == {"bfloat16/bmm/32x16x2048x64/nt"}
    assert set(frame["op"]) == {"bmm"} and set(frame["batch"]) == {32} and set(frame["device_index"]) == {1}
    assert set(frame["split"]) == {splits.split_of("bfloat16/bmm/32x16x2048x64")}
    assert (frame["backend"] == "aten").sum() == 1 and set(frame["family"]) == {"attn-scores"}


def test_files_before_version_3_read_with_no_gpu_recorded(tmp_path):
    from tests.offline.test_bench_plan import _rows

    frame = _rows("bfloat16/mm/1x16x16x16", [1.0])
    assert "device_index" not in frame.columns
    assert set(dataset.conform(frame)["device_index"]) == {-1}


@pytest.mark.parametrize("layout", ["nn", "nt", "tn"])
def test_batched_operands_are_contiguous_batches_in_the_problems_layout(layout):
    problem = Problem(24, 40, 56, "float32", batch=3, op="bmm", layout=layout)
    a, b = operands(problem, "cpu")
    assert a.shape == (3, 24, 56) and b.shape == (3, 56, 40)
    assert layout_of(a, b) == layout
    for x, transposed in ((a, layout[0] == "t"), (b, layout[1] == "t")):
        stored = x.transpose(-2, -1) if transposed else x
        assert stored.is_contiguous()  # batch stride = one matrix, as programs lay batches out


def test_the_committed_gap_plan_is_what_the_generator_writes(tmp_path):
    written = tmp_path / "plan.json"
    shapes.save(gap_plan.gap_plan(), written)
    assert json.loads(written.read_text()) == json.loads(PLAN_FILE.read_text())


@pytest.fixture(scope="module")
def committed():
    planned_shapes = shapes.load(PLAN_FILE)
    problems = [s.problem() for s in planned_shapes]
    return planned_shapes, reuse_order(plan(problems, H100, torch_version="2.11.0"))


def test_the_gap_plan_covers_each_family_in_few_compile_classes(committed):
    planned_shapes, planned = committed
    counts = gap_plan.composition(planned_shapes)
    assert len(planned_shapes) >= 200
    assert set(counts["family"]) == {"attn-scores", "attn-values", "attn-backward", "moe-experts", "large-m",
                                     "fp32-odd-k"}
    assert set(counts["dtype"]) == {"bfloat16", "float16", "float32"}
    assert set(counts["layout"]) == {"nn", "nt", "tn"}
    bmm = [s for s in planned_shapes if s.op == "bmm"]
    assert {s.dtype for s in bmm} == {"bfloat16", "float16", "float32"}
    assert min(s.batch for s in bmm) >= 8 and max(s.batch for s in bmm) <= 1024
    assert {s.k for s in bmm if s.family == "attn-scores"} == {64, 80, 96, 128, 256}
    assert any(s.m <= 16 and s.n >= 1024 for s in bmm if s.family == "attn-scores")  # decode
    assert max(s.m for s in planned_shapes if s.family == "large-m") == 65536
    assert any(s.k % 2 for s in planned_shapes if s.dtype == "float32" and s.op == "mm")
    groups = [s.group for s in planned_shapes]  # each class contiguous in the file
    assert all(g not in groups[:i] for i, g in enumerate(groups) if i and groups[i - 1] != g)
    assert len(set(groups)) <= 16


def test_the_gap_plan_fits_the_device_scripts_bound(committed):
    _, planned = committed
    one = cost.estimate(planned, workers=15, gpus=1)
    two = cost.estimate(planned, workers=30, gpus=2)
    assert one.keys == len(distinct_keys(planned)) and one.rows == sum(len(r) + 1 for r in planned)
    assert one.wall_s < 460  # data/collect.sh run with MAX_SECONDS=460
    assert two.wall_s < one.wall_s and len(two.gpu_rows) == 2 and sum(two.gpu_rows) == one.rows


def test_the_estimate_waits_for_compile_and_splits_work_over_gpus():
    problems = [Problem(m, 4096, 4096, "bfloat16") for m in (512, 1024, 2048, 4096)]
    planned = plan(problems, H100, torch_version="2.11.0")
    slow, fast = cost.estimate(planned, workers=2), cost.estimate(planned, workers=64)
    assert slow.wall_s > fast.wall_s and slow.gpu_wait_s[0] > fast.gpu_wait_s[0]
    assert slow.compile_core_s == pytest.approx(slow.keys * cost.COMPILE_CORE_S[("mm", "bfloat16")])
    fp32 = cost.estimate(plan([Problem(512, 4096, 4096, "float32")], H100, torch_version="2.11.0"), 15)
    assert fp32.compile_core_s / fp32.keys > 3 * slow.compile_core_s / slow.keys


def test_splits_hold_out_the_batched_moe_family_and_hash_bmm_ids(committed):
    planned_shapes, _ = committed
    moe = [s for s in planned_shapes if s.family == "moe-experts"]
    assert moe and all(splits.family_holdout({"family": s.family, "n": s.n, "k": s.k}) for s in moe)
    assert not splits.family_holdout({"family": "attn-scores", "n": 2048, "k": 64})
    ids = [problem_ids.id_of(s.problem()) for s in planned_shapes if s.op == "bmm"]
    assert all(i.startswith(("bfloat16/bmm/", "float16/bmm/", "float32/bmm/")) for i in ids)
    hashed = {splits.split_of(i) for i in ids}
    assert hashed == {"train", "val", "test"}
    nt = next(i for i in ids if i.endswith("/nt"))
    assert splits.split_of(nt) == splits.split_of(nt[:-3])  # every layout: its "nn" id's split
    frame = pd.DataFrame({"problem_id": ids, "split": [splits.split_of(i) for i in ids],
                          "family": [s.family for s in planned_shapes if s.op == "bmm"],
                          "n": [s.n for s in planned_shapes if s.op == "bmm"],
                          "k": [s.k for s in planned_shapes if s.op == "bmm"]})
    masks = splits.split_masks(frame, shapes_files=[])
    held = set(frame.loc[masks["family"], "family"])
    assert held == {"moe-experts"} and not (masks["family"] & (masks["train"] | masks["val"])).any()
