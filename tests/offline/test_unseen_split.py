"""The `unseen` split: drawn by its own generator, frozen in data/shapes_unseen.json, never trained on."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd

from kernel_select.offline.data import splits, unseen
from kernel_select.offline.data.problem_ids import problem_id

ROOT = Path(__file__).resolve().parents[2]
FROZEN = ROOT / "data" / "shapes_unseen.json"


def _id(entry: dict) -> str:
    return problem_id(int(entry["m"]), int(entry["n"]), int(entry["k"]), str(entry["dtype"]),
                      str(entry.get("op", "mm")), int(entry.get("batch", 1)), str(entry.get("layout", "nn")))


def test_the_committed_split_is_the_generators_output():
    assert json.loads(FROZEN.read_text()) == unseen.shapes(), (
        "data/shapes_unseen.json no longer matches offline/data/unseen.py: the split is frozen; "
        "restore the generator rather than rewriting the file")


def test_it_spans_every_dtype_layout_alignment_class_and_is_thirty_percent_batched():
    entries = unseen.shapes()
    assert len(entries) >= 300 and len({_id(e) for e in entries}) == len(entries)
    ops = Counter(e["op"] for e in entries)
    assert ops["bmm"] / len(entries) >= 0.29
    assert {e["dtype"] for e in entries} == set(unseen.DTYPES)
    assert {e["layout"] for e in entries if e["op"] == "mm"} == set(unseen.LAYOUTS)
    classes = {("odd" if e["n"] % 2 else e["n"] % 16) for e in entries if e["op"] == "mm"}
    assert classes == {"odd", 2, 4, 8, 0}
    assert all(e["batch"] * e["m"] * e["n"] * e["k"] <= unseen.MAX_MACS for e in entries)
    assert all(unseen.is_unseen_family(e["family"]) for e in entries)


def test_no_other_plan_draws_a_problem_of_the_split_except_under_its_own_family():
    # A training plan never lists one; a re-timing plan (shapes_literal_h200*.json re-time measured
    # problems as Inductor's kernels run) may, carrying the `unseen-` family that keeps its rows held out.
    split = {_id(e) for e in unseen.shapes()}
    others = [(path.name, e) for path in splits.default_shapes_files() if path != FROZEN
              for e in json.loads(path.read_text())]
    drawn = [(name, e.get("family", "")) for name, e in others if _id(e) in split]
    assert all(unseen.is_unseen_family(family) for _, family in drawn), drawn
    assert all(name.startswith("shapes_literal_h200") for name, _ in drawn), drawn


def test_unseen_rows_are_their_own_split_and_never_trained_on():
    entries = unseen.shapes()[:3]
    odd = next(e for e in unseen.shapes() if e["n"] % 2 and e["k"] % 2)  # would be `family` elsewhere
    rows = [*entries, odd, {"m": 64, "n": 64, "k": 64, "dtype": "bfloat16", "family": "random"}]
    frame = pd.DataFrame({"problem_id": [_id(e) for e in rows], "n": [e["n"] for e in rows],
                          "k": [e["k"] for e in rows], "family": [e["family"] for e in rows],
                          "split": ["train"] * len(rows)})
    masks = splits.split_masks(frame, shapes_files=[])
    assert masks["unseen"].tolist() == [True, True, True, True, False]
    assert not (masks["train"] | masks["val"] | masks["family"])[:4].any()
    assert masks["train"][4]


def test_every_committed_plan_names_a_collection_pass_the_dataset_accepts():
    # The unseen plan's rows were once refused at the first append on the GPU: its entries say
    # "pass": "unseen", which the dataset schema did not list.
    from kernel_select.offline.data.dataset import PASSES

    for plan in sorted((ROOT / "data").glob("shapes_*.json")):
        passes = {entry.get("pass", "coverage") for entry in json.loads(plan.read_text())}
        assert passes <= set(PASSES), (plan.name, passes - set(PASSES))


def test_unseen_rows_that_hash_into_test_stay_out_of_test():
    # Reading the unseen file beside the others (data/h100*.parquet) must not move the `test` figures.
    entries = unseen.shapes()[:4]
    frame = pd.DataFrame({"problem_id": [_id(e) for e in entries] + ["random"],
                          "n": [e["n"] for e in entries] + [64], "k": [e["k"] for e in entries] + [64],
                          "family": [e["family"] for e in entries] + ["random"], "split": ["test"] * 5})
    masks = splits.split_masks(frame, shapes_files=[])
    assert masks["test"].tolist() == [False, False, False, False, True]
    assert masks["unseen"][:4].all()
