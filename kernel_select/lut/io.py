"""Reading and writing LUT files: parsing, migration, canonical dumps, digests.

Loading is strict (LUTError naming file, JSON location and fix) everywhere except inside
torch.compile, where `load_lut(path, strict=False)` logs one warning and returns an empty table.
Files are read by the package's one bounded reader (lut/bounded_read.py), so nothing here blocks or
exhausts memory on a hostile path.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernel_select.atomic_write import write_atomic
from kernel_select.errors import LUTError
from kernel_select.lut.schema import SCHEMA_VERSION, KernelLUT, dump_lut, empty_lut
from kernel_select.lut.validation import (cyclic_gc_paused, escape_controls, lut_error, short,
                                          validate_document)

from kernel_select.lut.bounded_read import LUT_FILE, MAX_LUT_BYTES, parse_json, read_bounded

log = logging.getLogger("kernel_select.lut")



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



# -- reading LUTs ---------------------------------------------------------------------------------












def read_lut_bytes(path: str | os.PathLike[str], *, limit: int = MAX_LUT_BYTES) -> bytes:
    """The bytes of a LUT file: a regular file of at most `limit` bytes, read without blocking.

    Raises:
        LUTError: for a missing path, anything but a regular file (directory, FIFO, device), a
            file over `limit` bytes, or a read error; the message names the path and the fix.
    """
    return read_bounded(path, replace(LUT_FILE, limit=limit))












def load_lut(path: str | os.PathLike[str], *, strict: bool = True) -> KernelLUT:
    """Read and validate a LUT file.

    Args:
        path: the JSON file (a regular file of at most MAX_LUT_BYTES).
        strict: True (CLI, library): raise LUTError on any problem. False (inside torch.compile):
            log one warning and return an empty table instead; never raises, never blocks.

    Raises:
        LUTError: in strict mode, naming the file, the JSON location and the fix.
    """
    try:
        if not isinstance(path, (str, os.PathLike)):
            raise lut_error(repr(path), "not a path; pass the path of a LUT JSON file")
        return parse_lut(read_lut_bytes(path), source=os.fspath(path))
    except LUTError as exc:
        if strict:
            raise
        log.warning("Ignoring kernel lookup table (using no LUT entries): %s", exc)
    except Exception:  # noqa: BLE001 - lenient mode runs inside torch.compile and must not raise
        if strict:
            raise
        log.warning("Ignoring kernel lookup table %s (using no LUT entries): unexpected error",
                    escape_controls(str(path)), exc_info=True)
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
    repeats: list[_DuplicateKeys] = []  # objects with a repeated key; the walk below runs only if any

    def objects(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out = _object_without_duplicates(pairs)
        if isinstance(out, _DuplicateKeys):
            repeats.append(out)
        return out

    with cyclic_gc_paused():  # a large table is hundreds of thousands of objects, none of them garbage
        raw = parse_json(text, LUT_FILE, source, object_pairs_hook=objects)
        # The first repeat in document order is the one named, which the parser (it builds inner
        # objects first) cannot tell; walking the whole document costs a second for a large table,
        # so only then.
        duplicate = _find_duplicate_key(raw) if repeats else None
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
    out = dict(pairs)  # in C: a table has hundreds of thousands of objects, nearly all without a repeat
    if len(out) == len(pairs):
        return out
    out = {}
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
