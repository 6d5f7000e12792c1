"""Reading a `compare-models` results file: per-run aggregation, the ratios against the references,
the summary and the per-model metrics. Their text tables are model_tables.py; the frames and the plot
for notebooks are model_frames.py. Plain Python.

Every table compares each method with the REFERENCES the results have: step and compile time
over `stock-gemm`'s (Inductor's own GEMM autotuning with the GEMM-only options kernel_select's
recipe uses, so like with like) and `stock`'s (mode="max-autotune", which also autotunes
pointwise and reduction kernels and runs coordinate descent), step over `default`'s, and the
autotuning time: compile time minus `default`'s on the same model.

    from kernel_select.offline.e2e import model_report, model_tables
    results = model_report.load("results/models_h100.json")
    print(model_tables.format_summary(model_report.summarize(results)))
    print(model_tables.format_models(results))   # per model and method: compile, autotune, step, ratios
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel_select.errors import first_line
from kernel_select.offline.e2e.model_results import GEMM_OPS, load_results
from kernel_select.offline.metrics import geomean

#: A step counts as slower than eager (or than another method) beyond this fraction.
SLOWER_BY = 0.02
RESULT_FIELDS = ("compile_s", "step_ms", "eager_step_ms", "speedup_vs_eager", "compile_spread", "step_spread",
                 "ratio_spread", "step_device_ms", "eager_device_ms", "device_spread", "host_ref_ms",
                 "host_spread", "choices_stable", "pretune_s", "wall_s", "gemms", "gemms_lowered", "error",
                 "runs")
#: The GPU's view of a step (model_worker.device_times); runs from before it was measured lack it.
DEVICE_FIELDS = ("step_device_ms", "eager_device_ms")


def load(path: str | Path) -> dict[str, Any]:
    """A compare-models results file, checked (model_results.load_results)."""
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
    result["gemms_lowered"] = good[0].get("gemms_lowered")  # runs before it was counted lack it
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
    # The worker process's whole time (compare_models adds it to each run; older runs lack it).
    walls = [r["wall_s"] for r in good if r.get("wall_s") is not None]
    result["wall_s"] = statistics.median(walls) if walls else None
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


def gemms_autotuned(result: dict[str, Any]) -> tuple[int, int | None]:
    """(GEMMs Inductor autotuned, GEMMs it lowered) in a method's compile (model_results.GEMM_OPS; a
    convolution Inductor autotunes is neither): a GEMM given one choice (a LUT pin, gemm_topk=1's
    decision, mode="default"'s ATen) is lowered and never autotuned. The lowered count is None for
    runs from before it was recorded."""
    autotuned = sum(gemm.get("op") in GEMM_OPS for gemm in result.get("gemms") or [])
    return autotuned, result.get("gemms_lowered")


def succeeded(result: dict[str, Any] | None) -> bool:
    return bool(result) and result.get("error") is None and (result.get("step_ms") or 0) > 0


def relative_step(result: dict[str, Any]) -> float:
    """Step time over the eager step timed in the same process (the speedup over eager, inverted)."""
    return result["step_ms"] / result["eager_step_ms"]


def step_ratio(result: dict[str, Any], reference: dict[str, Any]) -> float:
    """One method's step time over another's, each from its own process. Not normalized by each
    process's eager step: on the H100 that eager step was systematically slower in processes that
    had compiled with max-autotune (8-25%), so dividing by it would credit
    max-autotune with the slowdown of its own eager baseline."""
    return result["step_ms"] / reference["step_ms"]


def compiled_methods(results: dict[str, Any]) -> list[str]:
    """The compared methods, in the file's order; eager is every method's reference, not one of them."""
    return [m for m in results["methods"] if m != "eager"]


# -- summary -------------------------------------------------------------------------------------

#: The methods every other one is compared with, where the results have them, the first the one
#: the plot and the device-time column use: `stock-gemm` tunes the GEMMs with the options the
#: README's recipe uses (like with like), `stock` is mode="max-autotune" (pointwise/reduction
#: autotuning and coordinate descent too), `default` compiles without autotuning.
REFERENCES = ("stock-gemm", "stock", "default")
#: The references a method's compile time is divided by (default's is subtracted: `autotune_s`).
COMPILE_REFERENCES = ("stock-gemm", "stock")


@dataclasses.dataclass(frozen=True)
class MethodRow:
    """One method over the models where it and the references all succeeded. The ratios are
    geomeans over those models, keyed by reference."""

    method: str
    models: int
    compile_s: float  # total over the models
    autotune_s: float | None  # total of compile_s minus default's on the same model (None: a default missing)
    compile_vs: dict[str, float]  # reference -> geomean of compile_s / the reference's
    worst_compile_vs: dict[str, float]  # reference -> the largest per-model compile ratio
    step_vs: dict[str, float]  # reference -> geomean of step_ms / the reference's step_ms
    speedup_vs_eager: float  # geomean of eager / step
    slower_than_eager: int  # models whose step is more than SLOWER_BY slower than eager
    max_step_spread: float | None  # the largest run-to-run spread of step_ms (repeated runs)
    max_device_spread: float | None = None  # the same for step_device_ms
    max_host_spread: float | None = None  # the same for host_ref_ms: how much the host's speed moved
    device_vs: dict[str, float] = dataclasses.field(default_factory=dict)  # step_device_ms ratios
    device_models: dict[str, int] = dataclasses.field(default_factory=dict)  # models with both device times
    model_names: tuple[str, ...] = ()

    @property
    def step_vs_stock_gemm(self) -> float | None:
        return self.step_vs.get("stock-gemm")

    @property
    def step_vs_stock(self) -> float | None:
        return self.step_vs.get("stock")

    @property
    def step_vs_default(self) -> float | None:
        return self.step_vs.get("default")

    @property
    def compile_vs_stock(self) -> float | None:
        return self.compile_vs.get("stock")

    @property
    def device_vs_stock(self) -> float | None:
        return self.device_vs.get("stock")


@dataclasses.dataclass(frozen=True)
class Summary:
    rows: list[MethodRow]
    models_used: list[str]  # models at least one row uses
    models_excluded: list[str]  # a reference failed or is missing there
    references: tuple[str, ...] = ()  # the REFERENCES these results have


def references_of(results: dict[str, Any]) -> tuple[str, ...]:
    """The REFERENCES among the compared methods, in REFERENCES' order."""
    methods = compiled_methods(results)
    return tuple(r for r in REFERENCES if r in methods)


def summarize(results: dict[str, Any], references: Sequence[str] | None = None) -> Summary:
    """A row per method, each over its own models: a comparison that adds a method on some
    models only (or where one run failed) still reports every method where it can be compared.
    A model counts for a method where the method and every reference succeeded; `references`
    (default: every one of REFERENCES the results have) narrows that, e.g. ("stock", "default")
    for a file where stock-gemm was run on a few models only."""
    references = references_of(results) if references is None else tuple(references)

    def comparable(entry: dict[str, Any], method: str) -> bool:
        return all(succeeded(entry["results"].get(m)) for m in (method, *references))

    rows, used = [], set()
    for method in compiled_methods(results):
        entries = [e for e in results["models"] if comparable(e, method)]
        if entries:
            rows.append(_row(method, entries, references))
            used.update(e["name"] for e in entries)
    names = [e["name"] for e in results["models"]]
    return Summary(rows, [n for n in names if n in used], [n for n in names if n not in used], references)


def autotune_s(entry: dict[str, Any], method: str) -> float | None:
    """`method`'s compile time minus `default`'s on the same model: what autotuning added (and, for
    kernel_select's methods, ranking the candidates). None when either is missing."""
    result, default = entry["results"].get(method), entry["results"].get("default")
    if not (succeeded(result) and succeeded(default)):
        return None
    return result["compile_s"] - default["compile_s"]


def _row(method: str, used: list[dict[str, Any]], references: Sequence[str]) -> MethodRow:
    def rel(entry: dict[str, Any], name: str) -> float:
        return relative_step(entry["results"][name])

    compile_vs, worst, device_vs, device_models = {}, {}, {}, {}
    for reference in (r for r in references if r in COMPILE_REFERENCES):
        ratios = [_ratio(e["results"][method]["compile_s"], e["results"][reference]["compile_s"])
                  for e in used]
        if None not in ratios:
            compile_vs[reference], worst[reference] = geomean(ratios), max(ratios)
        device = [r for r in (_ratio(e["results"][method].get("step_device_ms"),
                                     e["results"][reference].get("step_device_ms")) for e in used)
                  if r is not None]
        if device:
            device_vs[reference], device_models[reference] = geomean(device), len(device)
    autotune = [autotune_s(e, method) for e in used]  # None where default did not succeed
    return MethodRow(
        method=method, models=len(used),
        compile_s=sum(e["results"][method]["compile_s"] for e in used),
        autotune_s=sum(a for a in autotune if a is not None) if None not in autotune else None,
        compile_vs=compile_vs, worst_compile_vs=worst,
        step_vs={r: geomean([step_ratio(e["results"][method], e["results"][r]) for e in used])
                 for r in references},
        speedup_vs_eager=geomean([1 / rel(e, method) for e in used]),
        slower_than_eager=sum(rel(e, method) > 1 + SLOWER_BY for e in used),
        max_step_spread=_largest([e["results"][method].get("step_spread") for e in used]),
        max_device_spread=_largest([e["results"][method].get("device_spread") for e in used]),
        max_host_spread=_largest([e["results"][method].get("host_spread") for e in used]),
        device_vs=device_vs, device_models=device_models,
        model_names=tuple(e["name"] for e in used))


def _ratio(value: float | None, reference: float | None) -> float | None:
    return value / reference if value and reference else None


# -- notebooks -----------------------------------------------------------------------------------


#: The columns `table` gives each method: compile seconds, autotuning seconds (compile minus
#: default's), step ms, compile and step against each reference's, the speedup over eager.
TABLE_METRICS = ("compile_s", "autotune_s", "step_ms", "compile/stock-gemm", "step/stock-gemm",
                 "compile/stock", "step/stock", "step/default", "vs eager")


def model_metrics(entry: dict[str, Any], methods: Sequence[str]) -> dict[str, dict[str, float]]:
    """Per method of `methods` that succeeded on this model, its TABLE_METRICS that can be computed
    (a ratio needs its reference measured there too; `step_ratio`, as `summarize` computes them)."""
    measured = {m: r for m, r in entry["results"].items() if succeeded(r)}
    metrics: dict[str, dict[str, float]] = {}
    for method in (m for m in methods if m in measured):
        result = measured[method]
        row = {"compile_s": result["compile_s"], "step_ms": result["step_ms"]}
        autotune = autotune_s(entry, method)
        if autotune is not None:
            row["autotune_s"] = autotune
        for reference in (r for r in REFERENCES if r in measured):
            if reference in COMPILE_REFERENCES:
                compile_ratio = _ratio(result["compile_s"], measured[reference]["compile_s"])
                if compile_ratio is not None:
                    row[f"compile/{reference}"] = compile_ratio
            row[f"step/{reference}"] = step_ratio(result, measured[reference])
        row["vs eager"] = 1 / relative_step(result)
        metrics[method] = row
    return metrics


def failures(results: dict[str, Any]) -> list[str]:
    """'model  method: the error's first line' for each failed run (or for a (model, method)
    whose result carries an error and no runs)."""
    lines = []
    for entry in results["models"]:
        for method, result in entry["results"].items():
            errors = [run["error"] for run in result.get("runs") or [] if run.get("error")]
            if not errors and result.get("error"):
                errors = [result["error"]]
            lines += [f"{entry['name']}  {method}: {first_line(error)}" for error in errors]
    return lines
