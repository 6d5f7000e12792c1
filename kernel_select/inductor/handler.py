"""PyTorch Inductor integration: benchmark only the top-k Triton GEMM configs in max-autotune.

    import kernel_select.inductor as ks_inductor

    ks_inductor.install(topk=4, kernel_lut_path="luts/h100.json")
    model = torch.compile(model, mode="max-autotune-no-cudagraphs")

`KernelSelectChoices` is an `InductorChoices` handler. For every mm/addmm/bmm/baddbmm that
Inductor autotunes on a CUDA device it replaces the candidate list of the Triton GEMM templates
("triton::mm", "triton::bmm") by the top-k configs of the pruned EXHAUSTIVE space, ranked by the
performance model, with the lookup table's entries first. Everything else (ATen/cuBLAS,
decompose_k, persistent TMA, contiguous_mm, ...) passes through untouched, so cuBLAS always
competes. Inside torch.compile nothing raises: any failure logs one warning per cause and
Inductor keeps its own candidates.

This is the only kernel_select module that imports torch._inductor; `import kernel_select` does
not import it.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import importlib
import itertools
import logging
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch._inductor import config as inductor_config
from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V

from kernel_select import knobs as ks_config
from kernel_select import space
from kernel_select.configs import GemmConfig, config_from_description
from kernel_select.device import DeviceSpec, detect, get_device
from kernel_select.errors import KernelSelectError, LUTError, OptionError, ProblemError
from kernel_select.model import PerformanceModel
from kernel_select.problem import Problem, dtype_name

log = logging.getLogger(__name__)

#: Template uids whose candidates we replace. The persistent-TMA and Blackwell templates have
#: their own config lists and kwargs, so they pass through like the extern choices.
TRITON_GEMM_TEMPLATES = frozenset({"triton::mm", "triton::bmm"})
#: Inductor op names we rank for (others, e.g. "mm-ah", "int_mm", "scaled_mm", pass through).
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})

#: Names of the options `register_options()` adds to torch._inductor.config.
OPTION_KERNEL_LUT_PATH = "kernel_lut_path"
OPTION_GEMM_TOPK = "gemm_topk"
OPTION_NAMES = (OPTION_KERNEL_LUT_PATH, OPTION_GEMM_TOPK)
GATE_OFF = "off"  # install(cublas_margin="off"): the cuBLAS gate is off for this handler

# Template kwargs that differ between configs. Everything else in a candidate's params (ACC_TYPE,
# USE_FAST_ACCUM and whatever a newer torch adds) is a property of the problem, so it is copied
# from Inductor's own first candidate and always matches what Inductor would have emitted.
_PER_CONFIG_KWARGS = frozenset(
    {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps", "EVEN_K", "hint_override"}
)

_lock = threading.RLock()


# -- settings ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Settings:
    """The knobs in effect for one selection."""

    topk: int | str
    kernel_lut_path: str | None
    model: str | PerformanceModel | None
    device: str | None
    cublas_margin: float | None = None  # None: the cuBLAS gate is off


def _validated_overrides(topk: object = None, kernel_lut_path: object = None, model: object = None,
                         device: object = None, cublas_margin: object = None) -> dict[str, Any]:
    """Check install()/constructor arguments; None means "not given, use kernel_select.knobs"
    (to turn the cuBLAS gate off for one handler, pass cublas_margin="off")."""
    overrides: dict[str, Any] = {}
    if topk is not None:
        overrides["topk"] = ks_config.parse_topk(topk)
    if kernel_lut_path is not None:
        overrides["kernel_lut_path"] = ks_config.parse_lut_path(kernel_lut_path)
    if model is not None:
        overrides["model"] = model if isinstance(model, PerformanceModel) else ks_config.parse_model(model)
    if device is not None:
        overrides["device"] = ks_config.parse_device(device)
    if cublas_margin is not None:
        # "off" stays a string here: None would read as "not given" when the factory re-validates.
        margin = ks_config.parse_cublas_margin(cublas_margin)
        overrides["cublas_margin"] = GATE_OFF if margin is None else margin
    return overrides


def _torch_option(name: str) -> Any:
    """A registered torch._inductor.config option's value, or None when unset or unregistered."""
    if not _options_registered:
        return None
    return getattr(inductor_config, name, None)


