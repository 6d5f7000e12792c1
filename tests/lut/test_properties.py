"""Properties of the LUT format: round trips, canonical form, robustness, and lookup."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kernel_select.lut import lut_from_rows
from kernel_select.configs import GemmConfig
from kernel_select.device import KNOWN_DEVICES, DeviceSpec
from kernel_select.errors import LUTError
from kernel_select.lut import (MAX_DIM, BatchedLUTEntry, KernelLUT, LUTEntry, LUTRow, SizeRange, dump_lut,
                               empty_lut, load_lut, parse_lut)
from kernel_select.lut.bounded_read import MAX_JSON_DEPTH
from kernel_select.problem import Problem
from tests.lut.documents import documents, expected_rows, parsed_rows
from tests.strategies import corrupted, entries_meet, examples, hand_written, luts, precision_problem, probes


@examples(ci=6000)
@given(documents())
def test_documents_parse_exactly_when_an_independent_oracle_says_valid(
        drawn: tuple[dict, bytes, str]) -> None:
    document, data, fault = drawn
    expected = None if fault == "duplicate JSON key" or not _is_utf8(data) else expected_rows(document)
    try:
        lut = parse_lut(data, source="doc.json")
    except LUTError as exc:
        assert expected is None, f"a valid document was rejected: {exc}"
        assert re.match(r"^doc\.json: [^:]+: \S", str(exc)), f"no location in {exc}"
        return
    assert expected is not None, f"an invalid document ({fault or 'drawn'}) was accepted"
    assert parsed_rows(lut) == expected


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@examples(ci=1500)
@given(luts())
def test_dump_then_parse_is_identity(lut: KernelLUT) -> None:
    text = dump_lut(lut)
    assert parse_lut(text) == lut
    assert dump_lut(parse_lut(text)) == text


@examples(ci=1500)
@given(st.data())
def test_hand_written_tables_load_and_format_idempotently(data: st.DataObject) -> None:
    lut = data.draw(luts())
    text = data.draw(hand_written(lut))
    parsed = parse_lut(text)
    assert parsed == lut
    formatted = dump_lut(parsed)
    assert formatted == dump_lut(lut)  # same canonical text, hence the same digest
    assert dump_lut(parse_lut(formatted)) == formatted


@examples(ci=1000)
@given(st.one_of(st.binary(max_size=64), st.text(max_size=64)))
def test_arbitrary_input_raises_only_lut_error(data: bytes | str) -> None:
    try:
        parse_lut(data, source="any.json")
    except LUTError as exc:
        assert str(exc).startswith("any.json: ")


#: A number of up to 4,300 digits (the most Python converts to text) or a string of thousands of
#: letters: what a hostile file puts where a size, a config field or a version belongs.
_HUGE_VALUES = st.one_of(st.integers(41, 4300).map(lambda digits: int("9" * digits)),
                         st.integers(41, 5000).map(lambda length: "x" * length))


def _value_slots(tree: object, out: list[tuple[object, object]]) -> list[tuple[object, object]]:
    """Every (container, key-or-index) of a JSON tree whose value can be replaced."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree) if isinstance(tree, list) else ()
    for key, value in items:
        out.append((tree, key))
        _value_slots(value, out)
    return out


@examples(ci=600)
@given(luts(min_tables=1), st.integers(0, 2**16), _HUGE_VALUES)
def test_refused_values_are_echoed_cut_short(lut: KernelLUT, pick: int, value: int | str) -> None:
    """Anywhere in a document, a huge value is refused with a message of a few hundred characters
    at most: a 4,300-digit schema_version once filled a terminal."""
    doc = json.loads(dump_lut(lut))
    slots = _value_slots(doc, [])
    container, key = slots[pick % len(slots)]
    container[key] = value  # type: ignore[index]
    try:
        parse_lut(json.dumps(doc), source="lut.json")
    except LUTError as exc:
        assert len(str(exc)) < 400, str(exc)
        assert str(exc).startswith("lut.json: ")
        return
    assert key == "note" and isinstance(value, str), f"{key!r} = {str(value)[:40]}... was accepted"


