"""The round-3 plan against the measured H100 data: the problems it must never draw (measured ones,
the `unseen` split's, the `family` split's), and the card strata (model/card.py: op x dtype x M
bucket) it fills: training problems per stratum today and with the plan, against STRATUM_TARGET."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from kernel_select.model.card import M_BUCKETS, stratum, stratum_count
from kernel_select.offline.data import splits
from kernel_select.offline.data.problem_ids import id_of
from kernel_select.offline.data.splits import DATA_DIR, split_of
from kernel_select.offline.data.plans.round3_groups import BUCKET_RANGES
from kernel_select.offline.data.shapes import Shape, load

#: The H100 files measured before this plan: their problems are not drawn again, and their training
#: problems are what the strata count starts from. Fixed, so the plan stays what the generator writes
#: after its own rows (h100_round3.parquet) are added to data/.
MEASURED_FILES = ("h100.parquet", "h100_coverage.parquet", "h100_layers.parquet", "h100_bmm.parquet")
UNSEEN_FILE = "shapes_unseen.json"
DTYPES = ("bfloat16", "float16", "float32")
#: Training problems every stratum of the card should reach with this plan's (the issue's target).
STRATUM_TARGET = 100
BUCKET_NAMES = tuple(name for _, name in M_BUCKETS)


def excluded_ids(data_dir: Path = DATA_DIR) -> set[str]:
    """Problem ids the plan must not hold: every problem of MEASURED_FILES and of the unseen split."""
    import pandas as pd

    ids: set[str] = set()
    for name in MEASURED_FILES:
        ids |= set(pd.read_parquet(data_dir / name, columns=["problem_id"])["problem_id"].astype(str))
    ids |= {id_of(s.problem()) for s in load(data_dir / UNSEEN_FILE)}
    return ids


def held_out(shape: Shape) -> bool:
    """Whether the problem is in the `family` split (a held-out family, or odd N with odd K)."""
    return splits.family_holdout({"family": shape.family, "n": shape.n, "k": shape.k})


def trainable(shape: Shape) -> bool:
    """Whether training would read the problem: hash split train or val, and not held out."""
    return split_of(id_of(shape.problem())) in ("train", "val") and not held_out(shape)


def measured_training_strata(data_dir: Path = DATA_DIR) -> Counter:
    """Training problems per card stratum in MEASURED_FILES (what a model trained on them counts)."""
    import pandas as pd

    frames = [pd.read_parquet(data_dir / name, columns=["problem_id", "m", "n", "k", "dtype", "op", "split",
                                                         "family"]).drop_duplicates("problem_id")
              for name in MEASURED_FILES]
    frame = pd.concat(frames).drop_duplicates("problem_id", keep="last").reset_index(drop=True)
    masks = splits.split_masks(frame)
    rows = frame[masks["train"] | masks["val"]]
    return Counter(stratum(op, str(dtype), int(m))
                   for op, dtype, m in zip(rows["op"], rows["dtype"], rows["m"]))


def strata_table(planned: Sequence[Shape], today: Counter) -> list[tuple[str, int, int, int, int]]:
    """(stratum, training problems today, this plan's training problems, own total, total as the card
    counts it: its dtype's or its twin's, `card.stratum_count`) for every op x dtype x M bucket."""
    added = Counter(stratum(s.op, s.dtype, s.m) for s in planned if trainable(s))
    keys = [f"{op}/{dtype}/{bucket}" for op in ("mm", "bmm") for dtype in DTYPES for bucket in BUCKET_NAMES]
    totals = {key: today[key] + added[key] for key in keys}
    return [(key, today[key], added[key], totals[key], stratum_count(key, totals)) for key in keys]


def composition(shapes: Sequence[Shape]) -> dict[str, Counter]:
    """Problems per kind of group, op, dtype, layout and M bucket."""
    return {"kind": Counter(s.group.split("/")[0] for s in shapes), "op": Counter(s.op for s in shapes),
            "dtype": Counter(s.dtype for s in shapes), "layout": Counter(s.layout for s in shapes),
            "M bucket": Counter(BUCKET_NAMES[_bucket_of(s.m)] for s in shapes)}


def _bucket_of(m: int) -> int:
    return next(i for i, (low, high) in enumerate(BUCKET_RANGES) if low <= m <= high)
