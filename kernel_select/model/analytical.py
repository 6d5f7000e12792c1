"""A roofline model of the Triton mm kernel: no training, only the device's datasheet figures.

The runtime of one config is a launch floor plus the largest of three times, each an
estimate of what the kernel cannot do faster than:

  compute  the busiest SM works through its share of output tiles; each K-loop iteration costs
           the tile's FLOPs at the SM's tensor-core rate, derated for small tiles, for fewer
           warps than the SM has tensor-core partitions, and for loads the pipeline cannot hide
  L2       every CTA streams its A row-panel and B column-panel from L2 (tile re-reads)
  DRAM     the unique bytes, plus the re-reads that miss L2, plus writing C

All terms are vectorized over configs, so a full exhaustive space (~1200-1400 configs) scores in
about half a millisecond. Constants below are design choices or datasheet figures; none is
fitted to measurements, which is the job of the learned model.
"""

from __future__ import annotations

import itertools
import logging
import operator
from collections.abc import Sequence

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.model.base import PerformanceModel, register_model
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

#: Fixed cost of one kernel launch as a benchmark sees it (launch, grid setup, the last
#: CTA's drain): a few microseconds on current NVIDIA parts, independent of the config.
LAUNCH_S = 3e-6

#: Time from issuing a tile's global load to its arrival in shared memory under load: a few
#: hundred ns of DRAM latency plus queueing. A K-loop iteration cannot be faster than this
#: divided by the number of loads the software pipeline keeps in flight (num_stages - 1).
LOAD_LATENCY_S = 0.5e-6

#: Fixed cost of one K-loop iteration that no pipelining hides: the barrier that hands a
#: stage from the loads to the MMAs, and the pointer and mask updates (a few dozen cycles).
ITERATION_OVERHEAD_S = 30e-9

#: Shared memory per block is a per-SM budget with 1 KiB reserved per resident CTA; this
#: turns the per-block opt-in limit (227 KiB on H100) back into the SM total (228 KiB).
SMEM_RESERVED_PER_CTA = 1024

#: Residency limits of sm_80 and sm_90: at most 64 warps and 32 CTAs on one SM.
MAX_WARPS_PER_SM = 64
MAX_CTAS_PER_SM = 32

#: Registers a thread needs beyond its fp32 accumulator (addresses, loop state, operand
#: fragments). Only used to bound occupancy, so the exact value matters little.
EXTRA_REGISTERS_PER_THREAD = 32

#: Each SM has four sub-partitions with one tensor core each, and a warp lives on one
#: sub-partition: fewer than four resident warps leave tensor cores idle.
TENSOR_CORE_PARTITIONS = 4

#: Hopper's wgmma is issued by a warpgroup (4 warps), so Triton can only use it when a CTA
#: has a multiple of 4 warps; smaller CTAs fall back to Ampere-style mma.sync, which we assume
#: reaches 60% of the wgmma rate on sm_90.
MMA_SYNC_FRACTION_SM90 = 0.6

#: Tile-shape efficiency is h / (h + TILE_HALF_RATE) with h = bm*bn/(bm+bn), the FLOPs per
#: byte of operand staged through shared memory (up to a dtype constant). With 16, a 32x32
#: tile reaches half of the tensor-core peak, 128x128 reaches 80% and 128x256 84%, which is
#: where the best H100 GEMMs land (about 80% of the datasheet peak). The constant is for
#: 2-byte types at the bf16 tensor-core rate and scales with FLOP rate x bytes per element,
#: because the shared-memory bandwidth that limits small tiles is the same for every dtype.
TILE_HALF_RATE = 16.0

#: Triton's former analytical matmul model (triton.ops.matmul_perf_model) took L2 bandwidth
#: as 4x DRAM bandwidth and assumed 80% of repeated tile loads hit L2. We keep both, and let
#: re-reads hit more often (90%) when A and B fit in L2 together.
L2_BANDWIDTH_RATIO = 4.0
L2_HIT_RATE = 0.8
L2_HIT_RATE_RESIDENT = 0.9

