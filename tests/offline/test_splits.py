"""The frozen evaluation splits: the hash `test` split is untouched, `family` holds out whole families."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel_select.errors import DatasetError
from kernel_select.offline.data import dataset, problem_ids, splits
from kernel_select.offline.data.unseen import is_unseen_family
from tests.strategies import examples


def _frame(rows):
    out = pd.DataFrame(rows, columns=["m", "n", "k", "dtype"])
    out["problem_id"] = [problem_ids.problem_id(m, n, k, d) for m, n, k, d in rows]
    out["split"] = out["problem_id"].map(splits.split_of)
    return out


_SHAPES = [
    {"m": 64, "n": 8192, "k": 8192, "dtype": "bfloat16", "source": "llama3-70b q_proj"},
    {"m": 394, "n": 768, "k": 768, "dtype": "bfloat16", "source": "vit-b16 qkv"},
    {"m": 64, "n": 4096, "k": 4096, "dtype": "bfloat16", "source": "llama3-8b q_proj"},
    # the same shape under a trained and a held-out family: held out wins
    {"m": 32, "n": 3072, "k": 3072, "dtype": "bfloat16", "source": "gpt2 c_fc"},
    {"m": 32, "n": 3072, "k": 3072, "dtype": "bfloat16", "source": "phi3-mini o_proj"},
]


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    path = tmp_path_factory.mktemp("shapes") / "shapes.json"
    path.write_text(json.dumps(_SHAPES))
    return [path]


def test_held_out_families_and_odd_n_with_odd_k_form_the_family_split(shapes):
    frame = _frame([(64, 8192, 8192, "bfloat16"), (394, 768, 768, "bfloat16"), (64, 4096, 4096, "bfloat16"),
                    (32, 3072, 3072, "bfloat16"), (100, 1001, 513, "float16"), (7, 512, 256, "float32"),
                    (100, 1001, 512, "float16"), (100, 1000, 513, "float16")])
    masks = splits.split_masks(frame, shapes)
    # odd N is trained on with even K, odd K with even N; only the pair is held out
    assert masks["family"].tolist() == [True, True, False, True, True, False, False, False]
    # trainable = the hash split's train/val minus the family holdout; test is the hash split as is
    assert np.array_equal(masks["test"], frame["split"].to_numpy() == "test")
    assert not (masks["family"] & (masks["train"] | masks["val"])).any()
    assert not (masks["test"] & (masks["train"] | masks["val"])).any()


def test_a_family_column_wins_over_the_shapes_files(shapes):
    frame = _frame([(64, 8192, 8192, "bfloat16"), (64, 4096, 4096, "bfloat16")])
    frame["family"] = ["llama3-8b", "ViT-B16"]  # case and extra words are normalized
    assert splits.split_masks(frame, shapes)["family"].tolist() == [False, True]
    frame["family"] = [None, ""]  # unset: fall back to the shapes files
    assert splits.split_masks(frame, shapes)["family"].tolist() == [True, False]


def test_the_shipped_dataset_keeps_its_hash_test_split():
    frame = dataset.read(splits.DATA_DIR / "h100.parquet")
    counts = splits.split_summary(frame)
    assert counts["test"] == frame.loc[frame["split"] == "test", "problem_id"].nunique() == 72
    assert 80 <= counts["family"] <= 160  # ~a quarter of today's 457 problems
    masks = splits.split_masks(frame)
    held_out = frame.loc[masks["test"] | masks["family"], "problem_id"].nunique()
    assert counts["train"] + counts["val"] + held_out == frame["problem_id"].nunique()


def test_unknown_split_name_is_refused(shapes):
    with pytest.raises(DatasetError, match="expected one of"):
        splits.split_rows(_frame([(64, 4096, 4096, "bfloat16")]), "holdout", shapes)


# A row-wise reference for the property below: the masks as the module docstring defines them,
# worked out one row at a time.
def _row_by_row(frame: pd.DataFrame, shapes: list) -> tuple[list[str], dict[str, list[bool]]]:
    mapped = splits.families_from_shapes(shapes)
    families, masks = [], {name: [] for name in (*splits.TRAINING_SPLITS, *splits.EVAL_SPLITS)}
    for row in frame.to_dict("records"):
        own = row.get("family")
        words = [] if own is None or pd.isna(own) else str(own).strip().lower().split()
        family = words[0] if words else mapped.get(row["problem_id"], splits.UNKNOWN_FAMILY)
        unseen = is_unseen_family(family)
        odd_n_and_k = row["n"] % 2 == 1 and row["k"] % 2 == 1
        held_out = (family in splits.HELD_OUT_FAMILIES or odd_n_and_k) and not unseen
        families.append(family)
        masks["train"].append(row["split"] == "train" and not held_out and not unseen)
        masks["val"].append(row["split"] == "val" and not held_out and not unseen)
        masks["test"].append(row["split"] == "test" and not unseen)
        masks["family"].append(held_out)
        masks["unseen"].append(unseen)
    return families, masks


# Problems of the shapes files and others; families set, unset, spelled loosely, held out and unseen.
_IDS = st.sampled_from([problem_ids.problem_id(s["m"], s["n"], s["k"], s["dtype"]) for s in _SHAPES]
                       + ["float16/mm/1x7x33x101", "float32/bmm/4x64x64x64/nt"])
_FAMILIES = st.sampled_from([None, "", "  ", "llama3-8b", " ViT-B16 qkv", "moe-experts", "gpt2 c_fc",
                             "unseen-bmm", "Unseen-odd", "random seed=1"])
_ROWS = st.lists(st.tuples(_IDS, _FAMILIES, st.sampled_from(["train", "val", "test"]),
                           st.sampled_from([1, 2, 33, 4096]), st.sampled_from([1, 64, 101])), max_size=40)


@examples(ci=300)
@given(_ROWS, st.booleans(), st.booleans())
def test_masks_and_families_worked_per_problem_are_those_worked_row_by_row(shapes, rows, with_family: bool,
                                                                           shuffled_index: bool):
    frame = pd.DataFrame(rows, columns=["problem_id", "family", "split", "n", "k"])
    frame = frame.astype({"problem_id": "string", "family": "string", "split": "string"})
    if not with_family:
        frame = frame.drop(columns="family")
    if shuffled_index:  # a filtered frame keeps its old index; the families keep it too
        frame.index = np.arange(len(frame))[::-1] * 3 + 7
    families, expected = _row_by_row(frame, shapes)
    got = splits.problem_families(frame, shapes)
    assert got.tolist() == families and got.index.equals(frame.index) and got.name == "family"
    masks = splits.split_masks(frame, shapes)
    assert {name: mask.tolist() for name, mask in masks.items()} == expected
    assert all(mask.dtype == bool for mask in masks.values())
