"""Where Inductor offers cuBLAS's `bias_addmm` beside a plain `addmm`, offer `bias_addmm` alone.

An `nn.Linear` with a bias lowers to `addmm(bias, x, W.t())`. Eager (and `mode="default"`) runs
it as one cuBLASLt call with the bias added in the GEMM's epilogue; that is Inductor's ATen
choice `bias_addmm`. Under max-autotune torch 2.11 also offers plain `addmm` with the bias
expanded to M x N (`AddMMBiasExpansionConfigMixin`), and in the compiled program that runs as
two kernels: an M x N copy of the bias into the output, then a GEMM with beta = 1 that reads it
back. Inductor's benchmark times the pair in isolation, where a short cuBLASLt call is bound by
its host-side launch, and can rank it first (ViT-B/16 on an H100, 12608 x 768 x 768:
`addmm` 0.050 ms, `bias_addmm` 0.061 ms), while in the program the copy alone took 0.81 ms of a
7.3 ms step over 48 such GEMMs and the step ran 1.14x slower than `default`'s (profiled in
docs/inductor.md). The epilogue call never does more work than the pair, so it is offered
alone; Triton candidates still compete with it. Where `bias_addmm` is the only ATen choice left
and no Triton candidate is offered, Inductor takes it without benchmarking anything.

Inductor's benchmark also over-times the epilogue call itself against Triton (up to 2.4x on GPT-2's
projections), so for an `addmm` whose bias is one row (`row_bias`) the cuBLAS gate drops its margin
(`gate.RULE`). That is decided in `addmm`'s Triton call, which no longer sees the ATen choices:
torch 2.11 offers `bias_addmm` exactly when the bias is a row broadcast over M (and torch 2.13 then
hands ATen's `addmm` the row itself, the same cuBLASLt call).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

ADDMM, BIAS_ADDMM = "aten::addmm", "aten::bias_addmm"


def prefer_bias_epilogue(choices: dict[str, Iterable[Any]], op_name: str) -> dict[str, Iterable[Any]]:
    """`choices` without the plain `addmm` where `bias_addmm` is offered (module doc); else as given."""
    if op_name != "addmm" or ADDMM not in choices or BIAS_ADDMM not in choices:
        return choices
    epilogue = list(choices[BIAS_ADDMM])  # a generator: keep what was read
    if not epilogue:
        return {**choices, BIAS_ADDMM: epilogue}
    return {**choices, BIAS_ADDMM: epilogue, ADDMM: []}


def row_bias(kernel_inputs: Any, op_name: str) -> bool:
    """Whether an `addmm`'s bias is one row broadcast over M (a biased nn.Linear), so that cuBLAS
    runs it as the bias-epilogue call; False where that cannot be read (a symbolic stride)."""
    if op_name != "addmm":
        return False
    try:
        bias = kernel_inputs.nodes()[0]
        size, stride = bias.get_size(), bias.get_stride()
        return len(size) == 1 or (len(size) == 2 and int(stride[0]) == 0)
    except (TypeError, AttributeError, IndexError):  # symbolic stride, or inputs we cannot read
        return False