#: One SM can pull about 4x its even share of DRAM bandwidth, so a quarter of the SMs
#: saturate it; the same model had 32 of 108 A100 CTAs reach 95% of peak bandwidth.
SM_BANDWIDTH_SHARE = 4.0


_TILE_FIELDS = operator.attrgetter("block_m", "block_n", "block_k", "num_stages", "num_warps")


class AnalyticalModel(PerformanceModel):
    """Roofline runtime model of the Triton mm template, from the device spec alone.

    Args:
        device: device key or spec.
        allow_tf32: score every float32 problem at the TF32 tensor-core rate instead of the
            CUDA-core rate. Without it, a problem that runs with TF32 (`Problem.tf32`: Inductor sets
            ALLOW_TF32 where torch.backends.cuda.matmul allows it, off by default) is scored at the
            TF32 rate, and every other float32 problem at the CUDA-core rate.
    """

    name = "analytical"

    def __init__(self, device: DeviceSpec | str, *, allow_tf32: bool = False) -> None:
        super().__init__(device)
        self.allow_tf32 = allow_tf32

    def describe(self) -> str:
        tf32 = ", float32 as TF32" if self.allow_tf32 else ""
        return f"analytical roofline model for {self.device.key} (datasheet peaks, untrained{tf32})"

    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        """Predicted runtime in ms of each config for C[batch, m, n] = A[batch, m, k] @ B: addmm
        and baddbmm read a bias in the epilogue; batch > 1 multiplies the CTAs of the one launch."""
        # One flat pass over the attributes is the fastest way from pydantic objects to numpy.
        fields = map(_TILE_FIELDS, configs)
        tiles = np.fromiter(itertools.chain.from_iterable(fields), dtype=np.float64,
                            count=5 * len(configs)).reshape(len(configs), 5)
        return _runtime_s(problem, tiles, device, self.allow_tf32 or problem.tf32) * 1e3


def _runtime_s(problem: Problem, tiles: np.ndarray, device: DeviceSpec,
               allow_tf32: bool) -> np.ndarray:
    """Seconds per config; `tiles` is (n_configs, 5): block_m, block_n, block_k, stages, warps."""
    bm, bn, bk, stages, warps = tiles.T
    m, n, k, batch = float(problem.m), float(problem.n), float(problem.k), float(problem.batch)
    elem = float(problem.dtype_bytes)
    sms = float(device.sm_count)

    # Grid: partial tiles are padded to full ones; their wasted work is charged through the
    # padded FLOPs below (a 560-row problem with block_m=256 computes 768 rows).
    tiles_m, tiles_n = np.ceil(m / bm), np.ceil(n / bn)
    ctas = tiles_m * tiles_n * batch
    k_iters = np.ceil(k / bk)

    # Occupancy: how many CTAs fit on one SM at once, bounded by shared memory (the pipeline
    # buffers), registers (the fp32 accumulator), warps and the hardware CTA limit.
    smem = elem * (bm + bn) * bk * stages + 128.0
    smem_per_sm = device.smem_per_block_optin + SMEM_RESERVED_PER_CTA
    smem_fit = np.floor(smem_per_sm / (smem + SMEM_RESERVED_PER_CTA))
    regs_per_thread = np.minimum(255.0, np.ceil(bm * bn / (32.0 * warps)) + EXTRA_REGISTERS_PER_THREAD)
    regs_fit = np.floor(device.registers_per_sm / (32.0 * warps * regs_per_thread))
    warps_fit = np.floor(MAX_WARPS_PER_SM / warps)
    occupancy = np.maximum(1.0, np.minimum.reduce([smem_fit, regs_fit, warps_fit,
                                                   np.full_like(bm, MAX_CTAS_PER_SM)]))

    # Wave quantization: the busiest SM runs ceil(ctas / sms) CTAs, `resident` at a time, in
    # `rounds` rounds; a grid of 133 CTAs on 132 SMs takes two rounds, like one of 264.
    ctas_per_sm = np.ceil(ctas / sms)
    resident = np.minimum(occupancy, ctas_per_sm)
    rounds = np.ceil(ctas_per_sm / resident)

    peak = device.peak_flops(problem.dtype, allow_tf32)
    sm_flops = peak / sms
    half_rate = TILE_HALF_RATE * (peak / device.peak_flops_bf16) * (elem / 2.0)
    harmonic = bm * bn / (bm + bn)
    tile_eff = harmonic / (harmonic + half_rate)
    warp_eff = np.minimum(TENSOR_CORE_PARTITIONS, warps * resident) / TENSOR_CORE_PARTITIONS
    tensor_cores = problem.dtype != "float32" or allow_tf32
    if tensor_cores and device.capability >= (9, 0):
        warp_eff = warp_eff * np.where(warps % 4.0 == 0.0, 1.0, MMA_SYNC_FRACTION_SM90)
    iter_flops = 2.0 * bm * bn * bk
    iter_compute = iter_flops / (sm_flops * tile_eff * warp_eff)
    # After the pipeline fill, one CTA alone runs each further iteration at a steady rate: with
    # num_stages >= 2 up to num_stages - 1 tile loads are in flight while one stage is
    # consumed, so it waits at most LOAD_LATENCY / depth; num_stages=1 has no prefetch and pays
    # compute plus the full latency. Every iteration also pays a fixed cost (barrier, pointer
    # and mask updates) that favours a larger block_k.
    depth = np.maximum(1.0, np.minimum(stages - 1.0, k_iters - 1.0))
    steady = np.where(stages < 2.0, iter_compute + LOAD_LATENCY_S,
                      np.maximum(iter_compute, LOAD_LATENCY_S / depth))
    # `resident` CTAs interleave on one SM: they share its tensor cores and hide each other's
    # waits, so a round is latency-bound only when its shared compute is shorter.
    shared = resident * iter_compute
    round_time = (LOAD_LATENCY_S + k_iters * ITERATION_OVERHEAD_S + shared
                  + (k_iters - 1.0) * np.maximum(shared, steady))
    compute = rounds * round_time

    return LAUNCH_S + np.maximum(compute, _memory_s(problem, tiles_m, tiles_n, ctas, device))


