"""Frozen evaluation splits: which problems a model may train on, and the three held-out test sets.

Three test sets, all never trained on, all frozen (adding problems never moves an existing one):

  test    the dataset's hash split, unchanged: sha256(problem_id) mod 100 >= 85
          (`split_of`). It measures a new M, N or K near shapes the model has seen.
  family  every problem of a held-out architecture family (HELD_OUT_FAMILIES: one of each kind the
          datasets hold: a large and a small LLM, an MoE, ViTs and a SigLIP tower, a diffusion
          transformer, a speech model, a recommendation MLP, and of the batched GEMMs the batched
          MoE experts, `moe-experts` of data/shapes_bmm_h100.json), plus every problem of one alignment
          class: odd N with odd K (unaligned rows and columns turn off vectorized loads and the
          pipelined prologue). The coverage sampler puts odd N in training only with K of other
          classes, and odd K only with other N. It measures generalization to layer shapes and
          alignments unlike anything in training, which is what a new user brings.

  unseen  every problem of data/shapes_unseen.json (family `unseen-...`): drawn by a generator and
          seed no training plan uses (offline/data/unseen.py), across every alignment class,
          dtype and layout, with batched GEMMs of architectures outside the architecture table. It
          measures what a user's shapes get; it is never in `family` or `test`, so adding its rows
          to a read moves neither.

A problem can belong to `test` and another split (a ViT shape that hashes into `test`); it is then
scored in both reports. Training uses only problems in none: `train` and `val` are the hash split's
train and val problems minus the family and unseen holdouts.

A problem's family comes from the dataset's `family` column when it has one; older datasets have
only problem ids, mapped here through the shapes files' `source` field (its first word, e.g.
"llama3-70b q_proj" -> "llama3-70b"). Problems found nowhere are family "unknown" (trainable).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_select.errors import DatasetError
from kernel_select.layouts import LAYOUTS
from kernel_select.offline.data.problem_ids import problem_id
from kernel_select.offline.data.unseen import is_unseen_family
from kernel_select.problem import TF32

#: Families held out whole. From the first collection (shapes_h100*.json): one large LLM (8192-wide),
#: one small LLM (3072-wide, fused qkv / gate_up) and the ViTs (M a multiple of 197 or 257 tokens);
#: from the coverage collection (shapes_coverage.json), one architecture of every other kind; from
#: the batched plan (shapes_bmm_h100.json), the batched MoE experts: batch = experts and M = tokens
#: per expert, unlike attention's batch x heads, so it tests a batched form no bmm family trains.
HELD_OUT_FAMILIES: frozenset[str] = frozenset({
    "llama3-70b", "phi3-mini", "vit-b16", "vit-l14",
    "gemma2-9b", "olmoe-1b-7b", "siglip-so400m", "sd3-medium-mmdit", "whisper-large-v3", "dcnv2-mlperf",
    "moe-experts",
})

#: Names of the evaluation splits; each maps to a boolean mask over problems.
EVAL_SPLITS = ("test", "family", "unseen")
TRAINING_SPLITS = ("train", "val")
UNKNOWN_FAMILY = "unknown"
#: The checkout's data/ folder: the committed datasets and shapes files (plans read it too).
DATA_DIR = Path(__file__).resolve().parents[3] / "data"



#: The hash split (fixed; documented in data/README.md): a problem's split is decided by a hash of its
#: identity (dtype, op, batch, m, n, k) alone, so every row of a problem lands in the same split and
#: adding problems never moves existing ones: sha256(problem_id) mod 100 < 70 -> train, < 85 -> val,
#: else test. A problem timed in another operand layout than "nn" has its own id (the layout suffixed)
#: but the split of its "nn" id, so a model never trains on one layout of a problem it is tested on in
#: another. A float32 problem timed with TF32 (its rows' `allow_tf32`) has its own id too ("/tf32"
#: last) and the split of its float32 twin, for the same reason.
def split_of(pid: str) -> str:
    """The fixed split of a problem id (the hash split above): every layout of a problem, and its
    TF32 twin, get the split of its float32 "nn" id."""
    pid = pid.removesuffix(f"/{TF32}")
    head, _, last = pid.rpartition("/")
    base = head if last in LAYOUTS else pid
    bucket = int(hashlib.sha256(base.encode()).hexdigest(), 16) % 100
    return "train" if bucket < 70 else "val" if bucket < 85 else "test"


def held_out_alignment(n: np.ndarray | int, k: np.ndarray | int) -> np.ndarray | bool:
    """The held-out alignment class: odd N with odd K."""
    return (np.asarray(n) % 2 == 1) & (np.asarray(k) % 2 == 1)


def family_holdout(problem_row: Mapping) -> bool:
    """True if one problem (a dataset row or a dict with `family`, `n`, `k`) is in the `family` split."""
    family = family_of_source(problem_row.get("family") or "")
    if is_unseen_family(family):
        return False
    return family in HELD_OUT_FAMILIES or bool(held_out_alignment(int(problem_row["n"]),
                                                                  int(problem_row["k"])))


def default_shapes_files() -> list[Path]:
    """The shapes files next to the datasets (data/shapes_*.json)."""
    return sorted(DATA_DIR.glob("shapes_*.json"))


def family_of_source(source: str) -> str:
    """'llama3-70b q_proj' -> 'llama3-70b'; 'random seed=1' -> 'random'."""
    words = str(source).strip().lower().split()
    return words[0] if words else UNKNOWN_FAMILY


def families_from_shapes(paths: Iterable[str | Path]) -> dict[str, str]:
    """problem_id -> family for every problem listed in the shapes files.

    A problem listed under two families keeps the held-out one, so a shape shared with a held-out
    architecture is never trained on.
    """
    out: dict[str, str] = {}
    for path in paths:
        try:
            entries = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            raise DatasetError(f"{path}: cannot read shapes file ({exc})") from None
        for entry in entries:
            pid = problem_id(int(entry["m"]), int(entry["n"]), int(entry["k"]), str(entry["dtype"]),
                             str(entry.get("op", "mm")), int(entry.get("batch", 1)),
                             str(entry.get("layout", "nn")), entry.get("tf32") is True)
            family = family_of_source(entry.get("family") or entry.get("source", ""))
            if out.get(pid) not in HELD_OUT_FAMILIES:
                out[pid] = family
    return out


def problem_families(frame: pd.DataFrame, shapes_files: Iterable[str | Path] | None = None) -> pd.Series:
    """Family per row of a dataset frame: its `family` column where set, else from the shapes files."""
    rows, distinct = _distinct_rows(frame[_family_columns(frame)])
    return _families_of_rows(distinct, shapes_files).take(rows).set_axis(frame.index)


def split_masks(frame: pd.DataFrame,
                shapes_files: Iterable[str | Path] | None = None) -> dict[str, np.ndarray]:
    """Boolean row masks: `train`, `val` (trainable), `test`, `family` and `unseen` (held out; `test`
    may overlap `family`).

    Raises:
        DatasetError: the frame lacks the `split` column or the hash split is not the frozen one.
    """
    if "split" not in frame.columns:
        raise DatasetError("dataset has no 'split' column; it is needed for the frozen hash split")
    rows, distinct = _distinct_rows(frame[[*_family_columns(frame), "split", "n", "k"]])
    return {name: mask[rows] for name, mask in _masks_of_rows(distinct, shapes_files).items()}


def _family_columns(frame: pd.DataFrame) -> list[str]:
    """The columns a row's family is decided by."""
    return ["problem_id", "family"] if "family" in frame.columns else ["problem_id"]


