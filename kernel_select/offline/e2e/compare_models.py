"""`kernel-select compare-models`: whole networks under each compile method, compile time and step time.

For every workload of `model_zoo` (an architecture in a phase) and every method of
`model_methods`, one worker process (`model_worker`) with fresh Inductor and Triton caches
compiles the network and measures:
  compile_s       wall time of the first step (Dynamo, Inductor, autotuning; backward too when training)
  step_ms         median time of one step (CUDA events around the step; modes with CUDA graphs
                  replay them inside it), samples interleaved with
  eager_step_ms   the same network run eagerly, in the same process
  gemms           each GEMM Inductor autotuned: op, input shapes, the winner, choices timed

With `max_seconds`, the comparison stops before a run it cannot finish in what is left of that
budget (judged by the longest run of the same method so far in this invocation), and no worker
outlives the budget; what was not run is run by the next `resume=True`.

With `repeat=N` every (model, method) is measured N times, each in a new process, the repeats
of a pass spread over the whole run (all models and methods, then again), so the spread includes
drift over time. Per (model, method) the results file keeps every run and their medians, and the
spread (max - min) / median of compile_s, step_ms and the step's ratio to eager.

Results file `<out>/models_<device>.json` (rewritten after every run, so a stopped comparison
resumes where it was with `resume=True`):
  {"schema_version": 1, "kind": "kernel_select.compare_models", "created", "environment": {...},
   "settings": {"samples", "repeat", "tiny", "lut", "cudagraphs"},
   "methods": [...],
   "models": [{"name", "architecture", "phase", "sizes",
               "results": {method: {"compile_s", "step_ms", "eager_step_ms", "speedup_vs_eager",
                                    "compile_spread", "step_spread", "ratio_spread", "choices_stable",
                                    "gemms", "error", "runs": [raw worker results]}}}]}
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernel_select.offline.fresh_process import fresh_cache_env
from kernel_select.errors import DatasetError
from kernel_select.offline.e2e import model_report
from kernel_select.offline.e2e.model_methods import ModelMethod

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
RESULTS_KIND = "kernel_select.compare_models"

#: Runs one measurement: (spec, log path, timeout) -> the worker's raw result.
Runner = Callable[[dict[str, Any], Path, float], dict[str, Any]]


def run_in_subprocess(spec: dict[str, Any], log_path: Path, timeout_s: float) -> dict[str, Any]:
    """One worker process with empty Inductor and Triton caches; its raw result or an error."""
    with tempfile.TemporaryDirectory(prefix="kernel-select-models-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(json.dumps(spec))
        env = fresh_cache_env(tmp)
        command = [sys.executable, "-m", "kernel_select.offline.e2e.model_worker",
                   str(spec_path), str(result_path)]
        try:
            with open(log_path, "w") as log_file:
                subprocess.run(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                               timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout_s:.0f} s; see {log_path}"}
        if not result_path.exists():
            return {"error": f"the worker stopped without a result; see {log_path}"}
        return json.loads(result_path.read_text())


def run_compare_models(models: Sequence[str], methods: Sequence[ModelMethod], *, out_dir: str | Path,
                       device: str = "cuda", tiny: bool = False, repeat: int = 1, samples: int = 30,
                       min_sample_ms: float = 20.0, timeout_s: float = 1800.0, resume: bool = False,
                       progress: bool = True, runner: Runner = run_in_subprocess,
                       settings: dict[str, Any] | None = None, max_seconds: float | None = None,
                       clock: Callable[[], float] = time.monotonic,
                       ) -> tuple[dict[str, Any], Path, Path | None]:
    """Measure every (model, method) `repeat` times, one worker per run; returns
    (results, json_path, png_path). png_path is None without matplotlib. `max_seconds` bounds the
    whole comparison (module docstring); `clock` is what measures it.

    Raises:
        DeviceError: for a CUDA device when none is present.
        DatasetError: when `resume` finds a file that is not a comparison of this kind.
    """
    from tqdm import tqdm

    device_name, device_key = _device_identity(device)
    out_dir = Path(out_dir)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"models_{device_key}.json"
    settings = {"samples": samples, "repeat": repeat, "tiny": tiny, **(settings or {})}
    if resume and json_path.exists():
        results = load_results(json_path)
        results["methods"] += [m.name for m in methods if m.name not in results["methods"]]
        results["settings"].update(settings)
    else:
        results = new_results(device_name, device_key, [m.name for m in methods], settings)
    entries = {entry["name"]: entry for entry in results["models"]}
    for name in models:
        if name not in entries:
            arch, phase = name.split("/")
            entries[name] = {"name": name, "architecture": arch, "phase": phase, "sizes": None, "results": {}}
            results["models"].append(entries[name])
    todo = [(rep, name, method) for rep in range(repeat) for name in models for method in methods
            if rep >= _good_runs(entries[name]["results"].get(method.name))]
    budget = _Budget(max_seconds, clock)
    runs = tqdm(todo, desc="compare-models", unit="run", disable=not progress)
    for done, (rep, name, method) in enumerate(runs):
        allowed = budget.allows(method.name, timeout_s)
        if allowed is None:
            log.warning("compare-models: stopped at the time budget (%.0f s); %d run(s) not started, "
                        "run again with --resume", max_seconds, len(todo) - done)
            break
        spec = {"model": name, "method": dataclasses.asdict(method), "device": device, "tiny": tiny,
                "samples": samples, "min_sample_ms": min_sample_ms}
        log_path = out_dir / "logs" / f"{name.replace('/', '_')}.{method.name}.{rep}.log"
        started = clock()
        raw = runner(spec, log_path, allowed)
        budget.record(method.name, clock() - started)
        if allowed < timeout_s and str(raw.get("error", "")).startswith("timed out"):
            # Not a failure of the method: it ran out of this comparison's time, and its compile
            # took at least `allowed` seconds (a lower bound worth keeping).
            raw = dict(raw, cut_by_budget=True, error=(
                f"cut by --max-seconds after {allowed:.0f} s (at least that much compile; --timeout "
                f"{timeout_s:.0f} s); run again with --resume and a larger --max-seconds"))
        entry = entries[name]
        entry["sizes"] = entry["sizes"] or raw.get("sizes")
        runs = [r for r in entry["results"].get(method.name, {}).get("runs", []) if r.get("error") is None]
        entry["results"][method.name] = model_report.aggregate(runs + [raw])
        write_results(results, json_path)
    png_path: Path | None = out_dir / f"models_{device_key}.png"
    try:
        model_report.plot_models(results, png_path)
    except ImportError:
        log.warning("matplotlib is not installed; skipped %s (pip install matplotlib)", png_path)
        png_path = None
    return results, json_path, png_path


class _Budget:
    """What is left of `max_seconds`, and whether a method's next run fits in it."""

    def __init__(self, max_seconds: float | None, clock: Callable[[], float]) -> None:
        self.max_seconds, self.clock, self.start = max_seconds, clock, clock()
        self.longest: dict[str, float] = {}  # method -> its longest run so far (wall seconds)

    def allows(self, method: str, timeout_s: float) -> float | None:
        """The timeout to give the next run of `method`, or None when it should not start: the
        budget is spent, or the method's longest run so far would not fit in what is left."""
        if self.max_seconds is None:
            return timeout_s
        left = self.max_seconds - (self.clock() - self.start)
        if left <= 0 or self.longest.get(method, 0.0) > left:
            return None
        return min(timeout_s, left)

    def record(self, method: str, seconds: float) -> None:
        self.longest[method] = max(self.longest.get(method, 0.0), seconds)


