"""The Inductor choices handler: benchmark only the top-k Triton GEMM configs in max-autotune.

For every mm/addmm/bmm/baddbmm Inductor autotunes on a CUDA device, `_finalize_template_configs` reads
Inductor's inputs once into a request (inductor/inputs.py), asks `kernel_select.decision.decide()` under
the Policy its knobs give (inductor/settings.py) and builds the candidate lists from the selections
(inductor/choice_builder.py): the Triton GEMM templates get the selected configs; ATen (cuBLAS),
decompose_k and every other template pass through, so cuBLAS always competes; but a GEMM with one
choice (a LUT pin, or gemm_topk=1's cuBLAS decision) gets that choice alone and nothing is benchmarked.
Nothing raises inside torch.compile: a failure logs one warning per cause and Inductor keeps its
candidates. Wrapping another handler and grouped convolutions: inductor/wrapping.py.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch._inductor.choices import InductorChoices

from kernel_select import options, runtime, warn
from kernel_select.decision import Selection, decide
from kernel_select.device import get_device
from kernel_select.errors import KernelSelectError
from kernel_select.inductor import cache_key, choice_builder, inputs
from kernel_select.inductor.choice_builder import TRITON_GEMM_TEMPLATES
from kernel_select.inductor.settings import Settings, policy, preload, resolve_settings, validated_overrides
from kernel_select.inductor.wrapping import WrappingChoices

log = logging.getLogger(__name__)

#: Inductor op names we rank for (others, e.g. "mm-ah", "int_mm", "scaled_mm", pass through).
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
_FALLBACK = "Inductor benchmarks its own GEMM configs instead"


class KernelSelectChoices(WrappingChoices):
    """Inductor choices handler that benchmarks only the top-k Triton GEMM configs.

    Args:
        **knobs: override kernel_select.knobs for this handler (kernel_select.options names them;
            None = use the knob). `gemm_model` may also be a PerformanceModel instance.
        inner: a handler to compose with (None = Inductor's defaults). It receives our candidate lists
            in its own `_finalize_template_configs` (so a torch lookup-table hit still wins) and
            answers every other heuristic it overrides (inductor/wrapping.py).
    """

    def __init__(self, *, inner: InductorChoices | None = None, **knobs: Any) -> None:
        # Cheap on purpose: torch 2.13 instantiates the factory at every cache-key computation.
        self._overrides = validated_overrides(knobs, where="KernelSelectChoices")
        self.selections: deque[Selection] = deque(maxlen=256)
        super().__init__(inner)

    def __repr__(self) -> str:
        args = [f"{k}={v!r}" for k, v in sorted(self._overrides.items())]
        if self.inner is not None:
            args.append(f"inner={type(self.inner).__name__}")
        return f"KernelSelectChoices({', '.join(args)})"

    def settings(self) -> Settings:
        """The knobs in effect right now (they can change per compile via torch options)."""
        return resolve_settings(self._overrides)

    def passes_through(self) -> bool:
        return self.settings().gemm_topk == options.SAME

    def uuid(self) -> str:
        """Changes whenever the selection could change (inductor/cache_key.py, `uuid`); never raises."""
        return cache_key.uuid(self.settings, self.inner, log, _FALLBACK)

    def _finalize_template_configs(self, template_choices: dict[str, Iterable[Any]], kernel_inputs: Any,
                                   templates: list[Any], op_name: str,
                                   kwarg_overrides: dict[str, dict[str, Any]] | None = None) -> list[Any]:
        # Work on a copy: replacing entries must not touch the caller's dict, and if anything fails,
        # `choices` still holds Inductor's complete candidate generators.
        choices = dict(template_choices)
        try:
            replaced = self._replace(choices, kernel_inputs, op_name, kwarg_overrides or {})
        except Exception as exc:  # noqa: BLE001 -- nothing may raise inside torch.compile
            warn.warn_fallback(exc, log, _FALLBACK)
            replaced = None
        final = replaced if replaced is not None else choices
        # The wrapped handler (or the base class) flattens the per-template lists; in 2.13 the base
        # class also logs the shape.
        finalize = (self.inner._finalize_template_configs if self.inner is not None
                    else super()._finalize_template_configs)
        return finalize(final, kernel_inputs, templates, op_name, kwarg_overrides)

    def _replace(self, choices: dict[str, Iterable[Any]], kernel_inputs: Any, op_name: str,
                 kwarg_overrides: dict[str, dict[str, Any]]) -> dict[str, Iterable[Any]] | None:
        """`choices` with the Triton GEMM templates' candidates replaced (or, for a problem with one
        choice, a LUT pin or gemm_topk=1's decision, reduced to it), or None to pass through."""
        settings = self.settings()
        if settings.gemm_topk == options.SAME:  # Inductor's own list, untouched
            return None
        choices = choice_builder.prefer_bias_epilogue(choices, op_name)
        if op_name not in GEMM_OPS or kernel_inputs.device_type != "cuda" or torch.version.hip is not None:
            return choices
        bases = choice_builder.peek_first(choices, [uid for uid in choices if uid in TRITON_GEMM_TEMPLATES])
        request = inputs.request_from(kernel_inputs, op_name, bases.values())  # ALLOW_TF32 read off `bases`
        if request is None:
            return choices
        device = (get_device(settings.gemm_device) if settings.gemm_device
                  else runtime.detected_device(request.device_index or 0))  # None: no CUDA, detect() says so
        rules = policy(settings, device)
        if rules is None:  # no trained model serves this GPU: Inductor's own list
            return choices
        # addmm's ATen call decides too where the answer may be one choice: ATen goes if Triton is it.
        rank_triton = bool(bases) or (rules.one_choice and choice_builder.triton_comes_later(kernel_inputs,
                                                                                             op_name))
        with _stack_headroom():
            selections = decide(request, rules, rank_triton=rank_triton)
        if not selections:
            return choices  # no Triton candidates to replace and no pin to honour
        if selections[0].sole is not None:
            offered = choice_builder.offer_sole(selections[0], choices, kernel_inputs, op_name,
                                                kwarg_overrides, request.k_expr, TRITON_GEMM_TEMPLATES)
            self.selections.extend(selections[:1] if offered is not None and any(offered.values()) else ())
            return offered
        self.selections.extend(selections)
        for selection in selections:
            log.info("kernel_select: %s", selection.summary())
        return choice_builder.replace_triton(choices, bases, selections, request.k_expr, kwarg_overrides)

    def preload(self) -> None:
        """Load and check what a compile will read, now (inductor/settings.py, `preload`).

        Raises:
            LUTError, ModelError: a LUT or a model that a compile could not use.
        """
        preload(self.settings())


@contextlib.contextmanager
def _stack_headroom(extra_frames: int = 4000) -> Iterator[None]:
    """Raise Python's recursion limit while selecting: the hook runs deep inside Dynamo and Inductor,
    and torch/pickle calls from there can otherwise exceed the default limit."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(previous + extra_frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


__all__ = ["GEMM_OPS", "KernelSelectChoices", "KernelSelectError", "TRITON_GEMM_TEMPLATES"]