def resolve_settings(overrides: dict[str, Any] | None = None) -> Settings:
    """Effective knobs. Precedence: torch.compile options / torch._inductor.config (per compile),
    then install() or constructor arguments, then kernel_select.knobs (patch > env > default)."""
    overrides = overrides or {}
    topk = overrides.get("topk", ks_config.topk)
    lut_path = overrides.get("kernel_lut_path", ks_config.kernel_lut_path)
    option_topk = _torch_option(OPTION_GEMM_TOPK)
    if option_topk is not None:
        topk = ks_config.parse_topk(option_topk, source=f"torch._inductor.config.{OPTION_GEMM_TOPK}")
    option_path = _torch_option(OPTION_KERNEL_LUT_PATH)
    if option_path is not None:
        lut_path = ks_config.parse_lut_path(option_path,
                                            source=f"torch._inductor.config.{OPTION_KERNEL_LUT_PATH}")
    return Settings(topk=topk, kernel_lut_path=lut_path,
                    model=overrides.get("model", ks_config.model),
                    device=overrides.get("device", ks_config.device),
                    cublas_margin=_margin(overrides.get("cublas_margin", ks_config.cublas_margin)))


def _margin(value: float | str | None) -> float | None:
    return None if value == GATE_OFF else value  # type: ignore[return-value]


# -- lazily loaded, process-wide LUTs and models ------------------------------------------------
# 2.13 instantiates the choices factory at every cache-key computation, so handlers are cheap and
# share these caches.

_lut_cache: dict[str, tuple[tuple[int, int], Any]] = {}
_model_cache: dict[tuple[str | None, DeviceSpec], PerformanceModel] = {}
_gate_cache: dict[DeviceSpec, Any] = {}


def _read_lut(path: str) -> Any:
    from kernel_select.lut import load_lut

    return load_lut(path, strict=True)


