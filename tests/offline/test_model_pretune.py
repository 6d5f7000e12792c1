"""The pinned-gemm method's pretune worker on the CPU: which GEMMs a workload's step runs, and the
pinned LUT written from them (the GPU benchmark replaced by a fake one)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernel_select import knobs
from kernel_select.configs import GemmConfig
from kernel_select.device import get_device
from kernel_select.lut import ATEN, load_lut
from kernel_select.offline.e2e import model_zoo
from kernel_select.offline.e2e.model_pretune import discover_sites, make_pinned_lut
from kernel_select.problem import Problem

H100 = get_device("h100")


def _linear_gemms(module: torch.nn.Module, batch: int) -> set[tuple[str, int, int, int]]:
    return {("addmm", batch, layer.out_features, layer.in_features)
            for layer in module.modules() if isinstance(layer, torch.nn.Linear)}


def test_recsys_prefill_sites_are_its_linear_layers() -> None:
    workload = model_zoo.build_workload("recsys-mlp/prefill", device="cpu", tiny=True)
    sites = discover_sites(workload)
    found = {(s.problem.op, s.problem.m, s.problem.n, s.problem.k) for s in sites}
    assert found == _linear_gemms(workload.module, workload.sizes["batch"])
    assert len(found) == len(sites)  # distinct: a GEMM two layers share is one site
    assert all(s.dynamic is None and s.buckets(1) == (s.problem.m,) for s in sites)  # static: one bucket
    assert {s.problem.dtype for s in sites} == {"bfloat16"}
    # x @ W.t() reads W transposed; a single-output layer's W.t() is contiguous either way
    assert {s.layout for s in sites if s.problem.n > 1} == {"nt"}


def test_a_training_step_adds_its_backward_gemms() -> None:
    pytest.importorskip("transformers")
    prefill = discover_sites(model_zoo.build_workload("gpt2-small/prefill", device="cpu", tiny=True))
    train = discover_sites(model_zoo.build_workload("gpt2-small/train", device="cpu", tiny=True))
    # tiny prefill and train run the same batch x sequence, so every forward GEMM is in both
    key = lambda s: (s.problem, s.layout)  # noqa: E731
    assert {key(s) for s in prefill} < {key(s) for s in train}
    assert any(s.layout == "tn" for s in train)  # a weight gradient: grad_y.t() @ x
    assert not any(s.layout == "tn" for s in prefill)


def fake_benchmark(problem: Problem, configs: list[GemmConfig], device: object,
                   layout: str, dynamic: str | None = None) -> dict[str, float]:
    """cuBLAS wins the GEMMs with N < 32, the model's first config the others."""
    timings = {c.short(): 1.0 + i for i, c in enumerate(configs)}
    timings[ATEN] = 0.5 if problem.n < 32 else 3.0
    return timings


def test_the_worker_pins_every_gemm_of_the_workload(tmp_path: Path) -> None:
    out = tmp_path / "recsys-mlp_decode.json"
    spec = {"model": "recsys-mlp/decode", "device": "cpu", "tiny": True, "lut": str(out), "k": 2}
    with knobs.patch(gemm_cublas_margin="off"):  # every GEMM benchmarked: the pins follow fake_benchmark
        result = make_pinned_lut(spec, device_spec=H100, benchmark=fake_benchmark)
    sites = discover_sites(model_zoo.build_workload("recsys-mlp/decode", device="cpu", tiny=True))
    assert result["lut"] == str(out) and result["k"] == 2 and result["pretune_s"] > 0
    assert result["entries"] == len(sites) == len(result["sites"]) > 0
    lut = load_lut(out)
    for site in sites:
        pin = lut.pinned(dataclasses.replace(site.problem, layout=site.layout), H100)
        assert pin == ATEN if site.problem.n < 32 else isinstance(pin, GemmConfig)
    json.dumps(result)  # it goes into the results file


def test_the_worker_pins_aten_where_the_shipped_gate_skips_triton(tmp_path: Path) -> None:
    # The recsys tower's batch-1 Linears are small biased GEMMs: the gate sends them to cuBLAS
    out = tmp_path / "gated.json"
    spec = {"model": "recsys-mlp/decode", "device": "cpu", "tiny": True, "lut": str(out), "k": 2}
    result = make_pinned_lut(spec, device_spec=H100, benchmark=fake_benchmark)
    gated = [site for site in result["sites"] if "gated" in site]
    assert gated and all(site["pin"] == ATEN and "cuBLAS decision (gate)" in site["gated"] for site in gated)
    assert result["entries"] == len(result["sites"])


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the worker's answer on a machine without a GPU")
def test_the_worker_process_reports_a_missing_gpu(tmp_path: Path) -> None:
    from tests.subprocess_env import package_env

    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"model": "recsys-mlp/decode", "device": "cpu", "tiny": True,
                                "lut": str(tmp_path / "x.json")}))
    subprocess.run([sys.executable, "-m", "kernel_select.offline.e2e.model_pretune", str(spec),
                    str(tmp_path / "result.json")], env=package_env(), check=True, capture_output=True)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result == {"error": "DeviceError: pinned-gemm: pretune benchmarks on a CUDA GPU and there is none"}
    assert not (tmp_path / "x.json").exists()
