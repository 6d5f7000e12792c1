"""Crash- and concurrency-safe writing of dataset files.

* Every write goes through `kernel_select.atomic_write` (a unique temp file, fsync, rename over
  the target, fsync of the folder): a reader sees the old file or the new one, never a torn one,
  even after a power cut. A symlinked dataset is written through the link, to the file it names.
* `exclusive_lock` is a `filelock` lock on a sidecar `.NAME.lock` beside the resolved file, so
  writers through a symlink and through the real path exclude each other. It is an flock: the
  kernel drops it when the holder dies, so a killed writer can never leave the dataset locked.
  Holding it, a writer removes the temps of writers that were killed mid-write.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import filelock

from kernel_select.atomic_write import atomic_file, remove_stale_temps, resolve_target
from kernel_select.errors import DatasetError


def lock_path(path: str | Path) -> Path:
    """The lock file of the dataset `path` names (a symlink's target, not the link)."""
    target = resolve_target(path)
    return target.with_name(f".{target.name}.lock")


@contextlib.contextmanager
def exclusive_lock(path: str | Path, timeout_s: float) -> Iterator[None]:
    """Hold the exclusive lock of the dataset `path` names (waiting up to `timeout_s`), then
    remove temps left by killed writers.

    Raises:
        DatasetError: another process held the lock for more than `timeout_s` seconds.
    """
    lock = lock_path(path)
    lock.parent.mkdir(parents=True, exist_ok=True)
    held = filelock.FileLock(lock, timeout=timeout_s)
    try:
        held.acquire()
    except filelock.Timeout:
        raise DatasetError(
            f"{path}: another process is writing this dataset (lock {lock} held for more than "
            f"{timeout_s:g} s); wait for it to finish, or write to another file and merge later") from None
    try:
        remove_stale_temps(path)
        yield
    finally:
        held.release()


def atomic_write_parquet(table, path: Path) -> None:
    """Write a pyarrow table to `path` atomically and durably (see the module docstring)."""
    import pyarrow.parquet as pq

    with atomic_file(path, "wb") as handle:
        pq.write_table(table, handle, compression="zstd")
