"""Pick the configs worth benchmarking: lookup-table entries first, then the model's ranking.

`top_k` is what the Inductor and Triton adapters and the CLI call; `rank` gives a full
ordering for evaluation. Both are pure functions of their arguments and run on the CPU.

A dynamic M (a sequence length) is ranked over representative values: `top_k(..., ms=[...])`
keeps the configs whose predicted time, relative to the best config at each M, has the smallest
geometric mean over the Ms, so no length is sacrificed to the one Inductor happened to hint.
`spread_ms` picks such values for a range.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from kernel_select import device as device_module
from kernel_select import runtime
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec, get_device
from kernel_select.errors import ConfigError, DeviceError, LUTError, ModelError, ProblemError
from kernel_select.knobs import AUTO
from kernel_select.knobs import DEFAULT_AUTO_TOPK_CAP as AUTO_TOPK_CAP
from kernel_select.model import PerformanceModel, load_default
from kernel_select.model.auto_topk import hedge_reason
from kernel_select.problem import Problem
from kernel_select.space import for_problem

log = logging.getLogger(__name__)

LUT_SOURCE = "lut"
AUTO_FALLBACK = 4  # topk="auto" for a model with no measure of its uncertainty: the fixed top-4


@dataclass(frozen=True)
class Choice:
    """One selected config, its predicted runtime, and who put it in the list."""

    config: GemmConfig
    predicted_ms: float
    source: str  # "lut", or the name of the model that ranked it


class ConfigLookup(Protocol):
    """Anything with the LUT's lookup method: hand-picked configs for a problem, in order."""

    def lookup(self, problem: Problem, device: str) -> Sequence[GemmConfig]: ...


def resolve_k(k: int | float | str, num_candidates: int, *, model: PerformanceModel | None = None,
              predicted_ms: np.ndarray | None = None, cap: int = AUTO_TOPK_CAP,
              problem: Problem | None = None, configs: Sequence[GemmConfig] | None = None) -> int:
    """How many configs `k` asks for: an int count >= 1, a float fraction in (0, 1], or "auto".

    A fraction keeps max(1, int(num_candidates * k)), as Triton's `top_k` does, so a small
    fraction of a small space still keeps one config. "auto" asks `model.auto_topk` given its
    predictions for the candidates (1..cap: few where the model is sure, more where it is not;
    with `problem` and the candidate `configs` a model may also ask its members);
    a model without a measure of its uncertainty gets min(AUTO_FALLBACK, cap), and a `problem`
    outside the model's training data (a layout its card does not list: `hedge_reason`) the cap.

    Raises:
        ConfigError: for anything else (bool, zero, negative, NaN, a float above 1, another
            string, "auto" without a model and its predictions).
    """
    if isinstance(k, str) and k == AUTO:
        if model is None or predicted_ms is None:
            raise ConfigError("k='auto' needs the model and its predictions for the candidates")
        if hedge_reason(model, problem):
            return cap
        auto = model.auto_topk(np.asarray(predicted_ms), cap, problem, configs) if len(predicted_ms) else 1
        return int(auto) if auto is not None else min(AUTO_FALLBACK, cap)
    if isinstance(k, bool) or not isinstance(k, (int, float, np.integer, np.floating)):
        raise ConfigError(f"k: expected a count >= 1 or a fraction in (0, 1], got {k!r}")
    if isinstance(k, (int, np.integer)):
        if k < 1:
            raise ConfigError(f"k: a count must be >= 1, got {k}")
        return int(k)
    if not (math.isfinite(k) and 0.0 < k <= 1.0):
        hint = f"; for a count write {int(k)}" if math.isfinite(k) and k > 1 and k == int(k) else ""
        raise ConfigError(f"k: a fraction must be in (0, 1], got {k!r}{hint}")
    return max(1, int(num_candidates * k))


