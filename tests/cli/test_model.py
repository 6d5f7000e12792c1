"""`kernel-select train` and `kernel-select eval` end to end on a synthetic dataset."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kernel_select.offline.data import dataset, splits
from kernel_select.cli import main
from kernel_select.model.cublas import CublasGate
from kernel_select.model.mlp import MLPModel
from tests.synthetic import synthetic_frame


def test_train_then_eval_json(tmp_path, capsys):
    data, out = tmp_path / "synthetic.parquet", tmp_path / "models" / "h100"
    dataset.write(synthetic_frame(configs_per_problem=80), data)
    assert main(["train", "--data", str(data), "--out", str(out), "--epochs", "3", "--no-progress"]) == 0
    assert (out / "mlp.pt").exists() and (out / "mlp.json").exists()
    printed = capsys.readouterr().out
    # 4 validation problems are too few for the cuBLAS gate: the MLP is kept, the gate is not made.
    assert "kept the" in printed and "no cuBLAS gate: " in printed and not (out / "cublas_gate.pt").exists()

    report_path = tmp_path / "eval.json"
    assert main(["eval", "--data", str(data), "--split", "test", "--mlp-dir", str(out), "--model", "mlp",
                 "--json-out", str(report_path)]) == 0
    printed = capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert report["split"] == "test" and report["problems"] == 4
    assert set(report["methods"]) >= {"mlp", "random", "inductor_default", "nvmatmulheuristics"}
    assert 0 < report["methods"]["mlp"]["topk"]["1"] <= report["methods"]["mlp"]["topk"]["16"] <= 1
    assert "mlp" in printed and "k=16" in printed


def test_eval_loads_a_model_folder_for_the_device_the_data_was_measured_on(tmp_path, capsys, monkeypatch):
    """No --device: a model folder is loaded for the data's device, not an assumed H100."""
    data, out = tmp_path / "synthetic.parquet", tmp_path / "models" / "h200"
    frame = synthetic_frame(configs_per_problem=40)
    frame["device_name"] = "NVIDIA H200"
    dataset.write(frame, data)
    assert main(["train", "--data", str(data), "--out", str(out), "--epochs", "2", "--no-progress",
                 "--device", "h200"]) == 0
    from kernel_select.model.mlp import MLPModel

    loaded_for = []
    real_load = MLPModel.load.__func__

    def recording_load(cls, folder, device, *args, **kwargs):
        loaded_for.append(device)
        return real_load(cls, folder, device, *args, **kwargs)

    monkeypatch.setattr(MLPModel, "load", classmethod(recording_load))
    report_path = tmp_path / "eval.json"
    assert main(["eval", "--data", str(data), "--split", "test", "--mlp-dir", str(out), "--model", "mlp",
                 "--json-out", str(report_path)]) == 0
    capsys.readouterr()
    assert loaded_for == ["h200"]
    assert json.loads(report_path.read_text())["device"] == "h200"


def test_eval_scores_the_gate_saved_beside_the_candidate_mlp(tmp_path, capsys, monkeypatch):
    """A folder `train` wrote holds its own cuBLAS gate: `eval --mlp-dir` applies that gate to the
    "with cuBLAS" figures, not the one serving the device, and says which it used."""
    data, out = tmp_path / "synthetic.parquet", tmp_path / "models" / "h100"
    dataset.write(synthetic_frame({"train": 24, "val": 8, "test": 6}, configs_per_problem=16), data)
    assert main(["train", "--data", str(data), "--out", str(out), "--epochs", "2", "--no-progress"]) == 0
    assert main(["train-gate", "--data", str(data), "--out", str(out)]) == 0
    capsys.readouterr()

    def no_serving_gate(*args, **kwargs):
        raise AssertionError("eval loaded the serving gate, not the folder's")

    monkeypatch.setattr("kernel_select.model.load_gate", no_serving_gate)
    report_path = tmp_path / "eval.json"
    assert main(["eval", "--data", str(data), "--split", "test", "--mlp-dir", str(out), "--model", "mlp",
                 "--json-out", str(report_path)]) == 0
    assert "its own cuBLAS gate" in capsys.readouterr().out
    report = json.loads(report_path.read_text())
    assert report["with_cublas"]["gate"]["problems"] > 0 and "mlp+gate" in report["with_cublas"]["methods"]
    assert "its own cuBLAS gate" in report["model_source"]


