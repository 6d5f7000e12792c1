"""The comparison's result file: schema, reading (with migration of older versions), validation
and writing, and the per-result bookkeeping (speedups, success).

Results schema (version 2):
  {"schema_version": 2, "kind": "kernel_select.compare", "created": ISO time,
   "environment": {"device", "device_key", "torch", "triton", "python", "kernel_select", "l2_bytes"},
   "settings": {"shapes", "topk": [...], "nogate_topk": [...], "cublas_margin", "exhaustive", "lut",
                "model", "timeout_s"[, "gemm_only"][, "note"]},
   "methods": ["eager", "stock", "topk-1", ...],
   "problems": [{"label", "m", "n", "k", "dtype",
                 "results": {method: {"tuning_s", "kernel_ms", "eager_ms", "speedup", "choice",
                                      "n_triton", "n_choices", "timing", "max_rel_error", "error"}}}]}
Missing numbers are null; `error` is null on success. speedup = eager_ms / kernel_ms (the eager
method's own kernel_ms where a result has no eager_ms).

A finished run adds "summary" (`summary.summary_record`: per method the kernel-time ratio to stock
with its paired-bootstrap interval, the tuning ratio, the speedup over eager). It is derived from
"problems", rewritten at the end of every run and not read back.

Version 1 (before the cuBLAS gate and side-by-side eager timing) had no `eager_ms` and no
`nogate_topk`/`cublas_margin` settings. `load_results` migrates it: `eager_ms` becomes null, which
is exactly what version 1's speedups meant (relative to the eager method's process), the gate
settings become "none" and "off", and `migrated_from` records the original version.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kernel_select.errors import DatasetError
from kernel_select.offline.json_files import read_json_file, write_json_atomic

SCHEMA_VERSION = 2


RESULTS_KIND = "kernel_select.compare"


METHOD_FIELDS = ("tuning_s", "kernel_ms", "eager_ms", "speedup", "choice", "n_triton", "n_choices", "timing",
                 "max_rel_error", "error")


def new_results(*, device_name: str, device_key: str, l2_bytes: int, methods: list[str],
                settings: dict[str, Any]) -> dict[str, Any]:
    import platform

    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    from kernel_select._version import __version__

    return {
        "schema_version": SCHEMA_VERSION, "kind": RESULTS_KIND,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "environment": {"device": device_name, "device_key": device_key, "torch": torch.__version__,
                        "triton": triton_version, "python": platform.python_version(),
                        "kernel_select": __version__, "l2_bytes": l2_bytes},
        "settings": settings, "methods": methods, "problems": [],
    }


def write_results(results: dict[str, Any], path: str | Path) -> None:
    """Write atomically (a reader never sees half a file)."""
    write_json_atomic(results, path)


def load_results(path: str | Path) -> dict[str, Any]:
    """Read a comparison JSON, migrate an older version to the current one, and validate it.

    Raises:
        DatasetError: naming the file and the first field that is wrong.
    """
    results = migrate_results(read_json_file(path, "comparison results"), str(path))
    validate_results(results, str(path))
    return results


def migrate_results(results: Any, where: str = "results") -> Any:
    """`results` in the current schema version; older versions are upgraded in place, anything
    that is not an older comparison file is returned unchanged for validation to name."""
    if not isinstance(results, dict) or results.get("kind") != RESULTS_KIND:
        return results
    version = results.get("schema_version")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise DatasetError(f"{where}: schema_version {version} was written by a newer kernel_select "
                           f"(this one reads up to {SCHEMA_VERSION}); upgrade kernel_select")
    for old, step in sorted(_MIGRATIONS.items()):
        if results.get("schema_version") == old:
            step(results)
            results["schema_version"] = old + 1
            results.setdefault("migrated_from", old)
    return results


def _v1_to_v2(results: dict[str, Any]) -> None:
    # v1 timed eager only in its own process: a null eager_ms means exactly that in v2.
    problems = results.get("problems")
    for problem in problems if isinstance(problems, list) else []:
        per_method = problem.get("results") if isinstance(problem, dict) else None
        for result in per_method.values() if isinstance(per_method, dict) else []:
            if isinstance(result, dict):
                result.setdefault("eager_ms", None)
    settings = results.get("settings")
    if isinstance(settings, dict):
        settings.setdefault("nogate_topk", [])  # v1 had no gate-off runs ...
        settings.setdefault("cublas_margin", None)  # ... and no gate: it was off


#: schema_version -> the step that upgrades a file of that version by one.
_MIGRATIONS: dict[int, Callable[[dict[str, Any]], None]] = {1: _v1_to_v2}


def validate_results(results: Any, where: str = "results") -> None:
    """Check the schema described in the module docstring; raise DatasetError if it does not hold."""
    def fail(message: str) -> None:
        raise DatasetError(f"{where}: {message}")

    if not isinstance(results, dict):
        fail("expected a JSON object")
    if results.get("schema_version") != SCHEMA_VERSION or results.get("kind") != RESULTS_KIND:
        fail(f"not a version-{SCHEMA_VERSION} {RESULTS_KIND} file "
             f"(schema_version={results.get('schema_version')!r}, kind={results.get('kind')!r})")
    for key in ("environment", "settings", "methods", "problems"):
        if key not in results:
            fail(f"missing {key!r}")
    for key in ("environment", "settings"):
        if not isinstance(results[key], dict):
            fail(f"'{key}' must be an object, got {type(results[key]).__name__}")
    for key in ("topk", "nogate_topk"):  # what --resume extends
        if not isinstance(results["settings"].get(key, []), list):
            fail(f"settings.{key} must be a list, got {type(results['settings'][key]).__name__}")
    methods = results["methods"]
    if not isinstance(methods, list) or "eager" not in methods or "stock" not in methods:
        fail("'methods' must list 'eager', 'stock' and the methods compared")
    if not isinstance(results["problems"], list):
        fail("'problems' must be a list")
    for i, problem in enumerate(results["problems"]):
        _validate_problem(problem, methods, f"problems[{i}]", fail)


def _validate_problem(problem: Any, methods: list[str], where: str, fail: Callable[[str], None]) -> None:
    if not isinstance(problem, dict):
        fail(f"{where}: expected an object")
    for key in ("label", "m", "n", "k", "dtype", "results"):
        if key not in problem:
            fail(f"{where}: missing {key!r}")
    if not isinstance(problem["label"], str):
        fail(f"{where}.label: expected a string, got {type(problem['label']).__name__}")
    if not isinstance(problem["results"], dict):
        fail(f"{where}: 'results' must be an object")
    for name, result in problem["results"].items():
        here = f"{where} ({problem['label']}).{name}"
        if name not in methods:
            fail(f"{where} ({problem['label']}): unknown method {name!r}")
        if not isinstance(result, dict):
            fail(f"{here}: expected an object")
        missing = [f for f in METHOD_FIELDS if f not in result]
        if missing:
            fail(f"{here}: missing {', '.join(missing)}")
        for number in ("tuning_s", "kernel_ms", "eager_ms", "speedup"):
            value = result[number]
            if value is not None and not is_positive(value) and not (number == "tuning_s" and value == 0):
                fail(f"{here}.{number}: expected a positive number or null, got {value!r}")


def method_result(raw: dict[str, Any]) -> dict[str, Any]:
    result = {name: raw.get(name) for name in METHOD_FIELDS}
    for name, value in result.items():  # strict JSON: no NaN or inf
        if isinstance(value, float) and not math.isfinite(value):
            result[name] = None
    result["speedup"] = None
    return result


def fill_speedups(entry: dict[str, Any]) -> None:
    for method in entry["results"]:
        ms, eager = entry["results"][method].get("kernel_ms"), eager_ms_for(entry, method)
        entry["results"][method]["speedup"] = eager / ms if is_positive(eager) and is_positive(ms) else None


def eager_ms_for(entry: dict[str, Any], method: str) -> float | None:
    """The eager time to compare `method` with: measured side by side in its own process, else
    the eager method's (a separate process: drift between the two is not cancelled)."""
    own = entry["results"][method].get("eager_ms")
    return own if is_positive(own) else entry["results"].get("eager", {}).get("kernel_ms")


def is_positive(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def succeeded(result: dict[str, Any] | None) -> bool:
    return bool(result) and result.get("error") is None and is_positive(result.get("kernel_ms"))
