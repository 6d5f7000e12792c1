"""Process-wide state shared by every adapter (the Inductor handler, the Triton pruner).

One home for what must be loaded once per process and looked at on every GEMM:

* lookup tables, cached by file identity (st_dev, st_ino, st_size, st_mtime_ns), so an edited
  file is re-read and an unchanged one never is;
* performance models and cuBLAS gates, cached per (name, device) / device;
* detected devices, cached per CUDA index;
* which fallback warnings were already shown, keyed by *cause*, not by message text.

Failures are cached exactly like successes: a broken LUT is parsed once per file identity, a
broken model file is tried once, and every later GEMM re-raises the same error at no cost.

Everything here is reached from inside torch.compile, so nothing may block on its input: a LUT
path is stat()ed first and only a regular file of at most MAX_LUT_BYTES is ever opened (a FIFO
or /dev/zero would otherwise hang or exhaust memory). `reset()` forgets all of it (tests, and
long-lived sessions that want to start over).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kernel_select import device as device_module
from kernel_select.device import DeviceSpec
from kernel_select.errors import LUTError, ModelError
from kernel_select.lut.io import MAX_LUT_BYTES, lut_digest
from kernel_select.model import PerformanceModel

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
_warned: set[str] = set()


def reset() -> None:
    """Forget every cached LUT, model, gate, detected device and shown warning."""
    with _lock:
        for cache in (_luts, _models, _gates, _devices, _warned):
            cache.clear()


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
        info = os.stat(path)
    except OSError as exc:
        raise _lut_error(path, f"cannot read the kernel lookup table ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise _lut_error(path, "not a regular file (a FIFO, device or directory cannot be a kernel "
                               "lookup table)")
    if info.st_size > MAX_LUT_BYTES:
        raise _lut_error(path, f"{info.st_size} bytes, more than the {MAX_LUT_BYTES} bytes a kernel lookup "
                               f"table may have (kernel_select.lut.MAX_LUT_BYTES)")
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


def _lut_error(path: str, reason: str) -> LUTError:
    from kernel_select import knobs

    error = LUTError(f"{path}: {reason}; fix kernel_lut_path / {knobs.ENV_KERNEL_LUT_PATH}")
    error.cause_id = f"lut:{path}"  # type: ignore[attr-defined]
    return error


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
    """The model for a knob value (an instance is used as is), loaded once per (name, device).

    name=None means the model shipped for `device`. If one is shipped but does not load, this
    raises (naming the file and the fix) instead of ranking with the analytical model: inside a
    compile the caller then leaves Inductor its own candidates, which is what the README promises.
    Without a shipped model the analytical model is the documented default.
    """
    if isinstance(name, PerformanceModel):
        return name
    return _cached(_models, (name, device), None, lambda: _load_model(name, device))


def _load_model(name: str | None, device: DeviceSpec) -> PerformanceModel:
    from kernel_select.model import get_model, load_default, models_dir

    if name is not None:
        return get_model(name, device)
    shipped = models_dir() / device.key / "mlp.pt"
    if not shipped.exists():
        return load_default(device)
    try:
        return get_model("mlp", device)
    except Exception as exc:  # noqa: BLE001 -- any failure of a shipped file means the same fix
        error = ModelError(f"{shipped}: the model shipped for {device.key} does not load ({exc}); reinstall "
                           f"kernel_select, or retrain it with `kernel-select train`, or pick a model on "
                           f"purpose (model='analytical')")
        error.cause_id = f"model:{shipped}"  # type: ignore[attr-defined]
        raise error from None


def gate(device: DeviceSpec) -> Any:
    """The cuBLAS gate shipped for `device` (a CublasGate), or None when none is shipped."""
    from kernel_select.model.gate import load_default_gate

    return _cached(_gates, device, None, lambda: load_default_gate(device))


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


# -- one warning per cause ----------------------------------------------------------------------------

def cause_of(exc: BaseException) -> str:
    """What a failure is "the same" as: an explicit `cause_id` (a file, a model) when the raiser set
    one, else the exception type and the line that raised it. Never the message text, which often
    names the problem (50 GEMM shapes with one broken model are one cause, not 50)."""
    explicit = getattr(exc, "cause_id", None)
    if isinstance(explicit, str):
        return explicit
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return f"{type(exc).__name__}@{where}"


def warn_once(cause: str, logger: logging.Logger, message: str, *args: Any, exc_info: bool = False) -> bool:
    """Log `message` at WARNING unless `cause` was already reported; True if it was logged."""
    with _lock:
        if cause in _warned:
            return False
        _warned.add(cause)
    logger.warning(message, *args, exc_info=exc_info)
    return True


def warn_fallback(exc: BaseException, logger: logging.Logger, consequence: str) -> bool:
    """The one warning for a failure that an adapter absorbs: what went wrong and what happens
    instead. Our own errors carry a complete message; anything else is a bug worth a traceback."""
    from kernel_select.errors import KernelSelectError

    return warn_once(f"{logger.name}:{cause_of(exc)}", logger,
                     "kernel_select: %s: %s; %s (shown once per cause)", type(exc).__name__, exc, consequence,
                     exc_info=not isinstance(exc, KernelSelectError))
