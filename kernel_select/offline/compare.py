"""`kernel-select compare`: stock max-autotune against the top-k handler, through real torch.compile.

For every problem of a suite and every method -- eager `torch.mm`, stock max-autotune (DEFAULT
search space), the kernel_select handler at each k, and optionally stock EXHAUSTIVE -- compile
`torch.mm(a, b)` with mode "max-autotune-no-cudagraphs" and record:
  tuning_s   wall time of the first call of the compiled function (Dynamo + Inductor + autotuning)
  kernel_ms  median time of the compiled function per call, captured in a CUDA graph and replayed
             back to back while rotating over enough input copies to exceed twice the L2 cache,
             so no call finds its operands in L2 (memory-bound problems are not flattered)
  eager_ms   eager `torch.mm` (cuBLAS) timed the same way in the same process, its samples
             interleaved with kernel_ms's: speedups and "slower than eager" compare these two, so
             clock and thermal drift between worker processes cannot masquerade as a speedup
  choice     which kernel Inductor's autotuner found fastest (a Triton config or "aten mm" = cuBLAS)

Every method runs in its own Python process with fresh, empty TORCHINDUCTOR_CACHE_DIR and
TRITON_CACHE_DIR, and compiles the suite's problems one after another (torch._dynamo.reset()
between them), as a user's process compiling a model would. Two methods never share a process:
a compile would reuse what an earlier one left behind (Triton binaries of configs both methods
benchmark, Inductor's in-memory autotuning and codegen caches, the thread-local handler) and bill
the first method for work the later ones get for free. Within a method every problem has a
distinct shape, so nothing is reused. Each worker first compiles an unrelated elementwise kernel
so that one-time start-up (imports, CUDA context, the compile-worker pool) is not counted in any
problem's tuning time. `--resume` keeps the measurements of an earlier run and adds the rest.

Results go to <out>/compare_<device>.json (schema below) and a trade-off plot
<out>/compare_<device>.png (needs matplotlib); `summarize`/`format_summary` make the table the
CLI prints. Only `run_compare` and the worker need a GPU; everything else is plain Python.

Results schema (version 2; version 1 had no eager_ms):
  {"schema_version": 2, "kind": "kernel_select.compare", "created": ISO time,
   "environment": {"device", "device_key", "torch", "triton", "python", "kernel_select", "l2_bytes"},
   "settings": {"shapes", "topk": [...], "nogate_topk": [...], "cublas_margin", "exhaustive", "lut",
                "model", "timeout_s"[, "note"]},
   "methods": ["eager", "stock", "topk-1", ...],
   "problems": [{"label", "m", "n", "k", "dtype",
                 "results": {method: {"tuning_s", "kernel_ms", "eager_ms", "speedup", "choice",
                                      "n_triton", "n_choices", "timing", "max_rel_error", "error"}}}]}
Missing numbers are null; `error` is null on success. speedup = eager_ms / kernel_ms (the eager
method's own kernel_ms where a result has no eager_ms).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import io
import json
import logging
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernel_select import knobs as ks_config
from kernel_select.errors import DatasetError, DeviceError, OptionError, ProblemError
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
RESULTS_KIND = "kernel_select.compare"
#: A method counts as slower than eager when its kernel takes more than this much longer.
SLOWER_THAN_EAGER = 0.02
#: Input copies per timing loop: enough to stream at least this many L2 sizes between reuses.
L2_MULTIPLE = 2
MAX_INPUT_COPIES = 1024
DEFAULT_TOPKS = (1, 2, 4, 8)
#: Largest accepted max |C - A@B| / max |A@B| (bf16 output rounding alone is ~0.004).
MAX_REL_ERROR = 0.02
METHOD_FIELDS = ("tuning_s", "kernel_ms", "eager_ms", "speedup", "choice", "n_triton", "n_choices", "timing",
                 "max_rel_error", "error")


# -- problems ------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    """One problem of a suite, with a human label."""

    problem: Problem
    label: str


def default_suite_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "compare_suite.json"


def load_cases(path: str | Path | None = None) -> list[Case]:
    """Problems from a JSON or CSV shapes file (default: the bundled suite).

    JSON: a list, or {"problems": [...]}, of {"m", "n", "k"[, "dtype"][, "label"]} objects or
    [m, n, k(, dtype)] lists. CSV: columns m,n,k[,dtype][,label], with or without a header row.
    dtype defaults to bfloat16.

    Raises:
        ProblemError: naming the file and entry that is malformed.
    """
    path = Path(path) if path is not None else default_suite_path()
    try:
        text = path.read_text()
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read the shapes file ({exc.strerror})") from None
    entries = _json_entries(text, path) if path.suffix.lower() == ".json" else _csv_entries(text, path)
    cases = [_case(entry, f"{path}: {where}") for where, entry in entries]
    if not cases:
        raise ProblemError(f"{path}: no problems in the shapes file")
    return cases


def _json_entries(text: str, path: Path) -> list[tuple[str, Any]]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProblemError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    if isinstance(data, dict):
        data = data.get("problems")
    if not isinstance(data, list):
        raise ProblemError(f"{path}: expected a list of problems or {{\"problems\": [...]}}")
    return [(f"entry {i}", entry) for i, entry in enumerate(data)]


def _csv_entries(text: str, path: Path) -> list[tuple[str, Any]]:
    rows = [(i + 1, row) for i, row in enumerate(csv.reader(io.StringIO(text)))
            if row and any(cell.strip() for cell in row) and not row[0].lstrip().startswith("#")]
    if not rows:
        return []
    header = [cell.strip().lower() for cell in rows[0][1]]
    if not header[0].lstrip("-").isdigit():
        missing = {"m", "n", "k"} - set(header)
        if missing:
            raise ProblemError(f"{path}: line {rows[0][0]}: header lacks column(s) "
                               f"{', '.join(sorted(missing))}")
        return [(f"line {line}", dict(zip(header, (cell.strip() for cell in row)))) for line, row in rows[1:]]
    return [(f"line {line}", [cell.strip() for cell in row]) for line, row in rows]


def _case(entry: Any, where: str) -> Case:
    if isinstance(entry, (list, tuple)):
        if not 3 <= len(entry) <= 4:
            raise ProblemError(f"{where}: expected [m, n, k] or [m, n, k, dtype], got {entry!r}")
        entry = dict(zip(("m", "n", "k", "dtype"), entry))
    if not isinstance(entry, dict):
        raise ProblemError(f"{where}: expected an object with m, n, k, got {entry!r}")
    unknown = set(entry) - {"m", "n", "k", "dtype", "label"}
    if unknown:
        raise ProblemError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    try:
        problem = Problem(_int(entry.get("m")), _int(entry.get("n")), _int(entry.get("k")),
                          entry.get("dtype") or "bfloat16")
    except ProblemError as exc:
        raise ProblemError(f"{where}: {exc}") from None
    label = str(entry.get("label") or f"{problem.m}x{problem.n}x{problem.k}-{problem.dtype}")
    return Case(problem, label)


def _int(value: Any) -> Any:
    return int(value) if isinstance(value, str) and value.strip().isdigit() else value


# -- methods ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Method:
    """How one measurement compiles the matmul."""

    name: str
    kind: str  # "eager", "stock" or "topk"
    search_space: str = "DEFAULT"
    topk: int | str | None = None
    cublas_margin: str | None = None  # "off" turns the cuBLAS gate off; None keeps the knob's value


def parse_topks(text: str) -> list[int | str]:
    """"1,2,4,8" -> [1, 2, 4, 8] ("DEFAULT" is allowed; "SAME" is what "stock" measures)."""
    values = [ks_config.parse_topk(part, source="--topk") for part in text.split(",") if part.strip()]
    if not values or ks_config.SAME in values:
        raise OptionError(f"--topk: expected comma-separated positive integers (or DEFAULT), got {text!r}")
    return list(dict.fromkeys(values))


def methods_for(topks: Sequence[int | str], exhaustive: bool = False,
                nogate_topks: Sequence[int | str] = ()) -> list[Method]:
    """eager, stock[, stock-exhaustive], topk-K per k, and topk-K-nogate (cuBLAS gate off) per k
    of `nogate_topks`."""
    methods = [Method("eager", "eager"), Method("stock", "stock")]
    if exhaustive:
        methods.append(Method("stock-exhaustive", "stock", search_space="EXHAUSTIVE"))
    methods += [Method(f"topk-{k}", "topk", topk=k) for k in topks]
    methods += [Method(f"topk-{k}-nogate", "topk", topk=k, cublas_margin="off") for k in nogate_topks]
    return methods


# -- driver ---------------------------------------------------------------------------------------

def run_compare(cases: Sequence[Case], *, out_dir: str | Path, topks: Sequence[int | str] = DEFAULT_TOPKS,
                exhaustive: bool = False, nogate_topks: Sequence[int | str] = (), device_index: int = 0,
                lut: str | None = None,
                model: str | None = None, timeout_s: float = 1800.0, shapes: str | None = None,
                progress: bool = True, resume: bool = False,
                only: Sequence[str] | None = None) -> tuple[dict[str, Any], Path, Path | None]:
    """Measure every (case, method), one worker process per method; returns
    (results, json_path, png_path).

    The JSON is rewritten after every method, so an interrupted run keeps what it measured, and
    `resume=True` starts from an existing JSON and measures only the missing (case, method) pairs.
    `timeout_s` bounds each method's worker. `only` restricts this run to the named methods (the
    others keep what an earlier run measured). png_path is None when matplotlib is not installed.

    Raises:
        DeviceError: without a CUDA GPU.
    """
    import torch
    from tqdm import tqdm

    from kernel_select.device import detect

    if not torch.cuda.is_available():
        raise DeviceError("compare: needs a CUDA GPU (torch.cuda.is_available() is False); it "
                          "measures real torch.compile runs")
    device = detect(device_index)
    out_dir = Path(out_dir)
    (out_dir / "logs").mkdir(parents=True, exist_ok=True)
    json_path = out_dir / f"compare_{device.key}.json"
    lut = lut if lut is not None else ks_config.kernel_lut_path
    model = model if model is not None else ks_config.model
    methods = methods_for(topks, exhaustive, nogate_topks)
    if only is not None:
        unknown = sorted(set(only) - {m.name for m in methods})
        if unknown:
            raise OptionError(f"--only: unknown method(s) {', '.join(unknown)}; this run has "
                              f"{', '.join(m.name for m in methods)}")
    settings = {"shapes": shapes or "kernel_select/data/compare_suite.json", "topk": list(topks),
                "nogate_topk": list(nogate_topks), "cublas_margin": ks_config.cublas_margin,
                "exhaustive": exhaustive, "lut": lut, "model": model, "timeout_s": timeout_s}
    if resume and json_path.exists():
        results = load_results(json_path)
        known = list(results["methods"])
        results["methods"] = known + [m.name for m in methods if m.name not in known]
        results["settings"]["topk"] = sorted({*results["settings"]["topk"], *topks}, key=str)
        results["settings"]["nogate_topk"] = sorted({*results["settings"].get("nogate_topk", []), *nogate_topks},
                                                    key=str)
    else:
        results = new_results(device_name=device.name, device_key=device.key, l2_bytes=device.l2_bytes,
                              methods=[m.name for m in methods], settings=settings)
    entries = {entry["label"]: entry for entry in results["problems"]}
    for case in cases:
        if case.label not in entries:
            entries[case.label] = {"label": case.label, "m": case.problem.m, "n": case.problem.n,
                                   "k": case.problem.k, "dtype": case.problem.dtype, "results": {}}
            results["problems"].append(entries[case.label])

    to_run = [m for m in methods if only is None or m.name in only]
    bar = tqdm(to_run, desc="compare", unit="method", disable=not progress)
    for method in bar:
        todo = [case for case in cases
                if not _succeeded(entries[case.label]["results"].get(method.name))]
        if not todo:
            continue
        bar.set_postfix_str(f"{method.name}: {len(todo)} problems")
        specs = [{"label": case.label, "problem": dataclasses.asdict(case.problem),
                  "method": dataclasses.asdict(method), "device_index": device_index,
                  "l2_bytes": device.l2_bytes, "lut": lut, "model": model} for case in todo]
        log_path = out_dir / "logs" / f"{_safe(method.name)}.log"
        measured = _run_worker(specs, log_path, timeout_s)
        for case in todo:
            raw = measured.get(case.label, {"error": f"not measured (worker stopped); see {log_path}"})
            entries[case.label]["results"][method.name] = _method_result(raw)
            _fill_speedups(entries[case.label])
        write_results(results, json_path)
    png_path = out_dir / f"compare_{device.key}.png"
    try:
        plot_tradeoff(results, png_path)
    except ImportError:
        log.warning("matplotlib is not installed; skipped %s (pip install matplotlib)", png_path)
        png_path = None
    return results, json_path, png_path


def _safe(label: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)


def _run_worker(specs: list[dict[str, Any]], log_path: Path, timeout_s: float) -> dict[str, dict[str, Any]]:
    """Run one worker process over `specs`; returns label -> raw result for what it finished."""
    package_root = str(Path(__file__).resolve().parent.parent.parent)
    with tempfile.TemporaryDirectory(prefix="kernel-select-compare-") as tmp:
        spec_path, result_path = Path(tmp) / "specs.json", Path(tmp) / "results.jsonl"
        spec_path.write_text(json.dumps(specs))
        env = {**os.environ,
               "TORCHINDUCTOR_CACHE_DIR": str(Path(tmp) / "inductor"),
               "TRITON_CACHE_DIR": str(Path(tmp) / "triton"),
               "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)}
        command = [sys.executable, "-m", "kernel_select.offline.compare", "--worker", str(spec_path),
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


def _method_result(raw: dict[str, Any]) -> dict[str, Any]:
    result = {name: raw.get(name) for name in METHOD_FIELDS}
    for name, value in result.items():  # strict JSON: no NaN or inf
        if isinstance(value, float) and not math.isfinite(value):
            result[name] = None
    result["speedup"] = None
    return result


def _fill_speedups(entry: dict[str, Any]) -> None:
    for method in entry["results"]:
        ms, eager = entry["results"][method].get("kernel_ms"), _eager_ms(entry, method)
        entry["results"][method]["speedup"] = eager / ms if _positive(eager) and _positive(ms) else None


def _eager_ms(entry: dict[str, Any], method: str) -> float | None:
    """The eager time to compare `method` with: measured side by side in its own process, else
    the eager method's (a separate process: drift between the two is not cancelled)."""
    own = entry["results"][method].get("eager_ms")
    return own if _positive(own) else entry["results"].get("eager", {}).get("kernel_ms")


