"""The wheel carries its model and runs on its core dependencies alone: build it, install it
non-editable into a fresh virtual environment that holds only the distributions its core
`Requires-Dist` needs (no extra), and check that the installed `kernel-select` ranks with the
shipped MLP, loads the cuBLAS gate and finds the seed lookup table, with no repository on the path
and none of the extras' libraries loaded."""

from __future__ import annotations

import email.parser
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
#: What a build needs from the repository (a source checkout or an sdist has all of it).
BUILD_INPUTS = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE",
                "kernel_select", "models", "luts")
#: Libraries of the extras: a ranking must load none of them (the GBDT's trees too are walked in numpy).
NOT_CORE = ("pandas", "pyarrow", "scipy", "tqdm", "matplotlib", "transformers", "lightgbm")
TOPK = ["topk", "--m", "560", "--n", "1280", "--k", "3420", "--device", "h100", "--gemm-topk", "4"]
#: Ranks with the CLI's own entry point, then prints which NOT_CORE modules the ranking loaded
#: beyond those `import torch` loaded itself (torch.hub imports tqdm whenever it is installed).
RANK_AND_LIST_MODULES = f"""
import json, sys
import torch
NOT_CORE = {NOT_CORE!r}
before = {{name for name in NOT_CORE if name in sys.modules}}
from kernel_select.cli import main
assert main({TOPK!r}) == 0
print(json.dumps(sorted({{name for name in NOT_CORE if name in sys.modules}} - before)))
"""


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _clean_env() -> dict[str, str]:
    # Nothing may point back at the repository or its models: the wheel must stand alone.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KERNEL_SELECT_MODELS_DIR")}


def _wanted(requirement: Requirement, extras: Iterable[str] = ()) -> bool:
    """Whether a Requires-Dist line applies here, with only `extras` requested."""
    marker = requirement.marker
    return marker is None or any(marker.evaluate({"extra": extra}) for extra in ("", *extras))


