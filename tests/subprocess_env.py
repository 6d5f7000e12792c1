"""The environment for tests that run the package in a fresh Python process."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def package_env(**extra: str) -> dict[str, str]:
    """os.environ with the repository first on PYTHONPATH.

    The caller's PYTHONPATH stays after it: on some machines that is where dependencies live.
    """
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": pythonpath, **extra}