@examples(ci=300)
@given(st.integers(1, 5000), st.sampled_from(("[", '{"a": ', '{"devices": ')))
def test_json_nested_to_any_depth_is_a_lut_error(depth: int, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    with pytest.raises(LUTError) as info:
        parse_lut(opener * depth + "1" + closer * depth, source="deep.json")
    assert str(info.value).startswith("deep.json: ")
    if depth > MAX_JSON_DEPTH:
        assert "nested more than 64 levels deep" in str(info.value)


_BAD_CONFIG_VALUES = st.sampled_from((("block_m", 48), ("block_n", 0), ("block_k", 2048), ("num_stages", 0),
                                      ("num_stages", 9), ("num_warps", 3), ("group_m", 0), ("group_m", 65),
                                      ("block_k", "64"), ("num_warps", 4.0), ("num_stages", None)))


@examples(ci=1500)
@given(luts(min_tables=1), st.integers(0, 2**16), st.integers(0, 2**16), _BAD_CONFIG_VALUES)
def test_errors_name_the_exact_json_location(lut: KernelLUT, row_pick: int, config_pick: int,
                                             bad: tuple[str, object]) -> None:
    # Canonical text lists entries in entries() order, so indices there are indices in the file.
    doc = json.loads(dump_lut(lut))
    rows = list(lut.entries())
    with_configs = [row for row in rows if row.entry.candidates]  # all but "aten" pins
    assume(with_configs)
    row = with_configs[row_pick % len(with_configs)]
    position = [r for r in rows if r[:3] == row[:3]].index(row)
    field, value = bad
    written = doc["devices"][row.device][row.op][row.dtype][position]
    if row.entry.configs is None:
        written["pin"][field] = value
        slot = "pin"
    else:
        config = config_pick % len(row.entry.configs)
        written["configs"][config][field] = value
        slot = f"configs[{config}]"
    where = f"devices.{row.device}.{row.op}.{row.dtype}[{position}].{slot}.{field}: "
    with pytest.raises(LUTError, match="^lut.json: " + re.escape(where)):
        parse_lut(json.dumps(doc), source="lut.json")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("corrupted") / "lut.json"


@contextmanager
def _warnings_of(name: str) -> Iterator[list[logging.LogRecord]]:
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


@examples(ci=3000)
@given(corrupted())
def test_corrupted_documents_raise_only_lut_error_or_load_empty(scratch: Path, data: bytes) -> None:
    try:
        strict = parse_lut(data, source="corrupted.json")
    except LUTError as exc:
        assert str(exc).startswith("corrupted.json: ")
        strict = None
    scratch.write_bytes(data)
    with _warnings_of("kernel_select.lut") as warnings:
        lenient = load_lut(scratch, strict=False)
    if strict is None:
        assert lenient == empty_lut()
        assert len(warnings) == 1
    else:  # some corruptions leave a valid table (e.g. a flipped digit in a size)
        assert lenient == strict
        assert warnings == []


def _reference_lookup(lut: KernelLUT, problem: Problem, device: str) -> tuple[list, object]:
    """(configs lookup() returns, the choice pinned() returns), found by a scan."""
    matches = [row.entry for row in lut.entries()
               if (row.device, row.op, row.dtype, row.entry.n)
               == (device, problem.op, problem.precision, problem.n)  # "tf32": its own list
               and row.entry.m_bounds[0] <= problem.m <= row.entry.m_bounds[1]
               and row.entry.k_bounds[0] <= problem.k <= row.entry.k_bounds[1]
               and row.entry.batch_key in (None, problem.batch)
               and row.entry.layout in (None, problem.layout)]
    assert len(matches) <= 1, "validation must have rejected overlapping entries"
    spec = KNOWN_DEVICES[device]
    entry = matches[0] if matches else None
    pin = None if entry is None else entry.pin
    if isinstance(pin, GemmConfig) and not _runs_on(pin, problem.dtype_bytes, spec):
        pin = None
    listed = [] if entry is None else entry.configs if entry.configs is not None else \
        [] if entry.pin == "aten" else [entry.pin]
    return [config for config in listed if _runs_on(config, problem.dtype_bytes, spec)], pin


def _runs_on(config: GemmConfig, dtype_bytes: int, spec: DeviceSpec) -> bool:
    # Written out independently of kernel_select.lut.hardware: A and B tiles per stage plus 128 B
    # of barriers; the fp32 accumulator within 255 registers a thread and the SM's register file.
    smem = dtype_bytes * config.block_k * (config.block_m + config.block_n) * config.num_stages + 128
    accumulator = config.block_m * config.block_n
    threads = 32 * config.num_warps
    return (smem <= spec.smem_per_block_optin and -(-accumulator // threads) <= 255
            and accumulator <= spec.registers_per_sm)


@examples(ci=1500)
@given(st.data())
def test_lookup_agrees_with_brute_force(data: st.DataObject) -> None:
    lut = data.draw(luts())
    for _ in range(3):
        problem = data.draw(probes(lut))
        device = data.draw(st.sampled_from(sorted(lut.devices) or ["h100"]))
        answer = (lut.lookup(problem, device), lut.pinned(problem, device))
        assert answer == _reference_lookup(lut, problem, device)


_SIDES = st.sampled_from(("below", "low", "inside", "high", "above"))
_REACH = st.sampled_from((0, 0, 1, 1000, MAX_DIM))  # how far a drawn range reaches from its point


@st.composite
def _size_around(draw: st.DrawFn, low: int, high: int) -> int | SizeRange:
    """An exact size or a range, on, in or just beside [low, high]."""
    point = {"below": low - 1, "low": low, "inside": (low + high) // 2, "high": high,
             "above": high + 1}[draw(_SIDES)]
    point = min(max(point, 1), MAX_DIM)
    if draw(st.booleans()):
        return point
    return SizeRange(min=max(1, point - draw(_REACH)), max=min(MAX_DIM, point + draw(_REACH)))


@examples(ci=1500)
@given(luts(min_tables=1), st.data())
def test_an_added_entry_is_rejected_exactly_when_it_overlaps_one(lut: KernelLUT, data: st.DataObject) -> None:
    # The new entry sits on, around or beside a drawn entry, in m and in k (each exact or a range),
    # in its layout, another or none, so both outcomes are frequent; entries_meet is the overlap
    # rule written out independently.
    rows = list(lut.entries())
    assume(rows)
    row = rows[data.draw(st.integers(0, len(rows) - 1))]
    fields = dict(m=data.draw(_size_around(*row.entry.m_bounds)), n=row.entry.n,
                  k=data.draw(_size_around(*row.entry.k_bounds)), pin="aten",
                  layout=data.draw(st.sampled_from((None, row.entry.layout, "nn", "tn"))))
    if isinstance(row.entry, BatchedLUTEntry):
        new: LUTEntry = BatchedLUTEntry(batch=data.draw(st.sampled_from((None, row.entry.batch_key, 3))),
                                        **fields)
    else:
        new = LUTEntry(**fields)
    table = [r.entry for r in rows if r[:3] == row[:3]]
    added = [*rows, LUTRow(row.device, row.op, row.dtype, new)]
    if any(entries_meet(new, entry) for entry in table):
        with pytest.raises(LUTError, match="overlap") as info:
            lut_from_rows(added)
        # The message names the new entry ("any layout" where the other entry names one).
        assert any(f"({new.describe_key(any_layout=named)})" in str(info.value) for named in (False, True))
    else:  # accepted, and found at a corner of its key
        corner = precision_problem(new.m_bounds[0], new.n, new.k_bounds[1], row.dtype,
                                   batch=new.batch_key or 1, op=row.op, layout=new.layout or "tt")
        assert lut_from_rows(added).match(corner, row.device) == new
