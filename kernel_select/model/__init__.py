"""Performance models (inference only): the interface and registry (base), which trained model serves a
device (folders), the features, the model card, the learned MLP, the gradient-boosted trees (gbdt,
walked in numpy by trees), the analytical roofline model, the cuBLAS decision's networks and rule
(cublas), and gemm_topk="auto" (auto_topk). Training lives in kernel_select.offline.training."""

from __future__ import annotations


from kernel_select.device import DeviceSpec, resolve
from kernel_select.model import analytical as _analytical  # noqa: F401 -- registers "analytical"
from kernel_select.model.base import PerformanceModel, get_model, register_model, registered_models
from kernel_select.model.cublas import GATE_STEM, CublasGate
from kernel_select.model.folders import find_checkpoint
from kernel_select.model import gbdt as _gbdt  # noqa: F401 -- registers "gbdt"
from kernel_select.model.mlp import MLPModel  # registers "mlp"

__all__ = ["PerformanceModel", "get_model", "load_default", "load_gate", "register_model",
           "registered_models"]


def load_default(device: DeviceSpec | str | None = None) -> PerformanceModel:
    """The trained model serving `device` (None: the local GPU), by model/folders.py's policy.

    Raises:
        NoTrainedModelError: no model folder has one for the device or its architecture.
        ModelError: one is there but does not load (the message names the file and the fix).
    """
    spec = resolve(device)
    return MLPModel.load_for(spec)


def load_gate(device: DeviceSpec | str | None = None) -> CublasGate | None:
    """The cuBLAS gate serving `device`, or None where no folder has one.

    Raises:
        ModelError: a gate is there but does not load.
    """
    spec = resolve(device)
    # One gate serves its architecture by design (it predicts cuBLAS over Triton per problem, and
    # `calibrate` trains no gate): no warning for the stand-in, one INFO line.
    found = find_checkpoint(spec, GATE_STEM, stand_in_by_design=True)
    if found is None:
        return None
    return CublasGate.load(found[0], spec, allow_same_architecture=True)
