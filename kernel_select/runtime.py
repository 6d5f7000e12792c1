"""Process-wide state shared by every adapter (the Inductor handler, the Triton pruner).

One home for what must be loaded once per process and looked at on every GEMM:

* lookup tables, cached by file identity (st_dev, st_ino, st_size, st_mtime_ns), so an edited
  file is re-read and an unchanged one never is;
* performance models and cuBLAS gates, cached per (name, device) / device, loaded by the one policy
  of kernel_select.model.base (a device without a trained model is a NoTrainedModelError, cached too);
* detected devices, cached per CUDA index;
* which fallback warnings were already shown, keyed by *cause*, not by message text.

Failures are cached exactly like successes: a broken LUT is parsed once per file identity, a
broken model file is tried once, and every later GEMM re-raises the same error at no cost.

Everything here is reached from inside torch.compile, so nothing may block on its input: a LUT
path is stat()ed first (lut/bounded_read.py, the package's one reader of user files) and only a
regular file of at most MAX_LUT_BYTES is ever opened (a FIFO or /dev/zero would otherwise hang or
exhaust memory). `reset()` forgets all of it (tests, and
long-lived sessions that want to start over).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kernel_select import device as device_module
from kernel_select import warn
from kernel_select.device import DeviceSpec
from kernel_select.errors import LUTError
from kernel_select.lut.bounded_read import LUT_FILE, stat_regular
from kernel_select.lut.io import lut_digest
from kernel_select.model import PerformanceModel, get_model, load_default, load_gate
from kernel_select.model.cublas import CublasGate
from kernel_select.options import env_name

log = logging.getLogger(__name__)

FileIdentity = tuple[int, int, int, int]  # st_dev, st_ino, st_size, st_mtime_ns

_lock = threading.RLock()


@dataclass(frozen=True)
class _Outcome:
    """A cached load: its value, or the exception it raised (re-raised with its own traceback)."""

    stamp: Any
    value: Any = None
    error: BaseException | None = None
    trace: TracebackType | None = None

    def get(self) -> Any:
        if self.error is not None:
            raise self.error.with_traceback(self.trace)
        return self.value


_luts: dict[str, _Outcome] = {}
_models: dict[tuple[str | None, DeviceSpec], _Outcome] = {}
_gates: dict[DeviceSpec, _Outcome] = {}
_devices: dict[int, DeviceSpec] = {}


def reset() -> None:
    """Forget every cached LUT, model, gate and detected device, and every warning shown."""
    with _lock:
        for cache in (_luts, _models, _gates, _devices):
            cache.clear()
    warn.forget()


def _cached(cache: dict[Any, _Outcome], key: Any, stamp: Any, load: Callable[[], Any]) -> Any:
    """cache[key] if it was loaded with the same stamp, else load() now and remember the value or
    the error. Loading runs outside the lock (it may be slow); a rare double load is harmless."""
    with _lock:
        outcome = cache.get(key)
    if outcome is None or outcome.stamp != stamp:
        try:
            outcome = _Outcome(stamp, value=load())
        except Exception as exc:  # noqa: BLE001 -- cached and re-raised to every caller
            outcome = _Outcome(stamp, error=exc, trace=exc.__traceback__)
        with _lock:
            cache[key] = outcome
    return outcome.get()


# -- lookup tables --------------------------------------------------------------------------------

def lut_identity(path: str) -> FileIdentity:
    """The identity of a LUT file, after checking that it is safe to read inside a compile.

    Raises:
        LUTError: if the path is missing, not a regular file (a FIFO, a device, a directory), or
            larger than MAX_LUT_BYTES; the message names the path and the fix.
    """
    try:
        info = stat_regular(path, LUT_FILE)
    except LUTError as exc:
        # The setting that named the file is what the user changes.
        error = LUTError(f"{exc}; fix kernel_lut_path / {env_name('kernel_lut_path')}")
        error.cause_id = f"lut:{path}"  # type: ignore[attr-defined]
        raise error from None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _read_lut(path: str) -> Any:
    from kernel_select.lut import load_lut as load_lut_file

    return load_lut_file(path, strict=True)


def load_lut(path: str) -> Any:
    """The KernelLUT at `path`, parsed once per file identity (a failure too).

    Raises:
        LUTError: for an unsafe path (see lut_identity) or an invalid table; the same error,
            without re-parsing, until the file changes.
    """
    identity = lut_identity(path)

    def read() -> Any:
        try:
            return _read_lut(path)
        except Exception as exc:  # noqa: BLE001 -- one cause per file, whatever the parser raised
            exc.cause_id = f"lut:{path}"  # type: ignore[attr-defined]
            raise

    return _cached(_luts, path, identity, read)


def lut_fingerprint(path: str | None) -> str:
    """A string that changes whenever the LUT at `path` (or its absence) changes. Never raises and
    never reads more than MAX_LUT_BYTES: it goes into Inductor's cache key from inside a compile."""
    if not path:
        return "none"
    try:
        return f"{path}:{load_lut(path).digest()}"
    except Exception:  # noqa: BLE001 -- a broken LUT still gets a key: its bytes, or why it has none
        return f"{path}:unloadable:{lut_digest(path)}"


# -- models, gates, devices -------------------------------------------------------------------------

def model(name: str | PerformanceModel | None, device: DeviceSpec) -> PerformanceModel:
    """The model for a knob value (an instance is used as is), loaded once per (name, device): None is
    the device's trained model (kernel_select.model.base.load_default), a name a registered model.

    Raises:
        NoTrainedModelError: name None and no trained model serves the device.
        ModelError: the model does not load (the message names the file and the fix).
    """
    if isinstance(name, PerformanceModel):
        return name
    return _cached(_models, (name, device), None,
                   lambda: load_default(device) if name is None else get_model(name, device))


def gate(device: DeviceSpec) -> CublasGate | None:
    """The cuBLAS gate serving `device`, or None when no model folder has one."""
    return _cached(_gates, device, None, lambda: load_gate(device))


def detected_device(index: int) -> DeviceSpec:
    """The spec of CUDA device `index`, read from the driver once per process."""
    with _lock:
        spec = _devices.get(index)
    if spec is None:
        spec = device_module.detect(index)  # looked up at call time, so tests can replace it
        with _lock:
            _devices[index] = spec
    return spec


def current_device() -> DeviceSpec | None:
    """The spec of the current CUDA device, or None on a machine without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    return detected_device(torch.cuda.current_device())
