"""Reading and writing LUT files: bounded reads, parsing, migration, canonical dumps, digests.

Loading is strict (LUTError naming file, JSON location and fix) everywhere except inside
torch.compile, where `load_lut(path, strict=False)` logs one warning and returns an empty table.
Nothing here blocks or exhausts memory on a hostile path: only regular files are opened (a FIFO
would block forever, /dev/zero would never end), and no more than MAX_LUT_BYTES are read.
`read_bounded` is the package's one reader of user files, for every kind of file (FileKind).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO

from kernel_select.atomic_write import file_kind, write_atomic
from kernel_select.errors import KernelSelectError, LUTError
from kernel_select.lut.schema import SCHEMA_VERSION, KernelLUT, dump_lut, empty_lut
from kernel_select.lut.validation import escape_controls, lut_error, short, validate_document

log = logging.getLogger("kernel_select.lut")

#: Largest LUT file read, in bytes (64 MiB). A LUT of a million entries is about 250 MB, one of
#: the 32 MB files seen in practice is ~130k entries; the cap keeps a wrong path (a disk image,
#: /dev/zero) from exhausting memory inside a compile. The size is checked before reading.
MAX_LUT_BYTES = 64 * 1024 * 1024
# Opening a FIFO for reading blocks until a writer appears; O_NONBLOCK returns at once, and then
# fstat tells what the path really is (no race between a stat and the open).
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
               | getattr(os, "O_BINARY", 0))


# -- migrations ----------------------------------------------------------------------------------

def _v1_to_v2(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added pinned entries (`pin`); a v1 entry means the same in v2. A `pin` in a v1
    file was never valid, so it is refused here instead of silently gaining a meaning."""
    for where in _entry_locations_where(raw, lambda entry: "pin" in entry):
        raise ValueError(f"{where}.pin: pinned entries need schema_version 2; set "
                         f"\"schema_version\": {SCHEMA_VERSION} at the top of the file")
    return {**raw, "schema_version": 2}


