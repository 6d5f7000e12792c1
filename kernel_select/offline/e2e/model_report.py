"""Reading a `compare-models` results file: per-run aggregation, the summary table, frames for
notebooks and the compile-time vs step-time plot. Plain Python; pandas and matplotlib are
imported only by the functions that need them.

    from kernel_select.offline.e2e import model_report
    results = model_report.load("results/models_h100.json")
    print(model_report.format_summary(model_report.summarize(results)))
    model_report.plot_models(results)          # a matplotlib Figure
    model_report.table(results)                # per model and method: compile, step, ratios
    model_report.gemm_frame(results, "gpt2-small/prefill")   # what each method's GEMMs picked
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel_select.errors import OptionError
from kernel_select.offline.compare.summary import counted
from kernel_select.offline.metrics import geomean

#: A step counts as slower than eager (or than another method) beyond this fraction.
SLOWER_BY = 0.02
RESULT_FIELDS = ("compile_s", "step_ms", "eager_step_ms", "speedup_vs_eager", "compile_spread", "step_spread",
                 "ratio_spread", "step_device_ms", "eager_device_ms", "device_spread", "host_ref_ms",
                 "host_spread", "choices_stable", "pretune_s", "gemms", "error", "runs")
#: The GPU's view of a step (model_worker.device_times); runs from before it was measured lack it.
DEVICE_FIELDS = ("step_device_ms", "eager_device_ms")


def load(path: str | Path) -> dict[str, Any]:
    from kernel_select.offline.e2e.compare_models import load_results

    return load_results(path)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One (model, method)'s entry from its runs: medians of the good runs, their spread, and
    the last error when no run succeeded."""
    good = [r for r in runs if r.get("error") is None]
    result: dict[str, Any] = dict.fromkeys(RESULT_FIELDS)
    result["runs"] = runs
    if not good:
        result["error"] = runs[-1].get("error", "no run") if runs else "not measured"
        result["gemms"] = []
        return result
    for key in ("compile_s", "step_ms", "eager_step_ms"):
        result[key] = statistics.median(r[key] for r in good)
    result["speedup_vs_eager"] = statistics.median(r["eager_step_ms"] / r["step_ms"] for r in good)
    result["gemms"] = good[0].get("gemms", [])
    on_device = [r for r in good if r.get("step_device_ms") is not None]
    for key in DEVICE_FIELDS:
        result[key] = statistics.median(r[key] for r in on_device) if on_device else None
    if len(on_device) > 1:
        result["device_spread"] = _spread([r["step_device_ms"] for r in on_device])
    # The host's own speed while the step was timed (step_timing.host_reference); older runs lack it.
    host = [r["host_ref_ms"] for r in good if r.get("host_ref_ms") is not None]
    result["host_ref_ms"] = statistics.median(host) if host else None
    if len(host) > 1:
        result["host_spread"] = _spread(host)
    # Only a pretuned method's runs carry it: what making the workload's pinned LUT took.
    pretune_s = [r["pretune_s"] for r in good if r.get("pretune_s") is not None]
    result["pretune_s"] = statistics.median(pretune_s) if pretune_s else None
    if len(good) > 1:
        result["compile_spread"] = _spread([r["compile_s"] for r in good])
        result["step_spread"] = _spread([r["step_ms"] for r in good])
        result["ratio_spread"] = _spread([r["step_ms"] / r["eager_step_ms"] for r in good])
        result["choices_stable"] = all(_choices(r) == _choices(good[0]) for r in good)
    return result


