"""One way to replace a file: a crash, a kill -9 or a full disk leaves the old file or the new one,
never a truncated one, and concurrent writers never share a temporary file.

The new content goes to a uniquely named temporary file beside the target, `.NAME.PID.RANDOM.tmp`
(same file system, so the rename is atomic on POSIX; the pid lets a later writer tell a temp left
by a killed writer from a live one's), is flushed and fsynced, gets the permissions of an ordinary new
file (mkstemp creates 0600), is renamed over the target, and the folder is fsynced so the rename
itself survives a power loss. Used for LUTs, model checkpoints and cards, datasets and result files.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary file that replaces `path` when the block ends without an exception.

    `mode` is "wb" or "w" (text is UTF-8 with "\\n" line ends). The target's folder is created.
    On an exception the temporary file is removed and the target is left as it was.
    """
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_file: mode must be 'wb' or 'w', got {mode!r}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.{os.getpid()}.", suffix=".tmp", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        text = {"encoding": "utf-8", "newline": "\n"} if mode == "w" else {}
        with os.fdopen(fd, mode, **text) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
        _fsync_dir(target.parent)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Replace `path` with `data` (bytes, or text written as UTF-8) atomically and durably."""
    with atomic_file(path, "w" if isinstance(data, str) else "wb") as handle:
        handle.write(data)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # a folder that cannot be opened for reading: the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder
    finally:
        os.close(fd)
