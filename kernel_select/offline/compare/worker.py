"""The comparison's worker: runs in its own process on the GPU, compiles and times one method
over a list of problems, and appends one JSON line per problem to its results file.

    python -m kernel_select.offline.compare.worker --worker SPECS.json RESULTS.jsonl

It uses only the public `kernel_select.inductor` API (install, uninstall, max_autotune_options,
record_autotuning), as a user's program would.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernel_select.offline.compare.suite import Method
from kernel_select.offline.compare.timing import input_copies, kernel_ms
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

#: Largest accepted max |C - A@B| / max |A@B| (bf16 output rounding alone is ~0.004).
MAX_REL_ERROR = 0.02


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
            ks_inductor.install(gemm_topk=method.topk, kernel_lut_path=spec.get("lut"),
                                gemm_model=spec.get("model"), gemm_cublas_margin=method.cublas_margin)
        if method.gemm_only:  # CUDA graphs off: the kernel is timed the same way for every method
            options = ks_inductor.gemm_autotune_options(
                cudagraphs=False, max_autotune_gemm_search_space=method.search_space)
        else:
            options = ks_inductor.max_autotune_options(method.search_space)
        fn = torch.compile(mm, options=options, dynamic=False)
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
        times, result["timing"] = kernel_ms({"kernel": fn}, inputs)
        times["eager"] = times["kernel"]
    else:
        times, result["timing"] = kernel_ms({"kernel": fn, "eager": torch.mm}, inputs)
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


def _worker_main(argv: Sequence[str]) -> int:
    if len(argv) != 3 or argv[0] != "--worker":
        print("usage: python -m kernel_select.offline.compare.worker --worker SPECS.json RESULTS.jsonl",
              file=sys.stderr)
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


if __name__ == "__main__":
    sys.exit(_worker_main(sys.argv[1:]))
