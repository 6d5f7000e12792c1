"""The Inductor integration: the only part of kernel_select that imports torch._inductor.

    import kernel_select.inductor as ks_inductor

    ks_inductor.install()                # gemm_topk=4, in-process precompile: the defaults
    model = torch.compile(model, options=ks_inductor.gemm_autotune_options())

choices   the handler: read Inductor's inputs, decide(), build the candidate lists, fall back
inputs    what Inductor hands the handler, read once into a GemmRequest (kernel_select.decision)
choice_builder  what the handler hands back: KernelTemplateChoices, pins, bias_addmm
wrapping  composing with a wrapped handler; no Triton template for grouped convolutions
pointwise_epilogue  whether a GEMM feeds an epilogue cuBLAS would leave unfused
cache_key   what the handler's uuid (Inductor's cache key) is made of
settings  knob precedence, the decision's Policy (loaded and checked by install()), torch options
install   the picklable factory, install / uninstall / enabled
precompile  precompile_in_process: autotuned Triton choices precompiled in this process
modes     torch.compile options: max-autotune's, and GEMM-only autotuning (recommended for models)
probe     experiment helpers (offline compare and fidelity): autotuning records
eager_parity  config patches that keep GEMVs on cuBLAS as eager does
record    record(): a LUT from Inductor's own autotuning (feedback saver, caches off)
bucketed  one compiled graph per length bucket, so a LUT's per-bucket pins are served
lowered   lowered_gemms(): the GEMMs a compile lowers, as the handler sees them (pretune's discovery)
"""

from kernel_select.inductor.bucketed import Bucketed, bucketed, mark_bucket
from kernel_select.inductor.choices import KernelSelectChoices
from kernel_select.inductor.eager_parity import eager_parity_patches
from kernel_select.inductor.install import ChoicesFactory, enabled, install, uninstall
from kernel_select.inductor.lowered import LoweredGemm, lowered_gemms
from kernel_select.inductor.modes import gemm_autotune_options, max_autotune_options
from kernel_select.inductor.probe import AutotuneRecord, ChoiceTiming, record_autotuning
from kernel_select.inductor.record import Recording, record
from kernel_select.inductor.settings import Settings, register_options, resolve_settings

__all__ = ["AutotuneRecord", "Bucketed", "ChoiceTiming", "ChoicesFactory", "KernelSelectChoices",
           "LoweredGemm", "Settings", "Recording", "bucketed", "eager_parity_patches", "enabled",
           "gemm_autotune_options", "install", "lowered_gemms", "mark_bucket", "max_autotune_options",
           "record", "record_autotuning", "register_options", "resolve_settings", "uninstall"]
