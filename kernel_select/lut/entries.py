"""One LUT entry (a problem key and its configs, or its pinned choice) and the rule that entries
may not overlap. m and k are each an exact size or an inclusive range (`SizeRange`); `layout`
(schema_version 4) narrows an entry to one operand layout, as `batch` narrows a bmm entry to one
batch size."""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Hashable, Iterable
from typing import Annotated, Any, Literal, NamedTuple, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator,
                      model_validator)

from kernel_select.configs import GemmConfig
from kernel_select.layouts import LAYOUTS
from kernel_select.lut.intervals import OpenEntries, OpenIntervals

#: Largest matrix dimension an entry may name. Inductor indexes with int32 by default, and a
#: bound keeps a typo such as an extra digit from silently producing a useless entry.
MAX_DIM = 2**31 - 1
BATCHED_OPS = ("bmm", "baddbmm")

Size = Annotated[int, Field(ge=1, le=MAX_DIM)]


def first_repeat(items: Iterable[tuple[Hashable, Any]]) -> tuple[Hashable, Any, Any] | None:
    """The first key that repeats in (key, label) pairs, with the labels of both places."""
    seen: dict[Hashable, Any] = {}
    for key, label in items:
        if key in seen:
            return key, seen[key], label
        seen[key] = label
    return None

