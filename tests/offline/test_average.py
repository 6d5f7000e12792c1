"""`average-models`: several trained MLPs become one whose prediction is the mean of every member's log ms."""

from __future__ import annotations

import numpy as np
import pytest

from kernel_select.cli import main
from kernel_select.errors import OptionError
from kernel_select.model.card import DataProvenance, Domain
from kernel_select.model.cublas import CublasGate
from kernel_select.model.mlp import MLPModel
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training.average import average_models, with_start_domain
from kernel_select.offline.training.cublas_fit import save_problem_net
from kernel_select.offline.training.training_data import file_hashes
from kernel_select.offline.training.train import save_model
from kernel_select.problem import Problem
from kernel_select.space import for_problem
from tests.synthetic import synthetic_frame, untrained_mlp, untrained_problem_net

PROBLEMS = (Problem(560, 1280, 3420, "bfloat16"), Problem(77, 4095, 1000, "float16"),
            Problem(4096, 4096, 64, "bfloat16", batch=24, op="bmm"))
DATA = DataProvenance(file="x.parquet", sha256="ab" * 32, rows=10, problems={"train": 1, "val": 1},
                      device_names=["NVIDIA H100 80GB HBM3"], torch_versions=[], triton_versions=[])


def trained_like(seed: int, members: int, *, widths=(16, 16), data: DataProvenance = DATA) -> MLPModel:
    """An untrained MLP standardized as a training run would (its own mean and std per feature),
    with a recorded dataset: averaging must carry each member across standardizations."""
    model = untrained_mlp(widths, seed=seed, members=members)
    rng = np.random.default_rng(seed)
    count = len(model.card.feature_names)
    card = model.card.model_copy(update={"feature_mean": rng.normal(0, 2, count).tolist(),
                                         "feature_std": rng.uniform(0.3, 3, count).tolist(), "data": data})
    return MLPModel(model.device, model.net, card)


def written(tmp_path, problems_per_split: dict[str, int], configs: int) -> tuple[object, DataProvenance]:
    """A synthetic dataset file and the data record of a model trained on it."""
    path = tmp_path / "synthetic.parquet"
    dataset.write(synthetic_frame(problems_per_split, configs_per_problem=configs), path)
    return path, DATA.model_copy(update={"file": path.name, "sha256": file_hashes([path])[1]})


def log_ms(model: MLPModel, problem: Problem) -> np.ndarray:
    return np.log(model.predict(problem, model.device, for_problem(problem, "h100")))


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: f"{p.op}-{p.dtype}-{p.m}")
def test_the_average_predicts_the_mean_of_every_members_log_runtime(problem):
    two, one = trained_like(0, members=2), trained_like(1, members=1)
    averaged = average_models([two, one], ["two", "one"])
    assert averaged.card.architecture.members == 3
    expected = (2 * log_ms(two, problem) + log_ms(one, problem)) / 3  # members weigh alike
    np.testing.assert_allclose(log_ms(averaged, problem), expected, atol=2e-5)
    # the sources are untouched: their first layers still read their own standardization
    np.testing.assert_array_equal(log_ms(one, problem), log_ms(trained_like(1, members=1), problem))


def test_the_card_records_what_was_averaged_and_keeps_the_first_models_standardization():
    first, second = trained_like(0, members=2), trained_like(1, members=2)
    averaged = average_models([first, second], ["a/", "b/"])
    card = averaged.card
    assert card.feature_mean == first.card.feature_mean and card.feature_std == first.card.feature_std
    assert card.hyperparameters["members"] == 4
    assert [(r["dir"], r["digest"]) for r in card.hyperparameters["averaged"]] == [
        ("a/", first.digest()), ("b/", second.digest())]
    assert card.kernel_overhead_ms == pytest.approx(
        np.mean([first.net.kernel_overhead_ms, second.net.kernel_overhead_ms]))


@pytest.mark.parametrize("other, why", [
    (lambda: trained_like(1, members=1, widths=(16, 8)), "hidden widths"),
    (lambda: trained_like(1, members=1, data=DATA.model_copy(update={"sha256": "cd" * 32})), "data"),
])
def test_models_of_another_shape_or_data_are_refused(other, why):
    with pytest.raises(OptionError, match=why):
        average_models([trained_like(0, members=1), other()], ["a", "b"])


