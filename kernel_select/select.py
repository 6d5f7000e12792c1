"""The selection policy: which Triton configs Inductor benchmarks for one GEMM, if any.

`select()` is the one place the decision is made; the Inductor handler, the `@triton.autotune`
pruner and the CLI translate their inputs into its arguments and its `Selection` back. It takes
plain arguments (the model, the LUT and the cuBLAS gate are loaded by the caller) and runs on the
CPU. In order:

  1. pin        a LUT entry that pins the problem (to a Triton config or to ATen) is the only
                choice: nothing is ranked or benchmarked. Where the kernel serves a range of a
                dynamic size (`served`) that the entry covers only part of, the pin is still the
                choice and `pin_gap` says what it leaves out: one kernel per graph cannot follow
                a LUT that pins per length bucket; one graph per bucket can
  2. score      the model scores every candidate config (the problem's pruned EXHAUSTIVE space,
                unless the caller gives its own) and every LUT entry, in one batched call
  3. cuBLAS     with a margin, one cuBLAS decision (model/cublas.py); where cuBLAS is preferred
                only the LUT's entries are offered, so Inductor takes ATen without compiling Triton (in a
                close call, the hedge, the model's first pick beside them).
                Not for a problem outside the model's training data (`outside`): there nothing is
                known well enough to narrow Inductor's choice, and the handler offers Inductor's own
                candidates beside the model's
  4. k          `gemm_topk` resolved: a count, a fraction, "DEFAULT" (the size of Inductor's own
                list for the problem) or "auto" (as many as the model is unsure about)
  5. order      the LUT's entries first (all of them, even beyond k), then the best-ranked
                candidates; for a dynamic M (`ms`), ranked by the geometric mean over the Ms of
                predicted time / best predicted time at that M, so no length is sacrificed to the
                one Inductor happened to hint
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.errors import ConfigError, LUTError, ModelError, ProblemError
from kernel_select.model.base import PerformanceModel
from kernel_select.model.cublas import CublasDecision, CublasGate, Epilogue, decide
from kernel_select.options import AUTO, DEFAULT, DEFAULT_AUTO_TOPK_CAP, TopK
from kernel_select.problem import Problem
from kernel_select.space import for_problem

LUT_SOURCE = "lut"
PIN_SOURCE = "pin"
ATEN = "aten"  # a pin to ATen (kernel_select.lut.ATEN)
AUTO_FALLBACK = 4  # gemm_topk="auto" for a model with no measure of its uncertainty: the fixed top-4


@dataclass(frozen=True)
class Choice:
    """One selected config, its predicted runtime, and who put it in the list."""

    config: GemmConfig
    predicted_ms: float
    source: str  # "lut", "pin", or the name of the model that ranked it


class ConfigLookup(Protocol):
    """Anything with the LUT's lookup: hand-picked configs for a problem, in order. A lookup may also
    have `pinned(problem, device)` (the one choice of a pinned entry: "aten", a config or None)."""

    def lookup(self, problem: Problem, device: str) -> Sequence[GemmConfig]: ...


@dataclass(frozen=True)
class Selection:
    """What `select()` decided for one GEMM."""

    problem: Problem
    device: str
    choices: tuple[Choice, ...]  # what to benchmark: LUT entries first, then the model's picks
    candidates: int  # how many configs were ranked
    cublas: CublasDecision | None = None  # None: the cuBLAS decision was off or had no prediction
    pinned: GemmConfig | Literal["aten"] | None = None  # a LUT pin: the only choice, nothing benchmarked
    ms: tuple[int, ...] = ()  # a dynamic M: the values it was ranked for (() = problem.m only)
    outside: str = ""  # why the problem lies outside the model's training data ("" inside it)
    hedged: str = ""  # why gemm_topk="auto" took its cap rather than the model's estimate
    ms_origin: str = ""  # for the handler's log: where `ms` came from ("lut m range", ...)
    hint: int | None = None  # for the handler's log: the Inductor multi-kernel hint it is for
    pin_gap: str = ""  # which of the `served` sizes the pin's entry does not cover ("" none)

    @property
    def configs(self) -> tuple[GemmConfig, ...]:
        return tuple(choice.config for choice in self.choices)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(choice.source for choice in self.choices)

    @property
    def skips_triton(self) -> bool:
        """Whether the cuBLAS decision left only the LUT's entries to benchmark."""
        return self.cublas is not None and self.cublas.prefers_cublas and not self.cublas.hedges


