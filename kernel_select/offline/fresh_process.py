"""The environment of a measurement worker: a Python process whose Inductor and Triton caches are
empty folders of its own, so every compile it makes pays (and measures) the full tuning cost, and
which imports this checkout of kernel_select whatever the caller's working directory."""

from __future__ import annotations

import os
from pathlib import Path

#: The folder that holds the `kernel_select` package.
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


def fresh_cache_env(scratch: str | Path) -> dict[str, str]:
    """os.environ plus empty cache folders under `scratch` and this package on PYTHONPATH."""
    scratch = Path(scratch)
    return {**os.environ,
            "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
            "TRITON_CACHE_DIR": str(scratch / "triton"),
            "PYTHONPATH": os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH")) if p)}
