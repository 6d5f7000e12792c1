"""Audit of a measured dataset: single-sample timings too slow to be the kernel's own.

The harness times most configs of a problem once (status "capped"). If the host stalled while the
GPU waited on it inside a timed interval, that one sample holds the stall, and nothing in the row
says so. Configs sharing an output tile (block_m, block_n) launch the same CTAs and move about the
same bytes; BLOCK_K, stages, warps and GROUP_M change the time, but on the committed H100 data no
config measured six times ("ok") has a minimum more than 4.7x the fastest config of its tile, while
single samples reach 3,000x. A capped row more than SUSPECT_RATIO times its tile's fastest time is
flagged.

This only reads a frame; the harness (`kernel_select.offline.harness.bench`) uses the same rule to
re-time such samples while it collects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

#: A single sample more than this many times the fastest time of its problem's configs with the same
#: (block_m, block_n) gets a second opinion (harness) or is flagged (audit). Above the honest spread
#: within a tile (4.7x at most, measured on six-run minima), far below the stalls (up to 3,000x); it
#: flags 1.7% and 3.1% of the two committed files' capped rows: second opinions cost few runs.
SUSPECT_RATIO = 8.0

_TILE = ["problem_id", "device_name", "block_m", "block_n"]
#: What `timing_method` says of rows whose harness re-timed suspect samples (bench.TIMING_METHOD):
#: a flagged row that carries it was timed twice and both samples were slow.
SECOND_OPINION = "a second run for single samples"
#: What `timing_method` says of rows `bench --literal-sizes` timed: binaries with M, N and K compiled in,
#: as Inductor's own kernels have them (harness/bench_plan.py), rather than shared across shapes.
#: `dataset.read_many` reads such rows in place of a problem's shared-binary ones.
LITERAL_SIZES = "sizes compiled in as literals"


def timed_with_literal_sizes(df: pd.DataFrame) -> np.ndarray:
    """Per row, whether `bench --literal-sizes` timed it (`LITERAL_SIZES` in its timing_method)."""
    return df["timing_method"].astype(str).str.contains(LITERAL_SIZES, regex=False).to_numpy()


def kept_rows(frames: Sequence[pd.DataFrame]) -> list[np.ndarray]:
    """Per frame (dataset files in reading order), a mask of the rows `dataset.read_many` keeps: a
    (problem, device) in several frames keeps the rows of the last that has it, except that literal-size
    rows rank above every shared-binary row whatever the order (the rule lives beside LITERAL_SIZES)."""
    sizes = [len(frame) for frame in frames]
    # A row's rank: its file's position, lifted above every file for literal-size rows (one bench
    # run times a whole problem, so all the rows of a problem in one file rank alike).
    rank = np.repeat(np.arange(len(frames)), sizes)
    rank = rank + len(frames) * np.concatenate([timed_with_literal_sizes(f) for f in frames])
    # (problem, device) keys as integer codes: sets of millions of key strings took seconds to build
    keys, distinct = pd.factorize(pd.concat([f["problem_id"] + "|" + f["device_name"] for f in frames],
                                            ignore_index=True))
    best = np.zeros(len(distinct), dtype=np.int64)
    np.maximum.at(best, keys, rank)
    return np.split(rank == best[keys], np.cumsum(sizes)[:-1])


@dataclass
class AuditCounts:
    """Counts for one dtype (or all) of one file."""

    rows: int
    capped_rows: int
    suspect_rows: int
    problems: int
    problems_affected: int
    worst_ratio: float  # largest runtime / tile's fastest among the suspect rows (0 when none)


def tile_ratio(df: pd.DataFrame) -> pd.Series:
    """Each finite Triton row's runtime_ms over the fastest runtime_min_ms of its problem's Triton
    configs with the same output tile on the same device; NaN for cuBLAS and failed rows."""
    triton = (df["backend"] == "triton") & np.isfinite(df["runtime_ms"])
    rows = df[triton]
    fastest = rows.groupby(_TILE, observed=True)["runtime_min_ms"].transform("min")
    return (rows["runtime_ms"] / fastest).reindex(df.index)


def suspect_rows(df: pd.DataFrame, ratio: float = SUSPECT_RATIO) -> pd.Series:
    """Boolean mask: capped single-sample Triton rows more than `ratio` times their tile's fastest."""
    single = (df["status"] == "capped") & (df["n_runs"] == 1)
    return single & (tile_ratio(df) > ratio).fillna(False)


def unconfirmed_suspects(df: pd.DataFrame, ratio: float = SUSPECT_RATIO) -> pd.Series:
    """Boolean mask: the suspect rows (`suspect_rows`) whose harness took no second opinion, the
    single samples of the older files that may hold a host stall (data/README.md, "Timing quality")."""
    confirmed = df["timing_method"].astype(str).str.contains(SECOND_OPINION, regex=False)
    return suspect_rows(df, ratio) & ~confirmed


def audit(df: pd.DataFrame, ratio: float = SUSPECT_RATIO) -> dict[str, AuditCounts]:
    """Counts per dtype and over all rows ("all")."""
    ratios = tile_ratio(df)
    suspect = suspect_rows(df, ratio)
    out = {}
    for name in [*sorted(df["dtype"].unique()), "all"]:
        mine = df["dtype"] == name if name != "all" else pd.Series(True, index=df.index)
        hit = mine & suspect
        out[str(name)] = AuditCounts(
            rows=int(mine.sum()), capped_rows=int((mine & (df["status"] == "capped")).sum()),
            suspect_rows=int(hit.sum()), problems=int(df.loc[mine, "problem_id"].nunique()),
            problems_affected=int(df.loc[hit, "problem_id"].nunique()),
            worst_ratio=float(ratios[hit].max()) if hit.any() else 0.0)
    return out


def as_json(counts: dict[str, AuditCounts]) -> dict[str, dict]:
    return {name: asdict(c) for name, c in counts.items()}
