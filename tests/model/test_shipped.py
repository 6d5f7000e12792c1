"""The shipped models: which ones each device folder carries, what their cards say, and that a broken
file is a ModelError naming the file and the fix. (Which folder serves a device: test_folders.py.)"""

from __future__ import annotations

import json
import logging
import shutil

import pytest
import torch
from tests.synthetic import untrained_mlp

from kernel_select.errors import ModelCardMismatchError, NoTrainedModelError
from kernel_select.model import load_default, load_gate
from kernel_select.model.card import ModelCard
from kernel_select.model.cublas import CublasGate
from kernel_select.model.mlp import CARD_FILE, WEIGHTS_FILE, MLPModel
from kernel_select.resources import MODELS_DIR_ENV, shipped_dir

SHIPPED = shipped_dir("models")


@pytest.fixture
def models(tmp_path, monkeypatch):
    """A private copy of the shipped h100 folder, as the user's model directory."""
    shutil.copytree(SHIPPED / "h100", tmp_path / "h100")
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    return tmp_path


@pytest.fixture
def shipped_only(tmp_path, monkeypatch):
    """An empty user model directory: the shipped models serve."""
    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


class _RunsCode:
    def __reduce__(self):
        return (print, ("this pickle ran code",))


@pytest.mark.parametrize("breakage, message", [
    (lambda d: _truncate(d / WEIGHTS_FILE), "cannot be loaded as weights"),
    (lambda d: torch.save({"x": _RunsCode()}, d / WEIGHTS_FILE), "cannot be loaded as weights"),
    (lambda d: (d / CARD_FILE).write_text("{not json"), "line 1 column 2: invalid JSON"),
    (lambda d: (d / CARD_FILE).write_bytes(b"\xff\xfe garbage"), "byte 0: not valid UTF-8"),
    (lambda d: (d / CARD_FILE).write_text(json.dumps({
        **json.loads((d / CARD_FILE).read_text()), "feature_version": 99})), "feature_version 99"),
])
def test_a_broken_model_file_is_a_model_error_naming_file_and_fix(models, breakage, message, capsys):
    breakage(models / "h100")
    with pytest.raises(ModelCardMismatchError, match=message) as info:
        MLPModel.load(models / "h100", "h100")
    assert str(models / "h100") in str(info.value) and "kernel-select train" in str(info.value)
    assert "this pickle ran code" not in capsys.readouterr().out
    # torch's advice to load the file anyway is not passed on: the load stays weights_only=True
    for advice in ("weights_only", "trusted source", "safe_globals", "Re-running"):
        assert advice not in str(info.value)


def test_a_checkpoint_that_would_run_code_names_what_it_holds(models, capsys):
    torch.save({"x": _RunsCode()}, models / "h100" / WEIGHTS_FILE)
    with pytest.raises(ModelCardMismatchError) as info:
        MLPModel.load(models / "h100", "h100")
    message = str(info.value)
    assert message.startswith(f"{models / 'h100' / WEIGHTS_FILE}: cannot be loaded as weights (it holds more "
                              "than tensors, which are all a weights file may hold: ")
    assert "print" in message.split("); ")[0]  # torch names the global it refused: builtins.print
    assert "this pickle ran code" not in capsys.readouterr().out


def test_load_default_raises_when_the_model_serving_the_device_is_broken(models, caplog):
    _truncate(models / "h100" / WEIGHTS_FILE)
    with caplog.at_level(logging.INFO, logger="kernel_select"), \
            pytest.raises(ModelCardMismatchError, match="cannot be loaded as weights") as info:
        load_default("h100")
    assert str(models / "h100" / WEIGHTS_FILE) in str(info.value) and "kernel-select train" in str(info.value)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_device_without_a_model_raises_no_trained_model_error_quietly(shipped_only, caplog):
    with caplog.at_level(logging.INFO, logger="kernel_select"), pytest.raises(NoTrainedModelError):
        load_default("a100")
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("device", ["h100", "h200"])
def test_each_device_with_its_own_folder_gets_its_own_mlp(device, shipped_only, caplog):
    with caplog.at_level(logging.WARNING, logger="kernel_select"):
        model = load_default(device)
    assert isinstance(model, MLPModel) and model.card.device == model.device.key == device
    assert f"mlp model for {device}" in model.describe() and "measured on" not in model.describe()
    # its data files include the `unseen` split's, which it never trained on: the line says so
    assert f"{device}_unseen.parquet" in model.describe() and "held-out problems left out" in model.describe()
    assert not [r for r in caplog.records if "no mlp model" in r.getMessage()]


