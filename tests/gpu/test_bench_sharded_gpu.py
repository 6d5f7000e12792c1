"""`bench --gpus N` on a host with several GPUs: one worker per GPU, parts merged, nothing lost."""

from __future__ import annotations

import logging

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two CUDA GPUs")]


def test_two_gpus_each_time_their_groups_and_the_parts_merge(tmp_path, caplog):
    from kernel_select.device import detect
    from kernel_select.offline.harness import bench, sharding
    from kernel_select.problem import Problem

    problems = [Problem(m, 256, 512, "bfloat16") for m in (64, 96)] + \
               [Problem(m, 200, 104, "float16") for m in (40, 72)]
    groups = ["bf16", "bf16", "fp16", "fp16"]
    out = tmp_path / "rows.parquet"
    options = bench.BenchOptions(search_space="default", progress=False, reps=2)
    with caplog.at_level(logging.INFO, logger=sharding.__name__):
        df = sharding.run_sharded(problems, out, detect(), 2, options, groups=groups)
    assert df["problem_id"].nunique() == 4
    assert (df["backend"] == "aten").sum() == 4
    assert set(df["status"]) <= {"ok", "capped"}
    assert not any(sharding.part_path(out, gpu).exists() for gpu in range(2))
    summary = [r.getMessage() for r in caplog.records if r.getMessage().startswith("2 GPUs:")]
    assert summary and "GPU 0: 2 problems" in summary[0] and "GPU 1: 2 problems" in summary[0]
    # Resuming with every problem measured starts no worker and changes nothing.
    again = sharding.run_sharded(problems, out, detect(), 2, options, groups=groups)
    assert len(again) == len(df)
