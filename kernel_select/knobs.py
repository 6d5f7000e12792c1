"""Knobs for the Inductor integration, in the style of `torch._inductor.config`.

    import kernel_select.knobs as ks_config

    ks_config.topk = 4                                   # validated on assignment
    with ks_config.patch(kernel_lut_path="luts/h100.json", topk=8):
        ...

Knobs:
  kernel_lut_path  path of a kernel lookup table (JSON) whose entries are always benchmarked, or
                   None. Environment: TORCHINDUCTOR_KERNEL_LUT_PATH.
  topk             how many Triton GEMM configs Inductor benchmarks per GEMM:
                   a positive int; "DEFAULT" = as many as Inductor's own DEFAULT list has for the
                   problem, but chosen by the model from the exhaustive space; "auto" = as many as
                   the model is unsure about (its card's floor, 1 or 2, where it is sure, up to
                   `auto_topk_cap`; models without a measure of their uncertainty get 4);
                   "SAME" = off, the handler passes Inductor's candidates through unchanged.
                   Environment: TORCHINDUCTOR_GEMM_TOPK.
  auto_topk_cap    the most configs topk="auto" benchmarks per GEMM: a positive int, default 8.
                   Environment: TORCHINDUCTOR_GEMM_AUTO_TOPK_CAP.
  model            name of a registered performance model, or None for `load_default(device)`.
  device           device spec name ("h100", ...) to rank for, or None to detect the GPU that
                   Inductor compiles for.
  cublas_margin    the cuBLAS decision: when the shipped gate predicts cuBLAS at least this fraction
                   faster than every Triton config of a GEMM, Inductor gets no model-ranked Triton
                   configs for it (LUT entries still), so it takes ATen without compiling or
                   benchmarking Triton. Where no gate is shipped and the model predicts cuBLAS
                   (`estimate_aten`), the two-sided rule decides instead: Triton configs only where
                   the best predicted Triton time beats predicted cuBLAS by this fraction. A float
                   in [0, 1); None (or "off") disables both. Where the model predicts cuBLAS under
                   0.06 ms (`gate.SMALL_GEMM_MS`), and for an addmm whose bias is one row (a biased
                   nn.Linear), the margin is dropped and Triton is offered only where predicted more
                   than 2% faster (`gate.NO_MARGIN_TIE`): Inductor's benchmark over-times
                   ATen there (docs/inductor.md, "Small GEMMs" and "The cuBLAS gate").
                   Default 0.15. Environment: TORCHINDUCTOR_GEMM_CUBLAS_MARGIN.
  dynamic_m        the values a dynamic (symbolic) M will take, for ranking configs that serve all
                   of them: "LOW..HIGH" (a range, ranked at 5 log-spaced points), "A,B,C" (the
                   buckets themselves) or a list of ints; None = the m range of the matching LUT
                   entry, else the symbol's declared range (mark_dynamic(min=, max=)), else
                   hint/4 .. hint*4. Environment: TORCHINDUCTOR_GEMM_DYNAMIC_M.
  precompile_in_process  precompile every autotuned Triton choice in the compiling process's thread
                   pool, never in Inductor's compile-worker pool, so benchmarking reuses what was
                   compiled instead of compiling each choice again (kernel_select.inductor.precompile).
                   A bool ("1"/"0", "true"/"false", "on"/"off", "yes"/"no"); default False until it
                   is measured on a GPU. Takes effect through install().
                   Environment: TORCHINDUCTOR_GEMM_PRECOMPILE_IN_PROCESS.

Environment variables are read once, when this module is imported; the values live in this
module. The knobs are process-wide (not thread-local), unlike Inductor's own config patches.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, Union

from kernel_select.errors import KernelSelectError, OptionError
from kernel_select.model.gate import DEFAULT_MARGIN

SAME = "SAME"
DEFAULT = "DEFAULT"
AUTO = "auto"
DEFAULT_AUTO_TOPK_CAP = 8
ENV_KERNEL_LUT_PATH = "TORCHINDUCTOR_KERNEL_LUT_PATH"
ENV_GEMM_TOPK = "TORCHINDUCTOR_GEMM_TOPK"
ENV_CUBLAS_MARGIN = "TORCHINDUCTOR_GEMM_CUBLAS_MARGIN"
ENV_DYNAMIC_M = "TORCHINDUCTOR_GEMM_DYNAMIC_M"
ENV_AUTO_TOPK_CAP = "TORCHINDUCTOR_GEMM_AUTO_TOPK_CAP"
ENV_PRECOMPILE_IN_PROCESS = "TORCHINDUCTOR_GEMM_PRECOMPILE_IN_PROCESS"
DEFAULT_CUBLAS_MARGIN = DEFAULT_MARGIN  # the gate owns it: see kernel_select.model.gate for how it was chosen

TopK = Union[int, str]
_ASCII_DIGITS = re.compile(r"[0-9]+")


def parse_topk(value: object, *, source: str = "topk") -> TopK:
    """A positive int, "DEFAULT", "SAME" or "auto" (case-insensitive; a string of ASCII digits is
    accepted)."""
    if isinstance(value, str):
        text = value.strip()
        if text.upper() in (SAME, DEFAULT):
            return text.upper()
        if text.lower() == AUTO:
            return AUTO
        # Not str.isdigit(): it is true for "²" and other digits that int() refuses.
        if _ASCII_DIGITS.fullmatch(text):
            value = int(text)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise OptionError(
        f"{source}: expected a positive integer, 'DEFAULT' (as many configs as Inductor's default "
        f"list), 'auto' (as many as the model is unsure about) or 'SAME' (pass Inductor's candidates "
        f"through), got {value!r}"
    )


def parse_auto_topk_cap(value: object, *, source: str = "auto_topk_cap") -> int:
    """A positive int (a string of ASCII digits is accepted)."""
    if isinstance(value, str) and _ASCII_DIGITS.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise OptionError(f"{source}: expected a positive integer (the most configs topk='auto' "
                      f"benchmarks per GEMM), got {value!r}")


def parse_lut_path(value: object, *, source: str = "kernel_lut_path") -> str | None:
    """None (no lookup table) or a path; "" counts as None, "~" is expanded. The file is read
    (and checked) when a GEMM is compiled, so it may be created after this is set."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str):
            return os.path.expanduser(text) if text.strip() else None
    raise OptionError(f"{source}: expected a file path (str) or None, got {value!r}")