def test_the_h200_ships_its_own_cublas_head_and_gate(shipped_only):
    # Trained on the H200 files (2,303 train and val problems, float32 batched GEMMs and output heads
    # among them), the H200 gate's sign accuracy on the held-out splits is 0.84-0.88 against the H100
    # gate's 0.73-0.79 there (docs/results.md, "Selection quality on the H200"): the folder ships both.
    model, gate = load_default("h200"), load_gate("h200")
    shipped = sorted(path.name for path in (SHIPPED / "h200").iterdir())
    assert shipped == ["aten.json", "aten.pt", "cublas_gate.json", "cublas_gate.pt", "cublas_gate_bmm.json",
                       "cublas_gate_bmm.pt", "eval.json", "mlp.json", "mlp.pt"]
    assert model.aten is not None and model.aten.card.device == "h200" and model.aten.device.key == "h200"
    assert gate is not None and gate.card.device == "h200" and gate.device.key == "h200"
    # and its network for batched GEMMs, trained on the H200 files' 827 batched train problems
    assert gate.batched is not None and gate.batched.card.metrics["train_problems"] >= 100
    assert gate.card.metrics["validation"]["batched"] == gate.batched.card.metrics["validation"]
    assert load_gate("h100").batched is None  # the H100 gate has none: batched GEMMs are benchmarked
    # each network the mean of four seeds (model.cublas.MemberMean); the H100's, trained before, is one
    assert gate.card.architecture.members == gate.batched.card.architecture.members == 4
    assert load_gate("h100").card.architecture.members == 1


def test_the_h200_model_is_a_fine_tune_that_weighs_the_literal_rows_and_keeps_the_h100_strata():
    h200, h100 = MLPModel.load(SHIPPED / "h200", "h200"), MLPModel.load(SHIPPED / "h100", "h100")
    hyper = h200.card.hyperparameters
    # fine-tuned from an H200 model (an H100 model fine-tuned, beside that H100 model's members): four
    # wide networks, which ranked better than eight narrow ones at 1.7x the cost (docs/results.md)
    assert hyper["init"]["device"] == "h200" and hyper["members"] == 4
    assert h200.card.hidden_widths == [256, 128, 64]
    # the small-M problems timed as Inductor runs them weigh 8x the shared-binary rows (docs/design.md)
    assert hyper["weights"]["h200_literal.parquet"]["factor"] == 8.0
    assert hyper["weights"]["h200_literal.parquet"]["train_problems"] >= 300
    assert hyper["weights"]["h200_literal_m17_32.parquet"]["factor"] == 8.0
    # the large-M rows put window attention's first-stage layers (M = 100,352) inside the domain, and
    # the start's card (which recorded no work bound) must not have erased the fine-tune's: without
    # it a float32 LM head 24x its stratum's largest problem would count as inside (card.WORK_SLACK)
    domain = h200.card.domain
    assert domain.m[1] >= 262_144 and domain.work["mm/float32/m>4096"] > 0
    assert set(domain.work) == set(domain.strata)
    # --claim-init-domain: an H200 GEMM in an H100 stratum is ranked, not sent to Inductor's list
    assert all(h200.card.domain.strata.get(key, 0) >= count for key, count in h100.card.domain.strata.items())
    # --gate: the previous gate, which beat a refit on `unseen` (docs/results.md), is written with it
    assert hyper["gate"]["digest"] == CublasGate.load(SHIPPED / "h200", "h200").digest()
    trained_on = [f.file for f in h200.card.data.files]
    assert "h200_round3.parquet" in trained_on and "h200_unseen.parquet" in trained_on  # read, masked out
    assert {"h200_heads.parquet", "h200_round3_fp32.parquet", "h200_literal.parquet", "h200_large_m.parquet",
            "h200_literal_m17_32.parquet", "h200_round3_mm.parquet"} <= set(trained_on)
    assert all(name.startswith("h200") for name in trained_on)
    assert h200.card.data.device_names == ["NVIDIA H200"]


