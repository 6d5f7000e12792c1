"""kernel_select: rank Triton GEMM configs with a learned model so max-autotune benchmarks only the top-k.

Importing this package never imports triton or torch._inductor.
"""

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import (
    ConfigError,
    DatasetError,
    DeviceError,
    KernelSelectError,
    LUTError,
    ModelCardMismatchError,
    ModelError,
    OptionError,
    ProblemError,
    UnsupportedProblemError,
)
from kernel_select.model import PerformanceModel, get_model, load_default, register_model
from kernel_select.problem import Problem

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "DatasetError", "DeviceError", "DeviceSpec", "GemmConfig", "KernelSelectError",
    "LUTError", "ModelCardMismatchError", "ModelError", "OptionError", "PerformanceModel", "Problem",
    "ProblemError", "UnsupportedProblemError", "get_device", "get_model", "load_default", "record",
    "register_model", "triton_pruner",
]


def __getattr__(name: str) -> object:
    # Lazy exports, so that importing the package stays free of triton and torch._inductor.
    if name == "triton_pruner":
        from kernel_select.triton_autotune import triton_pruner

        return triton_pruner
    if name == "record":
        from kernel_select.inductor.record import record

        return record
    raise AttributeError(f"module 'kernel_select' has no attribute {name!r}")
