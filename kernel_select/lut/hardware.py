"""Whether a LUT's configs can run on their device: `check_fits` applies the config space's one
hardware check (`space.unfit_reason`: shared memory, registers and threads per block) to a table."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernel_select.device import DeviceSpec
from kernel_select.errors import LUTError
from kernel_select.problem import precision_dtype
from kernel_select.space import unfit_reason

if TYPE_CHECKING:
    from kernel_select.lut.schema import KernelLUT

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
            reason = unfit_reason(config, precision_dtype(row.dtype), device)
            if reason is not None:
                # Named by key, not index: the table is in canonical order, the file may not be.
                slot = "" if field == "pin" else f"[{index}]"
                where = (f"devices.{row.device}.{row.op}.{row.dtype} "
                         f"({row.entry.describe_key()}).{field}{slot}")
                raise LUTError(f"{source}: {where}: cannot run on {device.key}: {reason}; "
                               "use smaller blocks or fewer stages")
    return checked
