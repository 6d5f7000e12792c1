"""The performance-model interface, the model registry, and `load_default`.

A PerformanceModel predicts the runtime of each candidate config for one GEMM problem:
`estimate(m, n, k, dtype, configs)` returns float64 milliseconds, one per config, in input
order, lower is better, finite and positive. Models run on the CPU in eval mode, are
deterministic, and give the same answer whether configs are scored together or one at a time.
"""

from __future__ import annotations

import abc
import importlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ModelError
from kernel_select.problem import Problem

log = logging.getLogger(__name__)

#: Where trained models live: models/<device key>/ next to the package, unless overridden.
MODELS_DIR_ENV = "KERNEL_SELECT_MODELS_DIR"


def models_dir() -> Path:
    override = os.environ.get(MODELS_DIR_ENV)
    return Path(override) if override else Path(__file__).resolve().parent.parent.parent / "models"


class PerformanceModel(abc.ABC):
    """Predicts GEMM kernel runtime in milliseconds. Lower is better."""

    #: short registry name, e.g. "mlp" or "analytical"
    name: str = "abstract"

    def __init__(self, device: DeviceSpec | str) -> None:
        self.device = get_device(device)

    @abc.abstractmethod
    def estimate(self, m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig]) -> np.ndarray:
        """Runtime in ms, float64, shape (len(configs),), in the order of `configs`.

        Raises:
            UnsupportedProblemError: if this model cannot score `dtype` or the shape.
        """

    def estimate_problem(self, problem: Problem, configs: Sequence[GemmConfig]) -> np.ndarray:
        """`estimate` for a whole Problem. Models that know about `op` and `batch` override this;
        the default scores one batch element and scales by the batch count, since batch
        elements are more CTAs of the same kernel."""
        runtime_ms = self.estimate(problem.m, problem.n, problem.k, problem.dtype, configs)
        return runtime_ms * problem.batch if problem.batch != 1 else runtime_ms

    def describe(self) -> str:
        """One line for humans: which model, for which device, trained on what."""
        return f"{self.name} model for {self.device.key}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()!r})"


ModelFactory = Callable[[DeviceSpec], PerformanceModel]
_REGISTRY: dict[tuple[str, str], ModelFactory] = {}


def register_model(name: str, factory: ModelFactory, device: str = "*") -> None:
    """Register `factory(device_spec) -> model` under `name`, for one device key or all ("*")."""
    _REGISTRY[(device, name)] = factory


def registered_models(device: str | None = None) -> list[str]:
    """Names of the models registered for `device` (or for any device)."""
    _ensure_builtin_models()
    return sorted({name for dev, name in _REGISTRY if device is None or dev in ("*", device)})


def get_model(name: str, device: DeviceSpec | str = "h100") -> PerformanceModel:
    """Instantiate the model `name` for `device`; a device-specific registration wins over '*'."""
    _ensure_builtin_models()
    spec = get_device(device)
    factory = _REGISTRY.get((spec.key, name)) or _REGISTRY.get(("*", name))
    if factory is None:
        raise ModelError(
            f"model: no model {name!r} for device {spec.key!r}; available: "
            f"{', '.join(registered_models(spec.key)) or 'none'}"
        )
    return factory(spec)


def load_default(device: DeviceSpec | str = "h100") -> PerformanceModel:
    """The best model shipped for `device`: the trained MLP when models/<device>/ has one,
    otherwise the analytical roofline model. `model.describe()` says which was chosen."""
    _ensure_builtin_models()
    spec = get_device(device)
    try:
        return get_model("mlp", spec)
    except ModelError as exc:
        # A missing model is normal (a device without measurements); a shipped one that fails to
        # load is a problem worth seeing.
        shipped = (models_dir() / spec.key / "mlp.pt").exists()
        (log.warning if shipped else log.info)(
            "no usable trained model for %s (%s); using the analytical model", spec.key, exc)
    return get_model("analytical", spec)


def _ensure_builtin_models() -> None:
    # Importing the implementations registers them; done lazily so `import kernel_select` stays
    # light and a broken optional model cannot break the interface module.
    for module in ("kernel_select.model.analytical", "kernel_select.model.mlp",
                   "kernel_select.model.ensemble"):
        try:
            importlib.import_module(module)
        except ImportError as exc:  # e.g. torch missing: the other model still works
            log.debug("%s unavailable: %s", module, exc)