def _positive(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


# -- worker (runs in its own process, on the GPU) ---------------------------------------------------

def input_copies(bytes_per_call: int, l2_bytes: int) -> int:
    """How many input sets to rotate over so that L2_MULTIPLE x L2 bytes stream between reuses."""
    if bytes_per_call <= 0:
        raise ValueError(f"bytes_per_call must be positive, got {bytes_per_call}")
    return max(2, min(MAX_INPUT_COPIES, math.ceil(L2_MULTIPLE * l2_bytes / bytes_per_call)))


def _measure(spec: dict[str, Any]) -> dict[str, Any]:
    import torch

    problem = Problem(**spec["problem"])
    method = Method(**spec["method"])
    device = torch.device("cuda", spec["device_index"])
    torch.cuda.set_device(device)
    dtype = getattr(torch, problem.dtype)

    def make_inputs() -> tuple[Any, Any]:
        return (torch.randn(problem.m, problem.k, device=device, dtype=dtype),
                torch.randn(problem.k, problem.n, device=device, dtype=dtype))

    def mm(a: Any, b: Any) -> Any:
        return torch.mm(a, b)

    a, b = make_inputs()
    result: dict[str, Any] = {"tuning_s": 0.0, "choice": "aten mm", "n_triton": 0, "n_choices": 0}
    fn: Callable[..., Any] = torch.mm
    if method.kind != "eager":
        import kernel_select.inductor as ks_inductor

        _warm_up_compiler(device)
        if method.kind == "topk":
            ks_inductor.install(topk=method.topk, kernel_lut_path=spec.get("lut"), model=spec.get("model"),
                                cublas_margin=method.cublas_margin)
        fn = torch.compile(mm, options=ks_inductor.max_autotune_options(method.search_space), dynamic=False)
        with ks_inductor.record_autotuning() as records:
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn(a, b)
            torch.cuda.synchronize()
            result["tuning_s"] = time.perf_counter() - start
        tuned = [record for record in records if record.op == "mm"]
        winner = tuned[-1].winner if tuned else None
        result["choice"] = winner.label() if winner else None
        result["n_triton"] = tuned[-1].count("triton") if tuned else 0
        result["n_choices"] = len(tuned[-1].timings) if tuned else 0
    out = fn(a, b).float()
    reference = a.float() @ b.float()
    error = float((out - reference).abs().max() / reference.abs().max().clamp_min(1e-6))
    result["max_rel_error"] = error
    if not error <= MAX_REL_ERROR:  # also catches NaN: a fast wrong kernel must not count
        result["error"] = f"wrong result: max |C - A@B| / max |A@B| = {error:.3g} > {MAX_REL_ERROR}"
    bytes_per_call = (problem.m * problem.k + problem.k * problem.n) * problem.dtype_bytes
    copies = input_copies(bytes_per_call, int(spec["l2_bytes"]))
    inputs = [make_inputs() for _ in range(copies)]
    if method.kind == "eager":
        times, result["timing"] = _kernel_ms({"kernel": fn}, inputs)
        times["eager"] = times["kernel"]
    else:
        times, result["timing"] = _kernel_ms({"kernel": fn, "eager": torch.mm}, inputs)
    result["kernel_ms"], result["eager_ms"] = times["kernel"], times["eager"]
    return result


_warmed_up = False


def _warm_up_compiler(device: Any) -> None:
    """Once per worker process: pay imports, CUDA context and compile-pool start-up up front."""
    global _warmed_up
    if _warmed_up:
        return
    _warmed_up = True
    import torch

    x = torch.randn(4096, device=device)
    torch.compile(lambda t: torch.relu(t * 2.0 + 1.0))(x)
    torch.cuda.synchronize()
    torch._dynamo.reset()


def _kernel_ms(fns: dict[str, Callable[..., Any]], inputs: list[tuple[Any, Any]], *, samples: int = 30,
               min_sample_ms: float = 2.0) -> tuple[dict[str, float], str]:
    """Median per-call time of each fn over back-to-back calls that rotate through `inputs`.

    The functions' samples are interleaved (a sample of each, then the next round), so slow drift
    in clocks or temperature affects them alike and their ratio stays honest.
    """
    import torch

    replays, timing = {}, "cuda_graph"
    for name, fn in fns.items():
        try:
            replays[name] = _capture(fn, inputs)
        except Exception as exc:  # noqa: BLE001 -- fall back to plain launches (includes launch overhead)
            log.warning("CUDA graph capture of %s failed (%s); timing eager launches", name, exc)
            replays[name], timing = _launches(fn, inputs), "events"
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def sample(replay: Callable[[], None], repeats: int) -> float:
        start.record()
        for _ in range(repeats):
            replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    repeats = {}
    for name, replay in replays.items():
        replay()  # warm-up
        torch.cuda.synchronize()
        repeats[name] = max(1, math.ceil(min_sample_ms / max(sample(replay, 1), 1e-3)))
    per_call: dict[str, list[float]] = {name: [] for name in replays}
    for _ in range(samples):
        for name, replay in replays.items():
            per_call[name].append(sample(replay, repeats[name]) / (repeats[name] * len(inputs)))
    return {name: statistics.median(values) for name, values in per_call.items()}, timing


def _launches(fn: Callable[..., Any], inputs: list[tuple[Any, Any]]) -> Callable[[], None]:
    def replay() -> None:
        for a, b in inputs:
            fn(a, b)

    return replay


def _capture(fn: Callable[..., Any], inputs: list[tuple[Any, Any]]) -> Callable[[], None]:
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture stream, as CUDA graphs require
        for a, b in inputs[:3]:
            fn(a, b)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for a, b in inputs:
            fn(a, b)
    return graph.replay


def _worker_main(argv: Sequence[str]) -> int:
    if len(argv) != 3 or argv[0] != "--worker":
        print("usage: python -m kernel_select.offline.compare --worker SPECS.json RESULTS.jsonl", file=sys.stderr)
        return 2
    import torch

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    specs = json.loads(Path(argv[1]).read_text())
    for spec in specs:
        try:
            result = _measure(spec)
        except Exception as exc:  # noqa: BLE001 -- report it in the results, keep the run going
            log.exception("measurement of %s failed", spec["label"])
            result = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            if spec["method"]["kind"] == "topk":
                import kernel_select.inductor as ks_inductor

                ks_inductor.uninstall()
            torch._dynamo.reset()
        with open(argv[2], "a") as out:  # one line per problem: a killed worker keeps what it did
            out.write(json.dumps([spec["label"], result]) + "\n")
    return 0


# -- results ---------------------------------------------------------------------------------------

def new_results(*, device_name: str, device_key: str, l2_bytes: int, methods: list[str],
                settings: dict[str, Any]) -> dict[str, Any]:
    import platform

    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    from kernel_select import __version__

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
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(results, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)


def load_results(path: str | Path) -> dict[str, Any]:
    """Read and validate a comparison JSON.

    Raises:
        DatasetError: naming the file and the first field that is wrong.
    """
    path = Path(path)
    try:
        results = json.loads(Path(path).read_text())
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the comparison results ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    validate_results(results, str(path))
    return results


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
    methods = results["methods"]
    if not isinstance(methods, list) or "eager" not in methods or "stock" not in methods:
        fail("'methods' must list 'eager', 'stock' and the methods compared")
    if not isinstance(results["problems"], list):
        fail("'problems' must be a list")
    for i, problem in enumerate(results["problems"]):
        for key in ("label", "m", "n", "k", "dtype", "results"):
            if key not in problem:
                fail(f"problems[{i}]: missing {key!r}")
        for name, result in problem["results"].items():
            if name not in methods:
                fail(f"problems[{i}] ({problem['label']}): unknown method {name!r}")
            missing = [f for f in METHOD_FIELDS if f not in result]
            if missing:
                fail(f"problems[{i}] ({problem['label']}).{name}: missing {', '.join(missing)}")
            for number in ("tuning_s", "kernel_ms", "eager_ms", "speedup"):
                value = result[number]
                if value is not None and not _positive(value) and not (number == "tuning_s" and value == 0):
                    fail(f"problems[{i}] ({problem['label']}).{name}.{number}: expected a positive "
                         f"number or null, got {value!r}")


# -- summary -------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class MethodSummary:
    """One method over the problems every method measured successfully."""

    method: str
    problems: int
    kernel_ratio_vs_stock: float  # geomean of kernel_ms / stock kernel_ms (< 1: faster kernels)
    tuning_ratio_vs_stock: float  # total tuning_s / stock total tuning_s (< 1: cheaper tuning)
    total_tuning_s: float
    speedup_vs_eager: float  # geomean of eager kernel_ms / kernel_ms
    slower_than_eager: int  # problems whose kernel is > SLOWER_THAN_EAGER slower than eager


@dataclasses.dataclass(frozen=True)
class Summary:
    rows: list[MethodSummary]
    problems_used: int
    problems_excluded: list[str]  # labels with a failed or missing measurement


def summarize(results: dict[str, Any]) -> Summary:
    """Per-method aggregates over the problems where eager, stock and every method succeeded."""
    methods = [m for m in results["methods"] if m != "eager"]
    used, excluded = [], []
    for problem in results["problems"]:
        ok = all(_succeeded(problem["results"].get(m)) for m in ["eager", *methods])
        (used if ok else excluded).append(problem)
    rows = []
    if used:
        stock_tuning = sum(p["results"]["stock"]["tuning_s"] or 0.0 for p in used)
        # Kernel times relative to the eager time measured beside them: ratios between methods
        # (measured in different processes) are ratios of these.
        stock_rel = [p["results"]["stock"]["kernel_ms"] / _eager_ms(p, "stock") for p in used]
        for method in methods:
            rel = [p["results"][method]["kernel_ms"] / _eager_ms(p, method) for p in used]
            tuning = sum(p["results"][method]["tuning_s"] or 0.0 for p in used)
            rows.append(MethodSummary(
                method=method, problems=len(used),
                kernel_ratio_vs_stock=_geomean([r / s for r, s in zip(rel, stock_rel)]),
                tuning_ratio_vs_stock=tuning / stock_tuning if stock_tuning > 0 else math.nan,
                total_tuning_s=tuning,
                speedup_vs_eager=_geomean([1 / r for r in rel]),
                slower_than_eager=sum(r > 1 + SLOWER_THAN_EAGER for r in rel),
            ))
    return Summary(rows=rows, problems_used=len(used), problems_excluded=[p["label"] for p in excluded])


def _succeeded(result: dict[str, Any] | None) -> bool:
    return bool(result) and result.get("error") is None and _positive(result.get("kernel_ms"))


def _geomean(values: Sequence[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def format_summary(summary: Summary) -> str:
    """A plain-text table of `summary` (ratios < 1 are better)."""
    header = (f"{'method':<18}{'kernel/stock':>14}{'tuning/stock':>14}{'tuning [s]':>12}"
              f"{'vs eager':>10}{'slower than eager':>19}")
    lines = [f"{summary.problems_used} problems"
             + (f" ({len(summary.problems_excluded)} excluded, a measurement failed: "
                f"{', '.join(summary.problems_excluded)})" if summary.problems_excluded else ""),
             header, "-" * len(header)]
    for row in summary.rows:
        lines.append(f"{row.method:<18}{row.kernel_ratio_vs_stock:>14.3f}{row.tuning_ratio_vs_stock:>14.3f}"
                     f"{row.total_tuning_s:>12.1f}{row.speedup_vs_eager:>9.3f}x{row.slower_than_eager:>19d}")
    return "\n".join(lines)


def summary_frame(results: dict[str, Any]) -> Any:
    """The summary as a pandas DataFrame indexed by method (for notebooks)."""
    import pandas as pd

    rows = [dataclasses.asdict(row) for row in summarize(results).rows]
    return pd.DataFrame(rows).set_index("method") if rows else pd.DataFrame()


def problem_frame(results: dict[str, Any]) -> Any:
    """One row per problem: sizes, eager ms, and each method's kernel ms, speedup and choice."""
    import pandas as pd

    rows = []
    for problem in results["problems"]:
        row: dict[str, Any] = {key: problem[key] for key in ("label", "m", "n", "k")}
        for method, result in problem["results"].items():
            row[f"{method} ms"] = result["kernel_ms"]
            if method != "eager":
                row[f"{method} tuning s"] = result["tuning_s"]
                row[f"{method} choice"] = result["choice"]
        rows.append(row)
    return pd.DataFrame(rows).set_index("label")


def plot_tradeoff(results: dict[str, Any], path: str | Path | None = None) -> Any:
    """Total tuning seconds (x) against geomean speedup over eager (y), one point per method.

    Returns the matplotlib Figure; also saves it to `path` when given. Needs matplotlib.
    """
    from matplotlib.figure import Figure  # no pyplot: no global state, works headless

    summary = summarize(results)
    rows = {row.method: row for row in summary.rows}
    fig = Figure(figsize=(7.5, 4.8), layout="constrained")
    ax = fig.add_subplot()
    for pattern, style, label in ((r"topk-(\w+)", ("o-", "tab:blue"), "kernel_select top-k"),
                                  (r"topk-(\w+)-nogate", ("^:", "tab:green"), "kernel_select top-k, cuBLAS gate off"),
                                  (r"topk-(\w+)-repeat", ("x", "tab:purple"), "kernel_select top-k, repeated run")):
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


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))

