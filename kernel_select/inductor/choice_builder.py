"""What the handler hands back to Inductor: candidate lists built from the decision's Selections.

Triton configs. Each selected config becomes a KernelTemplateChoice shaped like Inductor's own first
candidate of the template (`peek_first`), so everything that is a property of the problem rather
than of the config (ACC_TYPE, USE_FAST_ACCUM, whatever a newer torch adds) is exactly what Inductor
would have emitted. For a problem outside the model's training data they follow Inductor's own
candidates (`beside_own`).

One choice. Inductor's `AlgorithmSelectorCache.__call__` returns the only choice of a one-choice list
without compiling or benchmarking anything else (and without calling feedback savers), so a
pinned GEMM costs one kernel compile (a Triton pin) or none (an ATen pin); docs/design.md ("One
choice per GEMM") gives the source. A LUT pin and the decision of gemm_topk=1 (`Selection.sole`)
are both offered that way (`offer_sole`).

Most GEMM lowerings ask for all their candidates in one `get_template_configs` call. `addmm`
asks three times: ATen choices first, then the contiguous-bias template, then the Triton
templates. Every call of a pinned problem therefore drops what is not the pin, and a call that
cannot hold the pin returns nothing only when the call that holds it is sure to come (or came);
otherwise the pin cannot be honoured here and Inductor keeps its candidates (one warning).

bias_addmm. An `nn.Linear` with a bias lowers to `addmm(bias, x, W.t())`. Eager (and `mode="default"`) runs
it as one cuBLASLt call with the bias added in the GEMM's epilogue; that is Inductor's ATen
choice `bias_addmm`. Under max-autotune torch 2.11 also offers plain `addmm` with the bias
expanded to M x N (`AddMMBiasExpansionConfigMixin`), and in the compiled program that runs as
two kernels: an M x N copy of the bias into the output, then a GEMM with beta = 1 that reads it
back. Inductor's benchmark times the pair in isolation, where a short cuBLASLt call is bound by
its host-side launch, and can rank it first (ViT-B/16 on an H100, 12608 x 768 x 768:
`addmm` 0.050 ms, `bias_addmm` 0.061 ms), while in the program the copy alone took 0.81 ms of a
7.3 ms step over 48 such GEMMs and the step ran 1.14x slower than `default`'s (profiled on
the H100). The epilogue call never does more work than the pair, so it is offered
alone; Triton candidates still compete with it. Where `bias_addmm` is the only ATen choice left
and no Triton candidate is offered, Inductor takes it without benchmarking anything.

Inductor's benchmark also over-times the epilogue call itself against Triton (up to 2.4x on GPT-2's
projections), so for an `addmm` whose bias is one row (`row_bias`) the cuBLAS gate drops its margin
(kernel_select.model.cublas). That is decided in `addmm`'s Triton call, which no longer sees the ATen choices:
torch 2.11 offers `bias_addmm` exactly when the bias is a row broadcast over M (and torch 2.13 then
hands ATen's `addmm` the row itself, the same cuBLASLt call).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from torch._inductor.virtualized import V

from kernel_select import warn
from kernel_select.configs import GemmConfig
from kernel_select.errors import KernelSelectError
from kernel_select.decision import ATEN, Selection

log = logging.getLogger(__name__)

#: Template uids whose candidates the handler replaces. The persistent-TMA and Blackwell templates have
#: their own config lists and kwargs, so they pass through like the extern choices.
TRITON_GEMM_TEMPLATES = frozenset({"triton::mm", "triton::bmm"})

# Template kwargs that differ between configs. Everything else in a candidate's params (ACC_TYPE,
# USE_FAST_ACCUM and whatever a newer torch adds) is a property of the problem, so it is copied
# from Inductor's own first candidate and always matches what Inductor would have emitted.
_PER_CONFIG_KWARGS = frozenset(
    {"BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_stages", "num_warps", "EVEN_K", "hint_override"}
)



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


def synthesize(selection: Selection, base: Any, k_symbolic: Any, overrides: dict[str, Any]) -> list[Any]:
    """One KernelTemplateChoice per config of `selection`, shaped like Inductor's own `base`, tagged
    with the selection's multi-kernel hint."""
    ktc_class, params_class = _ktc_api()
    problem_kwargs = {k: v for k, v in base.params.to_kwargs().items() if k not in _PER_CONFIG_KWARGS}
    synthesized = []
    for config in selection.configs:
        # Template-wide kwargs (ACC_TYPE, ALLOW_TF32, ...) come from Inductor's own `base` below.
        kwargs = config.inductor_kwargs(selection.problem, even_k=_even_k(k_symbolic, config.block_k))
        kwargs["hint_override"] = selection.hint
        kwargs.update(problem_kwargs)
        kwargs.update(overrides)  # Inductor applies overrides last, too
        synthesized.append(ktc_class(template=base.template, params=params_class(kwargs),
                                     extra_kwargs=base.extra_kwargs, layout=base.layout, inputs=base.inputs))
    return synthesized


