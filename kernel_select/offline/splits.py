"""Frozen evaluation splits (see data/README.md, "Splits")."""

from __future__ import annotations

from collections.abc import Mapping

#: Architectures whose every shape is held out of training by the `family` split, one per kind.
HELDOUT_FAMILIES = frozenset({"gemma2-9b", "olmoe-1b-7b", "siglip-so400m", "sd3-medium-mmdit",
                              "whisper-large-v3", "dcnv2-mlperf"})


def family_holdout(problem_row: Mapping) -> bool:
    """True if a problem belongs to the `family` test split, never trained on.

    Held out: every shape of HELDOUT_FAMILIES, and every problem of the held-out alignment class,
    odd N with odd K (odd N is trained on only with K of other classes, odd K only with other N).
    `problem_row` needs `family`, `n` and `k` (a dataset row or a dict).
    """
    n, k = int(problem_row["n"]), int(problem_row["k"])
    return str(problem_row["family"]) in HELDOUT_FAMILIES or (n % 2 == 1 and k % 2 == 1)