def test_train_weighs_the_files_weight_names_and_refuses_a_pattern_naming_none(tmp_path, capsys):
    shared, literal = tmp_path / "h200.parquet", tmp_path / "h200_literal.parquet"
    dataset.write(synthetic_frame({"train": 12, "val": 4, "test": 2}, configs_per_problem=16, seed=1), shared)
    dataset.write(synthetic_frame({"train": 4, "val": 2, "test": 0}, configs_per_problem=16, seed=2), literal)
    argv = ["train", "--data", str(tmp_path / "h200*.parquet"), "--epochs", "1", "--no-progress",
            "--members", "1", "--objective", "rank"]
    out = tmp_path / "m"
    # two patterns naming one file with one factor: the file is weighted once
    assert main([*argv, "--out", str(out), "--weight", "*literal*=4", "--weight", f"{literal}=4"]) == 0
    recorded = json.loads((out / "mlp.json").read_text())["hyperparameters"]["weights"]
    assert list(recorded) == ["h200_literal.parquet"] and recorded["h200_literal.parquet"]["factor"] == 4.0
    problems = recorded["h200_literal.parquet"]["train_problems"]
    assert 0 < problems <= 4
    assert f"weighted h200_literal.parquet x4: {problems} train problems" in capsys.readouterr().out

    for weights, fragment in ((["h100*=2"], "weight h100*=2: the pattern names none of the dataset files"),
                              (["x=2", "x=3"], "--weight x: given twice, with factors 2 and 3")):
        never = tmp_path / "never"
        with pytest.raises(SystemExit) as exc:
            main([*argv, "--out", str(never), *(f"--weight={w}" for w in weights)])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1 and fragment in err, err
        assert not never.exists()


def test_bad_input_is_a_one_line_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--data", str(tmp_path / "missing.parquet")])
    assert exc.value.code == 2
    assert "no such dataset file" in capsys.readouterr().err