def test_the_model_a_fine_tune_started_from_is_averaged_with_it_under_the_fine_tunes_card():
    """calibrate's average: the start was trained on other rows, for another GPU of the architecture."""
    fine_tuned = trained_like(0, members=2)
    other = trained_like(1, members=2, data=DATA.model_copy(update={"sha256": "cd" * 32}))
    start = MLPModel(other.device, other.net, other.card.model_copy(update={"device": "h200"}))
    with pytest.raises(OptionError, match="device, data"):
        average_models([fine_tuned, start], ["calibrated", "h200"])
    averaged = average_models([fine_tuned, start], ["calibrated", "h200"], fine_tuned_from=True)
    assert averaged.card.device == "h100" and averaged.card.data == fine_tuned.card.data
    expected = (log_ms(fine_tuned, PROBLEMS[0]) + log_ms(start, PROBLEMS[0])) / 2
    np.testing.assert_allclose(log_ms(averaged, PROBLEMS[0]), expected, atol=2e-5)
    with pytest.raises(OptionError, match="hidden widths"):  # the shape must still agree
        average_models([fine_tuned, trained_like(1, members=1, widths=(16, 8))], fine_tuned_from=True)


def test_an_average_with_its_start_claims_both_domains():
    own = trained_like(0, members=1)
    own = MLPModel(own.device, own.net, own.card.model_copy(update={
        "layouts": ["nt"], "dtypes": ["bfloat16"],
        "domain": Domain(strata={"mm/bfloat16/m<=16": 30}, m=(1, 16), n=(64, 4096), k=(64, 512))}))
    start = trained_like(1, members=1)
    start = MLPModel(start.device, start.net, start.card.model_copy(update={
        "layouts": ["nn", "nt"], "dtypes": ["float32", "bfloat16"],
        "domain": Domain(strata={"mm/bfloat16/m<=16": 5, "bmm/float32/m<=256": 40}, m=(8, 256),
                         n=(16, 1024), k=(128, 8192), batch=(1, 64))}))
    card = with_start_domain(own, start).card
    assert card.layouts == ["nn", "nt"] and card.dtypes == ["bfloat16", "float32"]
    assert card.domain == Domain(strata={"bmm/float32/m<=256": 40, "mm/bfloat16/m<=16": 35}, m=(1, 256),
                                 n=(16, 4096), k=(64, 8192), batch=(1, 64))
    assert with_start_domain(own, start).net is own.net  # the card alone changes
    unrestricted = MLPModel(start.device, start.net,
                            start.card.model_copy(update={"dtypes": [], "domain": None}))
    widened = with_start_domain(own, unrestricted).card
    assert widened.dtypes == [] and widened.domain == own.card.domain


def test_more_members_than_a_card_holds_or_a_single_model_are_refused():
    with pytest.raises(OptionError, match="at most 8"):
        average_models([trained_like(i, members=3) for i in range(3)])
    with pytest.raises(OptionError, match="at least two"):
        average_models([trained_like(0, members=2)])


