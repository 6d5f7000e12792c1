"""The comparison's trade-off plot: tuning time against kernel speed, one point per method."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kernel_select.offline.compare.summary import summarize

def plot_tradeoff(results: dict[str, Any], path: str | Path | None = None) -> Any:
    """Total tuning seconds (x) against geomean speedup over eager (y), one point per method.

    Returns the matplotlib Figure; also saves it to `path` when given. Needs matplotlib.
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, works headless

    summary = summarize(results)
    rows = {row.method: row for row in summary.rows}
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.add_subplot()
    series = ((r"topk-(\w+)", ("o-", "tab:blue"), "kernel_select top-k"),
              (r"topk-(\w+)-nogate", ("^:", "tab:green"), "kernel_select top-k, cuBLAS gate off"),
              (r"topk-(\w+)-repeat", ("x", "tab:purple"), "kernel_select top-k, repeated run"))
    for pattern, style, label in series:
        points = [(re.fullmatch(pattern, m).group(1), rows[m]) for m in results["methods"]
                  if m in rows and re.fullmatch(pattern, m)]
        if not points:
            continue
        ax.plot([r.total_tuning_s for _, r in points], [r.speedup_vs_eager for _, r in points], style[0],
                color=style[1], label=label)
        for k, row in points:
            ax.annotate(f"k={k}", (row.total_tuning_s, row.speedup_vs_eager), textcoords="offset points",
                        xytext=(6, 4), fontsize=9)
    for name, style, label in (("stock", ("s", "tab:orange"), "stock max-autotune (DEFAULT)"),
                               ("stock-exhaustive", ("D", "tab:red"), "stock max-autotune (EXHAUSTIVE)")):
        if name in rows:
            ax.plot([rows[name].total_tuning_s], [rows[name].speedup_vs_eager], style[0], color=style[1],
                    markersize=9, label=label)
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label="eager (cuBLAS)")
    tunings = [r.total_tuning_s for r in summary.rows if r.total_tuning_s > 0]
    if tunings and max(tunings) / min(tunings) > 20:
        ax.set_xscale("log")
    env = results.get("environment", {})
    ax.set_xlabel(f"total tuning time over {summary.problems_used} problems [s]")
    ax.set_ylabel("geomean kernel speedup over eager")
    ax.set_title(f"Tuning cost vs kernel speed -- {env.get('device', 'unknown device')}, "
                 f"torch {env.get('torch', '?')}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if path is not None:
        fig.savefig(path, dpi=150)
    return fig
