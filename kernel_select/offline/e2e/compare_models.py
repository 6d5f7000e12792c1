"""`kernel-select compare-models`: whole networks under each compile method, compile time and step time.

For every workload (`workloads`: an architecture of `model_zoo` in a phase, or a user's own
network from a `--model` factory, `user_model`) and every method of `model_methods`, one worker
process (`model_worker`) with fresh Inductor and Triton caches compiles the network and measures:
  compile_s       wall time of the first step (Dynamo, Inductor, autotuning; backward too when training)
  step_ms         median time of one step (CUDA events around the step; modes with CUDA graphs
                  replay them inside it), samples interleaved with
  eager_step_ms   the same network run eagerly, in the same process
  host_ref_ms     a fixed piece of host-only work timed in the same rounds: the host's speed meanwhile
  step_device_ms  on a GPU, the GPU's view of the step: its kernels queued behind a spin, without the
                  host's launch time (step_timing.py), and eager_device_ms beside it
  gemms           each GEMM Inductor autotuned: op, input shapes, the winner, choices timed
  gemms_lowered   how many GEMMs Inductor lowered, autotuned or not (a GEMM given one choice, a LUT
                  pin or gemm_topk=1's decision, is lowered and never autotuned)
  build_s         the worker's time to build the network (random weights) and its inputs
and the driver adds `wall_s`, the worker process's whole wall time (start-up, warm-up compile,
build, compile, timing): what planning a comparison's time needs.

With `max_seconds`, the comparison stops before a run it cannot finish in what is left of that
budget (judged by the longest run of the same method so far in this invocation), and no worker
outlives the budget; what was not run is run by the next `resume=True`.

A method with `pretuned=True` (`pinned-gemm`) serves a LUT made for the workload: before its
first run on a workload, a pretune worker (`model_pretune`: fresh caches, the same timeout and
time budget as a run, log OUT/logs/<arch>_<phase>.pretune.log) writes OUT/luts/<arch>_<phase>.json
and its result is kept beside it (<arch>_<phase>.pretune.json). The LUT is reused by the
method's other runs and by `resume=True`; an interrupted pretune resumes from its own journal
(`<lut>.progress.json`). Without `resume` the comparison starts over: an earlier comparison's
LUT, record and journal there are removed before the workload's pretune. A failed pretune fails
the runs that need it ("pretune failed: ...") without being retried in the same invocation;
`resume=True` retries it.

With `repeat=N` every (model, method) is measured N times, each in a new process, the repeats
of a pass spread over the whole run (all models and methods, then again), so the spread includes
drift over time. Per (model, method) the results file keeps every run and their medians, and the
spread (max - min) / median of compile_s, step_ms, the step's ratio to eager, step_device_ms and
host_ref_ms (a step spread that the host's spread matches is the host's, not the method's).

Results file `<out>/models_<device>.json`, rewritten after every run, so a stopped comparison
resumes where it was with `resume=True`; its format is model_results.py's.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import logging
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kernel_select.offline.e2e import model_frames, model_pretune, model_report
from kernel_select.offline.e2e.json_worker import run_worker
from kernel_select.errors import DatasetError
from kernel_select.offline.e2e.model_methods import ModelMethod
from kernel_select.offline.e2e.model_results import load_results, new_results, write_results

log = logging.getLogger(__name__)

#: Runs one measurement: (spec, log path, timeout) -> the worker's raw result.
Runner = Callable[[dict[str, Any], Path, float], dict[str, Any]]


def run_in_subprocess(spec: dict[str, Any], log_path: Path, timeout_s: float) -> dict[str, Any]:
    """One measurement worker process with empty Inductor and Triton caches; its raw result or an error."""
    return run_worker("kernel_select.offline.e2e.model_worker", spec, log_path, timeout_s)


def run_compare_models(models: Sequence[str], methods: Sequence[ModelMethod], *, out_dir: str | Path,
                       device: str = "cuda", tiny: bool = False, repeat: int = 1, samples: int = 30,
                       min_sample_ms: float = 20.0, timeout_s: float = 1800.0, resume: bool = False,
                       progress: bool = True, runner: Runner = run_in_subprocess,
                       pretuner: Runner = model_pretune.run_pretune_in_subprocess,
                       settings: dict[str, Any] | None = None, max_seconds: float | None = None,
                       clock: Callable[[], float] = time.monotonic,
                       ) -> tuple[dict[str, Any], Path, Path | None]:
    """Measure every (model, method) `repeat` times, one worker per run (a pretuned method's
    workload pretuned first, by `pretuner`, once); returns (results, json_path, png_path).
    png_path is None without matplotlib. `max_seconds` bounds the whole comparison (module
    docstring); `clock` is what measures it.

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
    entries = _model_entries(results, models)
    todo = [(rep, name, method) for rep in range(repeat) for name in models for method in methods
            if rep >= _good_runs(entries[name]["results"].get(method.name))]
    runs = _Runs(out_dir, runner, pretuner, _Budget(max_seconds, clock), timeout_s, resume,
                 {"device": device, "tiny": tiny, "samples": samples, "min_sample_ms": min_sample_ms})
    with _sigterm_as_exit():
        for done, (rep, name, method) in enumerate(tqdm(todo, desc="compare-models", unit="run",
                                                         disable=not progress)):
            raw = runs.run(rep, name, method)
            if raw is None:
                log.warning("compare-models: stopped at the time budget (%.0f s); %d run(s) not started, "
                            "run again with --resume", max_seconds, len(todo) - done)
                break
            entry = entries[name]
            entry["sizes"] = entry["sizes"] or raw.get("sizes")
            entry["results"][method.name] = _with_runs(entry["results"].get(method.name), [raw])
            write_results(results, json_path)
    png_path: Path | None = out_dir / f"models_{device_key}.png"
    try:
        model_frames.plot_models(results, png_path)
    except ImportError:
        log.warning("matplotlib is not installed; skipped %s (pip install matplotlib)", png_path)
        png_path = None
    return results, json_path, png_path


