"""notebooks/model_quality.ipynb runs top to bottom against an evaluation report (the shipped one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "model_quality.ipynb"
REPORT = REPO / "models" / "h100" / "eval.json"


def test_model_quality_notebook_renders_tables_and_plot_of_the_report():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    parameters = [c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(parameters) == 1 and "models/h100/eval.json" in parameters[0].source
    parameters[0].source = f"EVAL = {str(REPORT)!r}"

    nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()

    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    html = "".join(o.get("data", {}).get("text/html", "") for o in outputs)
    report = json.loads(REPORT.read_text())
    family = report["splits"]["family"]
    # the numbers shown are the report's: the shipped model's family top-1, a stratum and a worst problem
    assert f"{family['methods']['mlp']['topk']['1']:.3f}" in html
    assert "dtype=float32" in html and family["methods"]["mlp"]["worst"]["4"][0]["problem_id"] in html
    text = "".join(o.get("text", "") for o in outputs)
    assert f"family: {family['problems']} problems" in text
