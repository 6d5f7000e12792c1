"""The fused inference path of an averaged net equals the members' mean, and is used by MLPModel."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from kernel_select.model.mlp import fused_forward
from kernel_select.model.mlp import AveragedRuntimeNet, RuntimeNet


@pytest.mark.parametrize("widths", [[16], [16, 8], [24, 16, 8]])
def test_fused_forward_equals_the_members_mean(widths: list[int]) -> None:
    torch.manual_seed(0)
    net = AveragedRuntimeNet([RuntimeNet(11, widths, kernel_overhead_ms=0.004 * (i + 1)) for i in range(3)])
    x = torch.randn(257, 11)
    fused = fused_forward(net)
    assert fused is not None
    with torch.inference_mode():
        torch.testing.assert_close(fused(x), net(x), rtol=1e-5, atol=1e-5)


def test_nets_it_cannot_fuse_run_as_they_are() -> None:
    assert fused_forward(RuntimeNet(5, [4])) is None  # one network: nothing to fuse
    silu = AveragedRuntimeNet([RuntimeNet(5, [4]), RuntimeNet(5, [4])])
    for member in silu.members:
        member.body[1] = nn.SiLU()
    assert fused_forward(silu) is None


def test_the_shipped_model_ranks_the_same_fused() -> None:
    from kernel_select.device import get_device
    from kernel_select.model.mlp import MLPModel
    from kernel_select.problem import Problem
    from kernel_select.space import for_problem

    model = MLPModel.load("models/h100", "h100")
    problem = Problem(560, 1280, 3420, "bfloat16", layout="nt")
    configs = for_problem(problem, get_device("h100"), "exhaustive")
    fused = model.estimate(problem, configs)
    assert model._forward is not model.net  # the fused path ran
    model._forward = model.net
    unfused = model.estimate(problem, configs)
    torch.testing.assert_close(torch.from_numpy(fused), torch.from_numpy(unfused), rtol=1e-5, atol=0)
