"""pretune's pure steps on the CPU: discovery, buckets, candidates, the choice, the LUT, resuming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.errors import KernelSelectError
from kernel_select.lut import ATEN, load_lut, lut_from_rows
from kernel_select.offline.serving import crossovers, discovery, pretune, pretune_gpu
from kernel_select.problem import Problem, spread_ms
from tests.inductor_doubles import FakeModel
from tests.synthetic import constant_gate

H100 = get_device("h100")


def linear_factory():  # noqa: ANN201 -- the user's program: Linear 3420 -> 1280, dynamic sequence length
    module = torch.nn.Linear(64, 32)
    x = torch.randn(2, 48, 64, requires_grad=True)
    return module, (x,), {0: (1, 16, 4096)}


def test_discovery_finds_forward_and_backward_gemms_and_their_dynamic_dimension():
    module, inputs, dynamic = linear_factory()
    sites = discovery.discover(module, inputs, dynamic, backward=True)
    by_op = {(s.problem.op, s.problem.n, s.problem.k): s for s in sites}
    forward = by_op[("addmm", 32, 64)]
    assert forward.problem.m == 96 and forward.dynamic is None  # 2 x 48 rows: not the size itself
    sites = discovery.discover(module, inputs, {0: (1, 16, 4096)}, backward=False)
    assert len(sites) == 1


def test_a_dynamic_m_and_a_dynamic_k_are_told_apart():
    x = torch.randn(48, 64, requires_grad=True)
    module = torch.nn.Linear(64, 32)
    sites = discovery.discover(module, (x,), {0: (0, 16, 4096)}, backward=True)
    dynamic = {(s.problem.op, s.problem.m, s.problem.n, s.problem.k): s.dynamic for s in sites}
    assert dynamic[("addmm", 48, 32, 64)] == "m"  # forward: rows follow the sequence length
    assert dynamic[("mm", 48, 64, 32)] == "m"  # grad input
    assert dynamic[("mm", 32, 64, 48)] == "k"  # grad weight: the length is the reduction
    layout = {(s.problem.op, s.problem.m, s.problem.n, s.problem.k): s.layout for s in sites}
    assert layout[("addmm", 48, 32, 64)] == "nt"  # x @ W.t()
    assert layout[("mm", 48, 64, 32)] == "nn"  # grad_y @ W
    assert layout[("mm", 32, 64, 48)] == "tn"  # grad_y.t() @ x


def test_load_factory_checks_its_spec():
    assert discovery.load_factory("tests.offline.test_pretune:linear_factory")[2] == {0: (1, 16, 4096)}
    for bad in ("nocolon", "no.such.module:f", "tests.offline.test_pretune:missing"):
        with pytest.raises(KernelSelectError, match="--model"):
            discovery.load_factory(bad)


def test_shapes_files_name_sites(tmp_path: Path):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"op": "mm", "n": 1280, "k": 3420, "m": {"min": 560, "max": 8192}},
                                {"op": "mm", "n": 64, "k": 64, "m": 128, "dtype": "float16"}]))
    ranged, static = discovery.load_shapes(path)
    assert (ranged.dynamic, ranged.low, ranged.high, ranged.layout) == ("m", 560, 8192, "nn")
    assert ranged.buckets(5) == spread_ms(560, 8192) and static.buckets(5) == (128,)
    path.write_text('[{"n": 1}]')
    with pytest.raises(KernelSelectError, match=r"entry \[0\]"):
        discovery.load_shapes(path)
    path.write_text(json.dumps([{"n": 64, "k": 64, "m": 128, "layout": "nt"},
                                {"n": 64, "k": 64, "m": 128, "layout": "x"}]))
    with pytest.raises(KernelSelectError, match=r"entry \[1\].*layout 'x'"):
        discovery.load_shapes(path)


def test_shapes_files_name_k_dynamic_sites_and_refuse_two_dynamic_sizes(tmp_path: Path):
    path = _write(tmp_path / "shapes.json", [{"n": 3420, "m": 1280, "k": {"min": 560, "max": 8192}},
                                             {"n": 64, "m": 32, "k": {"min": 48, "max": 48}}])
    weight_gradient, fixed = discovery.load_shapes(path)
    assert (weight_gradient.dynamic, weight_gradient.low, weight_gradient.high) == ("k", 560, 8192)
    assert weight_gradient.problem == Problem(1280, 3420, 8192, "bfloat16")
    assert weight_gradient.at(1024) == Problem(1280, 3420, 1024, "bfloat16")
    assert fixed.dynamic is None and fixed.problem.k == 48
    both = {"n": 64, "m": {"min": 1, "max": 8}, "k": {"min": 1, "max": 8}}
    _write(path, [{"n": 64, "m": 32, "k": 64}, both])
    with pytest.raises(KernelSelectError, match=r"entry \[1\].*m and k are both ranges"):
        discovery.load_shapes(path)


def test_a_bucket_pins_the_best_geometric_mean_among_the_choices_within_tolerance():
    measured = {560: {"a": 1.0, "b": 1.019, "c": 1.5, "aten": 1.6},
                1024: {"a": 1.03, "b": 1.019, "c": 1.0, "aten": 1.1}}
    # "a" is 3% off at 1024 and "c" 50% at 560: out at 2%, although their geometric means are better
    (pin,) = pretune.bucket_pins(measured, [(560, 1024)], 560, 2047, tolerance=0.02)
    assert (pin.low, pin.high, pin.label) == (560, 2047, "b")
    assert pin.ratios == pytest.approx({560: 1.019, 1024: 1.019}) and pin.geomean == pytest.approx(1.019)
    (loose,) = pretune.bucket_pins(measured, [(560, 1024)], 560, 2047, tolerance=0.05)
    assert loose.label == "a"  # within 5% everywhere, and the best geometric mean then


def test_buckets_split_where_the_pin_changes_and_merge_where_it_does_not():
    measured = {100: {"a": 1.0, "b": 1.5}, 200: {"a": 1.0, "b": 1.5}, 400: {"a": 1.5, "b": 1.0}}
    pins = pretune.bucket_pins(measured, [(100,), (200,), (400,)], 64, 1000, tolerance=0.02)
    edge = crossovers.edge(200, 400)
    assert [(p.low, p.high, p.label) for p in pins] == [(64, edge - 1, "a"), (edge, 1000, "b")]
    assert sorted(pins[0].ratios) == [100, 200]  # the merged bucket keeps both measurements


def test_candidates_are_the_union_of_the_per_bucket_top_k():
    site = discovery.Site(Problem(560, 1280, 3420, "bfloat16"), "m", 560, 8192)
    configs = pretune.candidates(site, site.buckets(3), 4, FakeModel(), H100)
    assert 4 <= len(configs) <= 12 and len(set(configs)) == len(configs)


def test_a_run_writes_pins_per_bucket_with_ranges_and_resumes(tmp_path: Path):
    sites = [discovery.Site(Problem(560, 1280, 3420, "bfloat16"), "m", 560, 8192, "nt"),
             discovery.Site(Problem(1280, 3420, 560, "bfloat16"), "k", 560, 8192)]
    calls = []

    def fake_benchmark(problem: Problem, configs: list[GemmConfig],
                       device, layout: str, dynamic=None) -> dict[str, float]:  # noqa: ANN001
        calls.append((problem, layout, dynamic))
        timings = {c.short(): 1.0 + i * 0.1 for i, c in enumerate(configs)}
        # cuBLAS wins the weight gradient (N=3420) from K = 2000 on, loses it below
        timings[ATEN] = 0.5 if problem.n == 3420 and problem.k >= 2000 else 2.0
        return timings

    out = tmp_path / "serving.json"
    summary = pretune.pretune(sites, out=out, device=H100, model=FakeModel(), k=2, points=3, refine=2,
                              benchmark=fake_benchmark, progress=False)
    lut = load_lut(out)
    forward = Problem(2048, 1280, 3420, "bfloat16", layout="nt")
    assert isinstance(lut.pinned(forward, "h100"), GemmConfig)
    assert lut.match(Problem(2048, 1280, 3420, "bfloat16", layout="nn"), "h100") is None  # for "nt" only
    assert lut.match(forward, "h100").m_bounds == (560, 8192)  # one pin over every bucket: one entry
    assert "kernel-select pretune" in lut.match(forward, "h100").note
    # The weight gradient: timed at 560/2142/8192, then at the middles of the gap 1095 and 1531,
    # where Triton still wins; its bucket edge lies in the middle of what is left, 1531..2142.
    edge = crossovers.edge(1531, 2142)
    assert [problem.k for problem, _, _ in calls if problem.n == 3420] == [560, 2142, 8192, 1095, 1531]
    small, large = (lut.match(Problem(1280, 3420, k, "bfloat16"), "h100") for k in (560, 8192))
    assert small.k_bounds == (560, edge - 1) and large.k_bounds == (edge, 8192)
    assert isinstance(small.pin, GemmConfig) and large.pin == ATEN and small.m_bounds == (1280, 1280)
    for k in (560, 1000, edge - 1):  # every compile's hint in the bucket, not only the timed lengths
        assert lut.match(Problem(1280, 3420, k, "bfloat16"), "h100") == small
    assert lut.match(Problem(1280, 3420, 8193, "bfloat16"), "h100") is None
    assert small.layout == "nn"  # written, not left out: a layout-less entry serves every layout
    assert summary["entries"] == 3 and summary["gemm_dynamic_buckets"] == [560, edge, 8193]
    assert lut.bucket_edges("h100") == (560, edge, 8193)  # what serving's bucketed() reads
    weight_gradient = summary["sites"][1]
    assert weight_gradient["pin"] == "per bucket"
    assert [b["pin"] for b in weight_gradient["buckets"]][1] == ATEN
    assert [layout for _, layout, _ in calls][:3] == ["nt"] * 3 and {d for _, _, d in calls} == {"m", "k"}
    pretune.pretune(sites, out=out, device=H100, model=FakeModel(), k=2, points=3, benchmark=fake_benchmark,
                    progress=False)
    assert len(calls) == 10  # resumed from OUT.progress.json: nothing measured twice


def test_a_pointwise_epilogue_charges_aten_its_separate_kernel():
    from kernel_select.model.cublas import Epilogue, POINTWISE_KERNEL_MS

    timings = {ATEN: 0.005, "64x64x32 s3 w4": 0.0055}
    fused = discovery.Site(Problem(64, 64, 64), epilogue=Epilogue(separate_pointwise=True))
    assert pretune.charged(timings, fused)[ATEN] == pytest.approx(0.005 + POINTWISE_KERNEL_MS)
    assert pretune.charged(timings, discovery.Site(Problem(64, 64, 64))) == timings


def test_a_gemm_inductor_does_not_autotune_is_left_out_not_fatal(tmp_path: Path):
    """A tiny float32 GEMV (a rotary embedding's) gets no autotuning: nothing to pin, so the LUT
    pins the others; a run where Inductor autotuned nothing at all is an error."""
    gemv = discovery.Site(Problem(64, 1, 1, "float32", op="bmm", batch=1))
    linear = discovery.Site(Problem(8, 4096, 4096, "bfloat16"), layout="nt")

    def fake_benchmark(problem: Problem, configs: list[GemmConfig],
                       device, layout: str, dynamic=None) -> dict[str, float]:  # noqa: ANN001
        if problem.dtype == "float32":
            raise pretune_gpu.NotAutotunedError(f"{problem}: Inductor benchmarked nothing for it")
        return {ATEN: 1.0, **{c.short(): 2.0 for c in configs}}

    out = tmp_path / "model.json"
    summary = pretune.pretune([gemv, linear], out=out, device=H100, model=FakeModel(), k=2, points=1,
                              benchmark=fake_benchmark, progress=False)
    assert summary["entries"] == 1 and "benchmarked nothing" in summary["sites"][0]["skipped"]
    assert load_lut(out).pinned(Problem(8, 4096, 4096, "bfloat16", layout="nt"), "h100") == ATEN
    with pytest.raises(KernelSelectError, match="autotuned none of the 1 GEMMs"):
        pretune.pretune([gemv], out=tmp_path / "none.json", device=H100, model=FakeModel(), k=2,
                        points=1, benchmark=fake_benchmark, progress=False)
    assert not (tmp_path / "none.json").exists()


def test_a_gemm_the_gate_sends_to_cublas_is_pinned_to_aten_without_a_benchmark(tmp_path: Path):
    """The handler's cuBLAS decision, clauses included: at a predicted ratio of 0.9 (inside the 0.15
    margin) a plain mm is benchmarked, a biased Linear's addmm goes to cuBLAS, as serving would send it."""
    linear = discovery.Site(Problem(560, 1280, 3420, "bfloat16", op="addmm"), "m", 560, 8192, "nt")
    plain = discovery.Site(Problem(560, 1280, 3420, "bfloat16"), "m", 560, 8192, "nt")
    benchmarked = []

    def fake_benchmark(problem: Problem, configs: list[GemmConfig],
                       device, layout: str, dynamic=None) -> dict[str, float]:  # noqa: ANN001
        benchmarked.append(problem.op)
        return {ATEN: 2.0, **{c.short(): 1.0 for c in configs}}  # Inductor's timing: Triton faster

    out = tmp_path / "gated.json"
    summary = pretune.pretune([linear, plain], out=out, device=H100, model=FakeModel(), k=2, points=3,
                              benchmark=fake_benchmark, progress=False, gate=constant_gate(0.9),
                              cublas_margin=0.15)
    lut = load_lut(out)
    entry = lut.match(Problem(1024, 1280, 3420, "bfloat16", op="addmm", layout="nt"), "h100")
    assert entry.pin == ATEN and "not benchmarked" in entry.note and "bias_addmm" in entry.note
    assert entry.m_bounds == (560, 8192)
    assert isinstance(lut.pinned(Problem(1024, 1280, 3420, "bfloat16", layout="nt"), "h100"), GemmConfig)
    assert benchmarked == ["mm"] * 3 and "gated" in summary["sites"][0]
    ungated = pretune.pretune([linear], out=tmp_path / "off.json", device=H100, model=FakeModel(), k=2,
                              points=3, benchmark=fake_benchmark, progress=False)
    assert ungated["sites"][0]["pin"] != ATEN and benchmarked.count("addmm") == 3  # no gate: timed


