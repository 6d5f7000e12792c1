"""Turning a raw document into a KernelLUT, and pydantic's errors into one line a person can act on.

Every message names the file, the JSON location (`devices.h100.mm.bfloat16[2].configs[0].block_m`)
and the fix. Keys and values come from the file, so control characters in them are escaped before
they reach a terminal.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.errors import LUTError
from kernel_select.lut.entries import (BATCHED_OPS, UNION_TAGS, BatchedLUTEntry, LUTEntry, SizeRange,
                                       entry_dict)
from kernel_select.lut.schema import SCHEMA_VERSION, KernelLUT, LUTRow, OpTables
from kernel_select.text import printable

#: The one escaping helper (kernel_select.text), under the name the LUT modules import.
escape_controls = printable


def lut_error(source: str, detail: str) -> LUTError:
    """The LUTError for `detail` in `source`, safe to print."""
    return LUTError(escape_controls(f"{source}: {detail}"))


def short(value: Any) -> str:
    """repr(value), cut to 40 characters."""
    try:
        text = repr(value)
    except ValueError:  # an int of more digits than Python converts to text (sys.int_info)
        return "an integer of thousands of digits"
    return text if len(text) <= 40 else text[:37] + "..."


_LONG_WORD = re.compile(r"\S{41,}")


def cut_long_words(text: str) -> str:
    """`text` with every run of more than 40 non-space characters cut to 40: validators repeat the
    value they refuse, and a 4,300-digit number or a 5,000-letter layout is not worth a screen."""
    return _LONG_WORD.sub(lambda match: match.group()[:37] + "...", text)


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a table is built (and back on after, if it was).

    Reading and validating a table creates a few containers per entry, none of them garbage, and
    each of the collector's passes walks every one made so far: on a 100,000-entry table they took
    2.7 of 4.9 CPU-seconds (tests/benchmarks/test_lut_scale.py). Reference counting still frees what
    a table drops; only cycles wait for the collector's next pass.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def validate_document(raw: Any, source: str) -> KernelLUT:
    """A KernelLUT from a raw (json.load-ed, migrated) document.

    Raises:
        LUTError: naming `source`, the JSON location of the first problem and the fix.
    """
    try:
        with cyclic_gc_paused():
            return KernelLUT.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise lut_error(source, _describe(exc)) from None
    except RecursionError:
        raise lut_error(source, "the document is nested too deeply to be a LUT") from None


def _describe(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    where, is_key = _json_path(first["loc"])
    message = cut_long_words(first["msg"].removeprefix("Value error, "))
    hint = _hint(first, where, is_key)
    more = f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    if is_key:
        where += " (the key)"
    elif not where:
        # Model-level checks (duplicate device keys) already name their location.
        where = "" if first["type"] == "value_error" else "<top level>"
    return f"{where}: {message}{hint}{more}" if where else f"{message}{more}"


def _json_path(loc: tuple[Any, ...]) -> tuple[str, bool]:
    """('devices', 'h100', 'mm', 'bfloat16', 2, 'configs', 0, 'block_m') -> devices.h100...block_m."""
    out = ""
    is_key = False
    previous: Any = None
    for part in loc:
        if part == "[key]":
            is_key = True
        elif previous in ("m", "k", "pin") and part in UNION_TAGS:
            pass
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
        previous = part
    return out, is_key


_FIELDS_OF = {
    "root": tuple(KernelLUT.model_fields),
    "device": tuple(OpTables.model_fields),
    "entry": tuple(LUTEntry.model_fields),
    "batched entry": tuple(BatchedLUTEntry.model_fields),
    "config": tuple(GemmConfig.model_fields),
    "size range": tuple(SizeRange.model_fields),
}


def _hint(error: Any, where: str, is_key: bool) -> str:
    kind = error["type"]
    loc = [p for p in error["loc"] if p not in UNION_TAGS and p != "[key]"]
    if kind == "extra_forbidden":
        parent = _parent_kind(loc[:-1])
        allowed = f"; allowed: {', '.join(_FIELDS_OF[parent])}" if parent else ""
        return f" (unknown field {loc[-1]!r}{allowed}; check its spelling)"
    if kind == "missing":
        return " (add it)"
    value = error.get("input")
    if is_key or isinstance(value, (dict, list)) or kind in ("literal_error", "value_error"):
        return ""
    return f", got {short(value)}"


def _parent_kind(loc: list[Any]) -> str | None:
    if not loc:
        return "root"
    if len(loc) == 2 and loc[0] == "devices":
        return "device"
    if len(loc) >= 2 and loc[-2] == "configs":
        return "config"
    if loc[-1] in ("m", "k"):
        return "size range"
    if loc[-1] == "pin":
        return "config"
    if len(loc) == 5 and isinstance(loc[-1], int):
        return "batched entry" if loc[2] in BATCHED_OPS else "entry"
    return None


def lut_from_rows(rows: Iterable[LUTRow | tuple[str, str, str, LUTEntry]], *,
                  source: str = "<rows>") -> KernelLUT:
    """A validated table from (device, op, dtype, entry) rows; device names are normalized.

    Raises:
        LUTError: for unknown devices/ops/dtypes, overlapping keys, or `batch` on mm/addmm.
    """
    tree: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    for device, op, dtype, entry in rows:
        # Names are normalized (or reported with their location) by validation.
        device = device.key if isinstance(device, DeviceSpec) else device
        tree.setdefault(device, {}).setdefault(op, {}).setdefault(dtype, []).append(entry_dict(entry))
    return validate_document({"schema_version": SCHEMA_VERSION, "devices": tree}, source)


def merge_luts(base: KernelLUT, other: KernelLUT) -> KernelLUT:
    """A new table with the entries of both; `other` wins where both have the same key.

    Raises:
        LUTError: if an entry of `other` overlaps an entry of `base` without having the same key (for
            example an m range covering an exact m); resolve it by hand.
    """
    def ident(row: LUTRow) -> tuple[Any, ...]:
        return (row.device, row.op, row.dtype, row.entry.n, row.entry.k_bounds, row.entry.m_bounds,
                row.entry.batch_key, row.entry.layout)

    merged = {ident(row): row for row in base.entries()}
    merged.update((ident(row), row) for row in other.entries())
    return lut_from_rows(merged.values(), source="<merged table>")
