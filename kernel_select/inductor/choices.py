"""The Inductor choices handler: benchmark only the top-k Triton GEMM configs in max-autotune.

`KernelSelectChoices` is an `InductorChoices` handler. For every mm/addmm/bmm/baddbmm that
Inductor autotunes on a CUDA device it replaces the candidate list of the Triton GEMM templates
("triton::mm", "triton::bmm") by the top-k configs of the pruned EXHAUSTIVE space, ranked by the
performance model, with the lookup table's entries first. Everything else (ATen/cuBLAS,
decompose_k, persistent TMA, contiguous_mm, ...) passes through untouched, so cuBLAS always
competes. Inside torch.compile nothing raises: any failure logs one warning per cause and
Inductor keeps its own candidates.

A handler may wrap another one (the handler that was in place before install(), e.g. torch's
own `LookupTableChoices`): the wrapped handler finalizes the candidate lists we produce and keeps
every other heuristic it customizes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import logging
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch._inductor.choices import InductorChoices

from kernel_select import knobs, runtime, space
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import KernelSelectError, ProblemError
from kernel_select.inductor import cache_key, dynamic, operand_layout, pinning, pointwise_epilogue
from kernel_select.inductor.bias_epilogue import prefer_bias_epilogue, row_bias
from kernel_select.inductor.candidates import symbolic_k, synthesize
from kernel_select.inductor.settings import Settings, resolve_settings, validated_overrides
from kernel_select.model import PerformanceModel
from kernel_select.problem import Problem, dtype_name

log = logging.getLogger(__name__)


#: Template uids whose candidates we replace. The persistent-TMA and Blackwell templates have
#: their own config lists and kwargs, so they pass through like the extern choices.
TRITON_GEMM_TEMPLATES = frozenset({"triton::mm", "triton::bmm"})
#: Inductor op names we rank for (others, e.g. "mm-ah", "int_mm", "scaled_mm", pass through).
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
PIN_SOURCE = "pin"  # Selection.sources of a pinned Triton config


@dataclasses.dataclass(frozen=True)
class Selection:
    """What the handler chose for one GEMM (kept for inspection: `handler.selections`)."""

    problem: Problem
    device: str
    configs: tuple[GemmConfig, ...]
    sources: tuple[str, ...]  # "lut" or the model name, per config
    space_size: int
    gate: Any = None  # the cuBLAS decision (CublasRule, or the gate's GateDecision) when one was made
    ms: tuple[int, ...] = ()  # a symbolic M: the values it was ranked for (() = the hint only)
    ms_origin: str = ""  # where `ms` came from: "lut m range", "dynamic_m", ...
    hint_override: int | None = None  # the multi-kernel hint these configs are for
    pinned: Any = None  # a pinned LUT entry's choice ("aten" or the config): the only one offered
    hedged: str = ""  # why topk="auto" took its cap, not the model's estimate ("": it did not)


@dataclasses.dataclass(frozen=True)
class Epilogue:
    """What runs after the GEMM in the graph being lowered, as far as the cuBLAS decision cares."""

    bias_row: bool = False  # an addmm cuBLAS runs as its bias-epilogue call (bias_epilogue.py)
    separate_pointwise: bool = False  # consumers cuBLAS leaves as a kernel of its own (pointwise_epilogue.py)


class KernelSelectChoices(InductorChoices):
    """Inductor choices handler that benchmarks only the top-k Triton GEMM configs.

    Args:
        topk, kernel_lut_path, model, device, cublas_margin, dynamic_m: override the kernel_select.knobs knobs
            for this handler (None = use the knob). `model` may also be a PerformanceModel instance.
        inner: a handler to compose with (None = Inductor's defaults). It receives our candidate
            lists in its own `_finalize_template_configs` (so a torch lookup-table hit still wins)
            and answers every other heuristic it overrides.
    """

    def __init__(self, *, topk: int | str | None = None, kernel_lut_path: str | None = None,
                 model: str | PerformanceModel | None = None, device: str | None = None,
                 cublas_margin: float | str | None = None, dynamic_m: str | list[int] | None = None,
                 inner: InductorChoices | None = None) -> None:
        super().__init__()
        # Cheap on purpose: torch 2.13 instantiates the factory at every cache-key computation.
        self._overrides = validated_overrides(topk, kernel_lut_path, model, device, cublas_margin, dynamic_m)
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
        """Changes whenever the selection could change: k, the LUT's contents, the model, the
        device, the wrapped handler. Inductor puts it into its FX-graph cache key (2.13 calls it;
        2.11 pickles the factory, whose pickle carries it), so caches never serve choices made with
        other knobs. Never raises and never blocks: the LUT is hashed with a bounded read."""
        try:
            return cache_key.hash_parts(self._uuid_parts())
        except Exception as exc:  # noqa: BLE001 -- a cache key must always be produced
            runtime.warn_fallback(exc, log, "Inductor benchmarks its own GEMM configs instead")
            return cache_key.hash_parts([f"invalid:{runtime.cause_of(exc)}"])

    def _uuid_parts(self) -> list[str]:
        settings = self.settings()
        parts = [f"version={cache_key.package_version()}", f"topk={settings.topk}",
                 f"inner={cache_key.inner_id(self.inner)}", f"dynamic_m={settings.dynamic_m}"]
        if settings.topk == knobs.AUTO:
            parts.append(f"auto_topk_cap={settings.auto_topk_cap}")
        if settings.topk != knobs.SAME:
            device = cache_key.device_or_none(settings.device)
            parts.append(f"device={device.key if device else 'none'}")
            parts.append(f"lut={runtime.lut_fingerprint(settings.kernel_lut_path)}")
            parts.append(f"model={cache_key.model_fingerprint(settings.model, device)}")
            parts.append(f"cublas_gate={cache_key.gate_fingerprint(settings.cublas_margin, device)}")
        return parts

    # -- the hook ---------------------------------------------------------------------------

    def _finalize_template_configs(self, template_choices: dict[str, Iterable[Any]], kernel_inputs: Any,
                                   templates: list[Any], op_name: str,
                                   kwarg_overrides: dict[str, dict[str, Any]] | None = None) -> list[Any]:
        # Work on a copy: replacing entries must not touch the caller's dict, and if anything
        # fails, `choices` still holds Inductor's complete candidate generators.
        choices = dict(template_choices)
        try:
            if self.settings().topk != knobs.SAME:  # "same": Inductor's own list, untouched
                choices = prefer_bias_epilogue(choices, op_name)
            replaced = self._replace_triton_candidates(choices, kernel_inputs, op_name, kwarg_overrides or {})
        except Exception as exc:  # noqa: BLE001 -- nothing may raise inside torch.compile
            runtime.warn_fallback(exc, log, "Inductor benchmarks its own GEMM configs instead")
            replaced = None
        final = replaced if replaced is not None else choices
        # The wrapped handler (or the base class) flattens the per-template lists; in 2.13 the base
        # class also logs the shape.
        finalize = (self.inner._finalize_template_configs if self.inner is not None
                    else super()._finalize_template_configs)
        return finalize(final, kernel_inputs, templates, op_name, kwarg_overrides)

    def _replace_triton_candidates(self, choices: dict[str, Iterable[Any]], kernel_inputs: Any,
                                   op_name: str, kwarg_overrides: dict[str, dict[str, Any]]
                                   ) -> dict[str, Iterable[Any]] | None:
        """`choices` with the Triton GEMM templates' candidates replaced (or, for a pinned
        problem, reduced to the pin), or None to pass through."""
        if op_name not in GEMM_OPS or kernel_inputs.device_type != "cuda" or torch.version.hip is not None:
            return None
        settings = self.settings()
        if settings.topk == knobs.SAME:
            return None
        problem = _problem_from(kernel_inputs, op_name)
        if problem is None:
            return None
        device = (get_device(settings.device) if settings.device
                  else runtime.detected_device(_device_index(kernel_inputs)))
        lut = runtime.load_lut(settings.kernel_lut_path) if settings.kernel_lut_path else None
        k_symbolic = symbolic_k(kernel_inputs)
        pinned = self._offer_pin(choices, kernel_inputs, op_name, kwarg_overrides, problem, device, lut,
                                 k_symbolic)
        if pinned is not None:
            return pinned
        uids = [uid for uid in choices if uid in TRITON_GEMM_TEMPLATES]
        bases = _peek_first_candidates(choices, uids) if uids else {}
        if not bases:  # Inductor generates no Triton candidates here
            return None
        epilogue = Epilogue(bias_row=row_bias(kernel_inputs, op_name),
                            separate_pointwise=pointwise_epilogue.lowering_has_separate_epilogue(
                                problem.batch * problem.m * problem.n))
        with _stack_headroom():
            selections = self._select_all(problem, device, settings, lut, dynamic.symbolic_m(kernel_inputs),
                                          epilogue)
        replaced = dict(choices)
        for uid, base in bases.items():
            overrides = kwarg_overrides.get(uid, {})
            replaced[uid] = [choice for selection in selections
                             for choice in synthesize(selection, base, k_symbolic, overrides)]
        self.selections.extend(selections)
        for selection in selections:
            _log_selection(selection)
        return replaced

    def _offer_pin(self, choices: dict[str, Iterable[Any]], kernel_inputs: Any, op_name: str,
                   kwarg_overrides: dict[str, dict[str, Any]], problem: Problem, device: DeviceSpec,
                   lut: Any, k_symbolic: Any) -> dict[str, list[Any]] | None:
        """The candidates of a problem the LUT pins (its one choice), or None."""
        pinned_of = getattr(lut, "pinned", None)  # any ConfigLookup may serve as the LUT
        pin = pinned_of(problem, device) if pinned_of is not None else None
        if pin is None:
            return None
        config = pin if isinstance(pin, GemmConfig) else None
        selection = Selection(problem=problem, device=device.key, configs=(config,) if config else (),
                              sources=(PIN_SOURCE,) if config else (), space_size=0, pinned=pin)

        def make_triton(base: Any) -> Any:
            overrides = kwarg_overrides.get(base.template.uid, {})
            return synthesize(selection, base, k_symbolic, overrides)[0]

        offered = pinning.offer_only_pin(choices, pin, op_name, kernel_inputs, TRITON_GEMM_TEMPLATES,
                                         make_triton)
        if offered is not None and any(offered.values()):
            self.selections.append(selection)
            log.info("kernel_select: %s on %s: pinned by the LUT to %s; nothing is benchmarked", problem,
                     device.key, config.short() if config else "aten")
        return offered

    def _select_all(self, problem: Problem, device: DeviceSpec, settings: Settings, lut: Any,
                    m_symbolic: Any, epilogue: Epilogue = Epilogue()) -> list[Selection]:
        """One selection for a static M; for a symbolic M, one over the Ms it will take plus one
        per Inductor multi-kernel hint (each for its hint, tagged with it). `epilogue`: what the
        cuBLAS decision takes into account beside the GEMM."""
        select = functools.partial(self._select, device=device, settings=settings, lut=lut,
                                   epilogue=epilogue)
        if m_symbolic is None:
            return [select(problem)]
        match = getattr(lut, "match", None)
        entry = match(problem, device) if match is not None else None
        ms, origin = dynamic.ms_to_rank(problem.m, entry.m_bounds if entry is not None else None,
                                        settings.dynamic_m, dynamic.declared_range(m_symbolic))
        selections = [select(problem, ms=ms, ms_origin=origin)]
        for hint in dynamic.multi_kernel_hints():
            selections.append(select(dataclasses.replace(problem, m=hint), hint_override=hint))
        return selections

    def preload(self) -> None:
        """Load the LUT, the model and the cuBLAS gate now, outside any compile.

        Loading inside Inductor's lowering runs at the bottom of a very deep stack; on the H100 with
        torch 2.11 load_state_dict failed there with RecursionError. Loaded here, the compile only
        reads the caches. Needs the device: the `device` knob, or the current CUDA device.
        """
        settings = self.settings()
        if settings.topk == knobs.SAME:
            return
        device = get_device(settings.device) if settings.device else runtime.current_device()
        if device is None:
            return  # no GPU to compile for yet: the first compile loads them
        if settings.kernel_lut_path:
            runtime.load_lut(settings.kernel_lut_path)
        runtime.model(settings.model, device)
        if settings.cublas_margin is not None:
            runtime.gate(device)

    def _select(self, problem: Problem, device: DeviceSpec, settings: Settings, lut: Any,
                ms: tuple[int, ...] = (), ms_origin: str = "", hint_override: int | None = None,
                epilogue: Epilogue = Epilogue()) -> Selection:
        from kernel_select.model.aten import CublasRule
        from kernel_select.model.gate import epilogue_charge_ms
        from kernel_select.model.auto_topk import hedge_reason
        from kernel_select.select import LUT_SOURCE, top_k

        if settings.topk == knobs.DEFAULT:
            k: int | str = len(space.for_problem(problem, device, "default"))
        else:
            k = settings.topk  # a count, or "auto"
        widest = dataclasses.replace(problem, m=max(ms)) if ms else problem
        candidates = space.for_problem(widest, device, "exhaustive")
        model = runtime.model(settings.model, device)
        hedged = hedge_reason(model, problem) if k == knobs.AUTO else ""
        margin = settings.cublas_margin
        # The shipped gate decides where there is one: on the held-out splits it loses less than
        # the two-sided rule from the model's own cuBLAS time (docs/model.md). Without a gate,
        # the rule decides where the model predicts cuBLAS (`estimate_aten`).
        gate = runtime.gate(device) if margin is not None else None
        aten_ms = model.estimate_aten(problem) if margin is not None else None
        decision: Any = (gate.decide(problem, margin, aten_ms, epilogue.bias_row, epilogue.separate_pointwise)
                         if gate is not None else None)
        # Where cuBLAS is predicted to win, offer only what the LUT pins (often nothing): Inductor
        # then compiles and benchmarks no Triton kernel it would not pick anyway.
        skip_triton = decision is not None and decision.prefers_cublas
        chosen = top_k(problem, k, lut=lut, model=model, device=device,
                       candidates=[] if skip_triton else candidates, ms=ms or None,
                       auto_cap=settings.auto_topk_cap)
        ranked = [c.predicted_ms for c in chosen if c.source != LUT_SOURCE]
        if gate is None and aten_ms is not None and ranked:
            decision = CublasRule(problem, aten_ms, min(ranked), margin,
                                  epilogue_charge_ms(aten_ms) if epilogue.separate_pointwise else 0.0)
            if decision.prefers_cublas:  # the two-sided rule: Triton only where clearly faster
                chosen, skip_triton = [c for c in chosen if c.source == LUT_SOURCE], True
        if not chosen and not skip_triton:
            raise KernelSelectError(f"{problem}: the selection returned no configs")
        return Selection(problem=problem, device=device.key,
                         configs=tuple(c.config for c in chosen),
                         sources=tuple(c.source for c in chosen), space_size=len(candidates), gate=decision,
                         ms=ms, ms_origin=ms_origin, hint_override=hint_override, hedged=hedged)


#: Methods that make up the GEMM candidate path: ours, never delegated to a wrapped handler (its
#: get_template_configs would call its own _finalize_template_configs and bypass the selection).
_OWN_METHODS = frozenset({"_finalize_template_configs", "get_template_configs", "uuid"})


def _delegate_customized_heuristics(handler: KernelSelectChoices, inner: InductorChoices) -> None:
    """Route every InductorChoices method that `inner`'s class overrides (fusion, reductions,
    config heuristics, ...) to `inner`, so wrapping a handler keeps what it customizes."""
    for name, default in vars(InductorChoices).items():
        if name.startswith("__") or name in _OWN_METHODS:
            continue
        if inspect.getattr_static(type(inner), name, default) is not default:
            setattr(handler, name, getattr(inner, name))


def _peek_first_candidates(choices: dict[str, Iterable[Any]], uids: list[str]) -> dict[str, Any]:
    """Inductor's first candidate per template (the template for our kwargs), put back at once so
    `choices` stays whole for a fallback."""
    bases = {}
    for uid in uids:
        generator = iter(choices[uid])
        base = next(generator, None)
        choices[uid] = () if base is None else itertools.chain([base], generator)
        if base is not None:
            bases[uid] = base
    return bases


@contextlib.contextmanager
def _stack_headroom(extra_frames: int = 4000) -> Iterator[None]:
    """Raise Python's recursion limit while selecting: the hook runs deep inside Dynamo and
    Inductor, and torch/pickle calls from there can otherwise exceed the default limit."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(previous + extra_frames)
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def _log_selection(selection: Selection) -> None:
    gate = selection.gate
    gated = gate is not None and gate.prefers_cublas
    spread = f" ranked over m={list(selection.ms)} ({selection.ms_origin})" if selection.ms else ""
    hint = (f" for multi-kernel hint m={selection.hint_override}"
            if selection.hint_override is not None else "")
    hedged = f"; topk=auto at its cap: {selection.hedged}" if selection.hedged else ""
    log.info("kernel_select: %s on %s: benchmarking %d of %d Triton configs (%d from the LUT)%s%s%s%s",
             selection.problem, selection.device, len(selection.configs), selection.space_size,
             selection.sources.count("lut"), spread, hint, hedged,
             f"; {gate.describe()}" if gated or (gate is not None and gate.charged_epilogue) else "")


def _device_index(kernel_inputs: Any) -> int:
    index = kernel_inputs.device().index
    return torch.cuda.current_device() if index is None else int(index)


def _problem_from(kernel_inputs: Any, op_name: str) -> Problem | None:
    """The Problem Inductor is lowering (hinted sizes, the operands' layout), or None for one we
    do not model."""
    m, n, k = (int(x) for x in kernel_inputs.mnk_hinted())  # Inductor's order is M, N, K
    batch = int(kernel_inputs.batch_hinted()) if op_name in ("bmm", "baddbmm") else 1
    try:
        return Problem(m, n, k, dtype_name(kernel_inputs.dtype()), batch=batch, op=op_name,
                       layout=operand_layout.layout_from(kernel_inputs))
    except ProblemError as exc:  # int8/fp8 inputs, empty tensors: not ours to rank
        log.debug("kernel_select: passing %s through: %s", op_name, exc)
        return None