def test_the_serving_bench_compares_each_length_with_the_fastest_method(tmp_path: Path):
    from kernel_select.offline.serving import serving_bench, serving_report

    sites = discovery.load_shapes(_write(tmp_path / "s.json", serving_bench.shapes()))
    assert [s.dynamic for s in sites] == ["m", "m", "k"]
    assert {(s.low, s.high) for s in sites} == {(serving_bench.LOW, serving_bench.HIGH)}
    per_method = {"a": {"compile_s": 1.0, "benchmarks": 0,
                        "lengths": {str(n): {"kernel_ms": 2.0} for n in serving_bench.LENGTHS}},
                  "b": {"compile_s": 2.0, "benchmarks": 9,
                        "lengths": {str(n): {"kernel_ms": 1.0} for n in serving_bench.LENGTHS}},
                  "c": {"error": "RuntimeError: out of memory"}}
    results = serving_report.assemble(per_method)
    assert results["methods"]["a"]["lengths"]["560"] == {"kernel_ms": 2.0, "best_ms": 1.0,
                                                          "ratio_to_best": 2.0}
    pytest.importorskip("matplotlib")
    serving_report.plot(results, tmp_path / "plot.png")
    assert (tmp_path / "plot.png").stat().st_size > 0


def test_the_serving_bench_takes_each_lengths_best_from_the_harness_when_given():
    import pandas as pd

    from kernel_select.offline.serving import serving_bench, serving_report

    shapes = serving_bench.harness_shapes()
    assert len(shapes) == 3 * len(serving_bench.LENGTHS)
    rows = pd.DataFrame([{"m": s["m"], "n": s["n"], "k": s["k"], "layout": s["layout"], "runtime_ms": ms,
                          "status": status}
                         for s in shapes
                         for ms, status in ((0.5, "ok"), (0.25, "capped"), (0.1, "incorrect"))])
    # The same sizes timed row-major do not count: the program reads transposed operands there.
    row_major = rows[rows["layout"] != "nn"].assign(layout="nn", runtime_ms=0.01)
    assert serving_bench.harness_best(pd.concat([rows, row_major]))["1024"] == pytest.approx(0.75)
    best = serving_bench.harness_best(rows[~((rows["m"] == 560) & (rows["n"] == 1280))])
    assert "560" not in best  # a GEMM of that length is missing
    assert best["1024"] == pytest.approx(0.75)  # three GEMMs x the fastest valid 0.25 ms
    per_method = {"a": {"compile_s": 1.0, "benchmarks": 0,
                        "lengths": {str(n): {"kernel_ms": 1.5} for n in serving_bench.LENGTHS}}}
    full = serving_report.assemble(per_method, serving_bench.harness_best(rows))
    assert full["best_source"].startswith("harness")
    assert full["methods"]["a"]["lengths"]["8192"]["ratio_to_best"] == pytest.approx(2.0)
    partial = serving_report.assemble(per_method, best)  # not every length: fall back to the methods
    assert partial["best_source"] == "fastest measured method per length"


