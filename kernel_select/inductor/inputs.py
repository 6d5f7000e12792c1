"""What Inductor hands the handler, read once into a `GemmRequest` (kernel_select.decision): the
Problem it lowers (sizes, dtype, op, operand layout, TF32), what follows the GEMM (a bias row, a pointwise
epilogue: the cuBLAS decision's `Epilogue`), whether M is symbolic, the declared ranges of a symbolic
M and K, Inductor's multi-kernel hints, K's expression and the device index. Nothing here raises:
what cannot be read gets the neutral answer ("nn", no epilogue, no range, no hints).

Operand layout. A = mat1, B = mat2 of Inductor's MMKernelInputs (addmm's and baddbmm's bias is not an
operand); for bmm the last two dimensions. An operand is "t" only where its strides prove it a
transposed view of a row-major buffer for every size the graph accepts, "n" where they prove it
row-major; if either operand is neither (a symbolic stride, a slice with a step, a broadcast), the
layout is "nn".

A symbolic M. With `mark_dynamic` (or automatic dynamic shapes) one compiled kernel serves every
sequence length, yet Inductor hands the handler a single hint (the first length it saw). Which Ms the
decision ranks for instead (kernel_select.problem.m_values_to_rank) depends on the LUT entry serving
the hint, the `gemm_dynamic_m` knob and the symbol's declared range, read here. Inductor's
`multi_kernel_hints` compile one variant per hint, benchmark each, and dispatch on the runtime size;
each variant is ranked for its own hint. A pinned GEMM (one choice) gets no variants: one graph per
length bucket serves per-bucket pins (kernel_select.inductor.bucketed says why).

TF32. A float32 GEMM runs with TF32 where Inductor sets ALLOW_TF32 for it (kernel_select.tf32): read
from Inductor's own first Triton candidate of the call, the flag its kernels will be compiled with;
where the call offers no Triton template (addmm's ATen-only call), from Inductor's rule under the
running torch's settings, on the sizes as the graph knows them (a symbolic size by its range). The
Problem then says `tf32`, which no shipped model was trained on: the decision treats it as outside
the model's domain and Inductor's own candidates stay beside the model's.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from kernel_select.decision import GemmRequest
from kernel_select.errors import ProblemError
from kernel_select.inductor import pointwise_epilogue
from kernel_select.layouts import DEFAULT_LAYOUT
from kernel_select.model.cublas import Epilogue
from kernel_select.problem import Problem, dtype_name
from kernel_select.tf32 import Size, inductor_allow_tf32

log = logging.getLogger(__name__)


def request_from(kernel_inputs: Any, op_name: str, triton_firsts: Iterable[Any] = ()) -> GemmRequest | None:
    """Everything the handler reads from Inductor for one GEMM, or None for a problem we do not model.
    `triton_firsts`: Inductor's first candidate of each Triton GEMM template in this call (none in a
    call without one), whose ALLOW_TF32 says whether the GEMM runs with TF32."""
    problem = problem_of(kernel_inputs, op_name, triton_firsts)
    if problem is None:
        return None
    m_expr, k_expr = symbolic_m(kernel_inputs), symbolic_k(kernel_inputs)
    return GemmRequest(problem, epilogue_of(kernel_inputs, problem), dynamic_m=m_expr is not None,
                       served=served_ranges(m_expr, k_expr),
                       hints=tuple(multi_kernel_hints()) if m_expr is not None else (),
                       k_expr=k_expr, device_index=device_index(kernel_inputs))


def problem_of(kernel_inputs: Any, op_name: str, triton_firsts: Iterable[Any] = ()) -> Problem | None:
    """`problem_from`, with `tf32` where the float32 GEMM runs with TF32 (`runs_tf32`)."""
    problem = problem_from(kernel_inputs, op_name)
    if problem is not None and problem.dtype == "float32" and runs_tf32(kernel_inputs, triton_firsts):
        return dataclasses.replace(problem, tf32=True)
    return problem


def problem_from(kernel_inputs: Any, op_name: str) -> Problem | None:
    """The Problem Inductor is lowering (hinted sizes, the operands' layout; never `tf32`: that is
    `problem_of`'s), or None for one we do not model (int8/fp8 inputs, empty tensors)."""
    m, n, k = (int(x) for x in kernel_inputs.mnk_hinted())  # Inductor's order is M, N, K
    batch = int(kernel_inputs.batch_hinted()) if op_name in ("bmm", "baddbmm") else 1
    try:
        return Problem(m, n, k, dtype_name(kernel_inputs.dtype()), batch=batch, op=op_name,
                       layout=layout_from(kernel_inputs))
    except ProblemError as exc:
        log.debug("kernel_select: passing %s through: %s", op_name, exc)
        return None


def runs_tf32(kernel_inputs: Any, triton_firsts: Iterable[Any] = ()) -> bool:
    """Whether Inductor runs this float32 GEMM's Triton kernels with TF32 (module docstring): the
    ALLOW_TF32 of its first Triton candidate in `triton_firsts`, else Inductor's rule. False where
    neither can be read: never raises."""
    for choice in triton_firsts:
        flag = _allow_tf32_of(choice)
        if flag is not None:
            return flag
    try:
        sizes = [_size_bounds(size) for size in kernel_inputs.mnk_symbolic()]
        return inductor_allow_tf32(*sizes, force_same_precision=_force_same_precision())
    except Exception as exc:  # noqa: BLE001 -- nothing may raise inside torch.compile
        log.debug("kernel_select: ALLOW_TF32 unknown (%s: %s); ranking as float32 without TF32",
                  type(exc).__name__, exc)
        return False


def _allow_tf32_of(choice: Any) -> bool | None:
    """ALLOW_TF32 of one of Inductor's KernelTemplateChoices: a template-wide kwarg (torch 2.11 and
    2.13 return it from the heuristic's `get_extra_kwargs`), or None where it carries none."""
    for kwargs in (getattr(choice, "extra_kwargs", None), _params_of(choice)):
        if isinstance(kwargs, dict) and "ALLOW_TF32" in kwargs:
            return bool(kwargs["ALLOW_TF32"])
    return None


def _params_of(choice: Any) -> dict[str, Any] | None:
    try:
        return choice.params.to_kwargs()
    except Exception:  # noqa: BLE001 -- not a template choice we can read: no flag there
        return None


def _size_bounds(size: Any) -> Size:
    """A size as kernel_select.tf32 takes it: the int, or a symbolic size's (low, high) range."""
    if isinstance(size, int) or getattr(size, "is_Integer", False):
        return int(size)
    from torch._inductor.virtualized import V

    bounds = V.graph.sizevars.shape_env.bound_sympy(size)
    low = int(bounds.lower)
    # The rule reads a symbolic size's lower bound and whether it has one value; an unbounded
    # upper end (int_oo, which int() refuses) only says "several values".
    high = int(bounds.upper) if bounds.upper.is_Integer else low + 1
    return low, high


def _force_same_precision() -> bool:
    """Inductor's `force_same_precision` (torch 2.11; 2.13 has none)."""
    from torch._inductor import config as inductor_config

    return bool(getattr(inductor_config, "force_same_precision", False))


def epilogue_of(kernel_inputs: Any, problem: Problem) -> Epilogue:
    """What follows the GEMM being lowered, as the cuBLAS decision sees it."""
    return Epilogue(bias_row=row_bias(kernel_inputs, problem.op),
                    separate_pointwise=pointwise_epilogue.lowering_has_separate_epilogue(
                        problem.batch * problem.m * problem.n))


def device_index(kernel_inputs: Any) -> int | None:
    """The CUDA device index the GEMM is compiled for (the current one where the inputs name none), or
    None where neither tells (a CPU lowering in a process without CUDA)."""
    import torch

    try:
        index = kernel_inputs.device().index
        return torch.cuda.current_device() if index is None else int(index)
    except Exception:  # noqa: BLE001 -- read for every GEMM, CPU ones too: never raises
        return None


def symbolic_k(kernel_inputs: Any) -> Any:
    """K as Inductor's expression (an int when static), or None when it cannot be read."""
    try:
        return kernel_inputs.mnk_symbolic()[2]
    except Exception:  # noqa: BLE001 -- EVEN_K=False is always correct, just slower
        return None


def served_ranges(m_expr: Any, k_expr: Any) -> dict[str, tuple[int, int]]:
    """The declared (low, high) of a symbolic M and of a symbolic K ({"m": ..., "k": ...}, each
    where it has one; `symbolic_m` and `symbolic_k` read the expressions): the sizes the compiled
    kernel serves. Never raises."""
    served = {}
    for dim, expr in (("m", m_expr), ("k", None if _is_number(k_expr) else k_expr)):
        declared = declared_range(expr) if expr is not None else None
        if declared is not None:
            served[dim] = declared
    return served


def _is_number(expr: Any) -> bool:
    return isinstance(expr, int) or bool(getattr(expr, "is_number", False))


def symbolic_m(kernel_inputs: Any) -> Any | None:
    """M as Inductor's sympy expression when it is symbolic, else None."""
    try:
        m = kernel_inputs.mnk_symbolic()[0]
    except Exception:  # noqa: BLE001 -- without it the GEMM is ranked for its hint
        return None
    if isinstance(m, int) or getattr(m, "is_Integer", False) or getattr(m, "is_number", False):
        return None
    return m


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


def layout_from(kernel_inputs: Any) -> str:
    """The layout of mat1 and mat2 in `kernel_inputs`, or "nn" where it cannot be proven.

    Never raises: it runs inside torch.compile, where an unknown layout only costs `gemm_topk="auto"`
    its cap where "nn" lies outside the model's data (and the layout feature), not the compile.
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


#: Largest upper bound of a declared range that is used as is; above it (int_oo, or a huge
#: "unbounded" max) the range says nothing about the lengths really served.
MAX_DECLARED_M = 2**24


def declared_range(m_expr: Any) -> tuple[int, int] | None:
    """The (low, high) Inductor's shape environment allows for `m_expr`, when both are finite."""
    try:
        from torch._inductor.virtualized import V

        bounds = V.graph.sizevars.shape_env.bound_sympy(m_expr)
        low, high = int(bounds.lower), int(bounds.upper)
    except Exception:  # noqa: BLE001 -- int_oo, no graph, or an older shape env: no declared range
        return None
    if not 1 <= low <= high <= MAX_DECLARED_M:
        return None
    return low, high


def multi_kernel_hints() -> list[int]:
    """Inductor's `multi_kernel_hints` (positive ints), [] when unset or unknown to this torch."""
    try:
        from torch._inductor import config as inductor_config

        hints = list(getattr(inductor_config, "multi_kernel_hints", []) or [])
    except Exception:  # noqa: BLE001
        return []
    return [int(h) for h in hints if isinstance(h, int) and not isinstance(h, bool) and h >= 1]
