"""Serving measurement on a GPU: one process per method, fresh caches.

    python -m kernel_select.offline.serving.serving_bench --out results/serving_h100.json

The program is the first user's: nn.Linear(3420 -> 1280) in bf16, its forward GEMM and both
backward GEMMs (grad input, grad weight) in one compiled function, the sequence length marked
dynamic (560..8192) and served at 560, 1024, 2048, 4096, 8192. Methods: eager, mode="default",
stock max-autotune, kernel_select top-4 with dynamic ranking (under the mode, and as README's recipe:
GEMM-only options with precompile_in_process), and the pretuned pinned LUT (made
first with `pretune` on the same GEMMs unless --lut names one). Per method: compile wall time
(all first calls), autotune benchmarks run (choices Inductor timed), and per length the kernel
time (CUDA-graph replays over L2-cold input copies, offline.compare.timing).

`best_ms` per length is the harness's best for the step when `--harness` names a parquet that
`kernel-select bench` wrote for `--harness-shapes` (the sum over the step's three GEMMs of the
fastest Triton config or cuBLAS, each timed alone in the operand layout the program runs it in:
forward x @ W.t() "nt", grad input grad_y @ W "nn", grad weight grad_y.t() @ x "tn", as pretune
discovers them), else the fastest measured method at that length; `best_source` says which.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LENGTHS = (560, 1024, 2048, 4096, 8192)
LOW, HIGH = 560, 8192
IN_FEATURES, OUT_FEATURES = 3420, 1280
METHODS = ("eager", "default", "max_autotune", "topk4_dynamic", "topk4_dynamic_gemm", "pinned_lut")


#: Each GEMM's operand layout in the program (`_program`): the layouts pretune discovers from the
#: operands' strides for the same Linear.
LAYOUTS = {"forward": "nt", "grad_input": "nn", "grad_weight": "tn"}


def gemm_sizes(length: int) -> dict[str, tuple[int, int, int]]:
    """The step's GEMMs at sequence length `length`: name -> (m, n, k)."""
    return {"forward": (length, OUT_FEATURES, IN_FEATURES),  # x @ W^T
            "grad_input": (length, IN_FEATURES, OUT_FEATURES),  # grad_y @ W
            "grad_weight": (OUT_FEATURES, IN_FEATURES, length)}  # grad_y^T @ x


def shapes() -> list[dict[str, Any]]:
    """The program's GEMMs as a pretune shapes file, one pinned entry each over the length range:
    forward and grad input have the length as M (an m range), the grad weight has it as K (a k
    range), so every compile's hint finds its pin."""
    length = {"min": LOW, "max": HIGH}
    return [{"op": "mm", "n": OUT_FEATURES, "k": IN_FEATURES, "m": length, "layout": LAYOUTS["forward"]},
            {"op": "mm", "n": IN_FEATURES, "k": OUT_FEATURES, "m": length, "layout": LAYOUTS["grad_input"]},
            {"op": "mm", "n": IN_FEATURES, "k": length, "m": OUT_FEATURES, "layout": LAYOUTS["grad_weight"]}]


def harness_shapes() -> list[dict[str, Any]]:
    """The step's three GEMMs at every served length, each in the layout the program runs it in,
    as a `kernel-select bench` shapes file."""
    return [{"m": m, "n": n, "k": k, "dtype": "bfloat16", "layout": LAYOUTS[gemm],
             "source": f"serving {gemm} L={length}"}
            for length in LENGTHS for gemm, (m, n, k) in gemm_sizes(length).items()]


def harness_best(rows: Any) -> dict[str, float]:
    """Per served length, the sum over its three GEMMs of the fastest timed choice in `rows` (a
    bench DataFrame) in the GEMM's own layout; a length with a GEMM missing from `rows` is left out."""
    timed = rows[rows["status"].isin(("ok", "capped")) & rows["runtime_ms"].notna()]
    fastest = timed.groupby(["m", "n", "k", "layout"])["runtime_ms"].min().to_dict()
    best = {}
    for length in LENGTHS:
        gemms = [(s["m"], s["n"], s["k"], s["layout"]) for s in harness_shapes()
                 if s["source"].endswith(f"L={length}")]
        if all(g in fastest for g in gemms):
            best[str(length)] = float(sum(fastest[g] for g in gemms))
    return best