# the H100's eval.json: tests/model/test_held_out_scores.py, which also recomputes its pinned scores
@pytest.mark.parametrize("device", ["h200"])
def test_each_shipped_eval_json_scores_the_model_shipped_beside_it(device):
    """eval.json is the shipped model's report (README and docs quote it): a model or card written
    after it (a retrained gate recorded in the card changes the digest too) must be scored again."""
    report = json.loads((SHIPPED / device / "eval.json").read_text())
    model = MLPModel.load(SHIPPED / device, device)
    assert report["pinned"]["digest"] == model.digest(), (
        f"models/{device}/eval.json scores another model: kernel-select eval --data 'data/{device}*.parquet' "
        f"--json-out models/{device}/eval.json")
    assert report["pinned"]["model"] == report["shipped_model"] == model.describe()


def test_an_a100_never_borrows_the_h100_model(models):
    with pytest.raises(NoTrainedModelError, match="no trained model for a100"):
        load_default("a100")
    assert load_gate("a100") is None


def test_a_schema_v1_card_is_read_as_v2():
    card = untrained_mlp().card.model_dump(mode="json")
    v1 = {k: v for k, v in card.items() if k not in ("architecture", "versions", "model", "schema_version")}
    v1 |= {"schema_version": 1, "model": "mlp", "hidden_widths": card["architecture"]["hidden_widths"],
           "trainer": {"torch": "2.11.0"}}
    upgraded = ModelCard.model_validate(v1)
    assert upgraded.architecture.model_dump() == card["architecture"]
    assert upgraded.versions == {"torch": "2.11.0"} and upgraded.schema_version == 2


@pytest.mark.parametrize("device, stems", [("h100", ("mlp", "aten", "cublas_gate")),
                                            ("h200", ("mlp", "aten"))])
def test_shipped_checkpoints_carry_their_architecture(device, stems):
    for stem in stems:
        card = ModelCard.model_validate_json((SHIPPED / device / f"{stem}.json").read_text())
        activation = {"mlp": "relu", "aten": "silu", "cublas_gate": "silu"}[stem]
        assert card.model == stem and card.device == device and card.architecture.activation == activation
        assert card.architecture.inputs == len(card.feature_names) == len(card.feature_mean)


def test_the_shipped_model_ranks_one_size_differently_per_layout():
    """Features from version 4 on read the layout: GPT-2's LM head (x @ W.t(), "nt") and the same sizes in the
    other layouts get different orders, while a model without the layout columns would score all
    three alike."""
    import numpy as np

    from kernel_select.problem import Problem
    from kernel_select.space import for_problem

    model = MLPModel.load(SHIPPED / "h100", "h100")
    assert model.card.feature_version >= 4 and model.trained_layouts() == ("nn", "nt", "tn")
    configs = for_problem(Problem(1024, 50257, 768, "bfloat16"), "h100")
    firsts = {layout: tuple(np.argsort(model.estimate(Problem(1024, 50257, 768, "bfloat16", layout=layout),
                                                      configs), kind="stable")[:4])
              for layout in ("nn", "nt", "tn")}
    assert len(set(firsts.values())) == 3


def test_the_fix_for_a_shipped_model_never_touches_the_shipped_folder(monkeypatch, tmp_path):
    # issue 43 row 14: `eval --mlp-dir models/h200` on H100 data advised retraining into, or deleting,
    # the shipped h200 folder
    from kernel_select.model.checkpoint import retrain_hint
    from kernel_select.resources import MODELS_DIR_ENV, shipped_dir

    monkeypatch.setenv(MODELS_DIR_ENV, str(tmp_path))
    shipped = shipped_dir("models") / "h200"
    hint = retrain_hint(shipped, "h100")
    assert "delete" not in hint and f"--out {shipped}" not in hint
    assert "leave it as it is" in hint and f"--out {tmp_path / 'h100'} --device h100" in hint
    assert "delete the folder" in retrain_hint(tmp_path / "mine", "h100")  # a folder of one's own
