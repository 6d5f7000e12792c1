"""The MLP's features: one row per (problem, config) pair, shared by training and inference.

Inference featurizes the ~1,400 configs of one problem (`featurize`); training featurizes hundreds
of thousands of dataset rows at once (kernel_select.offline.training.features). Both call
`feature_columns`, so the two can never drift apart. Inference reads each config object's fields once
(`ConfigColumns`, at the end of this module): inside torch.compile that is a fifth of the cost.

Positive magnitudes enter as natural logs: runtimes are multiplicative in sizes and tile counts, and
the model predicts log runtime. Ratios in (0, 1] (padding efficiency, fill of the last wave, shared
memory use) and flags enter as they are. The groups, in column order:

  sizes       the fast_autotune MLP's 12 log features (pytorch/pytorch#156851): problem and tile
  geometry    how the output tiles fill the machine: CTAs, waves, residency
  padding     work wasted rounding the problem up to whole tiles
  K loop      iterations, EVEN_K, alignment of each dimension in elements
  resources   shared memory, accumulator registers, tile intensity, the swizzle group
  roofline    compute and memory times of the padded problem and of the traffic tiling implies
  alignment   in bytes: whether 16-byte vector loads are possible, and what that does to the
              pipeline (unaligned problems favour one stage)
  loads       memory instructions a thread issues per K step, per operand (vector width from the
              row stride's alignment)
  layout      the operand layout: which dimension is each operand's contiguous one, its alignment,
              and whether Inductor's max_contiguous hint applies (M >= BLOCK_M, N >= BLOCK_N)
  batch       (version 5) a batched GEMM is `batch` times the CTAs of one GEMM: the geometry and
              roofline terms count all of them, and log_batch says how many

Feature versions: 4 is every group but batch; 5 adds batch. A card names the version its network
was trained with and loading refuses a mismatch, so bump the version whenever a definition, the
order or a device figure read here changes. For batch = 1 the first 59 columns of version 5 equal
version 4's exactly.

TF32. A float32 problem that runs with TF32 (`Problem.tf32`, a dataset row's `allow_tf32`) differs
from float32 on CUDA cores in one column, the compute roofline, which counts its FLOPs at the
device's TF32 tensor-core rate. No row of any dataset before TF32 problems existed had it, so every
version-5 card computes the features of every row it was trained on exactly as before.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.layouts import a_transposed, b_transposed
from kernel_select.problem import Problem

V4_NAMES: tuple[str, ...] = (
    # sizes
    "log_dtype_bytes", "log_m", "log_n", "log_k", "log_total_gb", "log_total_gflop",
    "log_flops_per_byte", "log_block_k", "log_block_m", "log_block_n", "log_num_stages", "log_num_warps",
    # geometry
    "log_ctas", "log_waves", "last_wave_fill", "log_occupancy_waves", "log_ctas_per_sm",
    # padding
    "tile_eff_m", "tile_eff_n", "tile_eff_k", "tile_eff",
    # K loop
    "even_k", "log_k_iters", "log2_k_align", "log2_n_align", "log2_m_align",
    # resources
    "smem_fraction", "log_acc_regs_per_thread", "log_tile_intensity", "log_group_m",
    # roofline
    "log_roofline_compute_ms", "log_roofline_memory_ms", "log_tiled_memory_ms",
    # alignment in bytes
    "log2_n_align_bytes", "log2_k_align_bytes", "n_vector_aligned", "k_vector_aligned",
    "unaligned_x_log_stages", "stages_is_1", "log_tiles_per_sm", "log_flop_per_cta_per_byte",
    "log_k_per_cta_bytes", "log_min_mn",
    # loads ("nn" reading)
    "log_a_loads_per_thread_step", "log_b_loads_per_thread_step", "log_loads_per_thread_step",
    "log_c_stores_per_thread",
    # layout
    "a_transposed", "b_transposed", "log2_a_contig_align_bytes", "log2_b_contig_align_bytes",
    "a_contig_vector_aligned", "b_contig_vector_aligned", "a_offsets_hinted", "b_offsets_hinted",
    "log_a_layout_loads_per_thread_step", "log_b_layout_loads_per_thread_step",
    "log_layout_loads_per_thread_step", "layout_unaligned_x_log_stages",
)
#: version -> feature names. Only the versions a shipped or calibrated model can carry live here.
FEATURE_SETS: dict[int, tuple[str, ...]] = {4: V4_NAMES, 5: V4_NAMES + ("log_batch",)}
#: The version new models are trained with.
FEATURE_VERSION = 5

ALIGN_LOG2_CAP = 7  # alignment beyond 128 elements no longer changes how loads vectorize
_ALIGN_BYTES_LOG2_CAP = ALIGN_LOG2_CAP + 2
_VECTOR_BYTES_LOG2 = 4  # 16-byte vectors: the widest load Triton emits on sm_80 .. sm_90
_MAX_WARPS_PER_SM = 64  # 2048 resident threads per SM on sm_80 .. sm_90
_MAX_CTAS_PER_SM = 32
# The opt-in limit is per CTA; an SM holds a little more (228 KiB on Hopper, 164 KiB on A100), so
# two CTAs of half the limit fit. 1 KiB per CTA is reserved by the driver.
_SMEM_RESERVED_PER_CTA = 1024


def featurize(problem: Problem, configs: Sequence[GemmConfig], device: DeviceSpec,
              version: int = FEATURE_VERSION) -> np.ndarray:
    """float32 (len(configs), len(FEATURE_SETS[version])), rows in `configs` order.

    Version 4 has no batch input: it describes one GEMM of a batched problem.
    """
    names = FEATURE_SETS[version]
    if len(configs) == 0:
        return np.zeros((0, len(names)), dtype=np.float32)
    # This runs once per GEMM inside torch.compile, and the configs repeat between calls: each
    # config object's fields are read once (`ConfigColumns`, below).
    bm, bn, bk, stages, warps, group_m = _CONFIG_COLUMNS(configs)
    batch = problem.batch if version >= 5 else 1
    columns = feature_columns(
        np.float64(problem.m), np.float64(problem.n), np.float64(problem.k), np.float64(problem.dtype_bytes),
        np.float64(a_transposed(problem.layout)), np.float64(b_transposed(problem.layout)),
        bm, bn, bk, stages, warps, group_m, device, np.float64(batch), np.float64(problem.tf32))
    return stack_columns(columns[: len(names)], len(configs))


def log2_alignment(x: np.ndarray) -> np.ndarray:
    """log2 of the largest power of two dividing x, capped at ALIGN_LOG2_CAP (x > 0, integral)."""
    xi = np.asarray(x).astype(np.int64)
    lowest_bit = xi & -xi
    return np.minimum(np.log2(lowest_bit.astype(np.float64)), ALIGN_LOG2_CAP)


def stack_columns(columns: Sequence[np.ndarray | np.float64], rows: int) -> np.ndarray:
    """float32 (rows, len(columns)) from float64 columns: 1-D arrays of `rows`, or scalars (repeated).

    The matrix is column-major (Fortran order): each column is written as one contiguous run, half
    the time of writing it across rows, and numpy and torch read either order.
    """
    out = np.empty((len(columns), rows), dtype=np.float32)
    for row, column in zip(out, columns):
        row[...] = column
    return out.T


def feature_columns(m, n, k, dtype_bytes, a_t, b_t, bm, bn, bk, stages, warps, group_m,
                    device: DeviceSpec, batch=np.float64(1.0),
                    tf32=np.float64(0.0)) -> tuple[np.ndarray | np.float64, ...]:
    """Every column of the newest version, in order, as float64 arrays or scalars (`stack_columns`).

    All arguments are float64 scalars or 1-D arrays that broadcast together; a_t and b_t are 0 or 1
    (operand A / B stored transposed), and so is tf32 (a float32 problem that runs with TF32). An
    older version is a prefix.
    """
    size = np.broadcast(m, n, k, bm).shape
    sms = float(device.sm_count)
    log2_bytes = np.log2(dtype_bytes)

    # -- sizes, geometry, padding, K loop, resources, roofline -----------------------------------
    tiles_m, tiles_n, k_iters = np.ceil(m / bm), np.ceil(n / bn), np.ceil(k / bk)
    gemm_ctas = tiles_m * tiles_n
    ctas = gemm_ctas * batch  # a batched GEMM launches one grid of every GEMM's tiles
    flops = 2.0 * m * n * k
    min_bytes = (m * k + k * n + m * n) * dtype_bytes
    padded_flops = 2.0 * (tiles_m * bm) * (tiles_n * bn) * (k_iters * bk)
    # Without L2 reuse every CTA row re-reads B and every CTA column re-reads A.
    tiled_bytes = (m * k * tiles_n + k * n * tiles_m + m * n) * dtype_bytes

    smem = dtype_bytes * (bm * bk + bn * bk) * stages + 128  # space.shared_memory_bytes
    smem_per_sm = device.smem_per_block_optin + _SMEM_RESERVED_PER_CTA
    ctas_per_sm = np.maximum(np.minimum.reduce([
        np.floor(smem_per_sm / (smem + _SMEM_RESERVED_PER_CTA)),
        np.floor(_MAX_WARPS_PER_SM / warps),
        np.full(size, _MAX_CTAS_PER_SM, dtype=np.float64),
    ]), 1.0)
    last_wave = np.mod(ctas, sms) / sms
    # Half types run on tensor cores; 4-byte inputs at the fp32 rate, or at the TF32 tensor-core rate
    # where the problem runs with TF32.
    peak = np.where(dtype_bytes == 2, device.peak_flops("bfloat16"),
                    np.where(tf32 == 1.0, device.peak_flops("float32", True), device.peak_flops("float32")))
    ms = 1e3
    base = (
        np.log(dtype_bytes), np.log(m), np.log(n), np.log(k), np.log(min_bytes * batch / 1e9),
        np.log(flops * batch / 1e9), np.log(flops / min_bytes), np.log(bk), np.log(bm), np.log(bn),
        np.log(stages), np.log(warps),
        np.log(ctas), np.log(ctas / sms), np.where(last_wave == 0, 1.0, last_wave),
        np.log(np.ceil(ctas / (sms * ctas_per_sm))), np.log(ctas_per_sm),
        m / (tiles_m * bm), n / (tiles_n * bn), k / (k_iters * bk), flops / padded_flops,
        (np.mod(k, bk) == 0).astype(np.float64), np.log(k_iters), log2_alignment(k),
        log2_alignment(n), log2_alignment(m),
        smem / device.smem_per_block_optin, np.log(bm * bn / (warps * 32)), np.log(bm * bn / (bm + bn)),
        np.log(group_m),
        np.log(padded_flops * batch / peak * ms), np.log(min_bytes * batch / device.hbm_bytes_per_s * ms),
        np.log(tiled_bytes * batch / device.hbm_bytes_per_s * ms),
    )

    # -- alignment in bytes ------------------------------------------------------------------------
    # When N (or K) times the element size is not a multiple of 16 bytes, Triton cannot use 16-byte
    # vector loads, the pipelined prologue stops paying, and num_stages = 1 configs win.
    n_align = np.minimum(log2_alignment(n) + log2_bytes, _ALIGN_BYTES_LOG2_CAP)
    k_align = np.minimum(log2_alignment(k) + log2_bytes, _ALIGN_BYTES_LOG2_CAP)
    n_vec = (n_align >= _VECTOR_BYTES_LOG2).astype(np.float64)
    k_vec = (k_align >= _VECTOR_BYTES_LOG2).astype(np.float64)
    # bytes one CTA streams per K step, and the FLOP it does with them (per-tile intensity in bytes)
    step_bytes = (bm + bn) * bk * dtype_bytes
    alignment = (
        n_align, k_align, n_vec, k_vec, (1.0 - n_vec * k_vec) * np.log(stages),
        (stages == 1).astype(np.float64), np.log(ctas / device.sm_count),
        np.log(2.0 * bm * bn * bk / step_bytes), np.log(k * (bm + bn) * dtype_bytes),
        np.log(np.minimum(m, n)),
    )

    # -- loads per thread per K step, read as "nn" (A along K, B and C along N) --------------------
    threads = 32.0 * warps
    a_vector = 2.0 ** np.minimum(log2_alignment(k) + log2_bytes, _VECTOR_BYTES_LOG2)
    b_vector = 2.0 ** np.minimum(log2_alignment(n) + log2_bytes, _VECTOR_BYTES_LOG2)
    a_loads = bm * bk * dtype_bytes / a_vector / threads
    b_loads = bk * bn * dtype_bytes / b_vector / threads
    loads = (np.log(a_loads), np.log(b_loads), np.log(a_loads + b_loads),
             np.log(bm * bn * dtype_bytes / b_vector / threads))

    # -- layout ------------------------------------------------------------------------------------
    # An operand's contiguous dimension: A "n" [M, K] -> K, A "t" [K, M] -> M; B "n" [K, N] -> N,
    # B "t" [N, K] -> K. K offsets are an arange; M / N offsets wrap (`rm % M`) and carry Inductor's
    # max_contiguous hint only when a tile fits, so unhinted loads are one element wide.
    a_align = np.minimum(log2_alignment(np.where(a_t == 1.0, m, k)) + log2_bytes, _ALIGN_BYTES_LOG2_CAP)
    b_align = np.minimum(log2_alignment(np.where(b_t == 1.0, k, n)) + log2_bytes, _ALIGN_BYTES_LOG2_CAP)
    a_vec = (a_align >= _VECTOR_BYTES_LOG2).astype(np.float64)
    b_vec = (b_align >= _VECTOR_BYTES_LOG2).astype(np.float64)
    a_hinted = np.where(a_t == 1.0, m >= bm, True).astype(np.float64)
    b_hinted = np.where(b_t == 1.0, True, n >= bn).astype(np.float64)
    a_layout_vector = np.where(a_hinted == 1.0, 2.0 ** np.minimum(a_align, _VECTOR_BYTES_LOG2), dtype_bytes)
    b_layout_vector = np.where(b_hinted == 1.0, 2.0 ** np.minimum(b_align, _VECTOR_BYTES_LOG2), dtype_bytes)
    a_layout_loads = bm * bk * dtype_bytes / a_layout_vector / threads
    b_layout_loads = bk * bn * dtype_bytes / b_layout_vector / threads
    layout = (a_t, b_t, a_align, b_align, a_vec, b_vec, a_hinted, b_hinted,
              np.log(a_layout_loads), np.log(b_layout_loads), np.log(a_layout_loads + b_layout_loads),
              (1.0 - a_vec * b_vec) * np.log(stages))

    return base + alignment + loads + layout + (np.log(batch),)


# -- the configs' fields as columns ----------------------------------------------------------------------
#
# The configs' fields as float64 columns, read once per config object rather than once per call.
#
# Reading six fields of 1,206 pydantic configs costs about 0.4 ms on one core, a fifth of the 2 ms
# budget of `estimate`, while the configs repeat: `space.for_problem` hands out the same cached
# GemmConfig objects for every problem of a size class. So the fields of every config object seen
# are kept in a table indexed by `id(config)`, and a call only looks its configs up (about 0.1 ms
# for 1,206) and takes their columns.
#
# An id names an object only while it lives, so the table holds a reference to every config it
# indexes: an indexed id cannot pass to another object. GemmConfig is frozen, so a config's fields
# never change. The table is bounded: past `max_configs` it starts over with a new one. New configs
# are appended under a lock, their columns written before their ids enter the index, so a thread
# compiling beside another finds a config either complete or not at all (a miss, which takes the
# lock and waits).

FIELDS = ("block_m", "block_n", "block_k", "num_stages", "num_warps", "group_m")
#: About 13 exhaustive spaces, the size classes of a compile several times over. 16,384 configs
#: take ~17 MB, mostly objects the space's own cache (`space._space`) holds for their size class.
MAX_CONFIGS = 1 << 14


class _Table(NamedTuple):
    index: dict[int, int]  # id(config) -> its column in `columns`
    columns: np.ndarray  # (len(FIELDS), capacity) float64; the first len(configs) columns are filled
    configs: list[GemmConfig]  # keeps every indexed config alive, so its id stays its own

    @classmethod
    def empty(cls, capacity: int) -> _Table:
        return cls({}, np.empty((len(FIELDS), capacity)), [])


class ConfigColumns:
    """`columns(configs)`: (len(FIELDS), len(configs)) float64, one row per field of FIELDS."""

    def __init__(self, max_configs: int = MAX_CONFIGS) -> None:
        self.max_configs = max_configs
        self._table = _Table.empty(0)
        self._lock = threading.Lock()

    def __call__(self, configs: Sequence[GemmConfig]) -> np.ndarray:
        table = self._table  # one snapshot for the whole call
        try:
            where = np.fromiter(map(table.index.__getitem__, map(id, configs)), np.intp, len(configs))
        except KeyError:
            table, where = self._add(configs)
        return table.columns[:, where]

    def __len__(self) -> int:
        """How many config objects the table indexes."""
        return len(self._table.configs)

    def _add(self, configs: Sequence[GemmConfig]) -> tuple[_Table, np.ndarray]:
        # A config listed twice while unseen gets two columns with the same fields: harmless.
        with self._lock:
            table = self._table
            unseen = [c for c in configs if id(c) not in table.index]
            start = len(table.configs)
            if start + len(unseen) > table.columns.shape[1]:  # full (or not yet allocated): a new table
                table, unseen, start = _Table.empty(max(self.max_configs, len(configs))), list(configs), 0
            stop = start + len(unseen)
            table.columns[:, start:stop] = read_columns(unseen)
            table.configs.extend(unseen)
            table.index.update(zip(map(id, unseen), range(start, stop)))  # last: now visible
            self._table = table
        if len(unseen) == len(configs):  # all new (the first call for a space): in order
            return table, np.arange(start, stop)
        return table, np.fromiter(map(table.index.__getitem__, map(id, configs)), np.intp, len(configs))


def read_columns(configs: Sequence[GemmConfig]) -> np.ndarray:
    """The fields of `configs` read afresh, as `ConfigColumns` returns them."""
    # pydantic attribute access costs ~50 ns a field; reading the instance dicts is several times faster
    dicts = [c.__dict__ for c in configs]
    out = np.empty((len(FIELDS), len(dicts)))
    for row, field in zip(out, FIELDS):
        row[:] = np.fromiter(map(operator.itemgetter(field), dicts), np.float64, len(dicts))
    return out


_CONFIG_COLUMNS = ConfigColumns()
