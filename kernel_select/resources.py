"""Where the files shipped with kernel_select live: trained models and lookup tables.

In the repository they are the top-level `models/` and `luts/` folders. A built wheel carries
copies inside the package as `kernel_select/_data/models` and `kernel_select/_data/luts` (the
build step in setup.py puts them there), found with `importlib.resources`, so a non-editable
install ranks with the same model as a checkout. `KERNEL_SELECT_MODELS_DIR` overrides the
models folder (e.g. a freshly trained model) in both cases.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

#: Environment variable naming a folder of models/<device key>/ to use instead of the shipped ones.
MODELS_DIR_ENV = "KERNEL_SELECT_MODELS_DIR"

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


def models_dir() -> Path:
    """Where trained models live: models/<device key>/, unless KERNEL_SELECT_MODELS_DIR overrides."""
    override = os.environ.get(MODELS_DIR_ENV)
    return Path(override) if override else shipped_dir("models")


def shipped_lut(file_name: str) -> Path:
    """A lookup table shipped in luts/, e.g. `shipped_lut("h100_seed.json")`."""
    return shipped_dir("luts") / file_name