def _largest(values: Sequence[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)


def _spread(values: Sequence[float]) -> float | None:
    median = statistics.median(values)
    return (max(values) - min(values)) / median if median > 0 else None


def _choices(run: dict[str, Any]) -> list[Any]:
    return [(g.get("op"), g.get("shapes"), g.get("choice")) for g in run.get("gemms", [])]


def succeeded(result: dict[str, Any] | None) -> bool:
    return bool(result) and result.get("error") is None and (result.get("step_ms") or 0) > 0


def relative_step(result: dict[str, Any]) -> float:
    """Step time over the eager step timed in the same process (the speedup over eager, inverted)."""
    return result["step_ms"] / result["eager_step_ms"]


def step_ratio(result: dict[str, Any], reference: dict[str, Any]) -> float:
    """One method's step time over another's, each from its own process. Not normalized by each
    process's eager step: on the H100 that eager step was systematically slower in processes that
    had compiled with max-autotune (8-25%, docs/inductor.md), so dividing by it would credit
    max-autotune with the slowdown of its own eager baseline."""
    return result["step_ms"] / reference["step_ms"]


def compiled_methods(results: dict[str, Any]) -> list[str]:
    """The compared methods, in the file's order; eager is every method's reference, not one of them."""
    return [m for m in results["methods"] if m != "eager"]


# -- summary -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MethodRow:
    """One method over the models where it and the references (stock, default) all succeeded."""

    method: str
    models: int
    compile_s: float  # total over the models
    compile_vs_stock: float | None  # geomean over models of compile_s / stock's
    worst_compile_vs_stock: float | None  # the largest per-model ratio
    step_vs_stock: float | None  # geomean over models of step_ms / stock's step_ms
    step_vs_default: float | None  # the same against mode="default"
    speedup_vs_eager: float  # geomean of eager / step
    slower_than_eager: int  # models whose step is more than SLOWER_BY slower than eager
    max_step_spread: float | None  # the largest run-to-run spread of step_ms (repeated runs)
    max_device_spread: float | None = None  # the same for step_device_ms
    max_host_spread: float | None = None  # the same for host_ref_ms: how much the host's speed moved
    device_vs_stock: float | None = None  # geomean of step_device_ms / stock's over `device_models`
    device_models: int = 0  # the models where both have a device time
    model_names: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Summary:
    rows: list[MethodRow]
    models_used: list[str]  # models at least one row uses
    models_excluded: list[str]  # a reference (stock or default) failed or is missing there


#: The methods every other one is compared with, where the results have them.
REFERENCES = ("stock", "default")


def summarize(results: dict[str, Any]) -> Summary:
    """A row per method, each over its own models: a comparison that adds a method on some
    models only (or where one run failed) still reports every method where it can be compared."""
    methods = compiled_methods(results)
    references = [r for r in REFERENCES if r in methods]

    def comparable(entry: dict[str, Any], method: str) -> bool:
        return all(succeeded(entry["results"].get(m)) for m in (method, *references))

    rows, used = [], set()
    for method in methods:
        entries = [e for e in results["models"] if comparable(e, method)]
        if entries:
            rows.append(_row(method, entries, references))
            used.update(e["name"] for e in entries)
    names = [e["name"] for e in results["models"]]
    return Summary(rows, [n for n in names if n in used], [n for n in names if n not in used])


def _row(method: str, used: list[dict[str, Any]], references: list[str]) -> MethodRow:
    def rel(entry: dict[str, Any], name: str) -> float:
        return relative_step(entry["results"][name])

    def versus(other: str) -> float | None:
        if other not in references:
            return None
        return geomean([step_ratio(e["results"][method], e["results"][other]) for e in used])

    compile_ratios = [_ratio(e["results"][method]["compile_s"],
                             e["results"].get("stock", {}).get("compile_s"))
                      for e in used]
    known = None not in compile_ratios
    spreads = [e["results"][method].get("step_spread") for e in used]
    device = [r for r in (_ratio(e["results"][method].get("step_device_ms"),
                                 e["results"].get("stock", {}).get("step_device_ms")) for e in used)
              if r is not None]
    return MethodRow(
        method=method, models=len(used),
        compile_s=sum(e["results"][method]["compile_s"] for e in used),
        compile_vs_stock=geomean(compile_ratios) if known else None,
        worst_compile_vs_stock=max(compile_ratios) if known else None,
        step_vs_stock=versus("stock"), step_vs_default=versus("default"),
        speedup_vs_eager=geomean([1 / rel(e, method) for e in used]),
        slower_than_eager=sum(rel(e, method) > 1 + SLOWER_BY for e in used),
        max_step_spread=_largest(spreads),
        max_device_spread=_largest([e["results"][method].get("device_spread") for e in used]),
        max_host_spread=_largest([e["results"][method].get("host_spread") for e in used]),
        device_vs_stock=geomean(device) if device else None, device_models=len(device),
        model_names=tuple(e["name"] for e in used))


def _ratio(value: float | None, reference: float | None) -> float | None:
    return value / reference if value and reference else None


def format_summary(summary: Summary) -> str:
    """A plain-text table (ratios < 1 are better, except speedups)."""
    def num(value: float | None, width: int, fmt: str = ".3f") -> str:
        return f"{'-':>{width}}" if value is None else f"{value:>{width}{fmt}}"

    header = (f"{'method':<14}{'models':>7}{'compile [s]':>12}{'compile/stock':>15}{'worst':>8}"
              f"{'step/stock':>12}{'step/default':>14}{'vs eager':>10}{'slower':>8}{'spread':>8}"
              f"{'host spread':>13}{'device/stock':>15}{'dev spread':>12}")
    lines = [counted(len(summary.models_used), "models", summary.models_excluded,
                     "stock or default failed or not run"),
             header, "-" * len(header)]
    for row in summary.rows:
        device_models = f" ({row.device_models})" if row.device_vs_stock is not None else ""
        lines.append(f"{row.method:<14}{row.models:>7d}{row.compile_s:>12.1f}{num(row.compile_vs_stock, 15)}"
                     f"{num(row.worst_compile_vs_stock, 8, '.2f')}{num(row.step_vs_stock, 12)}"
                     f"{num(row.step_vs_default, 14)}{row.speedup_vs_eager:>9.3f}x{row.slower_than_eager:>8d}"
                     f"{num(row.max_step_spread, 8, '.1%')}{num(row.max_host_spread, 13, '.1%')}"
                     f"{num(row.device_vs_stock, 10)}{device_models:<5}"
                     f"{num(row.max_device_spread, 12, '.1%')}")
    return "\n".join(lines)


# -- notebooks -----------------------------------------------------------------------------------

def model_frame(results: dict[str, Any]) -> Any:
    """One row per (model, method): compile_s, step_ms, eager_step_ms, speedup, spreads, GEMMs."""
    import pandas as pd

    rows = []
    for entry in results["models"]:
        for method, result in entry["results"].items():
            rows.append({"model": entry["name"], "method": method,
                         **{k: result.get(k) for k in ("compile_s", "step_ms", "eager_step_ms",
                                                       "speedup_vs_eager", "step_spread", "ratio_spread",
                                                       "step_device_ms", "device_spread")},
                         "gemms": len(result.get("gemms") or []), "error": result.get("error")})
    return pd.DataFrame(rows).set_index(["model", "method"]) if rows else pd.DataFrame()


#: The columns `table` gives each method.
TABLE_METRICS = ("compile_s", "step_ms", "step/stock", "step/default", "vs eager")


def table(results: dict[str, Any]) -> Any:
    """One row per model, a column group per method (TABLE_METRICS): compile seconds, step ms,
    the step against stock's and default's (`step_ratio`, as `summarize` computes them, so their
    geomeans are the summary's), and the speedup over the eager step timed in the same process.
    NaN where the method (or the reference) failed or was not run."""
    import pandas as pd

    methods = compiled_methods(results)
    rows = {}
    for entry in results["models"]:
        measured = {m: r for m, r in entry["results"].items() if succeeded(r)}
        row: dict[tuple[str, str], float] = {}
        for method in (m for m in methods if m in measured):
            result = measured[method]
            row[(method, "compile_s")] = result["compile_s"]
            row[(method, "step_ms")] = result["step_ms"]
            for reference in ("stock", "default"):
                if reference in measured:
                    row[(method, f"step/{reference}")] = step_ratio(result, measured[reference])
            row[(method, "vs eager")] = 1 / relative_step(result)
        rows[entry["name"]] = row
    columns = pd.MultiIndex.from_product([methods, TABLE_METRICS], names=["method", "metric"])
    frame = pd.DataFrame(list(rows.values()), index=pd.Index(list(rows), name="model"), columns=columns)
    return frame.astype(float)


def failures(results: dict[str, Any]) -> list[str]:
    """'model  method: the error's first line' for each failed run (or for a (model, method)
    whose result carries an error and no runs)."""
    lines = []
    for entry in results["models"]:
        for method, result in entry["results"].items():
            errors = [run["error"] for run in result.get("runs") or [] if run.get("error")]
            if not errors and result.get("error"):
                errors = [result["error"]]
            lines += [f"{entry['name']}  {method}: {_first_line(error)}" for error in errors]
    return lines


def _first_line(text: str) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else ""


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


def plot_models(results: dict[str, Any], path: str | Path | None = None) -> Any:
    """Compile time (x, log) against step time (y) relative to stock max-autotune's on the same
    model (to eager's, timed in the same process, where stock was not measured everywhere): a small
    point per model and method, a large one per method at its total compile time and geomean.
    Needs matplotlib."""
    from matplotlib.figure import Figure  # no pyplot: no global state, works headless
    from matplotlib.ticker import FuncFormatter

    summary = summarize(results)
    versus_stock = bool(summary.rows) and all(row.step_vs_stock is not None for row in summary.rows)
    reference = "stock max-autotune" if versus_stock else "eager"

    def relative(entry: dict[str, Any], result: dict[str, Any]) -> float | None:
        if not versus_stock:
            return relative_step(result)
        stock = entry["results"].get("stock")
        return step_ratio(result, stock) if succeeded(stock) else None

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
            y = row.step_vs_stock if versus_stock else 1 / row.speedup_vs_eager
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