def replace_triton(choices: dict[str, Iterable[Any]], bases: dict[str, Any], selections: Sequence[Selection],
                   k_expr: Any, kwarg_overrides: dict[str, dict[str, Any]]) -> dict[str, Iterable[Any]]:
    """`choices` with each Triton GEMM template's candidates (its Inductor-made first one in `bases`)
    replaced by the selected configs of every selection; after Inductor's own for a problem outside the
    model's training data."""
    replaced = dict(choices)
    for uid, base in bases.items():
        overrides = kwarg_overrides.get(uid, {})
        ours = [choice for selection in selections
                for choice in synthesize(selection, base, k_expr, overrides)]
        replaced[uid] = beside_own(choices[uid], ours) if selections[0].outside else ours
    return replaced


def beside_own(own: Iterable[Any], ours: list[Any]) -> list[Any]:
    """Inductor's own candidates, then those of `ours` whose config Inductor does not offer already."""
    own = list(own)
    offered = {config_of(choice) for choice in own} - {None}
    return own + [choice for choice in ours if config_of(choice) not in offered]


def config_of(choice: Any) -> GemmConfig | None:
    """The config of a KernelTemplateChoice of a Triton GEMM template, or None where it has none."""
    try:
        return GemmConfig.from_inductor_kwargs(choice.params.to_kwargs())
    except Exception:  # noqa: BLE001 -- not ours to read: it simply counts as a config of its own
        return None


def peek_first(choices: dict[str, Iterable[Any]], uids: list[str]) -> dict[str, Any]:
    """Inductor's first candidate per template (the template for our kwargs), put back at once so
    `choices` stays whole for a fallback."""
    bases = {}
    for uid in uids:
        generator = iter(choices[uid])
        base = next(generator, None)
        choices[uid] = () if base is None else itertools.chain([base], generator)
        if base is not None:
            bases[uid] = base
    return bases


ADDMM, BIAS_ADDMM = "aten::addmm", "aten::bias_addmm"


def prefer_bias_epilogue(choices: dict[str, Iterable[Any]], op_name: str) -> dict[str, Iterable[Any]]:
    """`choices` without the plain `addmm` where `bias_addmm` is offered (module doc); else as given."""
    if op_name != "addmm" or ADDMM not in choices or BIAS_ADDMM not in choices:
        return choices
    epilogue = list(choices[BIAS_ADDMM])  # a generator: keep what was read
    if not epilogue:
        return {**choices, BIAS_ADDMM: epilogue}
    return {**choices, BIAS_ADDMM: epilogue, ADDMM: []}


#: Lowerings that split their candidates over several get_template_configs calls.
SPLIT_CALL_OPS = frozenset({"addmm"})


