"""The decision: which Triton configs Inductor benchmarks for one GEMM, if any.

`decide()` makes every decision for one GEMM request; `select()` is the same decision for one
problem given as plain arguments (the API, the command line and the `@triton.autotune` pruner call
it). The Inductor handler reads Inductor's inputs once into a `GemmRequest`, holds the model, LUT,
cuBLAS gate and knobs in a `Policy`, and turns what `decide()` returns into Inductor's candidate
lists (those types, and the `Selection` it returns, are selection.py's). Everything runs on the CPU.
In order:

  1. pin        the LUT is probed once (`LookupTable.probe`). An entry that pins the problem (to a
                Triton config or to ATen) is the only choice: nothing is ranked or benchmarked.
                Where the kernel serves a range of a dynamic size (`served`) that the entry covers
                only part of, the pin is still the choice and `pin_gap` says what it leaves out:
                one kernel per graph cannot follow a LUT that pins per length bucket; one graph per
                bucket can. With no pin and no Triton template to fill, nothing is decided
  2. Ms         for a dynamic M, the values of M to rank for (`problem.m_values_to_rank`), and one more
                selection per Inductor multi-kernel hint, each for its hint
  3. score      the model scores every candidate config (the problem's pruned EXHAUSTIVE space,
                unless the caller gives its own) and every LUT entry, in one batched call
  4. cuBLAS     with a margin, one cuBLAS decision (model/cublas.py); where cuBLAS is preferred
                only the LUT's entries are offered, so Inductor takes ATen without compiling Triton.
                Not for a problem outside the model's training data (`outside`): there nothing is
                known well enough to narrow Inductor's choice, and the handler offers Inductor's own
                candidates beside the model's. Nor for odd N with odd K (`odd_n_and_k`): no cuBLAS
                network trained on one, so Inductor benchmarks cuBLAS beside the picks, as for a
                batched GEMM where the gate has no network for batched GEMMs (`CublasGate.batched`,
                trained where the data hold enough). With gemm_topk=1 and no LUT entries the decision
                is the one choice Inductor gets (`Selection.sole`), nothing benchmarked: cuBLAS
                where it is predicted faster, else the model's first config; outside the domain, a
                launch-bound GEMM (LAUNCH_BOUND_FLOPS) gets the model's first config alone
  5. k          `gemm_topk` resolved: a count, a fraction, "DEFAULT" (the size of Inductor's own
                list for the problem), "auto" (as many as the model is unsure about) or "SAME"
                (every candidate)
  6. order      the LUT's entries first (all of them, even beyond k), then the best-ranked
                candidates; for a dynamic M (`m_values`), ranked by the geometric mean over the Ms of
                predicted time / best predicted time at that M, so no length is sacrificed to the
                one Inductor happened to hint
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.errors import ConfigError, LUTError, OptionError, ProblemError
from kernel_select.model.base import PerformanceModel
from kernel_select.model.cublas import CublasDecision, CublasGate, Epilogue, decide as cublas_verdict
from kernel_select.options import AUTO, DEFAULT, DEFAULT_AUTO_TOPK_CAP, DEFAULT_TOPK, SAME, TopK, parse_topk
from kernel_select.problem import Problem, checked_m_values, m_values_to_rank
from kernel_select.selection import (
    ATEN, LUT_SOURCE, PIN_SOURCE, Choice, GemmRequest, LookupTable, Policy, Selection,
)
from kernel_select.space import for_problem

if TYPE_CHECKING:
    from kernel_select.lut.entries import LUTHit

AUTO_FALLBACK = 4  # gemm_topk="auto" for a model with no measure of its uncertainty: the fixed top-4
#: A GEMM of at most this much work is launch-bound: its math takes nanoseconds and, even at K = 1, it
#: moves a few MB at most. Outside the model's domain (N or K of 1 or 2: rotary tables, single-output
#: heads) Inductor's own configs for it spread over 5-40 us as it times them (results/networks_h200.json),
#: while benchmarking its list of 8-16 compiles as many kernels, seconds per network. With
#: gemm_topk=1 such a GEMM still gets the model's first config alone (`Selection.launch_bound`).
LAUNCH_BOUND_FLOPS = 2.0**22


def odd_n_and_k(problem: Problem) -> bool:
    """Whether N and K are both odd: an alignment class no cuBLAS network trained on (the `family` split
    holds every such problem out, docs/design.md#splits). With one choice it shows: on the `family` split's
    such problems the gate's call alone scored 0.84 (H100) and 0.88 (H200) of the faster of cuBLAS and
    Triton, against 0.97 and 0.99 on its other problems; the first config benchmarked against cuBLAS
    scored 0.96 and 0.98 (results/zero_benchmark_fallback.json). So nothing predicts cuBLAS for them."""
    return problem.n % 2 == 1 and problem.k % 2 == 1


#: The decision's own rules, in the handler's cache key (inductor/cache_key.py) beside the cuBLAS rule
#: (model.cublas.RULE): choices Inductor cached under another rule must not be served under this one.
RULES = f"launch-bound<={LAUNCH_BOUND_FLOPS:g}:odd-n-and-k-undecided"


def decide(request: GemmRequest, policy: Policy, *, rank_triton: bool = True) -> tuple[Selection, ...]:
    """Every selection for one GEMM (the module docstring gives the steps): the pin alone; else one
    selection for a static M; for a dynamic M one over the Ms it will take, then one per multi-kernel
    hint (each tagged with it). () where nothing is pinned and `rank_triton` is False (the caller has
    no Triton template to fill).

    Raises:
        as `select`.
    """
    problem = _checked_problem(request.problem)
    hit = _probe(policy.lut, problem, policy.model.device)
    pinned = hit is not None and hit.pin is not None
    if not pinned and not rank_triton:
        return ()
    if pinned or not request.dynamic_m:  # a pin serves every M: no variants
        return (_one(problem, policy, request.epilogue, hit, served=request.served),)
    m_values, origin = m_values_to_rank(problem.m, hit.entry.m_bounds if hit is not None else None,
                                        policy.dynamic_m, request.served.get("m"))
    over = _ranked(problem, policy, hit, request.epilogue, m_values=m_values)
    selections = [dataclasses.replace(over, m_values_origin=origin)]
    if over.sole is not None:  # one choice serves every M, as a pin does: no variants
        return tuple(selections)
    for hint in request.hints:
        at_hint = dataclasses.replace(problem, m=hint)
        hinted = _one(at_hint, policy, request.epilogue, _probe(policy.lut, at_hint, policy.model.device))
        selections.append(dataclasses.replace(hinted, hint=hint))
    return tuple(selections)


def select(problem: Problem, *, model: PerformanceModel, gemm_topk: TopK = DEFAULT_TOPK,
           lut: LookupTable | None = None, gate: CublasGate | None = None,
           cublas_margin: float | None = None, epilogue: Epilogue = Epilogue(),
           candidates: Sequence[GemmConfig] | None = None, m_values: Sequence[int] | None = None,
           auto_cap: int = DEFAULT_AUTO_TOPK_CAP,
           served: Mapping[str, tuple[int, int]] | None = None) -> Selection:
    """The configs to benchmark for `problem`: `decide()`'s decision for one problem, as plain arguments.

    Args:
        model: ranks the candidates and, without a gate, predicts cuBLAS.
        gemm_topk: what kernel_select.options.parse_topk accepts: a count >= 1, a fraction in (0, 1]
            of the candidates, "DEFAULT", "auto" or "SAME" (every candidate).
        lut: a lookup table (LookupTable): its pin, else all its entries for the problem first.
        gate, cublas_margin: the cuBLAS decision; None margin = off. Without a gate the model's own
            cuBLAS time decides (where it has one).
        epilogue: what runs after the GEMM, as far as the cuBLAS decision cares.
        candidates: the configs to rank; default the problem's pruned EXHAUSTIVE space (at the largest
            of `m_values`, whose space holds the blocks the smaller Ms clamp to).
        m_values: rank for these values of M (a dynamic dimension) instead of problem.m alone.
        auto_cap: the most configs gemm_topk="auto" takes.
        served: for a dynamic size ("m" or "k"), the (low, high) the compiled kernel serves; read
            only to tell where a pin's entry covers part of it (`Selection.pin_gap`).

    Raises:
        ProblemError, ConfigError, ModelError, LUTError: on bad arguments or malformed predictions.
    """
    policy = Policy(model, lut, gate, gemm_topk, cublas_margin, auto_cap)
    problem = _checked_problem(problem)
    return _one(problem, policy, epilogue, _probe(lut, problem, model.device), candidates=candidates,
                m_values=m_values, served=served or {})


def _one(problem: Problem, policy: Policy, epilogue: Epilogue, hit: LUTHit | None, *,
         candidates: Sequence[GemmConfig] | None = None, m_values: Sequence[int] | None = None,
         served: Mapping[str, tuple[int, int]] | None = None) -> Selection:
    """The pin, else the ranked selection, for one problem the LUT was probed for (`hit`)."""
    if hit is not None and hit.pin is not None:
        return _pinned(problem, policy, hit, served or {})
    return _ranked(problem, policy, hit, epilogue, candidates=candidates, m_values=m_values)


def _pinned(problem: Problem, policy: Policy, hit: LUTHit,
            served: Mapping[str, tuple[int, int]]) -> Selection:
    pin = hit.pin
    model = policy.model
    choices = () if pin == ATEN else (Choice(pin, float(_scores(problem, [pin], model)[0]), PIN_SOURCE),)
    return Selection(problem, model.device.key, choices, ranked=0, pinned=pin,
                     pin_gap=_pin_gap(policy.lut, problem, model.device, hit, served))


def _ranked(problem: Problem, policy: Policy, hit: LUTHit | None, epilogue: Epilogue, *,
            candidates: Sequence[GemmConfig] | None = None,
            m_values: Sequence[int] | None = None) -> Selection:
    """The LUT's entries, then the model's top-k (steps 3 to 6 of the module docstring)."""
    model, device = policy.model, policy.model.device
    gemm_topk = _checked_topk(policy.gemm_topk)
    spread = checked_m_values(m_values, problem)
    widest = dataclasses.replace(problem, m=max(spread)) if spread else problem  # the largest M it serves
    if candidates is None:
        candidates = for_problem(widest, device, "exhaustive")
    entries = list(hit.configs) if hit is not None else []
    # One batched call scores candidates and LUT entries: inside torch.compile it is the whole cost.
    all_scores = _scores(problem, [*candidates, *entries], model)
    scores = all_scores[: len(candidates)]
    chosen = [Choice(config, float(predicted_ms), LUT_SOURCE)
              for config, predicted_ms in zip(entries, all_scores[len(candidates):])]

    outside = model.domain_gap(problem)
    # LUT entries are always benchmarked, so only a GEMM without them gets the decision alone.
    alone = policy.one_choice and not entries
    decision, undecided = (None, "") if outside else _cublas_decision(
        problem, model, policy.gate, policy.cublas_margin, epilogue, scores, alone=alone)
    # Outside the domain nothing narrows Inductor's choice, but a launch-bound GEMM's benchmark would
    # cost more compile than any of its configs can lose: the one-choice mode keeps its one choice.
    launch_bound = alone and bool(outside) and widest.flops <= LAUNCH_BOUND_FLOPS
    selection = Selection(problem, device.key, tuple(chosen), len(candidates), decision, m_values=spread,
                          outside=outside, auto_at_cap=outside if gemm_topk == AUTO else "",
                          launch_bound=launch_bound, undecided=undecided)
    if selection.skips_triton:
        return selection
    if gemm_topk == DEFAULT:
        gemm_topk = len(for_problem(problem, device, "default"))
    count = resolve_k(gemm_topk, len(candidates), model=model, predicted_ms=scores, cap=policy.auto_cap,
                      problem=problem, configs=candidates, at_cap=bool(selection.auto_at_cap))
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


def resolve_k(k: TopK, num_candidates: int, *, model: PerformanceModel | None = None,
              predicted_ms: np.ndarray | None = None, cap: int = DEFAULT_AUTO_TOPK_CAP,
              problem: Problem | None = None, configs: Sequence[GemmConfig] | None = None,
              at_cap: bool = False) -> int:
    """How many configs `k` asks for: a count >= 1, a fraction in (0, 1], "SAME" or "auto" (what
    kernel_select.options.parse_topk accepts but "DEFAULT", which depends on the problem).

    A fraction keeps max(1, int(num_candidates * k)), as Triton's `top_k` does; "SAME" keeps every
    candidate. "auto" asks `model.auto_topk` given its predictions for the candidates (1..cap); a model
    without a measure of its uncertainty gets min(AUTO_FALLBACK, cap), and an `at_cap` problem (outside
    the model's training data) the cap.

    Raises:
        ConfigError: for anything else (bool, zero, negative, NaN, a float above 1, another string,
            "auto" without a model and its predictions).
    """
    k = _checked_topk(k)
    if k == AUTO:
        if model is None or predicted_ms is None:
            raise ConfigError("k='auto' needs the model and its predictions for the candidates")
        if at_cap:
            return cap
        auto = model.auto_topk(np.asarray(predicted_ms), cap, problem, configs) if len(predicted_ms) else 1
        return int(auto) if auto is not None else min(AUTO_FALLBACK, cap)
    if k == SAME:
        return max(1, num_candidates)
    if k == DEFAULT:
        raise ConfigError("k='DEFAULT' is the size of Inductor's list for a problem: select() resolves it")
    if isinstance(k, int):
        return k
    return max(1, int(num_candidates * k))


def _checked_topk(k: object) -> TopK:
    """`k` as parse_topk reads it, a ConfigError (naming `k`) where it reads none."""
    try:
        return parse_topk(k, source="k")
    except OptionError as exc:
        raise ConfigError(str(exc)) from None


def rank(problem: Problem, configs: Sequence[GemmConfig], model: PerformanceModel) -> list[Choice]:
    """All of `configs`, fastest predicted first; ties keep input order (for evaluation)."""
    scores = _scores(problem, configs, model)
    return [Choice(configs[i], float(scores[i]), model.name) for i in np.argsort(scores, kind="stable")]


def _cublas_decision(problem: Problem, model: PerformanceModel, gate: CublasGate | None,
                     margin: float | None, epilogue: Epilogue, scores: np.ndarray, *,
                     alone: bool = False) -> tuple[CublasDecision | None, str]:
    """The gate's prediction where there is a gate for the problem, else the model's cuBLAS time over its
    best Triton time, and "". None when the decision is off (with ""), or when nothing predicts cuBLAS
    for the problem, with why (`Selection.undecided`): a batched GEMM where the gate has no network for
    one (the cuBLAS time head sees no batch) or odd N with odd K (`odd_n_and_k`); Inductor then
    benchmarks cuBLAS beside the Triton picks.
    `alone`: the verdict is the one choice Inductor gets (CublasDecision.alone)."""
    if margin is None:
        return None, ""
    if odd_n_and_k(problem):
        return None, "odd N and odd K, which no cuBLAS network trained on"
    aten_ms = model.estimate_aten(problem)
    if gate is not None and gate.supports(problem):
        ratio = float(np.exp(gate.predict_log_ratio([problem])[0]))
        return cublas_verdict(ratio, "gate", margin, aten_ms, epilogue, alone=alone), ""
    if aten_ms is None or not len(scores):
        batched = problem.op in ("bmm", "baddbmm")
        return None, ("a batched GEMM, and no cuBLAS gate for batched GEMMs here" if batched
                      else "no cuBLAS prediction")
    return cublas_verdict(aten_ms / float(scores.min()), "model", margin, aten_ms, epilogue, alone=alone), ""


def _checked_problem(problem: object) -> Problem:
    if not isinstance(problem, Problem):
        raise ProblemError(f"problem: expected a kernel_select.Problem, got {type(problem).__name__}")
    return problem


def _probe(lut: LookupTable | None, problem: Problem, device: DeviceSpec) -> LUTHit | None:
    """The LUT's answer for `problem`, checked: the one place the decision reads a lookup table."""
    if lut is None:
        return None
    hit = lut.probe(problem, device.key)
    if hit is None:
        return None
    if any(not isinstance(config, GemmConfig) for config in hit.configs):
        raise LUTError(f"lut: probe for {problem} returned configs {list(hit.configs)!r}, not GemmConfigs")
    if not (hit.pin is None or hit.pin == ATEN or isinstance(hit.pin, GemmConfig)):
        raise LUTError(f"lut: probe for {problem} returned the pin {hit.pin!r}, not 'aten' or a GemmConfig")
    return hit._replace(configs=tuple(dict.fromkeys(hit.configs)))  # each config once, in order


def _pin_gap(lut: LookupTable | None, problem: Problem, device: DeviceSpec, hit: LUTHit,
             served: Mapping[str, tuple[int, int]]) -> str:
    """What part of the `served` sizes the entry pinning `problem` leaves to other entries, or "".

    Entries are intervals that never overlap, so the entry covers low..high exactly when it is
    the entry of both ends."""
    if lut is None or not served:
        return ""
    for dim, (low, high) in sorted(served.items()):
        ends = [lut.probe(dataclasses.replace(problem, **{dim: end}), device.key) for end in (low, high)]
        if any(other is None or other.entry is not hit.entry for other in ends):
            own = hit.entry.m_bounds if dim == "m" else hit.entry.k_bounds
            return (f"the kernel serves {dim}={low}..{high}, the pinned entry only {dim}={own[0]}..{own[1]} "
                    f"(the LUT pins other {dim} separately)")
    return ""


def _relative_over(problem: Problem, m_values: tuple[int, ...], candidates: Sequence[GemmConfig],
                   model: PerformanceModel) -> np.ndarray:
    """Per candidate, the geometric mean over `m_values` of predicted time / best predicted time."""
    log_ratio = np.zeros(len(candidates), dtype=np.float64)
    for m in m_values:
        scores = _scores(dataclasses.replace(problem, m=m), candidates, model)
        log_ratio += np.log(scores / scores.min())
    return np.exp(log_ratio / len(m_values))


def _scores(problem: Problem, configs: Sequence[GemmConfig], model: PerformanceModel) -> np.ndarray:
    if not configs:
        return np.zeros(0, dtype=np.float64)
    return model.estimate(problem, configs)  # the model checks its output's contract
