"""Which values of M to rank for when Inductor lowers a GEMM whose M is symbolic.

With `mark_dynamic` (or automatic dynamic shapes) one compiled kernel serves every sequence
length, yet Inductor hands the handler a single hint (the first length it saw). Ranking for that
hint alone picks tiles that may be poor for the lengths served later, so the handler ranks for
representative Ms, taken from the first of:

1. the m range of the LUT entry that serves the hint (the table says which lengths it covers);
2. the `dynamic_m` knob / `gemm_dynamic_m` option (buckets, or a range);
3. the symbol's declared range, when both ends are finite (`mark_dynamic(t, d, min=, max=)`);
4. hint/4 .. hint*4.

Inductor's `multi_kernel_hints` compile one variant per hint and dispatch on the runtime size;
each variant is ranked for its own hint, so dispatch gets configs chosen for its bucket.
"""

from __future__ import annotations

import logging
from typing import Any

from kernel_select.select import default_spread, spread_ms

log = logging.getLogger(__name__)

#: Largest upper bound of a declared range that is used as is; above it (int_oo, or a huge
#: "unbounded" max) the range says nothing about the lengths really served.
MAX_DECLARED_M = 2**24


def symbolic_m(kernel_inputs: Any) -> Any | None:
    """M as Inductor's sympy expression when it is symbolic, else None."""
    try:
        m = kernel_inputs.mnk_symbolic()[0]
    except Exception:  # noqa: BLE001 -- without it the GEMM is ranked for its hint, as before
        return None
    if isinstance(m, int) or getattr(m, "is_Integer", False) or getattr(m, "is_number", False):
        return None
    return m


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


def ms_to_rank(hint: int, entry_range: tuple[int, int] | None, knob: tuple[int, ...] | None,
               declared: tuple[int, int] | None) -> tuple[tuple[int, ...], str]:
    """(the Ms to rank a symbolic M for, where they came from), in the order the module doc gives."""
    if entry_range is not None and entry_range[0] < entry_range[1]:
        return spread_ms(*entry_range), "lut m range"
    if knob:
        return knob, "dynamic_m"
    if declared is not None and declared[0] < declared[1]:
        return spread_ms(max(declared[0], 1), declared[1]), "declared range"
    return default_spread(hint), "hint/4..hint*4"


def multi_kernel_hints() -> list[int]:
    """Inductor's `multi_kernel_hints` (positive ints), [] when unset or unknown to this torch."""
    try:
        from torch._inductor import config as inductor_config

        hints = list(getattr(inductor_config, "multi_kernel_hints", []) or [])
    except Exception:  # noqa: BLE001
        return []
    return [int(h) for h in hints if isinstance(h, int) and not isinstance(h, bool) and h >= 1]
