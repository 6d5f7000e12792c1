"""notebooks/model_quality.ipynb runs top to bottom against an evaluation report (the shipped one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.offline.notebook_runner import execute, html_of, text_of

for _module in ("nbformat", "nbclient", "matplotlib"):
    pytest.importorskip(_module)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "model_quality.ipynb"
REPORT = REPO / "models" / "h100" / "eval.json"


def test_model_quality_notebook_renders_tables_and_plot_of_the_report():
    outputs = execute(NOTEBOOK, "models/h100/eval.json", f"EVAL = {str(REPORT)!r}", timeout=120)
    family = json.loads(REPORT.read_text())["splits"]["family"]
    # the numbers shown are the report's: the shipped model's family top-1, a stratum and a worst problem
    html = html_of(outputs)
    assert f"{family['methods']['mlp']['topk']['1']:.3f}" in html
    assert "dtype=float32" in html and family["methods"]["mlp"]["worst"]["4"][0]["problem_id"] in html
    assert f"family: {family['problems']} problems" in text_of(outputs)
