"""The benchmark dataset: one parquet row per (problem, config), with provenance.

This module owns the column list and dtypes, validation, and reading/writing with resume. It imports
no GPU code. Writing is safe against crashes and concurrent writers: see
`kernel_select.offline.data.dataset_io`. A row's `problem_id` is written by `problem_ids.py`, its
`split` by `splits.split_of`.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import ValidationError

from kernel_select.configs import GemmConfig
from kernel_select.errors import DatasetError
from kernel_select.layouts import DEFAULT_LAYOUT, LAYOUTS
from kernel_select.lut.entries import MAX_DIM
from kernel_select.lut.bounded_read import FileKind, open_regular
from kernel_select.lut.validation import short
from kernel_select.offline.data.audit import kept_rows
from kernel_select.offline.data.dataset_io import atomic_write_parquet, exclusive_lock
from kernel_select.offline.data.problem_ids import is_tf32_id
from kernel_select.problem import SUPPORTED_DTYPES, SUPPORTED_OPS, TF32

#: Version 2 added the sampling provenance columns (family, layer, pass), version 3 the index of the
#: GPU that timed each row (device_index); older files are read with those filled in
#: (OPTIONAL_DEFAULTS). Version 4 stores runtime_min_ms empty where it equals runtime_ms (every
#: single-sample `capped` row, about 80% of a collection), which `read` fills back in: the same
#: frame in about 40% fewer bytes, since a second copy of a noisy float compresses no better than
#: the first.
DATASET_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)

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
    "even_k": "bool",
    # the GEMM ran with TF32 (float32 only; the problem id ends in "/tf32", and every row of the
    # problem says so, its cuBLAS row too: cuBLAS ran with fp32_precision "tf32")
    "allow_tf32": "bool",
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
    # and which collection pass chose it ("coverage", "active", or "unseen": the frozen evaluation plan
    # of offline/data/unseen.py, never trained on)
    "family": "string", "layer": "string", "pass": "string",
}
#: Columns older files (and hand-built frames) may lack, with the value they get: files before
#: version 3 did not record the GPU (the H200 file holds rows of two), hence -1, not 0.
OPTIONAL_DEFAULTS: dict[str, object] = {"family": "unknown", "layer": "", "pass": "coverage",
                                        "device_index": -1}
#: The sampling provenance columns among them (a shapes file's entry gives these).
ORIGIN_COLUMNS = ("family", "layer", "pass")
CONFIG_COLUMNS = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")
BACKENDS = ("triton", "aten")
STATUSES = ("ok", "capped", "out_of_resources", "compile_error", "runtime_error", "incorrect")
SPLITS = ("train", "val", "test")
PASSES = ("coverage", "active", "unseen")
#: Layouts a model without a layout input (features before version 4) trains and is evaluated on.
MODELLED_LAYOUTS = (DEFAULT_LAYOUT,)

#: Largest dataset file read, in bytes (256 MiB). A parquet file's bytes grow ~140x in memory
#: (data/h100_coverage.parquet: 5.8 MB, 1.16M rows, a 0.8 GB frame), so this is ~50M rows and
#: ~35 GB of memory, 40x the largest collection so far.
MAX_DATASET_BYTES = 256 * 1024 * 1024
#: Most rows a dataset file may have. The bytes cap alone let a 0.64 MB file of 4M rows (parquet
#: compresses repeated values ~1000x) take 4.6 GB when read, and one of 40M rows more than 8 GB; a
#: frame takes ~700 bytes per row, so this is ~2 GB, 2.5x the largest collection so far (1.16M
#: rows). The count is read from the file's footer before anything else, and `append` never grows
#: a file past it, so a file `bench` wrote is always one the next run can read.
MAX_DATASET_ROWS = 3_000_000
DATASET_FILE = FileKind("dataset", "a parquet dataset file (written by `kernel-select bench`)",
                        MAX_DATASET_BYTES, "kernel_select.offline.data.dataset.MAX_DATASET_BYTES",
                        error=DatasetError)

log = logging.getLogger(__name__)


def conform(df: pd.DataFrame) -> pd.DataFrame:
    """Check the columns (none missing, none unknown), cast to the schema's dtypes and check the
    values (see `check_values`).

    Raises:
        DatasetError: naming the column, and for a bad value the value and its row.
    """
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
    for col, allowed in (("status", STATUSES), ("pass", PASSES), ("layout", LAYOUTS), ("backend", BACKENDS),
                         ("dtype", SUPPORTED_DTYPES), ("op", SUPPORTED_OPS)):
        # A null is a value no row may have; named "null", since NA cannot be sorted or compared.
        bad = {"null" if pd.isna(value) else value for value in out[col].unique()} - set(allowed)
        if bad:
            raise DatasetError(f"column {col!r} has unknown values {short(sorted(bad))}; expected {allowed}")
    check_values(out)
    return out


def check_values(df: pd.DataFrame) -> None:
    """Refuse values no measurement can have: a size outside 1..MAX_DIM, a Triton row whose config
    GemmConfig refuses (a block of 0, 0 warps), a runtime that is not > 0 (inf marks a failed
    config), a negative run count, no SMs. Rows that pass can be divided by, logged and turned
    into problems without a warning. (The config columns of cuBLAS rows are not read.)

    Raises:
        DatasetError: naming the first bad row (counting from 0), its problem, column and value.
    """
    aten = (df["backend"] == "aten").to_numpy()
    checks: list[tuple[str, np.ndarray, str]] = [
        *((col, ((df[col] >= 1) & (df[col] <= MAX_DIM)).to_numpy(), f"a size from 1 to {MAX_DIM}")
          for col in ("m", "n", "k", "batch")),
        *((col, (df[col] > 0).to_numpy(), "a time > 0 in ms (inf for a failed config)")
          for col in ("runtime_ms", "runtime_min_ms")),
        ("n_runs", (df["n_runs"] >= 0).to_numpy(), "a count >= 0"),
        ("sm_count", (df["sm_count"] >= 1).to_numpy(), "a count >= 1"),
    ]
    for col, ok, expected in checks:
        if not ok.all():
            _refuse(df, int(np.argmin(ok)), col, expected)
    _check_tf32(df)
    triton = df.loc[~aten, list(CONFIG_COLUMNS)]
    for key in triton.drop_duplicates().itertuples(index=False):
        try:
            GemmConfig(**dict(zip(CONFIG_COLUMNS, map(int, key))))
        except ValidationError as exc:
            error = exc.errors(include_url=False)[0]
            col = str(error["loc"][0])
            row = int(np.flatnonzero(~aten)[(triton == list(key)).all(axis=1).to_numpy().argmax()])
            reason = error["msg"].removeprefix("Value error, ")
            _refuse(df, row, col, f"a Triton config value GemmConfig accepts ({reason})")


def _check_tf32(df: pd.DataFrame) -> None:
    """Refuse a row whose `allow_tf32` disagrees with its problem id (a TF32 row filed under a float32
    problem would mix two rankings into one problem), or that says TF32 of a half-precision GEMM."""
    codes, ids = pd.factorize(df["problem_id"])
    tagged = np.fromiter((is_tf32_id(str(pid)) for pid in ids), dtype=bool, count=len(ids))[codes]
    tf32 = df["allow_tf32"].to_numpy(bool)
    if (tagged != tf32).any():
        row = int(np.argmax(tagged != tf32))
        _refuse(df, row, "allow_tf32", f"{bool(tagged[row])}: a TF32 problem's id ends in '/{TF32}', and "
                                       "only its rows say allow_tf32")
    half = tf32 & (df["dtype"] != "float32").to_numpy(bool)
    if half.any():
        _refuse(df, int(np.argmax(half)), "dtype", "float32 in a TF32 row (TF32 is a float32 precision)")


def _refuse(df: pd.DataFrame, row: int, col: str, expected: str) -> None:
    value: Any = df[col].iloc[row]
    raise DatasetError(f"row {row} (problem {short(str(df['problem_id'].iloc[row]))}): column {col!r} is "
                       f"{short(value.item() if hasattr(value, 'item') else value)}; expected {expected}")


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


def _version_of(handle: Any, path: Path) -> int:
    import pyarrow.parquet as pq

    meta = pq.read_schema(handle).metadata or {}
    raw = meta.get(b"kernel_select")
    if raw is None:
        return 1  # files written before the version was recorded
    try:
        return int(json.loads(raw)["dataset_version"])
    except (ValueError, KeyError, TypeError):
        raise DatasetError(f"{path}: unreadable kernel_select metadata {raw[:80]!r}") from None


def read(path: str | Path, *, split: str | None = None) -> pd.DataFrame:
    """Read and validate a dataset file (a regular file of at most MAX_DATASET_BYTES); optionally
    keep one split.

    Raises:
        DatasetError: naming the file: missing, not a regular file (a FIFO, directory or device
            is named as such), too large, not parquet, or a column or value out of the schema.
    """
    path = Path(path)
    fd = open_regular(path, DATASET_FILE)
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd).st_size
        if size > MAX_DATASET_BYTES:
            raise DATASET_FILE.fail(str(path), f"{size:,} bytes is over the dataset size limit of "
                                               f"{MAX_DATASET_BYTES:,} bytes ({DATASET_FILE.limit_name}); "
                                               "split the collection into several files")
        try:
            version = _version_of(handle, path)
            handle.seek(0)
            _check_row_count(_footer_rows(handle), path)
            handle.seek(0)
            df = pd.read_parquet(handle)
        except DatasetError:
            raise
        except MemoryError:
            raise DatasetError(f"{path}: too large to read in this machine's memory; split the collection "
                               "into several files") from None
        except Exception as exc:  # pyarrow raises several unrelated types for a bad file
            raise DatasetError(f"{path}: not a readable parquet file ({exc})") from None
    if version not in READABLE_VERSIONS:
        raise DatasetError(f"{path}: dataset_version {version} is not one this code reads "
                           f"{READABLE_VERSIONS}; upgrade kernel_select, or re-collect with "
                           "`kernel-select bench`")
    if version >= 4 and "runtime_min_ms" in df.columns and "runtime_ms" in df.columns:
        df["runtime_min_ms"] = df["runtime_min_ms"].fillna(df["runtime_ms"])  # empty: a repeat (write)
    try:
        df = conform(df)
    except DatasetError as exc:
        raise DatasetError(f"{path}: {exc}") from None
    if split is not None:
        if split not in SPLITS:
            raise DatasetError(f"split: expected one of {SPLITS}, got {split!r}")
        df = df[df["split"] == split].reset_index(drop=True)
    return df


def row_count(path: str | Path) -> int:
    """The rows of a dataset file, from its parquet footer (nothing else is read).

    Raises:
        DatasetError: as `read` does for a missing, special or unreadable file.
    """
    with os.fdopen(open_regular(path, DATASET_FILE), "rb") as handle:
        try:
            return _footer_rows(handle)
        except Exception as exc:  # pyarrow raises several unrelated types for a bad file
            raise DatasetError(f"{path}: not a readable parquet file ({exc})") from None


def _footer_rows(handle: Any) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(handle).num_rows


def _check_row_count(rows: int, path: Path, *, what: str = "has") -> None:
    if rows > MAX_DATASET_ROWS:
        raise DatasetError(f"{path}: {what} {rows:,} rows, over the dataset limit of {MAX_DATASET_ROWS:,} "
                           "rows (kernel_select.offline.data.dataset.MAX_DATASET_ROWS); split the collection "
                           "into several files")


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
    it, as `append` would have done had the files been merged; except that rows timed with literal
    sizes, as Inductor's kernels run (`bench --literal-sizes`), replace rows timed with shared
    binaries whatever the files' order, and are replaced only by later literal-size rows.
    """
    return read_many_with_sources(paths)[0]


