"""A config that cannot run on the model's device is estimated at inf: no time is claimed for it."""

from __future__ import annotations

import math

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.model import get_model
from kernel_select.problem import Problem


def test_a_config_that_cannot_run_is_estimated_at_inf_and_the_others_as_before():
    fits = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
    too_big = GemmConfig(block_m=256, block_n=256, block_k=128, num_stages=5, num_warps=8)  # 1.3 MB smem
    spills = GemmConfig(block_m=256, block_n=256, block_k=32, num_stages=2, num_warps=4)  # 512 regs/thread
    model = get_model("analytical", "h100")
    problem = Problem(2048, 2048, 2048)
    alone = model.estimate(problem, [fits])
    mixed = model.estimate(problem, [fits, too_big, spills])
    assert mixed[0] == alone[0] and math.isfinite(alone[0])
    assert np.isinf(mixed[1:]).all()


def test_the_vectorized_mask_agrees_with_the_one_hardware_check():
    from kernel_select.device import get_device
    from kernel_select.space import exhaustive_grid, unfit_mask, unfit_reason

    configs = [GemmConfig.from_key(raw) for raw in exhaustive_grid()]
    configs += [GemmConfig(block_m=bm, block_n=bn, block_k=64, num_stages=s, num_warps=w)
                for bm, bn in ((512, 512), (1024, 64), (256, 256)) for s in (1, 8) for w in (1, 32)]
    for device in ("h100", "a100"):
        spec = get_device(device)
        for dtype in ("bfloat16", "float32"):
            expected = [unfit_reason(config, dtype, spec) is not None for config in configs]
            assert unfit_mask(configs, dtype, spec).tolist() == expected
