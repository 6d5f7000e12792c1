"""The one feature function shared by training and inference.

A feature row describes one (problem, config) pair. Training featurizes hundreds of thousands of
dataset rows at once (`featurize_frame`); inference featurizes the ~1400 configs of one problem
(`featurize`). Both go through `feature_columns`, so the two can never drift apart.

Positive magnitudes enter as natural logs: runtimes are multiplicative in sizes and tile counts,
and the model predicts log runtime. Ratios in (0, 1] (padding efficiency, fill of the last wave,
shared-memory use) and flags enter as they are.

Bump FEATURE_VERSION whenever a feature's definition, order or the device figures it reads change:
a model card records the version it was trained with, and loading refuses a mismatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.model.config_columns import ConfigColumns
from kernel_select.problem import DTYPE_BYTES, dtype_name

if TYPE_CHECKING:
    import pandas as pd

FEATURE_VERSION = 1

FEATURE_NAMES: tuple[str, ...] = (
    # the 12 log features of the fast_autotune MLP (pytorch/pytorch#156851)
    "log_dtype_bytes", "log_m", "log_n", "log_k", "log_total_gb", "log_total_gflop",
    "log_flops_per_byte", "log_block_k", "log_block_m", "log_block_n", "log_num_stages",
    "log_num_warps",
    # launch geometry: how the output tiles fill the machine
    "log_ctas", "log_waves", "last_wave_fill", "log_occupancy_waves", "log_ctas_per_sm",
    # wasted work from padding the problem up to whole tiles
    "tile_eff_m", "tile_eff_n", "tile_eff_k", "tile_eff",
    # the K loop
    "even_k", "log_k_iters", "log2_k_align", "log2_n_align", "log2_m_align",
    # per-CTA resources
    "smem_fraction", "log_acc_regs_per_thread", "log_tile_intensity", "log_group_m",
    # roofline of the padded problem, and of the traffic the tiling implies
    "log_roofline_compute_ms", "log_roofline_memory_ms", "log_tiled_memory_ms",
)

_ALIGN_LOG2_CAP = 7  # alignment beyond 128 elements no longer changes how loads vectorize
_MAX_WARPS_PER_SM = 64  # 2048 resident threads per SM on sm_80 .. sm_90
_MAX_CTAS_PER_SM = 32
# The opt-in limit is per CTA; an SM holds a little more (228 KiB on Hopper, 164 KiB on A100),
# so two CTAs of half the limit fit. 1 KiB per CTA is reserved by the driver.
_SMEM_RESERVED_PER_CTA = 1024
_CONFIG_COLUMNS = ConfigColumns()


def featurize(m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig],
              device: DeviceSpec | str) -> np.ndarray:
    """Features of every config for one problem.

    Returns:
        float32 array of shape (len(configs), len(FEATURE_NAMES)), rows in `configs` order.
    Raises:
        ProblemError: for an unsupported dtype.
    """
    dtype_bytes = DTYPE_BYTES[dtype_name(dtype)]
    if len(configs) == 0:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    columns = feature_columns(np.float64(m), np.float64(n), np.float64(k), np.float64(dtype_bytes),
                              *config_columns(configs), get_device(device))
    return stack_columns(columns, len(configs))


def config_columns(configs: Sequence[GemmConfig]) -> np.ndarray:
    """block_m, block_n, block_k, num_stages, num_warps, group_m of `configs`: float64 rows of a
    (6, len(configs)) array."""
    # This runs once per GEMM inside torch.compile, and the configs repeat between calls: each
    # config object's fields are read once (model/config_columns.py).
    return _CONFIG_COLUMNS(configs)


def featurize_frame(df: pd.DataFrame, device: DeviceSpec | str) -> np.ndarray:
    """Features of every row of a dataset frame (columns as in
    `kernel_select.offline.data.dataset.COLUMNS`)."""
    dtype_bytes = df["dtype"].map(lambda d: DTYPE_BYTES[dtype_name(d)]).to_numpy(np.float64)

    def col(name: str) -> np.ndarray:
        return df[name].to_numpy(np.float64)

    columns = feature_columns(col("m"), col("n"), col("k"), dtype_bytes, col("block_m"), col("block_n"),
                              col("block_k"), col("num_stages"), col("num_warps"), col("group_m"),
                              get_device(device))
    return stack_columns(columns, len(df))


def log2_alignment(x: np.ndarray) -> np.ndarray:
    """log2 of the largest power of two dividing x, capped (x > 0, integral)."""
    xi = np.asarray(x).astype(np.int64)
    lowest_bit = xi & -xi
    return np.minimum(np.log2(lowest_bit.astype(np.float64)), _ALIGN_LOG2_CAP)


def stack_columns(columns: Sequence[np.ndarray | np.float64], rows: int) -> np.ndarray:
    """float32 (rows, len(columns)) from float64 columns: 1-D arrays of `rows`, or scalars (repeated).

    The matrix is column-major (Fortran order): each column is written as one contiguous run, half
    the time of writing it across rows, and numpy and torch read either order.
    """
    # One matrix written once: stacking each version's columns and concatenating the versions
    # copied every feature three more times (a sixth of `estimate`).
    out = np.empty((len(columns), rows), dtype=np.float32)
    for row, column in zip(out, columns):
        row[...] = column
    return out.T


def feature_columns(m, n, k, dtype_bytes, bm, bn, bk, stages, warps, group_m,
                    device: DeviceSpec) -> tuple[np.ndarray | np.float64, ...]:
    """The columns of FEATURE_NAMES, in order, as float64 arrays or scalars (`stack_columns`)."""
    # All arguments are float64 scalars or 1-D arrays that broadcast together.
    size = np.broadcast(m, n, k, bm).shape
    tiles_m, tiles_n, k_iters = np.ceil(m / bm), np.ceil(n / bn), np.ceil(k / bk)
    ctas = tiles_m * tiles_n
    sms = float(device.sm_count)

    flops = 2.0 * m * n * k
    min_bytes = (m * k + k * n + m * n) * dtype_bytes
    padded_flops = 2.0 * (tiles_m * bm) * (tiles_n * bn) * (k_iters * bk)
    # Without L2 reuse every CTA row re-reads B and every CTA column re-reads A.
    tiled_bytes = (m * k * tiles_n + k * n * tiles_m + m * n) * dtype_bytes

    smem = dtype_bytes * (bm * bk + bn * bk) * stages + 128  # space.shared_memory_bytes
    smem_per_sm = device.smem_per_block_optin + _SMEM_RESERVED_PER_CTA
    ctas_per_sm = np.minimum.reduce([
        np.floor(smem_per_sm / (smem + _SMEM_RESERVED_PER_CTA)),
        np.floor(_MAX_WARPS_PER_SM / warps),
        np.full(size, _MAX_CTAS_PER_SM, dtype=np.float64),
    ])
    ctas_per_sm = np.maximum(ctas_per_sm, 1.0)
    waves = ctas / sms
    last_wave = np.mod(ctas, sms) / sms
    last_wave_fill = np.where(last_wave == 0, 1.0, last_wave)

    # Half types run on tensor cores; 4-byte inputs at the fp32 rate (TF32 is off by default).
    peak = np.where(dtype_bytes == 2, device.peak_flops("bfloat16"), device.peak_flops("float32"))
    ms = 1e3
    return (
        np.log(dtype_bytes), np.log(m), np.log(n), np.log(k), np.log(min_bytes / 1e9),
        np.log(flops / 1e9), np.log(flops / min_bytes), np.log(bk), np.log(bm), np.log(bn),
        np.log(stages), np.log(warps),
        np.log(ctas), np.log(waves), last_wave_fill, np.log(np.ceil(ctas / (sms * ctas_per_sm))),
        np.log(ctas_per_sm),
        m / (tiles_m * bm), n / (tiles_n * bn), k / (k_iters * bk), flops / padded_flops,
        (np.mod(k, bk) == 0).astype(np.float64), np.log(k_iters), log2_alignment(k),
        log2_alignment(n), log2_alignment(m),
        smem / device.smem_per_block_optin, np.log(bm * bn / (warps * 32)), np.log(bm * bn / (bm + bn)),
        np.log(group_m),
        np.log(padded_flops / peak * ms), np.log(min_bytes / device.hbm_bytes_per_s * ms),
        np.log(tiled_bytes / device.hbm_bytes_per_s * ms),
    )

