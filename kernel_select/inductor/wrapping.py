"""What the handler does besides GEMMs: compose with the handler it wraps, and leave grouped
convolutions to cuDNN.

A handler made by install() wraps the one in place before it (e.g. torch's `LookupTableChoices`):
every InductorChoices method the wrapped handler's class overrides (fusion, reductions, config
heuristics, ...) is routed to it, but for the GEMM candidate path (`_OWN_METHODS`), so wrapping a
handler keeps what it customizes. Grouped convolutions get no Triton convolution template
(inductor/convolution.py says why).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator
from typing import Any

from torch._inductor.choices import InductorChoices
from torch._inductor.virtualized import V

from kernel_select import warn
from kernel_select.inductor import convolution

log = logging.getLogger(__name__)


class WrappingChoices(InductorChoices):
    """An InductorChoices that composes with `inner` (None = Inductor's defaults) and offers no Triton
    template for a grouped convolution. Subclasses say when they pass everything through."""

    def __init__(self, inner: InductorChoices | None = None) -> None:
        super().__init__()
        self.inner = inner if type(inner) is not InductorChoices else None
        if self.inner is not None:
            _delegate_customized_heuristics(self, self.inner)

    def passes_through(self) -> bool:
        """Whether Inductor's own choices are to be used untouched (the knobs say so)."""
        return False

    def get_conv_configs(self, device_type: str | None = "cuda") -> Any:
        """Inductor's Triton convolution configs, or none for a grouped convolution, where the template
        does at least `groups` times the work and cannot beat cuDNN (inductor/convolution.py): the
        convolution then gets cuDNN alone, nothing compiled or benchmarked."""
        own = (self.inner.get_conv_configs if self.inner is not None
               else super().get_conv_configs)(device_type)
        try:
            if self.passes_through():
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


#: Methods that make up the GEMM candidate path: ours, never delegated to a wrapped handler (its
#: get_template_configs would call its own _finalize_template_configs and bypass the selection).
_OWN_METHODS = frozenset({"_finalize_template_configs", "get_template_configs", "get_conv_configs", "uuid"})


def _no_configs(*args: Any, **kwargs: Any) -> Iterator[Any]:
    """A conv config generator that yields nothing (Inductor calls it as configs(m, n, k, dtype_size=))."""
    return iter(())


def _delegate_customized_heuristics(handler: InductorChoices, inner: InductorChoices) -> None:
    """Route every InductorChoices method that `inner`'s class overrides (fusion, reductions, config
    heuristics, ...) to `inner`, so wrapping a handler keeps what it customizes."""
    for name, default in vars(InductorChoices).items():
        if name.startswith("__") or name in _OWN_METHODS:
            continue
        if inspect.getattr_static(type(inner), name, default) is not default:
            setattr(handler, name, getattr(inner, name))
