"""When Inductor's Triton convolution template cannot beat cuDNN: grouped convolutions.

How Inductor lowers a convolution (torch 2.11, torch/_inductor/kernel/conv.py, `convolution`,
registered for aten.convolution and aten._convolution):

- A 1x1, stride-1, unpadded, ungrouped convolution becomes a GEMM (`convert_1x1_conv_to_mm`)
  when `conv_1x1_as_mm` is set or GEMMs are autotuned and the layout is channels-last: the
  handler's GEMM path (choices.py) sees it as an mm/addmm like any other.
- Otherwise a bias is peeled off into a pointwise add ("cudnn is slower with it") and the
  candidates are collected by hand, not through `InductorChoices.get_template_configs`, so the
  handler's `_finalize_template_configs` never sees them:
    `aten_convolution`  ExternKernelChoice "at::convolution": cuDNN on a GPU; always offered
                        while `max_autotune_conv_backends` names ATEN (the default "ATEN,TRITON")
    `aten_conv1x1_via_mm`  a matmul, for 1x1 stride-1 ungrouped convolutions only
    one Triton choice per config of `V.choices.get_conv_configs(device_type)`: the TritonTemplate
                        `conv2d_template` (name "convolution2d", uid "triton::convolution2d") or
                        `conv3d_template` ("convolution3d", uid "triton::convolution3d"), added with
                        `maybe_append_choice`; only where `max_autotune_conv_backends` names TRITON,
                        `use_triton_template(layout)` holds (mode max-autotune, or
                        `max_autotune_gemm`: stock-gemm and kernel_select's GEMM-only recipe too),
                        dilation is 1, the convolution is not transposed and has no output padding.
                        1-D convolutions get no template in 2.11.
  and `autotune_select_algorithm("convolution", choices, ...)` compiles and benchmarks them all
  (a single choice is taken without benchmarking).
- The configs: the 17 `ConvConfig`s of template_heuristics/triton.py (BLOCK_M, BLOCK_N, BLOCK_K,
  stages, warps), the callable called as `conv_configs(m, n, k, dtype_size=...)` with m = batch x
  spatial size, n = out_channels and k = the weight's dim 1, the input channels of one group;
  `_scale_mm_configs` shrinks each block to those sizes but never below 16 (duplicates dropped).

What the template computes: its grid (`conv2d_grid`, `conv3d_grid`) is cdiv(batch x spatial,
BLOCK_M) x cdiv(out_channels, BLOCK_N) x groups. Program (m, n, g) covers output channels n x
BLOCK_N .. + BLOCK_N of group g, masked to the group's out_channels / groups; for every kernel
position it loops over the group's input channels in BLOCK_K steps, each step a BLOCK_M x BLOCK_K x
BLOCK_N `tl.dot` whatever the masks leave. So a grouped convolution launches the programs of a
dense one for every group, and most of them multiply masked zeros: per output pixel the template
issues cdiv(C_out, BLOCK_N) x BLOCK_N x groups x cdiv(C_in / groups, BLOCK_K) x BLOCK_K x kernel
area multiply-adds where the convolution needs C_out x C_in / groups x kernel area, at least
`groups` times as many (`template_work_ratio`; for a depthwise convolution at least 16 x groups,
1,536 for 96 channels). cuDNN runs grouped and depthwise convolutions with kernels of their own.
Measured on an H100: in a ConvNeXt-style network at batch 32, the Triton candidates for its 7x7
depthwise convolutions ran 13-27 ms against cuDNN's 0.07 ms, and compiling and benchmarking them
was most of stock-gemm's 209.8 s compile.

Dense convolutions (groups = 1) are left to the benchmark: their ratio is near 1 wherever the
channel counts fill the 16-wide blocks. (torch 2.13 adds a Triton template built for depthwise
1-D convolutions, uid "triton::depthwise_conv1d"; this module says nothing about it.)

Wiring it in: `get_conv_configs(device_type)` is an `InductorChoices` method, called while the
convolution's FX node is being lowered (`V.graph.current_node`, an aten.convolution node). A
handler can return Inductor's callable unchanged, or one that yields no configs when
`triton_conv_cannot_win(ConvParams.of_node(V.graph.current_node))`: the convolution then gets
cuDNN only, with nothing compiled or benchmarked. The blunt alternative, the torch.compile option
`max_autotune_conv_backends="ATEN"`, drops the template for every convolution.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kernel_select.errors import ProblemError

#: The smallest BLOCK_N and BLOCK_K Inductor scales the conv configs to (`_scale_mm_configs`).
MIN_BLOCK = 16


@dataclasses.dataclass(frozen=True)
class ConvParams:
    """What decides the template's waste: channels, groups and the kernel's spatial size."""

    in_channels: int
    out_channels: int
    groups: int
    kernel_size: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.groups < 1 or self.in_channels % self.groups or self.out_channels % self.groups:
            raise ProblemError(f"convolution: {self.in_channels} -> {self.out_channels} channels do not "
                               f"split into {self.groups} groups")

    @property
    def depthwise(self) -> bool:
        """One input channel per group (each output channel sees only its own input channel's group)."""
        return self.groups > 1 and self.in_channels == self.groups

    @classmethod
    def of_node(cls, node: Any) -> ConvParams | None:
        """The parameters of an FX node calling aten.convolution (args: input, weight, bias,
        stride, padding, dilation, transposed, output_padding, groups), from the weight's shape in
        `node.meta["val"]`; None for any other node or one without shapes."""
        import torch

        convolutions = (torch.ops.aten.convolution.default, torch.ops.aten._convolution.default)
        if node is None or getattr(node, "target", None) not in convolutions or len(node.args) < 9:
            return None
        weight = getattr(node.args[1], "meta", {}).get("val")
        groups = node.args[8]
        if weight is None or not isinstance(groups, int):
            return None
        out_channels, group_in, *kernel = (int(size) for size in weight.shape)
        return cls(group_in * groups, out_channels, groups, tuple(kernel))


def template_work_ratio(conv: ConvParams, block_n: int = MIN_BLOCK, block_k: int = MIN_BLOCK) -> float:
    """The Triton template's multiply-adds over the convolution's own (module docstring), at
    `block_n` x `block_k` tiles: the smallest Inductor uses by default, so a lower bound over
    its configs. The kernel area and batch x spatial size cancel."""
    group_in = conv.in_channels // conv.groups
    columns = math.ceil(conv.out_channels / block_n) * block_n * conv.groups  # every group's programs
    depth = math.ceil(group_in / block_k) * block_k
    return columns * depth / (conv.out_channels * group_in)


def triton_conv_cannot_win(conv: ConvParams) -> bool:
    """Whether Inductor's Triton convolution template should not be compiled for `conv` at all:
    a grouped convolution, where the template does at least `groups` times the multiply-adds of
    the convolution and cuDNN has kernels for the grouped case (module docstring)."""
    return conv.groups > 1
