"""What each GPU of a collection did, and the run's throughput lines built from it.

Throughput is rows over the run's whole wall time (planning and compile included), as every
collection in data/README.md reports it: per GPU that is the GPU's rows per minute of the run, and
"per GPU-minute" for the run is all rows over wall minutes times GPUs. A GPU's `wait_s` is the time
it sat with nothing to time because the kernels of the next problem were not compiled yet.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class GpuTally:
    gpu: int  # CUDA index on the host
    problems: int = 0
    rows: int = 0
    busy_s: float = 0.0  # timing problems (operands, reference, passes, rows)
    wait_s: float = 0.0  # waiting for the next problem's kernels
    stopped_at_bound: bool = False  # stopped before the plan's end by --max-seconds

    def add_problem(self, rows: int, seconds: float) -> None:
        self.problems += 1
        self.rows += rows
        self.busy_s += seconds


def rows_per_minute(rows: int, wall_s: float) -> float:
    return 60.0 * rows / max(wall_s, 1e-9)


def gpu_line(tally: GpuTally, wall_s: float) -> str:
    """One GPU's share: problems, rows, rows per GPU-minute, time busy and time waiting."""
    bound = "; stopped at the --max-seconds bound" if tally.stopped_at_bound else ""
    return (f"GPU {tally.gpu}: {tally.problems} problems, {tally.rows} rows, "
            f"{rows_per_minute(tally.rows, wall_s):.0f} rows per GPU-minute, busy {tally.busy_s:.1f} s, "
            f"waited {tally.wait_s:.1f} s for compiled kernels{bound}")


def run_line(tallies: Sequence[GpuTally], wall_s: float, compiled: int, workers: int) -> str:
    """The whole run: rows per minute of wall time on all GPUs and per GPU-minute."""
    problems = sum(t.problems for t in tallies)
    rows = sum(t.rows for t in tallies)
    per_minute = rows_per_minute(rows, wall_s)
    return (f"{len(tallies)} GPU{'s' if len(tallies) != 1 else ''}: {problems} problems, {rows} rows in "
            f"{wall_s:.1f} s wall (compile included; {compiled} kernels compiled on {workers} workers): "
            f"{per_minute:.0f} rows per minute, {per_minute / max(len(tallies), 1):.0f} per GPU-minute")
