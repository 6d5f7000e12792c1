"""The open-interval structures behind the LUT's overlap check (kernel_select.lut.intervals), against a
brute-force scan over the same open intervals: any sequence of adds, removes and queries."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kernel_select.lut.intervals import OpenEntries, OpenIntervals, intervals_meet

EDGE = st.integers(min_value=1, max_value=12)
INTERVAL = st.tuples(EDGE, EDGE).map(sorted).map(tuple)


@given(st.lists(st.tuples(st.booleans(), INTERVAL, INTERVAL), max_size=30))
def test_the_first_open_interval_meeting_a_query_is_the_one_a_scan_finds(steps) -> None:
    """Each step opens an interval (or closes the oldest open one), then asks which open interval
    meets the query; the edges are every value an interval may start or end at, as the sweep
    builds them."""
    edges = sorted({edge for _, opened, query in steps for edge in (*opened, *query)})
    structure = OpenIntervals(edges)
    scanned: dict[int, tuple[int, int]] = {}
    for index, (close_oldest, opened, query) in enumerate(steps):
        if close_oldest and scanned:
            oldest = min(scanned)
            structure.remove(oldest, *scanned.pop(oldest))
        else:
            structure.add(index, *opened)
            scanned[index] = opened
        expected = min((i for i, held in scanned.items() if intervals_meet(held, query)), default=None)
        assert structure.meeting(*query) == expected


def test_intervals_that_share_only_an_end_meet_and_disjoint_ones_do_not() -> None:
    assert intervals_meet((1, 4), (4, 9)) and intervals_meet((4, 9), (1, 4))
    assert not intervals_meet((1, 3), (4, 9))


def test_open_entries_of_one_size_all_meet_the_first_in_the_file_answers() -> None:
    entries = OpenEntries([5])
    assert entries.meeting(5, 5) is None
    entries.add(7, 5, 5)
    entries.add(2, 5, 5)
    assert entries.meeting(5, 5) == 2
    entries.remove(2, 5, 5)
    assert entries.meeting(5, 5) == 7
