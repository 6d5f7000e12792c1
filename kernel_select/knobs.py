"""Knobs for the Inductor integration, on torch's own config mechanism (the one torch._inductor.config
uses), so they read, patch and fail like Inductor's options:

    import kernel_select.knobs as knobs

    knobs.gemm_topk = 4
    with knobs.patch(kernel_lut_path="my_lut.json", gemm_topk=8):
        ...
    knobs.gemm_tpok = 3        # AttributeError: kernel_select.knobs.gemm_tpok does not exist

The knobs, what each accepts and its environment variable are declared in kernel_select.options
(`KNOBS`); this module is generated from those declarations. A value is
checked when it is used (by the handler, once per compile: a bad one is an OptionError naming the
knob, and Inductor keeps its own candidates); the environment is read and checked once, when this
module is imported. Where a knob is set beside install() arguments and torch.compile options, the
torch.compile option wins, then install()'s argument, then the knob.

As with torch._inductor.config, on torch 2.13 a value set here is seen by the thread that set it
(torch keeps config values per thread from 2.13); set knobs in the thread that compiles.

The spellings before 1.0 (`topk`, `cublas_margin`, ...) read and write the same knobs; they are
deprecated (each knob's `old_names`).
"""

import sys

from torch.utils._config_module import Config, install_config_module

from kernel_select import options as _options

# One entry per declared knob (environment > default), and an alias per spelling before 1.0.
globals().update({name: _options.from_env(name) for name in _options.KNOBS})
globals().update({old: Config(alias=f"kernel_select.knobs.{new}")
                  for old, new in _options.DEPRECATED_NAMES.items()})

install_config_module(sys.modules[__name__])
