"""The comparison's summary: per-method ratios against stock max-autotune and eager, as a table
for the CLI, as JSON for the results file and as DataFrames for the notebook.

The kernel-time ratio to stock comes with a 95% paired-bootstrap interval over the problems
(`metrics.paired_bootstrap`): it says whether a method's kernels are faster than stock's beyond
the spread between problems, which the geomean alone does not."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from kernel_select.offline.compare.results import eager_ms_for, is_positive, succeeded
from kernel_select.offline.metrics import CONFIDENCE, RESAMPLES, PairedRatio, geomean, paired_bootstrap

#: A method counts as slower than eager when its kernel takes more than this much longer.
SLOWER_THAN_EAGER = 0.02


@dataclasses.dataclass(frozen=True)
class MethodSummary:
    """One method over the problems every method measured successfully."""

    method: str
    problems: int
    kernel_ratio_vs_stock: float  # geomean of kernel_ms / stock kernel_ms (< 1: faster kernels)
    kernel_ratio_low: float  # its 95% paired-bootstrap interval over the problems
    kernel_ratio_high: float
    tuning_ratio_vs_stock: float  # total tuning_s / stock total tuning_s (< 1: cheaper tuning)
    total_tuning_s: float
    speedup_vs_eager: float  # geomean of eager kernel_ms / kernel_ms
    slower_than_eager: int  # problems whose kernel is > SLOWER_THAN_EAGER slower than eager


@dataclasses.dataclass(frozen=True)
class Summary:
    rows: list[MethodSummary]
    problems_used: int
    problems_excluded: list[str]  # labels with a failed or missing measurement
    methods_not_run: list[str] = dataclasses.field(default_factory=list)  # no problem has a result


def summarize(results: dict[str, Any]) -> Summary:
    """Per-method aggregates over the problems where every method run succeeded and has an eager
    time (measured beside it in its own process, else by the eager method).

    A method no problem has a result for (a `--only` run that left it out) is not a failure: it is
    listed in `methods_not_run` and left out. Without stock, the ratios to stock are NaN."""
    ran = {m for p in results["problems"] for m in p["results"]}
    methods = [m for m in results["methods"] if m != "eager" and m in ran]
    not_run = [m for m in results["methods"] if m not in ran]
    used, excluded = [], []
    for problem in results["problems"]:
        # Eager is needed only where a method has no eager time measured beside it.
        ok = (all(succeeded(problem["results"].get(m)) for m in methods)
              and all(is_positive(eager_ms_for(problem, m)) for m in methods))
        (used if ok else excluded).append(problem)
    rows = []
    if used:
        has_stock = "stock" in methods
        stock_tuning = sum(p["results"]["stock"]["tuning_s"] or 0.0 for p in used) if has_stock else 0.0
        # Kernel times relative to the eager time measured beside them: ratios between methods
        # (measured in different processes) are ratios of these.
        stock_rel = ([p["results"]["stock"]["kernel_ms"] / eager_ms_for(p, "stock") for p in used]
                     if has_stock else [math.nan] * len(used))
        for method in methods:
            rel = [p["results"][method]["kernel_ms"] / eager_ms_for(p, method) for p in used]
            tuning = sum(p["results"][method]["tuning_s"] or 0.0 for p in used)
            ratio = (paired_bootstrap(np.array(rel), np.array(stock_rel)) if has_stock
                     else PairedRatio(math.nan, math.nan, math.nan, len(used)))
            rows.append(MethodSummary(
                method=method, problems=len(used), kernel_ratio_vs_stock=ratio.ratio,
                kernel_ratio_low=ratio.low, kernel_ratio_high=ratio.high,
                tuning_ratio_vs_stock=tuning / stock_tuning if stock_tuning > 0 else math.nan,
                total_tuning_s=tuning,
                speedup_vs_eager=geomean([1 / r for r in rel]),
                slower_than_eager=sum(r > 1 + SLOWER_THAN_EAGER for r in rel),
            ))
    return Summary(rows=rows, problems_used=len(used), problems_excluded=[p["label"] for p in excluded],
                   methods_not_run=not_run)


def counted(used: int, noun: str, excluded: Sequence[str], why: str) -> str:
    """The first line of a summary table: how many items it covers, and which were left out and why."""
    if not excluded:
        return f"{used} {noun}"
    return f"{used} {noun} ({len(excluded)} excluded, {why}: {', '.join(excluded)})"


def format_summary(summary: Summary) -> str:
    """A plain-text table of `summary` (ratios < 1 are better)."""
    interval = f"{CONFIDENCE:.0%} interval"
    header = (f"{'method':<18}{'kernel/stock':>14}{interval:>18}{'tuning/stock':>14}{'tuning [s]':>12}"
              f"{'vs eager':>10}{'slower than eager':>19}")
    lines = [counted(summary.problems_used, "problems", summary.problems_excluded, "a measurement failed"),
             header, "-" * len(header)]
    for row in summary.rows:
        lines.append(f"{row.method:<18}{_ratio(row.kernel_ratio_vs_stock):>14}"
                     f"{_interval(row.kernel_ratio_low, row.kernel_ratio_high):>18}"
                     f"{_ratio(row.tuning_ratio_vs_stock):>14}"
                     f"{row.total_tuning_s:>12.1f}{row.speedup_vs_eager:>9.3f}x{row.slower_than_eager:>19d}")
    if summary.methods_not_run:
        lines.append(f"not run: {', '.join(summary.methods_not_run)}")
    return "\n".join(lines)


def summary_record(summary: Summary) -> dict[str, Any]:
    """`summary` as strict JSON (a ratio without stock is null): the results file's "summary"."""
    def finite(row: MethodSummary) -> dict[str, Any]:
        return {key: None if isinstance(value, float) and not math.isfinite(value) else value
                for key, value in dataclasses.asdict(row).items()}

    return {"problems_used": summary.problems_used, "problems_excluded": summary.problems_excluded,
            "methods_not_run": summary.methods_not_run,
            "interval": {"confidence": CONFIDENCE, "resamples": RESAMPLES, "method": "paired bootstrap, BCa"},
            "methods": [finite(row) for row in summary.rows]}


def _ratio(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def _interval(low: float, high: float) -> str:
    return "-" if math.isnan(low) else f"[{low:.3f}, {high:.3f}]"


def summary_frame(results: dict[str, Any]) -> Any:
    """The summary as a pandas DataFrame indexed by method (for notebooks)."""
    import pandas as pd

    rows = [dataclasses.asdict(row) for row in summarize(results).rows]
    return pd.DataFrame(rows).set_index("method") if rows else pd.DataFrame()


def problem_frame(results: dict[str, Any]) -> Any:
    """One row per problem: sizes, eager ms, and each method's kernel ms, speedup and choice."""
    import pandas as pd

    rows = []
    for problem in results["problems"]:
        row: dict[str, Any] = {key: problem[key] for key in ("label", "m", "n", "k")}
        for method, result in problem["results"].items():
            row[f"{method} ms"] = result["kernel_ms"]
            if method != "eager":
                row[f"{method} tuning s"] = result["tuning_s"]
                row[f"{method} choice"] = result["choice"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("label")
