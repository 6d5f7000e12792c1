"""What each GPU of a collection did, and the run's throughput lines built from it.

Throughput is rows over the run's whole wall time (planning and compile included), as every
collection in data/README.md reports it: per GPU that is the GPU's rows per minute of the run, and
"per GPU-minute" for the run is all rows over wall minutes times GPUs. A GPU's `wait_s` is the time
it sat with nothing to time because the kernels of the next problem were not compiled yet.
"""

from __future__ import annotations

import re
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


#: The two lines above as they appear in a bench log (the one-GPU driver logs the run line in its own
#: words: "N problems, R rows in W s wall (compile included; K kernels compiled on P workers)").
_RUN_LINE = re.compile(r"(?P<problems>\d+) problems, (?P<rows>\d+) rows in (?P<wall>[\d.]+) s wall "
                       r"\(compile included; (?P<kernels>\d+) kernels compiled on (?P<workers>\d+) workers\)")
_GPU_LINE = re.compile(r"GPU (?P<gpu>\d+): (?P<problems>\d+) problems, (?P<rows>\d+) rows, "
                       r"(?P<rate>\d+) rows per GPU-minute, busy (?P<busy>[\d.]+) s, "
                       r"waited (?P<waited>[\d.]+) s")


def run_summary(log_text: str) -> dict | None:
    """A bench log's closing figures, the run's and each GPU's, read back from the lines above
    (None if the log has no run line: the run did not finish). For results scripts that compare
    collections from their logs."""
    run = _RUN_LINE.search(log_text)
    if run is None:
        return None
    wall, rows = float(run["wall"]), int(run["rows"])
    gpus = [{"gpu": int(m["gpu"]), "problems": int(m["problems"]), "rows": int(m["rows"]),
             "rows_per_gpu_minute": int(m["rate"]), "busy_s": float(m["busy"]),
             "waited_for_kernels_s": float(m["waited"])} for m in _GPU_LINE.finditer(log_text)]
    return {"problems": int(run["problems"]), "rows": rows, "wall_s": wall, "kernels": int(run["kernels"]),
            "compile_workers": int(run["workers"]), "rows_per_minute": round(rows_per_minute(rows, wall)),
            "rows_per_gpu_minute": round(rows_per_minute(rows, wall) / max(len(gpus), 1)), "gpus": gpus}
