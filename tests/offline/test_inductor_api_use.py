"""The offline tools drive torch.compile through the public `kernel_select.inductor` API only.

compare and fidelity measure what a user gets; reaching into the compile path's internals would
measure something else, and would break whenever those internals move.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kernel_select.inductor as inductor

OFFLINE = Path(__file__).resolve().parents[2] / "kernel_select" / "offline"
PUBLIC = {"install", "uninstall", "enabled", "max_autotune_options", "gemm_autotune_options",
          "record_autotuning", "eager_parity_patches", "record", "bucketed", "lowered_gemms"}


def inductor_uses(source: str) -> tuple[list[str], list[str]]:
    """(imports of kernel_select.inductor's submodules or names, attributes read from the module)."""
    tree = ast.parse(source)
    aliases, bad_imports = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                if name.name == "kernel_select.inductor" and name.asname:
                    aliases.add(name.asname)
                elif name.name.startswith("kernel_select.inductor"):
                    bad_imports.append(name.name)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "kernel_select":
                aliases |= {n.asname or n.name for n in node.names if n.name == "inductor"}
            elif node.module.startswith("kernel_select.inductor"):
                bad_imports += [f"{node.module}.{n.name}" for n in node.names if n.name not in PUBLIC
                                or node.module != "kernel_select.inductor"]
    attributes = [node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                  and isinstance(node.value, ast.Name) and node.value.id in aliases]
    return bad_imports, attributes


@pytest.mark.parametrize("path", sorted(OFFLINE.rglob("*.py")), ids=lambda p: str(p.relative_to(OFFLINE)))
def test_offline_modules_use_only_the_public_inductor_api(path: Path):
    bad_imports, attributes = inductor_uses(path.read_text())
    assert bad_imports == []
    assert set(attributes) <= PUBLIC, sorted(set(attributes) - PUBLIC)


def test_the_public_names_exist_and_the_checker_catches_a_private_one():
    assert all(callable(getattr(inductor, name)) for name in PUBLIC)
    assert inductor_uses("from kernel_select import inductor\ninductor._warn_once(1)") == ([], ["_warn_once"])
    handler_uses = inductor_uses("from kernel_select.inductor.handler import x")[0]
    assert handler_uses == ["kernel_select.inductor.handler.x"]
    assert inductor_uses("import kernel_select.inductor as ks\nks.install()") == ([], ["install"])
