"""The results file of `compare-models`, `<out>/models_<device>.json`: its format, a new one, its
atomic write and its checked read. compare_models.py writes it after every run; model_report.py
and model_frames.py read it.

  {"schema_version": 1, "kind": "kernel_select.compare_models", "created", "environment": {...},
   "settings": {"samples", "repeat", "tiny", "lut", "cudagraphs"},
   "methods": [...],
   "models": [{"name", "architecture", "phase", "sizes",
               "results": {method: {"compile_s", "step_ms", "eager_step_ms", "speedup_vs_eager",
                                    "compile_spread", "step_spread", "ratio_spread", "step_device_ms",
                                    "eager_device_ms", "device_spread", "host_ref_ms", "host_spread",
                                    "choices_stable", "pretune_s", "wall_s" (median over the good runs),
                                    "gemms", "gemms_lowered", "error", "runs": [raw worker results]}}}]}
`pretune_s` (a pretuned method only, else null): the median over its runs of the wall time of
discovering and pretuning the workload's GEMMs; a run of such a method also names its `lut`.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

from kernel_select.atomic_write import write_atomic
from kernel_select.errors import DatasetError

SCHEMA_VERSION = 1
RESULTS_KIND = "kernel_select.compare_models"
#: The GEMM ops a run counts, as Inductor's autotuner names them (a `gemms` record's "op"), and the
#: prefix of the key each lowering adds to its `counters["aten_mm_info"]` (torch 2.11 and 2.13):
#: `gemms_lowered` counts those keys, and the GEMMs among `gemms` are the autotuned ones.
GEMM_OPS = {"mm": "aten.mm_", "addmm": "aten.addmm_", "bmm": "aten.bmm_", "baddbmm": "aten.baddbmm_",
            "grouped_mm": "aten._grouped_mm."}


def new_results(device_name: str, device_key: str, methods: list[str],
                settings: dict[str, Any]) -> dict[str, Any]:
    """A results file with no model yet, for `methods` on the device `device_name` (file key
    `device_key`), recording this environment's versions."""
    import platform

    import torch

    try:
        import transformers

        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = None
    from kernel_select._version import __version__

    return {"schema_version": SCHEMA_VERSION, "kind": RESULTS_KIND,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "environment": {"device": device_name, "device_key": device_key, "torch": torch.__version__,
                            "transformers": transformers_version, "python": platform.python_version(),
                            "kernel_select": __version__},
            "settings": settings, "methods": methods, "models": []}


def write_results(results: dict[str, Any], path: str | Path) -> None:
    """Write atomically (a reader never sees half a file; a kill or a full disk leaves the last one).
    Compact: every run keeps each autotuned GEMM's choice times, and indenting them doubled the size."""
    write_atomic(path, json.dumps(results, separators=(",", ":"), allow_nan=False) + "\n")


def load_results(path: str | Path) -> dict[str, Any]:
    """Read and check a model comparison file.

    Raises:
        DatasetError: naming the file and what is wrong.
    """
    path = Path(path)
    try:
        results = json.loads(path.read_text())
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the model comparison ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(results, dict) or results.get("kind") != RESULTS_KIND \
            or results.get("schema_version") != SCHEMA_VERSION:
        raise DatasetError(f"{path}: not a version-{SCHEMA_VERSION} {RESULTS_KIND} file")
    _expect(path, "methods", results.get("methods"), list)
    _expect(path, "settings", results.get("settings"), dict)
    _expect(path, "models", results.get("models"), list)
    for i, entry in enumerate(results["models"]):
        _expect(path, f"models[{i}]", entry, dict)
        missing = [key for key in ("name", "results") if key not in entry]
        if missing:
            raise DatasetError(f"{path}: models[{i}]: missing {', '.join(missing)}")
        _expect(path, f"models[{i}].name", entry["name"], str)
        _expect(path, f"models[{i}].results", entry["results"], dict)
        unknown = set(entry["results"]) - set(map(str, results["methods"]))
        if unknown:
            raise DatasetError(f"{path}: models[{i}] ({entry['name']}): "
                               f"unknown method(s) {', '.join(map(str, unknown))}")
        for method, result in entry["results"].items():
            where = f"models[{i}].results.{method}"
            _expect(path, where, result, dict)
            _expect(path, f"{where}.runs", result.get("runs", []), list)
            for j, run in enumerate(result.get("runs", [])):
                _expect(path, f"{where}.runs[{j}]", run, dict)
    return results


def _expect(path: Path, field: str, value: Any, kind: type) -> None:
    """Refuse a field of a results file that is not of `kind`, naming the file and the field."""
    if not isinstance(value, kind):
        raise DatasetError(f"{path}: {field}: expected a {_KIND_NAMES[kind]}, "
                           f"got {type(value).__name__}; run without --resume to start over")


_KIND_NAMES = {list: "list", dict: "JSON object", str: "string"}
