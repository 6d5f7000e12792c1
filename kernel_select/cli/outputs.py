"""Check before work: every path a command will write is checked when its flag is parsed, before
the command measures, trains or compiles anything.

A late failure loses the work: `bench --out` on a read-only file once measured for 96 s and then
refused to write the rows. So each output flag's argparse type (`output_file`, `output_dir`) checks
what the writer would refuse, with one line naming the path: the target is a regular file (not a
directory, FIFO or device), not read-only, not hard-linked (the atomic writer refuses those, see
kernel_select/atomic_write.py); the nearest existing folder on its way is a folder (not a file),
writable, on a file system mounted read-write, with some free space. A missing folder is fine: the
writers create it.
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from kernel_select.atomic_write import check_replaceable, file_kind, resolve_target
from kernel_select.text import printable

#: Free space an output's file system must have before the work starts: less than this is a disk
#: that is (nearly) full, where the write at the end would fail.
MIN_FREE_BYTES = 16 * 1024 * 1024


def check_output_file(path: str | os.PathLike[str]) -> None:
    """Raise OSError naming `path` if a file could not be written there (see the module docstring)."""
    shown = os.fspath(path)
    target = resolve_target(path)
    check_replaceable(target, shown)
    _check_folder_on_the_way(target.parent, shown)


def check_output_dir(path: str | os.PathLike[str], files: Iterable[str] = ()) -> None:
    """Raise OSError naming `path` if a folder could not be written there, or naming one of `files`
    (names inside it that the command replaces) if that one could not be replaced."""
    shown = os.fspath(path)
    folder = resolve_target(path)
    if folder.exists() and not folder.is_dir():
        kind = "a regular file" if folder.is_file() else file_kind(os.stat(folder).st_mode)
        raise OSError(errno.ENOTDIR, f"is {kind}, not a folder; give a folder to write into", shown)
    _check_folder_on_the_way(folder, shown)
    for name in files:
        check_replaceable(folder / name, os.path.join(shown, name))


def output_file(text: str) -> str:
    """An argparse type: a path to write a file to, checked as `check_output_file` does."""
    return _checked(check_output_file, text)


def output_dir(text: str) -> str:
    """An argparse type: a folder to write into (created if missing), checked as `check_output_dir`
    does."""
    return _checked(check_output_dir, text)


def _checked(check, text: str) -> str:  # noqa: ANN001 -- one of the two checks above
    try:
        check(text)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        named = exc.filename if isinstance(exc, OSError) and exc.filename is not None else text
        raise argparse.ArgumentTypeError(f"{printable(named)}: {printable(reason)}") from None
    return text


def _check_folder_on_the_way(folder: Path, shown: str) -> None:
    """The nearest existing folder at or above `folder` must be a writable folder with free space."""
    existing = folder
    while not os.path.lexists(existing):
        existing = existing.parent
    try:
        info = os.stat(existing)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, shown) from None
    if not stat.S_ISDIR(info.st_mode):
        kind = "a regular file" if stat.S_ISREG(info.st_mode) else file_kind(info.st_mode)
        raise OSError(errno.ENOTDIR, f"cannot be created: {printable(existing)} is {kind}, not a folder",
                      shown)
    fs = os.statvfs(existing)
    if fs.f_flag & os.ST_RDONLY:
        raise OSError(errno.EROFS, f"cannot be written: {printable(existing)} is on a read-only file "
                                   "system", shown)
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, f"cannot be written: the folder {printable(existing)} is not "
                                            "writable", shown)
    free = fs.f_bavail * fs.f_frsize
    if free < MIN_FREE_BYTES:
        raise OSError(errno.ENOSPC, f"cannot be written: {free // 1024:,} KiB free on the file system of "
                                    f"{printable(existing)}", shown)