def core_requirements(wheel: Path) -> list[Requirement]:
    """The wheel's Requires-Dist lines that a plain `pip install` (no extra) installs."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = (name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        message = email.parser.Parser().parsestr(archive.read(metadata).decode())
    return [r for r in map(Requirement, message.get_all("Requires-Dist") or ()) if _wanted(r)]


def installed_closure(requirements: Iterable[Requirement]) -> list[importlib.metadata.Distribution]:
    """The distributions of this interpreter that `requirements` pull in, transitively."""
    found: dict[str, importlib.metadata.Distribution] = {}
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        if canonicalize_name(requirement.name) in found:
            continue
        try:
            dist = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            pytest.fail(f"{requirement.name}: a core dependency of the wheel is not installed here; "
                        "run `make install`")
        found[canonicalize_name(requirement.name)] = dist
        todo += [r for r in map(Requirement, dist.requires or ()) if _wanted(r, requirement.extras)]
    return list(found.values())


def link_distribution(dist: importlib.metadata.Distribution, site: Path) -> None:
    """Make `dist` importable from `site` by linking its top-level files and folders (those of its
    RECORD), so that the environment holds it and nothing else of this interpreter."""
    root = Path(dist.locate_file(""))
    tops = {Path(f).parts[0] for f in dist.files or ()} - {"..", "__pycache__"}
    for top in sorted(tops):
        if (root / top).exists() and not (site / top).exists():
            (site / top).symlink_to(root / top)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the build inputs (no _data/ or caches of this checkout)."""
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
    (built,) = (root / "dist").glob("kernel_select-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    """bin/ of a fresh venv holding the wheel and its core dependencies, nothing else.

    The dependencies are this interpreter's installed copies (torch included), linked in rather than
    downloaded, so the test takes seconds; pip installs only the wheel."""
    env_dir = tmp_path_factory.mktemp("core") / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    env_python = env_dir / "bin" / "python"
    site = Path(_run([str(env_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     cwd=env_dir).strip())
    for dist in installed_closure(core_requirements(wheel)):
        link_distribution(dist, site)
    _run([sys.executable, "-m", "pip", "--python", str(env_python), "install", "--no-deps", "--no-index",
          "--quiet", str(wheel)], cwd=env_dir)
    return env_dir / "bin"


@pytest.mark.slow
def test_the_core_environment_holds_none_of_the_extras(installed, tmp_path):
    # Guards the fixture: a ranking below that works here works on a plain `pip install kernel_select`.
    script = f"import importlib.util; print([n for n in {NOT_CORE!r} if importlib.util.find_spec(n)])"
    assert _run([str(installed / "python"), "-c", script], cwd=tmp_path, env=_clean_env()).strip() == "[]"


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
    assert (models / "h200" / "cublas_gate_bmm.pt").is_file()  # the gate's network for batched GEMMs
    assert lut.is_file() and (package.parent / "py.typed").is_file()


@pytest.mark.slow
def test_installed_topk_ranks_with_the_mlp_and_the_gate(installed, tmp_path):
    out = _run([str(installed / "kernel-select"), *TOPK], cwd=tmp_path, env=_clean_env())
    assert "ranked by: mlp model for h100" in out
    assert "cuBLAS decision (gate): predicted cuBLAS / best Triton time" in out


@pytest.mark.slow
def test_installed_h200_gate_gives_a_batched_gemm_one_choice(installed, tmp_path):
    out = _run([str(installed / "kernel-select"), "topk", "--m", "128", "--n", "256", "--k", "512", "--batch",
                "48", "--device", "h200", "--gemm-topk", "1"], cwd=tmp_path, env=_clean_env())
    assert "cuBLAS decision (gate), one choice:" in out and "nothing benchmarked" in out


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
    # The installed demo ranks exactly as the repository's (the paths of the LUT and model aside).
    reference = _run([sys.executable, "-m", "kernel_select.cli", "demo"], cwd=REPO,
                     env={**_clean_env(), "PYTHONPATH": str(REPO)})
    assert _without_paths(out) == _without_paths(reference)
    assert "model: h100 (shipped, " in out


def _without_paths(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(("lookup table:", "model: "))]


@pytest.mark.slow
def test_a_ranking_in_the_core_install_loads_no_extra(installed, tmp_path):
    out = _run([str(installed / "python"), "-c", RANK_AND_LIST_MODULES], cwd=tmp_path, env=_clean_env())
    assert "ranked by: mlp model for h100" in out
    assert json.loads(out.splitlines()[-1]) == []


def test_a_ranking_loads_no_extra_even_where_the_extras_are_installed(tmp_path):
    # Here (the dev install) every extra is importable, so an import of one that the core install
    # survives only by catching ImportError shows up too.
    out = _run([sys.executable, "-c", RANK_AND_LIST_MODULES], cwd=tmp_path,
               env={**_clean_env(), "PYTHONPATH": str(REPO)})
    assert "ranked by: mlp model for h100" in out
    assert json.loads(out.splitlines()[-1]) == []


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


def test_the_core_dependencies_are_what_runs_inside_torch_compile():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {canonicalize_name(Requirement(dep).name) for dep in project["dependencies"]}
    assert core == {"torch", "pydantic", "numpy"}
    extras = {name: [Requirement(dep) for dep in deps]
              for name, deps in project["optional-dependencies"].items()}
    named = {name: {canonicalize_name(r.name) for r in reqs} for name, reqs in extras.items()}
    assert {"pandas", "pyarrow", "scipy", "tqdm"} <= named["offline"]
    assert {"transformers", "kernel-select"} <= named["models"]  # compare-models runs on offline too
    (offline,) = (r for r in extras["models"] if canonicalize_name(r.name) == "kernel-select")
    assert offline.extras == {"offline"} and "matplotlib" in named["offline"]
    assert named["baselines"] == {"nvidia-matmul-heuristics"}
    # Fitting the GBDT takes LightGBM, on the offline extra; its inference is numpy (the core).
    assert named["train"] == {"lightgbm", "kernel-select"}
    (offline,) = (r for r in extras["train"] if canonicalize_name(r.name) == "kernel-select")
    assert offline.extras == {"offline"}
    # `make test` covers everything: dev pulls in the offline, models and train extras.
    (itself,) = (r for r in extras["dev"] if canonicalize_name(r.name) == "kernel-select")
    assert itself.extras == {"offline", "models", "train"}
    assert [name for name, names in named.items() if "lightgbm" in names] == ["train"]
