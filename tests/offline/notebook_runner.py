"""Run a repository notebook top to bottom with its `parameters` cell replaced (for the notebook tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def execute(notebook_path: Path, default_source: str, parameters: str, timeout: int = 180) -> list[Any]:
    """Execute the notebook with its one `parameters` cell (which must mention `default_source`)
    replaced by `parameters`; return every code cell's outputs, after checking none is an error.

    The kernel talks over IPC sockets in a folder of its own, not TCP ports: under pytest-xdist two
    notebooks starting at once could pick the same free port (ZMQError: Address already in use) and
    the kernel never answered."""
    import tempfile

    import jupyter_client
    import nbclient
    import nbformat

    notebook = nbformat.read(notebook_path, as_version=4)
    cells = [c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1 and default_source in cells[0].source
    cells[0].source = parameters
    with tempfile.TemporaryDirectory(prefix="ks-kernel-") as sockets:
        manager = jupyter_client.KernelManager(kernel_name="python3", transport="ipc",
                                               ip=str(Path(sockets) / "kernel"),
                                               connection_file=str(Path(sockets) / "kernel.json"))
        nbclient.NotebookClient(notebook, km=manager, timeout=timeout, kernel_name="python3",
                                resources={"metadata": {"path": str(notebook_path.parent)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    return outputs


def html_of(outputs: list[Any]) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs)


def text_of(outputs: list[Any]) -> str:
    return "".join(o.get("text", "") for o in outputs)