def rank(problem: Problem, configs: Sequence[GemmConfig], model: PerformanceModel) -> list[Choice]:
    """All of `configs`, fastest predicted first; ties keep input order.

    Raises:
        UnsupportedProblemError: if `model` cannot score `problem`.
        ModelError: if the model returns malformed predictions.
    """
    scores = _scores(problem, configs, model)
    order = np.argsort(scores, kind="stable")
    return [Choice(configs[i], float(scores[i]), model.name) for i in order]


#: How many Ms represent a range when no buckets are given: enough to see a tile-size change
#: across a 16x range (one point per factor of two), few enough to keep selection cheap.
SPREAD_POINTS = 5
#: The default range around a hinted M when nothing says which Ms the program will see.
DEFAULT_SPREAD_FACTOR = 4


def spread_ms(low: int, high: int, points: int = SPREAD_POINTS) -> tuple[int, ...]:
    """`points` log-spaced Ms from `low` to `high` inclusive (fewer if the range is narrow).

    Raises:
        ProblemError: if low < 1 or low > high.
    """
    if not (1 <= low <= high):
        raise ProblemError(f"m range: expected 1 <= low <= high, got {low}..{high}")
    if low == high or points < 2:
        return (low,)
    ratio = (high / low) ** (1 / (points - 1))
    return tuple(sorted({low, high, *(int(round(low * ratio**i)) for i in range(1, points - 1))}))


