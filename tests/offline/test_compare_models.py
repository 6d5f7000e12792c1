"""compare-models on the CPU: the timing loop with a fake timer, aggregation and spread, the
resumable driver with a fake runner, the method registry, and one real worker process."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kernel_select.errors import DatasetError, OptionError
from kernel_select.offline.e2e import (
    compare_models,
    model_frames,
    model_methods,
    model_report,
    model_results,
    model_steps,
    model_tables,
)
from kernel_select.offline.e2e.model_methods import MethodContext, ModelMethod, select_methods
from kernel_select.offline.e2e.model_worker import host_state, lowered_gemms
from kernel_select.offline.e2e.step_timing import DeviceTimeTimer, interleaved_ms, relative_iqr


class FakeTimer:
    """Each step 'takes' a fixed time; records the order in which samples were taken."""

    def __init__(self, ms: dict[str, float]) -> None:
        self.ms, self.order = ms, []

    def __call__(self, step: Any, repeats: int) -> float:
        name = step()
        self.order.append((name, repeats))
        return self.ms[name] * repeats


def test_interleaved_samples_alternate_and_divide_by_repeats() -> None:
    timer = FakeTimer({"step": 4.0, "eager": 8.0})
    samples = interleaved_ms({"step": lambda: "step", "eager": lambda: "eager"}, timer, samples=3,
                             min_sample_ms=20.0)
    assert samples == {"step": [4.0] * 3, "eager": [8.0] * 3}
    timed = timer.order[2:]  # after one calibration call per step
    assert [name for name, _ in timed] == ["step", "eager"] * 3
    assert dict(timed) == {"step": 5, "eager": 3}  # enough repeats to last 20 ms


def test_relative_iqr() -> None:
    assert relative_iqr([1.0, 1.0, 1.0, 1.0]) == 0.0
    assert relative_iqr([1.0, 2.0]) is None
    assert relative_iqr([1.0, 2.0, 3.0, 4.0, 5.0]) > 0


def _run(step_ms: float, eager_ms: float = 10.0, compile_s: float = 5.0, choice: str = "aten mm") -> dict:
    return {"compile_s": compile_s, "step_ms": step_ms, "eager_step_ms": eager_ms, "sizes": {"batch": 1},
            "gemms": [{"op": "mm", "shapes": [[8, 8], [8, 8]], "choice": choice, "n_triton": 0,
                       "n_choices": 1}]}


def test_aggregate_takes_medians_and_spread_of_good_runs() -> None:
    result = model_report.aggregate([_run(9.0), {"error": "boom"}, _run(11.0, choice="triton x")])
    assert result["step_ms"] == 10.0 and result["speedup_vs_eager"] == pytest.approx(1.0101, rel=1e-3)
    assert result["step_spread"] == pytest.approx(0.2)
    assert result["choices_stable"] is False
    assert result["error"] is None and len(result["runs"]) == 3
    failed = model_report.aggregate([{"error": "boom"}])
    assert failed["error"] == "boom" and not model_report.succeeded(failed)


def test_aggregate_takes_the_device_time_where_runs_have_it() -> None:
    with_device = [{**_run(9.0), "step_device_ms": 4.0, "eager_device_ms": 8.0},
                   {**_run(11.0), "step_device_ms": 5.0, "eager_device_ms": 8.0}]
    result = model_report.aggregate([*with_device, _run(10.0)])  # a run from before device times
    assert result["step_device_ms"] == 4.5 and result["eager_device_ms"] == 8.0
    assert result["device_spread"] == pytest.approx(1.0 / 4.5)
    older = model_report.aggregate([_run(9.0), _run(11.0)])
    assert older["step_device_ms"] is None and older["device_spread"] is None


def test_aggregate_reports_how_much_the_hosts_speed_moved() -> None:
    runs = [{**_run(9.0), "host_ref_ms": 0.20}, {**_run(11.0), "host_ref_ms": 0.30}, _run(10.0)]
    result = model_report.aggregate(runs)
    assert result["host_ref_ms"] == 0.25 and result["host_spread"] == pytest.approx(0.4)
    assert model_report.aggregate([_run(9.0), _run(11.0)])["host_spread"] is None  # older runs
    entry = {"name": "a", "results": {"stock": result, "topk-4": result}}
    summary = model_report.summarize({"methods": ["stock", "topk-4"], "models": [entry]})
    assert summary.rows[0].max_host_spread == pytest.approx(0.4)
    assert "host spread" in model_tables.format_summary(summary)


def test_worker_times_the_host_reference_beside_the_steps() -> None:
    from kernel_select.offline.e2e.model_worker import measure
    from kernel_select.offline.e2e.step_timing import host_reference

    timed = []

    def timer(step: Any, repeats: int) -> float:
        timed.append(step)
        step()
        return (0.5 if step is host_reference else 2.0) * repeats

    spec = {"model": "recsys-mlp/decode", "method": dataclasses.asdict(ModelMethod("eager", "eager")),
            "device": "cpu", "tiny": True, "samples": 3, "min_sample_ms": 1.0}
    result = measure(spec, timer=timer)
    assert result["host_ref_ms"] == 0.5 and result["step_ms"] == 2.0 and result["host_ref_iqr"] is None
    assert timed.count(host_reference) == 1 + 3  # calibrated once, then one sample per round
    assert host_reference() == host_reference()  # the same work every call


def test_summary_compares_device_times_over_the_models_that_have_them() -> None:
    def run(step_ms: float, device_ms: float | None) -> dict:
        device = {"step_device_ms": device_ms, "eager_device_ms": 9.0} if device_ms else {}
        return {**_run(step_ms), **device}

    def entry(name: str, topk_device: float | None, stock_device: float | None) -> dict:
        return {"name": name, "results": {
            "default": model_report.aggregate([run(8.0, None)]),
            "stock": model_report.aggregate([run(7.0, stock_device)]),
            "topk-4": model_report.aggregate([run(6.0, topk_device)])}}

    results = {"methods": ["default", "stock", "topk-4"],
               "models": [entry("a", 3.0, 4.0), entry("b", 2.0, 2.0), entry("c", None, 5.0)]}
    row = next(r for r in model_report.summarize(results).rows if r.method == "topk-4")
    assert row.device_models == {"stock": 2} and row.device_vs_stock == pytest.approx((0.75 * 1.0) ** 0.5)
    assert "device/stock" in model_tables.format_summary(model_report.summarize(results))


class FakeClock:
    """The host clock step_timing reads, advanced only by the fake enqueue: a loaded CI machine
    cannot stretch a sleep past a spin and change what the test sees."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class FakeSpinTimer(DeviceTimeTimer):
    """DeviceTimeTimer without a GPU: the host 'enqueues' for `host_ms` of the fake clock, the GPU
    reaches the steps when the spin ends; the spins are recorded."""

    def __init__(self, host_ms: float, clock: FakeClock) -> None:  # no super().__init__: no CUDA events
        self.spin_ms, self.uncovered, self.host_ms, self.spins, self.clock = 1.0, 0, host_ms, [], clock

    def _spin(self, ms: float) -> None:
        self.spins.append(ms)

    def _enqueue(self, step: Any, repeats: int) -> None:
        self.clock.now += self.host_ms / 1e3

    def _elapsed_ms(self) -> float:
        return 1.0

    def _gpu_lead_ms(self) -> float:
        return self.spins[-1]


