"""Operand memory layouts of a GEMM C[M, N] = A[M, K] @ B[K, N], named as pretune names them.

A layout is two letters, A's then B's: "n" the operand is stored row-major as the product reads it
(A as [M, K], B as [K, N]), "t" it is stored transposed (A as [K, M], B as [N, K], each contiguous)
and read through a transposed view. `nn.Linear` runs all three non-trivial cases: its forward
`x @ W.t()` is "nt", its input gradient `grad_y @ W` is "nn" and its weight gradient
`grad_y.t() @ x` is "tn".

Pure Python: nothing here imports torch (`layout_of` only reads the strides of tensors given to it).
"""

from __future__ import annotations

from typing import Any

from kernel_select.errors import ProblemError

#: Every layout, A then B: "n" row-major, "t" a transposed view of a row-major buffer.
LAYOUTS: tuple[str, ...] = ("nn", "nt", "tn", "tt")
#: What a problem without a layout is: `a @ b` on contiguous tensors.
DEFAULT_LAYOUT = "nn"


def check_layout(layout: object) -> str:
    """The layout itself if it is one of LAYOUTS.

    Raises:
        ProblemError: naming the accepted layouts and what the letters mean.
    """
    if layout not in LAYOUTS:
        raise ProblemError(f"layout: unsupported layout {layout!r}; use one of {', '.join(LAYOUTS)} "
                           "(A then B; 't': stored transposed, as W in x @ W.t())")
    return str(layout)


def a_transposed(layout: str) -> bool:
    return check_layout(layout)[0] == "t"


def b_transposed(layout: str) -> bool:
    return check_layout(layout)[1] == "t"


def stored_shape(rows: int, cols: int, transposed: bool) -> tuple[int, int]:
    """The shape of the contiguous buffer behind a [rows, cols] operand."""
    return (cols, rows) if transposed else (rows, cols)


def view_strides(rows: int, cols: int, transposed: bool) -> tuple[int, int]:
    """The strides of the [rows, cols] view of that buffer, as torch gives them (a contiguous
    buffer's strides are the products of the sizes after each dimension, size-1 dimensions too)."""
    return (1, rows) if transposed else (cols, 1)


def operand_strides(m: int, n: int, k: int, layout: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """((stride_am, stride_ak), (stride_bk, stride_bn)): the strides Inductor's mm template reads
    for the views A[M, K] and B[K, N] in `layout`."""
    return view_strides(m, k, a_transposed(layout)), view_strides(k, n, b_transposed(layout))


def layout_of(a: Any, b: Any) -> str:
    """The layout of the last two dimensions of tensors `a` and `b` (A then B): "t" for an operand
    that is a transposed view (its rows are contiguous in memory), as W.t() in a Linear's forward or
    grad_y.t() in its weight gradient; "n" otherwise."""
    return "".join("t" if _letter(list(x.shape), list(x.stride())) == "t" else "n" for x in (a, b))


def layout_from_strides(a: tuple[list[int], list[int]], b: tuple[list[int], list[int]]) -> str | None:
    """The layout of operands given as (shape, strides) pairs (the last two dimensions count), as
    Inductor's AUTOTUNE log and lookup_table keys spell them; None when an operand is neither a
    row-major [rows, cols] nor a transposed view of one (a slice with a step, a broadcast), so a
    writer leaves the layout out instead of guessing."""
    letters = [_letter(*operand) for operand in (a, b)]
    return None if None in letters else "".join(letters)  # type: ignore[arg-type]


def _letter(shape: list[int], strides: list[int]) -> str | None:
    if len(shape) < 2 or len(strides) != len(shape):
        return None
    rows, cols = shape[-2:]
    row_stride, col_stride = strides[-2:]
    if row_stride == 1 and col_stride >= rows and rows > 1 and cols > 1:
        return "t"
    if col_stride == 1 or rows == 1 or cols == 1:
        return "n"
    return None
