"""The Inductor integration: the only part of kernel_select that imports torch._inductor."""

from kernel_select.inductor.handler import (
    ChoicesFactory,
    KernelSelectChoices,
    enabled,
    install,
    max_autotune_options,
    record_autotuning,
    register_options,
    uninstall,
)

__all__ = ["ChoicesFactory", "KernelSelectChoices", "enabled", "install", "max_autotune_options",
           "record_autotuning", "register_options", "uninstall"]
