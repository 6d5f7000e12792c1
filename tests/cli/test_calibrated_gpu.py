"""After `kernel-select calibrate`, every entry point on that GPU ranks with the calibrated model without a
--device flag, and says which model it used (issue 41). The GPU is an H200 treated as new, as the issue's
run did it (its shipped model hidden, KERNEL_SELECT_HIDE_SHIPPED=h200): calibrate runs with the fake
harness into the user model directory (KERNEL_SELECT_MODELS_DIR), and detection is faked to report the
H200 (runtime.current_device for the CLI and the handler, device.detect for the Python API)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tests.cli.test_select_cmds import run
from tests.offline.fake_harness import FakeHarness
from tests.synthetic import synthetic_frame

import kernel_select
from kernel_select import device as device_module
from kernel_select import runtime
from kernel_select.device import KNOWN_DEVICES
from kernel_select.model.card import ModelCard
from kernel_select.model.folders import gate_in
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.calibrate.run import CalibrateOptions, calibrate
from kernel_select.offline.data import dataset
from kernel_select.resources import HIDE_SHIPPED_ENV, MODELS_DIR_ENV, shipped_dir

H200 = KNOWN_DEVICES["h200"]
PROBLEM = ["--m", "560", "--n", "1280", "--k", "3420", "--layout", "nt"]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user model directory after calibrating the H200 from scratch (a quick trial's 16 problems
    of bf16 `nt`, the first class of the fixed order), with its shipped model hidden."""
    root = tmp_path_factory.mktemp("user-models")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(MODELS_DIR_ENV, str(root))
        patch.setenv(HIDE_SHIPPED_ENV, "h200")
        calibrate(CalibrateOptions(start="none", minutes=4.0, max_problems=16, epochs=1, workers=15,
                                   progress=False), H200, collect=FakeHarness())
    return root / "h200"