def test_device_timer_retimes_a_sample_behind_a_longer_spin_until_the_host_kept_up(monkeypatch) -> None:
    from kernel_select.offline.e2e import step_timing

    clock = FakeClock()
    monkeypatch.setattr(step_timing, "time", clock)
    timer = FakeSpinTimer(5.0, clock)
    assert timer(lambda: None, 1) == 1.0 and timer.uncovered == 0
    assert timer.spins == pytest.approx([1.0, 9.0])  # 4 ms short: grows by 2 x 4
    timer(lambda: None, 1)
    assert len(timer.spins) == 3  # the longer spin is kept: the next sample is covered at once
    slow = FakeSpinTimer(250.0, clock)  # a host slower than any spin: capped, the sample flagged
    slow(lambda: None, 1)
    assert slow.spin_ms == DeviceTimeTimer.MAX_SPIN_MS and slow.uncovered == 1


METHODS = [ModelMethod("eager", "eager"), ModelMethod("default", "default"),
           ModelMethod("stock", "max-autotune"), ModelMethod("topk-4", "max-autotune", topk=4)]
FAKE = {"eager": (0.0, 10.0), "default": (10.0, 8.0), "stock": (100.0, 7.0), "topk-4": (20.0, 6.5)}


def fake_runner(calls: list) -> Any:
    def run(spec: dict, log_path: Path, timeout_s: float) -> dict:
        calls.append((spec["model"], spec["method"]["name"]))
        compile_s, step_ms = FAKE[spec["method"]["name"]]
        return _run(step_ms, compile_s=compile_s)

    return run


def test_driver_writes_resumable_results_and_summary(tmp_path: Path) -> None:
    calls: list = []
    models = ["recsys-mlp/prefill", "recsys-mlp/decode"]
    results, path, png = compare_models.run_compare_models(
        models, METHODS, out_dir=tmp_path, device="cpu", repeat=2, progress=False, runner=fake_runner(calls))
    assert path == tmp_path / "models_cpu.json" and len(calls) == 2 * 2 * 4
    assert calls[:4] == [("recsys-mlp/prefill", m.name) for m in METHODS]  # repeats come last
    saved = model_results.load_results(path)
    entry = saved["models"][0]
    assert entry["name"] == "recsys-mlp/prefill" and entry["sizes"] == {"batch": 1}
    topk4 = entry["results"]["topk-4"]
    assert topk4["compile_s"] == 20.0 and topk4["step_spread"] == 0.0
    rows = {row.method: row for row in model_report.summarize(saved).rows}
    assert rows["topk-4"].compile_vs_stock == pytest.approx(0.2)
    assert rows["topk-4"].step_vs_stock == pytest.approx(6.5 / 7.0)
    assert rows["stock"].step_vs_default == pytest.approx(7.0 / 8.0)
    assert rows["default"].speedup_vs_eager == pytest.approx(10.0 / 8.0)
    assert "topk-4" in model_tables.format_summary(model_report.summarize(saved))
    assert png is not None and png.exists()

    calls.clear()  # resume: nothing left to run; a third repeat runs only the new pass
    compare_models.run_compare_models(models, METHODS, out_dir=tmp_path, device="cpu", repeat=2, resume=True,
                                      progress=False, runner=fake_runner(calls))
    assert calls == []
    compare_models.run_compare_models(models[:1], METHODS[:2], out_dir=tmp_path, device="cpu", repeat=3,
                                      resume=True, progress=False, runner=fake_runner(calls))
    assert calls == [("recsys-mlp/prefill", "eager"), ("recsys-mlp/prefill", "default")]
    assert len(model_results.load_results(path)["models"][0]["results"]["default"]["runs"]) == 3