def test_the_command_writes_one_scored_model_with_the_first_folders_gate(tmp_path, capsys):
    data, record = written(tmp_path, {"train": 2, "val": 6, "test": 3}, configs=40)
    first, second = tmp_path / "fine-tuned", tmp_path / "scratch"
    save_model(trained_like(0, members=2, data=record), first)
    save_problem_net(untrained_problem_net(CublasGate), first)
    save_model(trained_like(1, members=2, data=record), second)
    out = tmp_path / "averaged"
    assert main(["average-models", str(first), str(second), "--data", str(data), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    val = splits.split_rows(dataset.read(data), "val")["problem_id"].nunique()  # val minus `family`
    assert "averaged 2 models into 4 members" in printed and f"topk='auto' on {val} val problems" in printed
    model = MLPModel.load(out, "h100")
    assert model.card.architecture.members == 4
    assert model.card.metrics["auto_topk_val"]["problems"] == val
    assert model.card.metrics["held_out"]["test"]["problems"] == 3
    assert (out / "cublas_gate.pt").read_bytes() == (first / "cublas_gate.pt").read_bytes()
    problem = PROBLEMS[0]
    expected = sum(log_ms(MLPModel.load(folder, "h100"), problem) for folder in (first, second)) / 2
    np.testing.assert_allclose(log_ms(model, problem), expected, atol=2e-5)


def test_the_command_averages_a_fine_tune_with_its_start_and_claims_its_domain(tmp_path, capsys):
    data, record = written(tmp_path, {"train": 2, "val": 4, "test": 3}, configs=20)
    fine_tuned, start = tmp_path / "fine-tuned", tmp_path / "start"
    own = trained_like(0, members=2, data=record)
    narrow = Domain(strata={"mm/bfloat16/m<=16": 30}, m=(1, 16), n=(64, 4096), k=(64, 512))
    save_model(MLPModel(own.device, own.net, own.card.model_copy(update={"domain": narrow})), fine_tuned)
    other = trained_like(1, members=2, data=DATA.model_copy(update={"sha256": "cd" * 32}))
    wide = Domain(strata={"mm/float32/m>4096": 60}, m=(1, 8192), n=(8, 8192), k=(8, 8192))
    # Trained for another GPU of the same architecture: it would serve this one, so its domain counts.
    start_card = other.card.model_copy(update={"device": "h200", "domain": wide})
    save_model(MLPModel(other.device, other.net, start_card), start)
    out = tmp_path / "averaged"
    assert main(["average-models", str(fine_tuned), str(start), "--fine-tuned-from", "--data", str(data),
                 "--out", str(out)]) == 0
    assert "averaged 2 models into 4 members" in capsys.readouterr().out
    model = MLPModel.load(out, "h100")
    assert model.card.device == "h100" and model.card.data == record
    assert model.card.domain.strata == {"mm/bfloat16/m<=16": 30, "mm/float32/m>4096": 60}
    assert model.card.domain.m == (1, 8192)
    with pytest.raises(SystemExit) as exit_:
        main(["average-models", str(fine_tuned), str(start), str(start), "--fine-tuned-from",
              "--data", str(data), "--out", str(out)])
    assert exit_.value.code == 2 and "two DIRs" in capsys.readouterr().err


def test_the_gate_of_another_folder_is_written_with_its_figures(tmp_path, capsys):
    data, record = written(tmp_path, {"train": 2, "val": 4, "test": 3}, configs=20)
    first, second, gates = tmp_path / "a", tmp_path / "b", tmp_path / "gates"
    save_model(trained_like(0, members=1, data=record), first)
    save_problem_net(untrained_problem_net(CublasGate, seed=1), first)
    save_model(trained_like(1, members=1, data=record), second)
    gate = untrained_problem_net(CublasGate, seed=2)
    gate.card.metrics["validation"] = {"problems": 7, "sign_accuracy": 0.5}
    save_problem_net(gate, gates)
    out = tmp_path / "out"
    assert main(["average-models", str(first), str(second), "--data", str(data), "--out", str(out),
                 "--gate", str(gates)]) == 0
    assert f"the cuBLAS gate of {gates}" in capsys.readouterr().out
    assert (out / "cublas_gate.pt").read_bytes() == (gates / "cublas_gate.pt").read_bytes()
    card = MLPModel.load(out, "h100").card
    assert card.hyperparameters["gate"]["digest"] == gate.digest()
    assert card.metrics["cublas_gate"] == {"problems": 7, "sign_accuracy": 0.5}
    assert card.metrics["cublas_by_layout"]["nn"]["problems"] > 0  # recomputed for the gate written
    with pytest.raises(SystemExit):  # a folder without a gate: refused, nothing written
        main(["average-models", str(first), str(second), "--data", str(data), "--out", str(tmp_path / "no"),
              "--gate", str(second)])
    assert not (tmp_path / "no").exists()


def test_data_the_models_were_not_trained_on_is_refused_before_it_is_read(tmp_path, capsys):
    data, record = written(tmp_path, {"train": 1, "val": 2}, configs=10)
    for seed in (0, 1):
        save_model(trained_like(seed, members=1, data=record), tmp_path / f"m{seed}")
    other = tmp_path / "other.parquet"
    dataset.write(synthetic_frame({"train": 1, "val": 2}, configs_per_problem=10, seed=3), other)
    with pytest.raises(SystemExit) as exited:
        main(["average-models", str(tmp_path / "m0"), str(tmp_path / "m1"), "--data", str(other),
              "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    assert "trained on synthetic.parquet" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_command_refuses_one_folder(tmp_path, capsys):
    save_model(trained_like(0, members=2), tmp_path / "m")
    data = tmp_path / "d.parquet"
    dataset.write(synthetic_frame({"train": 1, "val": 1}, configs_per_problem=10), data)
    with pytest.raises(SystemExit) as exited:
        main(["average-models", str(tmp_path / "m"), "--data", str(data), "--out", str(tmp_path / "out")])
    assert exited.value.code == 2
    assert "two or more model folders" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_card_claiming_an_overlapping_one_keeps_the_larger_count_of_each_stratum():
    from kernel_select.offline.training.domain_claim import card_claiming

    own = trained_like(0, members=1).card.model_copy(update={
        "domain": Domain(strata={"mm/bfloat16/m<=16": 30}, m=(1, 16), n=(64, 4096), k=(64, 512))})
    start = trained_like(1, members=1).card.model_copy(update={
        "domain": Domain(strata={"mm/bfloat16/m<=16": 25, "bmm/float32/m<=256": 40}, m=(8, 256),
                         n=(16, 1024), k=(128, 8192))})
    assert card_claiming(own, start, overlapping=True).domain.strata == {
        "bmm/float32/m<=256": 40, "mm/bfloat16/m<=16": 30}
    assert card_claiming(own, start).domain.strata == {"bmm/float32/m<=256": 40, "mm/bfloat16/m<=16": 55}
