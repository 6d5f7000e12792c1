"""`kernel-select calibrate` end to end on the GPU: a handful of problems timed by the real harness, one
training epoch, a model folder that then serves this GPU. About a minute of compile on 15 workers."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.gpu


def test_calibrate_a_handful_of_problems_end_to_end(tmp_path, monkeypatch, capsys):
    from kernel_select.cli import main
    from kernel_select.device import detect
    from kernel_select.model import load_default
    from kernel_select.model.card import GpuIdentity
    from kernel_select.resources import MODELS_DIR_ENV

    models = tmp_path / "models"
    monkeypatch.setenv(MODELS_DIR_ENV, str(models))
    assert main(["calibrate", "--max-seconds", "300", "--max-problems", "6", "--epochs", "1", "--from",
                 "none", "--json", "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out)
    spec = detect()
    assert summary["device"]["key"] == spec.key and summary["device"]["sm_count"] == spec.sm_count
    assert summary["plan"]["problems"] == 6 and summary["measured"]["problems"] == 6
    assert not summary["collection"]["stopped_at_bound"]
    assert summary["training"]["epochs_run"] == 1 and summary["installed"] == ["mlp"]
    assert summary["held_out"]["problems"] >= 1 and "calibrated" in summary["held_out"]["methods"]
    folder = models / spec.key
    assert (folder / "mlp.pt").is_file() and (folder / "calibration.parquet").is_file()
    model = load_default(spec)
    assert model.card.gpu == GpuIdentity.of(spec) and model.card.data.file == "calibration.parquet"
    assert model.card.hyperparameters["epochs"] == 1 and model.card.device == spec.key
