"""Feature version 4: version 3 plus the operand layout and the alignment it makes matter.

v1..v3 assume the "nn" layout: A (M x K) read along K, B (K x N) read along N. A Linear's
forward is "nt" (B = W.t() is stored [N, K], read along K) and its weight gradient "tn" (A stored
[K, M], read along M), so which dimension's alignment decides an operand's vector width depends
on the layout (kernel_select.layouts, and the A_T / B_T paths of the harness kernel):

  operand   stored     contiguous dimension = leading stride
  A  "n"    [M, K]     K
  A  "t"    [K, M]     M   (M's divisibility is compiled in, M_DIV)
  B  "n"    [K, N]     N
  B  "t"    [N, K]     K

A load vectorizes only when the compiler can prove the tile's offsets along the contiguous
dimension are contiguous. Along K they are a plain arange; along M or N they are the wrapped
offsets `rm % M` / `rn % N`, which carry Inductor's max_contiguous hint only when the dimension
is at least one tile wide (M >= BLOCK_M, N >= BLOCK_N). So an operand's vector width is its
contiguous dimension's alignment in bytes (at most 16) where its offsets are hinted, else one
element.

The first len(v3.FEATURE_NAMES) columns are exactly v3 (computed from m, n, k as v3 does), and
the layout columns follow. For "nn" the added columns are functions of what v3 already sees
(plus the N >= BLOCK_N hint), so a v4 model has every input a v3 model has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.layouts import DEFAULT_LAYOUT, a_transposed, b_transposed, check_layout
from kernel_select.model import features as v1
from kernel_select.model import features_v3 as v3
from kernel_select.problem import DTYPE_BYTES, dtype_name

if TYPE_CHECKING:
    import pandas as pd

FEATURE_VERSION = 4
_VECTOR_BYTES_LOG2 = 4  # 16-byte vectors: the widest load Triton emits on sm_80 .. sm_90
_ALIGN_BYTES_LOG2_CAP = v1._ALIGN_LOG2_CAP + 2  # as v2's alignment in bytes

EXTRA_FEATURE_NAMES: tuple[str, ...] = (
    "a_transposed", "b_transposed",
    "log2_a_contig_align_bytes", "log2_b_contig_align_bytes",
    "a_contig_vector_aligned", "b_contig_vector_aligned",
    "a_offsets_hinted", "b_offsets_hinted",
    "log_a_layout_loads_per_thread_step", "log_b_layout_loads_per_thread_step",
    "log_layout_loads_per_thread_step", "layout_unaligned_x_log_stages",
)
FEATURE_NAMES: tuple[str, ...] = v3.FEATURE_NAMES + EXTRA_FEATURE_NAMES


def featurize(m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig],
              device: DeviceSpec | str, layout: str = DEFAULT_LAYOUT) -> np.ndarray:
    """float32 (len(configs), len(FEATURE_NAMES)), rows in `configs` order.

    Raises:
        ProblemError: an unknown layout or dtype.
    """
    if len(configs) == 0:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    a_t, b_t = float(a_transposed(layout)), float(b_transposed(layout))
    dtype_bytes = float(DTYPE_BYTES[dtype_name(dtype)])
    cols = v1.config_columns(configs)  # read once for v3's columns and the layout columns
    bm, bn, bk, stages, warps, _group_m = cols
    sizes = (np.float64(m), np.float64(n), np.float64(k))
    base = v3.feature_columns(m, n, k, dtype_bytes, cols, get_device(device))
    extra = _extra(*sizes, np.float64(a_t), np.float64(b_t), dtype_bytes, bm, bn, bk, stages, warps)
    return v1.stack_columns(base + extra, len(configs))  # one float32 matrix, written once


def featurize_frame(df: pd.DataFrame, device: DeviceSpec | str) -> np.ndarray:
    """v4 features of every row of a dataset frame (its `layout` column gives each row's layout)."""
    base = v3.featurize_frame(df, device)
    layouts = df["layout"].astype(str)
    for layout in layouts.unique():
        check_layout(layout)
    a_t = (layouts.str[0] == "t").to_numpy(np.float64)
    b_t = (layouts.str[1] == "t").to_numpy(np.float64)
    dtype_bytes = df["dtype"].map(lambda d: DTYPE_BYTES[dtype_name(d)]).to_numpy(np.float64)
    cols = (df[c].to_numpy(np.float64) for c in ("m", "n", "k"))
    config = (df[c].to_numpy(np.float64)
              for c in ("block_m", "block_n", "block_k", "num_stages", "num_warps"))
    extra = _extra(*cols, a_t, b_t, dtype_bytes, *config)
    return np.concatenate([base, v1.stack_columns(extra, len(df))], axis=1)


def _extra(m, n, k, a_t, b_t, dtype_bytes, bm, bn, bk, stages, warps) -> tuple[np.ndarray | np.float64, ...]:
    # All arguments are float64 scalars or 1-D arrays that broadcast together; a_t / b_t are 0 or 1.
    log2_bytes = np.log2(dtype_bytes)
    a_contig = np.where(a_t == 1.0, m, k)
    b_contig = np.where(b_t == 1.0, k, n)
    a_align = np.minimum(v1.log2_alignment(a_contig) + log2_bytes, _ALIGN_BYTES_LOG2_CAP)
    b_align = np.minimum(v1.log2_alignment(b_contig) + log2_bytes, _ALIGN_BYTES_LOG2_CAP)
    a_vec = (a_align >= _VECTOR_BYTES_LOG2).astype(np.float64)
    b_vec = (b_align >= _VECTOR_BYTES_LOG2).astype(np.float64)
    # K offsets are an arange; M / N offsets wrap and are hinted contiguous only when a tile fits
    a_hinted = np.where(a_t == 1.0, m >= bm, True).astype(np.float64)
    b_hinted = np.where(b_t == 1.0, True, n >= bn).astype(np.float64)
    a_vector = np.where(a_hinted == 1.0, 2.0 ** np.minimum(a_align, _VECTOR_BYTES_LOG2), dtype_bytes)
    b_vector = np.where(b_hinted == 1.0, 2.0 ** np.minimum(b_align, _VECTOR_BYTES_LOG2), dtype_bytes)
    threads = 32.0 * warps
    a_loads = bm * bk * dtype_bytes / a_vector / threads
    b_loads = bk * bn * dtype_bytes / b_vector / threads
    unaligned = 1.0 - a_vec * b_vec
    return (a_t, b_t, a_align, b_align, a_vec, b_vec, a_hinted, b_hinted,
            np.log(a_loads), np.log(b_loads), np.log(a_loads + b_loads), unaligned * np.log(stages))
