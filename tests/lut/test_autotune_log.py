"""Reading Inductor's AUTOTUNE log blocks and building a LUT from them."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest

from kernel_select.lut.autotune_log import lut_from_autotune_log, parse_autotune_log
from kernel_select.configs import GemmConfig
from kernel_select.errors import LUTError
from kernel_select.problem import Problem

LOG = (Path(__file__).resolve().parents[1] / "data" / "autotune_h100.log").read_text()


def cfg(bm: int, bn: int, bk: int, stages: int, warps: int) -> GemmConfig:
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=stages, num_warps=warps)


def test_blocks_give_problems_with_m_k_n_in_inductor_order():
    blocks = parse_autotune_log(LOG)
    assert [b.op for b in blocks] == ["mm", "bmm", "addmm", "mm", "flex_attention"]
    assert blocks[0].problem() == Problem(560, 1280, 3420, "bfloat16")  # mm(560x3420, 3420x1280)
    assert blocks[1].problem() == Problem(64, 32, 128, "float16", batch=4, op="bmm")
    assert blocks[2].problem() == Problem(560, 1280, 3420, "bfloat16", op="addmm")  # bias comes first
    assert [c.name for c in blocks[0].choices] == ["triton_mm_11", "triton_mm_persistent_tma_3", "mm",
                                                    "triton_mm_4"]
    assert blocks[0].choices[2].description == ""
    assert math.isinf(blocks[2].choices[2].time_ms)


def test_only_finite_mm_template_choices_count_in_log_order():
    blocks = parse_autotune_log(LOG)
    # The persistent-TMA template and ATen are skipped; the order is the log's (fastest first).
    assert blocks[0].best_configs(5) == [cfg(64, 128, 64, 3, 4), cfg(64, 128, 128, 4, 4)]
    assert blocks[2].best_configs(5) == [cfg(64, 128, 64, 3, 4)]  # the inf choice failed


def test_lut_from_log_keeps_top_n_per_problem():
    lut = lut_from_autotune_log(LOG, "h100", top=2, source="run.log")
    rows = {(row.op, row.entry.m): row.entry for row in lut.entries()}
    assert set(rows) == {("mm", 560), ("addmm", 560), ("bmm", 64)}
    assert rows[("mm", 560)].configs == [cfg(64, 128, 64, 3, 4), cfg(64, 128, 128, 4, 4)]
    assert rows[("mm", 560)].note == "Inductor AUTOTUNE log run.log:4: top 2 Triton of 4 shown choices"
    assert rows[("bmm", 64)].batch == 4
    top1 = lut_from_autotune_log(LOG, "NVIDIA H100 80GB HBM3", top=1)
    # The second mm block for the same problem does not override the first.
    assert top1.lookup(Problem(560, 1280, 3420), "h100") == [cfg(64, 128, 64, 3, 4)]


def test_rank_prefixes_are_tolerated():
    prefixed = "\n".join(f"[rank0]:{line}" for line in LOG.splitlines())
    assert lut_from_autotune_log(prefixed, "h100") == lut_from_autotune_log(LOG, "h100")


@pytest.mark.parametrize("text", ["", "no autotuning here\n",
                                  "AUTOTUNE mm(8x8, 8x8)\nstrides: [8, 1], [8, 1]\n"
                                  "dtypes: torch.float16, torch.float16\n  mm 0.0100 ms 100.0% \n"])
def test_logs_without_triton_choices_are_an_error(text):
    with pytest.raises(LUTError, match="no usable AUTOTUNE"):
        lut_from_autotune_log(text, "h100")


def test_top_must_be_positive():
    with pytest.raises(LUTError, match="top"):
        lut_from_autotune_log(LOG, "h100", top=0)


def _block(sizes: str, strides: str, line: int) -> str:
    return (f"AUTOTUNE mm({sizes})\nstrides: {strides}\ndtypes: torch.bfloat16, torch.bfloat16\n"
            f"  triton_mm_{line} 0.0303 ms 100.0% ACC_TYPE='tl.float32', ALLOW_TF32=False, BLOCK_K=64, "
            "BLOCK_M=64, BLOCK_N=128, EVEN_K=False, GROUP_M=8, USE_FAST_ACCUM=False, num_stages=3, "
            "num_warps=4\nSingleProcess AUTOTUNE benchmarking takes 0.1 seconds\n")


def test_entries_name_the_layout_the_strides_prove():
    # The user's Linear(3420 -> 1280) step at L = 1280: the input gradient and the weight gradient
    # are both 1280 x 3420 x 1280, told apart only by their strides.
    text = (_block("1280x3420, 3420x1280", "[3420, 1], [1, 3420]", 1)  # forward x @ W.t()
            + _block("1280x1280, 1280x3420", "[1280, 1], [3420, 1]", 2)  # grad input grad_y @ W
            + _block("1280x1280, 1280x3420", "[1, 1280], [3420, 1]", 3))  # grad weight grad_y.t() @ x
    assert [block.layout() for block in parse_autotune_log(text)] == ["nt", "nn", "tn"]
    lut = lut_from_autotune_log(text, "h100")
    assert sorted(row.entry.layout for row in lut.entries()) == ["nn", "nt", "tn"]
    for layout in ("nn", "tn"):
        assert lut.match(Problem(1280, 3420, 1280, layout=layout), "h100").note.endswith("shown choices")
    assert lut.match(Problem(1280, 3420, 1280, layout="tt"), "h100") is None


def test_strides_that_prove_no_layout_leave_it_out_and_do_not_collide():
    strided = _block("64x64, 64x64", "[128, 2], [64, 1]", 1)  # A sliced with a step: neither n nor t
    symbolic = _block("64x64, 64x64", "[s0, 1], [64, 1]", 2)
    assert [block.layout() for block in parse_autotune_log(strided + symbolic)] == [None, None]
    lut = lut_from_autotune_log(strided + _block("64x64, 64x64", "[64, 1], [1, 64]", 3), "h100")
    (row,) = lut.entries()  # the "nt" block meets the layout-less entry: the first block wins
    assert row.entry.layout is None and "log>:1" in row.entry.note


def _choice_block(sizes: str, description: str, line: int) -> str:
    return (f"AUTOTUNE mm({sizes})\nstrides: [64, 1], [64, 1]\ndtypes: torch.bfloat16, torch.bfloat16\n"
            f"  triton_mm_{line} 0.0303 ms 100.0% {description}\nSingleProcess AUTOTUNE benchmarking\n")


GOOD_CHOICE = "BLOCK_K=64, BLOCK_M=64, BLOCK_N=128, GROUP_M=8, num_stages=3, num_warps=4"


@pytest.mark.parametrize("value", ["-" * 200_000, "~" * 5_000, "9" * 5_000, "(" * 10_000, "٦٤"])
def test_a_description_value_of_any_length_or_form_skips_the_choice_in_bounded_time(value):
    text = (_choice_block("64x64, 64x64", f"BLOCK_K={value}, BLOCK_M=64, BLOCK_N=64, num_stages=3, "
                                          "num_warps=4", 1)
            + _choice_block("128x64, 64x64", GOOD_CHOICE, 9))
    lut = lut_from_autotune_log(text, "h100", source="run.log")
    assert [row.entry.m for row in lut.entries()] == [128]  # the block with the bad value has no choice


def test_the_table_from_a_log_is_one_validate_accepts(caplog):
    from kernel_select.device import get_device
    from kernel_select.lut import check_fits

    huge = "BLOCK_K=1024, BLOCK_M=1024, BLOCK_N=1024, GROUP_M=8, num_stages=3, num_warps=4"
    text = (_choice_block("64x64, 64x64", huge, 1)  # cannot run: 12 MB of shared memory
            + _choice_block("64x64, 64x64", GOOD_CHOICE, 6)
            + _choice_block("0x64, 64x64", GOOD_CHOICE, 11)  # m = 0
            + _choice_block(f"{2**31}x64, 64x64", GOOD_CHOICE, 16)  # m over 2^31 - 1
            + _choice_block("32x64, 64x64", f"{GOOD_CHOICE.replace('BLOCK_M=64', 'BLOCK_M=1024')}", 21))
    with caplog.at_level(logging.WARNING, logger="kernel_select.lut.autotune_log"):
        lut = lut_from_autotune_log(text, "h100", top=2, source="run.log")
    assert [(row.entry.m, len(row.entry.configs)) for row in lut.entries()] == [(64, 1)]
    assert check_fits(lut, get_device("h100")) == 1
    lines = [record.getMessage() for record in caplog.records]
    assert any(line.startswith("run.log:1: leaving out 1024x1024x1024 s3 w4") and "shared memory" in line
               for line in lines)
    assert any(line.startswith("run.log:11: skipping") and "m: expected a positive integer" in line
               for line in lines)
    assert any(line.startswith("run.log:16: skipping") and "less than or equal to 2147483647" in line
               for line in lines)
    assert any(line.startswith("run.log:21: leaving out 1024x128x64") for line in lines)
    assert all("\n" not in line for line in lines)
