"""Knobs for the Inductor integration, on torch's own config mechanism (the one torch._inductor.config
uses), so they read, patch and fail like Inductor's options:

    import kernel_select.knobs as knobs

    knobs.gemm_topk = 4
    with knobs.patch(kernel_lut_path="my_lut.json", gemm_topk=8):
        ...
    knobs.gemm_tpok = 3        # AttributeError: kernel_select.knobs.gemm_tpok does not exist

The knobs, what each accepts and its environment variable are in kernel_select.options. A value is
checked when it is used (by the handler, once per compile: a bad one is an OptionError naming the
knob, and Inductor keeps its own candidates); the environment is read and checked once, when this
module is imported. Where a knob is set beside install() arguments and torch.compile options, the
torch.compile option wins, then install()'s argument, then the knob.

As with torch._inductor.config, on torch 2.13 a value set here is seen by the thread that set it
(torch keeps config values per thread from 2.13); set knobs in the thread that compiles.

The spellings before 1.0 (`topk`, `cublas_margin`, ...) read and write the same knobs; they are
deprecated (kernel_select.options.DEPRECATED_NAMES).
"""

import sys

from torch.utils._config_module import Config, install_config_module

from kernel_select import options as _options

kernel_lut_path = _options.from_env("kernel_lut_path")
gemm_topk = _options.from_env("gemm_topk")
gemm_auto_topk_cap = _options.from_env("gemm_auto_topk_cap")
gemm_cublas_margin = _options.from_env("gemm_cublas_margin")
gemm_dynamic_m = _options.from_env("gemm_dynamic_m")
gemm_dynamic_buckets = _options.from_env("gemm_dynamic_buckets")
gemm_precompile_in_process = _options.from_env("gemm_precompile_in_process")
gemm_model = _options.from_env("gemm_model")
gemm_device = _options.from_env("gemm_device")

topk = Config(alias="kernel_select.knobs.gemm_topk")
auto_topk_cap = Config(alias="kernel_select.knobs.gemm_auto_topk_cap")
cublas_margin = Config(alias="kernel_select.knobs.gemm_cublas_margin")
dynamic_m = Config(alias="kernel_select.knobs.gemm_dynamic_m")
precompile_in_process = Config(alias="kernel_select.knobs.gemm_precompile_in_process")
model = Config(alias="kernel_select.knobs.gemm_model")
device = Config(alias="kernel_select.knobs.gemm_device")

install_config_module(sys.modules[__name__])
