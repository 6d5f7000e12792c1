"""A bench log's closing lines read back into figures (results/collection_scaling.py compares runs so)."""

from __future__ import annotations

from kernel_select.offline.harness.gpu_tally import GpuTally, gpu_line, run_line, run_summary


def test_the_lines_a_run_logs_read_back_as_its_figures():
    tallies = [GpuTally(0, problems=31, rows=3190, busy_s=16.8, wait_s=104.1, stopped_at_bound=True),
               GpuTally(1, problems=28, rows=2828, busy_s=12.3, wait_s=103.5)]
    log = "\n".join(["noise", run_line(tallies, 144.7, 10454, 60), *(gpu_line(t, 144.7) for t in tallies)])

    summary = run_summary(log)

    assert summary is not None
    assert (summary["problems"], summary["rows"], summary["wall_s"]) == (59, 6018, 144.7)
    assert (summary["kernels"], summary["compile_workers"]) == (10454, 60)
    assert summary["rows_per_minute"] == round(6018 / 144.7 * 60)
    assert summary["rows_per_gpu_minute"] == round(6018 / 144.7 * 60 / 2)
    assert [(g["gpu"], g["rows"], g["waited_for_kernels_s"]) for g in summary["gpus"]] == [(0, 3190, 104.1),
                                                                                            (1, 2828, 103.5)]


def test_the_one_gpu_drivers_own_wording_reads_too_and_an_unfinished_log_reads_as_none():
    one_gpu = ("71 problems, 4278 rows in 139.6 s wall (compile included; 4139 kernels compiled on 15 workers): "
               "1838 rows per GPU-minute; timing: ...\nGPU 0: 71 problems, 4278 rows, 1838 rows per GPU-minute, "
               "busy 17.3 s, waited 116.1 s for compiled kernels")
    summary = run_summary(one_gpu)
    assert summary is not None and summary["rows_per_minute"] == 1839 and len(summary["gpus"]) == 1
    assert run_summary("stopping at the 140 s bound (--max-seconds); re-run to resume") is None
