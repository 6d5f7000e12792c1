"""Length buckets from measurements: where the best choice of some GEMM changes (pure, CPU).

pretune times every GEMM of a model at a set of lengths (each GEMM's candidates and ATen). The
model's graph is compiled once per bucket (kernel_select.inductor.bucketed), so all its GEMMs
share the bucket edges, and every bucket costs a compile: the fewest buckets that serve every
GEMM well are wanted.

`segment` splits the measured lengths, in order, into the fewest runs such that within each run
every GEMM has one choice within `tolerance` of its best at every length of the run (greedy from
the shortest length: a run is extended while that holds, which gives the fewest runs, since a
part of a run that holds holds too). Between two runs lies a crossover: some GEMM's choices of the
left run fall out of tolerance before the right run's begin. pretune then times the geometric
middle of each gap (`gaps`, `middle`) and segments again, so the edge (`edge`, the middle of the
remaining gap) lands near the measured crossover rather than on a grid point.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kernel_select.configs import GemmConfig
from kernel_select.lut import ATEN

#: How far from a length's best a bucket's pin may be, as measured by Inductor's benchmark: under
#: the serving targets' 3%, with room for the benchmark's noise.
DEFAULT_TOLERANCE = 0.02
#: Rounds of timing the middle of every gap between buckets.
DEFAULT_REFINE = 2

Timings = dict[str, float]  # choice label ("aten" or GemmConfig.short()) -> ms at one length
Measured = dict[int, Timings]  # length -> timings, of one GEMM


def label_of(kind: str, config: GemmConfig | None) -> str | None:
    """The label a timing gets in `Timings`: "aten", a Triton config's short form, or None (a
    choice a LUT cannot name: decompose-K, a persistent-TMA template)."""
    if kind == "extern":
        return ATEN
    return config.short() if kind == "triton" and config is not None else None


def best_ms(timings: Timings) -> float:
    """The fastest finite time of one measurement (inf when nothing ran)."""
    return min((ms for ms in timings.values() if math.isfinite(ms)), default=math.inf)


def fitting(measured: Measured, lengths: Sequence[int], tolerance: float) -> list[str]:
    """The labels timed at every one of `lengths` within (1 + tolerance) x that length's best,
    smallest geometric-mean ratio first (ties by label)."""
    if not lengths:
        return []
    log_ratio = {label: 0.0 for label, ms in measured[lengths[0]].items() if math.isfinite(ms)}
    for length in lengths:
        timings = measured[length]
        best = best_ms(timings)
        for label in list(log_ratio):
            ms = timings.get(label, math.inf)
            if math.isfinite(ms) and ms <= best * (1 + tolerance):
                log_ratio[label] += math.log(ms / best)
            else:
                del log_ratio[label]
    return sorted(log_ratio, key=lambda label: (log_ratio[label], label))


def segment(sites: Sequence[Measured], lengths: Sequence[int], tolerance: float) -> list[tuple[int, ...]]:
    """`lengths` (ascending, measured for every site) split into the fewest runs in which every
    site has a fitting label (module doc)."""
    runs: list[tuple[int, ...]] = []
    start = 0
    while start < len(lengths):
        end = start + 1
        while end < len(lengths) and all(fitting(site, lengths[start:end + 1], tolerance) for site in sites):
            end += 1
        runs.append(tuple(lengths[start:end]))
        start = end
    return runs


def gaps(runs: Sequence[tuple[int, ...]]) -> list[tuple[int, int]]:
    """(last length of a run, first length of the next), for every boundary between runs."""
    return [(left[-1], right[0]) for left, right in zip(runs, runs[1:])]


def middle(low: int, high: int) -> int | None:
    """The geometric middle of low..high rounded, strictly inside; None where no length is."""
    value = round(math.sqrt(low * high))
    value = min(high - 1, max(low + 1, value))
    return value if low < value < high else None


def edge(low: int, high: int) -> int:
    """Where the bucket after a gap begins: the geometric middle of the gap, in low+1..high."""
    return min(high, max(low + 1, math.ceil(math.sqrt(low * high))))