def merge_comparisons(paths: Sequence[str | Path]) -> dict[str, Any]:
    """One comparison from several made side by side on one machine's GPUs (one process per GPU,
    each given other workloads): their models in order, and where two files measured the same
    (model, method), its runs pooled into one entry, as a resumed comparison pools them.

    Raises:
        DatasetError: for a file that is not a comparison, or files of different devices or settings.
    """
    if not paths:
        raise DatasetError("merge: no comparison files given")
    parts = [load_results(path) for path in paths]
    merged = copy.deepcopy(parts[0])
    merged["models"] = []
    for path, part in zip(paths, parts):
        device, first_device = part["environment"].get("device_key"), merged["environment"].get("device_key")
        if device != first_device:
            raise DatasetError(f"{path}: measured on {device}, {paths[0]} on {first_device}; only "
                               "comparisons of one kind of GPU are merged")
        if part["settings"] != merged["settings"]:
            raise DatasetError(f"{path}: its settings differ from {paths[0]}'s ({part['settings']} against "
                               f"{merged['settings']}); only comparisons made the same way are merged")
        merged["methods"] += [m for m in part["methods"] if m not in merged["methods"]]
    entries = _model_entries(merged, [entry["name"] for part in parts for entry in part["models"]])
    for part in parts:
        for entry in part["models"]:
            into = entries[entry["name"]]
            into["sizes"] = into["sizes"] or entry.get("sizes")
            for method, result in entry["results"].items():
                into["results"][method] = _with_runs(into["results"].get(method), result.get("runs", []))
    return merged


