"""The comparison's driver: one worker process per method, fresh caches for each, results
rewritten after every method so an interrupted run keeps what it measured."""

from __future__ import annotations

import dataclasses
import json
import logging
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel_select.offline.fresh_process import fresh_cache_env
from kernel_select import knobs
from kernel_select.device import DeviceSpec
from kernel_select.errors import DeviceError, OptionError
from kernel_select.offline.compare.plot import plot_tradeoff
from kernel_select.offline.compare.results import (
    fill_speedups,
    load_results,
    method_result,
    new_results,
    succeeded,
    write_results,
)
from kernel_select.offline.compare.suite import DEFAULT_TOPKS, Case, Method, methods_for
from kernel_select.offline.compare.summary import summarize, summary_record

log = logging.getLogger(__name__)


def run_compare(cases: Sequence[Case], *, out_dir: str | Path, topks: Sequence[int | str] = DEFAULT_TOPKS,
                exhaustive: bool = False, nogate_topks: Sequence[int | str] = (), device_index: int = 0,
                lut: str | None = None,
                model: str | None = None, timeout_s: float = 1800.0, shapes: str | None = None,
                progress: bool = True, resume: bool = False,
                only: Sequence[str] | None = None,
                gemm_only: bool = False) -> tuple[dict[str, Any], Path, Path | None]:
    """Measure every (case, method), one worker process per method; returns
    (results, json_path, png_path).

    The JSON is rewritten after every method, so an interrupted run keeps what it measured, and
    `resume=True` starts from an existing JSON and measures only the missing (case, method) pairs.
    `timeout_s` bounds each method's worker. `only` restricts this run to the named methods (the
    others keep what an earlier run measured). `gemm_only` compiles with `gemm_autotune_options()`
    (GEMM autotuning only, no CUDA graphs) in place of max-autotune's options, every compiled method
    alike. png_path is None when matplotlib is not installed.

    Raises:
        DeviceError: without a CUDA GPU.
        OptionError: `only` names a method this run does not have, or `resume` would mix results
            compiled with and without `gemm_only`.
    """
    import torch

    from kernel_select.device import detect

    if not torch.cuda.is_available():
        raise DeviceError("compare: needs a CUDA GPU (torch.cuda.is_available() is False); it "
                          "measures real torch.compile runs")
    methods = methods_for(topks, exhaustive, nogate_topks, gemm_only)
    to_run = _selected(methods, only)
    device = detect(device_index)
    out_dir = Path(out_dir)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    run = _Run(device=device, device_index=device_index, out_dir=out_dir, timeout_s=timeout_s,
               lut=lut if lut is not None else knobs.kernel_lut_path,
               model=model if model is not None else knobs.gemm_model)
    settings = {"shapes": shapes or "kernel_select/data/compare_suite.json", "topk": list(topks),
                "nogate_topk": list(nogate_topks), "cublas_margin": knobs.gemm_cublas_margin,
                "exhaustive": exhaustive, "lut": run.lut, "model": run.model, "timeout_s": timeout_s,
                "gemm_only": gemm_only}
    if resume and run.json_path.exists():
        results = load_results(run.json_path)
        if results["settings"].get("gemm_only", False) != gemm_only:
            raise OptionError(f"--resume: {run.json_path} was measured "
                              f"{'with' if not gemm_only else 'without'} --gemm-only; resume it the same "
                              "way or write to another --out")
        results = _resumed(results, methods, topks, nogate_topks)
    else:
        results = new_results(device_name=device.name, device_key=device.key, l2_bytes=device.l2_bytes,
                              methods=[m.name for m in methods], settings=settings)
    results.pop("summary", None)  # an earlier run's: rewritten once this run has measured
    _measure_all(run, results, cases, to_run, progress)
    results["summary"] = summary_record(summarize(results))
    write_results(results, run.json_path)
    png_path: Path | None = out_dir / f"compare_{device.key}.png"
    try:
        plot_tradeoff(results, png_path)
    except ImportError:
        log.warning("matplotlib is not installed; skipped %s (pip install matplotlib)", png_path)
        png_path = None
    return results, run.json_path, png_path


