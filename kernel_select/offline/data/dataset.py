"""The benchmark dataset: one parquet row per (problem, config), with provenance.

This module owns the column list and dtypes, validation, reading/writing with resume, and the
fixed train/validation/test split. It imports no GPU code. Writing is safe against crashes and
concurrent writers: see `kernel_select.offline.data.dataset_io`.

Split rule (fixed; documented in data/README.md): a problem's split is decided by a hash of its
identity (dtype, op, batch, m, n, k) alone, so every row of a problem lands in the same split and
adding problems never moves existing ones: sha256(problem_id) mod 100 < 70 -> train, < 85 -> val,
else test. A problem timed in another operand layout than "nn" has its own id (the layout
suffixed) but the split of its "nn" id, so a model never trains on one layout of a problem it is
tested on in another.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from kernel_select.errors import DatasetError
from kernel_select.layouts import DEFAULT_LAYOUT, LAYOUTS, check_layout
from kernel_select.offline.data.dataset_io import atomic_write_parquet, exclusive_lock

if TYPE_CHECKING:
    from kernel_select.problem import Problem

#: Version 2 added the sampling provenance columns (family, layer, pass), version 3 the index of the
#: GPU that timed each row (device_index); older files are read with those filled in
#: (OPTIONAL_DEFAULTS).
DATASET_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)

#: column -> pandas dtype. Triton rows carry their config; the cuBLAS row of each problem has
#: backend="aten" and zeros in the config columns.
COLUMNS: dict[str, str] = {
    "problem_id": "string",
    "m": "int64", "n": "int64", "k": "int64", "batch": "int64",
    "dtype": "string", "op": "string",
    "layout": "string",  # operand layout, A then B (kernel_select.layouts): "nn" both row-major
    "backend": "string",  # "triton" or "aten"
    "block_m": "int64", "block_n": "int64", "block_k": "int64",
    "num_stages": "int64", "num_warps": "int64", "group_m": "int64",
    "even_k": "bool", "allow_tf32": "bool",
    "runtime_ms": "float64",  # median over timed runs; inf when the config failed
    "runtime_min_ms": "float64",  # minimum over timed runs (what Inductor's benchmarker reports)
    "n_runs": "int64",
    "status": "string",  # ok | capped | out_of_resources | compile_error | runtime_error | incorrect
    "error": "string",
    "split": "string",
    # provenance
    "device_name": "string", "sm_count": "int64", "torch_version": "string",
    "triton_version": "string", "git_sha": "string", "timestamp": "string", "timing_method": "string",
    # which GPU of the host timed the row (CUDA index as the collection saw it; -1: not recorded)
    "device_index": "int64",
    # sampling provenance: which architecture (or sampler stratum) and layer the problem came from,
    # and which collection pass chose it ("coverage" or "active")
    "family": "string", "layer": "string", "pass": "string",
}
#: Columns older files (and hand-built frames) may lack, with the value they get: files before
#: version 3 did not record the GPU (the H200 file holds rows of two), hence -1, not 0.
OPTIONAL_DEFAULTS: dict[str, object] = {"family": "unknown", "layer": "", "pass": "coverage",
                                        "device_index": -1}
#: The sampling provenance columns among them (a shapes file's entry gives these).
ORIGIN_COLUMNS = ("family", "layer", "pass")
CONFIG_COLUMNS = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")
STATUSES = ("ok", "capped", "out_of_resources", "compile_error", "runtime_error", "incorrect")
SPLITS = ("train", "val", "test")
PASSES = ("coverage", "active")
#: Layouts a model without a layout input (features before version 4) trains and is evaluated on.
MODELLED_LAYOUTS = (DEFAULT_LAYOUT,)

log = logging.getLogger(__name__)


def problem_id(m: int, n: int, k: int, dtype: str, op: str = "mm", batch: int = 1,
               layout: str = DEFAULT_LAYOUT) -> str:
    """Stable text id of a problem, e.g. 'bfloat16/mm/1x560x1280x3420'; a layout other than "nn"
    is suffixed ('bfloat16/mm/1x560x1280x3420/nt'), so "nn" ids are those of datasets written
    before layouts existed (the frozen split is a hash of them)."""
    base = f"{dtype}/{op}/{batch}x{m}x{n}x{k}"
    return base if check_layout(layout) == DEFAULT_LAYOUT else f"{base}/{layout}"


def id_of(problem: Problem) -> str:
    """`problem_id` of a kernel_select.problem.Problem, its operand layout included."""
    return problem_id(problem.m, problem.n, problem.k, problem.dtype, problem.op, problem.batch,
                      problem.layout)


def split_of(pid: str) -> str:
    """The fixed split of a problem id (see module docstring): every layout of a problem gets
    the split of its "nn" id."""
    head, _, last = pid.rpartition("/")
    base = head if last in LAYOUTS else pid
    bucket = int(hashlib.sha256(base.encode()).hexdigest(), 16) % 100
    return "train" if bucket < 70 else "val" if bucket < 85 else "test"


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """Check the columns (none missing, none unknown) and cast to the schema's dtypes."""
    df = df.assign(**{c: v for c, v in OPTIONAL_DEFAULTS.items() if c not in df.columns})
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DatasetError(f"dataset is missing columns {missing}; expected {list(COLUMNS)}")
    unknown = [c for c in df.columns if c not in COLUMNS]
    if unknown:
        raise DatasetError(f"dataset has unknown columns {unknown}: drop them, or add them to "
                           "kernel_select.offline.data.dataset.COLUMNS (and bump DATASET_VERSION)")
    out = df[list(COLUMNS)].copy()
    for col, dtype in COLUMNS.items():
        try:
            out[col] = out[col].astype(dtype)
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"column {col!r} cannot be read as {dtype}: {exc}") from None
    for col, allowed in (("status", STATUSES), ("pass", PASSES), ("layout", LAYOUTS)):
        bad = set(out[col].unique()) - set(allowed)
        if bad:
            raise DatasetError(f"column {col!r} has unknown values {sorted(bad)}; expected {allowed}")
    return out


