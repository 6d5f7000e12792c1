"""What the decision for one GEMM (decision.py) is asked and what it answers.

An adapter (the Inductor handler) reads Inductor's inputs once into a `GemmRequest` and holds the
model, LUT, cuBLAS gate and knobs in a `Policy`; `decision.decide()` returns `Selection`s, each a list
of `Choice`s (the configs to benchmark, who chose each) with what was decided about cuBLAS and the
LUT's pin, and the line the handler logs. The adapters read these types and the decision makes them;
how it makes them is decision.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from kernel_select.configs import GemmConfig
from kernel_select.errors import LUTError, ModelError
from kernel_select.model.base import PerformanceModel
from kernel_select.model.cublas import CublasDecision, CublasGate, Epilogue
from kernel_select.options import DEFAULT_AUTO_TOPK_CAP, DEFAULT_TOPK, TopK
from kernel_select.problem import Problem

if TYPE_CHECKING:
    from kernel_select.lut.entries import LUTHit

LUT_SOURCE = "lut"
PIN_SOURCE = "pin"
ATEN = "aten"  # a pin to ATen (kernel_select.lut.ATEN)


@dataclass(frozen=True)
class Choice:
    """One selected config, its predicted runtime, and who put it in the list."""

    config: GemmConfig
    predicted_ms: float
    source: str  # "lut", "pin", or the name of the model that ranked it


@runtime_checkable
class LookupTable(Protocol):
    """What the decision reads from a lookup table (kernel_select.lut.KernelLUT is one): everything it
    holds for a problem, from one probe."""

    def probe(self, problem: Problem, device: str) -> LUTHit | None:
        """The entry serving `problem` on `device`, its configs that run there and its pin, or None."""
        ...


@dataclass(frozen=True)
class GemmRequest:
    """One GEMM to decide, as an adapter reads it (the Inductor handler, once per lowering)."""

    problem: Problem  # the sizes (hinted, for a symbolic size), dtype, op and operand layout
    epilogue: Epilogue = Epilogue()  # what follows the GEMM, for the cuBLAS decision
    dynamic_m: bool = False  # M is symbolic: one compiled kernel serves many Ms
    #: the declared (low, high) of a symbolic M ("m") and of a symbolic K ("k"), where they have one
    served: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    hints: tuple[int, ...] = ()  # Inductor's multi-kernel hints (read for a dynamic M only)
    k_expr: Any = None  # K as Inductor's expression: the handler's EVEN_K, not read by the decision
    device_index: int | None = None  # the CUDA device compiled for: the handler's, not read here


@dataclass(frozen=True)
class Policy:
    """What decides beside the request: the model, the lookup table, the cuBLAS gate and the knobs."""

    model: PerformanceModel
    lut: LookupTable | None = None
    gate: CublasGate | None = None
    gemm_topk: TopK = DEFAULT_TOPK
    cublas_margin: float | None = None  # None: no cuBLAS decision
    auto_cap: int = DEFAULT_AUTO_TOPK_CAP  # the most configs gemm_topk="auto" takes
    dynamic_m: tuple[int, ...] | None = None  # the gemm_dynamic_m knob: the Ms a dynamic M takes

    @property
    def one_choice(self) -> bool:
        """gemm_topk=1 with the cuBLAS decision on: the decision hands Inductor one choice per GEMM it
        can decide (a count of 1, not a fraction or "auto" that comes to 1)."""
        k = self.gemm_topk
        return isinstance(k, int) and not isinstance(k, bool) and k == 1 and self.cublas_margin is not None

    def __post_init__(self) -> None:
        if not isinstance(self.model, PerformanceModel):
            raise ModelError(f"model: expected a kernel_select.PerformanceModel, got "
                             f"{type(self.model).__name__}")
        if self.lut is not None and not isinstance(self.lut, LookupTable):
            raise LUTError(f"lut: expected a lookup table with probe(problem, device) (a "
                           f"kernel_select.lut.KernelLUT), got {type(self.lut).__name__}")


@dataclass(frozen=True)
class Selection:
    """What the decision is for one GEMM."""

    problem: Problem
    device: str
    choices: tuple[Choice, ...]  # what to benchmark: LUT entries first, then the model's picks
    ranked: int  # how many candidate configs the model ranked (0 for a pin)
    cublas: CublasDecision | None = None  # None: the cuBLAS decision was off or had no prediction
    pinned: GemmConfig | Literal["aten"] | None = None  # a LUT pin: the only choice, nothing benchmarked
    m_values: tuple[int, ...] = ()  # a dynamic M: the values it was ranked for (() = problem.m only)
    outside: str = ""  # why the problem lies outside the model's training data ("" inside it)
    auto_at_cap: str = ""  # why gemm_topk="auto" took its cap rather than the model's estimate
    m_values_origin: str = ""  # for the handler's log: where `m_values` came from ("lut m range", ...)
    hint: int | None = None  # for the handler's log: the Inductor multi-kernel hint it is for
    pin_gap: str = ""  # which of the `served` sizes the pin's entry does not cover ("" none)
    #: gemm_topk=1 outside the domain, for a launch-bound GEMM (decision.LAUNCH_BOUND_FLOPS): the model's
    #: first config is the one choice anyway, no cuBLAS decision and nothing benchmarked
    launch_bound: bool = False
    #: why the cuBLAS decision, though on, made none inside the domain ("" where it did, or was off):
    #: nothing predicts cuBLAS for the problem, so Inductor benchmarks cuBLAS beside the choices
    undecided: str = ""

    @property
    def configs(self) -> tuple[GemmConfig, ...]:
        return tuple(choice.config for choice in self.choices)

    @property
    def sources(self) -> tuple[str, ...]:
        return tuple(choice.source for choice in self.choices)

    @property
    def skips_triton(self) -> bool:
        """Whether the cuBLAS decision left only the LUT's entries to benchmark."""
        return self.cublas is not None and self.cublas.prefers_cublas

    @property
    def sole(self) -> GemmConfig | Literal["aten"] | None:
        """The one choice Inductor gets, nothing benchmarked: a LUT pin, or the one-choice decision's
        pick (gemm_topk=1: ATen, or the model's first config); None where Inductor benchmarks."""
        if self.pinned is not None:
            return self.pinned
        if self.cublas is not None and self.cublas.alone:
            return ATEN if self.cublas.prefers_cublas else self.choices[0].config
        if self.launch_bound and self.choices:
            return self.choices[0].config
        return None

    def summary(self) -> str:
        """One line for the handler's log: what is benchmarked and why."""
        spread = (f" ranked over m={list(self.m_values)} ({self.m_values_origin})" if self.m_values else "")
        hint = f" for multi-kernel hint m={self.hint}" if self.hint is not None else ""
        capped = f"; gemm_topk=auto at its cap: {self.auto_at_cap}" if self.auto_at_cap else ""
        cublas = self.cublas
        shown = cublas is not None and (cublas.prefers_cublas or cublas.charged_epilogue)
        outside = f"; {self.outside}: Inductor's own configs beside them" if self.outside else ""
        if cublas is not None and cublas.alone:
            return (f"{self.problem} on {self.device}: ranked {self.ranked} Triton configs{spread}; "
                    f"{cublas.describe()}")
        if self.launch_bound:
            return (f"{self.problem} on {self.device}: ranked {self.ranked} Triton configs{spread}; "
                    f"{self.outside}, but launch-bound: one choice, the model's first config "
                    f"{self.choices[0].config.short()}, nothing benchmarked")
        undecided = f"; no cuBLAS decision ({self.undecided}): cuBLAS beside them" if self.undecided else ""
        return (f"{self.problem} on {self.device}: benchmarking {len(self.choices)} of {self.ranked} Triton "
                f"configs ({self.sources.count(LUT_SOURCE)} from the LUT){spread}{hint}{capped}{outside}"
                f"{f'; {cublas.describe()}' if shown else ''}{undecided}")
