"""Which knobs are in effect for one selection, the decision's Policy they give, and the torch.compile
options kernel_select adds.

Precedence, highest first: torch.compile options / torch._inductor.config (per compile), then
install() or handler arguments, then kernel_select.knobs (set > environment > default).
"""

from __future__ import annotations

import contextvars
import dataclasses
import importlib
import logging
import threading
from typing import Any

from torch._inductor import config as inductor_config

from kernel_select import knobs, options, runtime, warn
from kernel_select.decision import Policy
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import NoTrainedModelError
from kernel_select.model import PerformanceModel

log = logging.getLogger(__name__)

#: The options `register_options()` adds to torch._inductor.config: every knob, under its own name.
OPTION_NAMES = tuple(options.KNOBS)
_OFF = "off"  # an override that turns the cuBLAS decision off (None would read as "not given")

_lock = threading.Lock()


#: The knobs in effect for one selection: one field per declared knob (kernel_select.options.KNOBS),
#: holding its parsed value (gemm_cublas_margin None: the cuBLAS decision is off; gemm_model may be a
#: PerformanceModel instance given to the handler).
Settings = dataclasses.make_dataclass("Settings", [(name, Any) for name in options.KNOBS], frozen=True)
Settings.__module__ = __name__  # where pickle and repr find it


def validated_overrides(arguments: dict[str, Any], *, where: str) -> dict[str, Any]:
    """install()/handler arguments checked and normalized; None means "not given, use the knob".
    Deprecated spellings are renamed with a warning; an unknown name is an OptionError."""
    overrides: dict[str, Any] = {}
    for name, value in options.canonical_names(arguments, where=where).items():
        if name == "gemm_model" and isinstance(value, PerformanceModel):
            overrides[name] = value
            continue
        parsed = options.parse(name, value, source=f"{where}({name}=...)")
        overrides[name] = _OFF if name == "gemm_cublas_margin" and parsed is None else parsed
    return overrides


def _torch_option(name: str) -> Any:
    """A registered torch._inductor.config option's value, or None when unset or unregistered."""
    if not _options_registered:
        return None
    return getattr(inductor_config, name, None)


def resolve_settings(overrides: dict[str, Any] | None = None) -> Settings:
    """Effective knobs. Precedence: torch.compile options / torch._inductor.config (per compile), then
    install() or constructor arguments, then kernel_select.knobs (set > environment > default).

    Raises:
        OptionError: a knob or option holds a value it does not accept, naming where it was set.
    """
    overrides = overrides or {}
    values: dict[str, Any] = {}
    for name in OPTION_NAMES:
        option = _torch_option(name)
        if option is not None:
            values[name] = options.parse(name, option, source=f"torch._inductor.config.{name}")
        elif name in overrides:
            values[name] = overrides[name]
        else:
            values[name] = options.parse(name, getattr(knobs, name), source=f"kernel_select.knobs.{name}")
    if values["gemm_cublas_margin"] == _OFF:
        values["gemm_cublas_margin"] = None
    return Settings(**values)


def policy(settings: Settings, device: DeviceSpec) -> Policy | None:
    """The decision's Policy for `device` under `settings`: the model, LUT and cuBLAS gate loaded (once
    per process, kernel_select.runtime) and the knobs that decide; None where no trained model serves
    the device, which is not an error: that GPU gets Inductor's own configs (one warning).

    Raises:
        ModelError, LUTError: the model, the gate or the LUT does not load.
    """
    try:
        model = runtime.model(settings.gemm_model, device)
    except NoTrainedModelError as exc:
        warn.warn_once(("no model", device.key), log, "kernel_select: %s; Inductor benchmarks its own GEMM "
                       "configs on this GPU", exc)
        return None
    lut = runtime.load_lut(settings.kernel_lut_path) if settings.kernel_lut_path else None
    margin = settings.gemm_cublas_margin
    return Policy(model, lut, runtime.gate(device) if margin is not None else None, settings.gemm_topk,
                  margin, settings.gemm_auto_topk_cap, settings.gemm_dynamic_m)


def preload(settings: Settings) -> None:
    """Load, and so check, what a compile under `settings` reads: the LUT, and where the device is known
    (the `gemm_device` knob, or the current CUDA device) the model and the cuBLAS gate. install() calls
    it, so a broken LUT or model is an error there rather than a warning inside a compile; and loading
    inside Inductor's lowering, at the bottom of a deep stack, failed with RecursionError on the H100
    with torch 2.11: loaded here, the compile only reads the caches.

    Raises:
        LUTError, ModelError: a LUT or a model that a compile could not use (a GPU without a trained
            model is not an error, see `policy`).
    """
    if settings.gemm_topk == options.SAME:
        return
    if settings.kernel_lut_path:
        # The digest goes into every compile's cache key: computed here, once, not in the first compile.
        runtime.load_lut(settings.kernel_lut_path).digest()
    device = get_device(settings.gemm_device) if settings.gemm_device else runtime.current_device()
    if device is not None:  # else no GPU to compile for yet: the first compile loads them
        policy(settings, device)


_options_registered: bool | None = None  # None = not tried yet


def register_options() -> bool:
    """Add every knob (kernel_select.options) to torch._inductor.config under its own name (idempotent).

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
        probe = {"gemm_topk": 3, "kernel_lut_path": "probe.json", "gemm_dynamic_m": "1..2",
                 "gemm_precompile_in_process": True}
        with inductor_config.patch(probe):
            saved = pickle.loads(inductor_config.save_config())
            if any(saved.get(name) != value for name, value in probe.items()):
                return "save_config() does not carry the new options"
        if getattr(inductor_config, "gemm_topk") is not None:
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

