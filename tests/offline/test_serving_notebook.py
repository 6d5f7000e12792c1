"""notebooks/serving.ipynb runs top to bottom against a serving-bench JSON (a small synthetic one here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.offline.notebook_runner import execute, html_of, text_of

for _module in ("nbformat", "nbclient", "matplotlib", "pandas"):
    pytest.importorskip(_module)

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "serving.ipynb"


def test_serving_notebook_executes_and_renders_plot_table_and_autotuned_gemms(tmp_path: Path):
    from kernel_select.offline.serving import serving_bench, serving_report

    lengths = {str(n): {"kernel_ms": 0.1 * (i + 1)} for i, n in enumerate(serving_bench.LENGTHS)}
    per_method = {"eager": {"compile_s": 0.0, "benchmarks": 0, "lengths": lengths},
                  "pinned_lut": {"compile_s": 3.5, "benchmarks": 7, "lengths": lengths,
                                 "autotuned": [{"op": "mm", "shapes": [[1280, "s1"], ["s1", 3420]],
                                                "choices": 7}]},
                  "max_autotune": {"error": "RuntimeError: out of memory"}}
    path = tmp_path / "serving.json"
    path.write_text(json.dumps(serving_report.assemble(per_method)))
    outputs = execute(NOTEBOOK, "results/serving_h100.json", f"RESULTS = {str(path)!r}")
    html = html_of(outputs)
    assert "pinned_lut" in html and "8192 / best" in html and "out of memory" in html
    text = text_of(outputs)
    assert "fastest measured method per length" in text
    assert "pinned_lut: mm [[1280, 's1'], ['s1', 3420]] (7 choices)" in text
