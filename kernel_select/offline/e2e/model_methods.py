"""How `compare-models` compiles a network: the methods, as plain data a worker process can rebuild.

Built in, in this order:
  eager        no compile
  default      torch.compile(mode="default")
  stock        stock max-autotune: Inductor's mode "max-autotune" (CUDA graphs on; with
               `cudagraphs=False`, "max-autotune-no-cudagraphs")
  topk-1/4     the same, with kernel_select's handler at k = 1 and 4
  topk-auto    the handler with topk="auto", offered only when `kernel_select.knobs` accepts it
  topk-4-parity  the handler at k = 4 with `eager_parity_patches()` (GEMVs stay on cuBLAS)
  topk-4-inproc  the handler at k = 4 with `precompile_in_process`: Triton choices precompiled in the
               compiling process, so benchmarking does not compile them a second time
  stock-gemm   Inductor alone with GEMM autotuning only: `max_autotune_gemm` and CUDA graphs, without
               the mode's pointwise/reduction autotuning and coordinate-descent tuning
  topk-4-gemm  the handler at k = 4 with those GEMM-only options, Triton choices precompiled in
               process: what kernel_select adds when only the GEMMs are tuned
  topk-auto-gemm  the same with topk="auto" (the model's own cut per GEMM)
  topk-4-gemm-no-inproc  topk-4-gemm with precompile_in_process off: choices precompiled as torch
               does, in the worker pool, then compiled again to be benchmarked (what a bare install()
               did before in-process precompile became the default)
  install-gemm a bare `install()` with those GEMM-only options: the knobs' defaults, and no LUT even
               with --lut; what a user gets who sets nothing
  zero-gemm    the handler at k = 1 with the GEMM-only options (as topk-4-gemm): the zero-benchmark
               mode, where the cuBLAS decision alone hands Inductor one choice per GEMM it can
               decide; the GEMMs it cannot (outside the model's domain, batched ones without a
               cuBLAS prediction) are benchmarked, precompiled in process
  lut          the handler at k = 1 with a pinned lookup table (offered only when one is given):
               the LUT's entry for a GEMM is the one Triton config benchmarked beside cuBLAS
  pinned-gemm  the handler at k = 1 with the GEMM-only options, Triton choices precompiled in
               process, serving a LUT that `pretune` pinned for this very workload first
               (`pretuned`: compare_models makes one LUT per workload, model_pretune, and fills
               in `lut`); a GEMM the LUT pins to one choice is not benchmarked at all

A comparison runs DEFAULT_METHODS unless told otherwise ("all": every method that applies):
`default` is what each method's autotuning time is measured from (compile_s minus default's),
`stock-gemm` and `topk-4-gemm` tune the same GEMMs with the same options, Inductor's candidates
against kernel_select's, so their step ratio compares like with like. `eager` is not among them:
every compiled method's process times the eager step beside its own, interleaved, and that is
what the tables compare with; a process of its own would add its start-up time and no number.

More can be added with `register_method(name, factory)`: a factory gets the `MethodContext` of
the run and returns a `ModelMethod`, or None where the method does not apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from kernel_select import options as ks_options
from kernel_select.errors import OptionError

MODES = ("eager", "default", "max-autotune")


@dataclasses.dataclass(frozen=True)
class ModelMethod:
    """One way to run a network. Plain data: it travels to the worker process as JSON."""

    name: str
    mode: str  # one of MODES
    topk: int | str | None = None  # kernel_select's handler at this k; None: Inductor alone
    lut: str | None = None  # kernel_lut_path for the handler
    cudagraphs: bool = True  # max-autotune only: Inductor's CUDA graphs, as mode="max-autotune" has
    backend: str = "inductor"  # "eager" = Dynamo without Inductor (CPU tests of the plumbing)
    eager_parity: bool = False  # keep GEMVs on cuBLAS (kernel_select.inductor.eager_parity)
    precompile_in_process: bool = False  # the handler's knob (kernel_select.inductor.precompile)
    gemm_only: bool = False  # autotune GEMMs only (no pointwise autotuning, no coordinate descent)
    pretuned: bool = False  # `lut` is the workload's own, made by pretune before the run (compare_models)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise OptionError(f"method {self.name}: mode must be one of {', '.join(MODES)}, "
                              f"got {self.mode!r}")

    @property
    def uses_handler(self) -> bool:
        return self.topk is not None

    def compile_options(self) -> dict[str, Any] | None:
        """torch.compile options for Inductor (None: compile with the default mode)."""
        if self.mode != "max-autotune":
            return None
        import torch._inductor as torch_inductor

        if self.gemm_only:
            from kernel_select.inductor import gemm_autotune_options

            return gemm_autotune_options(cudagraphs=self.cudagraphs)
        mode = "max-autotune" if self.cudagraphs else "max-autotune-no-cudagraphs"
        options = dict(torch_inductor.list_mode_options(mode))
        if self.eager_parity:
            from kernel_select.inductor import eager_parity_patches

            options.update(eager_parity_patches())
        return options

    def compile(self, module: Any) -> Any:
        """`module` as this method runs it; installs the handler first when the method has one."""
        import torch

        if self.mode == "eager":
            return module
        if self.uses_handler:
            import kernel_select.inductor as ks_inductor

            # Passed even when False, so an environment variable cannot turn it on for the other
            # handler methods of a comparison.
            ks_inductor.install(gemm_topk=self.topk, kernel_lut_path=self.lut,
                                gemm_precompile_in_process=self.precompile_in_process)
        if self.backend != "inductor":
            return torch.compile(module, backend=self.backend)
        options = self.compile_options()
        return torch.compile(module, options=options) if options else torch.compile(module)


@dataclasses.dataclass(frozen=True)
class MethodContext:
    """What the factories may depend on."""

    lut: str | None = None
    cudagraphs: bool = True


MethodFactory = Callable[[MethodContext], "ModelMethod | None"]
_FACTORIES: dict[str, MethodFactory] = {}


def register_method(name: str, factory: MethodFactory) -> None:
    """Add (or replace) a method; it is offered after the ones registered before it."""
    _FACTORIES[name] = factory


def supports_topk(value: str) -> bool:
    """Whether this version of `kernel_select.knobs` accepts `value` as a topk."""
    try:
        ks_options.parse_topk(value)
    except OptionError:
        return False
    return True


def _handler(name: str, topk: int | str) -> MethodFactory:
    return lambda ctx: ModelMethod(name, "max-autotune", topk=topk, lut=ctx.lut, cudagraphs=ctx.cudagraphs)


register_method("eager", lambda ctx: ModelMethod("eager", "eager"))
register_method("default", lambda ctx: ModelMethod("default", "default"))
register_method("stock", lambda ctx: ModelMethod("stock", "max-autotune", cudagraphs=ctx.cudagraphs))
register_method("topk-1", _handler("topk-1", 1))
register_method("topk-4", _handler("topk-4", 4))
register_method("topk-auto",
                lambda ctx: _handler("topk-auto", "auto")(ctx) if supports_topk("auto") else None)
register_method("topk-4-parity", lambda ctx: dataclasses.replace(_handler("topk-4-parity", 4)(ctx),
                                                                  eager_parity=True))
register_method("topk-4-inproc", lambda ctx: dataclasses.replace(_handler("topk-4-inproc", 4)(ctx),
                                                                  precompile_in_process=True))
register_method("stock-gemm", lambda ctx: ModelMethod("stock-gemm", "max-autotune", cudagraphs=ctx.cudagraphs,
                                                      gemm_only=True))
register_method("topk-4-gemm", lambda ctx: dataclasses.replace(
    _handler("topk-4-gemm", 4)(ctx), gemm_only=True, precompile_in_process=True))
register_method("topk-auto-gemm", lambda ctx: dataclasses.replace(
    _handler("topk-auto-gemm", "auto")(ctx), gemm_only=True, precompile_in_process=True)
    if supports_topk("auto") else None)
register_method("topk-4-gemm-no-inproc", lambda ctx: dataclasses.replace(
    _handler("topk-4-gemm-no-inproc", 4)(ctx), gemm_only=True))
register_method("install-gemm", lambda ctx: ModelMethod(
    "install-gemm", "max-autotune", topk=ks_options.DEFAULT_TOPK, cudagraphs=ctx.cudagraphs, gemm_only=True,
    precompile_in_process=ks_options.KNOBS["gemm_precompile_in_process"].default))
register_method("zero-gemm", lambda ctx: dataclasses.replace(
    _handler("zero-gemm", 1)(ctx), gemm_only=True, precompile_in_process=True))
register_method("lut", lambda ctx: _handler("lut", 1)(ctx) if ctx.lut else None)
register_method("pinned-gemm", lambda ctx: dataclasses.replace(
    _handler("pinned-gemm", 1)(ctx), lut=None, gemm_only=True, precompile_in_process=True, pretuned=True))


#: Why a built-in method can be missing from a run.
_CONDITIONS = {"lut": " (needs --lut)", "topk-auto": " (needs topk='auto' support in kernel_select.knobs)"}


def available_methods(context: MethodContext | None = None) -> list[ModelMethod]:
    """Every registered method that applies to `context`, in registration order."""
    context = context or MethodContext()
    return [m for m in (factory(context) for factory in _FACTORIES.values()) if m is not None]


#: What a comparison runs when no methods are named: the README's recipe (`topk-4-gemm`) against
#: Inductor's own GEMM autotuning (`stock-gemm`), with `default` for the autotuning time.
DEFAULT_METHODS = ("default", "stock-gemm", "topk-4-gemm")


def select_methods(names: str | None, context: MethodContext | None = None) -> list[ModelMethod]:
    """The methods named in "eager,stock,topk-4": DEFAULT_METHODS when `names` is empty, every
    available one for "all".

    Raises:
        OptionError: for a name that is unknown or does not apply (e.g. `lut` without a LUT).
    """
    available = {m.name: m for m in available_methods(context)}
    if names and names.strip() == "all":
        return list(available.values())
    chosen = []
    for name in (n.strip() for n in (names or ",".join(DEFAULT_METHODS)).split(",") if n.strip()):
        if name not in available:
            why = _CONDITIONS.get(name, "")
            raise OptionError(f"--methods: {name!r} is not available{why}; "
                              f"choose from {', '.join(available)}")
        if available[name] not in chosen:
            chosen.append(available[name])
    return chosen
