"""Operand layouts in the harness, on the CPU: compile keys and hints, the timer's operands, problem
ids and splits, shapes files, resume, rows, and the layout filter of training and evaluation."""

from __future__ import annotations

import dataclasses

import json
import logging
from pathlib import Path

import pandas as pd
import pytest
import torch

from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.errors import DatasetError, ProblemError
from kernel_select.layouts import LAYOUTS, check_layout, layout_of, operand_strides
from kernel_select.offline.data import dataset, problem_ids, shapes, splits
from kernel_select.offline.harness import bench, pipeline
from kernel_select.offline.harness.bench_plan import compile_key, inductor_hint, plan
from kernel_select.offline.harness.timer import operands
from kernel_select.offline.training.training_data import prepare_rows
from kernel_select.problem import Problem
from tests.synthetic import synthetic_frame, untrained_mlp

H100 = get_device("h100")
CONFIG = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)


# -- compile keys and Inductor's hint condition -------------------------------------------------------

def test_each_layout_is_its_own_compile_key():
    problem = Problem(560, 1280, 3420)
    keys = {layout: compile_key(dataclasses.replace(problem, layout=layout), CONFIG, False)
            for layout in LAYOUTS}
    assert len(set(keys.values())) == 4
    assert keys["nn"] == compile_key(problem, CONFIG, False)  # "nn" is Problem's default
    assert {layout: key.m_div for layout, key in keys.items()} == {"nn": 1, "nt": 1, "tn": 16, "tt": 16}
    assert all(key.n_div == 16 and key.k_div == 4 for key in keys.values())


def test_transposed_a_keys_differ_by_the_divisibility_of_m_and_row_major_ones_do_not():
    def key(m: int, layout: str):
        return compile_key(Problem(m, 1280, 3420, layout=layout), CONFIG, False)

    assert key(560, "nn") == key(561, "nn") == key(1024, "nn")  # one binary for every M
    assert key(560, "tn") != key(561, "tn")  # M is A's row stride: its alignment is compiled in
    assert key(560, "tn") == key(1024, "tn")  # both multiples of 16


def test_the_hints_follow_inductors_template_condition():
    # contiguous either way, M >= BLOCK_M, K > 1
    assert inductor_hint(rows=128, k=64, stride_rows=64, stride_k=1, block=64)  # row-major
    assert inductor_hint(rows=128, k=64, stride_rows=1, stride_k=128, block=64)  # transposed view
    assert not inductor_hint(rows=128, k=64, stride_rows=72, stride_k=1, block=64)  # padded rows
    assert not inductor_hint(rows=32, k=64, stride_rows=64, stride_k=1, block=64)  # M < BLOCK_M
    assert not inductor_hint(rows=128, k=1, stride_rows=1, stride_k=1, block=64)  # K == 1
    for layout in LAYOUTS:
        key = compile_key(Problem(32, 1280, 3420, layout=layout), CONFIG, False)
        assert (key.a_hint, key.b_hint) == (False, True), layout  # M = 32 < BLOCK_M = 64
        key = compile_key(Problem(560, 64, 1, layout=layout), CONFIG, False)
        assert (key.a_hint, key.b_hint) == (False, False), layout  # K == 1


def test_plan_gives_every_run_its_problems_layout():
    planned = plan([Problem(64, 128, 256), Problem(64, 128, 256, layout="nt")], H100)
    assert {run.layout for run in planned[0]} == {"nn"}
    assert {run.layout for run in planned[1]} == {"nt"}
    assert not {run.key for run in planned[0]} & {run.key for run in planned[1]}  # no shared binary


# -- the timer's operands ----------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_timer_builds_each_operand_stored_as_its_layout_says(layout: str):
    problem = Problem(5, 24, 40, "float32", layout=layout)
    a, b = operands(problem, device="cpu", generator=torch.Generator().manual_seed(0))
    assert a.shape == (5, 40) and b.shape == (40, 24) and a.dtype == b.dtype == torch.float32
    assert (a.stride(), b.stride()) == operand_strides(5, 24, 40, layout)  # what the hints assume
    assert a.is_contiguous() == (layout[0] == "n") and b.is_contiguous() == (layout[1] == "n")
    assert a.t().is_contiguous() == (layout[0] == "t") and b.t().is_contiguous() == (layout[1] == "t")
    assert layout_of(a, b) == layout  # what pretune discovers for these operands
    assert 0.5 < float(b.std() * 40 ** 0.5) < 2  # B scaled by 1 / sqrt(K): outputs stay O(1)


