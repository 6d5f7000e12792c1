"""k ranges (schema_version 3): one entry serves a GEMM whose K is a sequence length, as a weight
gradient under dynamic shapes; the migration from version 2, lookup, overlaps and the layout."""

from __future__ import annotations

import json

import pytest

from kernel_select.lut import lut_from_rows
from kernel_select.configs import GemmConfig
from kernel_select.errors import LUTError
from kernel_select.lut import (ATEN, SCHEMA_VERSION, BatchedLUTEntry, LUTEntry, SizeRange,
                               dump_lut, parse_lut)
from kernel_select.problem import Problem

TRITON = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)
TRITON_JSON = {"block_m": 64, "block_n": 128, "block_k": 64, "num_stages": 3, "num_warps": 4}
# The weight gradient of Linear(3420 -> 1280) over a sequence length L: M=1280, N=3420, K=L.
WEIGHT_GRADIENT = {"m": 1280, "n": 3420, "k": {"min": 560, "max": 8192}, "pin": TRITON_JSON}


def document(*entries: dict, version: int = SCHEMA_VERSION) -> str:
    return json.dumps({"schema_version": version, "devices": {"h100": {"mm": {"bfloat16": list(entries)}}}})


def weight_gradient(k: int, m: int = 1280) -> Problem:
    return Problem(m, 3420, k, "bfloat16")


def test_a_version_2_file_loads_and_dumps_as_the_current_version():
    entries = [{"m": {"min": 1, "max": 512}, "n": 1280, "k": 3420, "pin": "aten"},
               {"m": 560, "n": 1280, "k": 3420, "configs": [TRITON_JSON | {"group_m": 8}],
                "note": "measured"}]
    lut = parse_lut(document(*entries, version=2))
    assert SCHEMA_VERSION == 4 and lut.schema_version == 4
    for newer in (3, 4):  # version 4 added layouts; an entry without one serves every layout
        assert dump_lut(lut) == dump_lut(parse_lut(document(*entries, version=newer)))
    assert json.loads(dump_lut(lut)) == json.loads(document(*entries, version=4))


@pytest.mark.parametrize("version", [1, 2])
def test_a_k_range_in_an_older_file_is_refused_not_migrated(version: int):
    entry = {**WEIGHT_GRADIENT, "configs": [TRITON_JSON]}
    del entry["pin"]  # a version 1 file cannot pin either; the k range is what is refused
    with pytest.raises(LUTError, match=r"^doc.json: devices.h100.mm.bfloat16\[0\].k: k ranges need "
                                       r"schema_version 3; set \"schema_version\": 4"):
        parse_lut(document(entry, version=version), source="doc.json")


def test_a_newer_file_is_refused_by_name():
    with pytest.raises(LUTError, match="schema_version: 5 was written by a newer kernel_select"):
        parse_lut(document(WEIGHT_GRADIENT, version=5))


def test_the_pin_serves_every_k_of_its_range_and_no_other():
    # KernelLUT.pinned is what the Inductor handler asks, with the hinted sizes of each compile.
    lut = parse_lut(document(WEIGHT_GRADIENT, {"m": 1280, "n": 3420, "k": 8193, "pin": "aten"}))
    for k in (560, 561, 1024, 2048, 8191, 8192):
        assert lut.pinned(weight_gradient(k), "h100") == TRITON, k
    assert lut.pinned(weight_gradient(559), "h100") is None
    assert lut.pinned(weight_gradient(8193), "h100") == ATEN  # the exact entry beside the range
    assert lut.pinned(weight_gradient(8194), "h100") is None
    assert lut.pinned(weight_gradient(1024, m=1279), "h100") is None  # m stays exact
    assert lut.pinned(Problem(1280, 3420, 1024, "float16"), "h100") is None
    assert lut.lookup(weight_gradient(1024), "h100") == [TRITON]
    assert lut.match(weight_gradient(1024), "h100").k_bounds == (560, 8192)


def test_m_and_k_ranges_together_and_batches():
    up_to_64, from_16_to_32 = SizeRange(min=1, max=64), SizeRange(min=16, max=32)
    lut = lut_from_rows([
        ("h100", "mm", "bfloat16", LUTEntry(m=up_to_64, n=8, k=up_to_64, pin=ATEN)),
        ("h100", "bmm", "bfloat16", BatchedLUTEntry(m=16, n=8, k=from_16_to_32, batch=4, pin=ATEN)),
        ("h100", "bmm", "bfloat16", BatchedLUTEntry(m=16, n=8, k=from_16_to_32, batch=5, pin=TRITON)),
    ])
    assert lut.pinned(Problem(64, 8, 1, "bfloat16"), "h100") == ATEN
    assert lut.pinned(Problem(65, 8, 1, "bfloat16"), "h100") is None
    assert lut.pinned(Problem(1, 8, 65, "bfloat16"), "h100") is None
    assert lut.pinned(Problem(16, 8, 20, "bfloat16", batch=4, op="bmm"), "h100") == ATEN
    assert lut.pinned(Problem(16, 8, 20, "bfloat16", batch=5, op="bmm"), "h100") == TRITON
    assert lut.pinned(Problem(16, 8, 20, "bfloat16", batch=6, op="bmm"), "h100") is None


