"""The serving measurement's pure parts on the CPU: default buckets, the warm-cache figures, the
decoder program's best, and the worker command line."""

from __future__ import annotations

import pytest

from kernel_select.buckets import buckets
from kernel_select.offline.serving import programs, serving_bench, serving_report


def _timed(program: programs.Program, ms: float, **extra: object) -> dict[str, object]:
    return {"compile_s": 10.0, "benchmarks": 0, **extra,
            "lengths": {str(n): {"kernel_ms": ms, "first_call_s": 1.0} for n in program.lengths}}


def test_top_k_buckets_default_to_three_log_spaced_over_the_programs_range():
    seed_buckets = buckets(serving_bench.default_edges(programs.SEED))
    inner = [b for b in seed_buckets if b.bounded]
    assert [str(b) for b in inner] == ["560..1369", "1370..3349", "3350..8192"]
    assert buckets(serving_bench.default_edges(programs.DECODER))[1].low == 128


def test_a_warm_run_gives_the_compile_without_triton_and_the_triton_term():
    per_method = {"pinned_buckets": _timed(programs.SEED, 1.0, warm={"compile_s": 4.0, "benchmarks": 0}),
                  "default": _timed(programs.SEED, 2.0)}
    results = serving_report.assemble(per_method)
    pinned = results["methods"]["pinned_buckets"]
    assert pinned["compile_warm_s"] == 4.0 and pinned["triton_compile_s"] == pytest.approx(6.0)
    assert "compile_warm_s" not in results["methods"]["default"]
    assert pinned["lengths"]["6000"]["ratio_to_best"] == 1.0 and results["program_name"] == "seed"
    pytest.importorskip("pandas")
    table = serving_report.table(results)
    assert list(table.columns[:4]) == ["compile_s", "compile_warm_s", "benchmarks", "560 ms"]


def test_the_decoder_is_compared_with_the_fastest_method_never_the_seed_harness():
    harness = {str(n): 0.5 for n in (*programs.SEED.lengths, *programs.DECODER.lengths)}
    per_method = {"a": _timed(programs.DECODER, 2.0), "b": _timed(programs.DECODER, 1.0)}
    results = serving_report.assemble(per_method, harness, programs.DECODER)
    assert results["best_source"] == "fastest measured method per length"
    assert results["methods"]["a"]["lengths"]["8192"]["ratio_to_best"] == 2.0
    assert results["program"].startswith("Llama-3-8B-width decoder layer")


def test_the_programs_name_their_lengths_range_and_pretune_factory():
    for program in programs.PROGRAMS.values():
        assert program.low == min(program.lengths) and program.high == max(program.lengths)
        module, attr = program.factory.split(":")
        assert getattr(__import__(module, fromlist=[attr]), attr) is not None
    assert {1500, 6000} <= set(programs.SEED.lengths)  # lengths between the tuned ones
    assert programs.DECODER.dims == {0: 1}  # hidden states [batch, length, 4096]


def test_unknown_methods_are_refused_before_anything_runs(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit):
        serving_bench.main(["--methods", "pinned_buckets,fastest"])
    assert "unknown fastest" in capsys.readouterr().err


def test_a_method_compiles_one_graph_per_bucket_and_counts_its_first_calls_on_the_cpu():
    import torch

    weight = torch.randn(32, 16)
    program = programs.Program("tiny", "x @ W", (40, 100, 300, 90), 40, 300, {0: 0},
                               lambda: (lambda x: x @ weight), lambda length: (torch.randn(length, 32),),
                               "unused:factory")
    bucketed = serving_bench.run_method(program, "topk4_buckets", None, 1, edges=(64, 128, 301), timing=False)
    assert bucketed["graphs"] == 3 and bucketed["buckets"] == ["128..300", "2..63", "64..127"]
    assert bucketed["edges"] == [64, 128, 301] and set(bucketed["lengths"]) == {"40", "100", "300", "90"}
    assert bucketed["benchmarks"] == 0  # CPU GEMMs are not autotuned
    one_graph = serving_bench.run_method(program, "default", None, 1, timing=False)
    assert one_graph["graphs"] == 1 and "buckets" not in one_graph and one_graph["compile_s"] > 0


def test_a_resumed_run_keeps_what_was_measured_and_serves_the_same_lut(tmp_path, monkeypatch):
    lut = tmp_path / "pinned.json"
    lut.write_text("{}")
    done = {"program_name": "seed", "lut": str(lut), "pretune": {"pretune_s": 50.0},
            "methods": {"default": _timed(programs.SEED, 2.0), "topk4_buckets": {"error": "timed out"}}}
    started = []

    def fake_worker(program, method, args, lut_path, edges, cache, log_dir, *, warm, timeout_s):
        started.append((method, lut_path, warm))
        return _timed(program, 1.0)

    monkeypatch.setattr(serving_bench, "_in_subprocess", fake_worker)
    monkeypatch.setattr(serving_bench, "_pretune", lambda *a, **k: pytest.fail("pretuned again"))
    args = serving_bench.argparse.Namespace(max_seconds=0, methods="default,pinned_buckets,topk4_buckets",
                                            lut=None, edges=None, warm="", samples=1)
    measured = serving_bench.measure(programs.SEED, args, tmp_path / "out.json", done)
    assert [m for m, _, _ in started] == ["pinned_buckets", "topk4_buckets"]  # default kept, the error redone
    assert measured["per_method"]["default"] is done["methods"]["default"]
    assert measured["lut"] == str(lut) and measured["pretune"] == {"pretune_s": 50.0}
    assert all(path == str(lut) for _, path, _ in started)
