"""`prune_configs_by` adapter: let a performance model pick which configs `@triton.autotune` times.

    @triton.autotune(configs=CONFIGS, key=["M", "N", "K"],
                     prune_configs_by=kernel_select.triton_pruner(gemm_topk=4))
    @triton.jit
    def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, ..., BLOCK_M: tl.constexpr, ...):
        ...

Triton calls `early_config_prune(configs, named_args, **kwargs)` once per new autotuning key. We
read M, N, K and the dtype, map each triton.Config to a GemmConfig, drop those that cannot run on
the device (`space.unfit_reason`, the check LUT configs pass too), and let `kernel_select.select`
choose k of the rest: lookup-table entries among them first, then the model's order. There is no
cuBLAS decision here: the kernel is the user's, with no cuBLAS alternative. Models, LUTs and
detected devices come from `kernel_select.runtime`, shared with the Inductor handler. Configs we
cannot map (other meta-parameter names, missing BLOCK_K...) are kept after the ranked ones rather
than dropped, so a pruner can never remove the only config that works. Nothing here imports triton:
the configs come from the caller.
"""

from __future__ import annotations

import logging
import types
from collections.abc import Callable, Sequence
from typing import Any

from kernel_select import options, runtime, warn
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.decision import select
from kernel_select.errors import ConfigError, OptionError
from kernel_select.lut import LUTHit
from kernel_select.model import PerformanceModel
from kernel_select.options import DEFAULT_TOPK, SAME, TopK
from kernel_select.problem import Problem, dtype_name
from kernel_select.space import unfit_reason

log = logging.getLogger(__name__)

# Meta-parameter spellings seen in Triton matmul kernels (Inductor's, and the Triton tutorial's).
_NAME_ALIASES = {
    "BLOCK_M": ("BLOCK_M", "BLOCK_SIZE_M"),
    "BLOCK_N": ("BLOCK_N", "BLOCK_SIZE_N"),
    "BLOCK_K": ("BLOCK_K", "BLOCK_SIZE_K"),
    "GROUP_M": ("GROUP_M", "GROUP_SIZE_M"),
}


def triton_pruner(gemm_topk: TopK = DEFAULT_TOPK, m: str = "M", n: str = "N", k: str = "K", dtype: Any = None,
                  model: PerformanceModel | str | None = None, lut: Any = None,
                  device: DeviceSpec | str | None = None, tf32: bool = False,
                  **deprecated: Any) -> dict[str, Callable[..., list[Any]]]:
    """A `prune_configs_by` dict whose `early_config_prune` keeps the model's top configs.

    Args:
        gemm_topk: configs to keep, what kernel_select.options.parse_topk accepts: a count >= 1, a
            fraction in (0, 1] of the mappable configs (at least one is kept), "DEFAULT" (as many as
            Inductor's default list has for the problem), "auto" (as many as the model is unsure
            about) or "SAME" (no pruning). Lookup-table entries among the configs are always kept.
            `top_k=` is the deprecated spelling.
        m, n, k: names of the kernel arguments holding M, N and K.
        dtype: input dtype ("bf16", torch.bfloat16, ...); by default the dtype of the first
            tensor argument.
        model: a PerformanceModel, a registered model name, or None for the model shipped for the
            device (a shipped model that does not load means a warning and no pruning).
        lut: a KernelLUT, a path to one, or None.
        device: device name or spec; by default the GPU of the first tensor argument.
        tf32: the kernel multiplies float32 in TF32 (`tl.dot(..., allow_tf32=True)` or
            `input_precision="tf32"`): ranked as a TF32 problem (`Problem.tf32`), whose LUT list is
            "tf32". A kernel launched on other dtypes warns once and keeps every config.

    Raises:
        OptionError: for an invalid gemm_topk, argument name or tf32, or tf32 with a `dtype` other than
            float32 (at decoration time, not at launch).
    """
    renamed = options.canonical_names(deprecated, where="triton_pruner")
    if set(renamed) - {"gemm_topk"}:
        raise OptionError(f"triton_pruner: unknown argument(s) {', '.join(sorted(deprecated))}")
    gemm_topk = renamed.get("gemm_topk", gemm_topk)
    return {"early_config_prune": ModelPruner(gemm_topk=gemm_topk, m=m, n=n, k=k, dtype=dtype, model=model,
                                              lut=lut, device=device, tf32=tf32)}