def load_lut_cached(path: str) -> Any:
    """The KernelLUT at `path`, reloaded when the file's mtime or size changes."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise LUTError(f"{path}: cannot read the kernel lookup table ({exc.strerror}); fix "
                       f"kernel_lut_path / {ks_config.ENV_KERNEL_LUT_PATH}") from None
    stamp = (stat.st_mtime_ns, stat.st_size)
    with _lock:
        cached = _lut_cache.get(path)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    lut = _read_lut(path)
    with _lock:
        _lut_cache[path] = (stamp, lut)
    return lut


def _load_model(name: str | None, device: DeviceSpec) -> PerformanceModel:
    from kernel_select import model as models

    return models.load_default(device) if name is None else models.get_model(name, device)


def _cached(cache: dict[Any, Any], key: Any, load: Callable[[], Any]) -> Any:
    """cache[key], loaded once (outside the lock: loading may be slow, and a rare double load is
    harmless)."""
    with _lock:
        if key in cache:
            return cache[key]
    value = load()
    with _lock:
        return cache.setdefault(key, value)


def model_for(model: str | PerformanceModel | None, device: DeviceSpec) -> PerformanceModel:
    """The model instance for a knob value (an instance is used as is)."""
    if isinstance(model, PerformanceModel):
        return model
    return _cached(_model_cache, (model, device), lambda: _load_model(model, device))


def gate_for(device: DeviceSpec) -> Any:
    """The shipped cuBLAS gate for `device` (a CublasGate), or None when none is shipped."""
    from kernel_select.model.gate import load_default_gate

    return _cached(_gate_cache, device, lambda: load_default_gate(device))


@functools.lru_cache(maxsize=16)
def _detected_device(index: int) -> DeviceSpec:
    return detect(index)


def _current_device() -> DeviceSpec | None:
    if not torch.cuda.is_available():
        return None
    return _detected_device(torch.cuda.current_device())


# -- one warning per cause ------------------------------------------------------------------------

_warned: set[str] = set()


def _warn_once(exc: BaseException) -> None:
    cause = f"{type(exc).__name__}: {exc}"
    with _lock:
        if cause in _warned:
            return
        _warned.add(cause)
    # Our own errors carry a complete message; anything else is a bug worth a traceback.
    log.warning("kernel_select: %s; Inductor benchmarks its own GEMM configs instead "
                "(shown once per cause)", cause, exc_info=not isinstance(exc, KernelSelectError))


def reset_warnings() -> None:
    """Forget which causes were already reported (for tests and long-lived sessions)."""
    with _lock:
        _warned.clear()


# -- the choices handler ------------------------------------------------------------------------

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
        topk, kernel_lut_path, model, device: override the kernel_select.knobs knobs for this
            handler (None = use the knob). `model` may also be a PerformanceModel instance.
    """

    def __init__(self, *, topk: int | str | None = None, kernel_lut_path: str | None = None,
                 model: str | PerformanceModel | None = None, device: str | None = None,
                 cublas_margin: float | str | None = None) -> None:
        super().__init__()
        # Cheap on purpose: torch 2.13 instantiates the factory at every cache-key computation.
        self._overrides = _validated_overrides(topk, kernel_lut_path, model, device, cublas_margin)
        self.selections: deque[Selection] = deque(maxlen=256)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self._overrides.items()))
        return f"KernelSelectChoices({args})"

    def settings(self) -> Settings:
        """The knobs in effect right now (they can change per compile via torch options)."""
        return resolve_settings(self._overrides)

    # -- cache identity --------------------------------------------------------------------

    def uuid(self) -> str:
        """Changes whenever the selection could change: k, the LUT's contents, the model, the
        device. Inductor puts it into its FX-graph cache key (2.13 calls it; 2.11 pickles the
        factory, whose pickle carries it), so caches never serve choices made with other knobs.
        Never raises."""
        try:
            settings = self.settings()
        except KernelSelectError as exc:
            return _hash_parts([f"invalid:{exc}"])
        parts = [f"version={_package_version()}", f"topk={settings.topk}"]
        if settings.topk != ks_config.SAME:
            device = _device_or_none(settings.device)
            parts.append(f"device={device.key if device else 'none'}")
            parts.append(f"lut={_lut_fingerprint(settings.kernel_lut_path)}")
            parts.append(f"model={_model_fingerprint(settings.model, device)}")
            parts.append(f"cublas_gate={_gate_fingerprint(settings.cublas_margin, device)}")
        return _hash_parts(parts)

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
            _warn_once(exc)
            replaced = None
        # The base class flattens the per-template lists (and, in 2.13, logs the shape).
        return super()._finalize_template_configs(replaced if replaced is not None else choices,
                                                  kernel_inputs, templates, op_name, kwarg_overrides)

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
        if settings.topk == ks_config.SAME:
            return None
        problem = _problem_from(kernel_inputs, op_name)
        if problem is None:
            return None
        # Peek at Inductor's first candidate per template (the template for our kwargs) and put it
        # back at once, so `choices` stays whole for a fallback.
        bases = {}
        for uid in uids:
            generator = iter(choices[uid])
            base = next(generator, None)
            choices[uid] = () if base is None else itertools.chain([base], generator)
            if base is not None:
                bases[uid] = base
        if not bases:  # Inductor generates no Triton candidates here
            return None
        device = (get_device(settings.device) if settings.device
                  else _detected_device(_device_index(kernel_inputs)))
        with _stack_headroom():
            selection = self._select(problem, device, settings)
        ktc_class, params_class = _ktc_api()
        k_symbolic = _symbolic_k(kernel_inputs)

        replaced = dict(choices)
        for uid, base in bases.items():
            problem_kwargs = {k: v for k, v in base.params.to_kwargs().items() if k not in _PER_CONFIG_KWARGS}
            synthesized = []
            for config in selection.configs:
                kwargs = config.inductor_kwargs(problem, even_k=_even_k(k_symbolic, config.block_k))
                kwargs["hint_override"] = None
                kwargs.update(problem_kwargs)
                kwargs.update(kwarg_overrides.get(uid, {}))  # Inductor applies overrides last, too
                synthesized.append(ktc_class(template=base.template, params=params_class(kwargs),
                                             extra_kwargs=base.extra_kwargs, layout=base.layout,
                                             inputs=base.inputs))
            replaced[uid] = synthesized
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
        if settings.topk == ks_config.SAME:
            return
        device = get_device(settings.device) if settings.device else _current_device()
        if device is None:
            return  # no GPU to compile for yet: the first compile loads them
        if settings.kernel_lut_path:
            load_lut_cached(settings.kernel_lut_path)
        model_for(settings.model, device)
        if settings.cublas_margin is not None:
            gate_for(device)

    def _select(self, problem: Problem, device: DeviceSpec, settings: Settings) -> Selection:
        from kernel_select.select import top_k

        if settings.topk == ks_config.DEFAULT:
            k = len(space.for_problem(problem, device, "default"))
        else:
            k = int(settings.topk)
        candidates = space.for_problem(problem, device, "exhaustive")
        lut = load_lut_cached(settings.kernel_lut_path) if settings.kernel_lut_path else None
        model = model_for(settings.model, device)
        gate = gate_for(device) if settings.cublas_margin is not None else None
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
        return get_device(name) if name else _current_device()
    except Exception:  # noqa: BLE001 -- an undetectable GPU shows up as "none" in the key
        return None