def test_train_gate_writes_only_the_gate(tmp_path, capsys):
    data, out = tmp_path / "synthetic.parquet", tmp_path / "models" / "h100"
    frame = synthetic_frame({"train": 24, "val": 8, "test": 2}, configs_per_problem=16)
    dataset.write(frame, data)
    assert main(["train-gate", "--data", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # validated on the val problems outside the frozen family holdout
    val = frame.loc[splits.split_masks(frame)["val"], "problem_id"].nunique()
    assert f"cuBLAS gate, validation: {val} problems" in printed and "margin 0.05:" in printed
    assert sorted(p.name for p in out.iterdir()) == ["cublas_gate.json", "cublas_gate.pt"]


def test_eval_can_score_the_rows_audit_flags_as_unmeasured(tmp_path, capsys):
    # One test problem's fastest config, timed once with a host stall inside (100x its tile's
    # fastest): as measured it is the worst config; dropped, the problem's order is its own again.
    frame = synthetic_frame({"train": 0, "val": 0, "test": 3}, configs_per_problem=40)
    ran = frame[(frame["backend"] == "triton") & (frame["status"] == "ok")]
    stalled = ran.groupby("problem_id")["runtime_ms"].idxmin().iloc[0]
    twin = frame.index[(frame["problem_id"] == frame.at[stalled, "problem_id"])
                       & (frame["backend"] == "triton") & (frame["block_m"] == frame.at[stalled, "block_m"])
                       & (frame["block_n"] == frame.at[stalled, "block_n"]) & (frame.index != stalled)]
    if twin.empty:  # the stall is judged against a config of the same output tile
        frame = pd.concat([frame, frame.loc[[stalled]]], ignore_index=True)
        frame.loc[frame.index[-1], "num_stages"] = 99
    frame.loc[stalled, ["status", "n_runs"]] = ["capped", 1]
    frame.loc[stalled, "runtime_ms"] *= 100
    data, plain, dropped = tmp_path / "d.parquet", tmp_path / "plain.json", tmp_path / "dropped.json"
    dataset.write(frame, data)
    args = ["eval", "--data", str(data), "--split", "test", "--model", "analytical"]
    assert main([*args, "--json-out", str(plain)]) == 0
    assert main([*args, "--drop-suspect", "--json-out", str(dropped)]) == 0
    assert "dropped 1 suspect rows" in capsys.readouterr().out
    plain_report, dropped_report = json.loads(plain.read_text()), json.loads(dropped.read_text())
    assert dropped_report["dropped_suspect_rows"] == 1 and "dropped_suspect_rows" not in plain_report
    assert dropped_report["rows"] == plain_report["rows"] - 1
    with pytest.raises(SystemExit) as exc:
        main(["eval", "--data", str(data), "--drop-suspect", "--pinned-rows", str(tmp_path / "s.parquet")])
    assert exc.value.code == 2 and "leave --drop-suspect out" in capsys.readouterr().err


def test_eval_escapes_control_characters_of_file_names_and_prints_json_on_stdout(tmp_path, capsys):
    """Issue 43 row 13: a file name with ESC or a right-to-left override is shown escaped."""
    data = tmp_path / "evil\x1b[2J\u202eteuqrap.parquet"
    dataset.write(synthetic_frame(configs_per_problem=40), data)
    assert main(["eval", "--data", str(data), "--split", "test", "--model", "analytical"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\u202e" not in out and "evil\\x1b[2J\\u202eteuqrap.parquet" in out
    assert main(["eval", "--data", str(data), "--split", "test", "--model", "ANALYTICAL", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)  # the JSON alone: no table, no "wrote" line
    assert report["split"] == "test" and set(report["methods"]) >= {"analytical"}


def test_train_gate_beside_an_mlp_keeps_its_weights_and_names_the_new_gate_in_its_card(tmp_path, capsys):
    """A gate refreshed in place: the MLP's card names the gate the folder now holds, not the one
    its training kept (which `train --gate` recorded)."""
    data, gates, out = tmp_path / "synthetic.parquet", tmp_path / "gates", tmp_path / "models" / "h100"
    dataset.write(synthetic_frame({"train": 24, "val": 8, "test": 2}, configs_per_problem=16), data)
    assert main(["train-gate", "--data", str(data), "--out", str(gates)]) == 0
    assert main(["train", "--data", str(data), "--out", str(out), "--epochs", "1", "--members", "1",
                 "--objective", "rank", "--no-progress", "--gate", str(gates)]) == 0
    weights, old_card = (out / "mlp.pt").read_bytes(), json.loads((out / "mlp.json").read_text())
    assert main(["train-gate", "--data", str(data), "--out", str(out), "--seed", "7"]) == 0
    capsys.readouterr()
    gate = CublasGate.load(out, "h100")
    card = json.loads((out / "mlp.json").read_text())
    assert gate.digest() != old_card["hyperparameters"]["gate"]["digest"]  # another seed, another gate
    assert card["hyperparameters"]["gate"] == {"dir": str(out), "digest": gate.digest()}
    assert card["metrics"]["cublas_gate"] == json.loads(json.dumps(gate.card.metrics["validation"]))
    assert (out / "mlp.pt").read_bytes() == weights
    for key in ("hyperparameters", "metrics"):  # nothing else of the card moved
        changed = {name for name in card[key] if card[key][name] != old_card[key].get(name)}
        assert changed == {"gate" if key == "hyperparameters" else "cublas_gate"}
    MLPModel.load(out, "h100")  # the folder still loads as one model


def test_train_with_gate_writes_that_folders_gate_and_says_so(tmp_path, capsys):
    data, gates = tmp_path / "synthetic.parquet", tmp_path / "gates" / "h100"
    out = tmp_path / "models" / "h100"
    dataset.write(synthetic_frame({"train": 24, "val": 8, "test": 2}, configs_per_problem=16), data)
    assert main(["train-gate", "--data", str(data), "--out", str(gates)]) == 0
    capsys.readouterr()
    assert main(["train", "--data", str(data), "--out", str(out), "--epochs", "1", "--members", "1",
                 "--objective", "rank", "--no-progress", "--gate", str(gates)]) == 0
    assert f"cuBLAS gate of {gates} written with the model (not fitted again)" in capsys.readouterr().out
    assert (out / "cublas_gate.pt").read_bytes() == (gates / "cublas_gate.pt").read_bytes()
    card = json.loads((out / "mlp.json").read_text())["hyperparameters"]
    assert card["gate"]["dir"] == str(gates)


def test_train_widths_shape_the_network_and_a_warm_start_must_repeat_them(tmp_path, capsys):
    data = tmp_path / "synthetic.parquet"
    dataset.write(synthetic_frame({"train": 12, "val": 4, "test": 2}, configs_per_problem=16), data)
    argv = ["train", "--data", str(data), "--epochs", "1", "--members", "1", "--objective", "rank",
            "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "wide"), "--widths", "48,24"]) == 0
    card = json.loads((tmp_path / "wide" / "mlp.json").read_text())
    assert card["architecture"]["hidden_widths"] == [48, 24]
    with pytest.raises(SystemExit):
        main([*argv, "--out", str(tmp_path / "again"), "--init", str(tmp_path / "wide")])
    assert "hidden widths [48, 24] (asked for [96, 64, 32])" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "again"), "--init", str(tmp_path / "wide"),
                 "--widths", "48,24"]) == 0
    for bad in ("0,8", "a,b", ""):
        with pytest.raises(SystemExit):
            main([*argv, "--out", str(tmp_path / "bad"), "--widths", bad])
    assert "widths are comma-separated positive integers" in capsys.readouterr().err
