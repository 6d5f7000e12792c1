"""record(): the LUT written from Inductor's feedback (synthetic here), and the saver's safety."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kernel_select
from kernel_select.configs import GemmConfig
from kernel_select.inductor.probe import ChoiceTiming
from kernel_select.inductor.record import Feedback, lut_from_feedback, record
from kernel_select.lut import ATEN, load_lut
from kernel_select.problem import Problem

FAST = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
SLOW = GemmConfig(block_m=128, block_n=64, block_k=32, num_stages=4, num_warps=8)
PROBLEM = Problem(560, 1280, 3420, "bfloat16")


def feedback(aten_ms: float, m_range: tuple[int, int] | None = None, problem: Problem = PROBLEM,
             layout: str | None = None) -> Feedback:
    return Feedback(problem, m_range, layout=layout, timings=(
        ChoiceTiming("triton_mm_1", "triton", 0.020, FAST),
        ChoiceTiming("triton_mm_2", "triton", 0.030, SLOW),
        ChoiceTiming("mm", "extern", aten_ms, None), ChoiceTiming("decompose_k_mm", "other", 0.001, None),
        ChoiceTiming("triton_mm_3", "triton", float("inf"), None)))


def test_each_gemm_pins_its_fastest_nameable_choice():
    other_problem = Problem(64, 64, 64, "float16")
    lut = lut_from_feedback([feedback(0.025), feedback(0.010, problem=other_problem)], "h100")
    assert lut.pinned(PROBLEM, "h100") == FAST  # decompose_k was faster, but a LUT cannot name it
    assert lut.pinned(Problem(64, 64, 64, "float16"), "h100") == ATEN
    assert "pinned triton 64x128x64" in lut.match(PROBLEM, "h100").note


def test_a_declared_dynamic_range_becomes_the_m_range_and_no_pin_lists_the_top_configs():
    lut = lut_from_feedback([feedback(0.025, m_range=(16, 8192))], "h100", pin=False, top=4)
    entry = lut.match(Problem(4096, 1280, 3420, "bfloat16"), "h100")
    assert entry.m_bounds == (16, 8192) and entry.configs == [FAST, SLOW] and entry.pin is None


def test_entries_name_the_layout_the_strides_proved_and_none_where_they_proved_none():
    # A Linear's input and weight gradients at L = 1280: one (m, n, k), two layouts, two pins.
    square = Problem(1280, 3420, 1280, "bfloat16")
    lut = lut_from_feedback([feedback(0.025, problem=square, layout="nn"),
                             feedback(0.001, problem=square, layout="tn"), feedback(0.025)], "h100")
    assert lut.pinned(Problem(1280, 3420, 1280, layout="nn"), "h100") == FAST
    assert lut.pinned(Problem(1280, 3420, 1280, layout="tn"), "h100") == ATEN
    assert lut.match(Problem(1280, 3420, 1280, layout="nt"), "h100") is None
    assert lut.match(Problem(560, 1280, 3420, layout="tt"), "h100").layout is None  # unproven: any


def test_the_last_recording_of_a_problem_wins():
    lut = lut_from_feedback([feedback(0.025), feedback(0.001)], "h100")
    assert lut.pinned(PROBLEM, "h100") == ATEN and lut.num_entries == 1


def test_record_disables_caches_for_the_block_restores_them_and_merges_into_the_file(tmp_path: Path):
    from torch._inductor import select_algorithm

    path = tmp_path / "mine.json"
    before = torch.compiler.config.force_disable_caches
    with record(path, device="h100") as recording:
        assert torch.compiler.config.force_disable_caches is True
        savers = list(select_algorithm.get_algorithm_selector_cache().feedback_saver_fns)
        savers[-1]({}, "mm", [object(), object()])  # unreadable nodes: skipped, never raised
        recording.feedback.append(feedback(0.025))
    assert torch.compiler.config.force_disable_caches == before
    assert recording.skipped == 1 and load_lut(path).pinned(PROBLEM, "h100") == FAST
    with record(path, device="h100") as again:
        again.feedback.append(feedback(0.010, problem=Problem(64, 64, 64, "float16")))
    assert load_lut(path).num_entries == 2  # the earlier entry is kept
    assert kernel_select.record is record


def test_record_rejects_an_invalid_lut_before_the_block_runs(tmp_path: Path):
    from kernel_select.errors import LUTError

    path = tmp_path / "broken.json"
    path.write_text("{")
    with pytest.raises(LUTError), record(path, device="h100"):
        pytest.fail("the block must not run")


def test_record_refuses_an_output_it_could_not_write_before_the_block_runs(tmp_path: Path):
    from kernel_select.errors import LUTError

    path = tmp_path / "mine.json"
    with record(path, device="h100") as recording:
        recording.feedback.append(feedback(0.025))
    before = path.read_bytes()
    path.chmod(0o444)
    refused = rf"{path}: cannot write the recorded LUT there .*read-only.*nothing was compiled"
    with pytest.raises(LUTError, match=refused), record(path, device="h100"):
        pytest.fail("the block must not run")
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["mine.json"]


def test_record_refuses_a_folder_it_could_not_write_in_before_the_block_runs(tmp_path: Path):
    from kernel_select.errors import LUTError

    (tmp_path / "a-file").write_text("x")
    path = tmp_path / "a-file" / "luts" / "mine.json"
    refused = r"mine.json: cannot write the recorded LUT there .*a-file is a regular file, not a folder"
    with pytest.raises(LUTError, match=refused), record(path, device="h100"):
        pytest.fail("the block must not run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_recorded_entries_that_cannot_merge_into_the_file_are_kept_beside_it(tmp_path: Path):
    from kernel_select.errors import LUTError
    from kernel_select.lut import LUTEntry, LUTRow, lut_from_rows, MRange, save_lut

    path = tmp_path / "mine.json"
    ranged = LUTEntry(m=MRange(min=1, max=8192), n=1280, k=3420, configs=[SLOW])  # covers m = 560
    save_lut(lut_from_rows([LUTRow("h100", "mm", "bfloat16", ranged)]), path)
    before = path.read_bytes()
    with pytest.raises(LUTError, match=r"mine.json: .*overlap.*the 1 recorded entries are kept in .*"
                                       r"mine.recorded.json"):
        with record(path, device="h100") as recording:
            recording.feedback.append(feedback(0.025))
    assert path.read_bytes() == before
    assert load_lut(tmp_path / "mine.recorded.json").pinned(PROBLEM, "h100") == FAST
