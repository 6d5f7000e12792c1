"""The operand layout (kernel_select.layouts) of the GEMM Inductor is lowering, from its input
nodes' strides.

A = mat1, B = mat2 of Inductor's MMKernelInputs (addmm's and baddbmm's bias is not an operand);
for bmm the last two dimensions. An operand is "t" only where its strides prove it a transposed
view of a row-major buffer for every size the graph accepts, "n" where they prove it row-major;
if either operand is neither (a symbolic stride the shape environment cannot compare, a slice
with a step, a broadcast), the layout is "nn", what every Problem was before layouts existed.
"""

from __future__ import annotations

import logging
from typing import Any

from kernel_select.layouts import DEFAULT_LAYOUT

log = logging.getLogger(__name__)


def layout_from(kernel_inputs: Any) -> str:
    """The layout of mat1 and mat2 in `kernel_inputs`, or "nn" where it cannot be proven.

    Never raises: it runs inside torch.compile, where an unknown layout only costs the hedge of
    `topk="auto"` (and, later, the layout feature), not the compile.
    """
    try:
        nodes = kernel_inputs.mat1mat2()
    except Exception as exc:  # noqa: BLE001 -- nothing may raise inside torch.compile
        log.debug("kernel_select: operand layout unknown (%s: %s); ranking as %s",
                  type(exc).__name__, exc, DEFAULT_LAYOUT)
        return DEFAULT_LAYOUT
    return proven_layout(*nodes) or DEFAULT_LAYOUT


def proven_layout(mat1: Any, mat2: Any) -> str | None:
    """The layout the strides of input nodes `mat1` and `mat2` prove, or None where they prove
    none (a LUT writer then leaves the layout out). Never raises."""
    try:
        from torch._inductor.virtualized import V

        sizevars = V.graph.sizevars
        letters = [_letter(node, sizevars) for node in (mat1, mat2)]
    except Exception as exc:  # noqa: BLE001 -- nothing may raise inside torch.compile
        log.debug("kernel_select: operand layout unknown (%s: %s)", type(exc).__name__, exc)
        return None
    if None in letters:
        log.debug("kernel_select: operand strides %s are neither row-major nor transposed",
                  [tuple(node.get_stride()) for node in (mat1, mat2)])
        return None
    return "".join(letters)  # type: ignore[arg-type]


def _letter(node: Any, sizevars: Any) -> str | None:
    """"t", "n", or None when the strides of the node's last two dimensions prove neither.

    Mirrors `kernel_select.layouts.layout_of` with static proofs instead of concrete values:
    transposed means contiguous along the rows (stride 1 on dim -2) with a column stride of at
    least the row count (a padded leading dimension still counts); a vector is row-major.
    """
    rows, cols = node.get_size()[-2:]
    row_stride, col_stride = node.get_stride()[-2:]
    if (sizevars.statically_known_equals(row_stride, 1) and sizevars.statically_known_gt(rows, 1)
            and sizevars.statically_known_gt(cols, 1) and sizevars.statically_known_geq(col_stride, rows)):
        return "t"
    vector = sizevars.statically_known_equals(rows, 1) or sizevars.statically_known_equals(cols, 1)
    if vector or sizevars.statically_known_equals(col_stride, 1):
        return "n"
    return None
