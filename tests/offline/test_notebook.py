"""notebooks/tradeoff.ipynb runs top to bottom against a comparison JSON (a synthetic fixture here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.offline.notebook_runner import execute, html_of, text_of

for _module in ("nbformat", "nbclient", "matplotlib"):
    pytest.importorskip(_module)

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK = REPO / "notebooks" / "tradeoff.ipynb"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "compare_h100.json"


def test_tradeoff_notebook_executes_and_renders_plot_and_tables():
    outputs = execute(NOTEBOOK, "results/compare_h100.json", f"RESULTS = {str(FIXTURE)!r}")
    html = html_of(outputs)
    assert "kernel_ratio_vs_stock" in html and "topk-4" in html and "seed-fwd-560" in html
    text = text_of(outputs)
    assert "6 problems on NVIDIA H100 80GB HBM3" in text and "skinny-32x28672x32" in text
    # the GEMM-only section reads the committed run (34 problems, top-1 and top-4 against eager)
    assert "llama3-8b-kv-M512" in html and "slower_than_eager" in html and "total_tuning_s" in html