def _distinct_rows(columns: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Each row's position among the distinct rows of `columns`, and those distinct rows (the first
    of each, in order of first appearance; missing values equal each other).

    A dataset holds a few thousand problems in millions of rows (one per config), and the splits
    depend on the problem only: work done on the distinct rows and taken back by these positions
    gives what the same work row by row gives, at a thousandth of the Python work.
    """
    combined = np.zeros(len(columns), dtype=np.int64)
    for name in columns.columns:
        codes, uniques = pd.factorize(columns[name])  # a missing value is -1
        # refactorized at each step, so the combined code stays below the row count and cannot overflow
        combined, _ = pd.factorize(combined * (len(uniques) + 1) + (codes + 1))
    first = np.flatnonzero(~pd.Series(combined).duplicated().to_numpy())
    return combined, columns.iloc[first].reset_index(drop=True)


def _families_of_rows(frame: pd.DataFrame, shapes_files: Iterable[str | Path] | None) -> pd.Series:
    """`problem_families` worked row by row (on the distinct rows, so on few)."""
    mapped = families_from_shapes(default_shapes_files() if shapes_files is None else shapes_files)
    from_ids = frame["problem_id"].astype(str).map(mapped).astype(object).fillna(UNKNOWN_FAMILY)
    if "family" not in frame.columns:
        return from_ids.rename("family")
    own = frame["family"].astype("string").str.strip().str.lower()
    own = own.str.split().str[0]
    return own.where(own.notna() & (own != ""), from_ids).astype(str).rename("family")


def _masks_of_rows(frame: pd.DataFrame,
                   shapes_files: Iterable[str | Path] | None) -> dict[str, np.ndarray]:
    """`split_masks` worked row by row (on the distinct rows, so on few)."""
    hashed = frame["split"].astype(str).to_numpy()
    family = _families_of_rows(frame, shapes_files).to_numpy()
    unseen = np.fromiter((is_unseen_family(f) for f in family), dtype=bool, count=len(family))
    family_out = (np.isin(family, list(HELD_OUT_FAMILIES))
                  | held_out_alignment(frame["n"].to_numpy(), frame["k"].to_numpy())) & ~unseen
    return {
        "train": (hashed == "train") & ~family_out & ~unseen,
        "val": (hashed == "val") & ~family_out & ~unseen,
        "test": (hashed == "test") & ~unseen,
        "family": family_out,
        "unseen": unseen,
    }


def split_rows(frame: pd.DataFrame, split: str,
               shapes_files: Iterable[str | Path] | None = None) -> pd.DataFrame:
    """The rows of one split (`train`, `val`, `test`, `family` or `unseen`)."""
    masks = split_masks(frame, shapes_files)
    if split not in masks:
        raise DatasetError(f"split: expected one of {tuple(masks)}, got {split!r}")
    return frame[masks[split]].reset_index(drop=True)


def split_summary(frame: pd.DataFrame, shapes_files: Iterable[str | Path] | None = None) -> dict[str, int]:
    """Problems per split (a problem in both `test` and `family` counts in each)."""
    masks = split_masks(frame, shapes_files)
    ids = frame["problem_id"].to_numpy()
    return {name: int(pd.unique(ids[mask]).size) for name, mask in masks.items()}
