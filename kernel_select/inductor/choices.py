"""The Inductor choices handler: benchmark only the top-k Triton GEMM configs in max-autotune.

`KernelSelectChoices` is an `InductorChoices` handler. For every mm/addmm/bmm/baddbmm that Inductor
autotunes on a CUDA device, `_finalize_template_configs` does four steps:

  1. translate  Inductor's inputs into a Problem, its Epilogue and, for a symbolic M, the Ms to rank
                for (inductor/inputs.py)
  2. select     `kernel_select.select.select()`: the pin, the LUT's entries, the model's top-k, the
                cuBLAS decision
  3. translate back  the Selection into Inductor's candidate lists (inductor/candidates.py): the
                Triton GEMM templates ("triton::mm", "triton::bmm") get the selected configs (for a
                problem outside the model's training data, after Inductor's own: never narrower than
                stock); everything else (ATen/cuBLAS, decompose_k, persistent TMA, ...) passes
                through, so cuBLAS always competes
  4. fall back  nothing raises inside torch.compile: any failure logs one warning per cause and
                Inductor keeps its own candidates; so does a device without a trained model

Grouped convolutions get no Triton convolution template (`get_conv_configs`, inductor/convolution.py):
it does at least `groups` times their work, and cuDNN runs them alone without benchmarking.

A handler may wrap another one (the handler in place before install(), e.g. torch's own
`LookupTableChoices`): the wrapped handler finalizes the candidate lists we produce and keeps every
other heuristic it customizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import logging
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V

from kernel_select import options, runtime, warn
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import KernelSelectError, NoTrainedModelError
from kernel_select.inductor import cache_key, candidates, convolution, inputs
from kernel_select.inductor.settings import Settings, resolve_settings, validated_overrides
from kernel_select.model.cublas import Epilogue
from kernel_select.problem import Problem
from kernel_select.select import Selection, select

log = logging.getLogger(__name__)

#: Template uids whose candidates we replace. The persistent-TMA and Blackwell templates have their own
#: config lists and kwargs, so they pass through like the extern choices.
TRITON_GEMM_TEMPLATES = frozenset({"triton::mm", "triton::bmm"})
#: Inductor op names we rank for (others, e.g. "mm-ah", "int_mm", "scaled_mm", pass through).
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
_FALLBACK = "Inductor benchmarks its own GEMM configs instead"


class KernelSelectChoices(InductorChoices):
    """Inductor choices handler that benchmarks only the top-k Triton GEMM configs.

    Args:
        **knobs: override kernel_select.knobs for this handler (kernel_select.options names them;
            None = use the knob). `gemm_model` may also be a PerformanceModel instance.
        inner: a handler to compose with (None = Inductor's defaults). It receives our candidate lists
            in its own `_finalize_template_configs` (so a torch lookup-table hit still wins) and
            answers every other heuristic it overrides.
    """

    def __init__(self, *, inner: InductorChoices | None = None, **knobs: Any) -> None:
        super().__init__()
        # Cheap on purpose: torch 2.13 instantiates the factory at every cache-key computation.
        self._overrides = validated_overrides(knobs, where="KernelSelectChoices")
        self.inner = inner if type(inner) is not InductorChoices else None
        self.selections: deque[Selection] = deque(maxlen=256)
        if self.inner is not None:
            _delegate_customized_heuristics(self, self.inner)

    def __repr__(self) -> str:
        args = [f"{k}={v!r}" for k, v in sorted(self._overrides.items())]
        if self.inner is not None:
            args.append(f"inner={type(self.inner).__name__}")
        return f"KernelSelectChoices({', '.join(args)})"

    def settings(self) -> Settings:
        """The knobs in effect right now (they can change per compile via torch options)."""
        return resolve_settings(self._overrides)

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

    # -- the hook ---------------------------------------------------------------------------------

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
        choices = candidates.prefer_bias_epilogue(choices, op_name)
        if op_name not in GEMM_OPS or kernel_inputs.device_type != "cuda" or torch.version.hip is not None:
            return choices
        problem = inputs.problem_from(kernel_inputs, op_name)
        if problem is None:
            return choices
        device = (get_device(settings.gemm_device) if settings.gemm_device
                  else runtime.detected_device(inputs.device_index(kernel_inputs)))
        try:
            model = runtime.model(settings.gemm_model, device)
        except NoTrainedModelError as exc:  # not an error: this GPU gets Inductor's own list
            warn.warn_once(("no model", device.key), log, "kernel_select: %s; Inductor benchmarks its own "
                           "GEMM configs on this GPU", exc)
            return choices
        lut = runtime.load_lut(settings.kernel_lut_path) if settings.kernel_lut_path else None
        uids = [uid for uid in choices if uid in TRITON_GEMM_TEMPLATES]
        bases = candidates.peek_first(choices, uids) if uids else {}
        pinned_of = getattr(lut, "pinned", None)
        if not bases and (pinned_of is None or pinned_of(problem, device.key) is None):
            return choices  # no Triton candidates to replace and no pin to honour: nothing to rank
        k_symbolic = inputs.symbolic_k(kernel_inputs)
        with _stack_headroom():
            selections = self._select_all(problem, inputs.epilogue_of(kernel_inputs, problem), device,
                                          settings, lut, model, inputs.symbolic_m(kernel_inputs),
                                          inputs.served_ranges(kernel_inputs))
        if selections[0].pinned is not None:
            return self._offer_pin(selections[0], choices, kernel_inputs, op_name, kwarg_overrides,
                                   k_symbolic)
        replaced = dict(choices)
        for uid, base in bases.items():
            overrides = kwarg_overrides.get(uid, {})
            ours = [choice for selection in selections
                    for choice in candidates.synthesize(selection, base, k_symbolic, overrides)]
            replaced[uid] = candidates.beside_own(choices[uid], ours) if selections[0].outside else ours
        if selections[0].outside:
            warn.warn_once(("outside", selections[0].problem.op, selections[0].outside), log,
                           "kernel_select: %s: %s; Inductor's own configs are benchmarked beside the model's",
                           selections[0].problem, selections[0].outside, level=logging.INFO)
        self.selections.extend(selections)
        for selection in selections:
            _log_selection(selection)
        return replaced

    def _select_all(self, problem: Problem, epilogue: Epilogue, device: DeviceSpec, settings: Settings,
                    lut: Any, model: Any, m_symbolic: Any,
                    served: dict[str, tuple[int, int]]) -> list[Selection]:
        """One selection for a static M; for a symbolic M, one over the Ms it will take plus one per
        Inductor multi-kernel hint (each for its hint, tagged with it). `served`: the declared ranges
        of a symbolic M or K, which tell select() whether a pin covers every size the kernel serves."""
        gate = runtime.gate(device) if settings.gemm_cublas_margin is not None else None

        def one(problem: Problem, ms: tuple[int, ...] | None = None, served: Any = None) -> Selection:
            return select(problem, model=model, gemm_topk=settings.gemm_topk, lut=lut, gate=gate,
                          cublas_margin=settings.gemm_cublas_margin, epilogue=epilogue, ms=ms,
                          auto_cap=settings.gemm_auto_topk_cap, served=served)

        if m_symbolic is None:
            return [one(problem, served=served)]
        match = getattr(lut, "match", None)
        entry = match(problem, device) if match is not None else None
        ms, origin = inputs.ms_to_rank(problem.m, entry.m_bounds if entry is not None else None,
                                       settings.gemm_dynamic_m, inputs.declared_range(m_symbolic))
        selections = [dataclasses.replace(one(problem, ms, served), ms_origin=origin)]
        for hint in inputs.multi_kernel_hints():
            selections.append(dataclasses.replace(one(dataclasses.replace(problem, m=hint)), hint=hint))
        return selections

    def _offer_pin(self, selection: Selection, choices: dict[str, Iterable[Any]], kernel_inputs: Any,
                   op_name: str, kwarg_overrides: dict[str, dict[str, Any]], k_symbolic: Any
                   ) -> dict[str, list[Any]] | None:
        """The candidates of a problem the LUT pins (its one choice), or None."""
        def make_triton(base: Any) -> Any:
            overrides = kwarg_overrides.get(base.template.uid, {})
            return candidates.synthesize(selection, base, k_symbolic, overrides)[0]

        offered = candidates.offer_only_pin(choices, selection.pinned, op_name, kernel_inputs,
                                            TRITON_GEMM_TEMPLATES, make_triton)
        if offered is not None and any(offered.values()):
            self.selections.append(selection)
            pin = selection.pinned
            log.info("kernel_select: %s on %s: pinned by the LUT to %s; nothing is benchmarked",
                     selection.problem, selection.device, pin if isinstance(pin, str) else pin.short())
            if selection.pin_gap:
                warn.warn_once(("pin gap", selection.problem, selection.pin_gap), log,
                               "kernel_select: %s: %s; one kernel serves them all with this pin. Compile "
                               "one graph per length bucket (kernel_select.inductor.bucketed) to serve "
                               "each bucket its own pin", selection.problem, selection.pin_gap)
        return offered

    def get_conv_configs(self, device_type: str | None = "cuda") -> Any:
        """Inductor's Triton convolution configs, or none for a grouped convolution, where the template
        does at least `groups` times the work and cannot beat cuDNN (inductor/convolution.py): the
        convolution then gets cuDNN alone, nothing compiled or benchmarked."""
        own = (self.inner.get_conv_configs if self.inner is not None
               else super().get_conv_configs)(device_type)
        try:
            if self.settings().gemm_topk == options.SAME:
                return own
            conv = convolution.ConvParams.of_node(V.graph.current_node)
        except Exception as exc:  # noqa: BLE001 -- nothing may raise inside torch.compile
            warn.warn_fallback(exc, log, "Inductor benchmarks its own convolution configs instead")
            return own
        if conv is None or not convolution.triton_conv_cannot_win(conv):
            return own
        warn.warn_once(("grouped conv", conv), log, "kernel_select: %s: no Triton convolution template for a "
                       "grouped convolution (at least %d x the work); cuDNN alone", conv, conv.groups,
                       level=logging.INFO)
        return _no_configs

    def preload(self) -> None:
        """Load the LUT, the model and the cuBLAS gate now, outside any compile.

        Loading inside Inductor's lowering runs at the bottom of a very deep stack; on the H100 with
        torch 2.11 load_state_dict failed there with RecursionError. Loaded here, the compile only reads
        the caches. Needs the device: the `gemm_device` knob, or the current CUDA device.
        """
        settings = self.settings()
        if settings.gemm_topk == options.SAME:
            return
        device = get_device(settings.gemm_device) if settings.gemm_device else runtime.current_device()
        if device is None:
            return  # no GPU to compile for yet: the first compile loads them
        if settings.kernel_lut_path:
            runtime.load_lut(settings.kernel_lut_path)
        runtime.model(settings.gemm_model, device)
        if settings.gemm_cublas_margin is not None:
            runtime.gate(device)


#: Methods that make up the GEMM candidate path: ours, never delegated to a wrapped handler (its
#: get_template_configs would call its own _finalize_template_configs and bypass the selection).
_OWN_METHODS = frozenset({"_finalize_template_configs", "get_template_configs", "get_conv_configs", "uuid"})


def _no_configs(*args: Any, **kwargs: Any) -> Iterator[Any]:
    """A conv config generator that yields nothing (Inductor calls it as configs(m, n, k, dtype_size=))."""
    return iter(())


def _delegate_customized_heuristics(handler: KernelSelectChoices, inner: InductorChoices) -> None:
    """Route every InductorChoices method that `inner`'s class overrides (fusion, reductions, config
    heuristics, ...) to `inner`, so wrapping a handler keeps what it customizes."""
    for name, default in vars(InductorChoices).items():
        if name.startswith("__") or name in _OWN_METHODS:
            continue
        if inspect.getattr_static(type(inner), name, default) is not default:
            setattr(handler, name, getattr(inner, name))


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


def _log_selection(selection: Selection) -> None:
    cublas = selection.cublas
    spread = f" ranked over m={list(selection.ms)} ({selection.ms_origin})" if selection.ms else ""
    hint = f" for multi-kernel hint m={selection.hint}" if selection.hint is not None else ""
    hedged = f"; gemm_topk=auto at its cap: {selection.hedged}" if selection.hedged else ""
    shown = cublas is not None and (cublas.prefers_cublas or cublas.charged_epilogue)
    log.info("kernel_select: %s on %s: benchmarking %d of %d Triton configs (%d from the LUT)%s%s%s%s",
             selection.problem, selection.device, len(selection.choices), selection.candidates,
             selection.sources.count("lut"), spread, hint, hedged, f"; {cublas.describe()}" if shown else "")


__all__ = ["GEMM_OPS", "KernelSelectChoices", "KernelSelectError", "TRITON_GEMM_TEMPLATES"]
