"""The strategies `kernel-select shapes --active` chooses problems by (offline/data/plans/active.py).

A module of its own, free of numpy, pandas and tqdm, because the command line lists these choices
when it builds its parser, and `kernel-select --help` must work on a core install.
"""

from __future__ import annotations

from typing import Literal

Strategy = Literal["disagreement", "random"]
STRATEGIES: tuple[str, ...] = ("disagreement", "random")
#: The strategy the next collection uses: the winner of the retrospective experiment
#: (offline/training/active_experiment.py; docs/results.md, "Choosing the next collection").
DEFAULT_STRATEGY: Strategy = "random"