def default_spread(hint: int) -> tuple[int, ...]:
    """Ms around a hint when nothing else is known: hint/4 .. hint*4, log-spaced."""
    return spread_ms(max(1, hint // DEFAULT_SPREAD_FACTOR), hint * DEFAULT_SPREAD_FACTOR)


def top_k(problem: Problem, k: int | float | str, lut: ConfigLookup | None = None,
          model: PerformanceModel | None = None, device: DeviceSpec | str | None = None,
          candidates: Sequence[GemmConfig] | None = None, ms: Sequence[int] | None = None,
          auto_cap: int = AUTO_TOPK_CAP) -> list[Choice]:
    """The configs to benchmark for `problem`: LUT entries, then the model's best, k in all.

    Args:
        problem: the GEMM to select kernels for.
        k: a count >= 1, a fraction in (0, 1] of the candidates, or "auto" (`resolve_k`).
        lut: a lookup table; all of its entries for the problem come first, in LUT order,
            even when they are more than k or are not among the candidates.
        model: ranks the candidates; default `load_default(device)`.
        device: device name or spec; default the model's device, else the local GPU.
        candidates: configs to rank; default the problem's pruned EXHAUSTIVE space (at the
            largest of `ms`, whose space holds the blocks the smaller Ms clamp to).
        ms: rank for these values of M (a dynamic dimension) instead of problem.m alone: by the
            geometric mean over them of predicted time / best predicted time at that M.

    Returns:
        Choices without duplicates: LUT entries (source "lut", scored by the model for display)
        then candidates best first (ascending predicted runtime, or relative runtime over `ms`),
        ties in candidate order, up to max(k, number of LUT entries). `predicted_ms`: at problem.m.

    Raises:
        ProblemError, ConfigError, DeviceError, ModelError: on bad arguments, or when no device
        is given and none can be detected.
    """
    if not isinstance(problem, Problem):
        raise ProblemError(f"problem: expected a kernel_select.Problem, got {type(problem).__name__}")
    spec, model = _resolve_model(model, device)
    spread = _checked_ms(ms, problem)
    if candidates is None:
        widest = dataclasses.replace(problem, m=max(spread)) if spread else problem
        candidates = for_problem(widest, spec, "exhaustive")

    pinned = _lut_configs(lut, problem, spec)
    # One batched call scores candidates and LUT entries: inside torch.compile it is the whole cost.
    all_scores = _scores(problem, [*candidates, *pinned], model)
    scores = all_scores[: len(candidates)]
    count = resolve_k(k, len(candidates), model=model, predicted_ms=scores, cap=auto_cap, problem=problem,
                      configs=candidates)
    at_hint = not spread or spread == (problem.m,)
    order_by = scores if at_hint else _relative_over(problem, spread, candidates, model)
    chosen = [Choice(config, float(ms), LUT_SOURCE)
              for config, ms in zip(pinned, all_scores[len(candidates):])]
    if len(chosen) >= count or not candidates:
        return chosen

    seen = set(pinned)
    # Walk the ranking and stop at k: only the taken configs are hashed and wrapped, which
    # keeps selection over a full exhaustive space near the cost of the model itself.
    for i in np.argsort(order_by, kind="stable"):
        config = candidates[i]
        if config in seen:
            continue
        seen.add(config)
        chosen.append(Choice(config, float(scores[i]), model.name))
        if len(chosen) == count:
            break
    return chosen


def _checked_ms(ms: Sequence[int] | None, problem: Problem) -> tuple[int, ...]:
    if ms is None:
        return ()
    values = tuple(ms)
    if not values or any(isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1
                         for m in values):
        raise ProblemError(f"ms: expected positive integers (values of M to rank for {problem}), got {ms!r}")
    return tuple(sorted({int(m) for m in values}))


def _relative_over(problem: Problem, ms: tuple[int, ...], candidates: Sequence[GemmConfig],
                   model: PerformanceModel) -> np.ndarray:
    """Per candidate, the geometric mean over `ms` of predicted time / best predicted time."""
    log_ratio = np.zeros(len(candidates), dtype=np.float64)
    for m in ms:
        scores = _scores(dataclasses.replace(problem, m=m), candidates, model)
        log_ratio += np.log(scores / scores.min())
    return np.exp(log_ratio / len(ms))


def _resolve_model(model: PerformanceModel | None,
                   device: DeviceSpec | str | None) -> tuple[DeviceSpec, PerformanceModel]:
    if model is None:
        spec = _resolve_device(device)
        return spec, load_default(spec)
    if not isinstance(model, PerformanceModel):
        raise ModelError(f"model: expected a kernel_select.PerformanceModel, got {type(model).__name__}")
    if device is None:
        return model.device, model
    spec = get_device(device)
    if spec.key != model.device.key:
        raise ModelError(f"model: {model.describe()} cannot rank configs for device {spec.key!r}; "
                         f"load a model for {spec.key!r} or drop the device argument")
    return spec, model


def _resolve_device(device: DeviceSpec | str | None) -> DeviceSpec:
    if device is not None:
        return get_device(device)
    try:
        detected = runtime.current_device()
    except (DeviceError, ImportError) as exc:
        log.debug("device detection failed: %s", exc)
        detected = None
    if detected is None:
        raise DeviceError("device: none given and no CUDA device detected; pass device=\"h100\" "
                          f"(or another of {', '.join(device_module.KNOWN_DEVICES)})")
    return detected


def _lut_configs(lut: ConfigLookup | None, problem: Problem, spec: DeviceSpec) -> list[GemmConfig]:
    if lut is None:
        return []
    entries = lut.lookup(problem, spec.key)
    pinned: dict[GemmConfig, None] = {}
    for entry in entries or ():
        if not isinstance(entry, GemmConfig):
            raise LUTError(f"lut: lookup for {problem} returned {entry!r}, not a GemmConfig")
        pinned.setdefault(entry, None)
    return list(pinned)


def _scores(problem: Problem, configs: Sequence[GemmConfig], model: PerformanceModel) -> np.ndarray:
    if not configs:
        return np.zeros(0, dtype=np.float64)
    scores = np.asarray(model.estimate(problem, configs), dtype=np.float64)
    if scores.shape != (len(configs),) or not np.all(np.isfinite(scores)) or np.any(scores <= 0):
        raise ModelError(f"model: {model.describe()} returned malformed runtimes for {problem} "
                         f"(shape {scores.shape} for {len(configs)} configs, expected finite positive ms)")
    return scores
