"""Crash- and concurrency-safe file writing for datasets.

* Every write goes to a temp file with a unique name next to the target, is fsynced, renamed over
  the target (atomic on POSIX), and the directory is fsynced, so a reader sees the old file or the
  new one, never a torn one, even after a power cut.
* Temp names carry the writer's pid (`.NAME.PID.RANDOM.tmp`); a writer killed mid-write leaves
  one behind, and the next writer (holding the lock) removes temps whose pid is no longer alive.
* `exclusive_lock` is an fcntl lock on a sidecar `.NAME.lock` file: the kernel drops it when the
  holder dies, so a killed writer can never leave the dataset locked.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from kernel_select.atomic_write import atomic_file
from kernel_select.errors import DatasetError

POLL_S = 0.05


def lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


@contextlib.contextmanager
def exclusive_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """Hold an exclusive lock on `path` (waiting up to `timeout_s`), then clean stale temps."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() >= deadline:
                    raise DatasetError(
                        f"{path}: another process is writing this dataset (lock {lock_path(path)} "
                        f"held for more than {timeout_s:g} s); wait for it to finish, or write to "
                        "another file and merge later") from None
                time.sleep(POLL_S)
        remove_stale_temps(path)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(path: Path) -> list[Path]:
    """Delete temp files of `path` left by writers that died; returns what was removed."""
    removed = []
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        parts = tmp.name[len(path.name) + 2:].split(".")
        pid = int(parts[0]) if parts and parts[0].isdigit() else -1
        if pid != os.getpid() and not _pid_alive(pid):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def atomic_write_parquet(table, path: Path) -> None:
    """Write a pyarrow table to `path` atomically and durably (see the module docstring)."""
    import pyarrow.parquet as pq

    with atomic_file(path, "wb") as handle:
        pq.write_table(table, handle, compression="zstd")
