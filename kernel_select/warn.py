"""One warning per cause, for everything that absorbs a failure and carries on (the Inductor handler,
the Triton pruner, lookup tables, model loading): 50 GEMM shapes with one broken model are one
warning, not 50. Causes are keys, never message texts (a message often names the problem)."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Hashable
from typing import Any

from kernel_select.errors import KernelSelectError

_lock = threading.Lock()
_warned: set[Hashable] = set()


def cause_of(exc: BaseException) -> str:
    """What a failure is "the same" as: an explicit `cause_id` (a file, a model) when the raiser set
    one, else the exception type and the line that raised it."""
    explicit = getattr(exc, "cause_id", None)
    if isinstance(explicit, str):
        return explicit
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "?"
    return f"{type(exc).__name__}@{where}"


def warn_once(cause: Hashable, logger: logging.Logger, message: str, *args: Any, exc_info: bool = False,
              level: int = logging.WARNING) -> bool:
    """Log `message` (at `level`) unless `cause` was already reported; True if it was logged."""
    with _lock:
        if cause in _warned:
            return False
        _warned.add(cause)
    logger.log(level, message, *args, exc_info=exc_info)
    return True


def warn_fallback(exc: BaseException, logger: logging.Logger, consequence: str) -> bool:
    """The one warning for a failure that an adapter absorbs: what went wrong and what happens instead.
    Our own errors carry a complete message; anything else is a bug worth a traceback."""
    return warn_once(f"{logger.name}:{cause_of(exc)}", logger,
                     "kernel_select: %s: %s; %s (shown once per cause)", type(exc).__name__, exc, consequence,
                     exc_info=not isinstance(exc, KernelSelectError))


def forget() -> None:
    """Forget every warning shown (tests, and long-lived sessions that want to start over)."""
    with _lock:
        _warned.clear()
