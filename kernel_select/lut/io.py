"""The kernel lookup table (LUT): hand-picked GEMM configs that are always benchmarked.

A LUT is a versioned JSON document keyed device -> op -> dtype -> a flat list of entries:

    {"schema_version": 1,
     "devices": {"h100": {"mm": {"bfloat16": [
         {"m": 560, "n": 1280, "k": 3420,
          "configs": [{"block_m": 64, "block_n": 128, "block_k": 128, "num_stages": 4, "num_warps": 4,
                       "group_m": 8}],
          "note": "where this came from"},
         {"m": {"min": 1, "max": 512}, "n": 1280, "k": 3420, "configs": [...]}]}}}}

An entry matches exactly one (n, k) and either one m or an inclusive m range, so one entry can serve
a dynamic sequence length. Entries of one device/op/dtype may not overlap; configs are tried in
the order written. Loading is strict (LUTError naming file, JSON location and fix) everywhere
except inside torch.compile, where `load_lut(path, strict=False)` logs one warning and returns an
empty table.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Callable, Hashable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from kernel_select.configs import GemmConfig
from kernel_select.device import KNOWN_DEVICES, DeviceSpec, get_device
from kernel_select.errors import DeviceError, LUTError
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: Largest matrix dimension an entry may name. Inductor indexes with int32 by default, and a
#: bound keeps a typo such as an extra digit from silently producing a useless entry.
MAX_DIM = 2**31 - 1
BATCHED_OPS = ("bmm", "baddbmm")

Size = Annotated[int, Field(ge=1, le=MAX_DIM)]


# -- schema --------------------------------------------------------------------------------------


def _first_repeat(items: Iterable[tuple[Hashable, Any]]) -> tuple[Hashable, Any, Any] | None:
    """The first key that repeats in (key, label) pairs, with the labels of both places."""
    seen: dict[Hashable, Any] = {}
    for key, label in items:
        if key in seen:
            return key, seen[key], label
        seen[key] = label
    return None


def _device_key_or_none(name: object) -> str | None:
    """The device key a devices-table key names; None when it names none (the key validator
    reports those with their location)."""
    if not isinstance(name, str):
        return None
    try:
        return get_device(name).key
    except DeviceError:
        return None

class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MRange(_Strict):
    """An inclusive range of m, for entries that serve a dynamic (sequence-length) dimension."""

    min: Size = Field(description="smallest m this entry serves (inclusive)")
    max: Size = Field(description="largest m this entry serves (inclusive)")

    @model_validator(mode="after")
    def _ordered(self) -> MRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max}); swap them")
        return self


def _m_kind(value: Any) -> str:
    return "range" if isinstance(value, (dict, MRange)) else "exact"


MSpec = Annotated[
    Union[Annotated[Size, Tag("exact")], Annotated[MRange, Tag("range")]],
    Discriminator(_m_kind),
]
# Union tags appear in pydantic error locations; they are not part of the JSON path.
_UNION_TAGS = ("exact", "range")


class LUTEntry(_Strict):
    """One problem key (m or an m range, n, k) and the configs to try for it, best first."""

    m: MSpec = Field(description='rows of A and C: an integer, or {"min": A, "max": B} (inclusive)')
    n: Size = Field(description="columns of B and C")
    k: Size = Field(description="columns of A, rows of B (the reduction dimension)")
    configs: list[GemmConfig] = Field(min_length=1, description="configs to benchmark, best first")
    note: str | None = Field(default=None, description="free text: where these configs came from")

    @field_validator("configs")
    @classmethod
    def _unique_configs(cls, configs: list[GemmConfig]) -> list[GemmConfig]:
        repeat = _first_repeat((config, index) for index, config in enumerate(configs))
        if repeat is not None:
            config, first, second = repeat
            raise ValueError(f"configs [{first}] and [{second}] are the same ({config}); remove one")
        return configs

    @field_validator("note")
    @classmethod
    def _encodable_note(cls, note: str | None) -> str | None:
        if note is not None:
            try:
                note.encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("contains an unpaired surrogate escape; remove it") from None
        return note

    @property
    def m_bounds(self) -> tuple[int, int]:
        """(lowest, highest) m this entry serves, inclusive."""
        return (self.m.min, self.m.max) if isinstance(self.m, MRange) else (self.m, self.m)

    @property
    def batch_key(self) -> int | None:
        return None

    def describe_key(self) -> str:
        low, high = self.m_bounds
        m = str(low) if low == high else f"{low}..{high}"
        batch = "" if self.batch_key is None else f" batch={self.batch_key}"
        return f"m={m} n={self.n} k={self.k}{batch}"


class BatchedLUTEntry(LUTEntry):
    """An entry of bmm/baddbmm; `batch` narrows it to one batch size (omit it to serve all)."""

    batch: Size | None = Field(default=None, description="batch size this entry serves; omit for any")

    @property
    def batch_key(self) -> int | None:
        return self.batch


def _sort_key(entry: LUTEntry) -> tuple[int, int, int, int, int]:
    low, high = entry.m_bounds
    return (entry.n, entry.k, low, high, entry.batch_key or 0)


def _check_disjoint(entries: list[LUTEntry]) -> list[LUTEntry]:
    """Reject entries whose keys intersect (same n and k, overlapping m and batch); sort the rest.

    Indices in messages are positions in the file. The returned list is in canonical order, so that
    a table compares equal to itself after a dump/load round trip.
    """
    groups: dict[tuple[int, int], list[int]] = {}
    for index, entry in enumerate(entries):
        groups.setdefault((entry.n, entry.k), []).append(index)
    for members in groups.values():
        if len(members) > 1:
            _check_group_disjoint(entries, members)
    return sorted(entries, key=_sort_key)


def _check_group_disjoint(entries: list[LUTEntry], members: list[int]) -> None:
    # An entry without batch serves every batch, so it is compared with all others; entries with
    # a batch only with entries of the same batch. Each comparison set is a sweep over m.
    batches = {entries[i].batch_key for i in members} - {None}
    for batch in batches or {None}:
        chosen = [i for i in members if entries[i].batch_key in (None, batch)]
        chosen.sort(key=lambda i: entries[i].m_bounds)
        widest = chosen[0]
        for index in chosen[1:]:
            if entries[index].m_bounds[0] <= entries[widest].m_bounds[1]:
                first, second = sorted((widest, index))
                raise ValueError(
                    f"entries [{first}] ({entries[first].describe_key()}) and [{second}] "
                    f"({entries[second].describe_key()}) overlap; make their m ranges disjoint "
                    "or merge them into one entry")
            if entries[index].m_bounds[1] > entries[widest].m_bounds[1]:
                widest = index


EntryList = Annotated[list[LUTEntry], AfterValidator(_check_disjoint)]
BatchedEntryList = Annotated[list[BatchedLUTEntry], AfterValidator(_check_disjoint)]
DTypeName = Literal["float16", "bfloat16", "float32"]


class OpTables(_Strict):
    """The entries of one device, per op and dtype."""

    mm: dict[DTypeName, EntryList] = Field(default_factory=dict)
    addmm: dict[DTypeName, EntryList] = Field(default_factory=dict)
    bmm: dict[DTypeName, BatchedEntryList] = Field(default_factory=dict)
    baddbmm: dict[DTypeName, BatchedEntryList] = Field(default_factory=dict)

    @field_validator("mm", "addmm", "bmm", "baddbmm")
    @classmethod
    def _drop_empty(cls, per_dtype: dict[str, list[LUTEntry]]) -> dict[str, list[LUTEntry]]:
        # An empty list means the same as a missing one; normalizing keeps equality and digests
        # independent of how a table was written.
        return {dtype: entries for dtype, entries in per_dtype.items() if entries}

    def is_empty(self) -> bool:
        return not any(getattr(self, op) for op in OpTables.model_fields)


def _device_key_of(name: str) -> str:
    try:
        return get_device(name).key
    except DeviceError:
        raise ValueError(f"unknown device {name!r}; use one of {', '.join(KNOWN_DEVICES)}") from None


DeviceKey = Annotated[str, AfterValidator(_device_key_of)]


class LUTRow(NamedTuple):
    """One entry with its place in the table, as `KernelLUT.entries()` yields it."""

    device: str
    op: str
    dtype: str
    entry: LUTEntry


_IndexValue = tuple[tuple[int, int, "int | None", tuple[GemmConfig, ...]], ...]


class KernelLUT(_Strict):
    """A kernel lookup table. Immutable; build new tables with `from_rows` or `merge`."""

    model_config = ConfigDict(title="kernel_select kernel lookup table")

    schema_version: Literal[1] = Field(default=SCHEMA_VERSION, description="format version of this file")
    devices: dict[DeviceKey, OpTables] = Field(
        default_factory=dict,
        description="per device key (" + ", ".join(KNOWN_DEVICES) + ", or the name torch reports)")

    # (device, op, dtype, n, k) -> ((m_low, m_high, batch, configs), ...): lookup runs inside
    # every GEMM lowering of torch.compile, so it must not scan the table.
    _index: dict[tuple[str, str, str, int, int], _IndexValue] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _one_key_per_device(cls, data: Any) -> Any:
        devices = data.get("devices") if isinstance(data, dict) else None
        if isinstance(devices, dict):
            repeat = _first_repeat((key, name) for name in devices
                                   if (key := _device_key_or_none(name)) is not None)
            if repeat is not None:
                key, first, second = repeat
                raise ValueError(f"devices: {first!r} and {second!r} both name device {key!r}; "
                                 "move all entries under one key")
        return data

    @field_validator("devices")
    @classmethod
    def _drop_empty_devices(cls, devices: dict[str, OpTables]) -> dict[str, OpTables]:
        return {key: tables for key, tables in devices.items() if not tables.is_empty()}

    def model_post_init(self, context: Any, /) -> None:
        index: dict[tuple[str, str, str, int, int], list] = {}
        for row in self.entries():
            low, high = row.entry.m_bounds
            key = (row.device, row.op, row.dtype, row.entry.n, row.entry.k)
            index.setdefault(key, []).append((low, high, row.entry.batch_key, tuple(row.entry.configs)))
        self._index = {key: tuple(value) for key, value in index.items()}

    # -- queries ---------------------------------------------------------------------------------

    def lookup(self, problem: Problem, device: str | DeviceSpec) -> list[GemmConfig]:
        """The configs stored for `problem` on `device`, in order; [] when no entry matches.

        Raises:
            DeviceError: if `device` is not a known device name.
        """
        key = (_normalize_device(device), problem.op, problem.dtype, problem.n, problem.k)
        for low, high, batch, configs in self._index.get(key, ()):
            if low <= problem.m <= high and (batch is None or batch == problem.batch):
                return list(configs)
        return []

    def entries(self) -> Iterator[LUTRow]:
        """Every entry with its device, op and dtype, in canonical order."""
        for device in sorted(self.devices):
            tables = self.devices[device]
            for op in OpTables.model_fields:
                per_dtype: dict[str, list[LUTEntry]] = getattr(tables, op)
                for dtype in sorted(per_dtype):
                    for entry in per_dtype[dtype]:
                        yield LUTRow(device, op, dtype, entry)

    @property
    def num_entries(self) -> int:
        return sum(len(value) for value in self._index.values())

    def digest(self) -> str:
        """sha256 of the canonical JSON; equal tables have equal digests (use it in cache keys)."""
        return hashlib.sha256(dump_lut(self).encode("utf-8")).hexdigest()

    # -- building --------------------------------------------------------------------------------

    @classmethod
    def from_rows(cls, rows: Iterable[LUTRow | tuple[str, str, str, LUTEntry]], *,
                  source: str = "<rows>") -> KernelLUT:
        """A validated table from (device, op, dtype, entry) rows; device names are normalized.

        Raises:
            LUTError: for unknown devices/ops/dtypes, overlapping keys, or `batch` on mm/addmm.
        """
        tree: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
        for device, op, dtype, entry in rows:
            try:
                device = _normalize_device(device)
            except DeviceError:
                pass  # validation reports it with its location
            tree.setdefault(device, {}).setdefault(op, {}).setdefault(dtype, []).append(_entry_dict(entry))
        return _validate({"schema_version": SCHEMA_VERSION, "devices": tree}, source)

    def merge(self, other: KernelLUT) -> KernelLUT:
        """A new table with the entries of both; `other` wins where both have the same key.

        Raises:
            LUTError: if an entry of `other` overlaps an entry of this table without having the
                same key (for example an m range covering an exact m); resolve it by hand.
        """
        def ident(row: LUTRow) -> tuple[Any, ...]:
            return (row.device, row.op, row.dtype, row.entry.n, row.entry.k, row.entry.m_bounds,
                    row.entry.batch_key)

        merged = {ident(row): row for row in self.entries()}
        merged.update((ident(row), row) for row in other.entries())
        return KernelLUT.from_rows(merged.values(), source="<merged table>")


def empty_lut() -> KernelLUT:
    """A table without entries: every lookup returns []."""
    return KernelLUT()


@functools.lru_cache(maxsize=64)
def _normalize_device_name(name: str) -> str:
    return get_device(name).key


def _normalize_device(device: str | DeviceSpec) -> str:
    return device.key if isinstance(device, DeviceSpec) else _normalize_device_name(device)


def _entry_dict(entry: LUTEntry) -> dict[str, Any]:
    """The canonical JSON object of an entry: m, n, k, [batch], configs, [note], in that order."""
    out: dict[str, Any] = {"m": entry.m.model_dump() if isinstance(entry.m, MRange) else entry.m,
                           "n": entry.n, "k": entry.k}
    if entry.batch_key is not None:
        out["batch"] = entry.batch_key
    out["configs"] = [config.model_dump() for config in entry.configs]
    if entry.note is not None:
        out["note"] = entry.note
    return out


# -- migrations ----------------------------------------------------------------------------------

#: One step per old version: MIGRATIONS[v] turns a raw v document into a raw v + 1 document.
#: Version 1 is the first format, so there is nothing to migrate yet; a v1 -> v2 change adds
#: `MIGRATIONS[1] = _v1_to_v2` and keeps tests/data/lut_v1.json as a golden file.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def migrate(raw: dict[str, Any], *, source: str = "<string>") -> dict[str, Any]:
    """Bring a raw (json.load-ed) LUT document up to SCHEMA_VERSION, one version at a time.

    Raises:
        LUTError: for a missing, newer or unknown schema_version.
    """
    version = raw.get("schema_version")
    if version is None:
        if any(isinstance(key, str) and key.startswith(("((", "(torch")) or ")+" in str(key) for key in raw):
            raise LUTError(f"{source}: this looks like a torch._inductor lookup_table, not a "
                           "kernel_select LUT; convert it with `kernel-select lut from-inductor`")
        raise LUTError(f"{source}: schema_version: missing; add \"schema_version\": {SCHEMA_VERSION} "
                       "at the top of the file")
    if isinstance(version, bool) or not isinstance(version, int):
        raise LUTError(f"{source}: schema_version: expected an integer, got {_short(version)}")
    if version > SCHEMA_VERSION:
        raise LUTError(f"{source}: schema_version: {version} was written by a newer kernel_select "
                       f"(this one reads up to {SCHEMA_VERSION}); upgrade kernel_select")
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            readable = ", ".join(map(str, sorted({*MIGRATIONS, SCHEMA_VERSION})))
            raise LUTError(f"{source}: schema_version: unknown version {version}; "
                           f"this kernel_select reads versions {readable}")
        raw = step(raw)
        if raw.get("schema_version") != version + 1:
            raise LUTError(f"{source}: failed to migrate from schema_version {version} to {version + 1}")
        version += 1
    return raw


# -- reading -------------------------------------------------------------------------------------

def load_lut(path: str | os.PathLike[str], *, strict: bool = True) -> KernelLUT:
    """Read and validate a LUT file.

    Args:
        path: the JSON file.
        strict: True (CLI, library): raise LUTError on any problem. False (inside torch.compile):
            log one warning and return an empty table instead; never raises.

    Raises:
        LUTError: in strict mode, naming the file, the JSON location and the fix.
    """
    source = os.fspath(path)
    try:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise LUTError(f"{source}: no such file; check the path") from None
        except OSError as exc:
            raise LUTError(f"{source}: cannot read: {exc.strerror or exc}") from None
        return parse_lut(data, source=source)
    except LUTError as exc:
        if strict:
            raise
        log.warning("Ignoring kernel lookup table (using no LUT entries): %s", exc)
    except Exception:  # noqa: BLE001 - lenient mode runs inside torch.compile and must not raise
        if strict:
            raise
        log.warning("Ignoring kernel lookup table %s (using no LUT entries): unexpected error",
                    source, exc_info=True)
    return empty_lut()


def parse_lut(text: str | bytes, *, source: str = "<string>") -> KernelLUT:
    """Parse and validate LUT JSON text. `source` names it in error messages.

    Raises:
        LUTError: for invalid UTF-8 or JSON, duplicate object keys, or a document that does not
            match the schema.
    """
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise LUTError(f"{source}: byte {exc.start}: not valid UTF-8; save the file as UTF-8") from None
    try:
        raw = json.loads(text, object_pairs_hook=_object_without_duplicates, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise LUTError(f"{source}: line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise LUTError(f"{source}: invalid JSON: nested too deeply to be a LUT") from None
    except ValueError as exc:  # NaN/Infinity, or an integer too long for Python to convert
        reason = "a number has too many digits" if "digits" in str(exc) else _first_line(exc)
        raise LUTError(f"{source}: invalid JSON: {reason}") from None
    duplicate = _find_duplicate_key(raw)
    if duplicate is not None:
        where, key = duplicate
        raise LUTError(f"{source}: {where or '<top level>'}: duplicate key {key!r}; keep one of them")
    if not isinstance(raw, dict):
        raise LUTError(f"{source}: expected a JSON object with \"schema_version\" and \"devices\", "
                       f"got {type(raw).__name__}")
    return _validate(migrate(raw, source=source), source)


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


def _find_duplicate_key(value: Any, where: str = "") -> tuple[str, str] | None:
    if isinstance(value, _DuplicateKeys):
        return where, value.duplicate
    children: Iterable[tuple[str, Any]] = ()
    if isinstance(value, dict):
        children = ((f"{where}.{key}" if where else str(key), child) for key, child in value.items())
    elif isinstance(value, list):
        children = ((f"{where}[{index}]", child) for index, child in enumerate(value))
    for path, child in children:
        found = _find_duplicate_key(child, path)
        if found is not None:
            return found
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows; write an integer")


def _validate(raw: Any, source: str) -> KernelLUT:
    try:
        return KernelLUT.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise LUTError(f"{source}: {_describe(exc)}") from None
    except RecursionError:
        raise LUTError(f"{source}: the document is nested too deeply to be a LUT") from None


def _describe(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    first = errors[0]
    where, is_key = _json_path(first["loc"])
    message = first["msg"].removeprefix("Value error, ")
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
        elif previous == "m" and part in _UNION_TAGS:
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
    "m range": tuple(MRange.model_fields),
}


def _hint(error: Any, where: str, is_key: bool) -> str:
    kind = error["type"]
    loc = [p for p in error["loc"] if p not in _UNION_TAGS and p != "[key]"]
    if kind == "extra_forbidden":
        parent = _parent_kind(loc[:-1])
        allowed = f"; allowed: {', '.join(_FIELDS_OF[parent])}" if parent else ""
        return f" (unknown field {loc[-1]!r}{allowed}; check its spelling)"
    if kind == "missing":
        return " (add it)"
    value = error.get("input")
    if is_key or isinstance(value, (dict, list)) or kind in ("literal_error", "value_error"):
        return ""
    return f", got {_short(value)}"


def _parent_kind(loc: list[Any]) -> str | None:
    if not loc:
        return "root"
    if len(loc) == 2 and loc[0] == "devices":
        return "device"
    if len(loc) >= 2 and loc[-2] == "configs":
        return "config"
    if loc[-1] == "m":
        return "m range"
    if len(loc) == 5 and isinstance(loc[-1], int):
        return "batched entry" if loc[2] in BATCHED_OPS else "entry"
    return None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


# -- writing -------------------------------------------------------------------------------------

def dump_lut(lut: KernelLUT) -> str:
    """The canonical text of `lut`: sorted keys and entries, 2-space indent, one config per line,
    trailing newline. `dump_lut(parse_lut(dump_lut(t))) == dump_lut(t)` for every table."""
    tree: dict[str, Any] = {}
    for row in lut.entries():
        per_op = tree.setdefault(row.device, {}).setdefault(row.op, {})
        per_op.setdefault(row.dtype, []).append(_entry_dict(row.entry))
    return _emit({"schema_version": lut.schema_version, "devices": tree}, 0) + "\n"


def _emit(value: Any, depth: int, *, inline: bool = False, inline_items: bool = False) -> str:
    # Configs and m ranges go on one line each; everything else is indented, one key per line.
    if inline or not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, ensure_ascii=False)
    pad, close = "  " * (depth + 1), "  " * depth
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(key, ensure_ascii=False)}: "
                 f"{_emit(child, depth + 1, inline=key == 'm', inline_items=key == 'configs')}"
                 for key, child in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + close + "}"
    items = [pad + _emit(item, depth + 1, inline=inline_items) for item in value]
    return "[\n" + ",\n".join(items) + "\n" + close + "]"


def save_lut(lut: KernelLUT, path: str | os.PathLike[str]) -> None:
    """Write `lut` in canonical form, atomically (a crash never leaves a half-written file)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(dump_lut(lut))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_schema() -> str:
    """The JSON schema of the current format, as committed in luts/schema/lut.v1.schema.json."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **KernelLUT.model_json_schema()}
    return json.dumps(schema, indent=2) + "\n"
