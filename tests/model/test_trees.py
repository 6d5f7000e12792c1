"""The numpy tree walk (model/trees.py): it sends every row to the leaf a plain recursive walk finds,
features of one value in every row included, and a file that does not hold trees is refused."""

from __future__ import annotations

import math
import zipfile

import numpy as np
import pytest

from kernel_select.errors import ModelCardMismatchError
from kernel_select.model.gbdt import GBDTModel
from kernel_select.model.trees import ARRAYS, TreeEnsemble
from tests.model_contract import MODEL_CHECKS
from tests.synthetic import random_gbdt

FEATURES = 5


def random_tree(rng: np.random.Generator, depth: int) -> dict:
    """A LightGBM-dump-shaped tree: random splits down to `depth`, some branches stopping early."""
    if depth == 0 or (depth < 3 and rng.random() < 0.3):
        return {"leaf_value": float(rng.normal())}
    return {"split_feature": int(rng.integers(FEATURES)), "threshold": float(rng.normal()),
            "decision_type": "<=", "missing_type": "None", "default_left": True,
            "left_child": random_tree(rng, depth - 1), "right_child": random_tree(rng, depth - 1)}


def reference(trees: list[dict], row: np.ndarray) -> float:
    """The sum of the leaves a recursive walk reaches, LightGBM's rule: left where x <= threshold."""
    total = 0.0
    for node in trees:
        while "leaf_value" not in node:
            go_left = float(row[node["split_feature"]]) <= node["threshold"]
            node = node["left_child"] if go_left else node["right_child"]
        total += node["leaf_value"]
    return total


@pytest.fixture(scope="module")
def nested() -> list[dict]:
    rng = np.random.default_rng(0)
    return [random_tree(rng, int(rng.integers(1, 7))) for _ in range(40)] + [{"leaf_value": 0.25}]


def test_the_walk_reaches_the_leaves_a_recursive_walk_reaches(nested):
    ensemble = TreeEnsemble.from_nested(nested, FEATURES)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, FEATURES)).astype(np.float32)
    x[:, 2] = np.float32(0.1)  # one value in every row: its nodes are decided once for the call
    x[::7, 0] = x[0, 0]
    expected = np.array([reference(nested, row) for row in x])
    np.testing.assert_allclose(ensemble.raw(x), expected, rtol=0, atol=1e-12)


def test_a_row_scores_the_same_alone_and_among_others(nested):
    # alone, every feature holds one value: the whole walk is decided by the constant-feature pass
    ensemble = TreeEnsemble.from_nested(nested, FEATURES)
    x = np.random.default_rng(2).normal(size=(50, FEATURES)).astype(np.float32)
    together = ensemble.raw(x)
    alone = np.array([ensemble.raw(x[i:i + 1])[0] for i in range(len(x))])
    np.testing.assert_allclose(alone, together, rtol=0, atol=1e-12)


def test_a_value_equal_to_the_threshold_goes_left():
    tree = {"split_feature": 0, "threshold": 0.5, "decision_type": "<=", "missing_type": "None",
            "left_child": {"leaf_value": 1.0}, "right_child": {"leaf_value": 2.0}}
    ensemble = TreeEnsemble.from_nested([tree], 1)
    assert ensemble.raw(np.array([[0.5], [0.5000001], [0.4]])).tolist() == [1.0, 2.0, 1.0]


def test_no_rows_give_no_outputs_and_a_wrong_width_is_refused(nested):
    ensemble = TreeEnsemble.from_nested(nested, FEATURES)
    assert ensemble.raw(np.zeros((0, FEATURES), np.float32)).shape == (0,)
    with pytest.raises(ValueError, match="features"):
        ensemble.raw(np.zeros((3, FEATURES + 1), np.float32))


def test_arrays_survive_a_file_round_trip(nested, tmp_path):
    ensemble = TreeEnsemble.from_nested(nested, FEATURES)
    path = tmp_path / "t.npz"
    path.write_bytes(ensemble.to_npz())
    loaded = TreeEnsemble.load(path, "hint")
    x = np.random.default_rng(3).normal(size=(20, FEATURES)).astype(np.float32)
    np.testing.assert_array_equal(loaded.raw(x), ensemble.raw(x))
    assert (loaded.n_trees, loaded.n_nodes, loaded.max_depth) == (ensemble.n_trees, ensemble.n_nodes,
                                                                   ensemble.max_depth)


