"""Length buckets: which range of a dynamic length one compiled graph serves.

A pinned LUT can name one kernel per range of a sequence length (its entries' m or k ranges).
Inductor compiles one kernel per GEMM per graph, so serving each range its own pin takes one graph
per range: the length is marked dynamic with the bucket's bounds (kernel_select.inductor.bucketed)
and Dynamo's guards send each length to its bucket's graph.

Buckets are given by their edges, the lengths at which a bucket begins: edges (560, 1024, 8193)
make the buckets 2..559, 560..1023, 1024..8192 and 8193 and above. Sizes 0 and 1 belong to no
bucket: Dynamo specializes them whatever is marked. Pure arithmetic, no torch.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Sequence

from kernel_select.errors import OptionError

#: The smallest size a dynamic dimension takes: Dynamo specializes 0 and 1.
MIN_DYNAMIC = 2


@dataclasses.dataclass(frozen=True)
class Bucket:
    """The lengths low..high (inclusive; high None: no upper bound) that one graph serves."""

    low: int
    high: int | None

    def __contains__(self, size: object) -> bool:
        return isinstance(size, int) and self.low <= size and (self.high is None or size <= self.high)

    @property
    def bounded(self) -> bool:
        """Whether both ends come from edges (neither the first nor the last bucket)."""
        return self.low > MIN_DYNAMIC and self.high is not None

    def middle(self) -> int:
        """The geometric middle of a bounded bucket (the length a graph for it is tuned at).

        Raises:
            ValueError: for a bucket without an upper bound.
        """
        if self.high is None:
            raise ValueError(f"bucket {self}: no upper bound, no middle")
        return min(self.high, max(self.low, round(math.sqrt(self.low * self.high))))

    def __str__(self) -> str:
        return f"{self.low}..{self.high}" if self.high is not None else f"{self.low}.."


def check_edges(edges: Iterable[int], *, source: str = "bucket edges") -> tuple[int, ...]:
    """`edges` sorted, without repeats, each an int >= MIN_DYNAMIC + 1 (an edge at 2 or below would
    leave the first bucket empty).

    Raises:
        OptionError: naming `source`, for anything else.
    """
    values = list(edges)
    if any(isinstance(e, bool) or not isinstance(e, int) or e <= MIN_DYNAMIC for e in values):
        raise OptionError(f"{source}: expected lengths above {MIN_DYNAMIC} where a bucket begins, "
                          f"got {values!r}")
    return tuple(sorted(set(values)))


def buckets(edges: Sequence[int]) -> tuple[Bucket, ...]:
    """Every bucket the (checked) `edges` make, from MIN_DYNAMIC up; () edges make one bucket."""
    starts = [MIN_DYNAMIC, *edges]
    ends: list[int | None] = [edge - 1 for edge in edges] + [None]
    return tuple(Bucket(low, high) for low, high in zip(starts, ends))


def bucket_of(edges: Sequence[int], size: int) -> Bucket | None:
    """The bucket of `size` (None for 0 and 1, which Dynamo specializes)."""
    if size < MIN_DYNAMIC:
        return None
    for bucket in buckets(edges):
        if size in bucket:
            return bucket
    raise AssertionError(f"{size} lies in no bucket of {edges}")  # the last bucket has no upper bound


def edges_of_ranges(ranges: Iterable[tuple[int, int]]) -> tuple[int, ...]:
    """The edges that give every inclusive range (low, high) buckets of its own: each range begins
    a bucket at its low end and ends one before high + 1, so lengths outside every range fall into
    buckets of their own too."""
    edges = {edge for low, high in ranges if low < high for edge in (low, high + 1)}
    return tuple(sorted(edge for edge in edges if edge > MIN_DYNAMIC))
