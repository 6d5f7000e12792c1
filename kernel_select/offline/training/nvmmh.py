"""The nvMatmulHeuristics baseline of `evaluate` (optional: skipped when the package is absent).

nvMatmulHeuristics (NVIDIA's analytical GEMM heuristics) suggests configs for a Triton target;
its suggestions are mapped onto the measured configs and scored like any other method's top-k.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from kernel_select.device import DeviceSpec
from kernel_select.offline.metrics import measured_lookup, oracle_ms, topk_dict

log = logging.getLogger(__name__)

_NVMMH_GPUS = {"h100": "H100_SXM", "h100-pcie": "H100_PCIE", "h200": "H200_SXM", "a100": "A100_SXM_80GB"}
# input, accumulator, output: T = bf16, H = fp16, S = fp32
_NVMMH_PRECISION = {"bfloat16": "TST", "float16": "HSH", "float32": "SSS"}
_NVMMH_COLS = ["block_m", "block_n", "block_k", "num_stages", "num_warps"]  # no GROUP_M in its configs


def nvmmh_report(rows: pd.DataFrame, problems: pd.DataFrame, groups: np.ndarray, runtime: np.ndarray,
                 spec: DeviceSpec, ks: Sequence[int]) -> dict[str, Any]:
    """nvMatmulHeuristics' TRITON target: its top-k suggestions, mapped onto measured configs.

    A suggestion maps to (cta_m, cta_n, cta_k, stages, (cta_m/warp_m) * (cta_n/warp_n) warps);
    split-K suggestions and those outside the measured space are dropped, so its k counts the
    suggestions that could be scored.
    """
    try:
        import nvMatmulHeuristics as nv
    except ImportError:
        return {"skipped": "nvMatmulHeuristics is not installed (pip install nvidia-matmul-heuristics)"}
    if spec.key not in _NVMMH_GPUS:
        return {"skipped": f"nvMatmulHeuristics has no hardware descriptor mapped for {spec.key}"}
    try:
        heuristics = nv.NvMatmulHeuristicsInterfaceEx(
            backend=nv.NvMatmulHeuristicsTarget.TRITON,
            flags=nv.NvMatmulHeuristicsFlags.PERF_MODEL_BASED_AUTO_TUNING,
            load_discovery_implicitly=True,
            gpu=getattr(nv.NvMatmulHeuristicsNvidiaGpu, _NVMMH_GPUS[spec.key]))
    except Exception as exc:  # a foreign library: any failure means "no baseline", not a crash
        return {"skipped": f"nvMatmulHeuristics could not be initialized: {exc}"}
    oracle = oracle_ms(groups, runtime)
    measured = measured_lookup(groups, rows[_NVMMH_COLS].itertuples(index=False, name=None), runtime)
    per_problem = np.full((len(problems), len(ks)), np.nan)
    suggested = mapped = failed = 0
    for i, (m, n, k, dtype) in enumerate(problems.itertuples(index=False, name=None)):
        try:
            problem = heuristics.makeNvMatmulHeuristicsProblem(
                int(m), int(n), int(k), nv.NvMatmulHeuristicsMatmulLayout.NN_ROW_MAJOR)
            results = heuristics.get(problem, max(ks), precision=_NVMMH_PRECISION[str(dtype)])
            keys = [_nvmmh_key(result["kernel"]) for result in results]
        except Exception as exc:  # noqa: BLE001 - see above
            log.debug("nvMatmulHeuristics failed on %sx%sx%s: %s", m, n, k, exc)
            failed += 1
            continue
        times = [measured[(i, key)] for key in keys if key is not None and (i, key) in measured]
        suggested, mapped = suggested + len(keys), mapped + len(times)
        for j, top in enumerate(ks):
            if times[:top]:
                per_problem[i, j] = oracle[i] / min(times[:top])
    covered = np.all(np.isfinite(per_problem), axis=1)
    if not covered.any():
        return {"skipped": f"no nvMatmulHeuristics suggestion matched a measured config "
                           f"({suggested} suggestions, {failed} failed queries)"}
    return {"topk": topk_dict(per_problem[covered], ks), "problems": int(covered.sum()),
            "mapped_fraction": mapped / max(suggested, 1), "failed_queries": failed}


def _nvmmh_key(kernel: Any) -> tuple[int, ...] | None:
    def field(*names: str) -> int:
        for name in names:
            in_dict = isinstance(kernel, dict) and name in kernel
            value = kernel[name] if in_dict else getattr(kernel, name, None)
            if value is not None:
                return int(value)
        raise KeyError(names[0])

    if field("split_k") > 1:
        return None  # Inductor's mm template has no split-K
    cta_m, cta_n = field("cta_tile_m"), field("cta_tile_n")
    warps = (cta_m // field("warp_tile_m")) * (cta_n // field("warp_tile_n"))
    return (cta_m, cta_n, field("cta_tile_k"), field("stages", "load_stages"), warps)
