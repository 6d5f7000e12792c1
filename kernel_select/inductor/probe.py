"""Helpers for experiments (offline compare and fidelity, tests): a recorder of what Inductor's
autotuner benchmarked. Not used by the compile path itself (compile options: `modes`)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any

from kernel_select.configs import GemmConfig, config_from_description

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class ChoiceTiming:
    """One benchmarked autotuning choice."""

    name: str  # Inductor's choice name: "mm", "triton_mm_12", "decompose_k_mm_..."
    kind: str  # "triton", "extern" (ATen/cuBLAS) or "other"
    ms: float  # Inductor's timing; inf if it failed
    config: GemmConfig | None  # for Triton GEMM choices

    def label(self) -> str:
        if self.kind == "triton" and self.config is not None:
            return f"triton {self.config.short()}"
        if self.kind == "extern":
            return f"aten {self.name}"
        return self.name


@dataclasses.dataclass
class AutotuneRecord:
    """The timings Inductor measured for one autotuned op."""

    op: str
    timings: list[ChoiceTiming]
    shapes: list[list[int | str]] | None = None  # the op's input sizes, when Inductor passed them

    @property
    def winner(self) -> ChoiceTiming | None:
        finite = [t for t in self.timings if t.ms < float("inf")]
        return min(finite, key=lambda t: t.ms) if finite else None

    def count(self, kind: str) -> int:
        return sum(1 for t in self.timings if t.kind == kind)


@contextlib.contextmanager
def feedback_saver(fn: Callable[..., None]) -> Iterator[None]:
    """Register `fn` as an Inductor feedback saver inside the block, and remove it after.

    Inductor calls savers with (timings, name, input_nodes, choices, profiled_time) for every op it
    really benchmarks, and does not catch what a saver raises: an exception would abort the
    compile. So `fn` runs guarded here; a failure is logged at DEBUG and the compile goes on.
    """
    from torch._inductor import select_algorithm

    def guarded(*args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 -- an exception escaping a saver aborts torch.compile
            log.debug("kernel_select: feedback saver %s failed", getattr(fn, "__name__", fn), exc_info=True)

    select_algorithm.add_feedback_saver(guarded)
    try:
        yield
    finally:
        savers = select_algorithm.get_algorithm_selector_cache().feedback_saver_fns
        if guarded in savers:
            savers.remove(guarded)


@contextlib.contextmanager
def record_autotuning() -> Iterator[list[AutotuneRecord]]:
    """Collect what Inductor's autotuner benchmarked (via a feedback saver) inside the block."""
    from torch._inductor import select_algorithm

    records: list[AutotuneRecord] = []

    def saver(timings: dict[Any, float], name: str, input_nodes: Any = (), *_: Any) -> None:
        choices = [choice_timing(select_algorithm, c, ms) for c, ms in timings.items()]
        records.append(AutotuneRecord(name, choices, input_shapes(input_nodes)))

    with feedback_saver(saver):
        yield records


def input_shapes(input_nodes: Any) -> list[list[int | str]] | None:
    """The sizes of an autotuned op's inputs (a symbolic size as its expression); None if unreadable."""
    try:
        return [[_dim(size) for size in node.get_size()] for node in input_nodes]
    except Exception:  # noqa: BLE001 -- called from a feedback saver: never raise there
        return None


def _dim(size: Any) -> int | str:
    try:
        return int(size)
    except TypeError:  # a symbolic size
        return str(size)


def choice_timing(select_algorithm: Any, choice: Any, ms: float) -> ChoiceTiming:
    if isinstance(choice, select_algorithm.TritonTemplateCaller):
        return ChoiceTiming(choice.name, "triton", float(ms), _config_of(choice))
    if isinstance(choice, select_algorithm.ExternKernelCaller):
        return ChoiceTiming(choice.name, "extern", float(ms), None)
    return ChoiceTiming(getattr(choice, "name", type(choice).__name__), "other", float(ms), None)


def _config_of(choice: Any) -> GemmConfig | None:
    try:
        ktc = getattr(choice, "annotations", {}).get("ktc")
        if ktc is not None:
            return GemmConfig.from_inductor_kwargs(ktc.params.to_kwargs())
        return config_from_description(choice.description)
    except Exception:  # noqa: BLE001 -- e.g. a persistent-TMA choice without GEMM kwargs
        return None
