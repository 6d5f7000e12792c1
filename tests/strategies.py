"""Hypothesis strategies for kernel_select objects, shared by the property tests.

Layered like the data: gemm_configs -> lut_entries -> luts; plus problems that land on, next to and
away from LUT keys, hand-written spellings of a table, and corruptions of a valid document.
"""

from __future__ import annotations

import json
import os
import random
import re
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st

from kernel_select.lut import lut_from_rows
from kernel_select.configs import GemmConfig
from kernel_select.device import KNOWN_DEVICES
from kernel_select.layouts import LAYOUTS
from kernel_select.lut import (BATCHED_OPS, MAX_DIM, BatchedLUTEntry, KernelLUT, LUTEntry, LUTRow, SizeRange,
                               dump_lut)
from kernel_select.problem import PRECISIONS, SUPPORTED_OPS, TF32, Problem, precision_dtype

BLOCKS = (16, 32, 64, 128, 256, 512, 1024)
WARPS = (1, 2, 4, 8, 16, 32)
# A small pool of n and k makes entries of one table share (n, k), so m ranges meet and lookups
# have to tell neighbours apart; the wide draws cover the rest of the valid range.
COMMON_DIMS = (1, 7, 64, 1280, 3420, 4096)


def examples(ci: int) -> settings:
    """`ci` examples under HYPOTHESIS_PROFILE=ci (and "mutation", which is "ci" without shrinking);
    the active profile's count otherwise.

    KERNEL_SELECT_FUZZ=N (`make fuzz`) runs N times the ci count with random (not derandomized)
    inputs, so each fuzz run explores new examples.
    """
    fuzz = int(os.environ.get("KERNEL_SELECT_FUZZ") or 0)
    if fuzz > 0:
        return settings(max_examples=ci * fuzz, derandomize=False)
    if os.environ.get("HYPOTHESIS_PROFILE") in ("ci", "mutation"):
        return settings(max_examples=ci)
    return settings()


# Strategies are built once at import: constructing them inside composites costs more than drawing.
DIMS = st.one_of(st.sampled_from(COMMON_DIMS), st.integers(1, 65536), st.integers(1, MAX_DIM))
_BOOLS = st.booleans()
_M_HIGH = st.sampled_from((16, 4096, MAX_DIM))
_M_POINTS = {high: st.lists(st.integers(1, high), min_size=1, max_size=4) for high in (16, 4096, MAX_DIM)}
_M_SHAPES = st.sampled_from(("exact", "range", "range"))  # a single value is drawn as a range too
# The width of a k range drawn from k up (None: an exact k); wide ones reach other entries' k.
_K_WIDTHS = st.sampled_from((None, None, None, 0, 1, 4096, MAX_DIM))
_NK = st.lists(st.tuples(DIMS, DIMS, _K_WIDTHS), min_size=1, max_size=3)
_BATCHES = st.lists(st.integers(1, 64), min_size=1, max_size=2)
# The layouts the entries of one (n, k) name (None: every layout). Mostly one, often several, so
# that entries of one key told apart only by their layouts are frequent; None beside a layout
# overlaps it, and lut_entries leaves the later one out.
_LAYOUT_SETS = st.sampled_from(((None,), (None,), ("nt",), ("nn", "tn"), ("nn", "nt", "tn", "tt"),
                                (None, "nt"), ("tn", None)))
_LAYOUTS = st.sampled_from(LAYOUTS)


def dims() -> st.SearchStrategy[int]:
    return DIMS


_CONFIG_SPACE = len(BLOCKS) ** 3 * 8 * len(WARPS) * 65
_CONFIG_CODES = st.integers(0, _CONFIG_SPACE - 1)


@st.composite
def gemm_configs(draw: st.DrawFn) -> GemmConfig:
    # One integer draw decoded into six fields: property suites draw thousands of configs, and
    # one draw is several times cheaper than six. group_m code 0 is the default 8.
    code = draw(_CONFIG_CODES)
    code, group = divmod(code, 65)
    code, warps = divmod(code, len(WARPS))
    code, stages = divmod(code, 8)
    code, block_k = divmod(code, len(BLOCKS))
    block_m, block_n = divmod(code, len(BLOCKS))
    return GemmConfig(block_m=BLOCKS[block_m], block_n=BLOCKS[block_n], block_k=BLOCKS[block_k],
                      num_stages=stages + 1, num_warps=WARPS[warps], group_m=group or 8)