def read_many_with_sources(paths: str | Path | Sequence[str | Path]) -> tuple[pd.DataFrame, np.ndarray]:
    """`read_many`'s frame, and per row the position in `expand_paths(paths)` of the file it was read
    from (one file per problem and device: `train --weight` weighs a problem by its file)."""
    frames = [read(path) for path in expand_paths(paths)]
    if len(frames) == 1:
        return frames[0], np.zeros(len(frames[0]), dtype=np.int64)
    kept = kept_rows(frames)
    # each file filtered before the concatenation: a row filter over the concatenated Arrow columns
    # (chunked) costs several times more
    merged = conform(pd.concat([frame if keep.all() else frame[keep] for frame, keep in zip(frames, kept)],
                               ignore_index=True))
    return merged, np.repeat(np.arange(len(frames)), [int(keep.sum()) for keep in kept])


def write(df: pd.DataFrame, path: str | Path) -> None:
    """Write `df` (validated) atomically, with the dataset version in the parquet metadata.

    Not locked: use `append` (which holds the file's lock) when another process may write too.
    """
    import pyarrow as pa

    df = conform(df)
    # runtime_min_ms where it repeats runtime_ms is left empty (a null), and `read` fills it back in
    repeated = (df["runtime_min_ms"] == df["runtime_ms"]).to_numpy()
    df["runtime_min_ms"] = df["runtime_min_ms"].mask(repeated)
    table = pa.Table.from_pandas(df, preserve_index=False)
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
    try:
        rows = conform(rows)
    except DatasetError as exc:
        raise DatasetError(f"{path}: rows to append: {exc}") from None
    with exclusive_lock(path, timeout_s):
        new = rows
        if path.exists():
            old = read(path)
            replaced = (old["problem_id"] + "|" + old["device_name"]).isin(
                set(rows["problem_id"] + "|" + rows["device_name"]))
            rows = pd.concat([old[~replaced], rows], ignore_index=True)
        if len(rows) > MAX_DATASET_ROWS:  # a file no later run could read: keep the new rows beside it
            beside = path.with_name(f"{path.stem}.more-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}")
            write(new, beside)
            try:
                _check_row_count(len(rows), path, what="would grow to")
            except DatasetError as exc:
                raise DatasetError(f"{exc}; the {len(new):,} new rows are in {beside}") from None
        write(rows, path)