def _lut_fingerprint(path: str | None) -> str:
    if not path:
        return "none"
    try:
        return f"{path}:{load_lut_cached(path).digest()}"
    except Exception:  # noqa: BLE001 -- a broken LUT still gets a key: its bytes, or "missing"
        try:
            with open(path, "rb") as handle:
                return f"{path}:unloadable:{hashlib.sha256(handle.read()).hexdigest()}"
        except OSError:
            return f"{path}:missing"


def _gate_fingerprint(margin: float | None, device: DeviceSpec | None) -> str:
    if margin is None:
        return "off"
    try:
        gate = gate_for(device) if device is not None else None
    except Exception as exc:  # noqa: BLE001 -- a broken gate file must not break cache keys
        return f"{margin}:unloadable:{type(exc).__name__}"
    return f"{margin}:{gate.digest() if gate is not None else 'none'}"


def _model_fingerprint(model: str | PerformanceModel | None, device: DeviceSpec | None) -> str:
    if device is None:
        return f"{model!r}:no-device"
    try:
        instance = model_for(model, device)
        digest = getattr(instance, "digest", None)
        ident = digest() if callable(digest) else ""
        return f"{type(instance).__qualname__}:{instance.describe()}:{ident}"
    except Exception as exc:  # noqa: BLE001
        return f"{model!r}:unloadable:{type(exc).__name__}:{exc}"


# -- install / uninstall ------------------------------------------------------------------------

class ChoicesFactory:
    """Zero-argument factory for `torch._inductor.config.inductor_choices_class`.

    A module-level class so the config stays picklable; its pickle carries the handler's uuid,
    which puts k, the LUT digest and the model into torch 2.11's FX-graph cache key (2.13 calls
    `uuid()` itself). Immutable: deep copies (Inductor copies its config dict often) are itself.
    """

    def __init__(self, **overrides: Any) -> None:
        if isinstance(overrides.get("model"), PerformanceModel):
            raise OptionError("install(model=...): pass a registered model name; an instance "
                              "cannot be pickled into Inductor's cache key (for an instance use "
                              "V.set_choices_handler(KernelSelectChoices(model=...)))")
        self.overrides = dict(sorted(_validated_overrides(**overrides).items()))

    def __call__(self) -> KernelSelectChoices:
        return KernelSelectChoices(**self.overrides)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_factory, (self.overrides, self().uuid()))

    def __copy__(self) -> ChoicesFactory:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ChoicesFactory:
        return self

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ChoicesFactory) and other.overrides == self.overrides

    def __hash__(self) -> int:
        return hash(tuple(self.overrides.items()))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.overrides.items())
        return f"kernel_select.inductor.ChoicesFactory({args})"


def _rebuild_factory(overrides: dict[str, Any], uuid: str | None = None) -> ChoicesFactory:
    del uuid  # only there to make the pickle differ when the selection would
    return ChoicesFactory(**overrides)


@dataclasses.dataclass
class _Installed:
    handler: KernelSelectChoices
    previous_class: Any
    handler_scope: contextlib.AbstractContextManager[None]


_thread_state = threading.local()


def _install_stack() -> list[_Installed]:
    stack = getattr(_thread_state, "stack", None)
    if stack is None:
        stack = _thread_state.stack = []
    return stack


def install(*, topk: int | str | None = None, kernel_lut_path: str | None = None, model: str | None = None,
            device: str | None = None, cublas_margin: float | str | None = None) -> KernelSelectChoices:
    """Make torch.compile's max-autotune benchmark only the top-k Triton GEMM configs.

    Arguments override the kernel_select.knobs knobs (None = use the knob). Call it in the
    thread that compiles: the handler is per thread, and so are Inductor's config overrides on
    torch 2.13. Undo with uninstall(). Also registers the `kernel_lut_path` / `gemm_topk`
    torch.compile options (see register_options). Returns the installed handler.
    """
    factory = ChoicesFactory(topk=topk, kernel_lut_path=kernel_lut_path, model=model, device=device,
                             cublas_margin=cublas_margin)
    handler = factory()
    try:
        handler.preload()
    except Exception as exc:  # noqa: BLE001 -- the compile will fall back with the same warning
        _warn_once(exc)
    register_options()
    previous_class = inductor_config.inductor_choices_class
    # Both are needed. V.choices caches the first handler it creates in a thread-local, so once
    # this thread has compiled anything, changing inductor_choices_class alone has no effect here:
    # set_choices_handler replaces the cached one. (It must run first: it builds the prior
    # handler from the previous class, which uninstall() restores.) inductor_choices_class, unlike
    # a thread-local handler, is part of Inductor's FX-graph cache key, so graphs cached with other
    # knobs (or without kernel_select) are not reused; where Inductor's config is process-wide it
    # is also what threads that have not compiled yet start with.
    handler_scope = V.set_choices_handler(handler)
    handler_scope.__enter__()
    inductor_config.inductor_choices_class = factory
    _install_stack().append(_Installed(handler, previous_class, handler_scope))
    log.info("kernel_select: installed %r", handler)
    return handler


