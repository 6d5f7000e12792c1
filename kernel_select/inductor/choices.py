"""The Inductor choices handler: benchmark only the top-k Triton GEMM configs in max-autotune.

For every mm/addmm/bmm/baddbmm that Inductor autotunes on a CUDA device, `_finalize_template_configs`
reads Inductor's inputs once into a request (inductor/inputs.py), asks `kernel_select.decision.decide()`
under the Policy its knobs give (inductor/settings.py), and builds Inductor's candidate lists from the
selections (inductor/choice_builder.py): the Triton GEMM templates ("triton::mm", "triton::bmm") get the
selected configs (for a problem outside the model's training data, after Inductor's own); everything
else (ATen/cuBLAS, decompose_k, persistent TMA, ...) passes through, so cuBLAS always competes. Nothing
raises inside torch.compile: a failure logs one warning per cause and Inductor keeps its candidates; so
does a device without a trained model. Grouped convolutions get no Triton convolution template
(`get_conv_configs`, inductor/convolution.py). A handler may wrap another one (the handler in place
before install(), e.g. torch's `LookupTableChoices`): it finalizes our lists and keeps every other
heuristic it customizes (inductor/wrapping.py).
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
from kernel_select.decision import GemmRequest, Policy, Selection, decide
from kernel_select.device import get_device
from kernel_select.errors import KernelSelectError, NoTrainedModelError
from kernel_select.inductor import cache_key, choice_builder, inputs
from kernel_select.inductor.settings import Settings, policy, resolve_settings, validated_overrides
from kernel_select.inductor.wrapping import WrappingChoices

log = logging.getLogger(__name__)

#: Template uids whose candidates we replace. The persistent-TMA and Blackwell templates have their own
#: config lists and kwargs, so they pass through like the extern choices.
TRITON_GEMM_TEMPLATES = frozenset({"triton::mm", "triton::bmm"})
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
        """Changes whenever the selection could change: k, the LUT's contents, the model, the device,
        the cuBLAS decision, the wrapped handler. Inductor puts it into its FX-graph cache key (2.13
        calls it; 2.11 pickles the factory, whose pickle carries it), so caches never serve choices
        made with other knobs. Never raises and never blocks: the LUT is hashed with a bounded read."""
        try:
            return cache_key.hash_parts(cache_key.parts(self.settings(), self.inner))
        except Exception as exc:  # noqa: BLE001 -- a cache key must always be produced
            warn.warn_fallback(exc, log, _FALLBACK)
            return cache_key.hash_parts([f"invalid:{warn.cause_of(exc)}"])

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
        """`choices` with the Triton GEMM templates' candidates replaced (or, for a pinned problem,
        reduced to the pin), or None to pass through."""
        settings = self.settings()
        if settings.gemm_topk == options.SAME:  # Inductor's own list, untouched
            return None
        choices = choice_builder.prefer_bias_epilogue(choices, op_name)
        if op_name not in GEMM_OPS or kernel_inputs.device_type != "cuda" or torch.version.hip is not None:
            return choices
        request = inputs.request_from(kernel_inputs, op_name)
        rules = self._policy(settings, request) if request is not None else None
        if request is None or rules is None:
            return choices
        bases = choice_builder.peek_first(choices, [uid for uid in choices if uid in TRITON_GEMM_TEMPLATES])
        with _stack_headroom():
            selections = decide(request, rules, rank_triton=bool(bases))
        if not selections:
            return choices  # no Triton candidates to replace and no pin to honour
        if selections[0].pinned is not None:
            offered = choice_builder.offer_pin(selections[0], choices, kernel_inputs, op_name,
                                               kwarg_overrides, request.k_expr, TRITON_GEMM_TEMPLATES)
            self.selections.extend(selections[:1] if offered is not None and any(offered.values()) else ())
            return offered
        if selections[0].outside:
            warn.warn_once(("outside", request.problem.op, selections[0].outside), log,
                           "kernel_select: %s: %s; Inductor's own configs are benchmarked beside the model's",
                           request.problem, selections[0].outside, level=logging.INFO)
        self.selections.extend(selections)
        for selection in selections:
            log.info("kernel_select: %s", selection.summary())
        return choice_builder.replace_triton(choices, bases, selections, request.k_expr, kwarg_overrides)

    def _policy(self, settings: Settings, request: GemmRequest) -> Policy | None:
        """The Policy for the GPU compiled for, or None where no trained model serves it."""
        device = (get_device(settings.gemm_device) if settings.gemm_device
                  else runtime.detected_device(request.device_index))
        try:
            return policy(settings, device)
        except NoTrainedModelError as exc:  # not an error: this GPU gets Inductor's own list
            warn.warn_once(("no model", device.key), log, "kernel_select: %s; Inductor benchmarks its own "
                           "GEMM configs on this GPU", exc)
            return None

    def preload(self) -> None:
        """Load the LUT, the model and the cuBLAS gate now, outside any compile (inside Inductor's
        lowering, at the bottom of a deep stack, load_state_dict failed with RecursionError on the H100
        with torch 2.11). Needs the device: the `gemm_device` knob, or the current CUDA device.

        Raises:
            NoTrainedModelError, ModelError, LUTError: what the first compile would meet.
        """
        settings = self.settings()
        if settings.gemm_topk == options.SAME:
            return
        device = get_device(settings.gemm_device) if settings.gemm_device else runtime.current_device()
        if device is not None:  # else no GPU to compile for yet: the first compile loads them
            policy(settings, device)


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
