# Declarations of the options kernel_select adds to torch._inductor.config: every knob of
# kernel_select.options, under its own name, None meaning "not set here" (kernel_select.knobs decides).
#
# kernel_select.inductor.register_options() turns this module into a torch config module with torch's
# own install_config_module() (so the entries are built by whichever torch is installed) and copies the
# entries into torch._inductor.config._config. The annotations must be real typing objects, not strings:
# torch.compile(options=...) reads them to type-check values, and skips the check for Optional/Union
# types, leaving validation to kernel_select.options.
#
# No `from __future__ import annotations` here, on purpose (it would turn them into strings).
from typing import Optional, Union

kernel_lut_path: Optional[str] = None
gemm_topk: Optional[Union[int, str]] = None
gemm_auto_topk_cap: Optional[Union[int, str]] = None
gemm_cublas_margin: Optional[Union[float, str]] = None
gemm_dynamic_m: Optional[Union[str, list]] = None
gemm_dynamic_buckets: Optional[Union[str, list]] = None
gemm_precompile_in_process: Optional[Union[bool, str]] = None
gemm_model: Optional[str] = None
gemm_device: Optional[str] = None