def parse_model(value: object, *, source: str = "model") -> str | None:
    """None (the best shipped model) or the non-empty name of a registered model."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise OptionError(f"{source}: expected a model name such as 'mlp' or None, got {value!r}")


def parse_device(value: object, *, source: str = "device") -> str | None:
    """None (detect) or a known device name, normalized to its key ("NVIDIA H100 80GB HBM3" -> "h100")."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise OptionError(f"{source}: expected a device name such as 'h100' or None, got {value!r}")
    from kernel_select.device import get_device

    try:
        return get_device(value).key
    except KernelSelectError as exc:
        raise OptionError(f"{source}: {exc}") from None


def parse_cublas_margin(value: object, *, source: str = "cublas_margin") -> float | None:
    """None / "off" / "none" (gate disabled) or a fraction in [0, 1); numeric strings are accepted."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("off", "none"):
            return None
        try:
            value = float(text)
        except ValueError:
            pass
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0:
        return float(value)
    raise OptionError(f"{source}: expected a fraction in [0, 1) such as 0.05, or None / 'off' to disable "
                      f"the cuBLAS gate, got {value!r}")


def parse_dynamic_m(value: object, *, source: str = "dynamic_m") -> tuple[int, ...] | None:
    """None / "" (derive the Ms), "LOW..HIGH" (5 log-spaced Ms), "A,B,C" or a list of positive ints
    (those Ms). Returns the sorted Ms to rank over."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    from kernel_select.select import spread_ms  # lazily: only a set knob pays for the import

    error = OptionError(f"{source}: expected 'LOW..HIGH' (e.g. '560..8192'), 'A,B,C' (e.g. '560,1024,2048'), "
                        f"a list of positive ints, or None, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        if ".." in text:
            low, _, high = (part.strip() for part in text.partition(".."))
            both_digits = _ASCII_DIGITS.fullmatch(low) and _ASCII_DIGITS.fullmatch(high)
            if not both_digits or not 1 <= int(low) <= int(high):
                raise error
            return spread_ms(int(low), int(high))
        parts = [part.strip() for part in text.split(",")]
        if not all(_ASCII_DIGITS.fullmatch(part) for part in parts):
            raise error
        value = [int(part) for part in parts]
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(m, int) and not isinstance(m, bool) and m >= 1 for m in value):
        return tuple(sorted(set(value)))
    raise error


