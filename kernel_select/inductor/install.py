"""Putting the handler in place: the picklable factory Inductor instantiates, install/uninstall.

install() composes with the choices handler already in place (for example torch's own
`LookupTableChoices`): the new handler wraps it, so a torch lookup-table hit still decides and
the wrapped handler's other heuristics stay in force. uninstall() restores it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

from torch._inductor import config as inductor_config
from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V

from kernel_select import warn
from kernel_select.errors import KernelSelectError, OptionError
from kernel_select.inductor import precompile
from kernel_select.inductor.choices import KernelSelectChoices
from kernel_select.inductor.settings import register_options, resolve_settings, validated_overrides
from kernel_select.model import PerformanceModel

log = logging.getLogger(__name__)

_CONSEQUENCE = "the first compile tries again, and falls back to Inductor's own GEMM configs if it fails too"


class ChoicesFactory:
    """Zero-argument factory for `torch._inductor.config.inductor_choices_class`.

    A module-level class so the config stays picklable; its pickle carries the handler's uuid,
    which puts k, the LUT digest and the model into torch 2.11's FX-graph cache key (2.13 calls
    `uuid()` itself). Immutable: deep copies (Inductor copies its config dict often) are itself.

    Args:
        wraps: the `inductor_choices_class` that was in place (a class or a factory), or None;
            every handler this factory makes wraps one of its handlers.
        overrides: the knobs, as install() takes them.
    """

    def __init__(self, *, wraps: Callable[[], InductorChoices] | None = None, **overrides: Any) -> None:
        overrides = validated_overrides(overrides, where="install")
        if isinstance(overrides.get("gemm_model"), PerformanceModel):
            raise OptionError("install(gemm_model=...): pass a registered model name; an instance "
                              "cannot be pickled into Inductor's cache key (for an instance use "
                              "V.set_choices_handler(KernelSelectChoices(gemm_model=...)))")
        # The precompile knob changes how choices are compiled, never which: not the handler's.
        self.overrides = dict(sorted((k, v) for k, v in overrides.items()
                                     if k != "gemm_precompile_in_process"))
        # Wrapping our own factory would stack two selections; wrap what it wraps instead.
        self.wraps = wraps.wraps if isinstance(wraps, ChoicesFactory) else wraps

    def __call__(self) -> KernelSelectChoices:
        return KernelSelectChoices(**self.overrides, inner=self.wraps() if self.wraps is not None else None)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_factory, (self.overrides, self.wraps, self().uuid()))

    def __copy__(self) -> ChoicesFactory:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> ChoicesFactory:
        return self

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, ChoicesFactory) and other.overrides == self.overrides
                and other.wraps is self.wraps)

    def __hash__(self) -> int:
        return hash((tuple(self.overrides.items()), id(self.wraps)))

    def __repr__(self) -> str:
        args = [f"{k}={v!r}" for k, v in self.overrides.items()]
        if self.wraps is not None:
            args.append(f"wraps={self.wraps!r}")
        return f"kernel_select.inductor.ChoicesFactory({', '.join(args)})"


def _rebuild_factory(overrides: dict[str, Any], wraps: Any = None, uuid: str | None = None) -> ChoicesFactory:
    del uuid  # only there to make the pickle differ when the selection would
    return ChoicesFactory(wraps=wraps, **overrides)


@dataclasses.dataclass
class _Installed:
    handler: KernelSelectChoices
    previous_class: Any
    handler_scope: contextlib.AbstractContextManager[None]
    overrides: dict[str, Any] = dataclasses.field(default_factory=dict)  # install()'s knobs, validated
    precompile_held: bool = False  # whether this install() holds the make_precompile_fn wrapper


_thread_state = threading.local()


def _install_stack() -> list[_Installed]:
    stack = getattr(_thread_state, "stack", None)
    if stack is None:
        stack = _thread_state.stack = []
    return stack


def _handler_to_wrap(factory: ChoicesFactory) -> InductorChoices | None:
    """The handler this thread's new handler wraps: the one in effect here (set with
    V.set_choices_handler, or built from inductor_choices_class), unless that is only Inductor's
    default, cached before inductor_choices_class was set; then one built from that class."""
    current = V.choices
    if isinstance(current, KernelSelectChoices):
        return current.inner
    if type(current) is InductorChoices and factory.wraps is not None:
        return factory.wraps()
    return current


def install(**knobs: Any) -> KernelSelectChoices:
    """Make torch.compile's max-autotune benchmark only the top-k Triton GEMM configs.

    Keyword arguments are knobs (kernel_select.options: gemm_topk, kernel_lut_path, gemm_cublas_margin,
    gemm_dynamic_m, gemm_dynamic_buckets, gemm_precompile_in_process, gemm_auto_topk_cap, gemm_model,
    gemm_device) and override kernel_select.knobs for this handler; None = use the knob, and a
    torch.compile option of the same name overrides them per compile. Call it in the thread that
    compiles: the handler is per thread, and so are Inductor's config overrides on torch 2.13. A
    choices handler already in place is wrapped, not dropped (one INFO line says which). Undo with
    uninstall(). Also registers the knobs as torch.compile options (see register_options).
    `gemm_precompile_in_process` precompiles this thread's autotuned Triton choices in process, so
    benchmarking does not compile them again (kernel_select.inductor.precompile). Returns the
    installed handler.

    The LUT is read and checked here, and so are the model and the cuBLAS gate where the device is
    known (the `gemm_device` knob, or the current CUDA device): a broken one raises now, not as a
    warning inside the first compile. A GPU without a trained model is not an error: its GEMMs get
    Inductor's own configs (one warning). Nothing is installed when install() raises.

    Raises:
        OptionError: an unknown knob, or a value it does not accept.
        LUTError: the LUT cannot be read or is invalid.
        ModelError: the model or the cuBLAS gate does not load.
    """
    overrides = validated_overrides(knobs, where="install")
    previous_class = inductor_config.inductor_choices_class
    factory = ChoicesFactory(wraps=previous_class, **overrides)
    handler = KernelSelectChoices(**factory.overrides, inner=_handler_to_wrap(factory))
    try:
        handler.preload()
    except KernelSelectError:
        raise
    except Exception as exc:  # noqa: BLE001 -- not ours to name: the compile falls back the same way
        warn.warn_fallback(exc, log, _CONSEQUENCE)
    register_options()
    # Both are needed. V.choices caches the first handler it creates in a thread-local, so once this
    # thread has compiled anything, changing inductor_choices_class alone has no effect here:
    # set_choices_handler replaces the cached one. inductor_choices_class, unlike a thread-local
    # handler, is part of Inductor's FX-graph cache key, so graphs cached with other knobs (or without
    # kernel_select) are not reused; where Inductor's config is process-wide it is also what threads
    # that have not compiled yet start with.
    handler_scope = V.set_choices_handler(handler)
    handler_scope.__enter__()
    inductor_config.inductor_choices_class = factory
    _install_stack().append(_Installed(handler, previous_class, handler_scope, overrides,
                                       _hold_precompile(overrides)))
    if handler.inner is not None:
        log.info("kernel_select: installed %r, wrapping the choices handler already in place (%s)",
                 handler, type(handler.inner).__qualname__)
    else:
        log.info("kernel_select: installed %r", handler)
    return handler


def uninstall() -> bool:
    """Undo the latest install() of this thread, restoring the handler it wrapped. Returns False
    if there was none.

    The torch.compile options stay registered (inert without the handler):
    removing config entries could break Inductor's per-thread config caches elsewhere.
    """
    stack = _install_stack()
    if not stack:
        return False
    installed = stack.pop()
    inductor_config.inductor_choices_class = installed.previous_class
    installed.handler_scope.__exit__(None, None, None)
    if installed.precompile_held:
        precompile.release(_precompile_wanted)
    log.info("kernel_select: uninstalled %r", installed.handler)
    return True


def _precompile_wanted() -> bool:
    """Whether this thread's latest install() wants Triton choices precompiled in process. The
    make_precompile_fn wrapper asks at every call, so a per-compile torch option counts too."""
    stack = _install_stack()
    return bool(stack) and resolve_settings(stack[-1].overrides).gemm_precompile_in_process


def _hold_precompile(overrides: dict[str, Any]) -> bool:
    """Put the precompile_in_process wrapper in force for as long as this install() lasts.

    From install() rather than from the handler's hook on purpose: the hook returns its
    candidates before Inductor calls make_precompile_fn, so a patch made there could not be
    scoped to that call and would stay in force for the rest of the compile. The wrapper scopes
    it to exactly each precompile submit loop of this thread: the handler's Triton GEMM configs,
    Inductor's own ones it passes through, and other autotuned templates (which pay the same
    double compile) alike. It is inert, one Python call, while the knob is off.
    """
    if precompile.hold(_precompile_wanted):
        return True
    problem = precompile.torch_shape_problem() or "the wrapper could not be installed"
    if resolve_settings(overrides).gemm_precompile_in_process:
        precompile.warn_once(problem)
    else:  # nobody asked for it (yet): not worth a warning
        log.debug("kernel_select: precompile_in_process unavailable: %s", problem)
    return False


@contextlib.contextmanager
def enabled(**knobs: Any) -> Iterator[KernelSelectChoices]:
    """install(**knobs) for the duration of a with-block, then uninstall()."""
    handler = install(**knobs)
    try:
        yield handler
    finally:
        uninstall()