def select(problem: Problem, *, model: PerformanceModel, gemm_topk: TopK | float = 4,
           lut: ConfigLookup | None = None, gate: CublasGate | None = None,
           cublas_margin: float | None = None, epilogue: Epilogue = Epilogue(),
           candidates: Sequence[GemmConfig] | None = None, ms: Sequence[int] | None = None,
           auto_cap: int = DEFAULT_AUTO_TOPK_CAP,
           served: Mapping[str, tuple[int, int]] | None = None) -> Selection:
    """The configs to benchmark for `problem` (the module docstring gives the steps).

    Args:
        model: ranks the candidates and, without a gate, predicts cuBLAS.
        gemm_topk: a count >= 1, a fraction in (0, 1] of the candidates, "DEFAULT" or "auto".
        lut: a lookup table: its pin, else all its entries for the problem first.
        gate, cublas_margin: the cuBLAS decision; None margin = off. Without a gate the model's own
            cuBLAS time decides (where it has one).
        epilogue: what runs after the GEMM, as far as the cuBLAS decision cares.
        candidates: the configs to rank; default the problem's pruned EXHAUSTIVE space (at the largest
            of `ms`, whose space holds the blocks the smaller Ms clamp to).
        ms: rank for these values of M (a dynamic dimension) instead of problem.m alone.
        auto_cap: the most configs gemm_topk="auto" takes.
        served: for a dynamic size ("m" or "k"), the (low, high) the compiled kernel serves; read
            only to tell where a pin's entry covers part of it (`Selection.pin_gap`).

    Raises:
        ProblemError, ConfigError, ModelError, LUTError: on bad arguments or malformed predictions.
    """
    if not isinstance(problem, Problem):
        raise ProblemError(f"problem: expected a kernel_select.Problem, got {type(problem).__name__}")
    if not isinstance(model, PerformanceModel):
        raise ModelError(f"model: expected a kernel_select.PerformanceModel, got {type(model).__name__}")
    device = model.device
    pin = _pin(lut, problem, device)
    if pin is not None:
        choices = () if pin == ATEN else (Choice(pin, float(_scores(problem, [pin], model)[0]), PIN_SOURCE),)
        return Selection(problem, device.key, choices, candidates=0, pinned=pin,
                         pin_gap=_pin_gap(lut, problem, device, served or {}))

    spread = _checked_ms(ms, problem)
    if candidates is None:
        widest = dataclasses.replace(problem, m=max(spread)) if spread else problem
        candidates = for_problem(widest, device, "exhaustive")
    entries = _lut_configs(lut, problem, device)
    # One batched call scores candidates and LUT entries: inside torch.compile it is the whole cost.
    all_scores = _scores(problem, [*candidates, *entries], model)
    scores = all_scores[: len(candidates)]
    chosen = [Choice(config, float(ms), LUT_SOURCE)
              for config, ms in zip(entries, all_scores[len(candidates):])]

    outside = model.domain_gap(problem)
    decision = None if outside else _cublas_decision(problem, model, gate, cublas_margin, epilogue, scores)
    selection = Selection(problem, device.key, tuple(chosen), len(candidates), decision, ms=spread,
                          outside=outside, hedged=outside if gemm_topk == AUTO else "")
    if selection.skips_triton:
        return selection
    if decision is not None and decision.hedges:  # a close call: the first pick beside cuBLAS
        gemm_topk = len(chosen) + 1
    elif gemm_topk == DEFAULT:
        gemm_topk = len(for_problem(problem, device, "default"))
    count = resolve_k(gemm_topk, len(candidates), model=model, predicted_ms=scores, cap=auto_cap,
                      problem=problem, configs=candidates, hedged=bool(selection.hedged))
    if len(chosen) < count and len(candidates):
        order_by = scores if not spread or spread == (problem.m,) else _relative_over(problem, spread,
                                                                                       candidates, model)
        seen = set(entries)
        # Walk the ranking and stop at k: only the taken configs are hashed and wrapped, which keeps
        # selection over a full exhaustive space near the cost of the model itself.
        for i in np.argsort(order_by, kind="stable"):
            if candidates[i] in seen:
                continue
            seen.add(candidates[i])
            chosen.append(Choice(candidates[i], float(scores[i]), model.name))
            if len(chosen) == count:
                break
    if not chosen:
        raise ConfigError(f"{problem}: nothing to select (no candidate configs and no LUT entries)")
    return dataclasses.replace(selection, choices=tuple(chosen))


