"""The package's one reader of user files: bounded, non-blocking, strict JSON.

Every command that reads a file a user names (a LUT, an AUTOTUNE log, an Inductor lookup_table,
a shapes or results file, a dataset) goes through `read_bounded` (or `open_regular`, for readers
that stream) with the FileKind of that file, so none of them blocks on a FIFO, reads /dev/zero until
memory runs out, or dies in a RecursionError on deeply nested JSON: only regular files are opened,
and no more than the kind's limit is read. It lives in the LUT layer because that is the lowest one
that reads user files (inside torch.compile); the offline tools and the CLI build on it.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, BinaryIO

from kernel_select.atomic_write import file_kind
from kernel_select.errors import KernelSelectError, LUTError, first_line
from kernel_select.lut.validation import escape_controls

#: Largest LUT file read, in bytes (64 MiB). A LUT of a million entries is about 250 MB, one of
#: the 32 MB files seen in practice is ~130k entries; the cap keeps a wrong path (a disk image,
#: /dev/zero) from exhausting memory inside a compile. The size is checked before reading.
MAX_LUT_BYTES = 64 * 1024 * 1024


# Opening a FIFO for reading blocks until a writer appears; O_NONBLOCK returns at once, and then
# fstat tells what the path really is (no race between a stat and the open).
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_BINARY", 0))


@dataclass(frozen=True)
class FileKind:
    """A kind of file the package reads: its size cap and the words messages use for it."""

    name: str  # "LUT", as in "no such LUT file", "over the LUT size limit"
    noun: str  # "a LUT JSON file", as in "pass the path of a LUT JSON file"
    limit: int  # the most bytes read
    limit_name: str  # the constant that sets `limit`, named when a file is over it
    error: type[KernelSelectError] = LUTError
    fix: str = "check the path"

    def fail(self, source: str, detail: str) -> KernelSelectError:
        """This kind's error for `detail` in `source`, safe to print."""
        return self.error(escape_controls(f"{source}: {detail}"))


#: Largest AUTOTUNE log read, in bytes (256 MiB). Its text is parsed whole, so it is capped: one
#: AUTOTUNE block is ~5 kB (170 kB of stderr for the 32 GEMMs of a 2-layer Llama training step), so
#: the cap holds ~50,000 benchmarked GEMMs.
MAX_LOG_BYTES = 256 * 1024 * 1024


#: Deepest JSON nesting any input may have. A LUT nests 8 levels, a shapes file 3; the C parser's
#: own guard (the interpreter's recursion limit) allows ~1000, and code that walks the result
#: recursively would then fail wherever the stack runs out.
MAX_JSON_DEPTH = 64


LUT_FILE = FileKind("LUT", "a LUT JSON file", MAX_LUT_BYTES, "kernel_select.lut.MAX_LUT_BYTES",
                    fix="split the table or check the path")


INDUCTOR_TABLE_FILE = FileKind("lookup_table", "a torch._inductor lookup_table JSON file", MAX_LUT_BYTES,
                               "kernel_select.lut.MAX_LUT_BYTES")


AUTOTUNE_LOG_FILE = FileKind("AUTOTUNE log", "a log file (max-autotune's stderr)", MAX_LOG_BYTES,
                             "kernel_select.lut.bounded_read.MAX_LOG_BYTES",
                             fix="pass the compile's stderr only, or split the log")


