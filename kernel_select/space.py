"""The Triton mm config space, built exactly as Inductor builds it, plus shared-memory pruning.

Pipeline (Inductor's `preprocess_mm_configs`, torch 2.11 and 2.13 alike):
  1. scale: clamp each block to the problem, block_x = max(min(block_x, max(next_pow2(x), 16)), 16)
  2. (EXHAUSTIVE only) register-spill prune: drop ceil(block_m*block_n / (num_warps*32)) > 255,
     using the *unclamped* num_warps
  3. finalize: num_warps = min(num_warps, block_m*block_n // 256), then dedupe on
     (block_m, block_n, block_k, num_stages, num_warps, group_m), keeping list order
  4. ours, after Inductor's: drop configs whose shared-memory estimate exceeds the device's
     opt-in limit. Inductor has the same estimate behind a flag that is off by default; the
     configs it would drop fail to compile on the device anyway ("out of resource").

Known 2.11/2.13 difference: 2.13's DEFAULT list has a 21st config, (128, 256, 64, 4, 8).
`default_grid()` follows the installed torch unless a version is given.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Sequence
from typing import Literal

import numpy as np

from kernel_select.configs import GemmConfig, torch_minor_version
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ConfigError
from kernel_select.problem import DTYPE_BYTES, Problem

SearchSpace = Literal["default", "exhaustive"]
#: The torch versions (major, minor) whose Inductor lists this module reproduces: 2.12 has 2.11's.
KNOWN_TORCH = ((2, 11), (2, 12), (2, 13))
Raw = tuple[int, int, int, int, int, int]  # block_m, block_n, block_k, num_stages, num_warps, group_m

# Inductor 2.11's BaseConfigHeuristic.mm_configs: (block_m, block_n, block_k, num_stages, num_warps).
_DEFAULT_211: tuple[tuple[int, int, int, int, int], ...] = (
    (32, 32, 16, 1, 2), (32, 32, 128, 2, 4), (32, 64, 32, 5, 8), (64, 32, 32, 5, 8),
    (64, 32, 128, 5, 4), (64, 64, 16, 2, 4), (64, 64, 32, 2, 4), (64, 64, 64, 3, 8),
    (64, 64, 128, 5, 4), (64, 128, 32, 3, 4), (64, 128, 32, 4, 8), (64, 128, 64, 3, 4),
    (64, 128, 128, 4, 4), (128, 64, 32, 3, 4), (128, 64, 32, 4, 8), (128, 128, 32, 2, 8),
    (128, 128, 32, 3, 4), (128, 128, 64, 3, 4), (128, 128, 64, 5, 8), (128, 128, 128, 4, 8),
)
# Added in 2.13: "128x256x64 NS=4: larger N-tile that wins on Hopper-class matmul".
_DEFAULT_213_EXTRA = ((128, 256, 64, 4, 8),)

_EXHAUSTIVE_BLOCKS = (16, 32, 64, 128, 256)
_EXHAUSTIVE_STAGES = (1, 2, 3, 4, 5)
_EXHAUSTIVE_WARPS = (2, 4, 8)
_GROUP_M = 8
_MIN_BLOCK = 16
#: The largest block of either grid: a dimension's power of two beyond it scales no config.
_MAX_BLOCK = max(*_EXHAUSTIVE_BLOCKS, *(max(row[:3]) for row in _DEFAULT_211 + _DEFAULT_213_EXTRA))
#: The same, for callers: two sizes both above it give the same space (and clamp no block).
LARGEST_BLOCK = _MAX_BLOCK
_MAX_ACC_REGISTERS = 255
_SMEM_EXTRA_BYTES = 128  # Inductor's allowance for barriers


def default_grid(torch_version: str | None = None) -> list[Raw]:
    """Inductor's DEFAULT mm list for the given (or installed) torch version, unscaled."""
    rows = _DEFAULT_211 + (_DEFAULT_213_EXTRA if torch_minor_version(torch_version) >= (2, 13) else ())
    return [(*row, _GROUP_M) for row in rows]


