"""The pure parts of `kernel-select compare`: shapes files, methods, summary math, the JSON schema,
plotting, and the driver's bookkeeping with a fake worker (the real worker needs a GPU)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kernel_select import cli
from kernel_select.offline import compare
from kernel_select.offline.compare import driver as compare_driver
from kernel_select.offline.compare import results as compare_results
from kernel_select.device import get_device
from kernel_select.errors import DatasetError, OptionError, ProblemError
from kernel_select.problem import Problem

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE = FIXTURES / "compare_h100.json"
#: A version-1 file as an H100 run wrote it (before side-by-side eager timing and the cuBLAS gate).
FIXTURE_V1 = FIXTURES / "compare_h100_v1.json"


# -- shapes files -----------------------------------------------------------------------------------

def test_default_suite_has_the_seed_backward_and_llama_shapes():
    cases = compare.load_cases()
    problems = {c.problem for c in cases}
    assert len(cases) == 34 and len({c.label for c in cases}) == 34
    for m in (560, 1024, 2048):
        assert {Problem(m, 1280, 3420), Problem(m, 3420, 1280), Problem(1280, 3420, m)} <= problems
    assert Problem(32, 28672, 32) in problems
    for k, n in ((4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096)):
        assert {Problem(m, n, k) for m in (1, 16, 128, 512, 2048, 8192)} <= problems
    assert {c.problem.dtype for c in cases} == {"bfloat16"}


def test_json_shapes_as_objects_lists_or_wrapped(tmp_path: Path):
    path = tmp_path / "shapes.json"
    entries = [[64, 128, 256], [8, 16, 32, "fp16"], {"m": 1, "n": 2, "k": 3, "label": "tiny"}]
    path.write_text(json.dumps(entries))
    cases = compare.load_cases(path)
    assert [c.problem for c in cases] == [Problem(64, 128, 256), Problem(8, 16, 32, "float16"),
                                          Problem(1, 2, 3)]
    assert cases[0].label == "64x128x256-bfloat16" and cases[2].label == "tiny"
    path.write_text(json.dumps({"problems": [{"m": 5, "n": 6, "k": 7}]}))
    assert compare.load_cases(path)[0].problem == Problem(5, 6, 7)


def test_csv_shapes_with_and_without_header(tmp_path: Path):
    path = tmp_path / "shapes.csv"
    path.write_text("# comment\nm,n,k,dtype,label\n560,1280,3420,bf16,seed\n\n32,64,128,,\n")
    cases = compare.load_cases(path)
    assert [c.problem for c in cases] == [Problem(560, 1280, 3420), Problem(32, 64, 128)]
    assert cases[0].label == "seed"
    path.write_text("560,1280,3420\n16,4096,4096,float16\n")
    assert [c.problem for c in compare.load_cases(path)] == [Problem(560, 1280, 3420),
                                                             Problem(16, 4096, 4096, "float16")]


@pytest.mark.parametrize("name,text,message", [
    ("a.json", "[[1, 2]]", "entry 0"),
    ("a.json", '[{"m": 1, "n": 2, "k": 3, "dtyp": "bf16"}]', "unknown field"),
    ("a.json", '[{"m": 1, "n": 2, "k": 3, "dtype": "int4"}]', "entry 0: dtype"),
    ("a.json", '[{"m": 0, "n": 2, "k": 3}]', "entry 0: m"),
    ("a.json", "{not json", "line 1"),
    ("a.json", "[]", "no problems"),
    ("a.csv", "m,n\n1,2\n", "lacks column"),
    ("a.csv", "1,2,x\n", "line 1: k"),
])
def test_malformed_shapes_name_file_and_entry(tmp_path: Path, name: str, text: str, message: str):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ProblemError, match=message) as info:
        compare.load_cases(path)
    assert str(path) in str(info.value)


def test_topks_and_methods():
    assert compare.parse_topks("1, 2,4,8,4") == [1, 2, 4, 8]
    assert compare.parse_topks("default") == ["DEFAULT"]
    for bad in ("0", "SAME", "", "a,b"):
        with pytest.raises(OptionError):
            compare.parse_topks(bad)
    names = [m.name for m in compare.methods_for([1, 4], exhaustive=True)]
    assert names == ["eager", "stock", "stock-exhaustive", "topk-1", "topk-4"]
    assert compare.methods_for([2])[2].topk == 2


def test_input_copies_stream_twice_the_l2_between_reuses():
    l2 = get_device("h100").l2_bytes
    assert compare.input_copies(l2, l2) == 2
    assert compare.input_copies(2 * l2, l2) == 2  # never fewer than two: consecutive calls differ
    small = 3_700_000  # 32x28672x32 bf16 reads ~3.7 MB per call
    copies = compare.input_copies(small, l2)
    assert copies * small >= 2 * l2 and (copies - 1) * small < 2 * l2
    assert compare.input_copies(1, l2) == compare.MAX_INPUT_COPIES
    with pytest.raises(ValueError):
        compare.input_copies(0, l2)


# -- summary math -----------------------------------------------------------------------------------

def result(ms: float | None, tuning: float = 0.0, error: str | None = None,
           eager_ms: float | None = None) -> dict:
    return {"tuning_s": tuning, "kernel_ms": ms, "eager_ms": eager_ms, "speedup": None, "choice": "aten mm",
            "n_triton": 0, "n_choices": 1, "timing": "cuda_graph", "max_rel_error": 0.001, "error": error}


def results_of(rows: list[dict[str, dict]]) -> dict:
    methods = list(rows[0])
    return {"schema_version": compare.SCHEMA_VERSION, "kind": compare.RESULTS_KIND, "environment": {},
            "settings": {},
            "methods": methods,
            "problems": [{"label": f"p{i}", "m": 1, "n": 1, "k": 1, "dtype": "bfloat16", "results": r}
                         for i, r in enumerate(rows)]}


def test_summary_ratios_geomeans_and_slower_than_eager():
    results = results_of([
        {"eager": result(1.0), "stock": result(0.5, 10.0), "topk-2": result(1.03, 2.0)},
        {"eager": result(2.0), "stock": result(2.0, 30.0), "topk-2": result(1.0, 3.0)},
    ])
    summary = compare.summarize(results)
    stock, topk = summary.rows
    assert summary.problems_used == 2 and summary.problems_excluded == []
    assert stock.method == "stock" and stock.kernel_ratio_vs_stock == pytest.approx(1.0)
    assert stock.speedup_vs_eager == pytest.approx(math.sqrt(2 * 1))
    assert topk.kernel_ratio_vs_stock == pytest.approx(math.sqrt((1.03 / 0.5) * (1.0 / 2.0)))
    assert topk.tuning_ratio_vs_stock == pytest.approx(5.0 / 40.0)
    assert topk.total_tuning_s == pytest.approx(5.0)
    assert topk.speedup_vs_eager == pytest.approx(math.sqrt((1 / 1.03) * 2.0))
    assert topk.slower_than_eager == 1 and stock.slower_than_eager == 0  # 1.03 > 1.02 x eager
    # Two problems, kernel ratios 2.06 and 0.5: the interval spans them; stock against itself is 1.
    assert 0.5 <= topk.kernel_ratio_low < topk.kernel_ratio_vs_stock < topk.kernel_ratio_high <= 2.06
    assert (stock.kernel_ratio_low, stock.kernel_ratio_high) == pytest.approx((1.0, 1.0))


def test_the_kernel_ratio_comes_with_a_paired_interval_in_the_table_and_the_json():
    # Problem sizes differ 100-fold; topk-4's kernel is 0.9x stock's on two problems, 1.0x on the third.
    results = results_of([
        {"eager": result(ms), "stock": result(ms, 10.0), "topk-4": result(ms * ratio, 1.0)}
        for ms, ratio in ((0.01, 0.9), (0.1, 0.9), (1.0, 1.0))
    ])
    summary = compare.summarize(results)
    topk = summary.rows[1]
    assert topk.kernel_ratio_vs_stock == pytest.approx((0.9 * 0.9 * 1.0) ** (1 / 3))
    assert 0.9 <= topk.kernel_ratio_low < topk.kernel_ratio_vs_stock < topk.kernel_ratio_high <= 1.0
    table = compare.format_summary(summary)
    assert "95% interval" in table.splitlines()[1]
    assert f"[{topk.kernel_ratio_low:.3f}, {topk.kernel_ratio_high:.3f}]" in table.splitlines()[-1]
    record = json.loads(json.dumps(compare.summary_record(summary)))
    assert record["interval"]["confidence"] == 0.95 and record["problems_used"] == 3
    by_method = {row["method"]: row for row in record["methods"]}
    assert by_method["topk-4"]["kernel_ratio_low"] == pytest.approx(topk.kernel_ratio_low)


def test_side_by_side_eager_times_take_precedence_over_the_eager_process():
    # The GPU ran 10% faster while stock's worker ran: its eager time, measured beside it, says so.
    results = results_of([
        {"eager": result(1.0), "stock": result(0.45, 10.0, eager_ms=0.9),
         "topk-2": result(0.5, 2.0, eager_ms=1.0)},
    ])
    stock, topk = compare.summarize(results).rows
    assert stock.speedup_vs_eager == pytest.approx(2.0) and topk.speedup_vs_eager == pytest.approx(2.0)
    assert topk.kernel_ratio_vs_stock == pytest.approx(1.0)  # not 0.5 / 0.45
    entry = results["problems"][0]
    compare_results.fill_speedups(entry)
    assert entry["results"]["stock"]["speedup"] == pytest.approx(2.0)
    assert entry["results"]["eager"]["speedup"] == pytest.approx(1.0)


def test_problems_with_a_failed_measurement_are_excluded_everywhere():
    results = results_of([
        {"eager": result(1.0), "stock": result(1.0, 10.0), "topk-1": result(1.0, 1.0)},
        {"eager": result(1.0), "stock": result(9.0, 99.0), "topk-1": result(None, error="timed out")},
        {"eager": result(1.0), "stock": result(0.1, 99.0), "topk-1": result(0.1, 1.0, error="wrong result")},
    ])
    summary = compare.summarize(results)
    assert summary.problems_used == 1 and summary.problems_excluded == ["p1", "p2"]
    assert summary.rows[0].total_tuning_s == pytest.approx(10.0)
    text = compare.format_summary(summary)
    assert "2 excluded" in text and "p1" in text and "topk-1" in text



def test_a_method_no_problem_ran_is_listed_not_counted_as_a_failure():
    # `compare --only eager,topk-1` measures no stock: every problem still counts, ratios to stock are n/a.
    results = results_of([
        {"eager": result(1.0), "topk-1": result(0.5, 1.0)},
        {"eager": result(2.0), "topk-1": result(2.1, 2.0)},
    ])
    results["methods"] = ["eager", "stock", "topk-1"]
    summary = compare.summarize(results)
    assert summary.problems_used == 2 and summary.methods_not_run == ["stock"]
    (topk,) = summary.rows
    assert math.isnan(topk.kernel_ratio_vs_stock) and math.isnan(topk.tuning_ratio_vs_stock)
    assert math.isnan(topk.kernel_ratio_low) and math.isnan(topk.kernel_ratio_high)
    assert topk.speedup_vs_eager == pytest.approx(math.sqrt(2.0 * 2.0 / 2.1)) and topk.slower_than_eager == 1
    text = compare.format_summary(summary)
    assert "not run: stock" in text and "nan" not in text
    (row,) = compare.summary_record(summary)["methods"]  # strict JSON: no NaN
    assert row["kernel_ratio_vs_stock"] is None and row["kernel_ratio_low"] is None


def test_methods_with_eager_times_beside_them_need_no_eager_run():
    results = results_of([{"topk-1": result(0.5, 1.0, eager_ms=1.0)}, {"topk-1": result(1.0, 1.0)}])
    results["methods"] = ["eager", "topk-1"]
    summary = compare.summarize(results)
    assert summary.problems_used == 1 and summary.problems_excluded == ["p1"]  # p1: no eager time at all
    assert summary.methods_not_run == ["eager"] and summary.rows[0].speedup_vs_eager == pytest.approx(2.0)

# -- schema ---------------------------------------------------------------------------------------

def test_fixture_validates_and_round_trips(tmp_path: Path):
    results = compare.load_results(FIXTURE)
    copy = tmp_path / "copy.json"
    compare.write_results(results, copy)
    assert compare.load_results(copy) == results


@pytest.mark.parametrize("mutate,message", [
    (lambda r: r.update(kind="other"), "not a version-2"),
    (lambda r: r.pop("methods"), "missing 'methods'"),
    (lambda r: r["problems"][0].pop("k"), "missing 'k'"),
    (lambda r: r["problems"][0]["results"]["stock"].pop("choice"), "stock: missing choice"),
    (lambda r: r["problems"][0]["results"]["stock"].update(kernel_ms=-1.0), "stock.kernel_ms"),
    (lambda r: r["problems"][0]["results"].update(mystery=r["problems"][0]["results"]["stock"]),
     "unknown method"),
    # what --resume reads before measuring: a wrong type is named, not an AttributeError
    (lambda r: r.update(settings=["topk"]), "'settings' must be an object, got list"),
    (lambda r: r["settings"].update(topk=4), "settings.topk must be a list, got int"),
    (lambda r: r["problems"][0].update(label=7), r"problems\[0\].label: expected a string, got int"),
])
def test_schema_violations_are_reported(tmp_path: Path, mutate, message: str):  # noqa: ANN001
    results = json.loads(FIXTURE.read_text())
    mutate(results)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(results))
    with pytest.raises(DatasetError, match=message) as info:
        compare.load_results(path)
    assert str(path) in str(info.value)


def test_a_version_1_file_is_migrated_not_rejected(tmp_path: Path):
    original = json.loads(FIXTURE_V1.read_text())
    assert original["schema_version"] == 1
    results = compare.load_results(FIXTURE_V1)
    assert results["schema_version"] == compare.SCHEMA_VERSION and results["migrated_from"] == 1
    assert results["settings"]["nogate_topk"] == [] and results["settings"]["cublas_margin"] is None
    assert len(results["problems"]) == len(original["problems"]) > 0
    for before, after in zip(original["problems"], results["problems"]):
        assert after["results"].keys() == before["results"].keys() and after["results"]
        for method, result in after["results"].items():
            assert result["eager_ms"] is None  # v1 timed eager only in its own process
            assert result["speedup"] == before["results"][method]["speedup"]
    # With no side-by-side eager time the summary falls back to the eager process: the speedups
    # it reports are the ones version 1 recorded.
    summary = compare.summarize(results)
    used = [p for p in results["problems"] if p["label"] not in summary.problems_excluded]
    stock = next(row for row in summary.rows if row.method == "stock")
    recorded = [p["results"]["stock"]["speedup"] for p in used]
    assert stock.speedup_vs_eager == pytest.approx(math.exp(sum(map(math.log, recorded)) / len(recorded)))
    # Written back, it is a version-2 file that loads unchanged.
    copy = tmp_path / "migrated.json"
    compare.write_results(results, copy)
    assert json.loads(copy.read_text())["schema_version"] == compare.SCHEMA_VERSION
    assert compare.load_results(copy) == results


def test_a_file_from_a_newer_version_names_the_upgrade(tmp_path: Path):
    results = json.loads(FIXTURE.read_text())
    results["schema_version"] = compare.SCHEMA_VERSION + 1
    path = tmp_path / "future.json"
    path.write_text(json.dumps(results))
    with pytest.raises(DatasetError, match="newer kernel_select"):
        compare.load_results(path)


def test_worker_output_is_sanitized_to_strict_json():
    raw = {"tuning_s": 1.5, "kernel_ms": float("nan"), "max_rel_error": float("inf"), "choice": "aten mm",
           "unexpected": 1}
    cleaned = compare_results.method_result(raw)
    assert set(cleaned) == set(compare.METHOD_FIELDS)
    assert cleaned["kernel_ms"] is None and cleaned["max_rel_error"] is None and cleaned["tuning_s"] == 1.5
    json.dumps(cleaned, allow_nan=False)


# -- plot, driver, CLI --------------------------------------------------------------------------------

def test_plot_from_results_file(tmp_path: Path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "tradeoff.png"
    figure = compare.plot_tradeoff(compare.load_results(FIXTURE), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    labels = [t.get_text() for t in figure.axes[0].get_legend().get_texts()]
    assert "stock max-autotune (EXHAUSTIVE)" in labels and "kernel_select top-k" in labels


def test_frames_for_the_notebook():
    results = compare.load_results(FIXTURE)
    summary = compare.summary_frame(results)
    assert list(summary.index) == [m for m in results["methods"] if m != "eager"]
    problems = compare.problem_frame(results)
    assert len(problems) == len(results["problems"]) and "topk-4 choice" in problems.columns


def test_driver_runs_every_method_per_problem_and_writes_valid_results(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch):
    import torch

    import kernel_select.device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(kernel_select.device, "detect", lambda index=0: get_device("h100"))
    specs = []

    def fake_worker(batch: list[dict], log_path: Path, timeout_s: float) -> dict:
        out = {}
        for spec in batch:
            specs.append(spec)
            method = spec["method"]["name"]
            if method == "topk-2" and spec["problem"]["m"] == 64:
                continue  # the worker died before finishing this problem
            ms = {"eager": 2.0, "stock": 1.0}.get(method, 1.5)
            out[spec["label"]] = {"tuning_s": 0.0 if method == "eager" else 4.0, "kernel_ms": ms,
                                  "choice": "aten mm", "n_triton": 0, "n_choices": 1, "timing": "cuda_graph",
                                  "max_rel_error": 0.001}
        return out

    monkeypatch.setattr(compare_driver, "run_worker", fake_worker)
    cases = [compare.Case(Problem(64, 64, 64), "a"), compare.Case(Problem(128, 64, 32), "b")]
    results, json_path, png_path = compare.run_compare(cases, out_dir=tmp_path, topks=[1, 2], lut="lut.json",
                                                       progress=False)
    assert json_path == tmp_path / "compare_h100.json"
    assert compare.load_results(json_path) == results
    # One worker per method, each over every problem.
    assert [(s["method"]["name"], s["label"]) for s in specs] == [
        (m, label) for m in ("eager", "stock", "topk-1", "topk-2") for label in ("a", "b")]
    assert {s["lut"] for s in specs} == {"lut.json"} and specs[0]["l2_bytes"] == get_device("h100").l2_bytes
    first = results["problems"][0]["results"]
    assert first["stock"]["speedup"] == pytest.approx(2.0)
    assert first["topk-1"]["speedup"] == pytest.approx(2 / 1.5)
    assert first["topk-2"]["error"] and first["topk-2"]["speedup"] is None
    assert compare.summarize(results).problems_used == 1
    written = json.loads(json_path.read_text())["summary"]
    assert written == compare.summary_record(compare.summarize(results)) and written["problems_used"] == 1
    # --resume measures only what is missing: the failed (a, topk-2) pair; the summary is rewritten.
    compare.write_results({**results, "summary": {"stale": True}}, json_path)
    specs.clear()
    compare.run_compare(cases, out_dir=tmp_path, topks=[1, 2], lut="lut.json", progress=False, resume=True)
    assert [(s["method"]["name"], s["label"]) for s in specs] == [("topk-2", "a")]
    resumed = compare.load_results(json_path)
    assert resumed["summary"] == compare.summary_record(compare.summarize(resumed))
    # --only measures just the named methods, and names a typo.
    specs.clear()
    compare.run_compare(cases, out_dir=tmp_path, topks=[1, 2], nogate_topks=[1], progress=False, resume=True,
                        only=["topk-1-nogate"])
    assert ([(s["method"]["name"], s["label"]) for s in specs]
            == [("topk-1-nogate", "a"), ("topk-1-nogate", "b")])
    assert specs[0]["method"]["cublas_margin"] == "off"
    with pytest.raises(OptionError, match="stok"):
        compare.run_compare(cases, out_dir=tmp_path, topks=[1], progress=False, resume=True, only=["stok"])
    # --gemm-only: every compiled method with GEMM-only options, never resumed into other results.
    with pytest.raises(OptionError, match="without --gemm-only"):
        compare.run_compare(cases, out_dir=tmp_path, topks=[1], progress=False, resume=True, gemm_only=True)
    specs.clear()
    gemm_results, _, _ = compare.run_compare(cases, out_dir=tmp_path / "gemm", topks=[1], progress=False,
                                             gemm_only=True)
    assert {(s["method"]["name"], s["method"]["gemm_only"]) for s in specs} == {
        ("eager", False), ("stock", True), ("topk-1", True)}
    assert gemm_results["settings"]["gemm_only"] is True
    if png_path is not None:
        assert png_path.exists()


def test_cli_compare_without_a_gpu_is_a_one_line_error(capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as info:
        cli.main(["compare", "--gemm-topk", "1,2"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a CUDA GPU" in err