@pytest.mark.parametrize(("first", "second", "named"), [
    # a k range over an exact k, their m ranges meeting at 512
    ({"m": {"min": 1, "max": 512}, "k": {"min": 560, "max": 8192}},
     {"m": {"min": 512, "max": 600}, "k": 3420},
     ("[0] (m=1..512 n=3420 k=560..8192)", "[1] (m=512..600 n=3420 k=3420)")),
    # two k ranges meeting at one end, the same m
    ({"m": 1280, "k": {"min": 560, "max": 1024}}, {"m": 1280, "k": {"min": 1024, "max": 8192}},
     ("[0] (m=1280 n=3420 k=560..1024)", "[1] (m=1280 n=3420 k=1024..8192)")),
    # a range of width one over the exact k it equals
    ({"m": 1280, "k": 4096}, {"m": 1280, "k": {"min": 4096, "max": 4096}},
     ("[0] (m=1280 n=3420 k=4096)", "[1] (m=1280 n=3420 k=4096)")),  # a width-one range reads as its value
])
def test_overlapping_k_ranges_are_refused_naming_both_entries(first: dict, second: dict, named: tuple):
    entries = [{"n": 3420, "pin": "aten", **first}, {"n": 3420, "pin": "aten", **second}]
    with pytest.raises(LUTError, match="overlap; make their m or k ranges disjoint") as info:
        parse_lut(document(*entries), source="doc.json")
    assert all(name in str(info.value) for name in named), str(info.value)
    with pytest.raises(LUTError, match="overlap"):  # in either order
        parse_lut(document(*reversed(entries)))


def test_entries_beside_a_k_range_are_accepted():
    lut = parse_lut(document(WEIGHT_GRADIENT,
                             {"m": 1280, "n": 3420, "k": 559, "pin": "aten"},  # just below in k
                             {"m": 1281, "n": 3420, "k": 1024, "pin": "aten"},  # inside in k, beside in m
                             {"m": 1280, "n": 3421, "k": 1024, "pin": "aten"},  # another n
                             {"m": 1280, "n": 3420, "k": {"min": 8193, "max": 9000}, "pin": "aten"}))
    assert lut.num_entries == 5
    assert [row.entry.describe_key() for row in lut.entries()] == [
        "m=1280 n=3420 k=559", "m=1280 n=3420 k=560..8192", "m=1281 n=3420 k=1024",
        "m=1280 n=3420 k=8193..9000", "m=1280 n=3421 k=1024"]  # canonical order: n, k low, k high, m


def test_a_k_range_is_written_on_one_line():
    text = dump_lut(parse_lut(document(WEIGHT_GRADIENT)))
    assert '            "k": {"min": 560, "max": 8192},\n' in text


def test_k_ranges_among_many_exact_k_entries_are_accepted_and_serve_their_sizes():
    # 20,000 exact-k entries (a large table) and 20 k ranges over their ks, below their m: no overlap.
    # How the check's work grows is counted in tests/lut/test_overlap_scale.py and timed against the
    # exact entries alone in tests/benchmarks/test_lut_scale.py.
    exact = [("h100", "mm", "bfloat16", LUTEntry(m=2**power, n=n, k=k, pin=ATEN))
             for n in range(1, 11) for k in range(1, 201) for power in range(4, 14)]
    ranges = [("h100", "mm", "bfloat16", LUTEntry(m=SizeRange(min=1, max=15), n=n,
                                                  k=SizeRange(min=1, max=200), pin=TRITON))
              for n in range(1, 21)]
    lut = lut_from_rows(exact + ranges)
    assert lut.num_entries == len(exact) + len(ranges)
    for m, n, k, pin in ((15, 3, 200, TRITON), (1, 20, 1, TRITON), (16, 3, 200, ATEN), (8192, 10, 1, ATEN)):
        assert lut.pinned(Problem(m, n, k, "bfloat16"), "h100") == pin, (m, n, k)
    assert lut.pinned(Problem(17, 3, 200, "bfloat16"), "h100") is None  # between the exact ms
    assert lut.pinned(Problem(15, 3, 201, "bfloat16"), "h100") is None  # past the range's k
