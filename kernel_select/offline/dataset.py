"""The benchmark dataset: one parquet row per (problem, config), with provenance.

This module owns the column list and dtypes, validation, reading/writing with resume, and the
fixed train/validation/test split. It imports no GPU code.

Split rule (fixed; documented in data/README.md): a problem's split is decided by a hash of its
identity (dtype, op, batch, m, n, k) alone, so every row of a problem lands in the same split and
adding problems never moves existing ones: sha256(problem_id) mod 100 < 70 -> train, < 85 -> val,
else test.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from kernel_select.errors import DatasetError

DATASET_VERSION = 1

#: column -> pandas dtype. Triton rows carry their config; the cuBLAS row of each problem has
#: backend="aten" and zeros in the config columns.
COLUMNS: dict[str, str] = {
    "problem_id": "string",
    "m": "int64", "n": "int64", "k": "int64", "batch": "int64",
    "dtype": "string", "op": "string", "layout": "string",  # layout "nn": A and B row-major
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
}
CONFIG_COLUMNS = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")
STATUSES = ("ok", "capped", "out_of_resources", "compile_error", "runtime_error", "incorrect")
SPLITS = ("train", "val", "test")


def problem_id(m: int, n: int, k: int, dtype: str, op: str = "mm", batch: int = 1) -> str:
    """Stable text id of a problem, e.g. 'bfloat16/mm/1x560x1280x3420'."""
    return f"{dtype}/{op}/{batch}x{m}x{n}x{k}"


def split_of(pid: str) -> str:
    """The fixed split of a problem id (see module docstring)."""
    bucket = int(hashlib.sha256(pid.encode()).hexdigest(), 16) % 100
    return "train" if bucket < 70 else "val" if bucket < 85 else "test"


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """Check that every column exists and cast to the schema's dtypes (column order fixed)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise DatasetError(f"dataset is missing columns {missing}; expected {list(COLUMNS)}")
    out = df[list(COLUMNS)].copy()
    for col, dtype in COLUMNS.items():
        try:
            out[col] = out[col].astype(dtype)
        except (TypeError, ValueError) as exc:
            raise DatasetError(f"column {col!r} cannot be read as {dtype}: {exc}") from None
    bad = set(out["status"].unique()) - set(STATUSES)
    if bad:
        raise DatasetError(f"column 'status' has unknown values {sorted(bad)}; expected {STATUSES}")
    return out


def read(path: str | Path, *, split: str | None = None) -> pd.DataFrame:
    """Read and validate a dataset file; optionally keep one split."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"{path}: no such dataset file")
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several unrelated types for a bad file
        raise DatasetError(f"{path}: not a readable parquet file ({exc})") from None
    df = conform(df)
    if split is not None:
        if split not in SPLITS:
            raise DatasetError(f"split: expected one of {SPLITS}, got {split!r}")
        df = df[df["split"] == split].reset_index(drop=True)
    return df


def write(df: pd.DataFrame, path: str | Path) -> None:
    """Write `df` (validated) atomically, with the dataset version in the parquet metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(conform(df), preserve_index=False)
    meta = dict(table.schema.metadata or {})
    meta[b"kernel_select"] = json.dumps({"dataset_version": DATASET_VERSION}).encode()
    table = table.replace_schema_metadata(meta)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pq.write_table(table, tmp, compression="zstd")
    tmp.replace(path)


def completed_problems(path: str | Path) -> set[str]:
    """Problem ids already present in an existing output (for resuming a collection)."""
    path = Path(path)
    if not path.exists():
        return set()
    return set(read(path)["problem_id"].unique())


def append(path: str | Path, rows: pd.DataFrame) -> None:
    """Add rows to the dataset at `path`, replacing any earlier rows of the same problems."""
    path = Path(path)
    if path.exists():
        old = read(path)
        old = old[~old["problem_id"].isin(set(rows["problem_id"]))]
        rows = pd.concat([old, conform(rows)], ignore_index=True)
    write(rows, path)