def _v2_to_v3(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 3 added k ranges (`"k": {"min", "max"}`); a v2 entry means the same in v3. A k range
    in a v2 file was never valid, so it is refused here instead of silently gaining a meaning."""
    for where in _entry_locations_where(raw, lambda entry: isinstance(entry.get("k"), dict)):
        raise ValueError(f"{where}.k: k ranges need schema_version 3; set \"schema_version\": "
                         f"{SCHEMA_VERSION} at the top of the file")
    return {**raw, "schema_version": 3}


def _v3_to_v4(raw: dict[str, Any]) -> dict[str, Any]:
    """Version 4 added operand layouts (`"layout": "nt"`); a v3 entry serves every layout, as an
    entry without one does in v4. A layout in a v3 file was never valid, so it is refused here
    instead of silently gaining a meaning."""
    for where in _entry_locations_where(raw, lambda entry: "layout" in entry):
        raise ValueError(f"{where}.layout: operand layouts need schema_version 4; set "
                         f"\"schema_version\": {SCHEMA_VERSION} at the top of the file")
    return {**raw, "schema_version": 4}


def _entry_locations_where(raw: dict[str, Any], test: Callable[[dict[str, Any]], bool]) -> Iterable[str]:
    """JSON locations of the entries (JSON objects) of a raw document for which `test` holds
    (malformed levels are skipped: validation reports them with their location later)."""
    devices = raw.get("devices")
    for device, tables in (devices.items() if isinstance(devices, dict) else ()):
        for op, per_dtype in (tables.items() if isinstance(tables, dict) else ()):
            for dtype, entries in (per_dtype.items() if isinstance(per_dtype, dict) else ()):
                for index, entry in enumerate(entries if isinstance(entries, list) else ()):
                    if isinstance(entry, dict) and test(entry):
                        yield f"devices.{device}.{op}.{dtype}[{index}]"


#: One step per old version: MIGRATIONS[v] turns a raw v document into a raw v + 1 document (or
#: raises ValueError with a located message). tests/data/lut_v1.json is the v1 golden file.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2, 2: _v2_to_v3,
                                                                     3: _v3_to_v4}


def migrate(raw: dict[str, Any], *, source: str = "<string>") -> dict[str, Any]:
    """Bring a raw (json.load-ed) LUT document up to SCHEMA_VERSION, one version at a time.

    Raises:
        LUTError: for a missing, newer or unknown schema_version.
    """
    version = raw.get("schema_version")
    if version is None:
        if any(isinstance(key, str) and key.startswith(("((", "(torch")) or ")+" in str(key) for key in raw):
            raise lut_error(source, "this looks like a torch._inductor lookup_table, not a "
                           "kernel_select LUT; convert it with `kernel-select lut from-inductor`")
        raise lut_error(source, f"schema_version: missing; add \"schema_version\": {SCHEMA_VERSION} "
                       "at the top of the file")
    if isinstance(version, bool) or not isinstance(version, int):
        raise lut_error(source, f"schema_version: expected an integer, got {short(version)}")
    if version > SCHEMA_VERSION:
        raise lut_error(source, f"schema_version: {short(version)} was written by a newer kernel_select "
                       f"(this one reads up to {SCHEMA_VERSION}); upgrade kernel_select")
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            readable = ", ".join(map(str, sorted({*MIGRATIONS, SCHEMA_VERSION})))
            raise lut_error(source, f"schema_version: unknown version {short(version)}; "
                           f"this kernel_select reads versions {readable}")
        try:
            raw = step(raw)
        except ValueError as exc:
            raise lut_error(source, str(exc)) from None
        if raw.get("schema_version") != version + 1:
            raise lut_error(source, f"failed to migrate from schema_version {version} to {version + 1}")
        version += 1
    return raw



# -- reading: the package's one bounded reader ----------------------------------------------------
#
# Every command that reads a file a user names (a LUT, an AUTOTUNE log, an Inductor lookup_table,
# a shapes or results file, a dataset) goes through `read_bounded` with the FileKind of that file,
# so none of them blocks on a FIFO, reads /dev/zero until memory runs out, or dies in a
# RecursionError on deeply nested JSON. It lives here because the LUT layer is the lowest one that
# reads user files (inside torch.compile); the offline tools and the CLI build on it.

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
#: AUTOTUNE block is ~5 kB (results/models_h100_logs/: 170 kB of stderr for the 32 GEMMs of a
#: 2-layer Llama training step), so the cap holds ~50,000 benchmarked GEMMs.
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
                             "kernel_select.lut.io.MAX_LOG_BYTES",
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
    except FileNotFoundError:
        raise kind.fail(source, f"no such {kind.name} file; check the path") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise kind.fail(source, f"cannot open: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        os.close(fd)
        raise kind.fail(source, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise kind.fail(source, f"is {file_kind(mode)}, not a regular file; pass the path of {kind.noun}")
    return fd


def read_stream_bounded(stream: BinaryIO, kind: FileKind, source: str = "<stdin>") -> bytes:
    """At most `kind.limit` bytes of an open stream (stdin), or kind.error naming `source`."""
    try:
        data = stream.read(kind.limit + 1)
    except OSError as exc:
        raise kind.fail(source, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > kind.limit:
        raise _too_large(kind, source, len(data))
    return data


def read_lut_bytes(path: str | os.PathLike[str], *, limit: int = MAX_LUT_BYTES) -> bytes:
    """The bytes of a LUT file: a regular file of at most `limit` bytes, read without blocking.

    Raises:
        LUTError: for a missing path, anything but a regular file (directory, FIFO, device), a
            file over `limit` bytes, or a read error; the message names the path and the fix.
    """
    return read_bounded(path, replace(LUT_FILE, limit=limit))


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
                                 "(kernel_select.lut.io.MAX_JSON_DEPTH)")
    try:
        value = json.loads(text, object_pairs_hook=object_pairs_hook, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise kind.fail(source, f"line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise too_deep from None
    except ValueError as exc:  # NaN/Infinity, or an integer too long for Python to convert
        reason = "a number has too many digits" if "digits" in str(exc) else _first_line(exc)
        raise kind.fail(source, f"invalid JSON: {reason}") from None
    if _depth_over(value, MAX_JSON_DEPTH):
        raise too_deep
    return value


def _depth_over(value: Any, limit: int) -> bool:
    """Whether `value` nests containers more than `limit` deep; iterative, so never a RecursionError."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
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


def load_lut(path: str | os.PathLike[str], *, strict: bool = True) -> KernelLUT:
    """Read and validate a LUT file.

    Args:
        path: the JSON file (a regular file of at most MAX_LUT_BYTES).
        strict: True (CLI, library): raise LUTError on any problem. False (inside torch.compile):
            log one warning and return an empty table instead; never raises, never blocks.

    Raises:
        LUTError: in strict mode, naming the file, the JSON location and the fix.
    """
    source = os.fspath(path)
    try:
        return parse_lut(read_lut_bytes(path), source=source)
    except LUTError as exc:
        if strict:
            raise
        log.warning("Ignoring kernel lookup table (using no LUT entries): %s", exc)
    except Exception:  # noqa: BLE001 - lenient mode runs inside torch.compile and must not raise
        if strict:
            raise
        log.warning("Ignoring kernel lookup table %s (using no LUT entries): unexpected error",
                    escape_controls(source), exc_info=True)
    return empty_lut()


def lut_digest(path: str | os.PathLike[str], *, limit: int = MAX_LUT_BYTES) -> str:
    """A short text that changes when the file at `path` changes, for cache keys (`uuid()`).

    Reads at most `limit` bytes of a regular file and never raises: a missing, special, oversized
    or unreadable path gets a digest naming why, so a compile's cache key is still well defined.
    """
    try:
        return "sha256:" + hashlib.sha256(read_lut_bytes(path, limit=limit)).hexdigest()
    except LUTError as exc:
        return "unreadable:" + hashlib.sha256(str(exc).encode("utf-8", "replace")).hexdigest()[:16]
    except Exception:  # noqa: BLE001 - runs inside torch.compile's cache key and must not raise
        return "unreadable"


def parse_lut(text: str | bytes, *, source: str = "<string>") -> KernelLUT:
    """Parse and validate LUT JSON text. `source` names it in error messages.

    Raises:
        LUTError: for invalid UTF-8 or JSON, duplicate object keys, text over MAX_LUT_BYTES, or a
            document that does not match the schema.
    """
    raw = parse_json(text, LUT_FILE, source, object_pairs_hook=_object_without_duplicates)
    duplicate = _find_duplicate_key(raw)
    if duplicate is not None:
        where, key = duplicate
        raise lut_error(source, f"{where or '<top level>'}: duplicate key {short(key)}; keep one of them")
    if not isinstance(raw, dict):
        raise lut_error(source, "expected a JSON object with \"schema_version\" and \"devices\", "
                                f"got {type(raw).__name__}")
    return validate_document(migrate(raw, source=source), source)


class _DuplicateKeys(dict):
    """A JSON object in which some key appeared twice (json.loads keeps only the last)."""

    duplicate: str = ""


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            flagged = _DuplicateKeys(pairs)
            flagged.duplicate = key
            return flagged
        out[key] = value
    return out


def _find_duplicate_key(value: Any) -> tuple[str, str] | None:
    """The JSON location and key of the first object (in document order) with a repeated key."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]  # (node, (parent's link, key))
    while stack:
        node, link = stack.pop()
        if isinstance(node, _DuplicateKeys):
            return _location(link), node.duplicate
        children = (node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list)
                    else ())
        stack.extend(reversed([(child, (link, key)) for key, child in children
                               if isinstance(child, (dict, list))]))
    return None


def _location(link: tuple[Any, ...]) -> str:
    """devices.h100.mm.bfloat16[2] from the (parent's link, key) chain of a node."""
    keys: list[Any] = []
    while link:
        link, key = link
        keys.append(key)
    out = ""
    for key in reversed(keys):
        out += f"[{key}]" if isinstance(key, int) else f".{key}" if out else str(key)
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows; write an integer")


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]



# -- writing -------------------------------------------------------------------------------------

def save_lut(lut: KernelLUT, path: str | os.PathLike[str]) -> None:
    """Write `lut` in canonical form, atomically: a unique temporary file in the same folder,
    flushed to disk, then renamed over `path`. A crash (or kill -9) leaves the old file or the new
    one, never a half-written one; concurrent writers never share a temporary file.

    Raises:
        LUTError: if the folder cannot be written or `path` is a directory.
    """
    target = Path(path)
    if target.is_dir():
        raise lut_error(str(target), "is a directory; pass a file path for the LUT")
    try:
        write_atomic(target, dump_lut(lut))
    except OSError as exc:
        raise lut_error(str(target), f"cannot write: {exc.strerror or exc}") from None
