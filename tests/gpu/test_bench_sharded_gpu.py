"""`bench --gpus N` on a host with several GPUs: one compile pool, a timing process per GPU taking
problems from one ready queue, every row saying which GPU timed it, nothing lost."""

from __future__ import annotations

import logging

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two CUDA GPUs")]


def test_two_gpus_share_one_queue_and_every_row_names_its_gpu(tmp_path, caplog):
    from kernel_select.device import detect
    from kernel_select.offline.harness import bench, sharding
    from kernel_select.problem import Problem

    problems = [Problem(m, 256, 512, "bfloat16") for m in (64, 96)] + \
               [Problem(m, 200, 104, "float16", batch=4, op="bmm", layout="nt") for m in (40, 72)]
    out = tmp_path / "rows.parquet"
    options = bench.BenchOptions(search_space="default", progress=False, reps=2)
    with caplog.at_level(logging.INFO, logger=sharding.__name__):
        df = sharding.run_sharded(problems, out, detect(), 2, options)
    assert df["problem_id"].nunique() == 4
    assert (df["backend"] == "aten").sum() == 4
    assert set(df["status"]) <= {"ok", "capped"}
    assert set(df["device_index"]) <= {0, 1}
    assert df.groupby("problem_id")["device_index"].nunique().max() == 1  # a problem on one GPU
    lines = [r.getMessage() for r in caplog.records]
    assert any(line.startswith("2 GPUs: 4 problems") for line in lines)
    assert sum(line.startswith(("GPU 0:", "GPU 1:")) and "waited" in line for line in lines) == 2
    # Resuming with every problem measured starts no timing process and changes nothing.
    again = sharding.run_sharded(problems, out, detect(), 2, options)
    assert len(again) == len(df)
