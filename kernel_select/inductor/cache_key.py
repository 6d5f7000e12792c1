"""The parts of the choices handler's cache key (`KernelSelectChoices.uuid`): fingerprints of the
model, the cuBLAS gate and a wrapped handler, each produced without raising (an unloadable file
shows up in the key instead), so a cache never serves choices made with other knobs."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from typing import Any

from kernel_select import options, runtime, warn
from kernel_select._version import __version__
from kernel_select.decision import RULES
from kernel_select.device import DeviceSpec, get_device
from kernel_select.inductor.settings import Settings
from kernel_select.model import PerformanceModel
from kernel_select.model.cublas import RULE


def uuid(settings: Callable[[], Settings], inner: Any, logger: logging.Logger, fallback: str) -> str:
    """The handler's uuid: changes whenever the selection could change: k, the LUT's contents, the
    model, the device, the cuBLAS decision, the wrapped handler. Inductor puts it into its FX-graph
    cache key (2.13 calls it; 2.11 pickles the factory, whose pickle carries it), so caches never serve
    choices made with other knobs. Never raises (knobs that do not resolve give a key of their own,
    after the handler's one warning per cause, on its `logger`, ending in `fallback`) and never blocks:
    the LUT is hashed with a bounded read."""
    try:
        return hash_parts(parts(settings(), inner))
    except Exception as exc:  # noqa: BLE001 -- a cache key must always be produced
        warn.warn_fallback(exc, logger, fallback)
        return hash_parts([f"invalid:{warn.cause_of(exc)}"])


def parts(settings: Settings, inner: Any) -> list[str]:
    """What the handler's selection depends on, one line each."""
    out = [f"version={package_version()}", f"gemm_topk={settings.gemm_topk}", f"inner={inner_id(inner)}",
           f"gemm_dynamic_m={settings.gemm_dynamic_m}"]
    if settings.gemm_topk == options.AUTO:
        out.append(f"gemm_auto_topk_cap={settings.gemm_auto_topk_cap}")
    if settings.gemm_topk != options.SAME:
        device = device_or_none(settings.gemm_device)
        out.append(f"device={device.key if device else 'none'}")
        out.append(f"lut={runtime.lut_fingerprint(settings.kernel_lut_path)}")
        out.append(f"model={model_fingerprint(settings.gemm_model, device)}")
        out.append(f"cublas_gate={gate_fingerprint(settings.gemm_cublas_margin, device)}")
        out.append(f"decision={RULES}")
    return out


def inner_id(inner: Any) -> str:
    if inner is None:
        return "none"
    uuid = getattr(inner, "uuid", None)
    ident = uuid() if callable(uuid) else ""
    return f"{type(inner).__module__}.{type(inner).__qualname__}:{ident}"


def hash_parts(parts: list[str]) -> str:
    return "kernel_select-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def package_version() -> str:
    return __version__


def device_or_none(name: str | None) -> DeviceSpec | None:
    try:
        return get_device(name) if name else runtime.current_device()
    except Exception:  # noqa: BLE001 -- an undetectable GPU shows up as "none" in the key
        return None


def gate_fingerprint(margin: float | None, device: DeviceSpec | None) -> str:
    if margin is None:
        return "off"
    try:
        gate = runtime.gate(device) if device is not None else None
    except Exception as exc:  # noqa: BLE001 -- a broken gate file must not break cache keys
        return f"{margin}:unloadable:{type(exc).__name__}"
    return f"{margin}:{RULE}:{gate.digest() if gate is not None else 'none'}"


def model_fingerprint(model: str | PerformanceModel | None, device: DeviceSpec | None) -> str:
    if device is None:
        return f"{model!r}:no-device"
    try:
        instance = runtime.model(model, device)
        digest = getattr(instance, "digest", None)
        ident = digest() if callable(digest) else ""
        return f"{type(instance).__qualname__}:{instance.describe()}:{ident}"
    except Exception as exc:  # noqa: BLE001
        return f"{model!r}:unloadable:{type(exc).__name__}:{exc}"

