"""Helpers for experiments (offline compare and fidelity, tests): torch.compile options and a
recorder of what Inductor's autotuner benchmarked. Not used by the compile path itself."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

from kernel_select.configs import GemmConfig, config_from_description

log = logging.getLogger(__name__)

def max_autotune_options(search_space: str = "DEFAULT", **extra: Any) -> dict[str, Any]:
    """torch.compile options equal to mode="max-autotune-no-cudagraphs" with the given GEMM search
    space (torch.compile takes either a mode or options, not both).

    Caches are not an option here: `force_disable_caches` is an alias of
    torch.compiler.config.force_disable_caches, which torch.compile(options=...) rejects; use
    `torch.compiler.config.patch(force_disable_caches=True)` or TORCHINDUCTOR_FORCE_DISABLE_CACHES=1.
    """
    import torch._inductor as torch_inductor

    options = dict(torch_inductor.list_mode_options("max-autotune-no-cudagraphs"))
    options["max_autotune_gemm_search_space"] = search_space.upper()
    options.update(extra)
    return options


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

    @property
    def winner(self) -> ChoiceTiming | None:
        finite = [t for t in self.timings if t.ms < float("inf")]
        return min(finite, key=lambda t: t.ms) if finite else None

    def count(self, kind: str) -> int:
        return sum(1 for t in self.timings if t.kind == kind)


@contextlib.contextmanager
def record_autotuning() -> Iterator[list[AutotuneRecord]]:
    """Collect what Inductor's autotuner benchmarked (via a feedback saver) inside the block."""
    from torch._inductor import select_algorithm

    records: list[AutotuneRecord] = []

    def saver(timings: dict[Any, float], name: str, *_: Any) -> None:
        # An exception escaping a feedback saver aborts torch.compile; never let one out.
        try:
            records.append(AutotuneRecord(name, [choice_timing(select_algorithm, c, ms)
                                                 for c, ms in timings.items()]))
        except Exception:  # noqa: BLE001
            log.debug("kernel_select: could not record autotuning of %s", name, exc_info=True)

    select_algorithm.add_feedback_saver(saver)
    try:
        yield records
    finally:
        savers = select_algorithm.get_algorithm_selector_cache().feedback_saver_fns
        if saver in savers:
            savers.remove(saver)


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