def test_the_serving_harness_shapes_use_the_layouts_pretune_discovers_for_the_program():
    from kernel_select.offline.serving import serving_bench

    weight = torch.nn.Parameter(torch.randn(32, 64))  # the program's W[out, in], small

    def step(x: torch.Tensor) -> torch.Tensor:  # forward x @ W.t(); backward: grad input, grad weight
        return x @ weight.t()

    x = torch.randn(48, 64, requires_grad=True)
    sites = discovery.discover(step, (x,), {0: (0, 16, 4096)}, backward=True)
    discovered = {(s.problem.m, s.problem.n, s.problem.k): s.layout for s in sites}
    for gemm, (m, n, k) in {"forward": (48, 32, 64), "grad_input": (48, 64, 32),
                            "grad_weight": (32, 64, 48)}.items():
        assert discovered[(m, n, k)] == serving_bench.LAYOUTS[gemm], gemm
    assert {(s["layout"], s["source"].split()[1]) for s in serving_bench.harness_shapes()} == {
        (layout, gemm) for gemm, layout in serving_bench.LAYOUTS.items()}


def test_the_serving_harness_shapes_file_loads_for_bench_with_its_layouts(tmp_path: Path):
    from kernel_select.offline.data import shapes as shapes_module
    from kernel_select.offline.serving import serving_bench

    path = tmp_path / "harness_shapes.json"
    assert serving_bench.main(["--harness-shapes", str(path)]) == 0
    loaded = shapes_module.load(path)
    assert [s.layout for s in loaded] == [s["layout"] for s in serving_bench.harness_shapes()]
    assert {s.layout for s in loaded} == {"nt", "nn", "tn"}


