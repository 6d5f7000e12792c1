"""The open intervals of a sweep, and which of them meet a given interval: the data structures
behind the LUT's O(E log E) overlap check (entries.py sweeps each group of entries over m, and asks
these which open entries' k intervals meet an entering entry's).

Intervals are inclusive ranges of integers, (low, high), each held under the index of its entry
in the file; `meeting` answers the first such index, so an error names the earliest pair.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right


def intervals_meet(first: tuple[int, int], second: tuple[int, int]) -> bool:
    """Whether two inclusive intervals share a value."""
    return first[0] <= second[1] and second[0] <= first[1]


class OpenEntries:
    """The open entries of a sweep in which all entries have the same k: each meets every other."""

    def __init__(self, edges: list[int]) -> None:
        self._open: dict[int, tuple[int, int]] = {}

    def add(self, index: int, low: int, high: int) -> None:
        self._open[index] = (low, high)

    def remove(self, index: int, low: int, high: int) -> None:
        del self._open[index]

    def meeting(self, low: int, high: int) -> int | None:
        """The first (in the file) open entry, or None."""
        return min(self._open) if self._open else None


class OpenIntervals(OpenEntries):
    """The k intervals of the open entries of a sweep, and which of them meet a given interval.

    Two Fenwick trees over the group's k edges count the open intervals' lows and highs: the open
    intervals that meet [low, high] are those starting at or below `high`, less those ending below
    `low` (which all start below `high` too). Adding, removing and counting cost O(log K); only a
    count above zero, which ends the check, looks for the entry itself.
    """

    def __init__(self, edges: list[int]) -> None:
        super().__init__(edges)
        self._edges = edges
        self._lows = [0] * (len(edges) + 1)
        self._highs = [0] * (len(edges) + 1)

    def add(self, index: int, low: int, high: int) -> None:
        super().add(index, low, high)
        self._update(low, high, 1)

    def remove(self, index: int, low: int, high: int) -> None:
        super().remove(index, low, high)
        self._update(low, high, -1)

    def meeting(self, low: int, high: int) -> int | None:
        """The first (in the file) open entry whose interval meets [low, high], or None."""
        count = self._prefix(self._lows, bisect_right(self._edges, high)) - \
            self._prefix(self._highs, bisect_left(self._edges, low))
        if count == 0:
            return None
        return min(index for index, interval in self._open.items() if intervals_meet(interval, (low, high)))

    def _update(self, low: int, high: int, step: int) -> None:
        size = len(self._lows)
        for tree, edge in ((self._lows, low), (self._highs, high)):
            position = bisect_left(self._edges, edge) + 1
            while position < size:
                tree[position] += step
                position += position & -position

    @staticmethod
    def _prefix(tree: list[int], count: int) -> int:
        """The sum of the first `count` slots of a Fenwick tree."""
        total = 0
        while count > 0:
            total += tree[count]
            count -= count & -count
        return total
