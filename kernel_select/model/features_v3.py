"""Feature version 3: version 2 plus the memory instructions a CTA issues per K step, per operand.

Alignment decides how wide a Triton load can be: A (M x K, row-major) is read along K, so its
rows start on a 16-byte boundary only when K x element size is a multiple of 16; B (K x N) is read
along N and C written along N, so N decides those. A narrower vector means more load
instructions for the same tile, and on unaligned problems that instruction count, not FLOPs or
bytes, is what the pipeline waits on.

v2 gives alignment per dimension; v3 turns it into one physical quantity per operand: loads (or
stores) per thread per K step = tile elements x element size / vector bytes / threads. The unit
is the same for A and B, so what the model learns about one operand's unaligned loads applies to
the other's: the collected data has problems with K unaligned (narrow A loads) but, so far, none
with N odd, and the sum over both operands is what a problem with both unaligned pays.

The first len(v2.FEATURE_NAMES) columns are exactly v2 (and v1 is a prefix of that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.model import features as v1
from kernel_select.model import features_v2 as v2
from kernel_select.problem import DTYPE_BYTES, dtype_name

if TYPE_CHECKING:
    import pandas as pd

FEATURE_VERSION = 3
_VECTOR_BYTES_LOG2 = 4  # 16-byte vectors: the widest load Triton emits on sm_80 .. sm_90

EXTRA_FEATURE_NAMES: tuple[str, ...] = (
    "log_a_loads_per_thread_step", "log_b_loads_per_thread_step", "log_loads_per_thread_step",
    "log_c_stores_per_thread",
)
FEATURE_NAMES: tuple[str, ...] = v2.FEATURE_NAMES + EXTRA_FEATURE_NAMES


def featurize(m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig],
              device: DeviceSpec | str) -> np.ndarray:
    """float32 (len(configs), len(FEATURE_NAMES)), rows in `configs` order."""
    if len(configs) == 0:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    dtype_bytes = float(DTYPE_BYTES[dtype_name(dtype)])
    columns = feature_columns(m, n, k, dtype_bytes, v1.config_columns(configs), get_device(device))
    return v1.stack_columns(columns, len(configs))


def feature_columns(m: int, n: int, k: int, dtype_bytes: float, cols: Sequence[np.ndarray],
                    spec: DeviceSpec) -> tuple[np.ndarray | np.float64, ...]:
    """The columns of FEATURE_NAMES for one problem, from its configs' columns (as v2's)."""
    bm, bn, bk, _stages, warps, _group_m = cols
    extra = _extra(np.float64(n), np.float64(k), dtype_bytes, bm, bn, bk, warps)
    return v2.feature_columns(m, n, k, dtype_bytes, cols, spec) + extra


def featurize_frame(df: pd.DataFrame, device: DeviceSpec | str) -> np.ndarray:
    """v3 features of every row of a dataset frame."""
    base = v2.featurize_frame(df, get_device(device))
    dtype_bytes = df["dtype"].map(lambda d: DTYPE_BYTES[dtype_name(d)]).to_numpy(np.float64)
    bm, bn, bk, warps = (df[c].to_numpy(np.float64) for c in ("block_m", "block_n", "block_k", "num_warps"))
    extra = _extra(df["n"].to_numpy(np.float64), df["k"].to_numpy(np.float64), dtype_bytes, bm, bn, bk, warps)
    return np.concatenate([base, v1.stack_columns(extra, len(df))], axis=1)


def _extra(n, k, dtype_bytes, bm, bn, bk, warps) -> tuple[np.ndarray, ...]:
    log2_bytes = np.log2(dtype_bytes)
    # vector width in bytes: the alignment of the row stride in bytes, at most 16
    a_vector = 2.0 ** np.minimum(v1.log2_alignment(k) + log2_bytes, _VECTOR_BYTES_LOG2)
    b_vector = 2.0 ** np.minimum(v1.log2_alignment(n) + log2_bytes, _VECTOR_BYTES_LOG2)
    threads = 32.0 * warps
    a_loads = bm * bk * dtype_bytes / a_vector / threads
    b_loads = bk * bn * dtype_bytes / b_vector / threads
    c_stores = bm * bn * dtype_bytes / b_vector / threads
    return np.log(a_loads), np.log(b_loads), np.log(a_loads + b_loads), np.log(c_stores)