def _write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


def _serving_bench_sites(tmp_path: Path) -> list[discovery.Site]:
    from kernel_select.offline.serving import serving_bench

    return discovery.load_shapes(_write(tmp_path / "shapes.json", serving_bench.shapes()))


def _fastest_first(problem: Problem, configs: list[GemmConfig], device,  # noqa: ANN001
                   layout: str, dynamic=None) -> dict[str, float]:
    """A stand-in for the GPU benchmark: the model's first candidate is the fastest."""
    return {**{c.short(): 1.0 + i * 0.1 for i, c in enumerate(configs)}, ATEN: 1.05}


def test_the_serving_bench_shapes_pretune_into_a_lut_that_validates(tmp_path: Path):
    # The user's Linear(3420 -> 1280) step: its input gradient (L x 3420 x 1280, "nn") and weight
    # gradient (1280 x 3420 x L, "tn") are the same GEMM at L = 1280 apart from the layout, which
    # a LUT keyed on (m, n, k) alone refused as overlapping entries.
    from kernel_select.cli.main import main

    out = tmp_path / "serving.json"
    pretune.pretune(_serving_bench_sites(tmp_path), out=out, device=H100, model=FakeModel(), k=2, points=3,
                    benchmark=_fastest_first, progress=False)
    assert main(["lut", "validate", str(out)]) == 0
    lut = load_lut(out)
    assert {row.entry.layout for row in lut.entries()} == {"nt", "nn", "tn"}
    grad_input, grad_weight = (lut.match(Problem(1280, 3420, 1280, layout=layout), "h100")
                               for layout in ("nn", "tn"))
    assert grad_input.m_bounds == (560, 8192) and grad_input.k_bounds == (1280, 1280)
    assert grad_weight.m_bounds == (1280, 1280) and grad_weight.k_bounds == (560, 8192)
    assert lut.match(Problem(1280, 3420, 1280, layout="nt"), "h100") is None  # the step has no such GEMM
    # Without layouts the same entries are the overlap pretune failed on.
    rows = [row._replace(entry=row.entry.model_copy(update={"layout": None})) for row in lut.entries()]
    with pytest.raises(KernelSelectError, match=r"\(m=1280 n=3420 k=560\.\.8192\) and \[2\] "
                                                r"\(m=560\.\.8192 n=3420 k=1280\) overlap"):
        lut_from_rows(rows)


