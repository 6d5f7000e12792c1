"""Feature version 2: version 1 plus what decides the odd-shape cases v1 ranks badly.

The worst misses of the v1 MLP on unseen problems were unaligned rows: when N (or K) times the
element size is not a multiple of 16 bytes, Triton cannot use 16-byte vector loads or TMA, the
pipelined prologue stops paying, and `num_stages = 1` configs win. v1 sees alignment only in
elements; v2 adds it in bytes, the interactions with the pipeline depth and tile widths, and the
per-SM work terms a tree model cannot derive from logs by itself.

The first len(v1.FEATURE_NAMES) columns are exactly v1, so a v1 model's inputs are a prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.model import features as v1
from kernel_select.problem import DTYPE_BYTES, dtype_name

if TYPE_CHECKING:
    import pandas as pd

FEATURE_VERSION = 2
_VECTOR_BYTES_LOG2 = 4  # 16-byte loads: the widest Triton emits on sm_80 .. sm_90

EXTRA_FEATURE_NAMES: tuple[str, ...] = (
    "log2_n_align_bytes", "log2_k_align_bytes", "n_vector_aligned", "k_vector_aligned",
    "unaligned_x_log_stages", "stages_is_1", "log_tiles_per_sm", "log_flop_per_cta_per_byte",
    "log_k_per_cta_bytes", "log_min_mn",
)
FEATURE_NAMES: tuple[str, ...] = v1.FEATURE_NAMES + EXTRA_FEATURE_NAMES


def featurize(m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig],
              device: DeviceSpec | str) -> np.ndarray:
    """float32 (len(configs), len(FEATURE_NAMES)), rows in `configs` order."""
    spec = get_device(device)
    dtype_bytes = float(DTYPE_BYTES[dtype_name(dtype)])
    if len(configs) == 0:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    columns = feature_columns(m, n, k, dtype_bytes, v1.config_columns(configs), spec)
    return v1.stack_columns(columns, len(configs))


def feature_columns(m: int, n: int, k: int, dtype_bytes: float, cols: Sequence[np.ndarray],
                    spec: DeviceSpec) -> tuple[np.ndarray | np.float64, ...]:
    """The columns of FEATURE_NAMES for one problem (`features.stack_columns` makes them the
    matrix), from its configs' columns (`features.config_columns`)."""
    sizes = (np.float64(m), np.float64(n), np.float64(k))
    base = v1.feature_columns(*sizes, np.float64(dtype_bytes), *cols, spec)
    return base + _extra(*sizes, dtype_bytes, *cols, spec)


def featurize_frame(df: pd.DataFrame, device: DeviceSpec | str) -> np.ndarray:
    """v2 features of every row of a dataset frame."""
    spec = get_device(device)
    base = v1.featurize_frame(df, spec)
    dtype_bytes = df["dtype"].map(lambda d: DTYPE_BYTES[dtype_name(d)]).to_numpy(np.float64)
    cols = [df[c].to_numpy(np.float64) for c in ("block_m", "block_n", "block_k", "num_stages", "num_warps",
                                                 "group_m")]
    extra = _extra(df["m"].to_numpy(np.float64), df["n"].to_numpy(np.float64), df["k"].to_numpy(np.float64),
                   dtype_bytes, *cols, spec)
    return np.concatenate([base, v1.stack_columns(extra, len(df))], axis=1)


def _extra(m, n, k, dtype_bytes, bm, bn, bk, stages, warps, group_m,
           device: DeviceSpec) -> tuple[np.ndarray | np.float64, ...]:
    log2_bytes = np.log2(dtype_bytes)
    n_align = np.minimum(v1.log2_alignment(n) + log2_bytes, v1._ALIGN_LOG2_CAP + 2)
    k_align = np.minimum(v1.log2_alignment(k) + log2_bytes, v1._ALIGN_LOG2_CAP + 2)
    n_vec = (n_align >= _VECTOR_BYTES_LOG2).astype(np.float64)
    k_vec = (k_align >= _VECTOR_BYTES_LOG2).astype(np.float64)
    unaligned = 1.0 - n_vec * k_vec
    ctas = np.ceil(m / bm) * np.ceil(n / bn)
    # bytes one CTA streams per K step, and the FLOP it does with them (per-tile intensity in bytes)
    step_bytes = (bm + bn) * bk * dtype_bytes
    return (
        n_align, k_align, n_vec, k_vec, unaligned * np.log(stages), (stages == 1).astype(np.float64),
        np.log(ctas / device.sm_count), np.log(2.0 * bm * bn * bk / step_bytes),
        np.log(k * (bm + bn) * dtype_bytes), np.log(np.minimum(m, n)),
    )
