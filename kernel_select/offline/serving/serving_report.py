"""The serving measurement's results (serving_bench.py measures them): each length's kernel time
against the best for that length, the plot and the table the notebook shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernel_select.offline.serving.programs import SEED, Program


def assemble(per_method: dict[str, dict[str, Any]], harness: dict[str, float] | None = None,
             program: Program = SEED) -> dict[str, Any]:
    """Results with `best_ms` per length beside each kernel time: the harness's best (`harness`,
    from `harness_best`, seed program) where it covers every length, else the fastest measured
    method; with a warm run, `compile_warm_s` and `triton_compile_s` per method."""
    lengths = [str(length) for length in program.lengths]
    fastest = {length: min((r["lengths"][length]["kernel_ms"] for r in per_method.values()
                            if "kernel_ms" in r.get("lengths", {}).get(length, {})), default=None)
               for length in lengths}
    # The harness times the seed step's three GEMMs; other programs run more than GEMMs.
    use_harness = program is SEED and bool(harness) and all(length in harness for length in lengths)
    best = {length: harness[length] for length in fastest} if use_harness else fastest
    for result in per_method.values():
        for length, entry in result.get("lengths", {}).items():
            if "kernel_ms" in entry:
                entry["best_ms"] = best.get(length)
                entry["ratio_to_best"] = entry["kernel_ms"] / best[length] if best.get(length) else None
        warm = result.get("warm", {})
        if warm.get("compile_s") is not None:
            result["compile_warm_s"] = warm["compile_s"]
            result["triton_compile_s"] = result["compile_s"] - warm["compile_s"]
    return {"program": f"{program.description}, mark_dynamic length {program.low}..{program.high}",
            "program_name": program.name,
            "lengths": list(program.lengths),
            "best_source": ("harness: per length, the sum over the three GEMMs of the fastest config or "
                            "cuBLAS timed alone in the program's operand layouts" if use_harness
                            else "fastest measured method per length"),
            "fastest_method_ms": fastest, "methods": per_method}


def plot(results: dict[str, Any], path: str | Path | None = None) -> Any:
    """Kernel time / best per length, one line per method (compile time and benchmarks in the
    legend). Returns the matplotlib Figure; also saves it to `path` when given."""
    from matplotlib.figure import Figure  # no pyplot: no global state, works headless

    figure = Figure(figsize=(7, 4))
    axes = figure.add_subplot()
    for method, result in results["methods"].items():
        timed = {int(length): e["ratio_to_best"] for length, e in result.get("lengths", {}).items()
                 if e.get("ratio_to_best") is not None}
        if timed:
            warm = (f", warm {result['compile_warm_s']:.1f} s" if result.get("compile_warm_s") is not None
                    else "")
            axes.plot(list(timed), list(timed.values()), marker="o",
                      label=f"{method} (compile {result['compile_s']:.1f} s{warm}, "
                            f"{result['benchmarks']} benchmarks)")
    axes.set_xscale("log")
    axes.set_xlabel("sequence length")
    axes.set_ylabel("kernel time / best")
    axes.set_title(results.get("best_source", ""), fontsize=7)
    axes.legend(fontsize=7)
    if path is not None:
        figure.savefig(path, dpi=120, bbox_inches="tight")
    return figure


def table(results: dict[str, Any]) -> Any:
    """One row per method: compile seconds (fresh, and with a warm Triton cache where measured),
    graphs, benchmarks, and per length kernel ms and ratio to best."""
    import pandas as pd

    rows = {}
    for method, result in results["methods"].items():
        row: dict[str, Any] = {"compile_s": result.get("compile_s"),
                               "compile_warm_s": result.get("compile_warm_s"), "graphs": result.get("graphs"),
                               "benchmarks": result.get("benchmarks"), "error": result.get("error")}
        for length, entry in result.get("lengths", {}).items():
            row[f"{length} ms"] = entry.get("kernel_ms")
            row[f"{length} / best"] = entry.get("ratio_to_best")
        rows[method] = row
    frame = pd.DataFrame.from_dict(rows, orient="index")
    return frame.drop(columns=[c for c in ("error", "compile_warm_s", "graphs") if frame[c].isna().all()])
