"""notebooks/models.ipynb runs top to bottom against a compare-models JSON (a small synthetic one
built with the package's own functions), and the model_report functions it shows: the per-model
table, the failed runs and the deduplicated GEMM list."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from kernel_select.errors import OptionError
from kernel_select.offline.e2e import model_frames, model_report, model_results

for _module in ("nbformat", "nbclient", "matplotlib", "pandas"):
    pytest.importorskip(_module)

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "models.ipynb"
LAYER = {"op": "addmm", "shapes": [[64, 96], [64, 32], [32, 96]]}
HEAD = {"op": "mm", "shapes": [[64, 32], [32, 500]]}
CRASH = "AcceleratorError: CUDA error: device-side assert triggered\nSearch for `cudaErrorAssert' ..."


def _gemms(layer_choices: dict[str, int], head_choice: str) -> list[dict[str, Any]]:
    """12 identical layers (their winners as {choice: how many}) and one head GEMM."""
    layers = [{**LAYER, "choice": choice, "n_triton": 4, "n_choices": 5}
              for choice, n in layer_choices.items() for _ in range(n)]
    return layers + [{**HEAD, "choice": head_choice, "n_triton": 4, "n_choices": 5}]


def _run(compile_s: float, step_ms: float, eager_ms: float, gemms: list | None = None) -> dict[str, Any]:
    return {"compile_s": compile_s, "step_ms": step_ms, "eager_step_ms": eager_ms, "sizes": {"batch": 2},
            "gemms": gemms or []}


def _results(methods: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """A results file as compare-models writes it: {model: {method: [raw runs]}}."""
    names = list(dict.fromkeys(m for per_method in methods.values() for m in per_method))
    results = model_results.new_results("Fake GPU", "fake", names, {"samples": 3, "repeat": 1})
    for name, per_method in methods.items():
        arch, phase = name.split("/")
        aggregated = {method: model_report.aggregate(runs) for method, runs in per_method.items()}
        results["models"].append({"name": name, "architecture": arch, "phase": phase, "sizes": {"batch": 2},
                                  "results": aggregated})
    return results


def _synthetic() -> dict[str, Any]:
    return _results({
        "tiny-gpt/prefill": {
            "default": [_run(2.0, 8.0, 10.0)],
            "stock": [_run(100.0, 5.0, 10.0, _gemms({"triton 64x64x32 s3 w4": 12}, "aten mm"))],
            "topk-4": [_run(20.0, 3.0, 8.0,
                            _gemms({"triton 32x64x64 s4 w4": 11, "triton 64x64x32 s3 w4": 1}, "aten mm"))]},
        "tiny-gpt/decode": {
            "default": [_run(1.0, 0.9, 1.0)],
            "stock": [{"error": CRASH}],
            "topk-4": [_run(10.0, 0.5, 1.0,
                            _gemms({"triton 16x64x64 s4 w4": 12}, "triton 16x32x64 s5 w2"))]}})


def test_table_values_by_hand_for_two_methods() -> None:
    results = _results({"m/prefill": {"stock": [_run(100.0, 5.0, 10.0)], "topk-4": [_run(20.0, 3.0, 8.0)]},
                        "m/decode": {"stock": [{"error": CRASH}], "topk-4": [_run(10.0, 0.5, 1.0)]}})
    table = model_frames.table(results)
    assert list(table.index) == ["m/prefill", "m/decode"]
    assert list(table.columns.get_level_values("method").unique()) == ["stock", "topk-4"]
    topk = table.loc["m/prefill", "topk-4"]
    assert topk["compile_s"] == 20.0 and topk["step_ms"] == 3.0
    # Step over step, 3 / 5: not (3 / 8) / (5 / 10), since each process's eager baseline is biased.
    assert topk["step/stock"] == pytest.approx(0.6)
    assert topk["vs eager"] == pytest.approx(8.0 / 3.0)
    assert math.isnan(topk["step/default"])  # no mode="default" in this comparison
    assert table.loc["m/prefill", ("stock", "step/stock")] == 1.0
    assert table.loc["m/decode", ("topk-4", "vs eager")] == pytest.approx(2.0)
    assert table.loc["m/decode", "stock"].isna().all()  # it failed there
    assert math.isnan(table.loc["m/decode", ("topk-4", "step/stock")])


def test_table_ratios_match_the_summary() -> None:
    results = _synthetic()
    rows = {row.method: row for row in model_report.summarize(results).rows}
    table = model_frames.table(results).loc[["tiny-gpt/prefill"]]  # the one model every method measured
    assert table[("topk-4", "step/default")].iloc[0] == pytest.approx(rows["topk-4"].step_vs_default)
    assert table[("stock", "vs eager")].iloc[0] == pytest.approx(rows["stock"].speedup_vs_eager)


def test_a_method_measured_on_some_models_is_summarized_over_those() -> None:
    """A method added later on one model (or a run that failed) leaves every other row intact."""
    results = _results({
        "a/prefill": {"default": [_run(2.0, 8.0, 10.0)], "stock": [_run(100.0, 5.0, 10.0)],
                      "topk-4": [_run(20.0, 4.0, 10.0)],
                      "new": [_run(10.0, 2.5, 10.0), _run(12.0, 3.0, 9.0)]},
        "b/prefill": {"default": [_run(1.0, 2.0, 4.0)], "stock": [_run(50.0, 1.0, 4.0)],
                      "topk-4": [_run(10.0, 2.0, 4.0)], "new": [{"error": CRASH}]}})
    summary = model_report.summarize(results)
    rows = {row.method: row for row in summary.rows}
    assert rows["topk-4"].model_names == ("a/prefill", "b/prefill")
    assert rows["topk-4"].step_vs_stock == pytest.approx(math.sqrt(0.8 * 2.0))
    assert rows["new"].model_names == ("a/prefill",) and rows["new"].compile_s == 11.0  # median of two
    assert rows["new"].step_vs_stock == pytest.approx(2.75 / 5.0)
    assert rows["new"].max_step_spread == pytest.approx(0.5 / 2.75)  # step_ms, not step / eager
    assert summary.models_excluded == []
    del results["models"][1]["results"]["stock"]  # no reference there: no row can use the model
    assert model_report.summarize(results).models_excluded == ["b/prefill"]


def test_failures_give_each_failed_runs_first_line() -> None:
    results = _synthetic()
    assert model_report.failures(results) == [
        "tiny-gpt/decode  stock: AcceleratorError: CUDA error: device-side assert triggered"]
    results["models"][0]["results"]["topk-4"] = model_report.aggregate([])  # never run: no runs at all
    assert model_report.failures(results)[0] == "tiny-gpt/prefill  topk-4: not measured"


def test_gemm_frame_folds_identical_layers_and_shows_split_winners() -> None:
    frame = model_frames.gemm_frame(_synthetic(), "tiny-gpt/prefill")
    assert list(frame.columns) == ["op", "shapes", "count", "stock", "topk-4"]  # default tuned nothing
    layer, head = frame.to_dict("records")
    assert (layer["op"], layer["shapes"], layer["count"]) == ("addmm", str(LAYER["shapes"]), 12)
    assert layer["stock"] == "triton 64x64x32 s3 w4"
    assert layer["topk-4"] == "triton 32x64x64 s4 w4 ×11, triton 64x64x32 s3 w4 ×1"
    assert (head["count"], head["stock"], head["topk-4"]) == (1, "aten mm", "aten mm")
    decode = model_frames.gemm_frame(_synthetic(), "tiny-gpt/decode")
    assert list(decode.columns) == ["op", "shapes", "count", "topk-4"]  # stock failed there
    with pytest.raises(OptionError, match="no model 'vit/prefill'.*tiny-gpt/prefill"):
        model_frames.gemm_frame(_synthetic(), "vit/prefill")


def test_models_notebook_executes_and_renders_table_failures_and_gemms(tmp_path: Path) -> None:
    from tests.offline.notebook_runner import execute, html_of, text_of

    path = tmp_path / "models_fake.json"
    model_results.write_results(_synthetic(), path)
    outputs = execute(NOTEBOOK, "results/models_h100.json", f"RESULTS = {str(path)!r}")
    html = html_of(outputs)
    assert "tiny-gpt/prefill" in html and "step/default" in html and "100.0" in html  # the table
    assert "triton 32x64x64 s4 w4 ×11, triton 64x64x32 s3 w4 ×1" in html  # the GEMM list
    assert "triton 16x32x64 s5 w2" in html
    text = text_of(outputs)
    assert "tiny-gpt/decode  stock: AcceleratorError: CUDA error: device-side assert triggered" in text
    assert "cudaErrorAssert" not in text  # only the first line
    assert "1 models (1 excluded, stock or default failed or not run: tiny-gpt/decode)" in text
    assert "tiny-gpt/prefill: 13 GEMMs autotuned" in text
