"""JSON-shaped LUT documents, mostly almost valid, and an independent oracle for them.

`documents()` draws a document the way a person gets one wrong: the right shape with, now and
then, a size of 0 or 2^31, m or k ranges backwards, a k range in a version 2 file, an unknown
field, an unknown device, two devices naming one GPU, overlapping entries (in m, in k or both),
repeated configs, a duplicate JSON key, Latin-1 bytes, a pinned entry gone wrong (pin and
configs, a bad pin, a pin in a version 1 file), or a layout gone wrong (an unknown layout, a
layout in a version 3 file, two entries of one key apart only by a layout and no layout).
`expected_rows()` says, from the format's rules as docs/guide.md ("Lookup tables") states them and
without using kernel_select.lut, whether the document is valid and which entries it holds.
"""

from __future__ import annotations

import json
import random
from typing import Any

from hypothesis import strategies as st

from kernel_select.device import KNOWN_DEVICES

MAX_DIM = 2**31 - 1
OPS = ("mm", "addmm", "bmm", "baddbmm")
BATCHED = ("bmm", "baddbmm")
DTYPES = ("float16", "bfloat16", "float32", "tf32")  # "tf32": float32 GEMMs run with TF32
LAYOUTS = ("nn", "nt", "tn", "tt")
CONFIG_FIELDS = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")
_BLOCKS = (16, 32, 64, 128, 256, 512, 1024)
_LEGAL = {"block_m": _BLOCKS, "block_n": _BLOCKS, "block_k": _BLOCKS, "num_stages": range(1, 9),
          "num_warps": (1, 2, 4, 8, 16, 32), "group_m": range(1, 65)}
# Exact names only; the rest are near misses a lenient (substring) match would wrongly accept.
_DEVICE_NAMES = {**{spec.key: spec.key for spec in KNOWN_DEVICES.values()},
                 **{spec.name: spec.key for spec in KNOWN_DEVICES.values()}}


_SEEDS = st.integers(0, 2**64 - 1)
_FAULTS = ("size 0", "size over 2^31-1", "m range backwards", "k range backwards", "k range in version 2",
           "unknown field", "unknown device",
           "one GPU under two names", "overlap", "repeated config", "bad config value", "float size",
           "batch on mm", "no configs", "schema_version", "unknown dtype", "duplicate JSON key", "Latin-1",
           "pin and configs", "bad pin", "pin in version 1", "bad layout", "layout in version 3",
           "layout twin", "precision twin")


@st.composite
def documents(draw: st.DrawFn) -> tuple[dict[str, Any], bytes, str]:
    """(object, bytes, fault): a LUT-shaped document and its bytes. Half of them carry one fault
    ("" for none); the oracle, not the fault's name, decides validity (a fault can miss, and a
    drawn document can overlap by chance).

    One seed drives a private Random: a draw per field would make 10,000 documents cost minutes.
    """
    rng = random.Random(draw(_SEEDS))
    document = _valid_shape(rng)
    fault = rng.choice(_FAULTS) if rng.random() < 0.5 else ""
    duplicate = _apply(rng, document, fault)
    text = _dump(document, duplicate)
    return document, text.encode("latin-1", "replace") if fault == "Latin-1" else text.encode("utf-8"), fault


def _valid_shape(rng: random.Random) -> dict[str, Any]:
    devices: dict[str, Any] = {}
    for spec in rng.sample(sorted(KNOWN_DEVICES.values(), key=lambda s: s.key), rng.randint(1, 2)):
        name = rng.choice((spec.key, spec.name))
        devices[name] = {op: {dtype: _entries(rng, op) for dtype in rng.sample(DTYPES, rng.randint(1, 2))}
                         for op in rng.sample(OPS, rng.randint(1, 2))}
    # Older versions are still read (migrated): version 1 cannot pin, versions 1 and 2 cannot give k
    # a range, versions 1 to 3 cannot name a layout, so a document says the oldest version its
    # entries allow, or a newer one.
    entries = [entry for tables in devices.values() for per_dtype in tables.values()
               for listed in per_dtype.values() for entry in listed]
    oldest = (4 if any("layout" in e for e in entries)
              else 3 if any(isinstance(e["k"], dict) for e in entries)
              else 2 if any("pin" in e for e in entries) else 1)
    return {"schema_version": rng.randint(oldest, 4), "devices": devices}