def uninstall() -> bool:
    """Undo the latest install() of this thread. Returns False if there was none.

    The `kernel_lut_path` / `gemm_topk` options stay registered (inert without the handler):
    removing config entries could break Inductor's per-thread config caches elsewhere.
    """
    stack = _install_stack()
    if not stack:
        return False
    installed = stack.pop()
    inductor_config.inductor_choices_class = installed.previous_class
    installed.handler_scope.__exit__(None, None, None)
    log.info("kernel_select: uninstalled %r", installed.handler)
    return True


@contextlib.contextmanager
def enabled(*, topk: int | str | None = None, kernel_lut_path: str | None = None, model: str | None = None,
            device: str | None = None, cublas_margin: float | str | None = None) -> Iterator[KernelSelectChoices]:
    """install() for the duration of a with-block, then uninstall()."""
    handler = install(topk=topk, kernel_lut_path=kernel_lut_path, model=model, device=device,
                      cublas_margin=cublas_margin)
    try:
        yield handler
    finally:
        uninstall()


# -- torch._inductor.config options -------------------------------------------------------------

_options_registered: bool | None = None  # None = not tried yet


def register_options() -> bool:
    """Add `kernel_lut_path` and `gemm_topk` to torch._inductor.config (idempotent).

    Afterwards `torch._inductor.config.gemm_topk = 4` and
    `torch.compile(options={"gemm_topk": 4, "kernel_lut_path": ..., "max_autotune": True})` work,
    and the values are part of Inductor's cache key like any other option. The entries are built
    by torch's own `install_config_module`, so they have whatever shape the installed torch
    expects, and the result is checked (read, patch, copy, save) before it is kept. Returns
    False, after one warning, if this torch's config module cannot be extended; install() and
    kernel_select.knobs keep working either way.
    """
    global _options_registered
    with _lock:
        if _options_registered is None:
            reason = _register_options()
            _options_registered = reason is None
            if reason is not None:
                log.warning("kernel_select: cannot add %s to torch._inductor.config (%s); use "
                            "install(...) or kernel_select.knobs instead", " and ".join(OPTION_NAMES),
                            reason)
        return _options_registered


def _register_options() -> str | None:
    table = getattr(inductor_config, "_config", None)
    if not isinstance(table, dict):
        return "torch._inductor.config has no _config table"
    clashes = [name for name in OPTION_NAMES if name in table]
    if clashes:
        return f"torch already defines {', '.join(clashes)}"
    try:
        from torch.utils._config_module import install_config_module

        declarations = importlib.import_module("kernel_select.inductor.torch_options")
        if not isinstance(getattr(declarations, "_config", None), dict):
            install_config_module(declarations)
        for name in OPTION_NAMES:
            table[name] = declarations._config[name]
    except Exception as exc:  # noqa: BLE001
        _forget_options(table)
        return f"{type(exc).__name__}: {exc}"
    _mark_config_dirty()
    # Check in a copied context: torch 2.13 keeps config overrides in ContextVars, so the probe
    # values never reach the caller's context.
    problem = contextvars.copy_context().run(_check_options)
    if problem is not None:
        _forget_options(table)
    return problem


def _check_options() -> str | None:
    import pickle

    try:
        if any(getattr(inductor_config, name) is not None for name in OPTION_NAMES):
            return "the new options do not read back as None"
        if not all(name in inductor_config.get_config_copy() for name in OPTION_NAMES):
            return "get_config_copy() does not list the new options"
        with inductor_config.patch({OPTION_GEMM_TOPK: 3, OPTION_KERNEL_LUT_PATH: "probe.json"}):
            saved = pickle.loads(inductor_config.save_config())
            if saved.get(OPTION_GEMM_TOPK) != 3 or saved.get(OPTION_KERNEL_LUT_PATH) != "probe.json":
                return "save_config() does not carry the new options"
        if getattr(inductor_config, OPTION_GEMM_TOPK) is not None:
            return "config.patch() does not restore the new options"
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return None