def test_a_row_major_problems_operands_are_the_values_the_harness_always_drew():
    problem = Problem(6, 10, 12, "bfloat16")
    a, b = operands(problem, device="cpu", generator=torch.Generator().manual_seed(3))
    gen = torch.Generator().manual_seed(3)
    assert torch.equal(a, torch.randn(6, 12, generator=gen).to(torch.bfloat16))
    assert torch.equal(b, (torch.randn(12, 10, generator=gen) / 12 ** 0.5).to(torch.bfloat16))


# -- problem ids, splits, shapes files -----------------------------------------------------------------

def test_problem_ids_are_unchanged_for_nn_and_suffixed_for_other_layouts():
    assert problem_ids.problem_id(560, 1280, 3420, "bfloat16") == "bfloat16/mm/1x560x1280x3420"
    assert problem_ids.problem_id(560, 1280, 3420, "bfloat16", layout="nn") == "bfloat16/mm/1x560x1280x3420"
    ids = {layout: problem_ids.problem_id(560, 1280, 3420, "bfloat16", layout=layout) for layout in LAYOUTS}
    assert ids["nt"] == "bfloat16/mm/1x560x1280x3420/nt" and len(set(ids.values())) == 4
    assert {splits.split_of(pid) for pid in ids.values()} == {splits.split_of(ids["nn"])}
    with pytest.raises(ProblemError, match="layout"):
        problem_ids.problem_id(560, 1280, 3420, "bfloat16", layout="NT")


def test_every_layout_of_a_problem_shares_the_frozen_split():
    for m in range(1, 400):
        base = problem_ids.problem_id(m, 1280, 3420, "bfloat16")
        assert splits.split_of(base + "/tn") == splits.split_of(base)
    drawn = {splits.split_of(problem_ids.problem_id(m, 1280, 3420, "bfloat16")) for m in range(1, 400)}
    assert drawn == {"train", "val", "test"}  # the ids above do spread over the splits


def test_shapes_files_carry_layouts_and_reject_bad_ones(tmp_path: Path):
    chosen = [shapes.Shape(64, 128, 256, "bfloat16", "a"),
              shapes.Shape(64, 128, 256, "bfloat16", "b", layout="nt")]
    path = tmp_path / "shapes.json"
    shapes.save(chosen, path)
    assert "layout" not in json.loads(path.read_text())[0]  # "nn" files stay as they were
    assert [s.layout for s in shapes.load(path)] == ["nn", "nt"]
    assert len(shapes.dedupe(chosen)) == 2  # the same sizes in two layouts are two problems
    path.write_text(json.dumps([{"m": 1, "n": 16, "k": 16}, {"m": 1, "n": 16, "k": 16, "layout": "tx"}]))
    with pytest.raises(ProblemError, match=r"shapes.json\[1\]: layout: unsupported layout 'tx'"):
        shapes.load(path)


def test_the_bench_command_exits_2_with_one_line_for_a_bad_layout(tmp_path: Path, capsys):
    from kernel_select.cli.main import main

    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"m": 64, "n": 64, "k": 64, "layout": "transposed"}]))
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "--shapes", str(path), "--out", str(tmp_path / "out.parquet")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "layout: unsupported layout 'transposed'" in err


