"""Build step: ship the repository's top-level models/ and luts/ inside the package.

Everything else is declared in pyproject.toml. The trained models and lookup tables stay
top-level in the repository (they are data, not code); a build copies them into
kernel_select/_data/ so that a wheel, and a non-editable install from the sdist, rank with the
shipped model. kernel_select.resources finds them there with importlib.resources. Editable
installs skip the copy and read the repository's folders directly.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED_FOLDERS = ("models", "luts")
# Files in models/ that are reports about a model, not part of it.
LEFT_OUT = ("eval.json",)


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for name in SHIPPED_FOLDERS:
            source = ROOT / name
            if not source.is_dir():
                raise FileNotFoundError(f"{source}: the build ships this folder; run it from a full checkout")
            target = Path(self.build_lib) / "kernel_select" / "_data" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(source, target, ignore=shutil.ignore_patterns(*LEFT_OUT, "__pycache__"))


setup(cmdclass={"build_py": BuildPyWithData})
