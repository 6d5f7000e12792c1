"""The GEMMs a compile lowers, as the choices handler is asked about them: `lowered_gemms()`.

    with lowered_gemms() as gemms:
        torch.compile(model, options=...)(*inputs)     # nothing is benchmarked
    for gemm in gemms: ...                             # problem, epilogue, dynamic size and range

`kernel-select pretune` reads a model's GEMMs this way rather than from an eager run, so it sees
what Inductor lowers (an addmm's bias, the pointwise consumers a Triton template would fuse, the
operand layouts after Inductor's own layout decisions), in the terms the handler will see them at
serving time (kernel_select.inductor.inputs).

Inside the block a recording handler answers every GEMM lowering with ATen alone, so nothing is
compiled or benchmarked for it, and passes every other choice through; the FX-graph and autotune
caches are off, so every graph is lowered. A dynamic size is read from the symbolic M or K: its
declared range (`mark_dynamic(t, dim, min=, max=)`) and how many of the length it is per unit
(M = 4 * length for a batch of four sequences), which pretune needs to share bucket edges across
GEMMs. A GEMM whose size follows the length other than as one multiple of one symbol (N does, or
M and K both, or no range was declared) is recorded with the reason it cannot be pinned per range.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterable, Iterator
from typing import Any

from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V

from kernel_select import warn
from kernel_select.inductor import choice_builder, inputs
from kernel_select.model.cublas import Epilogue
from kernel_select.problem import Problem
from kernel_select.decision import ATEN

log = logging.getLogger(__name__)

GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})


@dataclasses.dataclass(frozen=True)
class LoweredGemm:
    """One GEMM Inductor lowered: the problem at the hinted sizes (the layout its strides prove),
    its epilogue, and the size that follows a dynamic length ("m", "k" or None) with its declared
    range (low..high, in that size's units) and `per_length`, that size per unit of the length.
    `unpinnable` says why a dynamic GEMM cannot get a pin per range ("" where it can)."""

    problem: Problem
    epilogue: Epilogue = Epilogue()
    dynamic: str | None = None
    low: int = 0
    high: int = 0
    per_length: int = 1
    unpinnable: str = ""


class RecordingChoices(InductorChoices):
    """Records each GEMM lowering it is asked about into `sink` and offers Inductor ATen alone for it."""

    def __init__(self, sink: list[LoweredGemm]) -> None:
        super().__init__()
        self.sink = sink

    def _finalize_template_configs(self, template_choices: dict[str, Iterable[Any]], kernel_inputs: Any,
                                   templates: list[Any], op_name: str,
                                   kwarg_overrides: dict[str, dict[str, Any]] | None = None) -> list[Any]:
        choices = dict(template_choices)
        try:
            reduced = self._record(choices, kernel_inputs, op_name)
        except Exception as exc:  # noqa: BLE001 -- nothing may raise inside torch.compile
            warn.warn_fallback(exc, log, "this GEMM is not recorded")
            reduced = None
        return super()._finalize_template_configs(reduced if reduced is not None else choices, kernel_inputs,
                                                  templates, op_name, kwarg_overrides)

    def _record(self, choices: dict[str, Iterable[Any]], kernel_inputs: Any,
                op_name: str) -> dict[str, Iterable[Any]] | None:
        if op_name not in GEMM_OPS:
            return None
        triton = [uid for uid in choices if uid in choice_builder.TRITON_GEMM_TEMPLATES]
        firsts = choice_builder.peek_first(choices, triton)  # their ALLOW_TF32: a TF32 GEMM
        problem = inputs.problem_of(kernel_inputs, op_name, firsts.values())
        if problem is None:
            return None
        self.sink.append(lowered_gemm(problem, inputs.epilogue_of(kernel_inputs, problem),
                                      _symbolic(kernel_inputs)))
        choices = choice_builder.prefer_bias_epilogue(choices, op_name)
        return choice_builder.offer_only_pin(choices, ATEN, op_name, kernel_inputs, frozenset(),
                                         lambda base: base)


def _symbolic(kernel_inputs: Any) -> tuple[Any, Any, Any]:
    try:
        return tuple(kernel_inputs.mnk_symbolic())  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 -- unreadable: recorded as static
        return None, None, None


def lowered_gemm(problem: Problem, epilogue: Epilogue, mnk: tuple[Any, Any, Any]) -> LoweredGemm:
    """The record of one lowering, its dynamic size read from Inductor's (M, N, K) expressions."""
    m, n, k = (expr if _symbolic_expr(expr) else None for expr in mnk)
    if m is None and n is None and k is None:
        return LoweredGemm(problem, epilogue)
    if n is not None:
        return LoweredGemm(problem, epilogue,
                           unpinnable=f"N = {n} follows the length (a LUT entry has one N)")
    if m is not None and k is not None:
        return LoweredGemm(problem, epilogue, unpinnable=f"M = {m} and K = {k} both follow the length")
    dim, expr = ("m", m) if m is not None else ("k", k)
    per_length = _per_length(expr)
    if per_length is None:
        return LoweredGemm(problem, epilogue,
                           unpinnable=f"{dim.upper()} = {expr} is not a multiple of one length")
    declared = inputs.declared_range(expr)
    if declared is None:
        return LoweredGemm(problem, epilogue, dim, per_length=per_length,
                           unpinnable=f"{dim.upper()} = {expr} has no declared range; mark the length with "
                                      "mark_dynamic(t, dim, min=, max=)")
    return LoweredGemm(problem, epilogue, dim, declared[0], declared[1], per_length)


def _symbolic_expr(expr: Any) -> bool:
    return expr is not None and not isinstance(expr, int) and not getattr(expr, "is_number", True)


def _per_length(expr: Any) -> int | None:
    """a for an expression a * s of one symbol s (a a positive integer), else None."""
    try:
        coefficient, rest = expr.as_coeff_Mul()
    except AttributeError:
        return None
    if not getattr(rest, "is_Symbol", False) or not getattr(coefficient, "is_Integer", False):
        return None
    return int(coefficient) if int(coefficient) >= 1 else None


@contextlib.contextmanager
def lowered_gemms() -> Iterator[list[LoweredGemm]]:
    """Record the GEMMs every compile in this thread lowers inside the block (module doc)."""
    import torch

    sink: list[LoweredGemm] = []
    with V.set_choices_handler(RecordingChoices(sink)), \
            torch.compiler.config.patch(force_disable_caches=True):
        yield sink