def test_comparisons_made_side_by_side_merge_into_one(tmp_path: Path) -> None:
    calls: list = []
    paths = []
    for gpu, (models, methods) in enumerate([(["recsys-mlp/prefill"], METHODS[:3]),
                                             (["recsys-mlp/decode", "recsys-mlp/prefill"], METHODS[2:])]):
        out_dir = tmp_path / f"gpu{gpu}"
        _, path, _ = compare_models.run_compare_models(models, methods, out_dir=out_dir, device="cpu",
                                                       progress=False, runner=fake_runner(calls))
        paths.append(path)
    merged = compare_models.merge_comparisons(paths)
    assert merged["methods"] == [m.name for m in METHODS]
    assert [entry["name"] for entry in merged["models"]] == ["recsys-mlp/prefill", "recsys-mlp/decode"]
    prefill = merged["models"][0]["results"]
    assert list(prefill) == ["eager", "default", "stock", "topk-4"]
    assert len(prefill["stock"]["runs"]) == 2 and prefill["stock"]["compile_s"] == 100.0  # pooled
    model_results.write_results(merged, tmp_path / "merged.json")  # still a valid comparison file
    assert model_results.load_results(tmp_path / "merged.json") == merged

    other = model_results.load_results(paths[1])
    other["environment"]["device_key"] = "h200"
    model_results.write_results(other, tmp_path / "h200.json")
    with pytest.raises(DatasetError, match="measured on h200"):
        compare_models.merge_comparisons([paths[0], tmp_path / "h200.json"])
    other = model_results.load_results(paths[1])
    other["settings"]["samples"] = 5
    model_results.write_results(other, tmp_path / "fewer.json")
    with pytest.raises(DatasetError, match="settings differ"):
        compare_models.merge_comparisons([paths[0], tmp_path / "fewer.json"])


def test_failed_run_is_retried_on_resume(tmp_path: Path) -> None:
    def failing(spec: dict, log_path: Path, timeout_s: float) -> dict:
        return {"error": "worker died"}

    results, path, _ = compare_models.run_compare_models(["recsys-mlp/decode"], METHODS[:1], out_dir=tmp_path,
                                                         device="cpu", progress=False, runner=failing)
    assert results["models"][0]["results"]["eager"]["error"] == "worker died"
    calls: list = []
    compare_models.run_compare_models(["recsys-mlp/decode"], METHODS[:1], out_dir=tmp_path, device="cpu",
                                      resume=True, progress=False, runner=fake_runner(calls))
    assert calls == [("recsys-mlp/decode", "eager")]
    assert model_results.load_results(path)["models"][0]["results"]["eager"]["error"] is None


def test_load_results_rejects_other_files(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"kind": "kernel_select.compare", "schema_version": 2}))
    with pytest.raises(DatasetError, match="not a version-1"):
        model_results.load_results(bad)


def test_methods_registry() -> None:
    names = [m.name for m in model_methods.available_methods()]
    assert names[:5] == ["eager", "default", "stock", "topk-1", "topk-4"] and "lut" not in names
    assert ("topk-auto" in names) == model_methods.supports_topk("auto")
    lut = select_methods("lut,stock", MethodContext(lut="luts/h100_seed.json", cudagraphs=False))
    assert [(m.name, m.topk, m.lut, m.cudagraphs) for m in lut] == [
        ("lut", 1, "luts/h100_seed.json", False), ("stock", None, None, False)]
    with pytest.raises(OptionError, match="needs --lut"):
        select_methods("lut")
    with pytest.raises(OptionError, match="mode must be"):
        ModelMethod("x", "fast")


def test_stock_options_are_inductors_max_autotune_mode() -> None:
    import torch._inductor as torch_inductor

    assert (ModelMethod("s", "max-autotune").compile_options()
            == torch_inductor.list_mode_options("max-autotune"))
    assert ModelMethod("s", "max-autotune", cudagraphs=False).compile_options() == \
        torch_inductor.list_mode_options("max-autotune-no-cudagraphs")
    assert torch_inductor.list_mode_options("max-autotune")["triton.cudagraphs"] is True
    assert ModelMethod("d", "default").compile_options() is None
    parity = select_methods("topk-4-parity")[0]
    assert parity.topk == 4 and parity.compile_options()["coordinate_descent_tuning"] is False


def test_gemm_only_methods_tune_gemms_and_nothing_else() -> None:
    import torch._inductor.config as inductor_config

    stock_gemm, topk_gemm, auto_gemm = select_methods("stock-gemm,topk-4-gemm,topk-auto-gemm")
    assert stock_gemm.topk is None and topk_gemm.topk == 4 and topk_gemm.precompile_in_process
    assert auto_gemm.topk == "auto" and auto_gemm.precompile_in_process
    for method in (stock_gemm, topk_gemm, auto_gemm):
        options = method.compile_options()
        with inductor_config.patch(options):  # Inductor refuses unknown keys here
            assert inductor_config.max_autotune_gemm and inductor_config.triton.cudagraphs
            assert not inductor_config.max_autotune and not inductor_config.max_autotune_pointwise
            assert not inductor_config.coordinate_descent_tuning
    no_graphs = select_methods("stock-gemm", MethodContext(cudagraphs=False))[0]
    assert no_graphs.compile_options()["triton.cudagraphs"] is False


def test_zero_gemm_is_the_handler_at_one_choice_with_the_gemm_only_options() -> None:
    (zero,) = select_methods("zero-gemm")
    (recipe,) = select_methods("topk-4-gemm")
    assert zero.topk == 1 and dataclasses.replace(zero, name=recipe.name, topk=4) == recipe