_TRUE_WORDS = ("1", "true", "on", "yes")
_FALSE_WORDS = ("0", "false", "off", "no")


def parse_precompile_in_process(value: object, *, source: str = "precompile_in_process") -> bool:
    """A bool, or one of "1"/"0", "true"/"false", "on"/"off", "yes"/"no" (case-insensitive)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise OptionError(f"{source}: expected True or False (or '1'/'0', 'on'/'off'), got {value!r}")


_PARSERS: dict[str, Callable[..., Any]] = {
    "kernel_lut_path": parse_lut_path,
    "topk": parse_topk,
    "auto_topk_cap": parse_auto_topk_cap,
    "model": parse_model,
    "device": parse_device,
    "cublas_margin": parse_cublas_margin,
    "dynamic_m": parse_dynamic_m,
    "precompile_in_process": parse_precompile_in_process,
}


def _from_env(name: str, parser: Callable[..., Any], default: object) -> Any:
    raw = os.environ.get(name, "")
    return parser(raw if raw.strip() else default, source=f"environment variable {name}")


kernel_lut_path: str | None = _from_env(ENV_KERNEL_LUT_PATH, parse_lut_path, None)
topk: TopK = _from_env(ENV_GEMM_TOPK, parse_topk, DEFAULT)
auto_topk_cap: int = _from_env(ENV_AUTO_TOPK_CAP, parse_auto_topk_cap, DEFAULT_AUTO_TOPK_CAP)
model: str | None = None
device: str | None = None
cublas_margin: float | None = _from_env(ENV_CUBLAS_MARGIN, parse_cublas_margin, DEFAULT_CUBLAS_MARGIN)
dynamic_m: tuple[int, ...] | None = _from_env(ENV_DYNAMIC_M, parse_dynamic_m, None)
precompile_in_process: bool = _from_env(ENV_PRECOMPILE_IN_PROCESS, parse_precompile_in_process, False)


def snapshot() -> dict[str, Any]:
    """The current value of every knob."""
    module = sys.modules[__name__]
    return {name: getattr(module, name) for name in _PARSERS}


@contextlib.contextmanager
def patch(**changes: Any) -> Iterator[None]:
    """Temporarily set knobs (validated before anything changes); restores them on exit.

    Works as a context manager and as a decorator.
    """
    unknown = sorted(set(changes) - set(_PARSERS))
    if unknown:
        raise OptionError(f"kernel_select.knobs.patch: unknown knob(s) {', '.join(unknown)}; "
                          f"known: {', '.join(_PARSERS)}")
    parsed = {name: _PARSERS[name](value, source=f"kernel_select.knobs.{name}")
              for name, value in changes.items()}
    module = sys.modules[__name__]
    prior = {name: getattr(module, name) for name in parsed}
    for name, value in parsed.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in prior.items():
            setattr(module, name, value)


class _ValidatedKnobs(types.ModuleType):
    """Module type that validates `kernel_select.knobs.<knob> = value` like patch() does."""

    def __setattr__(self, name: str, value: Any) -> None:
        parser = _PARSERS.get(name)
        if parser is not None:
            value = parser(value, source=f"kernel_select.knobs.{name}")
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _ValidatedKnobs