def _program():  # noqa: ANN202 -- (fn(x, grad_y), weight)
    import torch

    weight = torch.randn(OUT_FEATURES, IN_FEATURES, device="cuda", dtype=torch.bfloat16) / IN_FEATURES**0.5

    def step(x, grad_y):  # noqa: ANN001, ANN202 -- forward, grad input, grad weight
        return x @ weight.t(), grad_y @ weight, grad_y.t() @ x

    return step


def run_method(method: str, lut: str | None, samples: int) -> dict[str, Any]:
    """Measure one method in this (fresh) process."""
    import torch

    import kernel_select.inductor as ks_inductor
    from kernel_select.offline.compare.timing import input_copies, kernel_ms

    torch.compiler.config.force_disable_caches = True
    step = _program()
    fn, handler = step, None
    if method == "default":
        fn = torch.compile(step)
    elif method != "eager":
        options = ks_inductor.max_autotune_options()
        if method == "topk4_dynamic":
            handler = ks_inductor.install(gemm_topk=4, gemm_dynamic_m=f"{LOW}..{HIGH}")
        elif method == "topk4_dynamic_gemm":  # CUDA graphs off, as for every method here
            handler = ks_inductor.install(gemm_topk=4, gemm_dynamic_m=f"{LOW}..{HIGH}",
                                          gemm_precompile_in_process=True)
            # Shape padding off: on torch 2.11 its heuristic guards the length below 1280 and splits
            # the dynamic graph in three (docs/guide.md, "Serving: dynamic shapes and pinned LUTs").
            options = ks_inductor.gemm_autotune_options(cudagraphs=False, shape_padding=False)
        elif method == "pinned_lut":
            handler = ks_inductor.install(kernel_lut_path=lut)
        fn = torch.compile(step, options=options)
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    result: dict[str, Any] = {"compile_s": 0.0, "benchmarks": 0, "lengths": {}}
    with ks_inductor.record_autotuning() as records:
        for length in LENGTHS:
            x = torch.randn(length, IN_FEATURES, device="cuda", dtype=torch.bfloat16)
            grad_y = torch.randn(length, OUT_FEATURES, device="cuda", dtype=torch.bfloat16)
            # As the user did: no range. Tracing guards the length below N = 1280 (a strict
            # 560..8192 range fails there), so lengths >= 1280 compile a second dynamic graph.
            torch._dynamo.mark_dynamic(x, 0)
            torch._dynamo.mark_dynamic(grad_y, 0)
            start = time.perf_counter()
            fn(x, grad_y)
            torch.cuda.synchronize()
            result["compile_s"] += time.perf_counter() - start if method != "eager" else 0.0
            bytes_per_call = 2 * length * (IN_FEATURES + OUT_FEATURES)
            copies = [(x.clone(), grad_y.clone()) for _ in range(input_copies(bytes_per_call, l2))]
            times, timing = kernel_ms({method: fn}, copies, samples=samples)
            result["lengths"][str(length)] = {"kernel_ms": times[method], "timing": timing}
    result["benchmarks"] = sum(len(r.timings) for r in records)
    result["autotuned_gemms"] = len(records)
    # Which GEMMs were autotuned (a pinned LUT should leave none): their input sizes as Inductor
    # saw them, symbols included, and how many choices each timed.
    result["autotuned"] = [{"op": r.op, "shapes": r.shapes, "choices": len(r.timings)} for r in records]
    if handler is not None:
        ks_inductor.uninstall()
    return result


