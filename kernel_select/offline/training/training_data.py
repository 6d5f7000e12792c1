"""The rows every learned model trains on, and the provenance a card records for them.

One recipe for the shipped model, the model selection and the ensemble: the Triton rows that ran
(single GEMMs, the device's own, in the operand layouts the feature version can tell apart: "nn"
only before version 4, every layout from version 4 on), of the trainable problems only (the hash
split's train and val problems minus the frozen `family` holdout, see splits.py), at most `cap`
configs per problem so that millions of rows train in minutes on a laptop-class CPU.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_select.device import DeviceSpec
from kernel_select.errors import DatasetError
from kernel_select.layouts import LAYOUTS
from kernel_select.model.card import DataFile, DataProvenance, Domain, stratum
from kernel_select.offline.data import dataset, splits
from kernel_select.offline.data.device_rows import device_rows
from kernel_select.offline.training.evaluate import usable_triton_rows
from kernel_select.problem import TF32, gemm_flops

#: Configs per problem a model trains on: every contender within 1.5x of the oracle, then a sample.
DEFAULT_CAP = 384
#: The fastest runtime a training row may have, in ms (0.1 us): a kernel launch alone takes
#: microseconds, and the fastest GEMM in the committed data takes 4 us.
MIN_RUNTIME_MS = 1e-4


def require_rows(paths: str | Path | Sequence[str | Path], purpose: str) -> list[Path]:
    """The dataset files `paths` names (files or glob patterns), once their footers show rows.

    Checked where a command starts, before any model is built: a dataset of 0 rows (a collection
    that stopped before its first problem) otherwise fails deep in pandas with a TypeError.

    Raises:
        DatasetError: naming the files, when they hold no row at all.
    """
    files = dataset.expand_paths(paths)
    if sum(dataset.row_count(path) for path in files) == 0:
        raise DatasetError(f"{', '.join(map(str, files))}: no rows; {purpose} needs a dataset measured "
                           "with `kernel-select bench`")
    return files


def layouts_for(feature_version: int) -> tuple[str, ...]:
    """The operand layouts a model of `feature_version` trains and is evaluated on: every layout (all
    feature versions this code computes read it)."""
    return LAYOUTS


def prepare_rows(frame: pd.DataFrame, spec: DeviceSpec, layouts: Sequence[str] = dataset.MODELLED_LAYOUTS,
                 batched: bool = False, source: str = "the dataset") -> tuple[pd.DataFrame, pd.Series]:
    """Usable Triton rows of `spec` in `layouts`, sorted by problem, and cuBLAS ms per problem; batched
    GEMMs only with `batched` (a feature version that reads the batch).

    Raises:
        DatasetError: naming `source`, for a finite runtime no GEMM kernel can have (`check_runtimes`).
    """
    check_runtimes(frame, source)
    frame = dataset.modelled_layout_rows(frame, layouts=layouts)
    rows = usable_triton_rows(frame)
    rows = rows[((rows["batch"] == 1) | batched) & (rows["sm_count"] == spec.sm_count)]
    rows = rows.sort_values(["problem_id", *dataset.CONFIG_COLUMNS], kind="stable").reset_index(drop=True)
    aten = frame[(frame["backend"] == "aten") & np.isfinite(frame["runtime_ms"])]
    return rows, aten.groupby("problem_id")["runtime_ms"].min()


def training_rows(df: pd.DataFrame, spec: DeviceSpec, paths: Sequence[Path], cap: int, seed: int,
                  layouts: Sequence[str] = dataset.MODELLED_LAYOUTS,
                  batched: bool = False) -> tuple[pd.DataFrame, pd.Series]:
    """Capped Triton rows of the trainable problems (never `test`, `family` or `unseen`), and cuBLAS ms per
    problem: what every learned model of `spec` trains on (the MLP, train.py; the GBDT, gbdt_fit.py)."""
    _, df = device_rows(df, spec, paths)  # evaluate's rule: the named device's rows only
    rows, aten = prepare_rows(df, spec, layouts, batched=batched, source=", ".join(map(str, paths)))
    masks = splits.split_masks(rows)
    keep = (masks["train"] | masks["val"]) & cap_rows_per_problem(rows, cap, seed)
    rows = rows[keep].reset_index(drop=True)
    for split in ("train", "val"):
        if not (rows["split"] == split).any():
            raise DatasetError(f"{', '.join(map(str, paths))}: no usable Triton rows for {spec.key} in split "
                               f"{split!r}; training needs both 'train' and 'val' problems")
    return rows, aten


def check_runtimes(frame: pd.DataFrame, source: str) -> None:
    """Refuse, before any training, a finite runtime under MIN_RUNTIME_MS: no GEMM kernel runs that
    fast (a launch alone takes microseconds), so the file's times are in another unit or made up,
    and the fit would learn nothing from them (the `auto` rule's search then finds no score at all).

    Raises:
        DatasetError: naming `source`, the first such row's problem and its time.
    """
    times = frame["runtime_ms"].to_numpy(np.float64)
    fast = np.isfinite(times) & (times < MIN_RUNTIME_MS)
    if fast.any():
        row = int(np.argmax(fast))
        raise DatasetError(f"{source}: {int(fast.sum())} rows have a runtime under {MIN_RUNTIME_MS} ms "
                           f"(problem {frame['problem_id'].iloc[row]}: {times[row]:.3g} ms), faster than any "
                           "GEMM kernel runs; runtime_ms is in milliseconds")


def domain_of(rows: pd.DataFrame) -> Domain:
    """What `rows` (a model's training rows) cover: problems per stratum (a float32 problem timed with
    TF32 in its "tf32" stratum), each dimension's range and each stratum's largest work."""
    columns = ["m", "n", "k", "batch", "dtype", "op", "allow_tf32"]
    problems = rows.groupby("problem_id", sort=False)[columns].first()
    precisions = np.where(problems["allow_tf32"].to_numpy(bool), TF32,
                          problems["dtype"].astype(str).to_numpy())
    keys = [stratum(op, precision, int(m))
            for op, precision, m in zip(problems["op"], precisions, problems["m"])]
    flops = gemm_flops(*(problems[c].to_numpy(np.float64) for c in ("batch", "m", "n", "k")))
    work: dict[str, float] = {}
    for key, value in zip(keys, flops):
        work[key] = max(work.get(key, 0.0), float(value))

    def extent(column: str) -> tuple[int, int]:
        return int(problems[column].min()), int(problems[column].max())

    return Domain(strata=dict(sorted(Counter(keys).items())), m=extent("m"), n=extent("n"), k=extent("k"),
                  batch=extent("batch"), work=dict(sorted(work.items())))


def cap_rows_per_problem(rows: pd.DataFrame, cap: int, seed: int) -> np.ndarray:
    """Row mask keeping every config within 1.5x of its problem's oracle (the contenders, which the
    ranking must order) plus a random sample of the rest, at most `cap` rows per problem."""
    log_ms = np.log(rows["runtime_ms"].to_numpy(np.float64))
    groups = pd.factorize(rows["problem_id"])[0]
    gap = log_ms - pd.Series(log_ms).groupby(groups).transform("min").to_numpy()
    key = np.where(gap <= np.log(1.5), -1.0, np.random.default_rng(seed).random(len(rows)))
    order = np.lexsort((key, groups))
    rank = np.empty(len(rows), dtype=np.int64)
    rank[order] = np.arange(len(rows)) - np.searchsorted(groups[order], groups[order])
    return rank < cap


def aten_problems(rows: pd.DataFrame, aten: pd.Series) -> pd.DataFrame:
    """One row per single-GEMM problem of `rows` that has a cuBLAS time: m, n, k, dtype, split, layout,
    aten_ms (the cuBLAS time head is trained on single GEMMs without TF32, model.cublas.AtenHead.supports)."""
    single = rows[(rows["batch"] == 1) & ~rows["allow_tf32"].to_numpy(bool)]
    problems = single.groupby("problem_id", sort=True)[["m", "n", "k", "dtype", "split", "layout"]].first()
    problems["aten_ms"] = aten.reindex(problems.index)
    return problems[np.isfinite(problems["aten_ms"]) & (problems["aten_ms"] > 0)]


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_hashes(paths: Sequence[Path]) -> tuple[list[DataFile], str]:
    """Each file's sha256, and one hash for them all (the file's own when there is one)."""
    files = [DataFile(file=p.name, sha256=sha256_of(p)) for p in paths]
    combined = files[0].sha256 if len(files) == 1 else hashlib.sha256(
        "".join(f.sha256 for f in files).encode()).hexdigest()
    return files, combined


def provenance(paths: Sequence[Path], rows: pd.DataFrame) -> DataProvenance:
    """What a card records about its data: every file with its hash, rows and problems used."""
    files, combined = file_hashes(paths)
    per_split = rows.groupby("split")["problem_id"].nunique()

    def values(column: str) -> list[str]:
        return sorted(str(v) for v in rows[column].dropna().unique())

    return DataProvenance(file="+".join(f.file for f in files), sha256=combined, files=files, rows=len(rows),
                          problems={split: int(n) for split, n in per_split.items()},
                          device_names=values("device_name"), torch_versions=values("torch_version"),
                          triton_versions=values("triton_version"))