def _forget_options(table: dict[str, Any]) -> None:
    for name in OPTION_NAMES:
        table.pop(name, None)
    _mark_config_dirty()


def _mark_config_dirty() -> None:
    # torch 2.13 caches config dicts and hashes per context; make this context rebuild them so
    # the new keys show up (contexts that never set them just omit them, i.e. their defaults).
    for attr, value in (("_hash_dirty_var", True), ("_get_dict_dirty_keys_var", None)):
        var = getattr(inductor_config, attr, None)
        if isinstance(var, contextvars.ContextVar):
            var.set(value)


# -- helpers for experiments (compare, tests) -----------------------------------------------------

def max_autotune_options(search_space: str = "DEFAULT", **extra: Any) -> dict[str, Any]:
    """torch.compile options equal to mode="max-autotune-no-cudagraphs" with the given GEMM search
    space (torch.compile takes either a mode or options, not both).

    Caches are not an option here: `force_disable_caches` is an alias of
    torch.compiler.config.force_disable_caches, which torch.compile(options=...) rejects; use
    `torch.compiler.config.patch(force_disable_caches=True)` or TORCHINDUCTOR_FORCE_DISABLE_CACHES=1.
    """
    import torch._inductor as torch_inductor

    options = dict(torch_inductor.list_mode_options("max-autotune-no-cudagraphs"))
    options["max_autotune_gemm_search_space"] = search_space.upper()
    options.update(extra)
    return options


@dataclasses.dataclass(frozen=True)
class ChoiceTiming:
    """One benchmarked autotuning choice."""

    name: str  # Inductor's choice name: "mm", "triton_mm_12", "decompose_k_mm_..."
    kind: str  # "triton", "extern" (ATen/cuBLAS) or "other"
    ms: float  # Inductor's timing; inf if it failed
    config: GemmConfig | None  # for Triton GEMM choices

    def label(self) -> str:
        if self.kind == "triton" and self.config is not None:
            return f"triton {self.config.short()}"
        if self.kind == "extern":
            return f"aten {self.name}"
        return self.name


@dataclasses.dataclass
class AutotuneRecord:
    """The timings Inductor measured for one autotuned op."""

    op: str
    timings: list[ChoiceTiming]

    @property
    def winner(self) -> ChoiceTiming | None:
        finite = [t for t in self.timings if t.ms < float("inf")]
        return min(finite, key=lambda t: t.ms) if finite else None

    def count(self, kind: str) -> int:
        return sum(1 for t in self.timings if t.kind == kind)


@contextlib.contextmanager
def record_autotuning() -> Iterator[list[AutotuneRecord]]:
    """Collect what Inductor's autotuner benchmarked (via a feedback saver) inside the block."""
    from torch._inductor import select_algorithm

    records: list[AutotuneRecord] = []

    def saver(timings: dict[Any, float], name: str, *_: Any) -> None:
        # An exception escaping a feedback saver aborts torch.compile; never let one out.
        try:
            records.append(AutotuneRecord(name, [_choice_timing(select_algorithm, c, ms)
                                                 for c, ms in timings.items()]))
        except Exception:  # noqa: BLE001
            log.debug("kernel_select: could not record autotuning of %s", name, exc_info=True)

    select_algorithm.add_feedback_saver(saver)
    try:
        yield records
    finally:
        savers = select_algorithm.get_algorithm_selector_cache().feedback_saver_fns
        if saver in savers:
            savers.remove(saver)


def _choice_timing(select_algorithm: Any, choice: Any, ms: float) -> ChoiceTiming:
    if isinstance(choice, select_algorithm.TritonTemplateCaller):
        return ChoiceTiming(choice.name, "triton", float(ms), _config_of(choice))
    if isinstance(choice, select_algorithm.ExternKernelCaller):
        return ChoiceTiming(choice.name, "extern", float(ms), None)
    return ChoiceTiming(getattr(choice, "name", type(choice).__name__), "other", float(ms), None)


def _config_of(choice: Any) -> GemmConfig | None:
    try:
        ktc = getattr(choice, "annotations", {}).get("ktc")
        if ktc is not None:
            return GemmConfig.from_inductor_kwargs(ktc.params.to_kwargs())
        return config_from_description(choice.description)
    except Exception:  # noqa: BLE001 -- e.g. a persistent-TMA choice without GEMM kwargs
        return None
