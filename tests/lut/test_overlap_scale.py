"""The overlap check does O(E log E) work on any table, counted in operations, not seconds: tables
built so that a check comparing entries pairwise (by k first, or by scanning the open entries)
would compare every pair (issue 43: 8,000 entries whose k ranges meet took 138 s)."""

from __future__ import annotations

import pytest

from kernel_select.lut import ATEN, BatchedLUTEntry, LUTEntry, SizeRange, lut_from_rows
from kernel_select.lut import entries as entries_module
from kernel_select.lut import intervals as intervals_module
from kernel_select.errors import LUTError

SIZE = 3000
WIDE = SizeRange(min=1, max=10**6)


def _issue_table() -> list[LUTEntry]:
    # every k range meets every other; the m differ, so no two entries overlap
    return [LUTEntry(m=i, n=1024, k=SizeRange(min=i, max=10**6), pin=ATEN) for i in range(1, SIZE + 1)]


def _all_open_table() -> list[LUTEntry]:
    # every m range meets every other (all entries are open at once in a sweep over m); the k differ
    return [LUTEntry(m=WIDE, n=1024, k=i, pin=ATEN) for i in range(1, SIZE + 1)]


def _batched_table() -> list[LUTEntry]:
    # as above with a batch each (and some without one, which meet every batch), and k ranges
    return [BatchedLUTEntry(m=WIDE, n=1024, k=SizeRange(min=2 * i, max=2 * i + 1), pin=ATEN,
                            batch=None if i % 7 == 0 else i) for i in range(1, SIZE + 1)]


@pytest.mark.parametrize("table", [_issue_table, _all_open_table, _batched_table])
def test_checking_overlaps_does_work_linear_in_entries_up_to_a_log(table, monkeypatch) -> None:
    entries = table()
    op = "bmm" if isinstance(entries[0], BatchedLUTEntry) else "mm"
    calls = {"bounds": 0, "meet": 0}

    def counted(name, function):
        def wrapper(*args):
            calls[name] += 1
            return function(*args)
        return wrapper

    # Every look at an entry's sizes and every comparison of two intervals is counted.
    monkeypatch.setattr(entries_module, "bounds", counted("bounds", entries_module.bounds))
    monkeypatch.setattr(intervals_module, "intervals_meet", counted("meet", intervals_module.intervals_meet))
    lut = lut_from_rows([("h100", op, "bfloat16", entry) for entry in entries])
    assert lut.num_entries == SIZE
    # a pairwise check makes ~SIZE**2 / 2 = 4.5 million of them
    assert calls["bounds"] + calls["meet"] < 40 * SIZE, calls


@pytest.mark.parametrize("table", [_issue_table, _all_open_table, _batched_table])
def test_one_overlapping_entry_added_to_a_large_table_is_found(table) -> None:
    entries = table()
    op = "bmm" if isinstance(entries[0], BatchedLUTEntry) else "mm"
    # for bmm, the twin has no batch: it serves every batch, the twin's own included
    twin = entries[SIZE // 2].model_copy(update={"batch": None} if op == "bmm" else {})
    rows = [("h100", op, "bfloat16", entry) for entry in [*entries, twin]]
    with pytest.raises(LUTError, match=rf"entries \[{SIZE // 2}\] \(.*\) and \[{SIZE}\] \(.*\) overlap"):
        lut_from_rows(rows)
