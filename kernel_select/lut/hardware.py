"""Can a LUT config run on a device at all? Shared memory, registers and threads per block.

A hand-written config such as 1024x1024x1024 s8 w32 is well formed but asks for 33.5 MB of shared
memory, where an H100 block may use 232,448 B: Triton fails to compile it ("out of resource"). The
shared-memory figure is the config space's own estimate (`space.shared_memory_bytes`, the one
Inductor uses), and the register figure the same fp32-accumulator count that `space` prunes
EXHAUSTIVE configs with, so the LUT rejects exactly what the space would never propose.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from kernel_select.device import DeviceSpec
from kernel_select.errors import LUTError
from kernel_select.problem import DTYPE_BYTES
from kernel_select.space import prune_register_spills, shared_memory_bytes

if TYPE_CHECKING:
    from kernel_select.configs import GemmConfig
    from kernel_select.lut.schema import KernelLUT

#: CUDA's limit on threads in one block (all architectures since Fermi).
MAX_THREADS_PER_BLOCK = 1024
#: A thread may address at most 255 registers (CUDA's per-thread limit).
MAX_REGISTERS_PER_THREAD = 255


@functools.lru_cache(maxsize=4096)
def unfit_reason(config: GemmConfig, dtype: str, device: DeviceSpec) -> str | None:
    """Why `config` cannot run for `dtype` on `device` (the figure and the limit), or None.

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


def check_fits(lut: KernelLUT, device: DeviceSpec, *, source: str = "<lut>") -> int:
    """Raise LUTError at the first config of `device`'s tables that cannot run on it; return how
    many entries were checked (0 when the table has none for `device`).

    Raises:
        LUTError: naming the JSON location, the figure and the limit.
    """
    checked = 0
    for row in lut.entries():
        if row.device != device.key:
            continue
        checked += 1
        field = "pin" if row.entry.configs is None else "configs"
        for index, config in enumerate(row.entry.candidates):
            reason = unfit_reason(config, row.dtype, device)
            if reason is not None:
                # Named by key, not index: the table is in canonical order, the file may not be.
                slot = "" if field == "pin" else f"[{index}]"
                where = (f"devices.{row.device}.{row.op}.{row.dtype} "
                         f"({row.entry.describe_key()}).{field}{slot}")
                raise LUTError(f"{source}: {where}: cannot run on {device.key}: {reason}; "
                               "use smaller blocks or fewer stages")
    return checked
