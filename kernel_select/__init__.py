"""kernel_select: rank Triton GEMM configs with a learned model so max-autotune benchmarks only the top-k.

    import kernel_select
    kernel_select.top_k(560, 1280, 3420, "bfloat16", gemm_topk=4, device="h100")

    import kernel_select.inductor as ks_inductor          # torch.compile: see the README
    ks_inductor.install(gemm_topk=4)

Importing this package imports neither triton nor torch._inductor.
"""

from kernel_select._version import __version__
from kernel_select.api import estimate, top_k
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
    NoTrainedModelError,
    OptionError,
    ProblemError,
    UnsupportedProblemError,
)
from kernel_select.model import PerformanceModel, get_model, load_default, register_model
from kernel_select.problem import Problem
from kernel_select.decision import Choice, Selection, select


__all__ = [
    "Choice", "ConfigError", "DatasetError", "DeviceError", "DeviceSpec", "GemmConfig", "KernelSelectError",
    "LUTError", "ModelCardMismatchError", "ModelError", "NoTrainedModelError", "OptionError",
    "PerformanceModel", "Problem", "ProblemError", "Selection", "UnsupportedProblemError", "__version__",
    "estimate", "get_device", "get_model", "load_default", "record", "register_model", "select", "top_k",
    "triton_pruner",
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
