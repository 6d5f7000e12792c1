"""The performance-model interface and the model registry (kernel_select.model registers the built-in
models, "mlp" and "analytical", when it is imported).

A PerformanceModel predicts the runtime of each candidate config for one GEMM problem. Callers use
`estimate`, in either form:

    model.estimate(problem, configs)              # a validated Problem (any op, any batch)
    model.estimate(m, n, k, dtype, configs)       # plain mm, validated into a Problem here

It validates once, then calls the one method a model implements, `predict(problem, device,
configs)`, and checks that it returned float64 milliseconds, one finite positive value per config,
in input order. Models run on the CPU in eval mode and are deterministic.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Sequence
from typing import Any, overload

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device, resolve
from kernel_select.errors import ConfigError, ModelError, ProblemError, UnsupportedProblemError
from kernel_select.problem import Problem, dtype_name
from kernel_select.space import unfit_mask

log = logging.getLogger(__name__)


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
        """Runtime in ms, float64, shape (len(configs),), in the order of `configs`; inf for a
        config that cannot run on the model's device (`space.unfit_mask`: shared memory,
        registers, threads), so it ranks last and no time is claimed for it.

        Raises:
            ProblemError: for invalid sizes.
            ConfigError: for a config that is not a GemmConfig.
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
        unfit = unfit_mask(configs, problem.dtype, self.device)
        return np.where(unfit, np.inf, runtime_ms) if unfit.any() else runtime_ms

    @abc.abstractmethod
    def predict(self, problem: Problem, device: DeviceSpec, configs: Sequence[GemmConfig]) -> np.ndarray:
        """Runtime in ms of each of the (non-empty) `configs` for `problem` on `device`.

        Called by `estimate` only, with validated arguments; `device` is `self.device`.

        Raises:
            UnsupportedProblemError: if this model cannot score the problem's dtype, op or shape.
        """

    def estimate_aten(self, problem: Problem) -> float | None:
        """Predicted runtime in ms of the ATen GEMM (cuBLAS) for `problem`, in the units of
        `estimate`, or None when this model does not score cuBLAS."""
        return None

    def auto_topk(self, runtime_ms: np.ndarray, cap: int, problem: Problem | None = None,
                  configs: Sequence[GemmConfig] | None = None) -> int | None:
        """For gemm_topk="auto": how many configs (1..cap) to benchmark given this model's predictions
        `runtime_ms` for one GEMM's `configs`, or None when the model has no measure of its own
        uncertainty."""
        return None

    def domain_gap(self, problem: Problem) -> str:
        """Why `problem` lies outside what this model was trained on (an op, dtype, layout or size never
        measured, or a stratum with too few problems), or "" where it does not; a model not trained on
        data has no outside. The Inductor handler then keeps Inductor's own candidates beside the
        model's, and gemm_topk="auto" takes its cap. By default: a layout outside `trained_layouts()`."""
        trained = self.trained_layouts()
        if trained is not None and problem.layout not in trained:
            return f"layout {problem.layout} not in the model's training data"
        return ""

    def trained_layouts(self) -> tuple[str, ...] | None:
        """The operand layouts this model's training data had, from its card; None for a model that
        is not trained on data (its predictions have no layout to be out of)."""
        return None

    def describe(self) -> str:
        """One line for humans: which model, for which device, trained on what."""
        return f"{self.name} model for {self.device.key}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.describe()!r})"


def _problem_and_configs(args: tuple[Any, ...]) -> tuple[Problem, Sequence[GemmConfig]]:
    if len(args) == 2 and isinstance(args[0], Problem):
        problem, configs = args
    elif len(args) == 5:
        m, n, k, dtype, configs = args
        try:
            dtype = dtype_name(dtype)
        except ProblemError as exc:  # a dtype outside the vocabulary is one no model can score
            raise UnsupportedProblemError(str(exc)) from None
        problem = Problem(m, n, k, dtype)
    else:
        raise TypeError("estimate() takes (problem, configs) or (m, n, k, dtype, configs), "
                        f"got {len(args)} arguments")
    if isinstance(configs, (GemmConfig, str, bytes, dict)) or not isinstance(configs, Sequence):
        raise ConfigError(f"configs: expected a sequence of GemmConfig, got {type(configs).__name__}")
    for index, config in enumerate(configs):
        if not isinstance(config, GemmConfig):
            hint = " (GemmConfig(**d) builds one from a dict)" if isinstance(config, dict) else ""
            raise ConfigError(f"configs[{index}]: expected a GemmConfig, got {type(config).__name__}{hint}")
    return problem, configs


# -- the registry ------------------------------------------------------------------------------------

ModelFactory = Callable[[DeviceSpec], PerformanceModel]
_REGISTRY: dict[tuple[str, str], ModelFactory] = {}


def register_model(name: str, factory: ModelFactory, device: str = "*") -> None:
    """Register `factory(device_spec) -> model` under `name`, for one device key or all ("*")."""
    if device != "*":
        device = get_device(device).key
    _REGISTRY[(device, name)] = factory


def registered_models(device: str | None = None) -> list[str]:
    """Names of the models registered for `device` (or for any device)."""
    return sorted({name for dev, name in _REGISTRY if device is None or dev in ("*", device)})


def get_model(name: str, device: DeviceSpec | str | None = None) -> PerformanceModel:
    """Instantiate the model `name` for `device` (None: the local GPU); a device-specific registration
    wins over '*'. "mlp" is the device's trained model (model/folders.py's policy)."""
    spec = resolve(device)
    factory = _REGISTRY.get((spec.key, name)) or _REGISTRY.get(("*", name))
    if factory is None:
        raise ModelError(f"model: no model {name!r} for device {spec.key!r}; available: "
                         f"{', '.join(registered_models(spec.key)) or 'none'}")
    return factory(spec)