def resolve_k(k: TopK | float, num_candidates: int, *, model: PerformanceModel | None = None,
              predicted_ms: np.ndarray | None = None, cap: int = DEFAULT_AUTO_TOPK_CAP,
              problem: Problem | None = None, configs: Sequence[GemmConfig] | None = None,
              hedged: bool = False) -> int:
    """How many configs `k` asks for: an int count >= 1, a float fraction in (0, 1], or "auto".

    A fraction keeps max(1, int(num_candidates * k)), as Triton's `top_k` does. "auto" asks
    `model.auto_topk` given its predictions for the candidates (1..cap); a model without a measure of
    its uncertainty gets min(AUTO_FALLBACK, cap), and a `hedged` problem (outside the model's
    training data) the cap.

    Raises:
        ConfigError: for anything else (bool, zero, negative, NaN, a float above 1, another string,
            "auto" without a model and its predictions).
    """
    if isinstance(k, str) and k == AUTO:
        if model is None or predicted_ms is None:
            raise ConfigError("k='auto' needs the model and its predictions for the candidates")
        if hedged:
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
    """All of `configs`, fastest predicted first; ties keep input order (for evaluation)."""
    scores = _scores(problem, configs, model)
    return [Choice(configs[i], float(scores[i]), model.name) for i in np.argsort(scores, kind="stable")]


def _cublas_decision(problem: Problem, model: PerformanceModel, gate: CublasGate | None,
                     margin: float | None, epilogue: Epilogue, scores: np.ndarray) -> CublasDecision | None:
    """The gate's prediction where there is a gate for the problem, else the model's cuBLAS time over its
    best Triton time; None when the decision is off or nothing predicts cuBLAS for the problem (a batched
    GEMM: neither network sees a batch, so Inductor benchmarks cuBLAS beside the Triton picks)."""
    if margin is None:
        return None
    aten_ms = model.estimate_aten(problem)
    if gate is not None and gate.supports(problem):
        ratio = float(np.exp(gate.predict_log_ratio([problem])[0]))
        return decide(ratio, "gate", margin, aten_ms, epilogue)
    if aten_ms is None or not len(scores):
        return None
    return decide(aten_ms / float(scores.min()), "model", margin, aten_ms, epilogue)


def _pin(lut: ConfigLookup | None, problem: Problem, device: DeviceSpec) -> GemmConfig | str | None:
    pinned_of = getattr(lut, "pinned", None)  # any ConfigLookup may serve as the LUT
    pin = pinned_of(problem, device.key) if pinned_of is not None else None
    if pin is None or pin == ATEN or isinstance(pin, GemmConfig):
        return pin
    raise LUTError(f"lut: pinned() for {problem} returned {pin!r}, not 'aten' or a GemmConfig")


def _pin_gap(lut: ConfigLookup | None, problem: Problem, device: DeviceSpec,
             served: Mapping[str, tuple[int, int]]) -> str:
    """What part of the `served` sizes the entry pinning `problem` leaves to other entries, or "".

    Entries are intervals that never overlap, so the entry covers low..high exactly when it is
    the entry of both ends."""
    match = getattr(lut, "match", None)
    if match is None or not served:
        return ""
    entry = match(problem, device.key)
    if entry is None:
        return ""
    for dim, (low, high) in sorted(served.items()):
        ends = [match(dataclasses.replace(problem, **{dim: end}), device.key) for end in (low, high)]
        if any(other is not entry for other in ends):
            own = entry.m_bounds if dim == "m" else entry.k_bounds
            return (f"the kernel serves {dim}={low}..{high}, the pinned entry only {dim}={own[0]}..{own[1]} "
                    f"(the LUT pins other {dim} separately)")
    return ""


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


def _lut_configs(lut: ConfigLookup | None, problem: Problem, device: DeviceSpec) -> list[GemmConfig]:
    if lut is None:
        return []
    pinned: dict[GemmConfig, None] = {}
    for entry in lut.lookup(problem, device.key) or ():
        if not isinstance(entry, GemmConfig):
            raise LUTError(f"lut: lookup for {problem} returned {entry!r}, not a GemmConfig")
        pinned.setdefault(entry, None)
    return list(pinned)


def _scores(problem: Problem, configs: Sequence[GemmConfig], model: PerformanceModel) -> np.ndarray:
    if not configs:
        return np.zeros(0, dtype=np.float64)
    return model.estimate(problem, configs)  # the model checks its output's contract
