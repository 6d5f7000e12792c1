"""The two calls most users need, with the device's trained model loaded (once per process) for them:

    kernel_select.estimate(m, n, k, dtype, configs)    predicted ms per config
    kernel_select.top_k(m, n, k, dtype, gemm_topk=4)   the configs worth benchmarking, LUT entries first

Both rank for `device` (a name such as "h100"; None: the local GPU) with the model that serves it
(kernel_select.model.base). For the cuBLAS decision and everything else the handler decides, call
`kernel_select.decision.select` with a model of your choosing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kernel_select import runtime
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, resolve
from kernel_select.model import PerformanceModel
from kernel_select.problem import Problem
from kernel_select.decision import Choice, LookupTable, select
from kernel_select.options import DEFAULT_TOPK, TopK


def estimate(m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig],
             device: DeviceSpec | str | None = None, *, batch: int = 1, layout: str = "nn",
             model: PerformanceModel | str | None = None, tf32: bool = False) -> np.ndarray:
    """Predicted runtime in ms of each config for C = A @ B (m x k times k x n, `batch` of them), in
    `configs` order; `tf32`: a float32 GEMM whose kernels multiply in TF32 (`Problem.tf32`).

    Raises:
        ProblemError, ConfigError: bad sizes, dtype, layout or configs; tf32 with another dtype than
            float32.
        DeviceError: no device given and no GPU detected.
        NoTrainedModelError: no trained model serves the device (pass model="analytical").
    """
    problem = Problem(m, n, k, dtype, batch=batch, op="bmm" if batch != 1 else "mm", layout=layout, tf32=tf32)
    return _model(model, device).estimate(problem, configs)


def top_k(m: int, n: int, k: int, dtype: str = "bfloat16", *, gemm_topk: TopK = DEFAULT_TOPK,
          device: DeviceSpec | str | None = None, lut: LookupTable | str | Path | None = None,
          batch: int = 1, layout: str = "nn", model: PerformanceModel | str | None = None,
          tf32: bool = False) -> list[Choice]:
    """The configs worth benchmarking for one GEMM, best first: `lut`'s entries for it (a KernelLUT or
    the path of one), then the model's best, `gemm_topk` in all (what kernel_select.options.parse_topk
    accepts: a count, a fraction of the space, "DEFAULT", "auto" or "SAME", every config of the space).
    A LUT pin is the only choice returned (none for a pin to ATen). `tf32`: a float32 GEMM that runs
    with TF32 (`Problem.tf32`; its LUT entries are those of the "tf32" list).

    Raises:
        as `estimate`, and LUTError for an unreadable or invalid LUT.
    """
    problem = Problem(m, n, k, dtype, batch=batch, op="bmm" if batch != 1 else "mm", layout=layout, tf32=tf32)
    table = runtime.load_lut(str(lut)) if isinstance(lut, (str, Path)) else lut
    return list(select(problem, model=_model(model, device), gemm_topk=gemm_topk, lut=table).choices)


def _model(model: PerformanceModel | str | None, device: DeviceSpec | str | None) -> PerformanceModel:
    if isinstance(model, PerformanceModel):
        return model
    spec = resolve(device) if not isinstance(device, DeviceSpec) else device
    return runtime.model(model, spec)
