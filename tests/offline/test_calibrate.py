"""`kernel-select calibrate` on CPU, with the harness replaced by tests/offline/fake_harness.py: the model
folder it writes serves the GPU before the shipped model and before a stand-in, a killed run resumes
its measurements, --from picks the model to fine-tune, and without a GPU the command exits 2."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tests.offline.fake_harness import FakeHarness, Killed
from tests.synthetic import untrained_mlp, untrained_problem_net

from kernel_select.cli import main
from kernel_select.device import get_device
from kernel_select.errors import OptionError
from kernel_select.model import load_default, load_gate
from kernel_select.model.card import Domain, GpuIdentity
from kernel_select.model.cublas import CublasGate
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.calibrate.budget import PLANNING_S, Budget
from kernel_select.offline.calibrate.install import CalibrationFiles
from kernel_select.offline.calibrate.run import CalibrateOptions, calibrate
from kernel_select.offline.calibrate.start import resolve_start
from kernel_select.offline.data import dataset, problem_ids, shapes
from kernel_select.offline.calibrate.classes import COMPILE_CLASSES
from kernel_select.offline.training.cublas_fit import save_problem_net
from kernel_select.offline.training.train import save_model
from kernel_select.resources import HIDE_SHIPPED_ENV, shipped_dir

H100 = get_device("h100")
SHIPPED = shipped_dir("models")
#: A quick trial: fewer problems than the cuBLAS head and gate need (10 train, 5 val), one epoch.
QUICK = dict(minutes=4.0, max_problems=14, epochs=1, workers=15, progress=False)



def test_calibrate_writes_a_model_folder_that_serves_the_gpu_before_the_shipped_model(user: Path):
    folder = user / "h100"
    save_problem_net(untrained_problem_net(CublasGate), folder)  # an older calibration's gate
    fake = FakeHarness()
    summary = calibrate(CalibrateOptions(start="none", **QUICK), H100, collect=fake)
    files = CalibrationFiles(folder)
    assert summary["model_dir"] == str(folder) and summary["start"] is None
    assert [r["class"] for r in summary["priority"]] == [c.name for c in COMPILE_CLASSES]  # the fixed order
    assert len(fake.timed) == summary["measured"]["problems"] == summary["plan"]["problems"] == 14
    assert dataset.completed_problems(files.measurements, H100.name) == {
        problem_ids.id_of(s.problem()) for s in shapes.load(files.plan)}
    budget = Budget(QUICK["minutes"] * 60)  # the harness's bound: the collection's share and planning's left
    assert budget.collection_s < fake.max_seconds[0] <= PLANNING_S + budget.collection_s
    # the new MLP, its card naming this GPU; too few cuBLAS rows for a gate: the old one is gone
    assert summary["installed"] == ["mlp"] and not (folder / "cublas_gate.pt").exists()
    model = load_default("h100")
    assert model.card == MLPModel.load(folder, "h100").card != MLPModel.load(SHIPPED / "h100", "h100").card
    assert model.card.gpu == GpuIdentity.of(H100) and model.card.feature_version == 5
    assert load_gate("h100").digest() == CublasGate.load(SHIPPED / "h100", "h100").digest()
    assert json.loads(files.summary.read_text()) == json.loads(json.dumps(summary))
    held_out = summary["held_out"]
    assert held_out["problems"] >= 1 and set(held_out["methods"]) == {"calibrated"}
    assert 0 < held_out["methods"]["calibrated"]["top4"] <= 1
    assert "dtype=bfloat16" in held_out["methods"]["calibrated"]["strata"]
    assert 0 < held_out["inductor_default"]["score"] <= 1


def test_a_killed_run_resumes_its_measurements_and_trains_again(user: Path, capsys):
    killed = FakeHarness(stop_after=5)
    with pytest.raises(Killed):
        calibrate(CalibrateOptions(start="none", **QUICK), H100, collect=killed)
    files = CalibrationFiles(user / "h100")
    assert len(dataset.completed_problems(files.measurements, H100.name)) == 5
    assert "run the same command again to resume (training starts over)" in capsys.readouterr().err
    assert not (user / "h100" / "mlp.pt").exists()  # nothing installed from a run that did not finish

    again = FakeHarness()
    summary = calibrate(CalibrateOptions(start="none", **QUICK), H100, collect=again)
    assert set(again.asked).isdisjoint(killed.timed) and len(again.asked) == 14 - 5
    assert summary["measured"]["problems"] == 14 and summary["collection"]["problems"] == 9
    assert "resuming" in capsys.readouterr().err
    assert (user / "h100" / "mlp.pt").exists()
    # run once more: nothing left to measure, and the model is trained again on everything measured
    last = FakeHarness()
    summary = calibrate(CalibrateOptions(start="none", **QUICK), H100, collect=last)
    assert not last.asked and summary["collection"]["problems"] == 0
    assert summary["measured"]["problems"] == 14 and "nothing left to measure" in capsys.readouterr().err


def test_a_calibrated_model_serves_its_gpu_before_a_same_architecture_stand_in(user: Path, caplog):
    pcie = get_device("h100-pcie")
    assert load_default(pcie).card.device == "h100"  # before: the H100's model stands in
    summary = calibrate(CalibrateOptions(start="auto", **QUICK), pcie, collect=FakeHarness())
    assert summary["start"] == {"folder": str(SHIPPED / "h100"), "device": "h100"}
    assert set(summary["held_out"]["methods"]) == {"calibrated", "fine-tuned", "start"}
    assert summary["training"]["start_members_kept"] and summary["training"]["members"] == 8
    from kernel_select import runtime

    runtime.reset()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        model = load_default(pcie)
    assert model.card.device == "h100-pcie" and model.card.gpu.sm_count == pcie.sm_count
    assert not [r for r in caplog.records if "no mlp model trained on" in r.getMessage()]
    init = model.card.hyperparameters["init"]  # fine-tuned from the shipped model, already version 5
    assert init["device"] == "h100" and "widened" not in init
    assert model.card.hyperparameters["lr"] == 2e-4
    # the shipped model's four members kept beside the four fine-tuned ones, the card the fine-tuned one's
    averaged = model.card.hyperparameters["averaged"]
    assert [entry["dir"] for entry in averaged][1] == str(SHIPPED / "h100")
    assert model.card.architecture.members == 8 and model.card.data.file == "calibration.parquet"
    # the H100 model stood in for this GPU: the calibrated model claims its domain beside the 14 problems
    start = MLPModel.load(SHIPPED / "h100", pcie, allow_same_architecture=True).card
    assert set(model.card.layouts) == set(start.layouts) and set(model.card.dtypes) == set(start.dtypes)
    assert all(model.card.domain.strata[key] >= count for key, count in start.domain.strata.items())
    splits = summary["measured"]["splits"]  # training reads train and val
    trained = splits["train"] + splits["val"]
    assert sum(model.card.domain.strata.values()) == sum(start.domain.strata.values()) + trained


def test_a_start_of_another_architecture_lends_its_members_but_not_its_domain(user: Path):
    summary = calibrate(CalibrateOptions(start="h100", **QUICK), get_device("a100"), collect=FakeHarness())
    assert summary["training"]["start_members_kept"]
    card = MLPModel.load(user / "a100", get_device("a100")).card
    assert card.architecture.members == 8
    splits = summary["measured"]["splits"]
    assert sum(card.domain.strata.values()) == splits["train"] + splits["val"]


def test_a_start_of_eight_members_is_fine_tuned_and_serves_alone(user: Path, tmp_path: Path, capsys):
    # Eight fine-tuned members beside the start's eight would make 16, and a card holds 8: this used to
    # fail after the whole measurement. The fine-tuned members, begun from its weights, serve alone.
    start = tmp_path / "eight"
    eight = untrained_mlp(members=8)
    claimed = Domain(strata={"bmm/float32/m>4096": 500}, m=(1, 65536), n=(8, 65536), k=(8, 65536),
                     batch=(1, 4096), work={"bmm/float32/m>4096": 1e15})
    eight = MLPModel(eight.device, eight.net, eight.card.model_copy(update={"domain": claimed}))
    save_model(eight, start)
    options = CalibrateOptions(**{**QUICK, "progress": True}, start=str(start))
    summary = calibrate(options, H100, collect=FakeHarness())
    assert "too many to keep beside 8 fine-tuned ones" in capsys.readouterr().err
    assert not summary["training"]["start_members_kept"] and summary["training"]["members"] == 8
    assert set(summary["held_out"]["methods"]) == {"calibrated", "start"}
    card = MLPModel.load(user / "h100", H100).card
    assert card.architecture.members == 8 and card.hyperparameters["init"]["dir"] == str(start)
    # the start is the H100's own: the card claims its domain, as train --claim-init-domain does
    assert card.domain.strata["bmm/float32/m>4096"] == 500 and card.domain.batch[1] == 4096


def test_from_picks_the_model_to_fine_tune(user: Path, monkeypatch: pytest.MonkeyPatch):
    out = user / "h100"
    assert resolve_start("none", H100, out) is None
    assert resolve_start("auto", H100, out).folder == SHIPPED / "h100"
    assert resolve_start("h200", H100, out).folder == SHIPPED / "h200"
    assert resolve_start(str(SHIPPED / "h200"), H100, out).trained_on == "h200"
    save_model(untrained_mlp(), out)  # an earlier calibration of this GPU is not a starting point
    assert resolve_start("auto", H100, out).folder == SHIPPED / "h100"
    save_model(untrained_mlp(device="h200"), user / "h200")  # the user's h200 model comes first
    assert resolve_start("h200", H100, out).folder == user / "h200"
    monkeypatch.setenv(HIDE_SHIPPED_ENV, "all")
    assert resolve_start("auto", H100, user / "elsewhere").folder == out  # the user's folder stays
    assert resolve_start("auto", H100, out).folder == user / "h200"  # same architecture
    (user / "h200" / "mlp.pt").unlink()
    assert resolve_start("auto", H100, out) is None  # nothing left: from scratch


@pytest.mark.parametrize(("choice", "message"), [
    ("a100", "no trained model for device 'a100' in"), ("./nowhere", "no trained model there")])
def test_a_from_without_a_model_is_refused_with_the_choices(user: Path, choice: str, message: str):
    with pytest.raises(OptionError, match=message) as info:
        resolve_start(choice, H100, user / "h100")
    assert "auto or" in str(info.value) and "none" in str(info.value)


def test_too_few_minutes_are_refused_before_any_work():
    with pytest.raises(OptionError, match="--max-seconds 60 leaves no time to measure; give at least 90 "):
        Budget(60.0)


def test_the_command_without_a_gpu_exits_2_with_one_line(monkeypatch: pytest.MonkeyPatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--max-seconds", "300", "--out", str(tmp_path / "models"), "--json"])
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("kernel-select: error: calibrate: needs a CUDA GPU")
    assert not (tmp_path / "models").exists()


def test_plan_only_prints_the_plan_on_a_machine_without_a_gpu_and_writes_nothing(
        monkeypatch: pytest.MonkeyPatch, capsys, user: Path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    argv = ["calibrate", "--plan-only", "--max-seconds", "300", "--workers", "15", "--from", "none"]
    assert main([*argv, "--device", "H200"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("calibrate plan for h200 (NVIDIA H200, 132 SMs): 5 minutes = 15 s planning, 234 s "
                        "measuring (compile included), 36 s training, 15 s scoring and writing; 15 compile "
                        "workers")
    assert lines[1] == "start: from scratch; classes in the fixed order"
    rows = [line.split() for line in lines[3:3 + 16]]
    assert rows[0][:4] == ["1", "mm/bfloat16/nt/n16/k16r0", "coverage", rows[0][3]] and int(rows[0][3]) >= 96
    assert sum(row[3] == "-" for row in rows) >= 10  # 5 minutes fit a few classes; the others are listed
    assert lines[19].startswith("cost.py: ") and " rows per GPU-minute" in lines[19]
    assert lines[20].startswith("domain: ") and lines[21].startswith("planned in ")
    assert not any(user.iterdir())  # nothing written, not even the device's folder

    assert main([*argv, "--json"]) == 0  # no --device and no GPU: the fallback device
    report = json.loads(capsys.readouterr().out)
    assert report["device"]["key"] == "h100" and report["start"] is None and report["order"] == "fixed"
    assert [c["class"] for c in report["classes"]][:2] == ["mm/bfloat16/nt/n16/k16r0", "mm/bfloat16/nn/n8/k4"]
    taken = {c["class"]: c["problems"] for c in report["classes"] if c["problems"]}
    assert report["plan"]["classes"] == taken
    assert report["plan"]["predicted_rows_per_gpu_minute"] >= 30_000


def test_device_goes_with_plan_only(capsys, tmp_path: Path):
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--device", "h200", "--out", str(tmp_path / "models")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert "calibrate measures the GPU it runs on; --device goes with --plan-only" in err
