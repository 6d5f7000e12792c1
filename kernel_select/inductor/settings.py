"""Which knobs are in effect for one selection, and the torch.compile options kernel_select adds.

Precedence, highest first: torch.compile options / torch._inductor.config (per compile), then
install() or handler arguments, then kernel_select.knobs (patch > environment > default).
"""

from __future__ import annotations

import contextvars
import dataclasses
import importlib
import logging
import threading
from typing import Any

from torch._inductor import config as inductor_config

from kernel_select import knobs
from kernel_select.model import PerformanceModel

log = logging.getLogger(__name__)

#: Names of the options `register_options()` adds to torch._inductor.config.
OPTION_KERNEL_LUT_PATH = "kernel_lut_path"
OPTION_GEMM_TOPK = "gemm_topk"
OPTION_GEMM_DYNAMIC_M = "gemm_dynamic_m"
OPTION_GEMM_PRECOMPILE_IN_PROCESS = "gemm_precompile_in_process"
OPTION_NAMES = (OPTION_KERNEL_LUT_PATH, OPTION_GEMM_TOPK, OPTION_GEMM_DYNAMIC_M,
                OPTION_GEMM_PRECOMPILE_IN_PROCESS)
GATE_OFF = "off"  # install(cublas_margin="off"): the cuBLAS gate is off for this handler

_lock = threading.Lock()

@dataclasses.dataclass(frozen=True)
class Settings:
    """The knobs in effect for one selection."""

    topk: int | str
    kernel_lut_path: str | None
    model: str | PerformanceModel | None
    device: str | None
    cublas_margin: float | None = None  # None: the cuBLAS gate is off
    dynamic_m: tuple[int, ...] | None = None  # None: derive the Ms a symbolic M is ranked for
    auto_topk_cap: int = knobs.DEFAULT_AUTO_TOPK_CAP  # topk="auto": the most configs per GEMM


def validated_overrides(topk: object = None, kernel_lut_path: object = None, model: object = None,
                         device: object = None, cublas_margin: object = None,
                         dynamic_m: object = None) -> dict[str, Any]:
    """Check install()/constructor arguments; None means "not given, use kernel_select.knobs"
    (to turn the cuBLAS gate off for one handler, pass cublas_margin="off")."""
    overrides: dict[str, Any] = {}
    if topk is not None:
        overrides["topk"] = knobs.parse_topk(topk)
    if kernel_lut_path is not None:
        overrides["kernel_lut_path"] = knobs.parse_lut_path(kernel_lut_path)
    if model is not None:
        overrides["model"] = model if isinstance(model, PerformanceModel) else knobs.parse_model(model)
    if device is not None:
        overrides["device"] = knobs.parse_device(device)
    if cublas_margin is not None:
        # "off" stays a string here: None would read as "not given" when the factory re-validates.
        margin = knobs.parse_cublas_margin(cublas_margin)
        overrides["cublas_margin"] = GATE_OFF if margin is None else margin
    if dynamic_m is not None:
        overrides["dynamic_m"] = knobs.parse_dynamic_m(dynamic_m)
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
    topk = overrides.get("topk", knobs.topk)
    lut_path = overrides.get("kernel_lut_path", knobs.kernel_lut_path)
    option_topk = _torch_option(OPTION_GEMM_TOPK)
    if option_topk is not None:
        topk = knobs.parse_topk(option_topk, source=f"torch._inductor.config.{OPTION_GEMM_TOPK}")
    option_path = _torch_option(OPTION_KERNEL_LUT_PATH)
    if option_path is not None:
        lut_path = knobs.parse_lut_path(option_path,
                                            source=f"torch._inductor.config.{OPTION_KERNEL_LUT_PATH}")
    dynamic_m = overrides.get("dynamic_m", knobs.dynamic_m)
    option_m = _torch_option(OPTION_GEMM_DYNAMIC_M)
    if option_m is not None:
        dynamic_m = knobs.parse_dynamic_m(option_m, source=f"torch._inductor.config.{OPTION_GEMM_DYNAMIC_M}")
    return Settings(topk=topk, kernel_lut_path=lut_path,
                    model=overrides.get("model", knobs.model),
                    device=overrides.get("device", knobs.device),
                    cublas_margin=_margin(overrides.get("cublas_margin", knobs.cublas_margin)),
                    dynamic_m=dynamic_m, auto_topk_cap=knobs.auto_topk_cap)


def resolve_precompile_in_process(override: bool | None = None) -> bool:
    """Whether Triton choices are precompiled in the compiling process right now. Same precedence
    as resolve_settings: the torch option (per compile), then install()'s argument, then the knob.
    Not part of Settings: it changes how choices are compiled, never which one is selected."""
    option = _torch_option(OPTION_GEMM_PRECOMPILE_IN_PROCESS)
    if option is not None:
        return knobs.parse_precompile_in_process(
            option, source=f"torch._inductor.config.{OPTION_GEMM_PRECOMPILE_IN_PROCESS}")
    return knobs.precompile_in_process if override is None else override


def _margin(value: float | str | None) -> float | None:
    return None if value == GATE_OFF else value  # type: ignore[return-value]



_options_registered: bool | None = None  # None = not tried yet


def register_options() -> bool:
    """Add `kernel_lut_path`, `gemm_topk`, `gemm_dynamic_m` and `gemm_precompile_in_process` to
    torch._inductor.config (idempotent).

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
        probe = {OPTION_GEMM_TOPK: 3, OPTION_KERNEL_LUT_PATH: "probe.json", OPTION_GEMM_DYNAMIC_M: "1..2",
                 OPTION_GEMM_PRECOMPILE_IN_PROCESS: True}
        with inductor_config.patch(probe):
            saved = pickle.loads(inductor_config.save_config())
            if any(saved.get(name) != value for name, value in probe.items()):
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

