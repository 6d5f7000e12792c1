"""The performance-model interface, the model registry, and `load_default`.

A PerformanceModel predicts the runtime of each candidate config for one GEMM problem. Callers
use `estimate`, in either form:

    model.estimate(problem, configs)              # a validated Problem (any op, any batch)
    model.estimate(m, n, k, dtype, configs)       # plain mm, validated into a Problem here

It validates once, then calls the one method a model implements, `predict(problem, device,
configs)`, with the Problem and the model's resolved DeviceSpec, and returns float64 milliseconds,
one per config, in input order, lower is better. Models run on the CPU in eval mode, are
deterministic, and give the same answer whether configs are scored together or one at a time.

No function here assumes a device: `device=None` means the GPU this process runs on.
"""

from __future__ import annotations

import abc
import importlib
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device, resolve, same_architecture
from kernel_select.errors import ModelError, ProblemError, UnsupportedProblemError
from kernel_select.problem import Problem, dtype_name
from kernel_select.resources import MODELS_DIR_ENV, models_dir

log = logging.getLogger(__name__)

__all__ = ["MODELS_DIR_ENV", "ModelFactory", "PerformanceModel", "get_model", "load_default", "models_dir",
           "register_model", "registered_models"]


class PerformanceModel(abc.ABC):
    """Predicts GEMM kernel runtime in milliseconds. Lower is better."""

    #: short registry name, e.g. "mlp" or "analytical"
    name: str = "abstract"

    def __init__(self, device: DeviceSpec | str) -> None:
        self.device = get_device(device)

    @overload
    def estimate(self, problem: Problem, configs: Sequence[GemmConfig], /) -> np.ndarray: ...

    @overload
    def estimate(self, m: int, n: int, k: int, dtype: str, configs: Sequence[GemmConfig], /
                 ) -> np.ndarray: ...

    def estimate(self, *args: Any) -> np.ndarray:
        """Runtime in ms, float64, shape (len(configs),), in the order of `configs`.

        Raises:
            ProblemError: for invalid sizes.
            UnsupportedProblemError: for a dtype, op or shape this model cannot score.
            ModelError: the model returned something other than one finite positive runtime per config.
        """
        problem, configs = _problem_and_configs(args)
        if len(configs) == 0:
            return np.zeros(0, dtype=np.float64)
        runtime_ms = np.asarray(self.predict(problem, self.device, configs), dtype=np.float64)
        well_formed = runtime_ms.shape == (len(configs),) and np.all(np.isfinite(runtime_ms))
        if not well_formed or np.any(runtime_ms <= 0):
            raise ModelError(f"model: {self.describe()} returned malformed runtimes for {problem} (shape "
                             f"{runtime_ms.shape} for {len(configs)} configs, expected finite positive ms)")
        return runtime_ms

    @abc.abstractmethod
    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        """Runtime in ms of each of the (non-empty) `configs` for `problem` on `device`.

        Called by `estimate` only, with validated arguments; `device` is `self.device`.

        Raises:
            UnsupportedProblemError: if this model cannot score the problem's dtype, op or shape.
        """

    def estimate_aten(self, problem: Problem) -> float | None:
        """Predicted runtime in ms of the ATen mm (cuBLAS) for `problem`, in the units of
        `estimate`, or None when this model does not score cuBLAS."""
        return None

    def auto_topk(self, runtime_ms: np.ndarray, cap: int, problem: Problem | None = None,
                  configs: Sequence[GemmConfig] | None = None) -> int | None:
        """For `topk="auto"`: how many configs (1..cap) to benchmark given this model's predictions
        `runtime_ms` for one GEMM's `configs` (a model may look at the problem and the configs
        again), or None when the model has no measure of its own uncertainty."""
        return None

    def trained_layouts(self) -> tuple[str, ...] | None:
        """The operand layouts (kernel_select.layouts) this model's training data had, from its
        card; None for a model that is not trained on data (its predictions have no layout
        to be out of)."""
        return None

    def describe(self) -> str:
        """One line for humans: which model, for which device, trained on what."""
        return f"{self.name} model for {self.device.key}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()!r})"