class Strict(BaseModel):
    """Unknown fields are errors, and validated objects are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SizeRange(Strict):
    """An inclusive range of one GEMM size (m or k), for entries that serve a dynamic dimension: a
    sequence length is M in a forward GEMM and K in a weight gradient."""

    min: Size = Field(description="smallest size this entry serves (inclusive)")
    max: Size = Field(description="largest size this entry serves (inclusive)")

    @model_validator(mode="after")
    def _ordered(self) -> SizeRange:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) is larger than max ({self.max}); swap them")
        return self


#: The name the range had when only m could be one; kept so that code importing it keeps working.
MRange = SizeRange


def _size_kind(value: Any) -> str:
    return "range" if isinstance(value, (dict, SizeRange)) else "exact"


#: An exact size or an inclusive range of sizes (m since schema_version 1, k since 3).
SizeSpec = Annotated[
    Union[Annotated[Size, Tag("exact")], Annotated[SizeRange, Tag("range")]],
    Discriminator(_size_kind),
]


def bounds(size: int | SizeRange) -> tuple[int, int]:
    """(lowest, highest) value of an exact size or a range, inclusive."""
    return (size.min, size.max) if isinstance(size, SizeRange) else (size, size)


def describe_bounds(size: int | SizeRange) -> str:
    """"560" for an exact size, "1..8192" for a range."""
    low, high = bounds(size)
    return str(low) if low == high else f"{low}..{high}"


#: An operand layout an entry may name (kernel_select.layouts): A then B, "t" stored transposed.
LayoutName = Literal["nn", "nt", "tn", "tt"]


#: A pinned choice that is not a Triton config: Inductor's ATen (cuBLAS) kernel.
ATEN = "aten"


def _pin_kind(value: Any) -> str:
    return "aten" if isinstance(value, str) else "triton"


#: What a pinned entry offers Inductor: "aten" or one Triton config.
PinSpec = Annotated[
    Union[Annotated[Literal["aten"], Tag("aten")], Annotated[GemmConfig, Tag("triton")]],
    Discriminator(_pin_kind),
]
# Union tags appear in pydantic error locations; they are not part of the JSON path.
UNION_TAGS = ("exact", "range", "aten", "triton")


class LUTEntry(Strict):
    """One problem key (m or an m range, n, k or a k range) and either the configs to try for it, best first,
    or the one choice pinned for it (nothing is benchmarked)."""

    m: SizeSpec = Field(description='rows of A and C: an integer, or {"min": A, "max": B} (inclusive)')
    n: Size = Field(description="columns of B and C")
    k: SizeSpec = Field(description='columns of A, rows of B (the reduction dimension): an integer, or '
                                    '{"min": A, "max": B} (inclusive; schema_version 3)')
    configs: list[GemmConfig] | None = Field(
        default=None, min_length=1,
        description="configs to benchmark, best first (an entry has either configs or pin)")
    pin: PinSpec | None = Field(
        default=None,
        description='the only choice Inductor gets, benchmarked against nothing: "aten" (cuBLAS) or one '
                    "Triton config (an entry has either configs or pin; schema_version 2)")
    layout: LayoutName | None = Field(
        default=None,
        description='operand layout this entry serves, A then B: "nn", "nt" (x @ W.t()), "tn" or "tt"; '
                    "omit to serve every layout (schema_version 4)")
    note: str | None = Field(default=None, description="free text: where these configs came from")

    @field_validator("layout", mode="before")
    @classmethod
    def _known_layout(cls, layout: Any) -> Any:
        # Before pydantic's own check, whose "Input should be 'nn', ..." says nothing of the letters.
        if layout is not None and layout not in LAYOUTS:
            raise ValueError(f"unsupported layout {layout!r}; use one of {', '.join(LAYOUTS)} (A then B; "
                             "'t': stored transposed, as W in x @ W.t()), or omit it to serve every layout")
        return layout

    @model_validator(mode="after")
    def _configs_or_pin(self) -> LUTEntry:
        if (self.configs is None) == (self.pin is None):
            which = "both" if self.pin is not None else "neither"
            raise ValueError(f"has {which} of configs and pin; give configs (benchmarked) or pin "
                             "(used as is), not both")
        return self

    @field_validator("configs")
    @classmethod
    def _unique_configs(cls, configs: list[GemmConfig] | None) -> list[GemmConfig] | None:
        if configs is None or len(configs) == 1:  # one config (most entries) cannot repeat; hashing costs
            return configs
        repeat = first_repeat((config, index) for index, config in enumerate(configs))
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
        return bounds(self.m)

    @property
    def k_bounds(self) -> tuple[int, int]:
        """(lowest, highest) k this entry serves, inclusive."""
        return bounds(self.k)

    @property
    def batch_key(self) -> int | None:
        return None

    @property
    def candidates(self) -> list[GemmConfig]:
        """The Triton configs this entry names: its configs, or its pinned config ([] for "aten")."""
        if self.configs is not None:
            return list(self.configs)
        return [] if self.pin == ATEN else [self.pin]  # type: ignore[list-item]

    def describe_key(self, *, any_layout: bool = False) -> str:
        """"m=1..512 n=1280 k=3420 layout=nt"; `any_layout` says "any layout" for an entry without one."""
        batch = "" if self.batch_key is None else f" batch={self.batch_key}"
        layout = f" layout={self.layout}" if self.layout else " any layout" if any_layout else ""
        return f"m={describe_bounds(self.m)} n={self.n} k={describe_bounds(self.k)}{batch}{layout}"


class LUTHit(NamedTuple):
    """What a lookup table holds for one problem on one device: the answer of the lookup protocol
    (kernel_select.selection.LookupTable.probe), one match for all of it."""

    entry: Any  # the entry serving the problem: its m_bounds and k_bounds say which sizes it covers
    configs: tuple[GemmConfig, ...]  # the configs to benchmark first, those that run on the device
    pin: GemmConfig | str | None  # the one choice of a pinned entry ("aten" or a config), else None


class BatchedLUTEntry(LUTEntry):
    """An entry of bmm/baddbmm; `batch` narrows it to one batch size (omit it to serve all)."""

    batch: Size | None = Field(default=None, description="batch size this entry serves; omit for any")

    @property
    def batch_key(self) -> int | None:
        return self.batch


class _Key(NamedTuple):
    """What the overlap check reads of an entry, read once (each property read costs)."""

    n: int
    m_low: int
    m_high: int
    k_low: int
    k_high: int
    batch: int | None
    layout: str | None


def _key_of(entry: LUTEntry) -> _Key:
    return _Key(entry.n, *entry.m_bounds, *entry.k_bounds, entry.batch_key, entry.layout)


def _canonical_order(key: _Key) -> tuple[int | str, ...]:
    return (key.n, key.k_low, key.k_high, key.m_low, key.m_high, key.batch or 0, key.layout or "")


def _check_disjoint(entries: list[LUTEntry]) -> list[LUTEntry]:
    """Reject entries whose keys intersect (same n, intersecting m and k, batches and layouts that
    can coincide); sort the rest.

    Each entry is a rectangle in (m, k); two entries of one n meet when their rectangles intersect
    and their batches and layouts can coincide. One sweep over m per group (an n, or an n and an
    exact k that no range of that n covers; and per named layout, at most four) finds the first
    such pair in O(E log E): entries enter in order of their lowest m,
    leave once the sweep passes their highest, and each entering entry asks the k intervals of
    the entries still open whether one meets its own (intervals.OpenIntervals), so no pair of
    entries is ever compared unless they overlap. Indices in messages are positions in the file.
    The returned list is in canonical order, so that a table compares equal to itself after a
    dump/load round trip.
    """
    keys = [_key_of(entry) for entry in entries]
    ranged = [isinstance(entry.k, SizeRange) for entry in entries]
    # An exact-k entry can meet another entry only at its own k: where no k range of its n covers that
    # k, only the exact entries of the same k, one sweep per (n, k) then, in which every open entry
    # meets every entering one (intervals.OpenEntries). The k ranges of an n and the exact entries
    # they cover share one sweep over their k intervals. (Pretune's tables have a few ranges per n,
    # above its exact ks: one sweep over all of an n's entries cost a 100,000-entry table a second.)
    covered = _k_range_union(keys, ranged)
    groups: dict[tuple[int, int | None], list[int]] = {}
    for index, key in enumerate(keys):
        swept = ranged[index] or (key.n in covered and _covers(covered[key.n], key.k_low))
        groups.setdefault((key.n, None if swept else key.k_low), []).append(index)
    for members in groups.values():
        if len(members) > 1:
            _check_group_disjoint(entries, keys, members)
    return [entries[index] for index in sorted(range(len(entries)), key=lambda i: _canonical_order(keys[i]))]


def _k_range_union(keys: list[_Key], ranged: list[bool]) -> dict[int, tuple[list[int], list[int]]]:
    """Per n with k ranges: the ks its ranges cover, as sorted disjoint intervals (lows, highs)."""
    spans: dict[int, list[tuple[int, int]]] = {}
    for key, is_range in zip(keys, ranged):
        if is_range:
            spans.setdefault(key.n, []).append((key.k_low, key.k_high))
    union: dict[int, tuple[list[int], list[int]]] = {}
    for n, intervals in spans.items():
        lows: list[int] = []
        highs: list[int] = []
        for low, high in sorted(intervals):
            if highs and low <= highs[-1]:
                highs[-1] = max(highs[-1], high)
            else:
                lows.append(low)
                highs.append(high)
        union[n] = (lows, highs)
    return union


def _covers(union: tuple[list[int], list[int]], k: int) -> bool:
    """Whether one of the intervals of `union` (from `_k_range_union`) holds `k`."""
    lows, highs = union
    at = bisect_right(lows, k) - 1
    return at >= 0 and k <= highs[at]


def _check_group_disjoint(entries: list[LUTEntry], keys: list[_Key], members: list[int]) -> None:
    # An entry without a layout serves every layout, so it joins the sweep of each layout named in
    # the group (at most 4, so the cost stays O(E log E)); two entries that can serve one layout
    # then share at least one sweep. Batches are told apart inside the sweep (`_batch_sets`),
    # because a bmm table may name thousands.
    if _m_disjoint(keys, members):  # most groups (exact m in a table of exact entries): no sweep needed
        return
    layouts = {keys[i].layout for i in members} - {None}
    for layout in layouts or {None}:
        _sweep_m(entries, keys, [i for i in members if keys[i].layout in (None, layout)])


def _m_disjoint(keys: list[_Key], members: list[int]) -> bool:
    """Whether no two of `members` share an m: then none meet, whatever their k, batch and layout."""
    spans = sorted((keys[i].m_low, keys[i].m_high) for i in members)
    return all(high < low for (_, high), (low, _) in zip(spans, spans[1:]))


#: The set of open entries that an entry without a batch is compared with: all that name one.
_BATCHED = "batched"
#: The set of open entries without a batch (they serve every batch).
_ANY_BATCH = "any batch"


def _batch_sets(batch: int | None) -> tuple[tuple[Hashable, ...], tuple[Hashable, ...]]:
    """(the sets of open entries an entry of `batch` is compared with, the sets it joins). An entry
    of batch 4 meets the entries of batch 4 and those without a batch; one without a batch meets
    every entry."""
    if batch is None:
        return (_ANY_BATCH, _BATCHED), (_ANY_BATCH,)
    return (_ANY_BATCH, batch), (batch, _BATCHED)


def _sweep_m(entries: list[LUTEntry], keys: list[_Key], chosen: list[int]) -> None:
    """Raise for two of `chosen` (entries of one n and compatible layouts) that meet in m, k and batch."""
    if len(chosen) < 2:
        return
    k_edges = sorted({edge for i in chosen for edge in (keys[i].k_low, keys[i].k_high)})
    open_set = OpenIntervals if len(k_edges) > 1 else OpenEntries
    open_sets: dict[Hashable, OpenEntries] = {}
    closing: list[tuple[int, int]] = []  # a heap of (highest m, index) of the open entries
    for index in sorted(chosen, key=lambda i: (keys[i].m_low, keys[i].m_high)):
        key = keys[index]
        while closing and closing[0][0] < key.m_low:
            _, done = heapq.heappop(closing)
            for name in _batch_sets(keys[done].batch)[1]:
                open_sets[name].remove(done, keys[done].k_low, keys[done].k_high)
        compared, joined = _batch_sets(key.batch)
        for name in compared:
            partner = open_sets[name].meeting(key.k_low, key.k_high) if name in open_sets else None
            if partner is not None:
                raise _overlap_error(entries, *sorted((partner, index)))
        for name in joined:
            if name not in open_sets:  # not setdefault: building a set costs O(K)
                open_sets[name] = open_set(k_edges)
            open_sets[name].add(index, key.k_low, key.k_high)
        heapq.heappush(closing, (key.m_high, index))


def _overlap_error(entries: list[LUTEntry], first: int, second: int) -> ValueError:
    pair = (entries[first], entries[second])
    ranged_k = any(isinstance(entry.k, SizeRange) for entry in pair)
    # Where either names a layout, both do in the message: "any layout" is why they still meet.
    named = any(entry.layout for entry in pair)
    first_key, second_key = (entry.describe_key(any_layout=named) for entry in pair)
    # Two entries of one layout can only be told apart by their sizes.
    relayout = "" if all(entry.layout for entry in pair) else \
        ', give each the operand layout it serves ("layout": "nt", ...),'
    return ValueError(f"entries [{first}] ({first_key}) and [{second}] ({second_key}) overlap; make their "
                      f"{'m or k' if ranged_k else 'm'} ranges disjoint{relayout} or merge them "
                      "into one entry")


EntryList = Annotated[list[LUTEntry], AfterValidator(_check_disjoint)]
BatchedEntryList = Annotated[list[BatchedLUTEntry], AfterValidator(_check_disjoint)]


def entry_dict(entry: LUTEntry) -> dict[str, Any]:
    """The canonical JSON object of an entry: m, n, k (a range as {"min", "max"}), [batch], [layout],
    configs or pin, [note], in that order."""
    out: dict[str, Any] = {"m": _size_json(entry.m), "n": entry.n, "k": _size_json(entry.k)}
    if entry.batch_key is not None:
        out["batch"] = entry.batch_key
    if entry.layout is not None:
        out["layout"] = entry.layout
    if entry.configs is not None:
        out["configs"] = [config.model_dump() for config in entry.configs]
    else:
        out["pin"] = entry.pin if entry.pin == ATEN else entry.pin.model_dump()  # type: ignore[union-attr]
    if entry.note is not None:
        out["note"] = entry.note
    return out


def _size_json(size: int | SizeRange) -> int | dict[str, int]:
    return size.model_dump() if isinstance(size, SizeRange) else size