def offer_sole(selection: Selection, choices: dict[str, Iterable[Any]], kernel_inputs: Any, op_name: str,
               kwarg_overrides: dict[str, dict[str, Any]], k_expr: Any,
               triton_uids: frozenset[str]) -> dict[str, list[Any]] | None:
    """The candidates of a problem with one choice (`Selection.sole`: a LUT pin or gemm_topk=1's
    decision; see `offer_only_pin`), or None, logged."""
    def make_triton(base: Any) -> Any:
        return synthesize(selection, base, k_expr, kwarg_overrides.get(base.template.uid, {}))[0]

    sole = selection.sole
    offered = offer_only_pin(choices, sole, op_name, kernel_inputs, triton_uids, make_triton)
    if offered is not None and any(offered.values()):
        if selection.pinned is None:
            log.info("kernel_select: %s", selection.summary())
        else:
            log.info("kernel_select: %s on %s: pinned by the LUT to %s; nothing is benchmarked",
                     selection.problem, selection.device, sole if isinstance(sole, str) else sole.short())
        if selection.pin_gap:
            warn.warn_once(("pin gap", selection.problem, selection.pin_gap), log,
                           "kernel_select: %s: %s; one kernel serves them all with this pin. Compile "
                           "one graph per length bucket (kernel_select.inductor.bucketed) to serve "
                           "each bucket its own pin", selection.problem, selection.pin_gap)
    return offered


def offer_only_pin(choices: dict[str, Iterable[Any]], pin: GemmConfig | str, op_name: str,
                   kernel_inputs: Any, triton_uids: frozenset[str],
                   make_triton: Callable[[Any], Any]) -> dict[str, list[Any]] | None:
    """`choices` reduced to the pinned choice (or to nothing, in a call of a split lowering that
    cannot hold it); None when the pin cannot be honoured and Inductor keeps its candidates.

    Args:
        make_triton: builds the pinned Triton KernelTemplateChoice from Inductor's first
            candidate of the Triton template (the template, layout and problem kwargs).
    """
    empty: dict[str, list[Any]] = {uid: [] for uid in choices}
    if pin == ATEN:
        # The first ATen template with a candidate: addmm's plain `addmm` comes before `bias_addmm`
        # but may have been left out (bias_epilogue.py)
        atens = [uid for uid in choices if uid.startswith("aten::")]
        for aten in atens:
            first = next(iter(choices[aten]), None)
            if first is not None:
                return {**empty, aten: [first]}
        if atens:
            return None
        return empty if op_name in SPLIT_CALL_OPS and _aten_offered() else _cannot_pin(pin, op_name)
    triton = next((uid for uid in choices if uid in triton_uids), None)
    if triton is not None:
        base = next(iter(choices[triton]), None)
        return None if base is None else {**empty, triton: [make_triton(base)]}
    if op_name in SPLIT_CALL_OPS and _triton_offered(kernel_inputs):
        return empty
    return _cannot_pin(pin, op_name)


def _cannot_pin(pin: GemmConfig | str, op_name: str) -> None:
    what = "ATen" if pin == ATEN else "the Triton GEMM template"
    warn.warn_fallback(
        KernelSelectError(f"the one choice of an {op_name} (a LUT pin, or gemm_topk=1's decision) is {what}, "
                          f"which Inductor does not offer for this GEMM (check max_autotune_gemm_backends)"),
        log, "Inductor autotunes its own candidates for it")
    return None


def _aten_offered() -> bool:
    try:
        from torch._inductor.utils import use_aten_gemm_kernels

        return bool(use_aten_gemm_kernels())
    except Exception:  # noqa: BLE001 -- unsure: keep Inductor's candidates
        return False


def triton_comes_later(kernel_inputs: Any, op_name: str) -> bool:
    """Whether this call is one of a split lowering (addmm) whose later call offers the Triton template:
    a call without it still decides a one-choice problem, to drop ATen where Triton is the pick."""
    return op_name in SPLIT_CALL_OPS and _triton_offered(kernel_inputs)


def _triton_offered(kernel_inputs: Any) -> bool:
    """Whether addmm's later call will offer the Triton template (Inductor's own test)."""
    try:
        from torch._inductor import config as inductor_config
        from torch._inductor.utils import use_triton_template

        # Without max-autotune addmm asks for ATen only, whatever use_triton_template says.
        autotuning = inductor_config.max_autotune or inductor_config.max_autotune_gemm
        return bool(autotuning and use_triton_template(kernel_inputs.output_layout(),
                                                       check_max_autotune=False))
    except Exception:  # noqa: BLE001 -- unsure: keep Inductor's candidates
        return False
