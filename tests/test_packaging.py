"""The wheel carries its model: build it, install it non-editable into a fresh virtual environment,
and check that the installed `kernel-select` ranks with the MLP, loads the cuBLAS gate and finds
the seed lookup table, with no repository on the path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: What a build needs from the repository (a source checkout or an sdist has all of it).
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE",
                "kernel_select", "models", "luts")


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _clean_env() -> dict[str, str]:
    # Nothing may point back at the repository or its models: the wheel must stand alone.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNEL_SELECT_MODELS_DIR")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """bin/ of a fresh venv with the built wheel installed (dependencies from this interpreter)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "src"
    source.mkdir()
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__", "_data"))
        else:
            shutil.copy2(path, source / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
          "-w", str(root / "dist"), str(source)], cwd=root)
    (wheel,) = (root / "dist").glob("kernel_select-*.whl")

    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    env_python = env_dir / "bin" / "python"
    site = Path(_run([str(env_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=root).strip())
    # torch, pydantic & co. come from this interpreter's site-packages (appended, so the wheel's
    # own copy of kernel_select comes first; .pth files there, such as an editable install's,
    # are not processed). Nothing is downloaded.
    outer = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "outer_site_packages.pth").write_text("\n".join(sorted(outer)) + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(env_python), "install", "--no-deps", "--no-index",
          "--quiet", str(wheel)], cwd=root)
    return env_dir / "bin"


@pytest.mark.slow
def test_the_installed_package_is_the_wheel_with_its_data(installed, tmp_path):
    script = ("import kernel_select, kernel_select.resources as r; print(kernel_select.__file__); "
              "print(r.shipped_dir('models')); print(r.shipped_lut('h100_seed.json'))")
    out = _run([str(installed / "python"), "-c", script], cwd=tmp_path, env=_clean_env())
    package, models, lut = (Path(line) for line in out.splitlines())
    venv_root = installed.parent
    for path in (package, models, lut):
        assert path.is_relative_to(venv_root), f"{path} is not inside the installed venv {venv_root}"
    assert (models / "h100" / "mlp.pt").is_file() and (models / "h100" / "cublas_gate.json").is_file()
    assert (models / "h200" / "mlp.pt").is_file() and (models / "h200" / "mlp.json").is_file()
    assert (models / "h200" / "aten.pt").is_file() and (models / "h200" / "aten.json").is_file()
    assert lut.is_file() and (package.parent / "py.typed").is_file()


@pytest.mark.slow
def test_installed_topk_ranks_with_the_mlp_and_the_gate(installed, tmp_path):
    out = _run([str(installed / "kernel-select"), "topk", "--m", "560", "--n", "1280", "--k", "3420",
                "--device", "h100", "--gemm-topk", "4"], cwd=tmp_path, env=_clean_env())
    assert "ranked by: mlp model for h100" in out
    assert "cuBLAS decision (gate): predicted cuBLAS / best Triton time" in out


@pytest.mark.slow
def test_installed_topk_on_an_h200_ranks_with_its_own_mlp(installed, tmp_path):
    out = _run([str(installed / "kernel-select"), "topk", "--m", "560", "--n", "1280", "--k", "3420",
                "--device", "h200", "--gemm-topk", "4"], cwd=tmp_path, env=_clean_env())
    assert "ranked by: mlp model for h200" in out and "measured on h100" not in out.split("ranked by:")[1]
    assert "cuBLAS decision (gate): predicted cuBLAS / best Triton time" in out  # the H100 gate, borrowed


@pytest.mark.slow
def test_the_installed_command_and_module_report_the_packages_version(installed, tmp_path):
    import kernel_select

    expected = f"kernel-select {kernel_select.__version__}"
    for command in ([str(installed / "kernel-select")], [str(installed / "python"), "-m", "kernel_select"]):
        assert _run([*command, "--version"], cwd=tmp_path, env=_clean_env()).strip() == expected


@pytest.mark.slow
def test_installed_demo_resolves_the_seed_lut(installed, tmp_path):
    out = _run([str(installed / "kernel-select"), "demo"], cwd=tmp_path, env=_clean_env())
    lut_line = next(line for line in out.splitlines() if line.startswith("lookup table:"))
    assert "no LUT" not in lut_line and lut_line.endswith("h100_seed.json")
    assert any(line.rstrip().endswith(" lut") for line in out.splitlines())
    # The installed demo ranks exactly as the repository's (the header's LUT path aside).
    reference = _run([sys.executable, "-m", "kernel_select.cli", "demo"], cwd=REPO,
                     env={**_clean_env(), "PYTHONPATH": str(REPO)})
    assert _without_lut_line(out) == _without_lut_line(reference)


def _without_lut_line(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith("lookup table:")]


def test_packaging_metadata_has_one_version_source_and_a_tested_torch_range():
    import kernel_select

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    assert "version" in project["dynamic"] and "version" not in project
    assert kernel_select.__version__.count(".") == 2
    version_source = pyproject["tool"]["setuptools"]["dynamic"]["version"]
    assert version_source == {"attr": "kernel_select._version.__version__"}
    assert any(dep.replace(" ", "") == "torch>=2.11,<2.14" for dep in project["dependencies"])
    assert project["license"] == "BSD-3-Clause" and (REPO / "LICENSE").is_file()
    assert (REPO / "kernel_select" / "py.typed").is_file()