def _memory_s(problem: Problem, tiles_m: np.ndarray, tiles_n: np.ndarray, ctas: np.ndarray,
              device: DeviceSpec) -> np.ndarray:
    """Seconds the busier of DRAM and L2 needs for the traffic the tiling implies, per config."""
    m, n, k, batch = float(problem.m), float(problem.n), float(problem.k), float(problem.batch)
    elem = float(problem.dtype_bytes)
    sms = float(device.sm_count)

    # Memory traffic: A is read once per column of tiles and B once per row of tiles. Only the
    # first read of each element must come from DRAM; later re-reads hit L2 at a rate that
    # depends on whether both operands fit there.
    a_bytes = batch * m * k * elem
    b_bytes = batch * k * n * elem
    c_bytes = batch * m * n * elem
    if problem.op in ("addmm", "baddbmm"):
        c_bytes *= 2.0  # the epilogue reads an input as large as C at most
    reread_a = a_bytes * (tiles_n - 1.0)
    reread_b = b_bytes * (tiles_m - 1.0)
    hit = L2_HIT_RATE_RESIDENT if (a_bytes + b_bytes) / batch <= device.l2_bytes else L2_HIT_RATE
    dram_bytes = a_bytes + b_bytes + c_bytes + (1.0 - hit) * (reread_a + reread_b)
    l2_bytes = a_bytes * tiles_n + b_bytes * tiles_m + c_bytes

    # Few CTAs cannot pull the full bandwidth: each SM issues a bounded number of loads.
    active_sms = np.minimum(ctas, sms)
    bandwidth = device.hbm_bytes_per_s * np.minimum(1.0, SM_BANDWIDTH_SHARE * active_sms / sms)
    dram = dram_bytes / bandwidth
    l2 = l2_bytes / (L2_BANDWIDTH_RATIO * bandwidth)

    return np.maximum(dram, l2)


def _factory(device: DeviceSpec) -> AnalyticalModel:
    return AnalyticalModel(device)


register_model("analytical", _factory)
