"""Check before work: every path a command will write is checked when its flag is parsed, before
the command measures, trains or compiles anything.

Each output flag's argparse type (`output_file`, `output_dir`) runs the writer's own check
(kernel_select/atomic_write.py, `check_writable`): the target is a regular file (not a directory,
FIFO or device), not read-only, not hard-linked; the nearest existing folder on its way is a folder
(not a file), writable, on a file system mounted read-write, with some free space. A missing folder
is fine: the writers create it. A refusal is one line naming the path.
"""

from __future__ import annotations

import argparse
import errno
import os
from collections.abc import Callable, Iterable

from kernel_select.atomic_write import (
    check_folder_writable,
    check_replaceable,
    check_writable,
    file_kind,
    resolve_target,
)
from kernel_select.text import printable


def check_output_dir(path: str | os.PathLike[str], files: Iterable[str] = ()) -> None:
    """Raise OSError naming `path` if a folder could not be written there, or naming one of `files`
    (names inside it that the command replaces) if that one could not be replaced."""
    shown = os.fspath(path)
    folder = resolve_target(path)
    if folder.exists() and not folder.is_dir():
        kind = "a regular file" if folder.is_file() else file_kind(os.stat(folder).st_mode)
        raise OSError(errno.ENOTDIR, f"is {kind}, not a folder; give a folder to write into", shown)
    check_folder_writable(folder, shown)
    for name in files:
        check_replaceable(folder / name, os.path.join(shown, name))


def output_file(text: str) -> str:
    """An argparse type: a path to write a file to, checked as `atomic_write.check_writable` does."""
    return _checked(check_writable, text)


def output_dir(text: str) -> str:
    """An argparse type: a folder to write into (created if missing), checked as `check_output_dir`
    does."""
    return _checked(check_output_dir, text)


def _checked(check: Callable[[str], None], text: str) -> str:
    try:
        check(text)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        named = exc.filename if isinstance(exc, OSError) and exc.filename is not None else text
        raise argparse.ArgumentTypeError(f"{printable(named)}: {printable(reason)}") from None
    return text
