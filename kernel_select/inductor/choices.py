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
import hashlib
import inspect
import itertools
import logging
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V

from kernel_select import knobs, runtime, space
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import KernelSelectError, ProblemError
from kernel_select.inductor.settings import Settings, resolve_settings, validated_overrides
from kernel_select.model import PerformanceModel
from kernel_select.problem import Problem, dtype_name

log = logging.getLogger(__name__)


#: Template uids whose candidates we replace. The persistent-TMA and Blackwell templates have
#: their own config lists and kwargs, so they pass through like the extern choices.
TRITON_GEMM_TEMPLATES = frozenset({"triton::mm", "triton::bmm"})
#: Inductor op names we rank for (others, e.g. "mm-ah", "int_mm", "scaled_mm", pass through).
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
GATE_OFF = "off"  # install(cublas_margin="off"): the cuBLAS gate is off for this handler

# Template kwargs that differ between configs. Everything else in a candidate's params (ACC_TYPE,
# USE_FAST_ACCUM and whatever a newer torch adds) is a property of the problem, so it is copied
# from Inductor's own first candidate and always matches what Inductor would have emitted.
_PER_CONFIG_KWARGS = frozenset(
    {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps", "EVEN_K", "hint_override"}
)



@dataclasses.dataclass(frozen=True)
class Selection:
    """What the handler chose for one GEMM (kept for inspection: `handler.selections`)."""

    problem: Problem
    device: str
    configs: tuple[GemmConfig, ...]
    sources: tuple[str, ...]  # "lut" or the model name, per config
    space_size: int
    gate: Any = None  # the cuBLAS gate's GateDecision, when the gate was consulted


def _symbolic_k(kernel_inputs: Any) -> Any:
    try:
        return kernel_inputs.mnk_symbolic()[2]
    except Exception:  # noqa: BLE001 -- EVEN_K=False is always correct, just slower
        return None


def _even_k(k_symbolic: Any, block_k: int) -> bool:
    """EVEN_K as Inductor computes it: True only if K % BLOCK_K == 0 holds for every K the graph
    accepts. With a dynamic K the hinted value is not enough, and a wrong True reads out of bounds."""
    if k_symbolic is None:
        return False
    if isinstance(k_symbolic, int) or getattr(k_symbolic, "is_Integer", False):
        return int(k_symbolic) % block_k == 0
    try:
        import sympy

        return bool(V.graph.sizevars.statically_known_true(sympy.Eq(sympy.Mod(k_symbolic, block_k), 0)))
    except Exception:  # noqa: BLE001
        return False


def _ktc_api() -> tuple[Any, Any]:
    # Same homes in 2.11 and 2.13; imported here so a future move degrades to a warning.
    from torch._inductor.kernel_template_choice import KernelTemplateChoice
    from torch._inductor.template_heuristics.params import DictKernelTemplateParams

    return KernelTemplateChoice, DictKernelTemplateParams


class KernelSelectChoices(InductorChoices):
    """Inductor choices handler that benchmarks only the top-k Triton GEMM configs.

    Args:
        topk, kernel_lut_path, model, device, cublas_margin: override the kernel_select.knobs knobs
            for this handler (None = use the knob). `model` may also be a PerformanceModel instance.
        inner: a handler to compose with (None = Inductor's defaults). It receives our candidate
            lists in its own `_finalize_template_configs` (so a torch lookup-table hit still wins)
            and answers every other heuristic it overrides.
    """

    def __init__(self, *, topk: int | str | None = None, kernel_lut_path: str | None = None,
                 model: str | PerformanceModel | None = None, device: str | None = None,
                 cublas_margin: float | str | None = None, inner: InductorChoices | None = None) -> None:
        super().__init__()
        # Cheap on purpose: torch 2.13 instantiates the factory at every cache-key computation.
        self._overrides = validated_overrides(topk, kernel_lut_path, model, device, cublas_margin)
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
            return _hash_parts(self._uuid_parts())
        except Exception as exc:  # noqa: BLE001 -- a cache key must always be produced
            runtime.warn_fallback(exc, log, "Inductor benchmarks its own GEMM configs instead")
            return _hash_parts([f"invalid:{runtime.cause_of(exc)}"])

    def _uuid_parts(self) -> list[str]:
        settings = self.settings()
        parts = [f"version={_package_version()}", f"topk={settings.topk}", f"inner={_inner_id(self.inner)}"]
        if settings.topk != knobs.SAME:
            device = _device_or_none(settings.device)
            parts.append(f"device={device.key if device else 'none'}")
            parts.append(f"lut={runtime.lut_fingerprint(settings.kernel_lut_path)}")
            parts.append(f"model={_model_fingerprint(settings.model, device)}")
            parts.append(f"cublas_gate={_gate_fingerprint(settings.cublas_margin, device)}")
        return parts

    # -- the hook ---------------------------------------------------------------------------

    def _finalize_template_configs(self, template_choices: dict[str, Iterable[Any]], kernel_inputs: Any,
                                   templates: list[Any], op_name: str,
                                   kwarg_overrides: dict[str, dict[str, Any]] | None = None) -> list[Any]:
        # Work on a copy: replacing entries must not touch the caller's dict, and if anything
        # fails, `choices` still holds Inductor's complete candidate generators.
        choices = dict(template_choices)
        try:
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
        """`choices` with the Triton GEMM templates' candidates replaced, or None to pass through."""
        uids = [uid for uid in choices if uid in TRITON_GEMM_TEMPLATES]
        if not uids or op_name not in GEMM_OPS:
            return None
        if kernel_inputs.device_type != "cuda" or torch.version.hip is not None:
            return None
        settings = self.settings()
        if settings.topk == knobs.SAME:
            return None
        problem = _problem_from(kernel_inputs, op_name)
        if problem is None:
            return None
        bases = _peek_first_candidates(choices, uids)
        if not bases:  # Inductor generates no Triton candidates here
            return None
        device = (get_device(settings.device) if settings.device
                  else runtime.detected_device(_device_index(kernel_inputs)))
        with _stack_headroom():
            selection = self._select(problem, device, settings)
        k_symbolic = _symbolic_k(kernel_inputs)
        replaced = dict(choices)
        for uid, base in bases.items():
            replaced[uid] = _synthesize(selection, base, k_symbolic, kwarg_overrides.get(uid, {}))
        self.selections.append(selection)
        gated = selection.gate is not None and selection.gate.prefers_cublas
        log.info("kernel_select: %s on %s: benchmarking %d of %d Triton configs (%d from the LUT)%s",
                 problem, device.key, len(selection.configs), selection.space_size,
                 selection.sources.count("lut"),
                 f"; cuBLAS predicted {1 / selection.gate.predicted_ratio:.2f}x faster than Triton" if gated else "")
        return replaced

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

    def _select(self, problem: Problem, device: DeviceSpec, settings: Settings) -> Selection:
        from kernel_select.select import top_k

        if settings.topk == knobs.DEFAULT:
            k = len(space.for_problem(problem, device, "default"))
        else:
            k = int(settings.topk)
        candidates = space.for_problem(problem, device, "exhaustive")
        lut = runtime.load_lut(settings.kernel_lut_path) if settings.kernel_lut_path else None
        model = runtime.model(settings.model, device)
        gate = runtime.gate(device) if settings.cublas_margin is not None else None
        decision = gate.decide(problem, settings.cublas_margin) if gate is not None else None
        # Where cuBLAS is predicted to win, offer only what the LUT pins (often nothing): Inductor
        # then compiles and benchmarks no Triton kernel it would not pick anyway.
        skip_triton = decision is not None and decision.prefers_cublas
        chosen = top_k(problem, k, lut=lut, model=model, device=device, candidates=[] if skip_triton else candidates)
        if not chosen and not skip_triton:
            raise KernelSelectError(f"{problem}: the selection returned no configs")
        return Selection(problem=problem, device=device.key,
                         configs=tuple(c.config for c in chosen),
                         sources=tuple(c.source for c in chosen), space_size=len(candidates), gate=decision)


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


def _inner_id(inner: InductorChoices | None) -> str:
    if inner is None:
        return "none"
    uuid = getattr(inner, "uuid", None)
    ident = uuid() if callable(uuid) else ""
    return f"{type(inner).__module__}.{type(inner).__qualname__}:{ident}"


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


def _synthesize(selection: Selection, base: Any, k_symbolic: Any, overrides: dict[str, Any]) -> list[Any]:
    """One KernelTemplateChoice per selected config, shaped like Inductor's own `base`."""
    ktc_class, params_class = _ktc_api()
    problem_kwargs = {k: v for k, v in base.params.to_kwargs().items() if k not in _PER_CONFIG_KWARGS}
    synthesized = []
    for config in selection.configs:
        # Template-wide kwargs (ACC_TYPE, ALLOW_TF32, ...) come from Inductor's own `base` below.
        kwargs = config.inductor_kwargs(selection.problem, even_k=_even_k(k_symbolic, config.block_k))
        kwargs["hint_override"] = None
        kwargs.update(problem_kwargs)
        kwargs.update(overrides)  # Inductor applies overrides last, too
        synthesized.append(ktc_class(template=base.template, params=params_class(kwargs),
                                     extra_kwargs=base.extra_kwargs, layout=base.layout, inputs=base.inputs))
    return synthesized

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


def _device_index(kernel_inputs: Any) -> int:
    index = kernel_inputs.device().index
    return torch.cuda.current_device() if index is None else int(index)


def _problem_from(kernel_inputs: Any, op_name: str) -> Problem | None:
    """The Problem Inductor is lowering (hinted sizes), or None for one we do not model."""
    m, n, k = (int(x) for x in kernel_inputs.mnk_hinted())  # Inductor's order is M, N, K
    batch = int(kernel_inputs.batch_hinted()) if op_name in ("bmm", "baddbmm") else 1
    try:
        return Problem(m, n, k, dtype_name(kernel_inputs.dtype()), batch=batch, op=op_name)
    except ProblemError as exc:  # int8/fp8 inputs, empty tensors: not ours to rank
        log.debug("kernel_select: passing %s through: %s", op_name, exc)
        return None


# -- uuid helpers -------------------------------------------------------------------------------

def _hash_parts(parts: list[str]) -> str:
    return "kernel_select-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _package_version() -> str:
    import kernel_select

    return kernel_select.__version__


def _device_or_none(name: str | None) -> DeviceSpec | None:
    try:
        return get_device(name) if name else runtime.current_device()
    except Exception:  # noqa: BLE001 -- an undetectable GPU shows up as "none" in the key
        return None


def _gate_fingerprint(margin: float | None, device: DeviceSpec | None) -> str:
    if margin is None:
        return "off"
    try:
        gate = runtime.gate(device) if device is not None else None
    except Exception as exc:  # noqa: BLE001 -- a broken gate file must not break cache keys
        return f"{margin}:unloadable:{type(exc).__name__}"
    return f"{margin}:{gate.digest() if gate is not None else 'none'}"


def _model_fingerprint(model: str | PerformanceModel | None, device: DeviceSpec | None) -> str:
    if device is None:
        return f"{model!r}:no-device"
    try:
        instance = runtime.model(model, device)
        digest = getattr(instance, "digest", None)
        ident = digest() if callable(digest) else ""
        return f"{type(instance).__qualname__}:{instance.describe()}:{ident}"
    except Exception as exc:  # noqa: BLE001
        return f"{model!r}:unloadable:{type(exc).__name__}:{exc}"

