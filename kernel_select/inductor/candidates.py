"""Inductor candidates built from our configs: KernelTemplateChoices shaped like Inductor's own."""

from __future__ import annotations

from typing import Any

from torch._inductor.virtualized import V

# Template kwargs that differ between configs. Everything else in a candidate's params (ACC_TYPE,
# USE_FAST_ACCUM and whatever a newer torch adds) is a property of the problem, so it is copied
# from Inductor's own first candidate and always matches what Inductor would have emitted.
_PER_CONFIG_KWARGS = frozenset(
    {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps", "EVEN_K", "hint_override"}
)



def symbolic_k(kernel_inputs: Any) -> Any:
    try:
        return kernel_inputs.mnk_symbolic()[2]
    except Exception:  # noqa: BLE001 -- EVEN_K=False is always correct, just slower
        return None


def _even_k(k_symbolic: Any, block_k: int) -> bool:
    """EVEN_K as Inductor computes it: True only if K % BLOCK_K == 0 holds for every K the graph
    accepts. With a dynamic K the hinted value is not enough, and a wrong True reads out of bounds."""
    if k_symbolic is None:
        return False
    if isinstance(k_symbolic, int) or getattr(k_symbolic, "is_Integer", False):
        return int(k_symbolic) % block_k == 0
    try:
        import sympy

        return bool(V.graph.sizevars.statically_known_true(sympy.Eq(sympy.Mod(k_symbolic, block_k), 0)))
    except Exception:  # noqa: BLE001
        return False


def _ktc_api() -> tuple[Any, Any]:
    # Same homes in 2.11 and 2.13; imported here so a future move degrades to a warning.
    from torch._inductor.kernel_template_choice import KernelTemplateChoice
    from torch._inductor.template_heuristics.params import DictKernelTemplateParams

    return KernelTemplateChoice, DictKernelTemplateParams


def synthesize(selection: Any, base: Any, k_symbolic: Any, overrides: dict[str, Any]) -> list[Any]:
    """One KernelTemplateChoice per config of `selection` (a choices.Selection), shaped like
    Inductor's own `base`, tagged with the selection's multi-kernel hint."""
    ktc_class, params_class = _ktc_api()
    problem_kwargs = {k: v for k, v in base.params.to_kwargs().items() if k not in _PER_CONFIG_KWARGS}
    synthesized = []
    for config in selection.configs:
        # Template-wide kwargs (ACC_TYPE, ALLOW_TF32, ...) come from Inductor's own `base` below.
        kwargs = config.inductor_kwargs(selection.problem, even_k=_even_k(k_symbolic, config.block_k))
        kwargs["hint_override"] = selection.hint_override
        kwargs.update(problem_kwargs)
        kwargs.update(overrides)  # Inductor applies overrides last, too
        synthesized.append(ktc_class(template=base.template, params=params_class(kwargs),
                                     extra_kwargs=base.extra_kwargs, layout=base.layout, inputs=base.inputs))
    return synthesized
