"""A trained tree ensemble as numpy arrays, and its prediction: the sum of each tree's leaf value.

The gradient-boosted model (model/gbdt.py) is fitted offline by LightGBM and exported to these arrays
(offline/training/gbdt_fit.py), so inference needs numpy alone. Every node of every tree is one entry
of flat arrays, trees one after another, each tree's nodes in preorder:

  feature    int32    the feature an internal node tests (0 for a leaf)
  threshold  float64  an internal node sends a row right when its feature > threshold, as LightGBM's
                      numerical split `<=` sends it left; +inf for a leaf, which so never moves
  children   int32    (nodes, 2): left and right child, global indices; a leaf is its own children
  value      float64  a leaf's output (0 for an internal node)
  roots      int32    each tree's first node

A child always comes after its parent (preorder), so every walk ends; `load` checks that and every
index, and `max_depth` bounds the walk. Features are compared in float64, as LightGBM compares them.

Prediction (`raw`) walks (row, tree) pairs a block of rows at a time, one level per step. One
problem's configs share its sizes, so many features hold one value in every row: the nodes that test
such a feature are decided once for the whole call (`_resolve_constant_nodes`), and the walk steps
only through the nodes that tell configs apart.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernel_select.errors import ModelCardMismatchError

#: Bounds on what a file may describe: a careless or hostile file must not make loading allocate
#: gigabytes (a model of 2,000 trees of 63 leaves has 250,000 nodes, 6 MB).
MAX_NODES = 4_000_000
MAX_TREES = 100_000
MAX_DEPTH = 64
MAX_FEATURES = 1024
#: (row, tree) pairs walked together: about 130 rows of a 400-tree model, whose walk arrays fit the cache.
WALK_BLOCK = 1 << 16
#: The arrays a file holds, with their dtypes.
ARRAYS = {"feature": np.int32, "threshold": np.float64, "children": np.int32, "value": np.float64,
          "roots": np.int32}


@dataclass(frozen=True, eq=False)
class TreeEnsemble:
    """Trees over `n_features` inputs; `raw(x)` is the sum of the leaf each tree sends each row to."""

    feature: np.ndarray
    threshold: np.ndarray
    children: np.ndarray
    value: np.ndarray
    roots: np.ndarray
    n_features: int
    max_depth: int

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    @property
    def n_nodes(self) -> int:
        return len(self.feature)

    def raw(self, x: np.ndarray) -> np.ndarray:
        """float64 (rows,): the ensemble's output for each row of `x` (rows, n_features)."""
        x = np.asarray(x)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected (rows, {self.n_features}) features, got {x.shape}")
        rows = len(x)
        if rows == 0:
            return np.zeros(0)
        values = x.astype(np.float64)
        children, roots = self._resolve_constant_nodes(values)
        is_leaf = self.threshold == math.inf
        flat = values.ravel()
        out = np.empty(rows)
        # A block of rows at a time: the walk's arrays (rows x trees) then stay in the CPU's cache,
        # three times faster over the ~1,200 configs of one GEMM than all rows at once.
        block = max(1, WALK_BLOCK // self.n_trees)
        for start in range(0, rows, block):
            stop = min(rows, start + block)
            node = np.repeat(roots[None, :], stop - start, axis=0)
            cell = np.arange(start, stop, dtype=np.intp)[:, None] * self.n_features  # each row's 1st feature
            for _ in range(self.max_depth):
                if is_leaf.take(node).all():
                    break
                right = flat.take(cell + self.feature.take(node)) > self.threshold.take(node)
                node = children.take(2 * node + right)
            out[start:stop] = self.value.take(node).sum(axis=1)
        return out

    def _resolve_constant_nodes(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Children and roots with every node that tests a feature of one value in all rows passed
        through: such a node sends every row the same way, so the walk need not step on it."""
        same = (values == values[0]).all(axis=0)  # (features,): one value in every row
        nodes = np.arange(self.n_nodes, dtype=np.int32)
        internal = self.children[:, 0] != nodes
        decided = internal & same[self.feature]
        if not decided.any():
            return self.children.ravel(), self.roots
        goes_right = values[0].take(self.feature) > self.threshold
        # where each node leads: a decided node to its child, any other node to itself; then follow
        # the chains by pointer doubling (each pass doubles the length resolved; chains are at most
        # max_depth long)
        target = np.where(decided, self.children[nodes, goes_right.astype(np.intp)], nodes)
        for _ in range(max(1, math.ceil(math.log2(self.max_depth + 1)))):
            target = target.take(target)
        # a leaf is its own target, so it stays its own children
        return target.take(self.children).ravel(), target.take(self.roots)

    # -- building, saving and loading -----------------------------------------------------------------

    @classmethod
    def from_nested(cls, trees: Sequence[Mapping[str, Any]], n_features: int) -> TreeEnsemble:
        """From LightGBM's `dump_model()["tree_info"][i]["tree_structure"]` dicts.

        Raises:
            ModelCardMismatchError: a split the numpy walk does not implement (categorical, or
                missing values treated as zero), or a tree deeper than MAX_DEPTH.
        """
        feature: list[int] = []
        threshold: list[float] = []
        children: list[list[int]] = []
        value: list[float] = []
        roots: list[int] = []
        depth = 0
        for tree in trees:
            roots.append(len(feature))
            # (node, its parent's index, 0 = left child or 1 = right, level)
            stack: list[tuple[Mapping[str, Any], int, int, int]] = [(tree, -1, 0, 0)]
            while stack:
                node, parent, side, level = stack.pop()
                index = len(feature)
                if parent >= 0:
                    children[parent][side] = index
                depth = max(depth, level)
                if "split_feature" not in node:  # a leaf
                    feature.append(0)
                    threshold.append(math.inf)
                    children.append([index, index])
                    value.append(float(node["leaf_value"]))
                    continue
                _check_split(node)
                feature.append(int(node["split_feature"]))
                threshold.append(float(node["threshold"]))
                children.append([-1, -1])
                value.append(0.0)
                # preorder: the left subtree first, so push it last
                stack.append((node["right_child"], index, 1, level + 1))
                stack.append((node["left_child"], index, 0, level + 1))
        ensemble = cls(feature=np.asarray(feature, np.int32), threshold=np.asarray(threshold, np.float64),
                       children=np.asarray(children, np.int32).reshape(-1, 2),
                       value=np.asarray(value, np.float64), roots=np.asarray(roots, np.int32),
                       n_features=int(n_features), max_depth=int(depth))
        ensemble.check("exported trees")
        return ensemble

    def to_npz(self) -> bytes:
        """The arrays as an uncompressed .npz file's bytes (no pickled objects)."""
        buffer = io.BytesIO()
        np.savez(buffer, **{name: getattr(self, name) for name in ARRAYS},
                 n_features=np.int64(self.n_features), max_depth=np.int64(self.max_depth))
        return buffer.getvalue()

    @classmethod
    def load(cls, path: Path, hint: str) -> TreeEnsemble:
        """Read and check a file `to_npz` wrote.

        Raises:
            ModelCardMismatchError: naming the file and `hint`, for a file that is not such an
                archive, is too large, lacks an array, or holds arrays that do not form trees.
        """
        try:
            size = path.stat().st_size
        except OSError as exc:
            raise ModelCardMismatchError(f"{path}: cannot be read ({exc.strerror or exc}); {hint}") from None
        limit = MAX_NODES * 40 + 1_000_000
        if size > limit:
            raise ModelCardMismatchError(f"{path}: {size} bytes, more than a tree file can be ({limit}); "
                                         f"{hint}")
        try:
            with np.load(path, allow_pickle=False) as archive:
                missing = [name for name in (*ARRAYS, "n_features", "max_depth") if name not in archive.files]
                if missing:
                    raise ModelCardMismatchError(f"{path}: no array {missing[0]!r} (not a tree file); {hint}")
                arrays = {name: archive[name] for name in (*ARRAYS, "n_features", "max_depth")}
        except ModelCardMismatchError:
            raise
        except Exception as exc:  # noqa: BLE001 -- truncated, not a zip, pickled objects refused
            raise ModelCardMismatchError(f"{path}: cannot be read as a tree file ({type(exc).__name__}: "
                                         f"{str(exc).splitlines()[0] if str(exc) else ''}); {hint}") from None
        for name, dtype in ARRAYS.items():
            if arrays[name].dtype != dtype:
                raise ModelCardMismatchError(f"{path}: array {name!r} is {arrays[name].dtype}, expected "
                                             f"{np.dtype(dtype)}; {hint}")
        for name in ("n_features", "max_depth"):
            if arrays[name].shape != () or arrays[name].dtype.kind not in "iu":
                raise ModelCardMismatchError(f"{path}: {name!r} must be one whole number; {hint}")
        ensemble = cls(**{name: arrays[name] for name in ARRAYS}, n_features=int(arrays["n_features"]),
                       max_depth=int(arrays["max_depth"]))
        ensemble.check(str(path), hint)
        return ensemble

    def check(self, where: str, hint: str = "") -> None:
        """Refuse arrays that do not form trees a walk of `max_depth` steps finishes.

        Raises:
            ModelCardMismatchError: naming `where` and the first rule broken.
        """
        def fail(detail: str) -> ModelCardMismatchError:
            return ModelCardMismatchError(f"{where}: {detail}{'; ' + hint if hint else ''}")

        nodes = len(self.feature)
        if not 1 <= self.n_features <= MAX_FEATURES:
            raise fail(f"n_features {self.n_features} outside 1..{MAX_FEATURES}")
        if not 0 <= self.max_depth <= MAX_DEPTH:
            raise fail(f"max_depth {self.max_depth} outside 0..{MAX_DEPTH}")
        if not 1 <= nodes <= MAX_NODES or not 1 <= len(self.roots) <= MAX_TREES:
            raise fail(f"{nodes} nodes in {len(self.roots)} trees (1..{MAX_NODES} nodes, "
                       f"1..{MAX_TREES} trees)")
        shapes = {"feature": (nodes,), "threshold": (nodes,), "children": (nodes, 2), "value": (nodes,),
                  "roots": (len(self.roots),)}
        for name, shape in shapes.items():
            if getattr(self, name).shape != shape:
                raise fail(f"array {name!r} has shape {getattr(self, name).shape}, expected {shape}")
        index = np.arange(nodes)
        leaf = (self.children[:, 0] == index) & (self.children[:, 1] == index)
        internal = ~leaf
        if np.any(self.children[internal] <= index[internal, None]) or np.any(self.children >= nodes):
            raise fail("a child does not come after its parent (trees are stored in preorder)")
        if np.any((self.feature < 0) | (self.feature >= self.n_features)):
            raise fail(f"a split tests a feature outside 0..{self.n_features - 1}")
        if not np.all(np.isfinite(self.threshold[internal])) or not np.all(self.threshold[leaf] == math.inf):
            raise fail("an internal node's threshold is not finite, or a leaf's is not +inf")
        if not np.all(np.isfinite(self.value)):
            raise fail("a leaf value is not finite")
        if np.any(np.diff(self.roots) <= 0) or self.roots[0] != 0:
            raise fail("the trees' roots must start at 0 and increase")
        # Every node is reached from exactly one parent or is a root, so the arrays are trees.
        parents = np.bincount(self.children[internal].ravel(), minlength=nodes)
        parents[self.roots] += 1
        if np.any(parents != 1):
            raise fail("a node is reached from no parent or from several (not a forest)")
        depth = _depth(self.children, self.roots, internal)
        if depth > self.max_depth:
            raise fail(f"a tree is {depth} levels deep, more than max_depth {self.max_depth}")


def _depth(children: np.ndarray, roots: np.ndarray, internal: np.ndarray) -> int:
    """The deepest leaf's level (a root is level 0), one level per pass (at most MAX_DEPTH + 1)."""
    frontier = roots[internal[roots]]
    depth = 0
    while frontier.size:
        if depth > MAX_DEPTH:
            return depth
        frontier = children[frontier].ravel()
        frontier = frontier[internal[frontier]]
        depth += 1
    return depth


def _check_split(node: Mapping[str, Any]) -> None:
    """Only numerical `<=` splits whose missing-value rule agrees with a plain comparison on finite
    inputs (LightGBM's "None" and "NaN"; "Zero" would send 0 the default way)."""
    if node.get("decision_type", "<=") != "<=":
        raise ModelCardMismatchError(f"tree export: split of type {node.get('decision_type')!r} (only "
                                     "numerical '<=' splits are supported)")
    if node.get("missing_type", "None") not in ("None", "NaN"):
        raise ModelCardMismatchError(f"tree export: missing values of type {node.get('missing_type')!r} "
                                     "(train without zero_as_missing)")
    if not math.isfinite(float(node["threshold"])):
        raise ModelCardMismatchError("tree export: a split with a threshold that is not finite")