def test_the_report_counts_the_gemms_a_method_left_to_autotuning(tmp_path: Path) -> None:
    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        autotuned = {"zero-gemm": 1, "default": 0}.get(spec["method"]["name"], 3)
        return {**_run(8.0), "gemms": _run(8.0)["gemms"] * autotuned, "gemms_lowered": 3}

    results, _, _ = compare_models.run_compare_models(["recsys-mlp/decode"],
                                                      select_methods("default,stock-gemm,zero-gemm"),
                                                      out_dir=tmp_path, device="cpu", progress=False,
                                                      runner=runner)
    entry = results["models"][0]
    assert model_report.gemms_autotuned(entry["results"]["zero-gemm"]) == (1, 3)
    lines = model_tables.format_models(results).splitlines()
    assert [line.split()[-1] for line in lines[2:]] == ["0/3", "3/3", "1/3"]


def test_the_worker_counts_every_gemm_inductor_lowers_autotuned_or_not() -> None:
    import torch

    torch._dynamo.reset()
    before = lowered_gemms()
    a, b, bias = torch.randn(8, 16), torch.randn(16, 4), torch.randn(4)
    with torch.compiler.config.patch(force_disable_caches=True):  # a cached graph is not lowered again
        torch.compile(lambda a, b, bias: torch.addmm(bias, a, b) + a[:, :4] @ b[:4])(a, b, bias)
    assert lowered_gemms() - before == 2  # one addmm, one mm; nothing autotuned on a CPU


def test_inproc_method_passes_the_knob_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import kernel_select.inductor as ks_inductor
    import torch

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(ks_inductor, "install", lambda **kwargs: calls.append(kwargs))
    inproc, plain = select_methods("topk-4-inproc,topk-4")
    # The worker rebuilds the method from JSON: the knob must survive the trip.
    inproc = ModelMethod(**json.loads(json.dumps(dataclasses.asdict(inproc))))
    for method in (inproc, plain):  # Dynamo without Inductor: compiles lazily, nothing runs here
        dataclasses.replace(method, backend="eager").compile(torch.nn.Linear(2, 2))
    assert [(c["gemm_topk"], c["gemm_precompile_in_process"]) for c in calls] == [(4, True), (4, False)]


def test_install_gemm_installs_with_the_knobs_defaults_and_the_recipes_options(monkeypatch) -> None:
    import kernel_select.inductor as ks_inductor
    import torch

    from kernel_select.options import KNOBS

    calls: list[dict[str, object]] = []
    monkeypatch.setattr(ks_inductor, "install", lambda **kwargs: calls.append(kwargs))
    bare, recipe = select_methods("install-gemm,topk-4-gemm", MethodContext(lut="luts/h100_seed.json"))
    assert recipe.lut == "luts/h100_seed.json" and bare.lut is None  # a bare install() has no LUT
    assert bare.compile_options() == recipe.compile_options()
    dataclasses.replace(bare, backend="eager").compile(torch.nn.Linear(2, 2))
    assert calls == [{name: KNOBS[name].default for name in calls[0]}]
    (no_inproc,) = select_methods("topk-4-gemm-no-inproc", MethodContext(lut="luts/h100_seed.json"))
    assert dataclasses.replace(no_inproc, name=recipe.name, precompile_in_process=True) == recipe


@pytest.mark.slow
def test_one_real_worker_process_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The subprocess path end to end: the recommendation tower needs no transformers; Dynamo
    without Inductor stands in for a compile (no C++ toolchain needed)."""
    from tests.subprocess_env import package_env

    monkeypatch.setattr("os.environ", package_env())
    methods = [ModelMethod("eager", "eager"), ModelMethod("dynamo", "default", backend="eager")]
    results, path, _ = compare_models.run_compare_models(
        ["recsys-mlp/decode"], methods, out_dir=tmp_path, device="cpu", tiny=True, samples=3,
        min_sample_ms=1.0, timeout_s=300, progress=False)
    for name in ("eager", "dynamo"):
        result = results["models"][0]["results"][name]
        assert result["error"] is None, (tmp_path / "logs").glob("*")
        assert result["step_ms"] > 0 and result["eager_step_ms"] > 0
    assert results["models"][0]["results"]["dynamo"]["compile_s"] > 0
    assert results["models"][0]["sizes"] == {"batch": 1}
    assert dataclasses.asdict(methods[1])["backend"] == "eager"


@pytest.mark.parametrize("architecture", ["gpt2-small", "llama3-8b-2layer"])
def test_decode_position_stays_inside_the_models_position_table(architecture: str) -> None:
    """GPT-2 learns 1024 positions: decoding after a 1024-token prefill would index position 1024
    (a device-side assert on the GPU). The real sizes, on the real configs (no weights built)."""
    transformers = pytest.importorskip("transformers")
    from kernel_select.offline.e2e import model_zoo

    arch = model_zoo.ARCHITECTURES[architecture]
    configs = {"gpt2-small": lambda: transformers.GPT2Config(n_positions=1024),
               "llama3-8b-2layer": lambda: transformers.LlamaConfig(max_position_embeddings=8192)}
    config = configs[architecture]()
    context = model_steps.decode_context(config, arch.sizes)
    limit = getattr(config, "max_position_embeddings", None) or config.n_positions
    assert context < limit  # the timed token sits at position `context`
    assert context == min(arch.sizes.prefill_seq, limit - 1)


def test_time_budget_stops_before_a_run_that_cannot_finish(tmp_path: Path) -> None:
    """Runs take 40 s on a fake clock and the budget is 100 s: two runs, then the third, which
    the method's longest run says needs 40 s of the 20 left, is not started; resume runs it."""
    now = [0.0]
    timeouts: list[float] = []

    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        timeouts.append(timeout_s)
        now[0] += 40.0
        return fake_runner([])(spec, log_path, timeout_s)

    models = ["recsys-mlp/prefill", "recsys-mlp/decode", "vit-b16/prefill"]
    results, path, _ = compare_models.run_compare_models(
        models, METHODS[1:2], out_dir=tmp_path, device="cpu", progress=False, runner=runner,
        timeout_s=60.0, max_seconds=100.0, clock=lambda: now[0])
    assert timeouts == [60.0, 60.0]  # the second started with 60 s left: the timeout, not the budget
    assert [bool(e["results"]) for e in results["models"]] == [True, True, False]
    now[0], timeouts[:] = 0.0, []
    compare_models.run_compare_models(models, METHODS[1:2], out_dir=tmp_path, device="cpu", progress=False,
                                      runner=runner, resume=True, timeout_s=60.0, max_seconds=50.0,
                                      clock=lambda: now[0])
    assert timeouts == [50.0]  # a worker never outlives the budget
    assert all(e["results"] for e in model_results.load_results(path)["models"])