def _problem_and_configs(args: tuple[Any, ...]) -> tuple[Problem, Sequence[GemmConfig]]:
    if len(args) == 2 and isinstance(args[0], Problem):
        return args[0], args[1]
    if len(args) != 5:
        raise TypeError("estimate() takes (problem, configs) or (m, n, k, dtype, configs), "
                        f"got {len(args)} arguments")
    m, n, k, dtype, configs = args
    try:
        dtype = dtype_name(dtype)
    except ProblemError as exc:  # a dtype outside the vocabulary is one no model can score
        raise UnsupportedProblemError(str(exc)) from None
    return Problem(m, n, k, dtype), configs


ModelFactory = Callable[[DeviceSpec], PerformanceModel]
_REGISTRY: dict[tuple[str, str], ModelFactory] = {}


def register_model(name: str, factory: ModelFactory, device: str = "*") -> None:
    """Register `factory(device_spec) -> model` under `name`, for one device key or all ("*")."""
    if device != "*":
        device = get_device(device).key
    _REGISTRY[(device, name)] = factory


def registered_models(device: str | None = None) -> list[str]:
    """Names of the models registered for `device` (or for any device)."""
    _ensure_builtin_models()
    return sorted({name for dev, name in _REGISTRY if device is None or dev in ("*", device)})


def get_model(name: str, device: DeviceSpec | str | None = None) -> PerformanceModel:
    """Instantiate the model `name` for `device` (None: the local GPU); a device-specific
    registration wins over '*'."""
    _ensure_builtin_models()
    spec = resolve(device)
    factory = _REGISTRY.get((spec.key, name)) or _REGISTRY.get(("*", name))
    if factory is None:
        raise ModelError(
            f"model: no model {name!r} for device {spec.key!r}; available: "
            f"{', '.join(registered_models(spec.key)) or 'none'}"
        )
    return factory(spec)


def load_default(device: DeviceSpec | str | None = None) -> PerformanceModel:
    """The best model shipped for `device` (None: the local GPU): the trained MLP when
    models/<device>/ (or a same-architecture device's folder) has one, otherwise the analytical
    roofline model. `model.describe()` says which was chosen.

    A device with no trained model falls back quietly (INFO); one whose shipped model cannot be
    loaded falls back with a WARNING naming the file and the fix.
    """
    _ensure_builtin_models()
    spec = resolve(device)
    try:
        return get_model("mlp", spec)
    except ModelError as exc:
        if shipped_model_dir(spec, "mlp") is not None:
            log.warning("kernel_select: the trained model for %s cannot be used, ranking with the "
                        "untrained analytical model instead: %s", spec.key, exc)
        else:
            log.info("no trained model for %s (%s); using the analytical model", spec.key, exc)
    return get_model("analytical", spec)


def shipped_model_dir(spec: DeviceSpec, stem: str) -> tuple[Path, DeviceSpec] | None:
    """The folder holding checkpoint `stem` for `spec`, and the device it was trained for.

    models/<spec.key>/ comes first. Until a device has its own, a checkpoint of a device with
    the same SM architecture (an H100 model for an H200 or an H100 PCIe) is used, with one warning
    per process: the kernels and their relative speeds carry over, absolute times shift a little.
    None when neither exists.
    """
    root = models_dir()
    if (root / spec.key / f"{stem}.pt").exists():
        return root / spec.key, spec
    for other in same_architecture(spec):
        folder = root / other.key
        if (folder / f"{stem}.pt").exists():
            if (spec.key, stem) not in _WARNED_SUBSTITUTES:
                _WARNED_SUBSTITUTES.add((spec.key, stem))
                log.warning("kernel_select: no %s model trained on %s yet; using %s (trained on %s, same "
                            "architecture %s). Train one for this GPU with `kernel-select train --device "
                            "%s --out %s`", stem, spec.key, folder / f"{stem}.pt", other.key,
                            spec.architecture, spec.key, root / spec.key)
            return folder, other
    return None


_WARNED_SUBSTITUTES: set[tuple[str, str]] = set()


def _ensure_builtin_models() -> None:
    # Importing the implementations registers them; done lazily so `import kernel_select` stays
    # light and a broken optional model cannot break the interface module.
    for module in ("kernel_select.model.analytical", "kernel_select.model.mlp"):
        try:
            importlib.import_module(module)
        except ImportError as exc:  # e.g. torch missing: the other model still works
            log.debug("%s unavailable: %s", module, exc)
