"""`compare-models --model package.module:factory` on the CPU: finding and calling the factory, the
forms it may return and the one-line errors for the others, the inference and training steps the
harness builds from it, and the command end to end (in-process, and one worker process)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from kernel_select.cli import main
from kernel_select.errors import OptionError
from kernel_select.offline.e2e import compare_models, model_results, user_model, workloads
from kernel_select.offline.e2e.model_methods import ModelMethod
from kernel_select.offline.e2e.model_worker import measure
from tests.subprocess_env import REPO, package_env

FACTORIES = "tests.offline.tiny_factories"


@pytest.mark.parametrize("path, fragment", [
    ("tiny_mlp", "expected 'package.module:factory'"),
    (f"{FACTORIES}:", "expected 'package.module:factory'"),
    ("no_such_module_anywhere:build", "cannot import 'no_such_module_anywhere'"),
    (f"{FACTORIES}:no_such_factory", "has no attribute 'no_such_factory'"),
    (f"{FACTORIES}:NOT_CALLABLE", "'NOT_CALLABLE' is a int, not a callable"),
])
def test_a_bad_path_names_what_is_wrong(path: str, fragment: str) -> None:
    with pytest.raises(OptionError, match="--network") as error:
        user_model.load_factory(path)
    assert fragment in str(error.value)


@pytest.mark.parametrize("factory, fragment", [
    ("raises", "the factory raised RuntimeError: no weights here"),
    ("module_only", "the factory returned a TwoLayer; return (module, inputs)"),
    ("three_tuple", "the factory returned a 3-tuple"),
    ("not_a_module", "the factory's module is a function, not a torch.nn.Module"),
    ("bad_inputs", "the factory's inputs are a int"),
])
def test_a_factory_that_fails_or_returns_the_wrong_thing_is_refused(factory: str, fragment: str) -> None:
    with pytest.raises(OptionError) as error:
        user_model.call_factory(f"{FACTORIES}:{factory}")
    assert fragment in str(error.value) and f"{FACTORIES}:{factory}" in str(error.value)


@pytest.mark.parametrize("factory, args, kwargs", [
    ("tiny_mlp", 1, set()), ("tiny_mlp_tensor", 1, set()), ("tiny_mlp_kwargs", 0, {"x", "scale"}),
    ("tiny_mlp_object", 1, set()), ("Factories.nested", 1, set()),
])
def test_every_documented_form_becomes_a_user_model(factory: str, args: int, kwargs: set[str]) -> None:
    model = user_model.call_factory(f"{FACTORIES}:{factory}")
    assert isinstance(model.module, torch.nn.Module)
    assert len(model.args) == args and set(model.kwargs) == kwargs
    assert all(isinstance(a, torch.Tensor) for a in model.args)


def test_the_inference_step_runs_the_module_on_its_inputs_without_gradients() -> None:
    workload = workloads.build_workload(f"{FACTORIES}:tiny_mlp_kwargs/inference", device="cpu")
    assert (workload.architecture, workload.phase) == (f"{FACTORIES}:tiny_mlp_kwargs", "inference")
    assert not workload.module.training
    out = workload.make_step(workload.module)()
    assert out.shape == (8, 4) and not out.requires_grad
    assert workload.sizes == {"parameters": 16 * 32 + 32 + 32 * 4 + 4, "inputs": [[8, 16]]}
    again = workloads.build_workload(f"{FACTORIES}:tiny_mlp_kwargs/inference", device="cpu")
    torch.testing.assert_close(again.make_step(again.module)(), out)  # the seed: the same weights


@pytest.mark.parametrize("factory, loss_of", [
    ("tiny_mlp", lambda out: out.float().mean()),  # the default: the mean of the output
    ("tiny_mlp_object", lambda out: out.square().sum()),  # the factory's own loss
])
def test_the_training_step_takes_the_loss_and_updates_the_weights(factory: str, loss_of: Any) -> None:
    workload = workloads.build_workload(f"{FACTORIES}:{factory}/train", device="cpu")
    assert workload.module.training
    torch.manual_seed(0)  # the workload's seed: the same weights and inputs
    model = user_model.call_factory(f"{FACTORIES}:{factory}")
    expected = loss_of(model.module(*model.args))
    before = workload.module.up.weight.detach().clone()
    loss = workload.make_step(workload.module)()
    assert loss.dim() == 0 and torch.allclose(loss, expected)
    assert not torch.equal(before, workload.module.up.weight)


def test_the_default_loss_prefers_a_scalar_then_a_loss_field_then_the_first_tensor() -> None:
    scalar = torch.tensor(3.0)
    assert user_model.default_loss(scalar) is scalar
    with_loss = {"logits": torch.ones(2, 3), "loss": torch.tensor(0.5)}

    class Output(dict):
        loss = torch.tensor(0.5)

    assert user_model.default_loss(Output(with_loss)) == 0.5
    assert user_model.default_loss((None, torch.full((2, 2), 2.0), torch.zeros(1))) == 2.0
    assert user_model.default_loss({"logits": torch.full((3,), 4.0)}) == 4.0
    with pytest.raises(OptionError, match="holds no tensor"):
        user_model.default_loss(("text", None))


def test_workload_selection_mixes_the_zoo_and_factories() -> None:
    path = f"{FACTORIES}:tiny_mlp"
    assert workloads.select_workloads(None, [path]) == [f"{path}/inference"]
    assert workloads.select_workloads(None, [path, path], train=True) == [f"{path}/train"]
    assert workloads.select_workloads("recsys-mlp/decode", [path]) == ["recsys-mlp/decode",
                                                                        f"{path}/inference"]
    assert "gpt2-small/prefill" in workloads.select_workloads(None)  # no factory: the whole zoo
    assert user_model.is_user_workload(f"{path}/inference")
    assert not user_model.is_user_workload("vit-b16/decode")
    workloads.require_transformers([f"{path}/inference"])  # a factory needs no transformers
    with pytest.raises(OptionError, match="unknown phase 'prefill'"):
        workloads.build_workload(f"{path}/prefill", device="cpu")


def test_the_worker_measures_a_factory_network_like_a_zoo_one() -> None:
    method = ModelMethod("dynamo", "default", backend="eager")  # Dynamo without Inductor: no C++ needed
    spec = {"model": f"{FACTORIES}:tiny_mlp/inference", "method": dataclasses.asdict(method), "device": "cpu",
            "samples": 2, "min_sample_ms": 1.0}
    result = measure(spec, timer=lambda step, repeats: (step(), 2.0 * repeats)[1])
    assert result["compile_s"] > 0 and result["step_ms"] == 2.0 and result["build_s"] >= 0
    assert result["sizes"]["inputs"] == [[8, 16]]


def _cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["compare-models", "--torch-device", "cpu", *argv])
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernel-select: error: --")
    return lines[0]


def test_cli_errors_are_one_line_before_any_worker_starts(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--out", str(tmp_path)]
    assert "cannot import 'nosuch'" in _cli_error(capsys, "--network", "nosuch:build", *out)
    line = _cli_error(capsys, "--network", f"{FACTORIES}:raises", *out)
    assert "the factory raised RuntimeError: no weights here; second line" in line  # joined: one line
    assert "returned a TwoLayer" in _cli_error(capsys, "--network", f"{FACTORIES}:module_only", *out)
    assert "give --network" in _cli_error(capsys, "--train", *out)
    assert not (tmp_path / "models_cpu.json").exists()


def test_cli_compares_a_factory_network_and_prints_its_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The command end to end, each worker's measurement run in this process (Dynamo without
    Inductor stands in for the compiled method)."""
    specs: list[dict[str, Any]] = []

    def in_process(module: str, spec: dict[str, Any], log_path: Path, timeout_s: float) -> dict[str, Any]:
        specs.append(spec)
        if spec["method"]["mode"] != "eager":
            spec = {**spec, "method": {**spec["method"], "backend": "eager"}}
        return measure({**spec, "min_sample_ms": 1.0})

    monkeypatch.setattr(compare_models, "run_worker", in_process)
    path = f"{FACTORIES}:tiny_mlp_kwargs"
    assert main(["compare-models", "--network", path, "--torch-device", "cpu", "--methods", "eager,default",
                 "--samples", "2", "--out", str(tmp_path)]) == 0
    assert [(s["model"], s["method"]["name"]) for s in specs] == [(f"{path}/inference", "eager"),
                                                                   (f"{path}/inference", "default")]
    printed = capsys.readouterr().out
    assert f"{path}/inference" in printed and "autotune [s]" in printed
    saved = model_results.load_results(tmp_path / "models_cpu.json")
    (entry,) = saved["models"]
    assert (entry["architecture"], entry["phase"]) == (path, "inference")
    assert entry["results"]["default"]["runs"][0]["wall_s"] >= 0


@pytest.mark.slow
def test_one_real_worker_process_builds_the_factory_from_the_working_directory(tmp_path: Path) -> None:
    """`python -m kernel_select.cli` from the repository root: the worker process imports the
    factory's module as the command did."""
    result = subprocess.run(
        [sys.executable, "-m", "kernel_select.cli", "compare-models", "--network", f"{FACTORIES}:tiny_mlp",
         "--torch-device", "cpu", "--methods", "eager", "--samples", "2", "--out", str(tmp_path)],
        cwd=REPO, env=package_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    (entry,) = json.loads((tmp_path / "models_cpu.json").read_text())["models"]
    eager = entry["results"]["eager"]
    assert eager["error"] is None, list((tmp_path / "logs").glob("*"))
    assert eager["step_ms"] > 0 and entry["sizes"]["inputs"] == [[8, 16]]
