"""`evaluate_splits`: one report per frozen held-out split, and the shipped method named."""

from __future__ import annotations

import json
import math

import pytest

from kernel_select.cli import main
from kernel_select.model import load_default
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.training.evaluate import evaluate, evaluate_splits
from tests.synthetic import synthetic_frame


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "synthetic.parquet"
    frame = synthetic_frame({"train": 10, "val": 3, "test": 4}, configs_per_problem=40)
    assert (frame["n"] % 2 == 1).any() and (frame["n"] % 2 == 0).any()  # both sides of the odd-N class
    dataset.write(frame, path)
    return path


def test_both_held_out_splits_and_the_shipped_method(data):
    report = evaluate_splits(data, ("analytical",), random_seeds=2)
    assert set(report["splits"]) == {"test", "family"}
    assert report["shipped"] == load_default("h100").name
    frame = dataset.read(data)
    family_ids = set(frame.loc[splits.split_masks(frame)["family"], "problem_id"])
    assert report["splits"]["family"]["problems"] == len(family_ids)
    assert all(int(pid.rsplit("x", 2)[1]) % 2 == 1 for pid in family_ids)  # only odd N in synthetic data
    # the hash test split is scored exactly as before
    alone = evaluate(data, "test", ("analytical",), random_seeds=2)
    assert report["splits"]["test"]["methods"]["analytical"] == alone["methods"]["analytical"]


def test_cli_eval_json_writes_splits_and_shipped(data, tmp_path, capsys):
    out = tmp_path / "eval.json"
    assert main(["eval", "--data", str(data), "--model", "analytical", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    assert set(written["splits"]) == {"test", "family"} and written["shipped"]
    assert "[family]" in capsys.readouterr().out


def test_two_models_are_compared_over_both_held_out_splits_together(data, capsys):
    report = evaluate_splits(data, ("mlp", "analytical"), random_seeds=2)
    paired = report["paired"]
    assert paired["splits"] == ["test", "family"] and paired["reference"] == "mlp"
    per_split = {name: report["splits"][name]["paired"]["methods"]["analytical"] for name in paired["splits"]}
    together = paired["methods"]["analytical"]
    assert together["problems"] == sum(r["problems"] for r in per_split.values())
    # A geomean over all problems is the problem-weighted geomean of the two splits' geomeans.
    for k in ("1", "4"):
        weighted = sum(r["problems"] * math.log(r["ratio"][k]["ratio"]) for r in per_split.values())
        assert together["ratio"][k]["ratio"] == pytest.approx(math.exp(weighted / together["problems"]))
        assert together["ratio"][k]["low"] <= together["ratio"][k]["ratio"] <= together["ratio"][k]["high"]
    assert main(["eval", "--data", str(data), "--model", "mlp,analytical"]) == 0
    assert "paired bootstrap over the test and family splits together" in capsys.readouterr().out