def _with_runs(result: dict[str, Any] | None, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """A (model, method)'s entry after more `runs`: its earlier good runs and the new ones (an earlier
    failure is dropped once the run is made again)."""
    good = [r for r in (result or {}).get("runs", []) if r.get("error") is None]
    return model_report.aggregate(good + runs)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """Inside the block, SIGTERM (a `kill`, a job scheduler's stop) raises SystemExit as Ctrl-C
    raises KeyboardInterrupt, so the running worker's process group is killed and its temporary
    folder removed (json_worker.run_worker) instead of the process dying where it stands."""
    if threading.current_thread() is not threading.main_thread():  # only it may set handlers
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


def every_run_failed(results: dict[str, Any]) -> bool:
    """Whether the comparison measured nothing: runs were made and every one failed (a command
    exits non-zero then, not 0 as for a comparison that measured something)."""
    runs = [run for entry in results["models"] for result in entry["results"].values()
            for run in result.get("runs", [])]
    return bool(runs) and all(run.get("error") is not None for run in runs)


def _model_entries(results: dict[str, Any], models: Sequence[str]) -> dict[str, dict[str, Any]]:
    """name -> the results' entry of each model, new (empty) entries added for models it lacks."""
    entries = {entry["name"]: entry for entry in results["models"]}
    for name in models:
        if name not in entries:
            arch, phase = name.rsplit("/", 1)
            entries[name] = {"name": name, "architecture": arch, "phase": phase, "sizes": None, "results": {}}
            results["models"].append(entries[name])
    return entries


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


class _Runs:
    """Starts the worker processes of one invocation: a run, and before a pretuned method's run
    the pretune of its workload, each within the timeout and the time budget."""

    def __init__(self, out_dir: Path, runner: Runner, pretuner: Runner, budget: _Budget, timeout_s: float,
                 resume: bool, common: dict[str, Any]) -> None:
        self.out_dir, self.runner, self.pretuner = out_dir, runner, pretuner
        self.budget, self.timeout_s, self.resume, self.common = budget, timeout_s, resume, common
        self.pretuned: set[str] = set()  # workloads whose pretune started in this invocation
        # workload -> the error of its pretune in this invocation (not retried before --resume)
        self.pretune_failed: dict[str, dict[str, Any]] = {}

    def run(self, rep: int, name: str, method: ModelMethod) -> dict[str, Any] | None:
        """The raw result of one run of `method` on workload `name`; None when the time budget
        does not let it (or its pretune) start."""
        spec = {"model": name, "method": dataclasses.asdict(method), **self.common}
        pinned: dict[str, Any] | None = {}
        if method.pretuned:
            pinned = self.pinned_lut(name, method.name)
            if pinned is None:
                return None
            if pinned.get("error") is not None:
                return {"error": f"pretune failed: {pinned['error']}"}
            spec["method"]["lut"] = pinned["lut"]
        log_path = self.out_dir / "logs" / f"{_file_name(name)}.{method.name}.{rep}.log"
        raw = self.timed(self.runner, spec, log_path, method.name)
        if raw is None:
            return None
        return {**raw, **{key: pinned[key] for key in ("pretune_s", "lut") if key in pinned}}

    def pinned_lut(self, name: str, method: str) -> dict[str, Any] | None:
        """The pretune result of workload `name` ({"lut", "pretune_s", ...} or {"error"}): its
        LUT file when it exists (with the result kept beside it), else a pretune worker's; None
        when the time budget does not let the pretune start."""
        lut = self.out_dir / "luts" / f"{_file_name(name)}.json"
        # The pretune worker's result, kept beside the LUT: a resumed comparison that reuses the
        # LUT still reports what making it cost.
        record = lut.with_name(lut.stem + ".pretune.json")
        if lut.exists() and (self.resume or name in self.pretuned):
            return {**(json.loads(record.read_text()) if record.exists() else {}), "lut": str(lut)}
        if name in self.pretune_failed:  # tried once already in this invocation: --resume retries it
            return self.pretune_failed[name]
        if not self.resume and name not in self.pretuned:
            # A new comparison starts over, as its results file does: what an earlier one left in
            # this folder may be for other sizes (--tiny) or an older model.
            for stale in (lut, record, lut.with_name(lut.name + ".progress.json")):
                stale.unlink(missing_ok=True)
        self.pretuned.add(name)
        lut.parent.mkdir(parents=True, exist_ok=True)
        spec = {"model": name, "device": self.common["device"], "tiny": self.common["tiny"], "lut": str(lut),
                "k": model_pretune.DEFAULT_K}
        log_path = self.out_dir / "logs" / f"{_file_name(name)}.pretune.log"
        raw = self.timed(self.pretuner, spec, log_path, f"{method} pretune")
        if raw is not None and raw.get("error") is None and not lut.exists():
            raw = {"error": f"the pretune worker wrote no LUT at {lut}; see {log_path}"}
        if raw is not None and raw.get("error") is not None:
            self.pretune_failed[name] = raw
        elif raw is not None:
            write_results(dict(raw, lut=str(lut)), record)
        return raw

    def timed(self, runner: Runner, spec: dict[str, Any], log_path: Path, key: str) -> dict[str, Any] | None:
        """`runner`'s result within the timeout and what is left of the budget (judged by the
        longest run of `key` so far); None when it should not start."""
        allowed = self.budget.allows(key, self.timeout_s)
        if allowed is None:
            return None
        started = self.budget.clock()
        raw = runner(spec, log_path, allowed)
        wall_s = self.budget.clock() - started
        self.budget.record(key, wall_s)
        # The whole process, start-up and timing included: what planning a comparison's time needs.
        raw = dict(raw, wall_s=wall_s)
        if allowed < self.timeout_s and str(raw.get("error", "")).startswith("timed out"):
            # Not a failure of the method: it ran out of this comparison's time, and its compile
            # (or pretune) took at least `allowed` seconds (a lower bound worth keeping).
            raw = dict(raw, cut_by_budget=True, error=(
                f"cut by --max-seconds after {allowed:.0f} s (it takes at least that long; "
                f"--worker-max-seconds {self.timeout_s:.0f} s); run again with --resume and a larger "
                "--max-seconds"))
        return raw


def _file_name(workload: str) -> str:
    """A workload's name ("<arch>/<phase>") as part of a file name."""
    return workload.replace("/", "_")


def _good_runs(result: dict[str, Any] | None) -> int:
    return sum(1 for run in (result or {}).get("runs", []) if run.get("error") is None)


def _device_identity(device: str) -> tuple[str, str]:
    """(human name, file key) of the device a comparison runs on: "cpu", "cuda" or "cuda:N".

    Raises:
        DeviceError: for any other device (checked before any worker starts: each would fail on
            it), or for CUDA when no GPU is present.
    """
    import torch

    from kernel_select.device import detect
    from kernel_select.errors import DeviceError

    if device == "cpu":
        return "cpu", "cpu"
    if not re.fullmatch(r"cuda(?::[0-9]{1,2})?", device, re.ASCII):
        raise DeviceError(f"compare-models: --device {device[:40]!r}: expected cpu, cuda or cuda:N (the "
                          "workers compile and time with torch on one of them)")
    if not torch.cuda.is_available():
        raise DeviceError("compare-models: no CUDA GPU (torch.cuda.is_available() is False); pass "
                          "--torch-device cpu to run the comparison on the CPU")
    spec = detect(torch.device(device).index or 0)
    return spec.name, spec.key
