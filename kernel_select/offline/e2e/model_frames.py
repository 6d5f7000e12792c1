"""A `compare-models` results file for notebooks: pandas frames and the compile-time vs step-time
plot (pandas and matplotlib are imported by the functions that need them). The ratios are
model_report's, so a frame's geomeans are the summary's.

    from kernel_select.offline.e2e import model_frames, model_report
    results = model_report.load("results/models_h100.json")
    model_frames.plot_models(results)          # a matplotlib Figure
    model_frames.table(results)                # per model and method: compile, autotune, step, ratios
    model_frames.gemm_frame(results, "gpt2-small/prefill")   # what each method's GEMMs picked
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kernel_select.errors import OptionError
from kernel_select.offline.e2e.model_report import (
    COMPILE_REFERENCES,
    TABLE_METRICS,
    compiled_methods,
    model_metrics,
    relative_step,
    step_ratio,
    succeeded,
    summarize,
)


def table(results: dict[str, Any]) -> Any:
    """One row per model, a column group per method (TABLE_METRICS, from `model_metrics`, so the
    ratios' geomeans are the summary's). NaN where the method (or the reference) failed or was
    not run."""
    import pandas as pd

    methods = compiled_methods(results)
    rows = {entry["name"]: {(method, metric): value
                            for method, values in model_metrics(entry, methods).items()
                            for metric, value in values.items()}
            for entry in results["models"]}
    columns = pd.MultiIndex.from_product([methods, TABLE_METRICS], names=["method", "metric"])
    frame = pd.DataFrame(list(rows.values()), index=pd.Index(list(rows), name="model"), columns=columns)
    return frame.astype(float)


def gemm_frame(results: dict[str, Any], model: str) -> Any:
    """The GEMMs of `model` Inductor autotuned: one row per (op, shapes), `count` = how many the
    network has (identical layers share a row), and per method what won. A cell lists
    'choice ×n' when that method's instances did not all pick one winner, or it has fewer of them.
    Methods that autotuned nothing (mode="default", a failed run) get no column.

    Raises:
        OptionError: `model` is not in the results.
    """
    import pandas as pd

    entry = next((e for e in results["models"] if e["name"] == model), None)
    if entry is None:
        raise OptionError(f"no model {model!r} in the results; they hold "
                          f"{', '.join(e['name'] for e in results['models']) or 'none'}")
    winners: dict[tuple[str, str], dict[str, Counter[str]]] = {}
    for method, result in entry["results"].items():
        for gemm in result.get("gemms") or []:
            key = (gemm["op"], str(gemm["shapes"]))
            winners.setdefault(key, {}).setdefault(method, Counter())[gemm["choice"]] += 1
    rows = []
    for (op, shapes), by_method in winners.items():
        count = max(sum(choices.values()) for choices in by_method.values())
        rows.append({"op": op, "shapes": shapes, "count": count,
                     **{method: _winners_cell(choices, count) for method, choices in by_method.items()}})
    methods = [m for m in results["methods"] if any(m in row for row in rows)]
    return pd.DataFrame(rows, columns=["op", "shapes", "count", *methods])


def _winners_cell(choices: Counter[str], count: int) -> str:
    if len(choices) == 1 and sum(choices.values()) == count:
        return next(iter(choices))
    return ", ".join(f"{choice} ×{n}" for choice, n in choices.most_common())


#: How the plot names each reference it may divide by.
_PLOT_REFERENCE_NAMES = {"stock-gemm": "stock-gemm", "stock": "stock max-autotune"}


def plot_models(results: dict[str, Any], path: str | Path | None = None) -> Any:
    """Compile time (x, log) against step time (y) relative to stock-gemm's on the same model
    (stock max-autotune's where the results have no stock-gemm; eager's, timed in the same
    process, where neither was measured everywhere): a small point per model and method, a large
    one per method at its total compile time and geomean. Needs matplotlib."""
    from matplotlib.figure import Figure  # no pyplot: no global state, works headless
    from matplotlib.ticker import FuncFormatter

    summary = summarize(results)
    versus = next((r for r in summary.references if r in COMPILE_REFERENCES
                   and summary.rows and all(r in row.step_vs for row in summary.rows)), None)
    reference = _PLOT_REFERENCE_NAMES[versus] if versus else "eager"

    def relative(entry: dict[str, Any], result: dict[str, Any]) -> float | None:
        if versus is None:
            return relative_step(result)
        base = entry["results"].get(versus)
        return step_ratio(result, base) if succeeded(base) else None

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    colors = dict(zip([r.method for r in summary.rows], _palette()))
    for entry in results["models"]:
        for method, color in colors.items():
            result = entry["results"].get(method)
            y = relative(entry, result) if succeeded(result) and result["compile_s"] > 0 else None
            if y is not None:
                ax.plot(result["compile_s"], y, ".", color=color, alpha=0.4)
    for row in summary.rows:
        if row.compile_s > 0:
            y = row.step_vs[versus] if versus else 1 / row.speedup_vs_eager
            ax.plot(row.compile_s, y, "o", color=colors[row.method], markersize=9,
                    label=f"{row.method} (total over {row.models} models)")
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1, label=reference)
    ax.set_xscale("log")
    ax.set_yscale("log")  # ratios: 2x slower and 2x faster sit equally far from the line
    plain = FuncFormatter(lambda value, _: f"{value:g}")  # "1.5", not "1.5 x 10^0"
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    env = results.get("environment", {})
    ax.set_xlabel("compile time [s] (cold caches; totals for the large markers)")
    ax.set_ylabel(f"step time / {reference}'s (geomean for the large markers)")
    ax.set_title(f"Compile time vs step time -- {env.get('device', '?')}, torch {env.get('torch', '?')}",
                 fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    if path is not None:
        fig.savefig(path, dpi=150)
    return fig


def _palette() -> list[str]:
    return ["tab:green", "tab:orange", "tab:blue", "tab:purple", "tab:red", "tab:brown", "tab:pink",
            "tab:olive", "tab:cyan"]