def _in_subprocess(method: str, lut: str | None, samples: int, log_dir: Path) -> dict[str, Any]:
    command = [sys.executable, "-m", "kernel_select.offline.serving.serving_bench", "--worker", method,
               "--samples", str(samples)] + (["--lut", lut] if lut else [])
    done = subprocess.run(command, capture_output=True, text=True, timeout=480)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / f"{method}.log").write_text(done.stderr)  # Inductor's AUTOTUNE tables, warnings
    if done.returncode != 0:
        stderr = done.stderr.strip()
        return {"error": stderr.splitlines()[-1] if stderr else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def assemble(per_method: dict[str, dict[str, Any]],
             harness: dict[str, float] | None = None) -> dict[str, Any]:
    """Results with `best_ms` per length beside each kernel time: the harness's best (`harness`,
    from `harness_best`) where it covers every length, else the fastest measured method."""
    fastest = {length: min((r["lengths"][length]["kernel_ms"] for r in per_method.values() if "lengths" in r),
                           default=None) for length in map(str, LENGTHS)}
    use_harness = bool(harness) and all(str(length) in harness for length in LENGTHS)
    best = {length: harness[length] for length in fastest} if use_harness else fastest
    for result in per_method.values():
        for length, entry in result.get("lengths", {}).items():
            entry["best_ms"] = best[length]
            entry["ratio_to_best"] = entry["kernel_ms"] / best[length] if best[length] else None
    return {"program": f"Linear {IN_FEATURES}->{OUT_FEATURES} bf16, forward + grad input + grad weight, "
                       f"mark_dynamic length {LOW}..{HIGH}",
            "lengths": list(LENGTHS),
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
        if "lengths" in result:
            lengths = [int(length) for length in result["lengths"]]
            axes.plot(lengths, [e["ratio_to_best"] for e in result["lengths"].values()], marker="o",
                      label=f"{method} (compile {result['compile_s']:.1f} s, "
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
    """One row per method: compile seconds, benchmarks, and per length kernel ms and ratio to best."""
    import pandas as pd

    rows = {}
    for method, result in results["methods"].items():
        row: dict[str, Any] = {"compile_s": result.get("compile_s"), "benchmarks": result.get("benchmarks"),
                               "error": result.get("error")}
        for length, entry in result.get("lengths", {}).items():
            row[f"{length} ms"] = entry["kernel_ms"]
            row[f"{length} / best"] = entry["ratio_to_best"]
        rows[method] = row
    frame = pd.DataFrame.from_dict(rows, orient="index")
    return frame.drop(columns="error") if frame["error"].isna().all() else frame


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/serving_h100.json")
    parser.add_argument("--lut", default=None,
                        help="pinned LUT to serve with (default: pretune one next to --out)")
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--harness", default=None,
                        help="bench parquet of --harness-shapes: best_ms per length from the harness")
    parser.add_argument("--harness-shapes", default=None, metavar="PATH",
                        help="write the step's GEMMs at every length as a bench shapes file and exit")
    parser.add_argument("--reassemble", action="store_true",
                        help="measure nothing: recompute best_ms of an existing --out from --harness")
    parser.add_argument("--worker", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_method(args.worker, args.lut, args.samples)))
        return 0
    if args.harness_shapes:
        Path(args.harness_shapes).write_text(json.dumps(harness_shapes(), indent=1) + "\n")
        return 0
    out = Path(args.out)
    if args.reassemble:
        if not args.harness:
            parser.error("--reassemble needs --harness")
        from kernel_select.offline.data import dataset

        old = json.loads(out.read_text())
        results = old | assemble(old["methods"], harness_best(dataset.read(args.harness)))
        out.write_text(json.dumps(results, indent=2) + "\n")
        plot(results, out.with_suffix(".png"))
        return 0
    lut = args.lut or str(out.with_name(out.stem + "_pinned_lut.json"))
    pretune_s = None
    if args.lut is None:
        shapes_path = out.with_name(out.stem + "_shapes.json")
        shapes_path.parent.mkdir(parents=True, exist_ok=True)
        shapes_path.write_text(json.dumps(shapes()))
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kernel_select.cli", "pretune", "--shapes", str(shapes_path),
                        "--out", lut, "-k", "2", "--buckets", "3", "--json"], check=True, timeout=420)
        pretune_s = time.perf_counter() - start
    log_dir = out.with_name(out.stem + "_logs")
    per_method = {method: _in_subprocess(method, lut, args.samples, log_dir) for method in METHODS}
    harness = None
    if args.harness:
        from kernel_select.offline.data import dataset

        harness = harness_best(dataset.read(args.harness))
    results = assemble(per_method, harness) | {"pretune_s": pretune_s, "lut": lut}
    out.write_text(json.dumps(results, indent=2) + "\n")
    plot(results, out.with_suffix(".png"))
    print(json.dumps({m: {"compile_s": r.get("compile_s"), "benchmarks": r.get("benchmarks"),
                          "error": r.get("error")}
                      for m, r in per_method.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