def _unique(items: list[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


_CONFIG_LISTS = st.lists(gemm_configs(), min_size=1, max_size=2)


# One draw each: free text would cost a draw per character, and the format treats notes as opaque.
notes = st.sampled_from((None, None, "", "stock max-autotune pick", "größer \u2192 schneller",
                         'quote " \\ tab\t', "\x00 control"))


@st.composite
def m_keys(draw: st.DrawFn) -> list[int | SizeRange]:
    """Up to two disjoint m keys: exact values and inclusive ranges (some of width one)."""
    points = sorted(set(draw(_M_POINTS[draw(_M_HIGH)])))
    if len(points) % 2:  # an odd point out pairs with itself
        points.append(points[-1])
    out: list[int | SizeRange] = []
    for low, high in zip(points[::2], points[1::2]):
        out.append(low if draw(_M_SHAPES) == "exact" else SizeRange(min=low, max=high))
    return out


_M_KEYS = m_keys()


# What an entry offers: configs to benchmark (mostly), or a pin: "aten" or one Triton config.
_CHOICES = st.one_of(
    _CONFIG_LISTS.map(lambda configs: {"configs": _unique(configs)}),
    st.just({"pin": "aten"}),
    _CONFIG_LISTS.map(lambda configs: {"pin": configs[0]}),
)


@st.composite
def lut_entries(draw: st.DrawFn, op: str = "mm") -> list[LUTEntry]:
    """Non-overlapping entries for one device/op/dtype: exact k and k ranges, and an entry that
    would overlap one drawn before it is left out."""
    entries: list[LUTEntry] = []
    for n, k, width in _unique(draw(_NK)):
        k_key = k if width is None else SizeRange(min=k, max=min(k + width, MAX_DIM))
        batches: list[int | None] = [None]
        if op in BATCHED_OPS and draw(_BOOLS):
            batches = sorted(set(draw(_BATCHES)))
        for batch in batches:
            shared = draw(_M_KEYS)  # m keys that several layouts reuse: one key, told apart by layout
            for layout in draw(_LAYOUT_SETS):
                for m in shared if draw(_BOOLS) else draw(_M_KEYS):
                    fields = dict(m=m, n=n, k=k_key, layout=layout, note=draw(notes), **draw(_CHOICES))
                    entry = (BatchedLUTEntry(batch=batch, **fields) if op in BATCHED_OPS
                             else LUTEntry(**fields))
                    if not any(entries_meet(entry, other) for other in entries):
                        entries.append(entry)
    return entries


def entries_meet(a: LUTEntry, b: LUTEntry) -> bool:
    """Whether two entries of one table serve a common problem (the format's overlap rule, written
    out apart from kernel_select.lut)."""
    def intersect(x: int | SizeRange, y: int | SizeRange) -> bool:
        x_low, x_high = (x.min, x.max) if isinstance(x, SizeRange) else (x, x)
        y_low, y_high = (y.min, y.max) if isinstance(y, SizeRange) else (y, y)
        return x_low <= y_high and y_low <= x_high

    def coincide(x: object, y: object) -> bool:  # a batch or a layout; None serves every one
        return x is None or y is None or x == y

    return (a.n == b.n and intersect(a.m, b.m) and intersect(a.k, b.k) and coincide(a.batch_key, b.batch_key)
            and coincide(a.layout, b.layout))


_CELLS = [(device, op, dtype) for device in sorted(KNOWN_DEVICES) for op in SUPPORTED_OPS
          for dtype in PRECISIONS]
_CELL_LISTS = {(size, least): st.lists(st.sampled_from(_CELLS), min_size=least, max_size=size)
               for size in (1, 2, 3) for least in (0, 1)}
_ENTRY_LISTS: dict[str, st.SearchStrategy[list[LUTEntry]]] = {}


@st.composite
def luts(draw: st.DrawFn, max_tables: int = 2, min_tables: int = 0) -> KernelLUT:
    """A valid KernelLUT with `min_tables` to `max_tables` (device, op, dtype) tables."""
    cells = draw(_CELL_LISTS[max_tables, min_tables])
    rows = [LUTRow(device, op, dtype, entry) for device, op, dtype in sorted(set(cells))
            for entry in draw(_ENTRY_LISTS.setdefault(op, lut_entries(op)))]
    return lut_from_rows(rows)


_PICK = st.integers(0, 2**16)  # an index into a list drawn at run time, taken modulo its length
_NEAR = st.sampled_from(("below", "low", "middle", "high", "above"))
_PROBE_KIND = st.sampled_from(("near", "near", "near", "anywhere"))
_OPS = st.sampled_from(SUPPORTED_OPS)
_PRECISIONS = st.sampled_from(PRECISIONS)
_SMALL_BATCH = st.integers(1, 64)


@st.composite
def probes(draw: st.DrawFn, lut: KernelLUT) -> Problem:
    """A problem on a key of `lut` (in its layout or another), just outside one, or anywhere."""
    rows = list(lut.entries())
    if rows and draw(_PROBE_KIND) == "near":
        row = rows[draw(_PICK) % len(rows)]
        m = _near(draw, *row.entry.m_bounds)
        k = _near(draw, *row.entry.k_bounds) if isinstance(row.entry.k, SizeRange) else row.entry.k
        batch = 1
        if row.op in BATCHED_OPS:
            batch = row.entry.batch_key or 1
            if draw(_BOOLS):
                batch = draw(_SMALL_BATCH)
        layout = row.entry.layout if row.entry.layout and draw(_BOOLS) else draw(_LAYOUTS)
        # The entry's precision, or float32 in the other one: a float32 entry must not serve TF32.
        other = {"float32": TF32, TF32: "float32"}.get(row.dtype, row.dtype)
        precision = row.dtype if draw(_BOOLS) else other
        return precision_problem(m, row.entry.n, k, precision, batch=batch, op=row.op, layout=layout)
    op = draw(_OPS)
    return precision_problem(draw(DIMS), draw(DIMS), draw(DIMS), draw(_PRECISIONS), op=op,
                             batch=draw(_SMALL_BATCH) if op in BATCHED_OPS else 1, layout=draw(_LAYOUTS))


def precision_problem(m: int, n: int, k: int, precision: str, **fields: Any) -> Problem:
    """The Problem of a LUT list's dtype key (a dtype, or "tf32": float32 with TF32)."""
    return Problem(m, n, k, precision_dtype(precision), tf32=precision == TF32, **fields)


def _near(draw: st.DrawFn, low: int, high: int) -> int:
    """A size on, inside or just outside [low, high] (never below 1)."""
    return max(1, {"below": low - 1, "low": low, "middle": (low + high) // 2, "high": high,
                   "above": high + 1}[draw(_NEAR)])


# -- documents -----------------------------------------------------------------------------------

_INDENTS = st.sampled_from((None, 0, 1, 2, 4, "\t"))


@st.composite
def hand_written(draw: st.DrawFn, lut: KernelLUT) -> str:
    """`lut` as a person might write it: any indent and key order, marketing device names, entries
    in any order, group_m left out when it is the default."""
    shuffle = random.Random(draw(_PICK)).shuffle
    doc: dict[str, Any] = {"devices": {}, "schema_version": 4}
    names = {key: KNOWN_DEVICES[key].name if draw(_BOOLS) else key for key in sorted(lut.devices)}
    for row in lut.entries():
        name = names[row.device]
        tables = doc["devices"].setdefault(name, {}).setdefault(row.op, {})
        entry = row.entry.model_dump(exclude_none=True)
        if "configs" in entry:
            entry["configs"] = [_short_config(config) for config in entry["configs"]]
        elif isinstance(entry["pin"], dict):
            entry["pin"] = _short_config(entry["pin"])
        items = list(entry.items())
        shuffle(items)
        tables.setdefault(row.dtype, []).append(dict(items))
    for tables in doc["devices"].values():
        for per_dtype in tables.values():
            for entries in per_dtype.values():
                shuffle(entries)
    indent = draw(_INDENTS)
    return json.dumps(doc, indent=indent, ensure_ascii=draw(_BOOLS))


def _short_config(config: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in config.items() if not (key == "group_m" and value == 8)}


_WRONG_VALUES = (-1, 0, 2**31, 10**40, 1.5, 64.0, True, None, "64", [], {}, {"min": 5, "max": 1})


def _slots(tree: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key-or-index) pair in a JSON tree, in document order."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            out.append((tree, key))
            _slots(value, out)
    elif isinstance(tree, list):
        for index, value in enumerate(tree):
            out.append((tree, index))
            _slots(value, out)
    return out


_CORRUPTIONS = st.sampled_from(("delete", "retype", "add_key", "overlap", "truncate", "flip", "bad_utf8",
                                 "duplicate_key", "version"))
_BAD_BYTES = st.sampled_from((b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80", b"\x00"))
_BYTES = st.integers(0, 255)
_FLIPS = st.integers(1, 4)
_VERSIONS = st.sampled_from((0, 5, -1, "4", 4.0, None, True, 10**30))
_RETYPES = st.sampled_from(_WRONG_VALUES)
_UNKNOWN_KEYS = st.sampled_from(("mmm", "Block_M", "note2", "batch", "bf16", "a100x", "min", "Layout"))
_SMALL_LUTS = luts(max_tables=1)


@st.composite
def corrupted(draw: st.DrawFn) -> bytes:
    """A valid LUT document with a random corruption, as raw bytes. Some corruptions (a flipped
    digit, a deleted note) leave a valid document; the rest must be rejected."""
    text = dump_lut(draw(_SMALL_LUTS))
    kind = draw(_CORRUPTIONS)
    if kind in ("truncate", "flip", "bad_utf8"):
        data = bytearray(text.encode("utf-8"))
        at = draw(_PICK) % len(data)
        if kind == "truncate":
            return bytes(data[:at])
        if kind == "bad_utf8":
            return bytes(data[:at] + draw(_BAD_BYTES) + data[at:])
        for _ in range(draw(_FLIPS)):
            data[draw(_PICK) % len(data)] = draw(_BYTES)
        return bytes(data)
    doc = json.loads(text)
    if kind == "version":
        doc["schema_version"] = draw(_VERSIONS)
    elif kind == "overlap":
        _add_overlap(draw, doc)
    elif kind == "duplicate_key":
        encoded = json.dumps(doc)
        keys = list(re.finditer(r'"[^"]*": ', encoded))
        key = keys[draw(_PICK) % len(keys)]
        return (encoded[:key.start()] + key.group() + "1, " + encoded[key.start():]).encode("utf-8")
    else:
        slots = _slots(doc, [])
        container, key = slots[draw(_PICK) % len(slots)]
        if kind == "delete":
            del container[key]
        elif kind == "retype":
            container[key] = draw(_RETYPES)
        elif isinstance(container, dict):
            container[draw(_UNKNOWN_KEYS)] = 1
    return json.dumps(doc).encode("utf-8")


def _add_overlap(draw: st.DrawFn, doc: dict[str, Any]) -> None:
    lists = [entries for tables in doc["devices"].values() for per_dtype in tables.values()
             for entries in per_dtype.values()]
    if lists:
        entries = lists[draw(_PICK) % len(lists)]
        clone = json.loads(json.dumps(entries[draw(_PICK) % len(entries)]))
        if draw(_BOOLS):
            clone["m"] = {"min": 1, "max": MAX_DIM}
        if draw(_BOOLS):
            clone["k"] = {"min": 1, "max": MAX_DIM}
        if draw(_BOOLS):  # an entry without a layout serves the clone's layout too
            clone.pop("layout", None)
        entries.append(clone)