def modelled_layout_rows(frame: pd.DataFrame, purpose: str = "training and evaluation",
                         layouts: Sequence[str] = MODELLED_LAYOUTS) -> pd.DataFrame:
    """The rows in `layouts` (default MODELLED_LAYOUTS, for a model without a layout input: rows of
    other layouts have the same sizes and other runtimes, and would silently mix into its targets
    and oracles); how many are left out is logged."""
    keep = frame["layout"].isin(list(layouts))
    if keep.all():
        return frame
    others = frame[~keep]
    log.info("%s: left out %d rows (%d problems) in layouts %s; using %s rows only", purpose, len(others),
             others["problem_id"].nunique(), ", ".join(sorted(others["layout"].astype(str).unique())),
             " / ".join(layouts))
    return frame[keep].reset_index(drop=True)


def _version_of(path: Path) -> int:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    raw = meta.get(b"kernel_select")
    if raw is None:
        return 1  # files written before the version was recorded
    try:
        return int(json.loads(raw)["dataset_version"])
    except (ValueError, KeyError, TypeError):
        raise DatasetError(f"{path}: unreadable kernel_select metadata {raw[:80]!r}") from None


def read(path: str | Path, *, split: str | None = None) -> pd.DataFrame:
    """Read and validate a dataset file; optionally keep one split."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such dataset file")
    try:
        version = _version_of(path)
        df = pd.read_parquet(path)
    except DatasetError:
        raise
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise DatasetError(f"{path}: not a readable parquet file ({exc})") from None
    if version not in READABLE_VERSIONS:
        raise DatasetError(f"{path}: dataset_version {version} is not one this code reads "
                           f"{READABLE_VERSIONS}; upgrade kernel_select, or re-collect with "
                           "`kernel-select bench`")
    df = conform(df)
    if split is not None:
        if split not in SPLITS:
            raise DatasetError(f"split: expected one of {SPLITS}, got {split!r}")
        df = df[df["split"] == split].reset_index(drop=True)
    return df


def expand_paths(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    """Dataset files named by `paths`: one path, several, or glob patterns (sorted matches).

    Raises:
        DatasetError: a pattern matches nothing, or no file is named at all.
    """
    items = [paths] if isinstance(paths, (str, Path)) else list(paths)
    found: list[Path] = []
    for item in items:
        text = str(item)
        if glob.has_magic(text):
            matches = sorted(Path(p) for p in glob.glob(text))
            if not matches:
                raise DatasetError(f"{text}: no dataset file matches this pattern")
            found.extend(matches)
        else:
            found.append(Path(text))
    if not found:
        raise DatasetError("no dataset file given")
    return list(dict.fromkeys(found))  # a file named twice is read once


def read_many(paths: str | Path | Sequence[str | Path]) -> pd.DataFrame:
    """Read several dataset files (or glob patterns) as one frame.

    A (problem, device) measured in more than one file keeps the rows of the last file that has
    it, as `append` would have done had the files been merged.
    """
    frames = [read(path) for path in expand_paths(paths)]
    if len(frames) == 1:
        return frames[0]
    keys = [f["problem_id"] + "|" + f["device_name"] for f in frames]
    kept = []
    for i, frame in enumerate(frames):
        later = set().union(*(set(k) for k in keys[i + 1:]))
        kept.append(frame[~keys[i].isin(later)])
    return conform(pd.concat(kept, ignore_index=True))


def write(df: pd.DataFrame, path: str | Path) -> None:
    """Write `df` (validated) atomically, with the dataset version in the parquet metadata.

    Not locked: use `append` (which holds the file's lock) when another process may write too.
    """
    import pyarrow as pa

    table = pa.Table.from_pandas(conform(df), preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"kernel_select"] = json.dumps({"dataset_version": DATASET_VERSION}).encode()
    atomic_write_parquet(table.replace_schema_metadata(meta), Path(path))


def completed_problems(path: str | Path, device_name: str | None = None) -> set[str]:
    """Problem ids already present in an existing output (for resuming a collection).

    With `device_name`, only problems measured on that device count as done: rows from another
    GPU in the same file must not stop this one from measuring the problem.
    """
    path = Path(path)
    if not path.exists():
        return set()
    df = read(path)
    if device_name is not None:
        df = df[df["device_name"] == device_name]
    return set(df["problem_id"].unique())


def append(path: str | Path, rows: pd.DataFrame, *, timeout_s: float = 120.0) -> None:
    """Add rows to the dataset at `path`, replacing earlier rows of the same (problem, device).

    Holds an exclusive lock on `path` for the read-modify-write, so concurrent appends from
    several processes each keep all their rows; a writer that cannot get the lock within
    `timeout_s` raises DatasetError.
    """
    path = Path(path)
    rows = conform(rows)
    with exclusive_lock(path, timeout_s):
        if path.exists():
            old = read(path)
            replaced = (old["problem_id"] + "|" + old["device_name"]).isin(
                set(rows["problem_id"] + "|" + rows["device_name"]))
            rows = pd.concat([old[~replaced], rows], ignore_index=True)
        write(rows, path)
