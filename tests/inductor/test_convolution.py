"""The predicate that keeps Inductor's Triton convolution template off grouped convolutions: the
template's work over the convolution's, the verdict, reading a convolution's parameters off an
FX node, and the Inductor names the module's docstring relies on."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from kernel_select.errors import ProblemError
from kernel_select.inductor.convolution import ConvParams, template_work_ratio, triton_conv_cannot_win


@pytest.mark.parametrize("conv, ratio, cannot_win", [
    (ConvParams(96, 96, 96, (7, 7)), 1536.0, True),  # ConvNeXt-T's first depthwise 7x7: 16 x 96
    (ConvParams(192, 192, 192, (7, 7)), 3072.0, True),
    (ConvParams(256, 256, 32, (3, 3)), 64.0, True),  # ResNeXt's 32 groups of 8 channels
    (ConvParams(128, 128, 2, (3, 3)), 2.0, True),  # two wide groups: still twice the work
    (ConvParams(64, 128, 1, (3, 3)), 1.0, False),  # dense, channels filling the 16-wide blocks
    (ConvParams(3, 96, 1, (4, 4)), 16 / 3, False),  # an RGB stem: dense, left to the benchmark
    (ConvParams(96, 192, 1, (2, 2)), 1.0, False),  # ConvNeXt's downsampling
])
def test_work_ratio_and_verdict(conv: ConvParams, ratio: float, cannot_win: bool) -> None:
    assert template_work_ratio(conv) == pytest.approx(ratio)
    assert triton_conv_cannot_win(conv) is cannot_win
    assert conv.depthwise is (conv.groups == conv.in_channels > 1)


def test_the_template_does_at_least_groups_times_the_work_at_any_block_size() -> None:
    for groups, per_group_in, per_group_out, block in itertools.product((1, 2, 3, 8, 64), (1, 3, 16, 40),
                                                                         (1, 5, 16, 96), (16, 32, 128)):
        conv = ConvParams(groups * per_group_in, groups * per_group_out, groups, (3, 3))
        assert template_work_ratio(conv, block, block) >= groups


def test_channels_that_do_not_split_into_the_groups_are_refused() -> None:
    with pytest.raises(ProblemError, match="96 -> 100 channels do not split into 8 groups"):
        ConvParams(96, 100, 8, (3, 3))


def test_params_are_read_off_the_convolution_node_inductor_lowers() -> None:
    from torch.fx.experimental.proxy_tensor import make_fx

    def block(x: torch.Tensor, depthwise: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.conv2d(x, depthwise, padding=3, groups=24), dense)

    graph = make_fx(block, tracing_mode="fake")(torch.randn(2, 24, 16, 16), torch.randn(24, 1, 7, 7),
                                                torch.randn(48, 24, 1, 1)).graph
    params = [p for p in (ConvParams.of_node(node) for node in graph.nodes) if p is not None]
    assert params == [ConvParams(24, 24, 24, (7, 7)), ConvParams(24, 48, 1, (1, 1))]
    assert [triton_conv_cannot_win(p) for p in params] == [True, False]
    assert ConvParams.of_node(None) is None


def test_the_inductor_names_the_docstring_gives_exist() -> None:
    """The uids of the Triton convolution templates and the choices method a handler overrides."""
    from torch._inductor.choices import InductorChoices
    from torch._inductor.kernel import conv

    assert conv.conv2d_template.uid == "triton::convolution2d"
    assert conv.conv3d_template.uid == "triton::convolution3d"
    assert callable(InductorChoices.get_conv_configs)