def _entries(rng: random.Random, op: str) -> list[dict[str, Any]]:
    # Distinct m slots on a shared (n, k) keep most drawn tables valid while neighbours touch.
    points = sorted(rng.sample((1, 2, 63, 64, 65, 560, 4096, MAX_DIM - 1, MAX_DIM), rng.randint(1, 4) * 2))
    entries = []
    for low, high in zip(points[::2], points[1::2]):
        entry: dict[str, Any] = {"m": low if rng.random() < 0.4 else {"min": low, "max": high},
                                 "n": rng.choice((64, 1280)) if rng.random() < 0.2 else 1280,
                                 "k": rng.choice(_K_RANGES) if rng.random() < 0.2 else 3420}
        if op in BATCHED and rng.random() < 0.5:
            entry["batch"] = rng.choice((None, 1, 3))
        if rng.random() < 0.3:
            entry["layout"] = rng.choice((None, *LAYOUTS))
        if rng.random() < 0.3:
            entry["pin"] = "aten" if rng.random() < 0.4 else dict(rng.choice(_CONFIG_POOL))
        else:
            entry["configs"] = [dict(config) for config in rng.sample(_CONFIG_POOL, rng.randint(1, 2))]
        if rng.random() < 0.4:
            entry["note"] = rng.choice((None, "", "größer → schneller", "tab\t"))
        entries.append(entry)
    return entries


# Beside, around and on the exact k of the other entries, so that some drawn tables overlap in k.
_K_RANGES = ({"min": 1, "max": 3419}, {"min": 3421, "max": 8192}, {"min": 3420, "max": 3420},
             {"min": 2048, "max": 4096}, {"min": 1, "max": MAX_DIM})

_CONFIG_POOL = [
    {"block_m": 64, "block_n": 128, "block_k": 64, "num_stages": 3, "num_warps": 4},
    {"block_m": 64, "block_n": 128, "block_k": 64, "num_stages": 3, "num_warps": 4, "group_m": 4},
    {"block_m": 128, "block_n": 128, "block_k": 32, "num_stages": 4, "num_warps": 8, "group_m": 8},
    {"block_m": 16, "block_n": 1024, "block_k": 16, "num_stages": 1, "num_warps": 1, "group_m": 64},
]