@pytest.mark.parametrize("decision, missing", [("==", "None"), ("<=", "Zero")])
def test_splits_the_walk_does_not_implement_are_refused(decision, missing):
    tree = {"split_feature": 0, "threshold": 0.0, "decision_type": decision, "missing_type": missing,
            "left_child": {"leaf_value": 1.0}, "right_child": {"leaf_value": 2.0}}
    with pytest.raises(ModelCardMismatchError, match="type"):
        TreeEnsemble.from_nested([tree], 1)


def _save(ensemble: TreeEnsemble, path, **changes) -> None:
    arrays = {name: getattr(ensemble, name) for name in ARRAYS}
    arrays.update(n_features=np.int64(ensemble.n_features), max_depth=np.int64(ensemble.max_depth))
    arrays.update(changes)
    np.savez(path, **arrays)


def _broken(ensemble: TreeEnsemble, rule: str) -> dict:
    children, feature = ensemble.children.copy(), ensemble.feature.copy()
    threshold, value = ensemble.threshold.copy(), ensemble.value.copy()
    internal = int(np.flatnonzero(children[:, 0] != np.arange(len(children)))[0])
    if rule == "cycle":
        children[internal + 1] = [internal, internal]  # a child that points back up
        return {"children": children}
    if rule == "feature":
        feature[internal] = FEATURES
        return {"feature": feature}
    if rule == "threshold":
        threshold[internal] = math.nan
        return {"threshold": threshold}
    if rule == "value":
        value[-1] = math.inf
        return {"value": value}
    if rule == "depth":
        return {"max_depth": np.int64(ensemble.max_depth - 1)}
    if rule == "dtype":
        return {"children": children.astype(np.float64)}
    if rule == "shared child":
        children[internal, 1] = children[internal, 0]
        return {"children": children}
    raise AssertionError(rule)


@pytest.mark.parametrize("rule, message", [
    ("cycle", "after its parent"), ("feature", "feature outside"), ("threshold", "threshold"),
    ("value", "leaf value"), ("depth", "levels deep"), ("dtype", "float64"), ("shared child", "not a forest"),
])
def test_arrays_that_are_not_trees_are_refused_naming_the_file(nested, tmp_path, rule, message):
    ensemble = TreeEnsemble.from_nested(nested, FEATURES)
    path = tmp_path / "t.npz"
    _save(ensemble, path, **_broken(ensemble, rule))
    with pytest.raises(ModelCardMismatchError, match=message) as caught:
        TreeEnsemble.load(path, "the hint")
    assert str(path) in str(caught.value) and "the hint" in str(caught.value)


def test_a_file_that_is_not_a_tree_archive_is_refused(nested, tmp_path):
    ensemble = TreeEnsemble.from_nested(nested, FEATURES)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(ensemble.to_npz()[:200])
    with pytest.raises(ModelCardMismatchError, match="cannot be read"):
        TreeEnsemble.load(truncated, "hint")
    missing = tmp_path / "missing.npz"
    np.savez(missing, feature=ensemble.feature)
    with pytest.raises(ModelCardMismatchError, match="no array"):
        TreeEnsemble.load(missing, "hint")
    pickled = tmp_path / "pickled.npz"
    with zipfile.ZipFile(pickled, "w") as archive:  # an object array needs pickle, which is refused
        for name in ("feature", "threshold", "children", "value", "roots", "n_features", "max_depth"):
            with archive.open(f"{name}.npy", "w") as f:
                np.lib.format.write_array(f, np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ModelCardMismatchError, match="cannot be read"):
        TreeEnsemble.load(pickled, "hint")


@pytest.mark.parametrize("check", MODEL_CHECKS, ids=lambda check: check.__name__)
def test_a_gbdt_keeps_the_estimator_contract_without_lightgbm(check):
    # tests/model/test_gbdt.py checks fitted trees where LightGBM is installed; these random ones need
    # numpy only. The contract also scores float32 problems, which the trees read like any other.
    model = random_gbdt(trees=30, leaves=15)
    check(GBDTModel(model.device, model.trees,
                    model.card.model_copy(update={"dtypes": ["bfloat16", "float16", "float32"]})))
