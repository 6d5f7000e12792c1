"""`evaluate_splits`: one report per frozen held-out split, and the shipped method named."""

from __future__ import annotations

import hashlib
import json
import math

import pytest

from kernel_select.cli import main
from kernel_select.model import load_default
from kernel_select.offline.data import dataset, problem_ids, splits
from kernel_select.offline.training import held_out_slice
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
    assert set(report["splits"]) == {"test", "family", "unseen"}
    assert report["splits"]["unseen"] == {"split": "unseen", "problems": 0,
                                          "skipped": "no problems in split 'unseen'"}
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
    assert main(["eval", "--data", str(data), "--model", "analytical", "--json-out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert set(written["splits"]) == {"test", "family", "unseen"}
    assert written["shipped"] == load_default("h100").name
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


# -- the pinned slice ------------------------------------------------------------------------------------

def test_the_slice_is_the_problems_with_the_smallest_hashes_whatever_else_is_there():
    ids = [problem_ids.problem_id(m, 64, 64, "bfloat16") for m in range(1, 200)]
    chosen = held_out_slice.slice_ids(ids, 10)
    assert len(chosen) == 10 and chosen == sorted(chosen) == held_out_slice.slice_ids(reversed(ids), 10)
    by_hash = sorted(ids, key=lambda pid: hashlib.sha256(pid.encode()).hexdigest())
    assert set(chosen) == set(by_hash[:10])
    # problems that hash higher do not change the choice; fewer problems than asked: all of them
    assert held_out_slice.slice_ids(by_hash[:10] + by_hash[150:], 10) == chosen
    assert held_out_slice.slice_ids(ids[:3], 10) == sorted(ids[:3])


def test_pinned_scores_the_shipped_model_on_the_slice_as_the_split_report_scores_it(data, monkeypatch):
    monkeypatch.setattr(held_out_slice, "SLICE_PROBLEMS", 3)
    report = evaluate_splits(data, ("mlp",), random_seeds=2)
    pinned, shipped = report["pinned"], load_default("h100")
    assert report["splits"]["test"]["problems"] > 3  # so the slice of `test` is a choice
    assert pinned["digest"] == shipped.digest() and pinned["ks"] == [1, 4]
    frame = dataset.read(data)
    for split in ("test", "family"):
        scored = set(frame.loc[splits.split_masks(frame)[split], "problem_id"])
        ids = pinned["splits"][split]["problems"]
        assert ids == held_out_slice.slice_ids(scored, 3) and len(ids) == min(3, len(scored))
        # every problem of these small splits is among the 10 worst: the report's own per-problem scores
        worst = report["splits"][split]["methods"]["mlp"]["worst"]
        for k in ("1", "4"):
            per_problem = {entry["problem_id"]: entry["score"] for entry in worst[k]}
            expected = math.exp(sum(math.log(per_problem[pid]) for pid in ids) / len(ids))
            assert pinned["splits"][split]["topk"][k] == pytest.approx(expected, rel=1e-12)
        assert 0 < pinned["splits"][split]["calibration_median_abs_log_top16"] < 10


def test_cli_eval_writes_the_rows_of_exactly_the_pinned_problems(data, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(held_out_slice, "SLICE_PROBLEMS", 2)
    out, rows = tmp_path / "eval.json", tmp_path / "slice.parquet"
    assert main(["eval", "--data", str(data), "--model", "mlp", "--json-out", str(out),
                 "--pinned-rows", str(rows)]) == 0
    pinned = json.loads(out.read_text())["pinned"]
    named = set(pinned["splits"]["test"]["problems"]) | set(pinned["splits"]["family"]["problems"])
    written, frame = dataset.read(rows), dataset.read(data)
    masks = splits.split_masks(frame)
    expected = {pid for split in ("test", "family")
                for pid in held_out_slice.slice_ids(frame.loc[masks[split], "problem_id"], 2)}
    assert named == expected and set(written["problem_id"]) == named
    assert len(written) == frame["problem_id"].isin(named).sum()  # every row of them, aten rows too
    printed = capsys.readouterr().out
    assert "pinned [test] 2 problems: top-1 " in printed
    assert f"the rows of the {len(named)} pinned problems" in printed


def test_pinned_rows_need_the_held_out_splits(data, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--data", str(data), "--split", "test", "--pinned-rows", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and "--pinned-rows" in err
    assert not (tmp_path / "x").exists()