def test_a_run_cut_by_the_budget_says_so_and_a_real_timeout_does_not(tmp_path: Path) -> None:
    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        return {"error": f"timed out after {timeout_s:.0f} s; see {log_path}"}

    models = ["recsys-mlp/prefill", "recsys-mlp/decode"]
    results, _, _ = compare_models.run_compare_models(
        models[:1], METHODS[1:2], out_dir=tmp_path, device="cpu", progress=False, runner=runner,
        timeout_s=60.0, max_seconds=30.0, clock=lambda: 0.0)
    (run,) = results["models"][0]["results"][METHODS[1].name]["runs"]
    assert run["cut_by_budget"] is True and run["error"].startswith("cut by --max-seconds after 30 s")
    results, _, _ = compare_models.run_compare_models(
        models[1:], METHODS[1:2], out_dir=tmp_path / "b", device="cpu", progress=False, runner=runner,
        timeout_s=60.0, clock=lambda: 0.0)
    (run,) = results["models"][0]["results"][METHODS[1].name]["runs"]
    assert "cut_by_budget" not in run and run["error"].startswith("timed out after 60 s")


def test_time_budget_off_gives_every_run_the_timeout(tmp_path: Path) -> None:
    timeouts: list[float] = []

    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        timeouts.append(timeout_s)
        return fake_runner([])(spec, log_path, timeout_s)

    compare_models.run_compare_models(["recsys-mlp/decode"], METHODS[:2], out_dir=tmp_path, device="cpu",
                                      progress=False, runner=runner, timeout_s=7.0)
    assert timeouts == [7.0, 7.0]


def test_host_state_counts_this_process_children() -> None:
    before = host_state()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        during = host_state()
    finally:
        child.kill()
        child.wait()
    assert during["threads"] >= 1
    if "child_processes" in before:  # Linux: /proc exists
        assert during["child_processes"] == before["child_processes"] + 1