def test_fidelity_refuses_batched_gemms_it_cannot_compare(tmp_path: Path, capsys):
    from kernel_select.cli.main import main

    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"m": 64, "n": 64, "k": 64, "layout": "nt"},
                                {"m": 64, "n": 64, "k": 64, "op": "bmm", "batch": 4}]))
    with pytest.raises(SystemExit) as exit_:
        main(["fidelity", "--shapes", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert 'has bmm entries; fidelity compares single GEMMs (op "mm") only' in err


# -- rows, resume, the dataset's layout column ----------------------------------------------------------

PROV = dict(device_name="NVIDIA H100 80GB HBM3", sm_count=132, torch_version="2.11.0",
            triton_version="3.6.0", git_sha="abc")


def _rows(item: Problem) -> pd.DataFrame:
    runs = plan([item], H100)[0][:2]
    results = {0: bench._Timed(samples=[1.0]), 1: bench._Timed(samples=[2.0])}
    return dataset.conform(pd.DataFrame(bench.rows_for(runs, results, bench._Timed(samples=[1.5]), PROV,
                                                       bench.BenchOptions())))


def test_rows_carry_the_layout_and_its_problem_id():
    rows = _rows(Problem(64, 128, 256, layout="tn"))
    assert set(rows["layout"]) == {"tn"}
    assert set(rows["problem_id"]) == {"bfloat16/mm/1x64x128x256/tn"}
    assert set(rows["split"]) == {splits.split_of("bfloat16/mm/1x64x128x256")}


def test_resume_counts_a_problem_done_only_in_its_own_layout(tmp_path: Path):
    out = tmp_path / "rows.parquet"
    dataset.write(_rows(Problem(64, 128, 256)), out)
    todo = pipeline.todo_problems([Problem(64, 128, 256), Problem(64, 128, 256, layout="nt")], out,
                                  PROV["device_name"])
    assert todo == [Problem(64, 128, 256, layout="nt")]


def test_the_active_pool_counts_a_shape_measured_only_in_its_own_layout(tmp_path: Path):
    from kernel_select.offline.data.plans import active

    out = tmp_path / "rows.parquet"
    dataset.write(_rows(Problem(64, 128, 256)), out)
    pool = [shapes.Shape(64, 128, 256, "bfloat16"), shapes.Shape(64, 128, 256, "bfloat16", layout="nt")]
    assert [s.layout for s in active.unmeasured(pool, [out])] == ["nt"]


def test_a_dataset_with_an_unknown_layout_is_rejected():
    rows = _rows(Problem(64, 128, 256)).assign(layout="xx")
    with pytest.raises(DatasetError, match="column 'layout' has unknown values"):
        dataset.conform(rows)


# -- training and evaluation keep "nn" rows ------------------------------------------------------------

def _with_a_transposed_copy(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The frame plus each problem again in layout "nt" (ten times slower, so mixing would show)."""
    other = frame.assign(layout="nt", problem_id=frame["problem_id"] + "/nt",
                         runtime_ms=frame["runtime_ms"] * 10)
    return pd.concat([frame, other], ignore_index=True), other


def test_training_rows_leave_other_layouts_out_and_say_so(caplog):
    frame, other = _with_a_transposed_copy(synthetic_frame({"train": 3, "val": 1}, configs_per_problem=20))
    with caplog.at_level(logging.INFO, logger="kernel_select.offline.data.dataset"):
        rows, aten = prepare_rows(frame, H100)
    assert set(rows["layout"]) == {"nn"} and not aten.index.str.endswith("/nt").any()
    left_out = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert left_out == [f"training and evaluation: left out {len(other)} rows (4 problems) in layouts nt; "
                        "using nn rows only"]


def test_evaluation_scores_nn_rows_only():
    from kernel_select.offline.training.evaluate import evaluate

    nn_only = synthetic_frame({"test": 3}, configs_per_problem=20)
    mixed, _ = _with_a_transposed_copy(nn_only)
    both = [evaluate("synthetic.parquet", "test", ["analytical"], device=H100, frame=frame)
            for frame in (nn_only, mixed)]
    assert both[0]["problems"] == both[1]["problems"] == 3 and both[0]["rows"] == both[1]["rows"]
    assert both[0]["methods"]["analytical"] == both[1]["methods"]["analytical"]


def test_evaluation_scores_the_layouts_a_model_reads_and_reports_each():
    from kernel_select.offline.training.evaluate import evaluate

    nn_only = synthetic_frame({"test": 3}, configs_per_problem=20)
    mixed, _ = _with_a_transposed_copy(nn_only)
    # two models of the same features: one trained on "nn" rows only (its card says so), one on both
    nn_model, both = untrained_mlp(feature_version=4), untrained_mlp(feature_version=4, seed=1)
    both.card = both.card.model_copy(update={"layouts": ["nn", "nt"]})
    nn_model.name, both.name = "mlp_nn", "mlp_both"
    report = evaluate("synthetic.parquet", "test", [nn_model, both], device=H100, frame=mixed)
    assert report["problems"] == 6
    for method in ("mlp_nn", "mlp_both"):
        per_layout = report["methods"][method]["layouts"]
        assert {k: v["problems"] for k, v in per_layout.items()} == {"nn": 3, "nt": 3}
    # the "nn" model's top-k stays its "nn" figure; the other model's covers both layouts
    nn_alone = evaluate("synthetic.parquet", "test", [nn_model], device=H100,
                        frame=nn_only)["methods"]["mlp_nn"]
    nn_report = report["methods"]["mlp_nn"]
    assert nn_report["topk"] == nn_alone["topk"] == nn_report["layouts"]["nn"]["topk"]
    assert report["methods"]["mlp_both"]["topk_layouts"] == ["nn", "nt"]


def test_the_layout_filter_keeps_a_frame_of_nn_rows_as_it_is():
    frame = synthetic_frame({"train": 1}, configs_per_problem=5)
    assert dataset.modelled_layout_rows(frame) is frame
    assert check_layout("tt") == "tt"
