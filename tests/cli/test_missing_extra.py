"""A command whose extra is not installed says which extra to install, in one line, exit 2.

The extras' libraries are installed here, so each test blocks one in a fresh interpreter (a
None entry in sys.modules makes its import fail as if it were absent) and runs the CLI there."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kernel_select.cli.main import EXTRA_OF_MODULE, missing_extra
from tests.cli.test_errors import assert_one_line_exit_2
from tests.subprocess_env import package_env

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "data" / "h100.parquet"


def run_cli_without(blocked: str, *argv: str) -> subprocess.CompletedProcess[str]:
    script = (f"import sys; sys.modules[{blocked!r}] = None; sys.argv[0] = 'kernel-select'; "
              f"from kernel_select.cli import main; sys.exit(main({list(argv)!r}))")
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, env=package_env(), capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("blocked, argv, extra", [
    ("pandas", ["eval", "--data", str(DATA)], "offline"),
    ("tqdm", ["shapes", "--out", "{dir}/s.json", "--active", "--pool", "{dir}/pool.json", "--rows", "9"],
     "offline"),
    ("scipy", ["eval", "--data", str(DATA)], "offline"),
])
def test_a_command_without_its_extra_names_it(tmp_path, blocked, argv, extra):
    result = run_cli_without(blocked, *(arg.format(dir=tmp_path) for arg in argv))
    line = assert_one_line_exit_2(result)
    assert line == (f"kernel-select: error: {argv[0]!r} needs the {extra} extra: "
                    f"pip install 'kernel_select[{extra}]'")


def test_without_the_extras_ranking_still_works_and_help_lists_every_command():
    script = ("import sys\n"
              "for name in ('pandas', 'pyarrow', 'scipy', 'tqdm', 'matplotlib', 'transformers'):\n"
              "    sys.modules[name] = None\n"
              "from kernel_select.cli import build_parser, main\n"
              "print(build_parser().format_help())\n"
              "sys.exit(main(['topk', '--m', '64', '--n', '64', '--k', '64', '-k', '2']))")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=package_env(), capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for command in ("shapes", "bench", "eval", "compare-models"):
        assert f"\n    {command}" in result.stdout
    assert "ranked by: mlp model" in result.stdout


def test_only_a_missing_library_of_an_extra_is_blamed_on_the_extra(monkeypatch):
    assert missing_extra(ModuleNotFoundError("No module named 'some_lib'", name="some_lib")) is None
    # An installed library that lacks a submodule is a broken install or a bug: its traceback stays.
    assert missing_extra(ModuleNotFoundError("No module named 'numpy.nosuch'", name="numpy.nosuch")) is None
    assert missing_extra(ModuleNotFoundError("No module named 'pandas.nosuch'", name="pandas.nosuch")) is None
    monkeypatch.setitem(sys.modules, "pandas", None)
    assert missing_extra(ModuleNotFoundError("No module named 'pandas'", name="pandas")) == "offline"
    assert missing_extra(ModuleNotFoundError("No module named 'pandas.io'", name="pandas.io")) == "offline"


def test_any_other_missing_module_keeps_its_traceback(tmp_path):
    result = run_cli_without("kernel_select.offline.data.dataset", "eval", "--data", str(DATA))
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr and "needs the" not in result.stderr


def test_the_table_matches_the_extras_of_pyproject():
    """Each module of the table comes from a distribution that its extra declares, and every
    distribution of an extra (but dev, which is the others plus test tools) has its modules there."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # Distributions each extra names itself (models' kernel_select[offline] is offline's).
    declared = {name: {canonicalize_name(Requirement(dep).name) for dep in deps} - {"kernel-select"}
                for name, deps in extras.items() if name != "dev"}
    provided_by = importlib.metadata.packages_distributions()  # module -> distributions installed here
    for module, extra in EXTRA_OF_MODULE.items():
        if module not in provided_by:
            continue  # not installed here (nvMatmulHeuristics off x86-64 Linux)
        assert {canonicalize_name(d) for d in provided_by[module]} & declared[extra], (module, extra)
    tabled = {canonicalize_name(d) for module in EXTRA_OF_MODULE for d in provided_by.get(module, ())}
    installed = {canonicalize_name(d) for dists in provided_by.values() for d in dists}
    for extra, dists in declared.items():
        untabled = (dists & installed) - tabled
        assert not untabled, f"{extra}: {untabled} have no module in EXTRA_OF_MODULE"
