"""The frozen evaluation splits: the hash `test` split is untouched, `family` holds out whole families."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kernel_select.errors import DatasetError
from kernel_select.offline.data import dataset, splits


def _frame(rows):
    out = pd.DataFrame(rows, columns=["m", "n", "k", "dtype"])
    out["problem_id"] = [dataset.problem_id(m, n, k, d) for m, n, k, d in rows]
    out["split"] = out["problem_id"].map(dataset.split_of)
    return out


@pytest.fixture
def shapes(tmp_path):
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([
        {"m": 64, "n": 8192, "k": 8192, "dtype": "bfloat16", "source": "llama3-70b q_proj"},
        {"m": 394, "n": 768, "k": 768, "dtype": "bfloat16", "source": "vit-b16 qkv"},
        {"m": 64, "n": 4096, "k": 4096, "dtype": "bfloat16", "source": "llama3-8b q_proj"},
        # the same shape under a trained and a held-out family: held out wins
        {"m": 32, "n": 3072, "k": 3072, "dtype": "bfloat16", "source": "gpt2 c_fc"},
        {"m": 32, "n": 3072, "k": 3072, "dtype": "bfloat16", "source": "phi3-mini o_proj"},
    ]))
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
    frame = dataset.read(splits._DATA_DIR / "h100.parquet")
    counts = splits.split_summary(frame)
    assert counts["test"] == frame.loc[frame["split"] == "test", "problem_id"].nunique() == 72
    assert 80 <= counts["family"] <= 160  # ~a quarter of today's 457 problems
    masks = splits.split_masks(frame)
    held_out = frame.loc[masks["test"] | masks["family"], "problem_id"].nunique()
    assert counts["train"] + counts["val"] + held_out == frame["problem_id"].nunique()


def test_unknown_split_name_is_refused(shapes):
    with pytest.raises(DatasetError, match="expected one of"):
        splits.split_rows(_frame([(64, 4096, 4096, "bfloat16")]), "holdout", shapes)