def _apply(rng: random.Random, document: dict[str, Any], fault: str) -> dict[str, Any] | None:
    """Apply `fault` to `document` in place; return the object whose first key is to be repeated."""
    lists = [(op, listed) for tables in document["devices"].values() for op, per_dtype in tables.items()
             for listed in per_dtype.values() if listed]
    op, listed = rng.choice(lists) if lists else ("mm", [{"m": 1, "n": 1, "k": 1, "configs": []}])
    entry = rng.choice(listed)
    if fault in ("size 0", "size over 2^31-1", "float size"):
        size = entry[rng.choice(("m", "k"))]
        target, slot = (size, rng.choice(("min", "max"))) if isinstance(size, dict) and rng.random() < 0.5 \
            else (entry, rng.choice(("m", "n", "k", "batch") if "batch" in entry else ("m", "n", "k")))
        bad_sizes = {"size 0": 0, "size over 2^31-1": rng.choice((MAX_DIM + 1, 2**40)), "float size": 64.0}
        target[slot] = bad_sizes[fault]
    elif fault in ("m range backwards", "k range backwards") and isinstance(entry[fault[0]], dict):
        entry[fault[0]] = {"min": entry[fault[0]]["max"] + 1, "max": entry[fault[0]]["min"]}
    elif fault == "k range in version 2":
        entry["k"] = {"min": 1, "max": 2}
        document["schema_version"] = rng.choice((1, 2))
    elif fault == "unknown field":
        rng.choice(_objects(document, []))[rng.choice(("Block_M", "mmm", "note2", "extra"))] = 1
    elif fault == "unknown device":
        document["devices"][rng.choice(("not-an-h100-at-all", "h100x", "tpu"))] = {}
    elif fault == "one GPU under two names" and document["devices"]:
        spec = KNOWN_DEVICES[_DEVICE_NAMES[next(iter(document["devices"]))]]
        document["devices"][spec.name if spec.key in document["devices"] else spec.key] = {"mm": {}}
    elif fault == "overlap" and lists:
        clone = {**json.loads(json.dumps(entry)), "configs": [dict(_CONFIG_POOL[2])]}
        clone.pop("pin", None)
        if rng.random() < 0.5:  # a k range over the entry's k
            clone["k"] = {"min": 1, "max": MAX_DIM}
            document["schema_version"] = 3
        listed.append(clone)
    elif fault == "repeated config" and entry.get("configs"):
        entry["configs"].append(dict(rng.choice(entry["configs"])))
    elif fault == "bad config value" and (entry.get("configs") or isinstance(entry.get("pin"), dict)):
        config = rng.choice(entry["configs"]) if "configs" in entry else entry["pin"]
        config[rng.choice(CONFIG_FIELDS)] = rng.choice((0, 3, 9, 48, 65, 2048, "4", None))
    elif fault == "batch on mm" and op not in BATCHED:
        entry["batch"] = 1
    elif fault == "no configs":
        entry["configs"] = []
        entry.pop("pin", None) if rng.random() < 0.5 else None
    elif fault == "pin and configs":
        entry.setdefault("configs", [dict(_CONFIG_POOL[0])])
        entry.setdefault("pin", "aten")
    elif fault == "bad pin":
        entry.pop("configs", None)
        entry["pin"] = rng.choice(("cublas", "ATEN", "", None, 0, [dict(_CONFIG_POOL[0])]))
    elif fault == "pin in version 1":
        document["schema_version"] = 1
    elif fault == "bad layout":
        entry["layout"] = rng.choice(("NT", "n", "ntn", "", "tt ", 1, ["nt"]))
    elif fault == "layout in version 3":
        entry["layout"] = rng.choice(LAYOUTS)
        document["schema_version"] = rng.choice((1, 2, 3))
    elif fault == "layout twin" and lists:
        # The same key once with a layout and once without (or with another): valid exactly when
        # both name a layout and the layouts differ.
        twin = json.loads(json.dumps(entry))
        entry["layout"], twin["layout"] = rng.choice(LAYOUTS), rng.choice((None, *LAYOUTS))
        listed.append(twin)
        document["schema_version"] = 4
    elif fault == "schema_version":
        document["schema_version"] = rng.choice((0, 5, "1", "4", True, 1.0, 4.0))
    elif fault == "unknown dtype" and document["devices"]:
        # Not "bf16": it is an alias of bfloat16, read as such.
        next(iter(next(iter(document["devices"].values())).values()))[rng.choice(("bf15", "int8"))] = []
    elif fault == "duplicate JSON key":
        return rng.choice(_objects(document, []))
    elif fault == "precision twin":
        # Not a fault: a "tf32" list holding the keys of a "float32" list (or the other way round)
        # overlaps nothing, as a TF32 GEMM never reads a float32 entry.
        for tables in document["devices"].values():
            for per_dtype in tables.values():
                for have, twin in (("float32", "tf32"), ("tf32", "float32")):
                    if have in per_dtype:
                        per_dtype[twin] = json.loads(json.dumps(per_dtype[have]))
                        return None
    elif fault == "Latin-1":
        entry["note"] = "größer"
    return None