@pytest.fixture
def on_the_calibrated_h200(calibrated: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A process on the calibrated H200: its model directory named, its shipped model hidden, the GPU
    detected (the CLI and the handler ask runtime.current_device, the Python API device.detect)."""
    monkeypatch.setenv(MODELS_DIR_ENV, str(calibrated.parent))
    monkeypatch.setenv(HIDE_SHIPPED_ENV, "h200")
    monkeypatch.setattr(runtime, "current_device", lambda: H200)
    monkeypatch.setattr(device_module, "detect", lambda index=0: H200)
    runtime.reset()
    return calibrated


def _card(folder: Path) -> ModelCard:
    return MLPModel.load(folder, "h200").card


def test_the_calibration_wrote_the_h200_model_the_entry_points_should_find(on_the_calibrated_h200: Path):
    card = _card(on_the_calibrated_h200)
    assert card.device == "h200" and card.gpu is not None and card.layouts == ["nt"]
    assert card.data is not None and card.data.file == "calibration.parquet"


def test_topk_and_demo_rank_with_the_calibrated_model_and_name_it(capsys, on_the_calibrated_h200: Path):
    folder = on_the_calibrated_h200
    code, out, _ = run(capsys, "topk", *PROBLEM, "--gemm-topk", "2")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("mm 560x1280x3420 bfloat16 nt on h200 (detected): 2 of ")
    assert "trained on calibration.parquet" in lines[1] and lines[2] == f"model: h200 (calibrated, {folder})"
    code, out, _ = run(capsys, "topk", *PROBLEM, "--json")
    assert json.loads(out)["model_source"] == f"h200 (calibrated, {folder})"
    code, out, _ = run(capsys, "demo", "--gemm-topk", "1")
    assert code == 0 and f"model: h200 (calibrated, {folder})" in out.splitlines()


def test_doctor_names_the_calibrated_model(capsys, on_the_calibrated_h200: Path):
    code, out, _ = run(capsys, "doctor")
    lines = out.splitlines()
    assert code == 0 and lines[:2] == ["gpu: h200 (NVIDIA H200, sm_90)", "device: h200 (detected)"]
    assert lines[2].startswith(f"model: h200 (calibrated, {on_the_calibrated_h200})")


def test_the_python_api_and_the_handler_use_it_and_log_which(on_the_calibrated_h200: Path, caplog):
    import kernel_select.inductor as ks_inductor

    folder = on_the_calibrated_h200
    calibrated_model = MLPModel.load(folder, "h200")
    with caplog.at_level(logging.INFO, logger="kernel_select"):
        choices = kernel_select.top_k(560, 1280, 3420, layout="nt", gemm_topk=2)  # no device: detected
    assert [c.source for c in choices] == ["mlp", "mlp"]
    problem = kernel_select.Problem(560, 1280, 3420, "bfloat16", layout="nt")
    assert [c.predicted_ms for c in choices] == pytest.approx(
        list(calibrated_model.estimate(problem, [c.config for c in choices])))
    assert f"h200 GEMMs are ranked by the model in {folder} (trained on h200)" in caplog.text

    runtime.reset()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kernel_select"):
        ks_inductor.install()  # loads what a compile on this GPU will rank with
        try:
            assert runtime.model(None, H200).card == calibrated_model.card
        finally:
            ks_inductor.uninstall()
    assert f"h200 GEMMs are ranked by the model in {folder} (trained on h200)" in caplog.text


def test_eval_and_gate_rules_read_the_device_from_the_rows_and_name_the_model(capsys,
                                                                              on_the_calibrated_h200: Path):
    folder = on_the_calibrated_h200
    data = str(folder / "calibration.parquet")
    code, out, err = run(capsys, "eval", "--data", data, "--split", "test", "--model", "mlp", "--json")
    report = json.loads(out)
    assert code == 0 and report["device"] == "h200"
    assert report["model_source"] == f"h200 (calibrated, {folder})"
    assert err.splitlines()[:2] == ["device: h200 (the dataset's rows were measured on it)",
                                    f"model: h200 (calibrated, {folder})"]
    code, out, err = run(capsys, "gate-rules", "--data", data, "--split", "test", "--gemm-topk", "1")
    assert code == 0, err
    assert out.splitlines()[:2] == ["device: h200 (the dataset's rows were measured on it)",
                                    f"model: h200 (calibrated, {folder})"]


def test_gate_rules_replays_the_model_mlp_dir_names(capsys, on_the_calibrated_h200: Path):
    # --mlp-dir names the calibrated folder itself: the same model, so the same rows, named by the flag
    folder, data = on_the_calibrated_h200, str(on_the_calibrated_h200 / "calibration.parquet")
    base = ["gate-rules", "--data", data, "--split", "test", "--one-choice"]
    code, served, _ = run(capsys, *base)
    assert code == 0
    code, named, err = run(capsys, *base, "--mlp-dir", str(folder))
    assert code == 0, err
    gate = "its own cuBLAS gate" if gate_in(folder, KNOWN_DEVICES["h200"]) else "the serving cuBLAS gate"
    assert named.splitlines()[1] == f"model: {folder} (--mlp-dir, for h200; {gate})"
    assert named.splitlines()[2:] == served.splitlines()[2:]
    code, _, err = run(capsys, *base, "--mlp-dir", str(folder / "nowhere"))
    assert code != 0 and "nowhere" in err


def test_train_and_train_gate_take_the_device_of_the_rows(capsys, on_the_calibrated_h200: Path,
                                                          tmp_path: Path):
    data = str(on_the_calibrated_h200 / "calibration.parquet")
    code, out, err = run(capsys, "train", "--data", data, "--out", str(tmp_path / "mlp"), "--epochs", "1",
                         "--objective", "rank", "--no-progress")
    assert code == 0, err
    assert "device: h200 (the dataset's rows were measured on it)" in out.splitlines()
    assert _card(tmp_path / "mlp").device == "h200"

    gate_data = tmp_path / "h200.parquet"
    frame = synthetic_frame({"train": 24, "val": 8, "test": 2}, configs_per_problem=16)
    frame["device_name"] = H200.name
    dataset.write(frame, gate_data)
    code, out, err = run(capsys, "train-gate", "--data", str(gate_data), "--out", str(tmp_path / "gate"))
    assert code == 0, err
    gate_card = json.loads((tmp_path / "gate" / "cublas_gate.json").read_text())
    assert gate_card["device"] == "h200" and out.startswith("device: h200 (the dataset's rows")


def test_rows_of_two_devices_need_the_device_named(capsys, tmp_path: Path):
    data = tmp_path / "two.parquet"
    frame = synthetic_frame({"train": 8, "val": 4, "test": 0}, configs_per_problem=16)
    frame.loc[frame.index[: len(frame) // 2], "device_name"] = H200.name
    dataset.write(frame, data)
    code, _, err = run(capsys, "train", "--data", str(data), "--out", str(tmp_path / "mlp"))
    assert code == 2 and err.count("\n") == 1 and "rows come from 2 devices (h100, h200); name one" in err


def test_calibrate_plan_only_plans_for_the_detected_gpu_from_its_architecture(capsys,
                                                                              on_the_calibrated_h200: Path):
    code, out, _ = run(capsys, "calibrate", "--plan-only", "--max-seconds", "300", "--workers", "15")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("calibrate plan for h200 (NVIDIA H200, 132 SMs): 5 minutes")
    # --from auto leaves out the folder it writes: the shipped H100 model, of the same architecture
    assert lines[1].startswith(f"start: fine-tunes the h100 model in {shipped_dir('models') / 'h100'}")


def test_compare_names_the_model_its_workers_will_rank_with(capsys, on_the_calibrated_h200: Path,
                                                           monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    import torch

    from kernel_select.cli.devices import torch_device_model_line
    from kernel_select.errors import DeviceError
    from kernel_select.offline import compare

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(runtime, "detected_device", lambda index: H200)
    line = f"model: h200 (calibrated, {on_the_calibrated_h200})"
    assert torch_device_model_line("cuda:0") == line and torch_device_model_line("cpu") is None
    assert torch_device_model_line("cuda", "analytical") == "model: analytical (by name, for h200)"

    def measured(*args, **kwargs):  # no GPU to time on: stop where the measuring would begin
        raise DeviceError("compare: stopped before measuring")

    monkeypatch.setattr(compare, "run_compare", measured)
    code, out, err = run(capsys, "compare", "--out", str(tmp_path / "compare"))
    assert code == 2 and out == "" and err.splitlines()[0] == line