class ModelPruner:
    """The `early_config_prune` callable behind triton_pruner (see there)."""

    def __init__(self, *, gemm_topk: TopK, m: str, n: str, k: str, dtype: Any,
                 model: PerformanceModel | str | None, lut: Any, device: DeviceSpec | str | None,
                 tf32: bool = False) -> None:
        self.gemm_topk = options.parse_topk(gemm_topk, source="triton_pruner(gemm_topk=...)")
        for label, name in (("m", m), ("n", n), ("k", k)):
            if not isinstance(name, str) or not name:
                raise OptionError(f"triton_pruner({label}=...): expected an argument name, got {name!r}")
        self.arg_names = (m, n, k)
        self.dtype = dtype_name(dtype) if dtype is not None else None
        if not isinstance(tf32, bool):
            raise OptionError(f"triton_pruner(tf32=...): expected True or False, got {tf32!r}")
        if tf32 and self.dtype not in (None, "float32"):
            raise OptionError(f"triton_pruner(tf32=True): TF32 applies to float32 kernels only, got "
                              f"dtype={self.dtype}")
        self.tf32 = tf32
        self.device = get_device(device) if device is not None else None
        if not (model is None or isinstance(model, (str, PerformanceModel))):
            raise OptionError(f"triton_pruner(model=...): expected a PerformanceModel, a model name "
                              f"or None, got {model!r}")
        self._model = model
        self._lut = lut

    def __call__(self, configs: Sequence[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
        configs = list(configs)
        try:
            return self._prune(configs, {**named_args, **kwargs})
        except Exception as exc:  # noqa: BLE001 -- a pruning problem must not stop the kernel
            warn.warn_fallback(exc, log, "benchmarking all Triton configs")
            return configs

    def _prune(self, configs: list[Any], args: dict[str, Any]) -> list[Any]:
        mapped: list[tuple[Any, GemmConfig]] = []
        unmapped: list[Any] = []
        for config in configs:
            gemm = gemm_config_of(config)
            if gemm is None:
                unmapped.append(config)
            else:
                mapped.append((config, gemm))
        if not mapped or self.gemm_topk == SAME:
            return configs
        problem, device = self._problem(args)
        # A config that cannot run on the device would only fail to compile: never keep one for speed.
        runnable = [(config, gemm) for config, gemm in mapped
                    if unfit_reason(gemm, problem.dtype, device) is None]
        if not runnable:
            return configs
        count = self.gemm_topk
        if isinstance(count, int) and count >= len(runnable) and len(runnable) == len(mapped):
            return configs  # keeps them all: no need for the model
        candidates = list(dict.fromkeys(g for _, g in runnable))
        lut = _Among(self._lut_table(), candidates)
        chosen = select(problem, model=runtime.model(self._model, device), gemm_topk=count, lut=lut,
                        candidates=candidates).choices
        position = {choice.config: i for i, choice in enumerate(chosen)}
        ranked = sorted((pair for pair in runnable if pair[1] in position),
                        key=lambda pair: position[pair[1]])
        kept = [config for config, _ in ranked] + unmapped
        log.debug("kernel_select: %s: benchmarking %d of %d Triton configs", problem, len(kept), len(configs))
        return kept

    def _problem(self, args: dict[str, Any]) -> tuple[Problem, DeviceSpec]:
        sizes = []
        for name in self.arg_names:
            if name not in args:
                raise OptionError(f"triton_pruner: the kernel has no argument {name!r} (arguments: "
                                  f"{', '.join(args)}); pass m=/n=/k= with the names it uses")
            sizes.append(int(args[name]))
        tensor = next((v for v in args.values() if hasattr(v, "dtype") and hasattr(v, "device")), None)
        if self.dtype is not None:
            dtype = self.dtype
        elif tensor is not None:
            dtype = dtype_name(tensor.dtype)
        else:
            raise OptionError("triton_pruner: no tensor argument to read the dtype from; pass dtype=")
        if self.device is not None:
            device = self.device
        elif tensor is not None and getattr(tensor.device, "type", None) == "cuda":
            device = runtime.detected_device(tensor.device.index or 0)
        else:
            raise OptionError("triton_pruner: no CUDA tensor argument to detect the device from; "
                              "pass device=")
        return Problem(*sizes, dtype, tf32=self.tf32), device

    def _lut_table(self) -> Any:
        return runtime.load_lut(self._lut) if isinstance(self._lut, str) else self._lut


class _Among:
    """A LUT seen through the kernel's own configs: a pruner can only keep configs it was given, so LUT
    entries outside them are left out (select() still puts the rest first); a pin is only an entry."""

    def __init__(self, lut: Any, configs: list[GemmConfig]) -> None:
        self.lut, self.kernel_configs = lut, set(configs)

    def probe(self, problem: Problem, device: str) -> LUTHit | None:
        hit = self.lut.probe(problem, device) if self.lut is not None else None
        if hit is None:
            return None
        return LUTHit(hit.entry, tuple(c for c in hit.configs if c in self.kernel_configs), pin=None)


def gemm_config_of(config: Any) -> GemmConfig | None:
    """The GemmConfig a triton.Config (anything with .kwargs/.num_stages/.num_warps) describes,
    or None if it does not describe a Triton GEMM tile we can model."""
    kwargs = getattr(config, "kwargs", None)
    if not isinstance(kwargs, dict):
        return None
    normalized = {}
    for canonical, spellings in _NAME_ALIASES.items():
        for spelling in spellings:
            if spelling in kwargs:
                normalized[canonical] = kwargs[spelling]
                break
    try:
        shim = types.SimpleNamespace(kwargs=normalized, num_stages=config.num_stages,
                                     num_warps=config.num_warps)
        return GemmConfig.from_triton(shim)
    except (KeyError, AttributeError, TypeError, ValueError, ConfigError):
        return None
