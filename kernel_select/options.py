"""The knobs: one declaration each (`KNOBS`), and one parser per knob.

Every knob has one name, used everywhere it can be set: `kernel_select.knobs.<name>`,
`install(<name>=...)`, the torch.compile option `<name>` and the environment variable
`TORCHINDUCTOR_<NAME>`. The names start with `gemm_` (but the LUT path) because the torch options
share torch._inductor.config's flat namespace with Inductor's own GEMM options.

A `Knob` declares the name, the default, the parser, the one-line description the docs' table gives
and the raw types a torch.compile option lets through; kernel_select.knobs (the config module),
kernel_select.inductor.torch_options (the torch options) and kernel_select.inductor.settings (the
`Settings` in effect for one compile) are all generated from `KNOBS`, so adding a knob is one
declaration here and a row in the docs' table (a test checks the table against `KNOBS`).

Parsers raise OptionError naming where the value came from (`source`).
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Optional, Union

from kernel_select.buckets import check_edges
from kernel_select.errors import KernelSelectError, OptionError

SAME = "SAME"
DEFAULT = "DEFAULT"
AUTO = "auto"
OFF = "off"
#: The gemm_topk default, wherever a count is read (install(), the knob, top_k(), the pruner, the
#: CLI): top-4 scores 0.976 (test) and 0.989 (family) on the H100's held-out splits, above
#: Inductor's DEFAULT list (0.897, 0.930) at a fifth of its configs; "auto" benchmarks 2.1 configs
#: for 0.968 and 0.975 (docs/results.md, "Selection quality on the H100").
DEFAULT_TOPK = 4
DEFAULT_AUTO_TOPK_CAP = 8
#: The `gemm_cublas_margin` knob's default: skip Triton when cuBLAS is predicted >= 15% faster. The
#: smallest margin at which no validation problem of the shipped H100 gate (187) is gated while a
#: Triton config beats cuBLAS: 11% gated, none wrongly (at 0.05: 27% gated, 10 wrongly, by up to 4.1x).
#: kernel_select.model.cublas.DEFAULT_MARGIN is this value.
DEFAULT_CUBLAS_MARGIN = 0.15
#: An M beyond int32 is no GEMM Inductor lowers; a larger value is a typo.
MAX_M = 2**31 - 1

TopK = Union[int, float, str]
_ASCII_DIGITS = re.compile(r"[0-9]+")
_ASCII_DECIMAL = re.compile(r"[0-9]*\.[0-9]+|[0-9]+\.[0-9]*")


def parse_topk(value: object, *, source: str = "gemm_topk") -> TopK:
    """The one parser of a gemm_topk value, wherever one is read (install(), the knob, the torch
    option, the environment, top_k(), select(), the pruner, the command line's --gemm-topk).

    Accepts a count >= 1 (an int, or ASCII digits), a fraction in (0, 1] of the candidates (a float,
    or text such as "0.25"; at least one is kept), "DEFAULT" (as many as Inductor's default list has
    for the problem, picked by the model), "auto" (as many as the model is unsure about) or "SAME"
    (every candidate: the Inductor handler passes Inductor's own list through untouched); the words
    in any case. Returns the int, the float, or the word in its canonical spelling.
    """
    if isinstance(value, str):
        text = value.strip()
        if text.upper() in (SAME, DEFAULT):
            return text.upper()
        if text.lower() == AUTO:
            return AUTO
        # Not str.isdigit(): it is true for "²" and other digits that int() refuses.
        if _ASCII_DIGITS.fullmatch(text):
            value = int(text)
        elif _ASCII_DECIMAL.fullmatch(text):
            value = float(text)
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if value >= 1:
            return int(value)
        raise OptionError(f"{source}: a count must be >= 1, got {value}")
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        fraction = float(value)
        if math.isfinite(fraction) and 0.0 < fraction <= 1.0:
            return fraction
        whole = math.isfinite(fraction) and fraction > 1 and fraction == int(fraction)
        hint = f"; for a count write {int(fraction)}" if whole else ""
        raise OptionError(f"{source}: a fraction must be in (0, 1], got {fraction!r}{hint}")
    raise OptionError(
        f"{source}: expected a count >= 1, a fraction in (0, 1], 'DEFAULT' (as many configs as "
        f"Inductor's default list), 'auto' (as many as the model is unsure about) or 'SAME' (every "
        f"candidate: Inductor's own list), got {_shown(value)}")


def parse_auto_topk_cap(value: object, *, source: str = "gemm_auto_topk_cap") -> int:
    """A positive int (ASCII digits are accepted)."""
    if isinstance(value, str) and _ASCII_DIGITS.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise OptionError(f"{source}: expected a positive integer (the most configs gemm_topk='auto' "
                      f"benchmarks per GEMM), got {_shown(value)}")


def parse_lut_path(value: object, *, source: str = "kernel_lut_path") -> str | None:
    """None (no lookup table) or a path; "" counts as None, "~" is expanded. The file is read and checked
    by install() (a missing or invalid one raises there) and re-read by the handler whenever it changes."""
    if value is None:
        return None
    if isinstance(value, (str, os.PathLike)):
        text = os.fspath(value)
        if isinstance(text, str):
            if "\0" in text:
                raise OptionError(f"{source}: a path cannot contain a NUL byte, got {_shown(text)}")
            return os.path.expanduser(text) if text.strip() else None
    raise OptionError(f"{source}: expected a file path (str) or None, got {_shown(value)}")


def parse_model(value: object, *, source: str = "gemm_model") -> str | None:
    """None (the device's trained model) or the non-empty name of a registered model."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        return value.strip()
    raise OptionError(f"{source}: expected a model name such as 'mlp' or None, got {_shown(value)}")


def parse_device(value: object, *, source: str = "gemm_device") -> str | None:
    """None (detect) or a known device name, normalized to its key ("NVIDIA H100 80GB HBM3" -> "h100")."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise OptionError(f"{source}: expected a device name such as 'h100' or None, got {_shown(value)}")
    from kernel_select.device import get_device

    try:
        return get_device(value).key
    except KernelSelectError as exc:
        raise OptionError(f"{source}: {exc}") from None


def parse_cublas_margin(value: object, *, source: str = "gemm_cublas_margin") -> float | None:
    """None / "off" / "none" (the cuBLAS decision is off) or a fraction in [0, 1)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in (OFF, "none"):
            return None
        try:
            # ASCII only: float() also reads Arabic-Indic and other Unicode digits ("٠٫١٥"), which
            # nobody types on purpose into a number that every other tool reads as text.
            value = float(text) if text.isascii() else value
        except ValueError:
            pass
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0:
        return float(value)
    raise OptionError(f"{source}: expected a fraction in [0, 1) such as 0.05, or 'off' to turn the "
                      f"cuBLAS decision off, got {_shown(value)}")


def parse_dynamic_m(value: object, *, source: str = "gemm_dynamic_m") -> tuple[int, ...] | None:
    """None / "" (derive the Ms), "LOW..HIGH" (5 log-spaced Ms), "A,B,C" or a list of positive ints
    (those Ms), each at most MAX_M. Returns the sorted Ms to rank over."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    from kernel_select.problem import spread_ms

    error = OptionError(f"{source}: expected 'LOW..HIGH' (e.g. '560..8192'), 'A,B,C' (e.g. '560,1024,2048'), "
                        f"a list of positive ints up to {MAX_M}, or None, got {_shown(value)}")
    if isinstance(value, str):
        text = value.strip()
        if ".." in text:
            low, _, high = (part.strip() for part in text.partition(".."))
            both_digits = _ASCII_DIGITS.fullmatch(low) and _ASCII_DIGITS.fullmatch(high)
            if not both_digits or not 1 <= int(low) <= int(high) <= MAX_M:
                raise error
            return spread_ms(int(low), int(high))
        parts = [part.strip() for part in text.split(",")]
        if not all(_ASCII_DIGITS.fullmatch(part) for part in parts):
            raise error
        value = [int(part) for part in parts]
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(m, int) and not isinstance(m, bool) and 1 <= m <= MAX_M for m in value):
        return tuple(sorted(set(value)))
    raise error


def parse_dynamic_buckets(value: object, *,
                          source: str = "gemm_dynamic_buckets") -> tuple[int, ...] | None:
    """None / "" (take the edges from the LUT's range entries), "off" or an empty list (one graph for
    every length: returns ()), "A,B,C" or a list of ints above 2 (the lengths where a bucket begins;
    returned sorted)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    error = OptionError(f"{source}: expected the lengths where a bucket begins, 'A,B,C' (e.g. "
                        f"'1024,2048,4096') or a list of ints above 2 and up to {MAX_M}, 'off' (one graph "
                        f"for every length) or None (the LUT's ranges), got {_shown(value)}")
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in (OFF, "none"):
            return ()
        parts = [part.strip() for part in text.split(",")]
        if not all(_ASCII_DIGITS.fullmatch(part) for part in parts):
            raise error
        value = [int(part) for part in parts]
    if not isinstance(value, (list, tuple)) or any(
            isinstance(m, bool) or not isinstance(m, int) or m > MAX_M for m in value):
        raise error
    try:
        return check_edges(value, source=source)
    except OptionError:
        raise error from None


_TRUE_WORDS = ("1", "true", "on", "yes")
_FALSE_WORDS = ("0", "false", "off", "no")


def parse_precompile_in_process(value: object, *, source: str = "gemm_precompile_in_process") -> bool:
    """A bool, or one of "1"/"0", "true"/"false", "on"/"off", "yes"/"no" (case-insensitive)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise OptionError(f"{source}: expected True or False (or '1'/'0', 'on'/'off'), got {_shown(value)}")


@dataclass(frozen=True)
class Knob:
    """One knob, declared once; everything else that names the knob is generated from this."""

    name: str
    default: Any  # the parsed value when nothing sets the knob
    parse: Callable[..., Any]  # parse(value, source=...): the value checked and normalized
    doc: str  # what it is, one line (the docs' table says more)
    #: the raw types a torch.compile option of this name lets through (torch type-checks options
    #: against it, and checks nothing for a Union: the parser does)
    accepts: Any
    old_names: tuple[str, ...] = ()  # spellings before 1.0, deprecated


#: The knobs, in the documentation's order.
KNOBS: dict[str, Knob] = {knob.name: knob for knob in (
    Knob("kernel_lut_path", None, parse_lut_path,
         "a kernel lookup table (JSON) whose entries are always benchmarked", str),
    Knob("gemm_topk", DEFAULT_TOPK, parse_topk,
         "Triton GEMM configs benchmarked per GEMM: a count, a fraction, DEFAULT, auto or SAME",
         Union[int, float, str], ("topk", "top_k")),
    Knob("gemm_auto_topk_cap", DEFAULT_AUTO_TOPK_CAP, parse_auto_topk_cap,
         "the most configs gemm_topk='auto' benchmarks per GEMM", Union[int, str], ("auto_topk_cap",)),
    Knob("gemm_cublas_margin", DEFAULT_CUBLAS_MARGIN, parse_cublas_margin,
         "the cuBLAS decision's margin: a fraction in [0, 1), or 'off'", Union[float, str],
         ("cublas_margin",)),
    Knob("gemm_dynamic_m", None, parse_dynamic_m,
         "the values a dynamic M takes: 'LOW..HIGH', 'A,B,C' or a list of ints", Union[str, list],
         ("dynamic_m",)),
    Knob("gemm_dynamic_buckets", None, parse_dynamic_buckets,
         "where the length buckets of kernel_select.inductor.bucketed begin; 'off': one graph",
         Union[str, list]),
    # On by default: without it a bare install() compiled an fp32 BERT more slowly than Inductor's own
    # GEMM autotuning (docs/results.md, "Whole networks against Inductor's own GEMM autotuning").
    Knob("gemm_precompile_in_process", True, parse_precompile_in_process,
         "precompile autotuned Triton choices in the compiling process", Union[bool, str],
         ("precompile_in_process",)),
    Knob("gemm_model", None, parse_model, "a registered model's name; None: the device's trained model",
         str, ("model",)),
    Knob("gemm_device", None, parse_device, "the device to rank for ('h100'); None: the GPU compiled for",
         str, ("device",)),
)}
#: Spellings before 1.0 -> the knob's name. They keep working, with a DeprecationWarning.
DEPRECATED_NAMES: dict[str, str] = {old: knob.name for knob in KNOBS.values() for old in knob.old_names}


def torch_option_type(knob: str) -> Any:
    """The annotation of the knob's torch.compile option: its raw types, or None (not set there)."""
    return Optional[KNOBS[knob].accepts]


def env_name(knob: str) -> str:
    """The environment variable of a knob: TORCHINDUCTOR_ + its name in capitals."""
    return f"TORCHINDUCTOR_{knob.upper()}"


def parse(knob: str, value: object, *, source: str | None = None) -> Any:
    """`value` checked and normalized for `knob` (OptionError naming `source`, default the knob)."""
    return KNOBS[knob].parse(value, source=source or knob)


def from_env(knob: str) -> Any:
    """The knob's value from its environment variable, else its default (read once, at import)."""
    raw = os.environ.get(env_name(knob), "")
    declared = KNOBS[knob]
    return declared.parse(raw if raw.strip() else declared.default,
                          source=f"environment variable {env_name(knob)}")


def canonical_names(arguments: Mapping[str, Any], *, where: str) -> dict[str, Any]:
    """`arguments` with deprecated spellings renamed (one DeprecationWarning each); an unknown name
    is an OptionError listing the knobs. None values are dropped (None = not given)."""
    out: dict[str, Any] = {}
    for name, value in arguments.items():
        if name in DEPRECATED_NAMES:
            warnings.warn(f"{where}: {name!r} is deprecated; use {DEPRECATED_NAMES[name]!r}",
                          DeprecationWarning, stacklevel=_stacklevel_outside_package())
            name = DEPRECATED_NAMES[name]
        elif name not in KNOBS:
            raise OptionError(f"{where}: unknown knob {name!r}; known: {', '.join(KNOBS)}")
        if value is not None:
            out[name] = value
    return out


def _stacklevel_outside_package() -> int:
    """The `stacklevel` that attributes a warning to the first caller outside kernel_select: Python's
    default filters show a DeprecationWarning only where it is attributed to the user's __main__."""
    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    passed_through = (package, os.path.abspath(contextlib.__file__))  # enabled() is a context manager
    frame, level = sys._getframe(1), 1  # the warning's caller, i.e. canonical_names
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(passed_through):
        frame, level = frame.f_back, level + 1
    return level


def _shown(value: object, limit: int = 80) -> str:
    """repr(value), cut to `limit` characters: an error echoes the value, not a 4,000-digit one."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
