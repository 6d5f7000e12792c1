"""Where the files shipped with kernel_select live: trained models and lookup tables.

In the repository they are the top-level `models/` and `luts/` folders. A built wheel carries
copies inside the package as `kernel_select/_data/models` and `kernel_select/_data/luts` (the
build step in setup.py puts them there), found with `importlib.resources`, so a non-editable
install ranks with the same model as a checkout.

Models trained on the user's own GPU (`kernel-select calibrate`, `kernel-select train --out`) live in
the user's model directory: `KERNEL_SELECT_MODELS_DIR`, else `$XDG_CACHE_HOME/kernel_select/models`
(~/.cache/kernel_select/models). It is searched before the shipped models (`model_roots`).
"""

from __future__ import annotations

import logging
import os
from importlib import resources
from pathlib import Path

from kernel_select import warn

log = logging.getLogger(__name__)

#: Environment variable naming a folder of models/<device key>/ to use instead of the shipped ones.
MODELS_DIR_ENV = "KERNEL_SELECT_MODELS_DIR"

#: Environment variable hiding the shipped models of some devices from the search ("h100,h200", or
#: "all"): a GPU that has a shipped model then looks like a new one, to measure `kernel-select
#: calibrate` where the shipped model is the reference (results/calibrate.sh). The user's model
#: directory is never hidden.
HIDE_SHIPPED_ENV = "KERNEL_SELECT_HIDE_SHIPPED"

#: The folders shipped next to the code, by name.
SHIPPED_FOLDERS = ("models", "luts")

_REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def shipped_dir(name: str) -> Path:
    """The shipped folder `name` ("models" or "luts"): the installed package's copy when there is
    one, else the repository's (a checkout or an editable install)."""
    if name not in SHIPPED_FOLDERS:
        raise ValueError(f"shipped_dir: expected one of {SHIPPED_FOLDERS}, got {name!r}")
    packaged = resources.files("kernel_select") / "_data" / name
    if packaged.is_dir():
        # A regular (non-zipped) install: the traversable is a real folder on disk.
        return Path(str(packaged))
    return _REPOSITORY_ROOT / name


def user_models_dir() -> Path:
    """The user's model directory: KERNEL_SELECT_MODELS_DIR, else the per-user cache directory. It
    may not exist yet (calibrate creates it)."""
    override = os.environ.get(MODELS_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "kernel_select" / "models"


def model_roots() -> list[Path]:
    """The folders of models/<device key>/ checkpoints, in the order they are searched: the user's
    model directory (where it is a folder), then the shipped models. A KERNEL_SELECT_MODELS_DIR that
    is not a folder is reported once and skipped."""
    user = user_models_dir()
    roots = []
    if user.is_dir():
        roots.append(user)
    elif os.environ.get(MODELS_DIR_ENV, "").strip():
        warn.warn_once(("models dir", str(user)), log, "kernel_select: %s=%s is not a folder; using the "
                       "shipped models", MODELS_DIR_ENV, user)
    shipped = shipped_dir("models")
    if shipped not in roots:
        roots.append(shipped)
    return roots


def shipped_hidden(device_key: str) -> bool:
    """Whether KERNEL_SELECT_HIDE_SHIPPED hides the shipped models of `device_key`."""
    hidden = {word.strip().lower() for word in os.environ.get(HIDE_SHIPPED_ENV, "").split(",")}
    return "all" in hidden or device_key in hidden


def shipped_lut(file_name: str) -> Path:
    """A lookup table shipped in luts/, e.g. `shipped_lut("h100_seed.json")`."""
    return shipped_dir("luts") / file_name
