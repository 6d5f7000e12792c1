"""Pinned entries (schema_version 2) and the migration from version 1 to the current version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernel_select.configs import GemmConfig
from kernel_select.errors import LUTError
from kernel_select.lut import (
    ATEN,
    SCHEMA_VERSION,
    dump_lut,
    load_lut,
    lut_from_rows,
    LUTEntry,
    MRange,
    parse_lut,
)
from kernel_select.lut.torch_table import to_inductor_table
from kernel_select.problem import Problem

DATA = Path(__file__).resolve().parent.parent / "data"
TRITON = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
TRITON_JSON = {"block_m": 64, "block_n": 128, "block_k": 64, "num_stages": 3, "num_warps": 4}


def pinned_doc(*entries: dict, version: int = 2) -> str:
    return json.dumps({"schema_version": version, "devices": {"h100": {"mm": {"bfloat16": list(entries)}}}})


def problem(m: int) -> Problem:
    return Problem(m, 1280, 3420, "bfloat16")


def test_a_v1_file_migrates_to_the_same_table_in_the_current_version():
    v1 = (DATA / "lut_v1.json").read_text()
    assert json.loads(v1)["schema_version"] == 1
    lut = parse_lut(v1)
    assert lut.schema_version == SCHEMA_VERSION == 4
    for version in (2, 3, 4):
        assert parse_lut(json.dumps(json.loads(v1) | {"schema_version": version})) == lut
    assert all(row.entry.pin is None and row.entry.configs for row in lut.entries())
    assert json.loads(dump_lut(lut))["schema_version"] == 4


def test_pinned_entries_round_trip_and_answer_lookups():
    text = pinned_doc({"m": {"min": 1, "max": 1023}, "n": 1280, "k": 3420, "pin": TRITON_JSON,
                       "note": "pretune"},
                      {"m": {"min": 1024, "max": 8192}, "n": 1280, "k": 3420, "pin": "aten"})
    lut = parse_lut(text)
    assert parse_lut(dump_lut(lut)) == lut
    assert '"pin": {"block_m": 64' in dump_lut(lut)  # one line, like a config

    assert lut.pinned(problem(560), "h100") == TRITON
    assert lut.lookup(problem(560), "h100") == [TRITON]  # adapters without pins still benchmark it
    assert lut.pinned(problem(2048), "h100") == ATEN
    assert lut.lookup(problem(2048), "h100") == []
    assert lut.pinned(problem(9000), "h100") is None
    entry = lut.match(problem(2048), "h100")
    assert entry is not None and entry.m_bounds == (1024, 8192)


def test_benchmarked_entries_are_not_pins():
    lut = parse_lut(pinned_doc({"m": 560, "n": 1280, "k": 3420, "configs": [TRITON_JSON]}))
    assert lut.pinned(problem(560), "h100") is None and lut.lookup(problem(560), "h100") == [TRITON]


@pytest.mark.parametrize(("entry", "message"), [
    ({"m": 560, "n": 1280, "k": 3420, "pin": "aten", "configs": [TRITON_JSON]},
     "has both of configs and pin"),
    ({"m": 560, "n": 1280, "k": 3420}, "has neither of configs and pin"),
    ({"m": 560, "n": 1280, "k": 3420, "pin": "cublas"}, "[0].pin"),
    ({"m": 560, "n": 1280, "k": 3420, "pin": {**TRITON_JSON, "block_m": 48}}, "[0].pin.block_m"),
])
def test_malformed_pins_are_refused_with_their_location(entry: dict, message: str):
    with pytest.raises(LUTError, match="^doc.json: devices.h100.mm.bfloat16") as info:
        parse_lut(pinned_doc(entry), source="doc.json")
    assert message in str(info.value)


def test_a_pin_in_a_version_1_file_is_refused_not_migrated():
    with pytest.raises(LUTError,
                       match=r"devices.h100.mm.bfloat16\[0\].pin: pinned entries need schema_version 2"):
        parse_lut(pinned_doc({"m": 560, "n": 1280, "k": 3420, "pin": "aten"}, version=1))


def test_a_pinned_config_that_cannot_run_is_ignored_with_one_warning(caplog: pytest.LogCaptureFixture):
    huge = GemmConfig(block_m=256, block_n=256, block_k=256, num_stages=8, num_warps=8)
    lut = lut_from_rows([("h100", "mm", "bfloat16", LUTEntry(m=560, n=1280, k=3420, pin=huge))])
    assert lut.pinned(problem(560), "h100") is None
    assert lut.pinned(problem(560), "h100") is None
    assert len([r for r in caplog.records if "cannot run" in r.getMessage()]) == 1


def test_pinned_entries_export_exactly_their_choice_to_torchs_table():
    rows = [("h100", "mm", "bfloat16", LUTEntry(m=560, n=1280, k=3420, pin=TRITON)),
            ("h100", "mm", "bfloat16", LUTEntry(m=1024, n=1280, k=3420, pin=ATEN)),
            ("h100", "mm", "bfloat16", LUTEntry(m=MRange(min=2048, max=4096), n=1280, k=3420, pin=ATEN))]
    table = to_inductor_table(lut_from_rows(rows), keep_aten=True)
    by_m = {key.split("[")[1].split(",")[0].strip("("): value for key, value in table.items()}
    assert [e["template_id"] for e in by_m["560"]] == ["triton::mm"]
    assert [e["template_id"] for e in by_m["1024"]] == ["aten::mm"]
    assert len(table) == 2  # the range cannot be exported


def test_the_shipped_seed_table_loads():
    assert load_lut(Path(__file__).resolve().parents[2] / "luts" / "h100_seed.json").num_entries > 0