def _good_runs(result: dict[str, Any] | None) -> int:
    return sum(1 for run in (result or {}).get("runs", []) if run.get("error") is None)


def _device_identity(device: str) -> tuple[str, str]:
    """(human name, file key) of the device a comparison runs on."""
    import torch

    if not device.startswith("cuda"):
        return "cpu", "cpu"
    from kernel_select.device import detect
    from kernel_select.errors import DeviceError

    if not torch.cuda.is_available():
        raise DeviceError("compare-models: no CUDA GPU (torch.cuda.is_available() is False); pass "
                          "--device cpu to run the comparison on the CPU")
    spec = detect(torch.device(device).index or 0)
    return spec.name, spec.key


def new_results(device_name: str, device_key: str, methods: list[str],
                settings: dict[str, Any]) -> dict[str, Any]:
    import platform

    import torch

    try:
        import transformers

        transformers_version = transformers.__version__
    except ImportError:
        transformers_version = None
    from kernel_select import __version__

    return {"schema_version": SCHEMA_VERSION, "kind": RESULTS_KIND,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "environment": {"device": device_name, "device_key": device_key, "torch": torch.__version__,
                            "transformers": transformers_version, "python": platform.python_version(),
                            "kernel_select": __version__},
            "settings": settings, "methods": methods, "models": []}


def write_results(results: dict[str, Any], path: str | Path) -> None:
    """Write atomically (a reader never sees half a file)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)


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
    for i, entry in enumerate(results.get("models", [])):
        missing = [key for key in ("name", "results") if key not in entry]
        if missing:
            raise DatasetError(f"{path}: models[{i}]: missing {', '.join(missing)}")
        unknown = set(entry["results"]) - set(results.get("methods", []))
        if unknown:
            raise DatasetError(f"{path}: models[{i}] ({entry['name']}): "
                               f"unknown method(s) {', '.join(unknown)}")
    return results
