"""The nvMatmulHeuristics baseline of `evaluate` (optional: skipped when the package is absent).

nvMatmulHeuristics (NVIDIA's analytical GEMM heuristics, `pip install 'kernel_select[baselines]'`)
suggests configs for a Triton target; its suggestions are mapped onto the measured configs and
scored like any other method's top-k. Each problem is asked about in its own operand layout.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from kernel_select.device import DeviceSpec
from kernel_select.layouts import DEFAULT_LAYOUT
from kernel_select.offline.metrics import measured_lookup, oracle_ms, topk_dict

log = logging.getLogger(__name__)

_NVMMH_GPUS = {"h100": "H100_SXM", "h100-pcie": "H100_PCIE", "h200": "H200_SXM", "a100": "A100_SXM_80GB"}
# input, accumulator, output: T = bf16, H = fp16, S = fp32
_NVMMH_PRECISION = {"bfloat16": "TST", "float16": "HSH", "float32": "SSS"}
_NVMMH_COLS = ["block_m", "block_n", "block_k", "num_stages", "num_warps"]  # no GROUP_M in its configs
# Our layout letters (A then B; "t": stored transposed, A as [K, M]) are its row-major layouts' letters:
# its own boolsToNvMatmulHeuristicsLayout(trans_a, trans_b) maps trans_a to TN_ROW_MAJOR.
_NVMMH_LAYOUTS = {"nn": "NN_ROW_MAJOR", "nt": "NT_ROW_MAJOR", "tn": "TN_ROW_MAJOR", "tt": "TT_ROW_MAJOR"}


def nvmmh_report(rows: pd.DataFrame, problems: pd.DataFrame, groups: np.ndarray, runtime: np.ndarray,
                 spec: DeviceSpec, ks: Sequence[int]) -> dict[str, Any]:
    """nvMatmulHeuristics' TRITON target: its top-k suggestions, mapped onto measured configs.

    `problems`: one row per group code with m, n, k, dtype and layout (a frame without `layout` is
    all "nn"). A suggestion maps to (cta_m, cta_n, cta_k, stages, (cta_m/warp_m) * (cta_n/warp_n)
    warps); split-K suggestions, repeats of an earlier suggestion's config and those outside the
    measured space are dropped, so its k counts the distinct suggestions that could be scored.
    """
    try:
        import nvMatmulHeuristics as nv
    except ImportError:
        return {"skipped": "nvMatmulHeuristics is not installed (pip install 'kernel_select[baselines]')"}
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
    asked = problems.reindex(columns=["m", "n", "k", "dtype", "layout"], fill_value=DEFAULT_LAYOUT)
    for i, (m, n, k, dtype, layout) in enumerate(asked.itertuples(index=False, name=None)):
        try:
            nv_layout = getattr(nv.NvMatmulHeuristicsMatmulLayout, _NVMMH_LAYOUTS[str(layout)])
            problem = heuristics.makeNvMatmulHeuristicsProblem(int(m), int(n), int(k), nv_layout)
            results = heuristics.get(problem, max(ks), precision=_NVMMH_PRECISION[str(dtype)])
            keys = list(dict.fromkeys(_nvmmh_key(result["kernel"]) for result in results))
        except Exception as exc:  # noqa: BLE001 - see above
            log.debug("nvMatmulHeuristics failed on %sx%sx%s %s: %s", m, n, k, layout, exc)
            failed += 1
            continue
        times = [measured[(i, key)] for key in keys if key is not None and (i, key) in measured]
        suggested, mapped = suggested + len(results), mapped + len(times)
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
