"""Pinned LUT entries: hand Inductor exactly the one pinned choice, so it benchmarks nothing.

Inductor's `AlgorithmSelectorCache.__call__` returns the only choice of a one-choice list
without compiling or benchmarking anything else (and without calling feedback savers), so a
pinned GEMM costs one kernel compile (a Triton pin) or none (an ATen pin).

Most GEMM lowerings ask for all their candidates in one `get_template_configs` call. `addmm`
asks three times: ATen choices first, then the contiguous-bias template, then the Triton
templates. Every call of a pinned problem therefore drops what is not the pin, and a call that
cannot hold the pin returns nothing only when the call that holds it is sure to come (or came);
otherwise the pin cannot be honoured here and Inductor keeps its candidates (one warning).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from kernel_select import runtime
from kernel_select.configs import GemmConfig
from kernel_select.errors import KernelSelectError
from kernel_select.lut import ATEN

log = logging.getLogger(__name__)

#: Lowerings that split their candidates over several get_template_configs calls.
SPLIT_CALL_OPS = frozenset({"addmm"})


def offer_only_pin(choices: dict[str, Iterable[Any]], pin: GemmConfig | str, op_name: str,
                   kernel_inputs: Any, triton_uids: frozenset[str],
                   make_triton: Callable[[Any], Any]) -> dict[str, list[Any]] | None:
    """`choices` reduced to the pinned choice (or to nothing, in a call of a split lowering that
    cannot hold it); None when the pin cannot be honoured and Inductor keeps its candidates.

    Args:
        make_triton: builds the pinned Triton KernelTemplateChoice from Inductor's first
            candidate of the Triton template (the template, layout and problem kwargs).
    """
    empty: dict[str, list[Any]] = {uid: [] for uid in choices}
    if pin == ATEN:
        # The first ATen template with a candidate: addmm's plain `addmm` comes before `bias_addmm`
        # but may have been left out (bias_epilogue.py)
        atens = [uid for uid in choices if uid.startswith("aten::")]
        for aten in atens:
            first = next(iter(choices[aten]), None)
            if first is not None:
                return {**empty, aten: [first]}
        if atens:
            return None
        return empty if op_name in SPLIT_CALL_OPS and _aten_offered() else _cannot_pin(pin, op_name)
    triton = next((uid for uid in choices if uid in triton_uids), None)
    if triton is not None:
        base = next(iter(choices[triton]), None)
        return None if base is None else {**empty, triton: [make_triton(base)]}
    if op_name in SPLIT_CALL_OPS and _triton_offered(kernel_inputs):
        return empty
    return _cannot_pin(pin, op_name)


def _cannot_pin(pin: GemmConfig | str, op_name: str) -> None:
    what = "ATen" if pin == ATEN else "the Triton GEMM template"
    runtime.warn_fallback(
        KernelSelectError(f"a pinned {op_name} entry names {what}, which Inductor does not offer for this "
                          f"GEMM (check max_autotune_gemm_backends)"),
        log, "Inductor autotunes its own candidates for it")
    return None


def _aten_offered() -> bool:
    try:
        from torch._inductor.utils import use_aten_gemm_kernels

        return bool(use_aten_gemm_kernels())
    except Exception:  # noqa: BLE001 -- unsure: keep Inductor's candidates
        return False


def _triton_offered(kernel_inputs: Any) -> bool:
    """Whether addmm's later call will offer the Triton template (Inductor's own test)."""
    try:
        from torch._inductor import config as inductor_config
        from torch._inductor.utils import use_triton_template

        # Without max-autotune addmm asks for ATen only, whatever use_triton_template says.
        autotuning = inductor_config.max_autotune or inductor_config.max_autotune_gemm
        return bool(autotuning and use_triton_template(kernel_inputs.output_layout(),
                                                       check_max_autotune=False))
    except Exception:  # noqa: BLE001 -- unsure: keep Inductor's candidates
        return False
