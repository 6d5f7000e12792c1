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
    ProblemError,
    UnsupportedProblemError,
)
from kernel_select.model import PerformanceModel, get_model, load_default, register_model
from kernel_select.problem import Problem

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "DatasetError", "DeviceError", "DeviceSpec", "GemmConfig", "KernelSelectError",
    "LUTError", "ModelCardMismatchError", "ModelError", "PerformanceModel", "Problem", "ProblemError",
    "UnsupportedProblemError", "get_device", "get_model", "load_default", "register_model",
]
