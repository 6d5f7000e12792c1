"""The LUT schema: pydantic models of the JSON document, its version, and lookup.

A LUT is a versioned JSON document keyed device -> op -> dtype -> a flat list of entries (the dtype
key "tf32" holds the entries of float32 GEMMs that run with TF32, `Problem.precision`; a "float32"
entry serves float32 on CUDA cores only, so a table tuned for one never picks for the other):

    {"schema_version": 4,
     "devices": {"h100": {"mm": {"bfloat16": [
         {"m": 560, "n": 1280, "k": 3420,
          "configs": [{"block_m": 64, "block_n": 128, "block_k": 128, "num_stages": 4, "num_warps": 4,
                       "group_m": 8}],
          "note": "where this came from"},
         {"m": {"min": 1, "max": 512}, "n": 1280, "k": 3420, "configs": [...]},
         {"m": {"min": 513, "max": 8192}, "n": 1280, "k": 3420, "layout": "nt", "pin": "aten"},
         {"m": 1280, "n": 3420, "k": {"min": 560, "max": 8192}, "layout": "tn", "pin": "aten"},
         {"m": 1280, "n": 3420, "k": 1280, "layout": "nn", "pin": "aten"}]}}}}

An entry matches exactly one n, one m or an inclusive m range, and one k or an inclusive k range
(schema_version 3), so one entry can serve a dynamic sequence length: M in a forward GEMM, K in a
weight gradient. An entry with a `layout` (schema_version 4: "nn", "nt", "tn", "tt", A then B)
serves only problems whose operands lie that way, one without serves every layout; two GEMMs of
one step may share (m, n, k) and differ only in layout (a Linear's input and weight gradients at
a sequence length equal to the output features). Entries of one device/op/dtype may not overlap
(intersecting sizes, and layouts and batches that can coincide); configs are tried in the order
written. A pinned entry (schema_version 2) names the one choice to use, "aten" or a Triton config,
and nothing is benchmarked. Reading and writing files is `kernel_select.lut.io`'s job.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Hashable, Iterator
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import AfterValidator, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from kernel_select.buckets import edges_of_ranges
from kernel_select.configs import GemmConfig
from kernel_select.device import KNOWN_DEVICES, DeviceSpec, detected_key, get_device
from kernel_select.lut.entries import (ATEN, BatchedEntryList, EntryList, LUTEntry, LUTHit, SizeRange, Strict,
                                      entry_dict, first_repeat)
from kernel_select.space import unfit_reason
from kernel_select.errors import ProblemError
from kernel_select.problem import TF32, Problem, dtype_name

log = logging.getLogger("kernel_select.lut")

SCHEMA_VERSION = 4


def _exact_device_key(name: str) -> str | None:
    """The device key a LUT names with `name`, or None. Case, surrounding space and `_` versus
    `-` are forgiven; nothing else: a key is a device key ("h100") or the exact name torch reports
    ("NVIDIA H100 80GB HBM3"), never a name that merely contains one ("not-an-h100-at-all"). A GPU
    outside the table ("l4") is a device once this process has detected it (`device.detect()`, as
    the handler, `pretune` and `record` do on that GPU), so its own LUTs load there; elsewhere its
    key stays unknown, which keeps a typo from passing as a device."""
    return _DEVICE_NAMES.get(name.strip().lower().replace("_", "-")) or detected_key(name)


_DEVICE_NAMES = {name.lower().replace("_", "-"): spec.key for spec in KNOWN_DEVICES.values()
                 for name in (spec.key, spec.name)}


def _device_key_or_none(name: object) -> str | None:
    """The device key a devices-table key names; None when it names none (the key validator
    reports those with their location)."""
    return _exact_device_key(name) if isinstance(name, str) else None

DTypeName = Literal["float16", "bfloat16", "float32", "tf32"]


def _canonical_dtype(key: Any) -> Any:
    """The canonical name of a dtype key ("bf16" -> "bfloat16", "TF32" -> "tf32"); any other key as
    it is."""
    if not isinstance(key, str):
        return key
    if key.strip().lower() == TF32:
        return TF32
    try:
        return dtype_name(key)
    except ProblemError:
        return key


class OpTables(Strict):
    """The entries of one device, per op and dtype."""

    mm: dict[DTypeName, EntryList] = Field(default_factory=dict)
    addmm: dict[DTypeName, EntryList] = Field(default_factory=dict)
    bmm: dict[DTypeName, BatchedEntryList] = Field(default_factory=dict)
    baddbmm: dict[DTypeName, BatchedEntryList] = Field(default_factory=dict)

    @field_validator("mm", "addmm", "bmm", "baddbmm", mode="before")
    @classmethod
    def _canonical_dtypes(cls, per_dtype: Any) -> Any:
        # A dtype key may be any alias the CLI takes ("bf16", "half"); it is stored, and written
        # back, under its canonical name. An unknown key is left for the Literal to report.
        if not isinstance(per_dtype, dict):
            return per_dtype
        canonical: dict[Any, Any] = {}
        given: dict[Any, Any] = {}
        for key, entries in per_dtype.items():
            name = _canonical_dtype(key)
            if name in canonical:
                raise ValueError(f"dtypes {given[name]!r} and {key!r} both name {name}; merge their lists")
            canonical[name], given[name] = entries, key
        return canonical

    @field_validator("mm", "addmm", "bmm", "baddbmm")
    @classmethod
    def _drop_empty(cls, per_dtype: dict[str, list[LUTEntry]]) -> dict[str, list[LUTEntry]]:
        # An empty list means the same as a missing one; normalizing keeps equality and digests
        # independent of how a table was written.
        return {dtype: entries for dtype, entries in per_dtype.items() if entries}

    def is_empty(self) -> bool:
        return not any(getattr(self, op) for op in OpTables.model_fields)


def _device_key_of(name: str) -> str:
    key = _exact_device_key(name)
    if key is None:
        raise ValueError(f"unknown device {name!r}; use one of {', '.join(KNOWN_DEVICES)} "
                         "(or the exact name torch reports; another GPU's key is known on that GPU)")
    return key


DeviceKey = Annotated[str, AfterValidator(_device_key_of)]


class LUTRow(NamedTuple):
    """One entry with its place in the table, as `KernelLUT.entries()` yields it."""

    device: str
    op: str
    dtype: str
    entry: LUTEntry


class _Index(NamedTuple):
    """What lookup reads, built once per table: lookup runs inside every GEMM lowering of
    torch.compile, so it must not scan the table."""

    # (device, op, dtype, n, k) -> ((m_low, m_high, batch, layout, entry), ...) of the exact-k
    # entries; batch and layout are None where the entry serves any
    exact: dict[tuple[str, str, str, int, int],
                tuple[tuple[int, int, int | None, str | None, LUTEntry], ...]]
    # (device, op, dtype, n) -> ((k_low, k_high, m_low, m_high, batch, layout, entry), ...) of the
    # k-range entries, read only when no exact-k entry matches; one per dynamic-K GEMM, so a scan
    k_ranges: dict[tuple[str, str, str, int],
                   tuple[tuple[int, int, int, int, int | None, str | None, LUTEntry], ...]]


class KernelLUT(Strict):
    """A kernel lookup table. Immutable; build new tables with `lut_from_rows` or `merge_luts`."""

    model_config = ConfigDict(title="kernel_select kernel lookup table")

    schema_version: Literal[4] = Field(default=SCHEMA_VERSION, description="format version of this file")
    devices: dict[DeviceKey, OpTables] = Field(
        default_factory=dict,
        description="per device key (" + ", ".join(KNOWN_DEVICES) + ", or the name torch reports)")

    # One private attribute for both indexes: each read of one costs pydantic's __getattr__.
    _index: _Index = PrivateAttr(default_factory=lambda: _Index({}, {}))
    _warned: set[Hashable] = PrivateAttr(default_factory=set)
    # The table is immutable, so its digest is computed once: it goes into every compile's cache
    # key (the choices handler's uuid()), and dumping and hashing a 40 MB table takes seconds.
    _digest: str | None = PrivateAttr(default=None)

    @model_validator(mode="before")
    @classmethod
    def _one_key_per_device(cls, data: Any) -> Any:
        devices = data.get("devices") if isinstance(data, dict) else None
        if isinstance(devices, dict):
            repeat = first_repeat((key, name) for name in devices
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
        k_range_index: dict[tuple[str, str, str, int], list] = {}
        for device, op, dtype, entry in self.entries():
            m_key = (*entry.m_bounds, entry.batch_key, entry.layout, entry)
            if isinstance(entry.k, SizeRange):
                k_range_index.setdefault((device, op, dtype, entry.n), []).append((*entry.k_bounds, *m_key))
            else:
                index.setdefault((device, op, dtype, entry.n, entry.k), []).append(m_key)
        self._index = _Index({key: tuple(value) for key, value in index.items()},
                             {key: tuple(value) for key, value in k_range_index.items()})

    # -- queries ---------------------------------------------------------------------------------

    def lookup(self, problem: Problem, device: str | DeviceSpec) -> list[GemmConfig]:
        """The configs stored for `problem` on `device`, in order; [] when no entry matches.

        Configs that cannot run on `device` (shared memory, registers, threads) are left out with
        one warning each; a table with entries only for other devices warns once per device.

        Raises:
            DeviceError: if `device` is not a known device name.
        """
        hit = self.probe(problem, device)
        return [] if hit is None else list(hit.configs)

    def probe(self, problem: Problem, device: str | DeviceSpec) -> LUTHit | None:
        """Everything the table holds for `problem` on `device` from one match: the entry, its configs
        that run on `device` (as `lookup`) and its pin (as `pinned`); None when no entry matches.

        Raises:
            DeviceError: if `device` is not a known device name.
        """
        spec = _device_spec(device)
        entry = self.match(problem, spec)
        if entry is None:
            return None
        configs = tuple(config for config in entry.candidates if self._runs_on(config, problem.dtype, spec))
        pin = entry.pin if entry.pin == ATEN or (entry.pin is not None and entry.pin in configs) else None
        return LUTHit(entry, configs, pin)

    def match(self, problem: Problem, device: str | DeviceSpec) -> LUTEntry | None:
        """The entry serving `problem` on `device` (its m and k ranges tell which sizes it was made
        for, its layout, if any, which operand layout), or None. A pinned entry whose config cannot
        run on `device` is reported by `pinned()`.

        Raises:
            DeviceError: if `device` is not a known device name.
        """
        spec = _device_spec(device)
        exact, k_ranges = self._index
        m, wanted, served = problem.m, problem.batch, problem.layout
        key = (spec.key, problem.op, problem.precision, problem.n)  # a TF32 GEMM reads the "tf32" list
        for low, high, batch, layout, entry in exact.get((*key, problem.k), ()):
            if (low <= m <= high and (batch is None or batch == wanted)
                    and (layout is None or layout == served)):
                return entry
        # Entries never overlap, so an exact-k miss is the only case a k range can answer.
        if k_ranges:
            for k_low, k_high, low, high, batch, layout, entry in k_ranges.get(key, ()):
                if (k_low <= problem.k <= k_high and low <= m <= high and (batch is None or batch == wanted)
                        and (layout is None or layout == served)):
                    return entry
        if self.devices and spec.key not in self.devices:
            self._warn_once(("other device", spec.key),
                            f"kernel lookup table has entries for {', '.join(sorted(self.devices))} "
                            f"only, none for {spec.key}; no LUT config is used on this device")
        return None

    def pinned(self, problem: Problem, device: str | DeviceSpec) -> GemmConfig | str | None:
        """The choice pinned for `problem`: ATEN ("aten"), a Triton config, or None when no pinned
        entry matches (or its config cannot run on `device`: one warning, then it is ignored)."""
        hit = self.probe(problem, device)
        return None if hit is None else hit.pin

    def bucket_edges(self, device: str | DeviceSpec) -> tuple[int, ...]:
        """The length buckets the entries of `device` ask for (kernel_select.buckets): every m range
        and k range begins a bucket and ends one, so that a graph compiled per bucket finds one
        entry, and so one pin, for each GEMM over its whole bucket. () without range entries.

        Raises:
            DeviceError: if `device` is not a known device name.
        """
        key = _device_spec(device).key
        ranges = [bounds for row in self.entries() if row.device == key
                  for bounds in (row.entry.m_bounds, row.entry.k_bounds)]
        return edges_of_ranges(ranges)

    def _runs_on(self, config: GemmConfig, dtype: str, spec: DeviceSpec) -> bool:
        reason = unfit_reason(config, dtype, spec)
        if reason is not None:
            self._warn_once(("unfit", config, dtype, spec), f"kernel lookup table: skipping a config "
                                                            f"that cannot run: {reason}")
        return reason is None

    def _warn_once(self, cause: Hashable, message: str) -> None:
        # Keyed by cause, not text: lookup runs once per GEMM, and one cause is one warning.
        if cause not in self._warned:
            self._warned.add(cause)
            log.warning("%s", message)

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
        return sum(len(value) for index in self._index for value in index.values())

    def digest(self) -> str:
        """sha256 of the table's canonical content (the tree `dump_lut` prints, as compact JSON with
        sorted keys); equal tables have equal digests (use it in cache keys). Computed on the first
        call and kept. Compact rather than `dump_lut`'s layout: 8x faster, and a compile computes it."""
        if self._digest is None:
            text = json.dumps(_tree(self), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            self._digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        return self._digest


def empty_lut() -> KernelLUT:
    """A table without entries: every lookup returns []."""
    return KernelLUT()


@functools.lru_cache(maxsize=64)
def _spec_named(name: str) -> DeviceSpec:
    return get_device(name)


def _device_spec(device: str | DeviceSpec) -> DeviceSpec:
    """The spec of a lookup's device (the running GPU, so any name device.py knows will do)."""
    return device if isinstance(device, DeviceSpec) else _spec_named(device)


def json_schema() -> str:
    """The JSON schema of the current format, as committed in luts/schema/lut.v4.schema.json."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **KernelLUT.model_json_schema()}
    return json.dumps(schema, indent=2) + "\n"


def dump_lut(lut: KernelLUT) -> str:
    """The canonical text of `lut`: sorted keys and entries, 2-space indent, one config per line,
    trailing newline. `dump_lut(parse_lut(dump_lut(t))) == dump_lut(t)` for every table."""
    return _emit(_tree(lut), 0) + "\n"


def _tree(lut: KernelLUT) -> dict[str, Any]:
    """The document of `lut`: devices, ops, dtypes, and each dtype's entries in canonical order."""
    tree: dict[str, Any] = {}
    for row in lut.entries():
        per_op = tree.setdefault(row.device, {}).setdefault(row.op, {})
        per_op.setdefault(row.dtype, []).append(entry_dict(row.entry))
    return {"schema_version": lut.schema_version, "devices": tree}


def _emit(value: Any, depth: int, *, inline: bool = False, inline_items: bool = False) -> str:
    # Configs, pins and m and k ranges go on one line each; everything else is indented, one key
    # per line.
    if inline or not isinstance(value, (dict, list)) or not value:
        return json.dumps(value, ensure_ascii=False)
    pad, close = "  " * (depth + 1), "  " * depth
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(key, ensure_ascii=False)}: "
                 f"{_emit(child, depth + 1, inline=key in ('m', 'k', 'pin'), inline_items=key == 'configs')}"
                 for key, child in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + close + "}"
    items = [pad + _emit(item, depth + 1, inline=inline_items) for item in value]
    return "[\n" + ",\n".join(items) + "\n" + close + "]"
