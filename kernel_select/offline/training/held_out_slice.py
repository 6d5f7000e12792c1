"""A fixed slice of the held-out problems, on which eval.json pins the shipped model's scores.

Scoring the shipped model on every held-out problem needs the whole dataset. The slice is small enough
to commit with the tests: per held-out split (`splits.EVAL_SPLITS`), the SLICE_PROBLEMS problems among
those the split's evaluation scores (usable Triton rows, in the model's trained layouts) whose problem
ids have the smallest sha256. The rule needs no seed, draws problems of every kind in proportion, and
keeps its choice when problems are added that hash higher. `kernel-select eval` records the choice and
the model's scores on it as `pinned` in its report (evaluate.pinned_report; models/<device>/eval.json),
and with `--pinned-rows` writes the dataset rows of exactly those problems (`slice_rows`);
tests/model/test_held_out_scores.py recomputes the scores from those rows and fails when they drift
from the report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

import pandas as pd

SLICE_PROBLEMS = 40  # per held-out split
PINNED_KS = (1, 4)
RULE = (f"per held-out split, the {SLICE_PROBLEMS} scored problems with the smallest sha256(problem_id) "
        "(kernel_select.offline.training.held_out_slice)")


def slice_ids(problem_ids: Iterable[str], count: int | None = None) -> list[str]:
    """The `count` (default SLICE_PROBLEMS) ids whose sha256 is smallest, sorted (all of them when
    there are fewer)."""
    count = SLICE_PROBLEMS if count is None else count
    return sorted(sorted(set(problem_ids), key=lambda pid: hashlib.sha256(pid.encode()).digest())[:count])


def pinned_ids(pinned: dict[str, Any]) -> set[str]:
    """Every problem a `pinned` report names (a problem may be in both held-out splits)."""
    return {pid for split in pinned["splits"].values() for pid in split.get("problems", ())}


def slice_rows(frame: pd.DataFrame, pinned: dict[str, Any]) -> pd.DataFrame:
    """Every row of the problems `pinned` names (all backends, in the frame's order): a dataset that
    `dataset.write` accepts and the pinned scores can be recomputed from."""
    return frame[frame["problem_id"].isin(pinned_ids(pinned))].reset_index(drop=True)
