"""`evaluate_splits`: one report per frozen held-out split, and the shipped method named."""

from __future__ import annotations

import json

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