def read_bounded(path: str | os.PathLike[str], kind: FileKind) -> bytes:
    """The bytes of a regular file of at most `kind.limit` bytes, read without blocking.

    Raises:
        kind.error: for a missing path, anything but a regular file (directory, FIFO, device), a
            file over the limit, or a read error; the message names the path and the fix.
    """
    source = os.fspath(path)
    fd = open_regular(path, kind)
    try:
        size = os.fstat(fd).st_size
        if size > kind.limit:
            raise _too_large(kind, source, size)
        data = _read_at_most(fd, kind.limit + 1)  # +1: a file that grew since fstat is caught too
    except OSError as exc:
        raise kind.fail(source, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > kind.limit:
        raise _too_large(kind, source, len(data))
    return data


def open_regular(path: str | os.PathLike[str], kind: FileKind) -> int:
    """A read-only descriptor of the regular file at `path` (the caller closes it). For readers
    that stream a file themselves (parquet); `read_bounded` reads whole files.

    Raises:
        kind.error: for a missing path or anything but a regular file, naming what it is.
    """
    source = os.fspath(path)
    try:
        fd = os.open(source, _OPEN_FLAGS)
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise _cannot_open(kind, source, exc) from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise kind.fail(source, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(kind, source, mode)
    return fd


def stat_regular(path: str | os.PathLike[str], kind: FileKind) -> os.stat_result:
    """The stat of the regular file of at most `kind.limit` bytes at `path`, without opening it:
    for callers that key a cache by the file's identity before reading it (inside torch.compile).

    Raises:
        kind.error: for a missing path, anything but a regular file, or a file over the limit.
    """
    source = os.fspath(path)
    try:
        info = os.stat(source)
    except (OSError, ValueError) as exc:
        raise _cannot_open(kind, source, exc) from None
    if not stat.S_ISREG(info.st_mode):
        raise _not_regular(kind, source, info.st_mode)
    if info.st_size > kind.limit:
        raise _too_large(kind, source, info.st_size)
    return info


def _cannot_open(kind: FileKind, source: str, exc: OSError | ValueError) -> KernelSelectError:
    if isinstance(exc, FileNotFoundError):
        return kind.fail(source, f"no such {kind.name} file; check the path")
    if isinstance(exc, ValueError):
        return kind.fail(source, "cannot open: not a usable path (it contains a NUL byte)")
    return kind.fail(source, f"cannot open: {exc.strerror or exc}")


def _not_regular(kind: FileKind, source: str, mode: int) -> KernelSelectError:
    return kind.fail(source, f"is {file_kind(mode)}, not a regular file; pass the path of {kind.noun}")


def read_stream_bounded(stream: BinaryIO, kind: FileKind, source: str = "<stdin>") -> bytes:
    """At most `kind.limit` bytes of an open stream (stdin), or kind.error naming `source`."""
    try:
        data = stream.read(kind.limit + 1)
    except OSError as exc:
        raise kind.fail(source, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > kind.limit:
        raise _too_large(kind, source, len(data))
    return data


def read_json(path: str | os.PathLike[str], kind: FileKind) -> Any:
    """The parsed content of a JSON file of `kind`, read with `read_bounded` and `parse_json`."""
    return parse_json(read_bounded(path, kind), kind, os.fspath(path))


def parse_json(text: str | bytes, kind: FileKind, source: str, *,
               object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """Strict JSON (UTF-8, no NaN or Infinity, at most MAX_JSON_DEPTH levels) of at most
    `kind.limit` bytes; kind.error naming `source`, the line and column otherwise."""
    if len(text) > kind.limit:
        raise _too_large(kind, source, len(text))
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise kind.fail(source, f"byte {exc.start}: not valid UTF-8; save the file as UTF-8") from None
    too_deep = kind.fail(source, f"invalid JSON: nested more than {MAX_JSON_DEPTH} levels deep "
                                 "(kernel_select.lut.bounded_read.MAX_JSON_DEPTH)")
    try:
        value = json.loads(text, object_pairs_hook=object_pairs_hook, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise kind.fail(source, f"line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:  # NaN/Infinity, or an integer too long for Python to convert
        reason = "a number has too many digits" if "digits" in str(exc) else first_line(exc)
        raise kind.fail(source, f"invalid JSON: {reason}") from None
    if _depth_over(value, MAX_JSON_DEPTH):
        raise too_deep
    return value


def _depth_over(value: Any, limit: int) -> bool:
    """Whether `value` nests containers more than `limit` deep; one level at a time, so never a
    RecursionError, and each container is visited once."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        level = [child for node in level for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
    return False


def _read_at_most(fd: int, size: int) -> bytes:
    chunks: list[bytes] = []
    while size > 0:
        chunk = os.read(fd, min(size, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _too_large(kind: FileKind, source: str, size: int) -> KernelSelectError:
    return kind.fail(source, f"{size:,} bytes or more is over the {kind.name} size limit of {kind.limit:,} "
                             f"bytes ({kind.limit_name}); {kind.fix}")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows; write an integer")
