"""How `kernel-select calibrate` spends its minutes, and the one progress bar over the whole run.

The minutes are split, in this order, between planning (the plan is computed on the CPU), collecting
(a hard bound: the harness's max_seconds), training the networks (a hard bound too: train.TimeLimit)
and what follows training (the cuBLAS time head and gate, the held-out scores, writing the folder),
whose length is estimated, not bounded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kernel_select.errors import OptionError

#: The minutes calibrate takes unless told: every compile class of the plan with 15 compile workers.
DEFAULT_MINUTES = 15.0
#: Seconds kept for planning before collection starts (the plan itself takes 3-15 s of one core).
PLANNING_S = 15.0
#: The networks' share of the minutes, within these bounds. Measured on an H200 host (16 cores), 120
#: epochs of four fine-tuned members took 28 s on the rows of 173 training problems: about 0.34 ms per
#: epoch, member and problem, so the 15-minute plan's ~575 training problems take ~95 s. A share of 0.2
#: left a 5-minute run idle for a third of its minutes (finished in 199 s); the time limit stops a
#: slower host's training at its best epoch so far, and the collection gets the rest.
TRAINING_SHARE = 0.12
MIN_TRAINING_S = 30.0
MAX_TRAINING_S = 300.0
#: After the networks: the cuBLAS head and gate (1,500 full-batch epochs each), the auto-k rule,
#: the scores on the held-out problems and the files (4 s on that host after the 5-minute run).
AFTER_TRAINING_S = 15.0
#: The fewest minutes that leave any time to collect.
MIN_MINUTES = (PLANNING_S + MIN_TRAINING_S + AFTER_TRAINING_S + 30.0) / 60.0


@dataclass(frozen=True)
class Budget:
    """The run's minutes from `started` (time.perf_counter()), split into phases."""

    total_s: float
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        if not self.total_s >= MIN_MINUTES * 60.0:  # also NaN
            raise OptionError(f"calibrate: --max-seconds {self.total_s:g} leaves no time to measure; give "
                              f"at least {MIN_MINUTES * 60:.0f} (900 cover every stratum on 16 cores)")

    @property
    def training_s(self) -> float:
        return min(max(TRAINING_SHARE * self.total_s, MIN_TRAINING_S), MAX_TRAINING_S)

    @property
    def collection_s(self) -> float:
        """What the plan may take, compile included."""
        return self.total_s - PLANNING_S - self.training_s - AFTER_TRAINING_S

    @property
    def collection_deadline(self) -> float:
        return self.started + PLANNING_S + self.collection_s

    @property
    def training_deadline(self) -> float:
        return self.started + self.total_s - AFTER_TRAINING_S

    def seconds_until(self, deadline: float) -> float:
        return max(deadline - time.perf_counter(), 0.0)


class RunProgress:
    """One bar over the whole run, counted in predicted seconds: each problem timed moves it by the
    time cost.py predicted for that problem, each training epoch by its share of the training time,
    so its rate and ETA say how the run is going against the plan. Phase lines print above it."""

    def __init__(self, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=0, unit="s", desc="calibrate", disable=not enabled, dynamic_ncols=True,
                        bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.0f}/{total:.0f} planned s "
                                   "[{elapsed}<{remaining}]")
        self.enabled = enabled
        self.mark = 0.0  # where the current phase ends on the bar

    def plan(self, seconds: float) -> None:
        """The run's predicted length: the bar's total."""
        self.bar.total = max(seconds, 1.0)
        self.bar.refresh()

    def phase(self, line: str, seconds: float) -> None:
        """Start a phase of `seconds` on the bar (the previous one ends where it was to end)."""
        self.advance_to(self.mark)
        self.mark += seconds
        self.say(line)

    def advance(self, seconds: float) -> None:
        self.advance_to(min(self.bar.n + seconds, self.mark))

    def advance_to(self, position: float) -> None:
        if position > self.bar.n:
            self.bar.update(position - self.bar.n)

    def say(self, line: str) -> None:
        """A line above the bar (on stderr), whether or not the bar is shown."""
        import sys

        if self.enabled:
            self.bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr)

    def close(self) -> None:
        self.advance_to(self.bar.total or 0.0)
        self.bar.close()