def exhaustive_grid() -> list[Raw]:
    """Inductor's EXHAUSTIVE grid: 5^3 tiles x 5 stage counts x 3 warp counts = 1875, unscaled."""
    return [
        (bm, bn, bk, stages, warps, _GROUP_M)
        for bm, bn, bk in itertools.product(_EXHAUSTIVE_BLOCKS, repeat=3)
        for stages in _EXHAUSTIVE_STAGES
        for warps in _EXHAUSTIVE_WARPS
    ]


def _next_power_of_2(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def scale(raw: list[Raw], m: int, n: int, k: int) -> list[Raw]:
    """Clamp block sizes to the problem (Inductor's `_scale_mm_configs`, scale=1.0)."""
    m_hint = max(_next_power_of_2(m), _MIN_BLOCK)
    n_hint = max(_next_power_of_2(n), _MIN_BLOCK)
    k_hint = max(_next_power_of_2(k), _MIN_BLOCK)
    return [
        (max(min(bm, m_hint), _MIN_BLOCK), max(min(bn, n_hint), _MIN_BLOCK),
         max(min(bk, k_hint), _MIN_BLOCK), stages, warps, group)
        for bm, bn, bk, stages, warps, group in raw
    ]


def prune_register_spills(raw: list[Raw]) -> list[Raw]:
    """Drop configs whose fp32 accumulator alone needs > 255 registers per thread."""
    return [c for c in raw if math.ceil(c[0] * c[1] / (c[4] * 32)) <= _MAX_ACC_REGISTERS]


def finalize(raw: list[Raw]) -> list[Raw]:
    """Clamp num_warps (each warp computes a 16x16 tile) and dedupe, keeping first occurrences."""
    seen: dict[Raw, None] = {}
    for bm, bn, bk, stages, warps, group in raw:
        clamped = (bm, bn, bk, stages, min(warps, bm * bn // 256), group)
        seen.setdefault(clamped, None)
    return list(seen)


def shared_memory_bytes(config: GemmConfig | Raw, dtype_bytes: int) -> int:
    """Inductor's estimate: one A and one B tile per pipeline stage, plus 128 bytes of barriers."""
    bm, bn, bk, stages = (config.block_m, config.block_n, config.block_k, config.num_stages) \
        if isinstance(config, GemmConfig) else config[:4]
    return dtype_bytes * (bm * bk + bn * bk) * stages + _SMEM_EXTRA_BYTES


def fits_shared_memory(config: GemmConfig | Raw, dtype_bytes: int, device: DeviceSpec) -> bool:
    return shared_memory_bytes(config, dtype_bytes) <= device.smem_per_block_optin


#: CUDA's limit on threads in one block (all architectures since Fermi).
MAX_THREADS_PER_BLOCK = 1024
#: A thread may address at most 255 registers (CUDA's per-thread limit).
MAX_REGISTERS_PER_THREAD = 255


@functools.lru_cache(maxsize=4096)
def unfit_reason(config: GemmConfig, dtype: str, device: DeviceSpec) -> str | None:
    """Why `config` cannot run for `dtype` on `device` (the figure and the limit), or None: the one
    hardware check, for hand-written LUT configs and `@triton.autotune` configs alike. A config such
    as 1024x1024x1024 s8 w32 is well formed but asks for 33.5 MB of shared memory where an H100
    block may use 232,448 B; 256x256x32 s4 w4 needs 512 accumulator registers per thread.

    Cached: lookup calls it for every config it returns, inside every GEMM lowering.
    """
    smem = shared_memory_bytes(config, DTYPE_BYTES[dtype])
    if smem > device.smem_per_block_optin:
        return (f"{config.short()} needs {smem:,} B of shared memory per block for {dtype}; "
                f"{device.key} allows {device.smem_per_block_optin:,} B")
    threads = config.num_warps * 32
    if threads > MAX_THREADS_PER_BLOCK:
        return f"{config.short()} has {threads} threads per block; CUDA allows {MAX_THREADS_PER_BLOCK}"
    # The fp32 accumulator tile alone: block_m * block_n registers spread over the block's threads.
    accumulator = config.block_m * config.block_n
    if not prune_register_spills([config.key]):
        return (f"{config.short()} needs {-(-accumulator // threads)} accumulator registers per thread; "
                f"a thread may use {MAX_REGISTERS_PER_THREAD}")
    if accumulator > device.registers_per_sm:
        return (f"{config.short()} needs {accumulator:,} accumulator registers per block; "
                f"{device.key} has {device.registers_per_sm:,} per SM")
    return None


_TILE_FIELDS = operator.attrgetter("block_m", "block_n", "block_k", "num_stages", "num_warps")


def unfit_mask(configs: Sequence[GemmConfig], dtype: str, device: DeviceSpec) -> np.ndarray:
    """`unfit_reason(config, dtype, device) is not None` for every config at once, in numpy: the
    same four limits, fast enough for a model's every estimate (a whole exhaustive space in well
    under a millisecond, where a cached call per config costs about two)."""
    # One flat pass over the attributes, as the analytical model reads them.
    fields = itertools.chain.from_iterable(map(_TILE_FIELDS, configs))
    bm, bn, bk, stages, warps = np.fromiter(fields, dtype=np.int64, count=5 * len(configs)).reshape(-1, 5).T
    smem = DTYPE_BYTES[dtype] * (bm * bk + bn * bk) * stages + _SMEM_EXTRA_BYTES
    threads = warps * 32
    accumulator = bm * bn
    return ((smem > device.smem_per_block_optin) | (threads > MAX_THREADS_PER_BLOCK)
            | (-(-accumulator // threads) > _MAX_ACC_REGISTERS) | (accumulator > device.registers_per_sm))



def inductor_configs(problem: Problem, search_space: SearchSpace = "exhaustive",
                     torch_version: str | None = None) -> list[Raw]:
    """The configs Inductor's heuristic yields for `problem`, in Inductor's order (no smem prune)."""
    if search_space == "exhaustive":
        scaled = prune_register_spills(scale(exhaustive_grid(), problem.m, problem.n, problem.k))
    elif search_space == "default":
        scaled = scale(default_grid(torch_version), problem.m, problem.n, problem.k)
    else:
        raise ValueError(f"search_space: expected 'default' or 'exhaustive', got {search_space!r}")
    return finalize(scaled)


def check_torch_version(version: str) -> str:
    """`version` when it names a torch whose config lists this module reproduces (KNOWN_TORCH).

    Raises:
        ConfigError: for any other version (0.1, 3.0, "abc"), listing the known ones: the lists
            of another torch are not known, and guessing one would rank from the wrong space.
    """
    if torch_minor_version(version) not in KNOWN_TORCH:
        known = ", ".join("%d.%d" % minor for minor in KNOWN_TORCH)
        raise ConfigError(f"torch version {version[:40]!r}: the config space is known for torch {known} "
                          "only; name one of them")
    return version


def for_problem(problem: Problem, device: DeviceSpec | str,
                search_space: SearchSpace = "exhaustive",
                torch_version: str | None = None) -> list[GemmConfig]:
    """Inductor's configs for `problem`, minus those that cannot fit the device's shared memory.
    `torch_version`: whose lists (default: the installed torch's); one given must be known
    (`check_torch_version`)."""
    spec = get_device(device)
    if torch_version is not None:
        check_torch_version(torch_version)
    if search_space == "default":
        torch_version = "%d.%d" % torch_minor_version(torch_version)
    # The space depends on m, n, k only through their powers of two clamped to the grids' blocks
    # (`scale` never raises a block above 256, so 512 and 8192 clamp alike), so many problems share
    # one cached list (this runs inside every torch.compile GEMM lowering).
    hints = tuple(min(max(_next_power_of_2(x), _MIN_BLOCK), _MAX_BLOCK)
                  for x in (problem.m, problem.n, problem.k))
    return list(_space(hints, problem.dtype_bytes, spec, search_space, torch_version))


@functools.lru_cache(maxsize=512)
def _space(hints: tuple[int, int, int], dtype_bytes: int, spec: DeviceSpec, search_space: SearchSpace,
           torch_version: str | None) -> tuple[GemmConfig, ...]:
    representative = Problem(*hints)
    return tuple(
        GemmConfig.model_construct(block_m=bm, block_n=bn, block_k=bk, num_stages=stages,
                                   num_warps=warps, group_m=group)
        for bm, bn, bk, stages, warps, group in inductor_configs(representative, search_space, torch_version)
        if fits_shared_memory((bm, bn, bk, stages), dtype_bytes, spec)
    )
