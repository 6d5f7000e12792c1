"""Agreement of two collections of the same problems: how far apart their timings are, and whether
they pick the same fastest config.

Two collections of one plan (one GPU and two, two machines, two days) should differ only by the
harness's noise. Per (problem, backend, config) timed finite in both, the ratio of runtime_ms (second
over first) says how far single timings move; per problem, whether the fastest Triton config of the
first is the fastest of the second says whether a model's top-1 could be judged on either, and the
second's time of the first's fastest config over its own fastest (its *regret*) how much a
disagreement costs. Two timings of the same 235 H200 problems measured this by hand: median
|log ratio| 0.9%, the first's fastest within 0.989 of the oracle in the second.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from kernel_select.errors import DatasetError
from kernel_select.offline.data.dataset import CONFIG_COLUMNS

_ROW_KEY = ["problem_id", "backend", *CONFIG_COLUMNS]


@dataclass
class Agreement:
    problems: int  # problems in both collections
    rows: int  # (problem, backend, config) rows finite in both
    median_ratio: float  # median of second / first runtime_ms over those rows
    median_abs_log_ratio: float  # median |ln(second / first)|: typical relative difference
    p90_abs_log_ratio: float
    compared: int  # problems with a finite Triton row in both
    best_matches: int  # ...whose fastest Triton config is the same in both
    best_match_share: float  # best_matches / compared
    geomean_regret: float  # geomean over problems of second's time of first's fastest / second's fastest
    worst_regret: float

    def as_json(self) -> dict:
        return asdict(self)


def _rows(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    finite = frame[np.isfinite(frame["runtime_ms"])]
    duplicated = finite.duplicated(_ROW_KEY)
    if duplicated.any():
        example = finite.loc[duplicated, "problem_id"].iloc[0]
        devices = ", ".join(sorted(finite["device_name"].astype(str).unique()))
        raise DatasetError(f"{name}: {example} has one config timed more than once (devices: {devices}); "
                           "compare files holding one collection each")
    return finite[[*_ROW_KEY, "runtime_ms"]]


def agreement(first: pd.DataFrame, second: pd.DataFrame,
              names: tuple[str, str] = ("first", "second")) -> Agreement:
    """The agreement of two dataset frames on the problems both hold (see the module docstring).

    Raises:
        DatasetError: no problem is in both, or a frame holds one config of a problem twice.
    """
    a, b = _rows(first, names[0]), _rows(second, names[1])
    both = a.merge(b, on=_ROW_KEY, suffixes=("_a", "_b"))
    if both.empty:
        raise DatasetError(f"{names[0]} and {names[1]}: no (problem, config) is timed in both; "
                           "compare two collections of the same shapes file")
    log_ratio = np.log(both["runtime_ms_b"] / both["runtime_ms_a"])
    triton = both[both["backend"] == "triton"]
    best_a = triton.loc[triton.groupby("problem_id")["runtime_ms_a"].idxmin()].set_index("problem_id")
    best_b = triton.groupby("problem_id")["runtime_ms_b"].min()
    regret = best_a["runtime_ms_b"] / best_b.reindex(best_a.index)
    same = (triton.loc[triton.groupby("problem_id")["runtime_ms_b"].idxmin()].set_index("problem_id")
            [list(CONFIG_COLUMNS)].reindex(best_a.index) == best_a[list(CONFIG_COLUMNS)]).all(axis=1)
    compared = len(best_a)
    return Agreement(
        problems=int(both["problem_id"].nunique()), rows=len(both),
        median_ratio=float(np.exp(np.median(log_ratio))),
        median_abs_log_ratio=float(np.median(np.abs(log_ratio))),
        p90_abs_log_ratio=float(np.quantile(np.abs(log_ratio), 0.9)),
        compared=compared, best_matches=int(same.sum()),
        best_match_share=float(same.mean()) if compared else math.nan,
        geomean_regret=float(np.exp(np.log(regret).mean())) if compared else math.nan,
        worst_regret=float(regret.max()) if compared else math.nan)


def report_lines(result: Agreement, names: tuple[str, str]) -> list[str]:
    """The report as `kernel-select audit FIRST --compare SECOND` prints it."""
    lines = [f"{names[1]} against {names[0]}: {result.problems} problems, {result.rows} (problem, config) "
             "rows timed in both",
             f"runtime ratio (second / first) per (problem, config): median {result.median_ratio:.4f}, "
             f"median |log ratio| {result.median_abs_log_ratio:.2%}, 90th percentile "
             f"{result.p90_abs_log_ratio:.2%}"]
    if not result.compared:
        return [*lines, "no problem has a finite Triton row in both"]
    return [*lines, f"same fastest Triton config: {result.best_matches} of {result.compared} problems "
            f"({result.best_match_share:.1%}); the first's fastest runs at geomean "
            f"{result.geomean_regret:.4f}x the second's fastest in the second "
            f"(worst {result.worst_regret:.3f}x)"]
