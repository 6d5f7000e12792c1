# Declarations of the options kernel_select adds to torch._inductor.config.
#
# kernel_select.inductor.register_options() turns this module into a torch config module with
# torch's own install_config_module() (so the entries are built by whichever torch is installed)
# and copies the entries into torch._inductor.config._config. The annotations must be real
# typing objects, not strings: torch.compile(options=...) reads them to type-check values, and
# skips the check for Optional/Union types, leaving validation to kernel_select.knobs.
#
# No `from __future__ import annotations` here, on purpose (it would turn them into strings).
from typing import Optional, Union

# Path of a kernel lookup table whose entries are always benchmarked; None = kernel_select.knobs.
kernel_lut_path: Optional[str] = None

# Triton GEMM configs to benchmark: int, "DEFAULT" or "SAME"; None = kernel_select.knobs.
gemm_topk: Optional[Union[int, str]] = None

# Values a dynamic M takes ("560..8192" or "560,1024,2048"); None = kernel_select.knobs.
gemm_dynamic_m: Optional[str] = None

# Precompile autotuned Triton choices in the compiling process (bool); None = kernel_select.knobs.
gemm_precompile_in_process: Optional[bool] = None