def _one_site_run(tmp_path: Path, calls: list) -> dict:  # a static site, timed once
    site = discovery.Site(Problem(560, 1280, 3420, "bfloat16"), layout="nt")

    def fake_benchmark(problem, configs, device, layout, dynamic=None):  # noqa: ANN001, ANN202
        calls.append(problem)
        return {**{c.short(): 1.0 for c in configs}, ATEN: 2.0}

    return pretune.pretune([site], out=tmp_path / "serving.json", device=H100, model=FakeModel(), k=2,
                           points=1, benchmark=fake_benchmark, progress=False)


def test_the_progress_file_is_replaced_atomically_and_a_torn_one_is_named(tmp_path: Path, monkeypatch):
    import kernel_select.atomic_write as atomic_write

    replaced = []
    real_replace = atomic_write.os.replace
    monkeypatch.setattr(atomic_write.os, "replace", lambda a, b: (replaced.append(Path(b).name),
                                                                   real_replace(a, b)))
    _one_site_run(tmp_path, [])
    assert "serving.json.progress.json" in replaced  # written through the atomic writer
    progress = pretune.progress_path(tmp_path / "serving.json")
    for torn, why in (('{"mm 560x1280x3420', "cannot be read"), ("[1, 2]", "holds list"),
                      ('{"key": {"aten": "fast"}}', "entry 'key'")):
        progress.write_text(torn)
        with pytest.raises(KernelSelectError) as error:
            _one_site_run(tmp_path, [])
        message = str(error.value)
        assert str(progress) in message and why in message and "delete it" in message
        assert "\n" not in message


def test_a_site_the_lut_would_refuse_is_refused_before_anything_is_measured(tmp_path: Path):
    calls = []
    site = discovery.Site(Problem(560, 1280, 3420, "bfloat16"), "m", 560, 2**31)
    refused = r"dynamic m: 560..2147483648.*max: .*less than or equal to 2147483647.*nothing was"
    with pytest.raises(KernelSelectError, match=refused):
        pretune.pretune([site], out=tmp_path / "serving.json", device=H100, model=FakeModel(), k=1,
                        points=1, benchmark=lambda *a, **k: calls.append(a) or {ATEN: 1.0}, progress=False)
    assert calls == [] and not (tmp_path / "serving.json").exists()


@pytest.mark.parametrize("margin", ["٠٫١٥", "٠.١٥", "０.１５"])  # Arabic-Indic and full-width digits
def test_the_cublas_margin_pretune_reads_takes_ascii_digits_only(margin):
    from kernel_select.errors import OptionError
    from kernel_select.options import parse_cublas_margin

    assert parse_cublas_margin(" 0.15 ") == 0.15
    with pytest.raises(OptionError, match="expected a fraction in \\[0, 1\\)"):
        parse_cublas_margin(margin)