def test_plot_puts_each_method_at_its_step_over_stocks(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    results, _, _ = compare_models.run_compare_models(
        ["recsys-mlp/decode"], METHODS, out_dir=tmp_path, device="cpu", progress=False,
        runner=fake_runner([]))
    fig = model_frames.plot_models(results)
    ax = fig.axes[0]
    large = {line.get_label().split(" ")[0]: line.get_ydata()[0] for line in ax.lines
             if line.get_marker() == "o"}
    assert large["topk-4"] == pytest.approx(6.5 / 7.0) and large["default"] == pytest.approx(8.0 / 7.0)
    assert "stock max-autotune" in ax.get_ylabel()


def test_worker_records_every_choice_time_fastest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    import contextlib

    import kernel_select.inductor as ks_inductor
    from kernel_select.inductor.probe import AutotuneRecord, ChoiceTiming
    from kernel_select.offline.e2e import model_worker

    record = AutotuneRecord("addmm", [ChoiceTiming("triton_mm_1", "triton", 0.0633, None),
                                      ChoiceTiming("bias_addmm", "extern", 0.1228, None),
                                      ChoiceTiming("triton_mm_2", "triton", float("inf"), None),
                                      ChoiceTiming("addmm", "extern", 0.0956, None)],
                            shapes=[[8192, 2304], [8192, 768], [768, 2304]])

    @contextlib.contextmanager
    def fake_recorder():
        yield [record]

    monkeypatch.setattr(ks_inductor, "record_autotuning", fake_recorder)
    with model_worker.recording_gemms() as gemms:
        pass
    (gemm,) = gemms
    assert gemm["choice"] == record.winner.label() and (gemm["n_triton"], gemm["n_choices"]) == (2, 4)
    assert [ms for _, ms in gemm["timings"]] == [0.0633, 0.0956, 0.1228]  # the failed one left out
    assert gemm["timings"][-1][0] == ChoiceTiming("bias_addmm", "extern", 0.1228, None).label()
    json.dumps(gemms)  # it goes into the results file


# -- pinned-gemm: a pretuned LUT per workload ---------------------------------------------------------

PINNED = select_methods("pinned-gemm")[0]


def test_pinned_gemm_needs_no_lut_and_tunes_gemms_only() -> None:
    assert "pinned-gemm" in [m.name for m in model_methods.available_methods()]
    assert (PINNED.topk, PINNED.lut, PINNED.gemm_only, PINNED.precompile_in_process, PINNED.pretuned) == \
        (1, None, True, True, True)
    assert not any(m.pretuned for m in model_methods.available_methods() if m.name != "pinned-gemm")
    assert ModelMethod(**json.loads(json.dumps(dataclasses.asdict(PINNED)))) == PINNED  # the trip to a worker


def recording_runner(calls: list) -> Any:
    """A measurement worker that records (model, method, the method's LUT)."""
    def run(spec: dict, log_path: Path, timeout_s: float) -> dict:
        calls.append((spec["model"], spec["method"]["name"], spec["method"]["lut"]))
        return _run(6.0)

    return run


def fake_pretuner(calls: list, seconds: float = 12.0) -> Any:
    """A pretune worker that writes a LUT file where it is told to, as the real one does."""
    def run(spec: dict, log_path: Path, timeout_s: float) -> dict:
        calls.append((spec["model"], log_path.name))
        Path(spec["lut"]).write_text("{}")
        return {"pretune_s": seconds, "entries": 7, "sites": [], "lut": spec["lut"], "k": spec["k"]}

    return run


def test_pinned_gemm_pretunes_each_workload_once_and_serves_its_lut(tmp_path: Path) -> None:
    pretunes: list = []
    calls: list = []
    models = ["recsys-mlp/prefill", "recsys-mlp/decode"]
    luts = {name: str(tmp_path / "luts" / f"{name.replace('/', '_')}.json") for name in models}
    results, path, _ = compare_models.run_compare_models(
        models, [METHODS[0], PINNED], out_dir=tmp_path, device="cpu", repeat=2, progress=False,
        runner=recording_runner(calls), pretuner=fake_pretuner(pretunes))
    assert pretunes == [(name, f"{name.replace('/', '_')}.pretune.log") for name in models]  # not per repeat
    assert calls == [(name, method, lut) for _ in range(2) for name in models
                     for method, lut in (("eager", None), ("pinned-gemm", luts[name]))]
    saved = model_results.load_results(path)["models"][0]["results"]
    assert saved["pinned-gemm"]["pretune_s"] == 12.0 and saved["eager"]["pretune_s"] is None
    assert [run["lut"] for run in saved["pinned-gemm"]["runs"]] == [luts["recsys-mlp/prefill"]] * 2

    pretunes.clear()  # resume: the LUT exists and what it cost is kept beside it
    results, _, _ = compare_models.run_compare_models(
        models[:1], [PINNED], out_dir=tmp_path, device="cpu", repeat=3, resume=True, progress=False,
        runner=recording_runner(calls), pretuner=fake_pretuner(pretunes))
    assert pretunes == [] and calls[-1] == ("recsys-mlp/prefill", "pinned-gemm", luts["recsys-mlp/prefill"])
    pinned = results["models"][0]["results"]["pinned-gemm"]
    assert len(pinned["runs"]) == 3 and pinned["runs"][-1]["pretune_s"] == 12.0

    compare_models.run_compare_models(
        models, METHODS, out_dir=tmp_path / "other", device="cpu", progress=False, runner=fake_runner([]),
        pretuner=fake_pretuner(pretunes))
    assert pretunes == []  # no pretuned method, no pretune

    journal = tmp_path / "luts" / "recsys-mlp_prefill.json.progress.json"
    journal.write_text("{}")  # a new comparison (no --resume) starts over, in the same folder too
    results, _, _ = compare_models.run_compare_models(
        models[:1], [PINNED], out_dir=tmp_path, device="cpu", progress=False, runner=recording_runner(calls),
        pretuner=fake_pretuner(pretunes, seconds=5.0))
    assert pretunes == [("recsys-mlp/prefill", "recsys-mlp_prefill.pretune.log")] and not journal.exists()
    assert results["models"][0]["results"]["pinned-gemm"]["pretune_s"] == 5.0


def test_a_failed_pretune_fails_the_runs_that_need_it(tmp_path: Path) -> None:
    pretunes: list = []

    def failing(spec: dict, log_path: Path, timeout_s: float) -> dict:
        pretunes.append(spec["model"])
        return {"error": "RuntimeError: CUDA out of memory"}

    calls: list = []
    results, path, _ = compare_models.run_compare_models(
        ["recsys-mlp/decode"], [PINNED, METHODS[0]], out_dir=tmp_path, device="cpu", repeat=2, progress=False,
        runner=recording_runner(calls), pretuner=failing)
    pinned = results["models"][0]["results"]["pinned-gemm"]
    assert pinned["error"] == "pretune failed: RuntimeError: CUDA out of memory"
    assert pretunes == ["recsys-mlp/decode"]  # not tried again in the same invocation
    assert [method for _, method, _ in calls] == ["eager", "eager"]  # the method itself never ran

    def no_lut(spec: dict, log_path: Path, timeout_s: float) -> dict:
        return {"pretune_s": 1.0, "entries": 0, "sites": [], "lut": spec["lut"]}

    results, _, _ = compare_models.run_compare_models(
        ["recsys-mlp/decode"], [PINNED], out_dir=tmp_path, device="cpu", resume=True, progress=False,
        runner=recording_runner(calls), pretuner=no_lut)
    error = results["models"][0]["results"]["pinned-gemm"]["error"]
    assert error.startswith("pretune failed: the pretune worker wrote no LUT")
    results, _, _ = compare_models.run_compare_models(
        ["recsys-mlp/decode"], [PINNED], out_dir=tmp_path, device="cpu", resume=True, progress=False,
        runner=recording_runner(calls), pretuner=fake_pretuner(pretunes))
    assert results["models"][0]["results"]["pinned-gemm"]["error"] is None  # --resume retried it


def test_a_pretune_counts_against_the_time_budget(tmp_path: Path) -> None:
    now = [0.0]
    timeouts: list = []

    def pretuner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        timeouts.append(("pretune", timeout_s))
        now[0] += 70.0
        return fake_pretuner([])(spec, log_path, timeout_s)

    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        timeouts.append(("run", timeout_s))
        now[0] += 20.0
        return _run(6.0)

    results, _, _ = compare_models.run_compare_models(
        ["recsys-mlp/decode", "recsys-mlp/prefill"], [PINNED], out_dir=tmp_path, device="cpu", progress=False,
        runner=runner, pretuner=pretuner, timeout_s=60.0, max_seconds=100.0, clock=lambda: now[0])
    # the pretune gets the timeout, the run what is left of 100 s; the second workload's pretune
    # (70 s before) does not fit in the 10 s left, so it is not started
    assert timeouts == [("pretune", 60.0), ("run", 30.0)]
    assert [bool(e["results"]) for e in results["models"]] == [True, False]


# -- the default methods and the references -----------------------------------------------------------

def test_default_methods_compare_the_recipe_with_inductors_gemm_autotuning() -> None:
    assert [m.name for m in select_methods(None)] == list(model_methods.DEFAULT_METHODS) == [
        "default", "stock-gemm", "topk-4-gemm"]
    every = [m.name for m in model_methods.available_methods()]
    assert [m.name for m in select_methods("all")] == every and "stock" in every and "eager" in every
    with pytest.raises(OptionError, match="'al' is not available"):
        select_methods("al")


GEMM_ONLY = {"default": (10.0, 8.0), "stock-gemm": (60.0, 7.0), "topk-4-gemm": (15.0, 6.3),
             "stock": (100.0, 7.7)}


def test_every_table_gives_autotuning_time_and_ratios_against_stock_gemm(tmp_path: Path) -> None:
    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        compile_s, step_ms = GEMM_ONLY[spec["method"]["name"]]
        return _run(step_ms, compile_s=compile_s)

    methods = select_methods("default,stock-gemm,topk-4-gemm,stock")
    models = ["recsys-mlp/prefill", "recsys-mlp/decode"]
    results, _, _ = compare_models.run_compare_models(models, methods, out_dir=tmp_path, device="cpu",
                                                      progress=False, runner=runner)
    summary = model_report.summarize(results)
    assert summary.references == ("stock-gemm", "stock", "default")
    rows = {row.method: row for row in summary.rows}
    recipe = rows["topk-4-gemm"]
    assert recipe.autotune_s == pytest.approx(2 * (15.0 - 10.0)) and rows["default"].autotune_s == 0.0
    assert recipe.compile_vs == pytest.approx({"stock-gemm": 0.25, "stock": 0.15})
    assert recipe.step_vs_stock_gemm == pytest.approx(0.9)
    assert recipe.step_vs_stock == pytest.approx(6.3 / 7.7)
    assert rows["stock"].step_vs_stock_gemm == pytest.approx(1.1)
    text = model_tables.format_summary(summary)
    header = text.splitlines()[1].split()
    assert header[:4] == ["method", "models", "compile", "[s]"] and "autotune" in header
    assert header.index("step/stock-gemm") < header.index("step/stock") < header.index("step/default")
    assert "device/stock-gemm" in header
    recipe_line = next(line for line in text.splitlines() if line.startswith("topk-4-gemm"))
    assert "10.0" in recipe_line.split() and "0.900" in recipe_line.split()

    table = model_frames.table(results)
    cell = table.loc["recsys-mlp/decode", "topk-4-gemm"]
    assert (cell["autotune_s"], cell["compile/stock-gemm"]) == (5.0, 0.25)
    assert cell["step/stock-gemm"] == pytest.approx(0.9) and cell["step/default"] == pytest.approx(6.3 / 8.0)

    lines = model_tables.format_models(results).splitlines()
    assert lines[0].split()[:3] == ["model", "method", "compile"] and "step/stock-gemm" in lines[0]
    first = lines[2].split()
    assert first[:5] == ["recsys-mlp/prefill", "default", "10.0", "0.0", "8.000"]
    assert lines[4].split()[:5] == ["topk-4-gemm", "15.0", "5.0", "6.300", "0.900"]  # the name once per model

    narrowed = model_report.summarize(results, references=("stock", "default"))
    assert narrowed.references == ("stock", "default") and "step/stock-gemm" not in \
        model_tables.format_summary(narrowed)


def test_a_failed_method_shows_its_error_in_the_text_table(tmp_path: Path) -> None:
    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        if spec["method"]["name"] == "stock-gemm":
            return {"error": "RuntimeError: CUDA out of memory\ntraceback ..."}
        compile_s, step_ms = GEMM_ONLY[spec["method"]["name"]]
        return _run(step_ms, compile_s=compile_s)

    results, _, _ = compare_models.run_compare_models(["recsys-mlp/decode"], select_methods(None),
                                                      out_dir=tmp_path, device="cpu", progress=False,
                                                      runner=runner)
    lines = model_tables.format_models(results).splitlines()
    assert lines[3].split() == ["stock-gemm", "RuntimeError:", "CUDA", "out", "of", "memory"]
    # no stock-gemm step to divide by; one GEMM autotuned, and the fake runs do not count the lowered ones
    assert lines[4].split()[-4:] == ["-", "0.787", "1.587x", "1/-"]
    assert model_report.summarize(results).models_excluded == ["recsys-mlp/decode"]


def test_plot_divides_by_stock_gemm_where_the_results_have_it(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")

    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        compile_s, step_ms = GEMM_ONLY[spec["method"]["name"]]
        return _run(step_ms, compile_s=compile_s)

    results, _, _ = compare_models.run_compare_models(["recsys-mlp/decode"], select_methods(None),
                                                      out_dir=tmp_path, device="cpu", progress=False,
                                                      runner=runner)
    ax = model_frames.plot_models(results).axes[0]
    large = {line.get_label().split(" ")[0]: line.get_ydata()[0] for line in ax.lines
             if line.get_marker() == "o"}
    assert large["topk-4-gemm"] == pytest.approx(0.9) and "stock-gemm" in ax.get_ylabel()


def test_each_run_records_its_whole_process_time(tmp_path: Path) -> None:
    now = [0.0]

    def runner(spec: dict, log_path: Path, timeout_s: float) -> dict:
        now[0] += 42.0
        return _run(6.0)

    results, _, _ = compare_models.run_compare_models(["recsys-mlp/decode"], METHODS[:1], out_dir=tmp_path,
                                                      device="cpu", progress=False, runner=runner,
                                                      clock=lambda: now[0])
    eager = results["models"][0]["results"]["eager"]
    assert eager["runs"][0]["wall_s"] == 42.0 and eager["wall_s"] == 42.0


def test_a_device_no_worker_can_use_is_refused_before_any_run(tmp_path: Path) -> None:
    from kernel_select.errors import DeviceError

    calls: list = []
    for device in ("tpu", "cuda:x", "cuda0"):
        with pytest.raises(DeviceError, match=rf"--device '{device}': expected cpu, cuda or cuda:N"):
            compare_models.run_compare_models(["recsys-mlp/decode"], METHODS[:1], out_dir=tmp_path,
                                              device=device, progress=False, runner=fake_runner(calls))
    assert calls == [] and not (tmp_path / "models_cpu.json").exists()


def test_a_factory_path_without_a_colon_is_refused_as_one(tmp_path: Path) -> None:
    from kernel_select.offline.e2e.workloads import select_workloads

    with pytest.raises(OptionError, match=r"--network 'os': expected 'package.module:factory'"):
        select_workloads(None, ["os"])


def test_a_comparison_where_every_run_failed_is_told_apart(tmp_path: Path) -> None:
    results, _, _ = compare_models.run_compare_models(
        ["recsys-mlp/decode"], METHODS[:2], out_dir=tmp_path, device="cpu", progress=False,
        runner=lambda spec, log_path, timeout_s: {"error": "RuntimeError: no such device"})
    assert compare_models.every_run_failed(results)
    results, _, _ = compare_models.run_compare_models(
        ["recsys-mlp/decode"], METHODS[:2], out_dir=tmp_path / "good", device="cpu", progress=False,
        runner=fake_runner([]))
    assert not compare_models.every_run_failed(results)


@pytest.mark.parametrize(("change", "field"), [
    (lambda r: r.update(models={"a": 1}), "models: expected a list, got dict"),
    (lambda r: r.update(methods="eager"), "methods: expected a list, got str"),
    (lambda r: r["models"][0].update(results=[1]), r"models\[0\].results: expected a JSON object, got list"),
    (lambda r: r["models"][0]["results"]["eager"].update(runs={"x": 1}),
     r"models\[0\].results.eager.runs: expected a list, got dict"),
    (lambda r: r["models"][0]["results"]["eager"]["runs"].append("fast"),
     r"models\[0\].results.eager.runs\[1\]: expected a JSON object, got str"),
])
def test_resume_refuses_a_wrongly_typed_results_file_naming_the_field(tmp_path, change, field) -> None:
    _, path, _ = compare_models.run_compare_models(["recsys-mlp/decode"], METHODS[:1], out_dir=tmp_path,
                                                   device="cpu", progress=False, runner=fake_runner([]))
    results = json.loads(path.read_text())
    change(results)
    path.write_text(json.dumps(results))
    with pytest.raises(DatasetError, match=rf"models_cpu.json: {field}; run without --resume"):
        compare_models.run_compare_models(["recsys-mlp/decode"], METHODS[:1], out_dir=tmp_path, device="cpu",
                                          resume=True, progress=False, runner=fake_runner([]))


def test_a_worker_and_its_children_are_killed_and_its_folder_removed_when_interrupted(tmp_path, monkeypatch):
    import tempfile

    from kernel_select.offline.e2e import json_worker

    # A worker whose child lingers (as Inductor's compile workers do), interrupted mid-run.
    pid_file = tmp_path / "child.pid"
    script = (f"import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c', "
              f"'import time; time.sleep(60)']); open({str(pid_file)!r}, 'w').write(str(c.pid)); "
              "time.sleep(60)")
    monkeypatch.setattr(json_worker.sys, "executable", sys.executable)
    real_popen = subprocess.Popen

    def popen(command, **kwargs):  # noqa: ANN001, ANN003, ANN202 -- run the script, not a module
        return real_popen([sys.executable, "-c", script], **kwargs)

    monkeypatch.setattr(json_worker.subprocess, "Popen", popen)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    real_wait, interrupted = real_popen.wait, []

    def interrupt_when_started(process, timeout=None):  # noqa: ANN001, ANN202 -- Ctrl-C, once
        if interrupted:
            return real_wait(process, timeout)
        while not pid_file.exists():
            time.sleep(0.05)
        interrupted.append(True)
        raise KeyboardInterrupt

    monkeypatch.setattr(real_popen, "wait", interrupt_when_started)
    with pytest.raises(KeyboardInterrupt):
        json_worker.run_worker("unused", {}, tmp_path / "worker.log", 30.0)
    monkeypatch.undo()
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
    assert not list(tmp_path.glob("kernel-select-models-*"))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