@dataclasses.dataclass(frozen=True)
class _Run:
    """What every worker of one `run_compare` call shares."""

    device: DeviceSpec
    device_index: int
    out_dir: Path
    timeout_s: float
    lut: str | None
    model: str | None

    @property
    def json_path(self) -> Path:
        return self.out_dir / f"compare_{self.device.key}.json"


def _selected(methods: list[Method], only: Sequence[str] | None) -> list[Method]:
    if only is None:
        return methods
    unknown = sorted(set(only) - {m.name for m in methods})
    if unknown:
        raise OptionError(f"--only: unknown method(s) {', '.join(unknown)}; this run has "
                          f"{', '.join(m.name for m in methods)}")
    return [m for m in methods if m.name in only]


def _resumed(results: dict[str, Any], methods: list[Method], topks: Sequence[int | str],
             nogate_topks: Sequence[int | str]) -> dict[str, Any]:
    """An earlier run's results, extended by this run's methods and k values."""
    known = list(results["methods"])
    results["methods"] = known + [m.name for m in methods if m.name not in known]
    settings = results["settings"]
    settings["topk"] = sorted({*settings["topk"], *topks}, key=str)
    settings["nogate_topk"] = sorted({*settings.get("nogate_topk", []), *nogate_topks}, key=str)
    return results


def _measure_all(run: _Run, results: dict[str, Any], cases: Sequence[Case], methods: list[Method],
                 progress: bool) -> None:
    """Measure the (case, method) pairs without a successful result, one worker per method,
    and rewrite the JSON after each."""
    from tqdm import tqdm

    entries = {entry["label"]: entry for entry in results["problems"]}
    for case in cases:
        if case.label not in entries:
            entries[case.label] = {"label": case.label, "m": case.problem.m, "n": case.problem.n,
                                   "k": case.problem.k, "dtype": case.problem.dtype, "results": {}}
            results["problems"].append(entries[case.label])
    bar = tqdm(methods, desc="compare", unit="method", disable=not progress)
    for method in bar:
        todo = [case for case in cases if not succeeded(entries[case.label]["results"].get(method.name))]
        if not todo:
            continue
        bar.set_postfix_str(f"{method.name}: {len(todo)} problems")
        specs = [{"label": case.label, "problem": dataclasses.asdict(case.problem),
                  "method": dataclasses.asdict(method), "device_index": run.device_index,
                  "l2_bytes": run.device.l2_bytes, "lut": run.lut, "model": run.model} for case in todo]
        log_path = run.out_dir / "logs" / f"{_safe(method.name)}.log"
        measured = run_worker(specs, log_path, run.timeout_s)
        for case in todo:
            raw = measured.get(case.label, {"error": f"not measured (worker stopped); see {log_path}"})
            entries[case.label]["results"][method.name] = method_result(raw)
            fill_speedups(entries[case.label])
        write_results(results, run.json_path)


def _safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)


def run_worker(specs: list[dict[str, Any]], log_path: Path, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Run one worker process over `specs`; returns label -> raw result for what it finished."""
    with tempfile.TemporaryDirectory(prefix="kernel-select-compare-") as tmp:
        spec_path, result_path = Path(tmp) / "specs.json", Path(tmp) / "results.jsonl"
        spec_path.write_text(json.dumps(specs))
        env = fresh_cache_env(tmp)
        command = [sys.executable, "-m", "kernel_select.offline.compare.worker", "--worker", str(spec_path),
                   str(result_path)]
        try:
            with open(log_path, "w") as log_file:
                subprocess.run(command, env=env, stdout=log_file, stderr=subprocess.STDOUT,
                               timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired:
            log.warning("compare worker timed out after %.0f s; see %s", timeout_s, log_path)
        measured: dict[str, dict[str, Any]] = {}
        if result_path.exists():
            for line in result_path.read_text().splitlines():
                if line.strip():
                    label, raw = json.loads(line)
                    measured[label] = raw
        return measured