def _objects(value: Any, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        if value:
            out.append(value)
        for child in value.values():
            _objects(child, out)
    elif isinstance(value, list):
        for child in value:
            _objects(child, out)
    return out


def _dump(value: Any, duplicate: dict[str, Any] | None) -> str:
    """json.dumps, except that the object `duplicate` repeats its first key."""
    if isinstance(value, dict):
        items = [f"{json.dumps(key, ensure_ascii=False)}: {_dump(child, duplicate)}"
                 for key, child in value.items()]
        if value is duplicate:
            items.insert(0, items[0])
        return "{" + ", ".join(items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_dump(child, duplicate) for child in value) + "]"
    return json.dumps(value, ensure_ascii=False)


# -- the oracle ----------------------------------------------------------------------------------

class Invalid(Exception):
    """The document breaks a rule of the format."""


def _int(value: Any, low: int = 1, high: int = MAX_DIM) -> int:
    if type(value) is not int or not low <= value <= high:
        raise Invalid(value)
    return value


def _keys(obj: Any, required: set[str], optional: set[str] = frozenset()) -> dict[str, Any]:
    if not isinstance(obj, dict) or not required <= obj.keys() <= required | optional:
        raise Invalid(obj)
    return obj


def _config_key(config: Any) -> tuple[int, ...]:
    config = _keys(config, set(CONFIG_FIELDS[:-1]), {"group_m"})
    values = {**{"group_m": 8}, **config}
    for name in CONFIG_FIELDS:
        if type(values[name]) is not int or values[name] not in _LEGAL[name]:
            raise Invalid(config)
    return tuple(values[name] for name in CONFIG_FIELDS)


def _bounds(size: Any) -> tuple[int, int]:
    if isinstance(size, dict):
        _keys(size, {"min", "max"})
        low, high = _int(size["min"]), _int(size["max"])
        if low > high:
            raise Invalid(size)
        return low, high
    return _int(size), _int(size)


def _entry_row(entry: Any, op: str, version: int) -> tuple[Any, ...]:
    """(m low, m high, n, k low, k high, batch, layout, configs, pin, note) of a valid entry."""
    optional = {"configs", "pin", "note", "layout"} | ({"batch"} if op in BATCHED else set())
    entry = _keys(entry, {"m", "n", "k"}, optional)
    if isinstance(entry["k"], dict) and version < 3:
        raise Invalid(entry)  # k ranges arrived in version 3
    layout = entry.get("layout")
    if ("layout" in entry and version < 4) or (layout is not None and layout not in LAYOUTS):
        raise Invalid(entry)  # layouts arrived in version 4
    key = (*_bounds(entry["m"]), _int(entry["n"]), *_bounds(entry["k"]))
    batch = entry.get("batch")
    if batch is not None:
        _int(batch)
    note = entry.get("note")
    if note is not None and not isinstance(note, str):
        raise Invalid(note)
    if ("configs" in entry) == ("pin" in entry) or ("pin" in entry and version < 2):
        raise Invalid(entry)  # exactly one of them; pins arrived in version 2
    if "pin" in entry:
        pin = entry["pin"] if entry["pin"] == "aten" else _config_key(entry["pin"])
        return (*key, batch, layout, (), pin, note)
    configs = entry["configs"]
    if not isinstance(configs, list) or not configs:
        raise Invalid(configs)
    keys = [_config_key(config) for config in configs]
    if len(set(keys)) != len(keys):
        raise Invalid(configs)
    return (*key, batch, layout, tuple(keys), None, note)


def _overlap(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    def coincide(x: Any, y: Any) -> bool:  # batch or layout: None serves every value
        return x is None or y is None or x == y

    return (a[2] == b[2] and a[0] <= b[1] and b[0] <= a[1] and a[3] <= b[4] and b[3] <= a[4]
            and coincide(a[5], b[5]) and coincide(a[6], b[6]))


def expected_rows(document: Any) -> set[tuple[Any, ...]] | None:
    """The (device key, op, dtype, m low, m high, n, k low, k high, batch, layout, configs, pin, note)
    rows of a valid document, or None when the document is invalid."""
    try:
        return _rows(document)
    except Invalid:
        return None


def _rows(document: Any) -> set[tuple[Any, ...]]:
    _keys(document, {"schema_version"}, {"devices"})
    version = document["schema_version"]
    if type(version) is not int or version not in (1, 2, 3, 4):
        raise Invalid(document)
    devices = document.get("devices", {})
    if not isinstance(devices, dict):
        raise Invalid(devices)
    keys = [_DEVICE_NAMES.get(name) for name in devices]
    if None in keys or len(set(keys)) != len(keys):
        raise Invalid(devices)
    rows = set()
    for key, tables in zip(keys, devices.values()):
        for op, per_dtype in _keys(tables, set(), set(OPS)).items():
            for dtype, entries in _keys(per_dtype, set(), set(DTYPES)).items():
                if not isinstance(entries, list):
                    raise Invalid(entries)
                found = [_entry_row(entry, op, version) for entry in entries]
                if any(_overlap(a, b) for i, a in enumerate(found) for b in found[i + 1:]):
                    raise Invalid(entries)
                rows.update((key, op, dtype, *row) for row in found)
    return rows


def parsed_rows(lut: Any) -> set[tuple[Any, ...]]:
    """The same rows, read from a parsed KernelLUT."""
    return {(row.device, row.op, row.dtype, *row.entry.m_bounds, row.entry.n, *row.entry.k_bounds,
             row.entry.batch_key, row.entry.layout, tuple(config.key for config in row.entry.configs or ()),
             _pin_key(row.entry.pin), row.entry.note)
            for row in lut.entries()}


def _pin_key(pin: Any) -> Any:
    return pin if pin is None or isinstance(pin, str) else pin.key
