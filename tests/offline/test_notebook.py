"""notebooks/tradeoff.ipynb runs top to bottom against a comparison JSON (a synthetic fixture here)."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "tradeoff.ipynb"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "compare_h100.json"


def test_tradeoff_notebook_executes_and_renders_plot_and_tables():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    parameters = [c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(parameters) == 1 and "results/compare_h100.json" in parameters[0].source
    parameters[0].source = f"RESULTS = {str(FIXTURE)!r}"

    nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()

    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "kernel_ratio_vs_stock" in html and "topk-4" in html and "seed-fwd-560" in html
    text = "".join(o.get("text", "") for o in outputs)
    assert "6 problems on NVIDIA H100 80GB HBM3" in text and "skinny-32x28672x32" in text
