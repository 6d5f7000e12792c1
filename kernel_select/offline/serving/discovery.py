"""Which GEMMs pretune tunes: `Site`s found in a model's compiled graph, in an eager run, or named
in a shapes file.

A factory (`--network module:factory`) returns `(module, example_inputs, dynamic)`, where `dynamic`
maps an input index to `(dim, low, high)`: that dimension (a sequence length) takes the values
low..high at serve time.

- `discover_compiled` (the default): compile the model with `torch.compile` and the length marked
  `mark_dynamic(min=low, max=high)`, and record what Inductor asks the choices handler about
  (kernel_select.inductor.lowered): the lowered GEMMs with their epilogues (a biased Linear's
  addmm, a pointwise consumer a Triton template would fuse), their operand layouts, and which of M
  or K follows the length, over which range. Nothing is benchmarked. Compile with the options you
  serve with (default: GEMM autotuning without CUDA graphs or shape padding), as they decide
  what is lowered.
- `discover` (eager): run the model under a dispatch mode that records every aten mm/addmm/bmm/
  baddbmm; the dimension equal to the dynamic size is the dynamic one (M, or K as in a weight
  gradient). It sees no epilogue and no lowering decision; for steps that are not one module
  call (a training step with its optimizer).
- `load_shapes`: a JSON list of {"op", "dtype", "n", "m", "k", ["batch"], ["layout"], ["source"]},
  where m or k, not both, may be {"min", "max"}, and any other key is refused; `layout` is "nn"
  (default), "nt", "tn" or "tt": A then B, "n" row-major, "t" a transposed view (column-major).

A float32 GEMM that Inductor runs with TF32 is a TF32 problem (its pins go to the LUT's "tf32" list,
where the handler looks them up): the compiled discovery reads Inductor's own ALLOW_TF32; the eager
one and a shapes file take Inductor's rule under this process's precision (kernel_select.tf32), the
dynamic size by its range.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kernel_select.errors import first_line, KernelSelectError
from kernel_select.layouts import check_layout, layout_of
from kernel_select.model.cublas import Epilogue
from kernel_select.offline.data import shape_fields
from kernel_select.offline.harness.bench_plan import running_force_same_precision
from kernel_select.problem import Problem, spread_ms
from kernel_select.tf32 import Size, inductor_allow_tf32

log = logging.getLogger(__name__)

GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")


@dataclasses.dataclass(frozen=True)
class Site:
    """One GEMM the model runs: its problem at the example sizes and which size is dynamic.

    `low`..`high` is the dynamic size's range in its own units, `per_length` that size per unit of
    the length (M = 2 x length for two sequences), so that GEMMs share length buckets. `epilogue`
    is what the compiled graph runs after the GEMM (None: not known, as in an eager run)."""

    problem: Problem
    dynamic: str | None = None  # "m", "k" or None
    low: int = 0
    high: int = 0
    layout: str = "nn"  # A then B, see kernel_select.layouts
    epilogue: Epilogue | None = None
    per_length: int = 1

    def buckets(self, points: int) -> tuple[int, ...]:
        """`points` log-spaced values of the dynamic size over its range (the example size when static)."""
        if self.dynamic is None:
            return (self.problem.m,)
        return spread_ms(self.low, self.high, points)

    def lengths(self) -> tuple[int, int]:
        """The range of the length this site's dynamic size follows."""
        return -(-self.low // self.per_length), self.high // self.per_length

    def at(self, value: int) -> Problem:
        """The problem with the dynamic size at `value`, in the site's layout."""
        problem = dataclasses.replace(self.problem, layout=self.layout)
        return dataclasses.replace(problem, **{self.dynamic: value}) if self.dynamic else problem

    def served_epilogue(self) -> Epilogue:
        """The recorded epilogue; unknown, an addmm counts as a biased nn.Linear."""
        return self.epilogue if self.epilogue is not None else Epilogue(bias_row=self.problem.op == "addmm")


def load_factory(spec: str) -> tuple[Any, tuple[Any, ...], dict[int, tuple[int, int, int]]]:
    """Call `module:factory` and check what it returns.

    Raises:
        KernelSelectError: for a bad spec, an import failure or a malformed return value.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise KernelSelectError(f"--model {spec!r}: expected 'module:factory' (e.g. mypkg.serving:factory)")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise KernelSelectError(f"--model {spec!r}: cannot load it ({exc})") from None
    made = factory()
    if not (isinstance(made, tuple) and len(made) == 3 and isinstance(made[2], dict)):
        raise KernelSelectError(f"--model {spec!r}: the factory must return (module, example_inputs, "
                                "{input_index: (dim, low, high)})")
    module, inputs, dynamic = made
    return module, tuple(inputs), {int(i): tuple(int(v) for v in spec_) for i, spec_ in dynamic.items()}


# -- from the compiled graph ---------------------------------------------------------------------------

def discover_compiled(module: Any, inputs: Sequence[Any], dynamic: dict[int, tuple[int, int, int]], *,
                      backward: bool = False, options: dict[str, Any] | None = None) -> list[Site]:
    """The distinct GEMMs Inductor lowers for `module(*inputs)` (and its backward, when asked) with
    the length marked dynamic over its range (module doc). A GEMM that cannot be pinned per range
    (`LoweredGemm.unpinnable`) is left out with a warning.

    Raises:
        KernelSelectError: when tracing guards the length inside its range (Dynamo refuses the
            range), naming the fix.
    """
    import torch

    import kernel_select.inductor as ks_inductor

    options = ks_inductor.gemm_autotune_options(cudagraphs=False, shape_padding=False) if options is None \
        else options
    for index, (dim, low, high) in dynamic.items():
        size = int(inputs[index].shape[dim])
        if not max(low, 2) <= size <= high:
            raise KernelSelectError(f"pretune: example input {index} has length {size} in dimension {dim}, "
                                    f"outside its range {low}..{high}; give an example inside it (2 or more)")
        torch._dynamo.mark_dynamic(inputs[index], dim, min=max(low, 2), max=high)
    try:
        # Without backward, an inference graph, as serving compiles: with grad enabled, AOTAutograd
        # would lower the backward's GEMMs too.
        with ks_inductor.lowered_gemms() as gemms, torch.set_grad_enabled(backward):
            torch._dynamo.reset()
            out = torch.compile(module, options=options)(*inputs)
            if backward:
                _backward(out)
    except Exception as exc:
        if "Constraints violated" in str(exc) or type(exc).__name__ == "ConstraintViolationError":
            raise KernelSelectError(f"pretune: tracing guards the length inside its declared range "
                                    f"({str(exc).strip().splitlines()[0]}); compile without shape padding "
                                    "(shape_padding=False) or narrow the range") from exc
        raise
    sites = []
    for gemm in gemms:
        if gemm.unpinnable:
            log.warning("pretune: %s left out: %s", gemm.problem, gemm.unpinnable)
            continue
        sites.append(Site(gemm.problem, gemm.dynamic, gemm.low, gemm.high, gemm.problem.layout, gemm.epilogue,
                          gemm.per_length))
    return merge_epilogues(sites)


def merge_epilogues(sites: Sequence[Site]) -> list[Site]:
    """One site per GEMM a LUT entry can tell apart (sizes, range, layout), in first-seen order.

    Two lowerings of one GEMM with other epilogues (a decoder's query and output projections:
    the same sizes, a residual add after one of them) get one entry, so one pin: the merged
    epilogue has a bias row or a separate pointwise kernel where either has one."""
    merged: dict[Site, Site] = {}
    for site in sites:
        key = dataclasses.replace(site, epilogue=None)
        seen = merged.get(key)
        if seen is None or seen.epilogue is None or site.epilogue is None:
            merged.setdefault(key, site)
            continue
        merged[key] = dataclasses.replace(seen, epilogue=Epilogue(
            bias_row=seen.epilogue.bias_row or site.epilogue.bias_row,
            separate_pointwise=seen.epilogue.separate_pointwise or site.epilogue.separate_pointwise))
    return list(merged.values())


def _backward(out: Any) -> None:
    import torch

    # A dense gradient, as training has (the gradient of a .sum() is an expanded view with zero
    # strides, which would hide the transposed layouts of the backward GEMMs).
    outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
    outs = [o for o in outs if o.requires_grad]
    torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])


# -- from an eager run ---------------------------------------------------------------------------------

def discover(module: Any, inputs: Sequence[Any], dynamic: dict[int, tuple[int, int, int]], *,
             backward: bool = False) -> list[Site]:
    """The distinct GEMMs `module(*inputs)` runs eagerly (and its backward, when asked), with the
    dimension that follows the dynamic input size marked (see the module doc)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[tuple[Problem, str]] = []
    ops = {getattr(torch.ops.aten, op).default: op for op in GEMM_OPS}

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            op = ops.get(func)
            if op is not None:
                seen.append((_problem_of(op, args), layout_of(args[-2], args[-1])))
            return func(*args, **(kwargs or {}))

    with Recorder():
        out = module(*inputs)
        if backward:
            _backward(out)
    sizes = {inputs[i].shape[dim]: (low, high) for i, (dim, low, high) in dynamic.items()}
    return list(dict.fromkeys(_site(problem, sizes, layout) for problem, layout in seen))


def _problem_of(op: str, args: Sequence[Any]) -> Problem:
    from kernel_select.problem import dtype_name

    a, b = args[-2], args[-1]  # addmm/baddbmm put the bias first
    batch = int(a.shape[0]) if op in ("bmm", "baddbmm") else 1
    return Problem(int(a.shape[-2]), int(b.shape[-1]), int(a.shape[-1]), dtype_name(a.dtype),
                   batch=batch, op=op)


def _site(problem: Problem, sizes: dict[int, tuple[int, int]], layout: str = "nn") -> Site:
    for dim in ("m", "k"):  # M first: a square GEMM whose M and K both match is M-dynamic
        value = getattr(problem, dim)
        if value in sizes:
            return Site(with_tf32(problem, dim, sizes[value]), dim, *sizes[value], layout=layout)
    return Site(with_tf32(problem), layout=layout)


def with_tf32(problem: Problem, dynamic: str | None = None, served: tuple[int, int] = (0, 0)) -> Problem:
    """`problem` marked `tf32` where Inductor of this process would run it with TF32 (module doc);
    `dynamic` ("m" or "k") takes the values `served`."""
    if problem.dtype != "float32":
        return problem
    sizes: dict[str, Size] = {"m": problem.m, "n": problem.n, "k": problem.k}
    if dynamic is not None:
        sizes[dynamic] = served
    tf32 = inductor_allow_tf32(sizes["m"], sizes["n"], sizes["k"],
                               force_same_precision=running_force_same_precision())
    return dataclasses.replace(problem, tf32=True) if tf32 else problem


# -- from a shapes file --------------------------------------------------------------------------------

#: What a pretune shapes-file entry may hold; any other key is refused, not ignored.
SHAPE_KEYS = ("op", "dtype", "n", "m", "k", "batch", "layout", "source")


def load_shapes(path: str | Path) -> list[Site]:
    """Sites from a shapes file (see the module doc), every field checked (shape_fields).

    Raises:
        KernelSelectError: one line naming the file, the entry and the field that is malformed.
    """
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8-sig"))  # a BOM, as LUTs accept it
    except (OSError, ValueError, RecursionError) as exc:
        raise KernelSelectError(f"{path}: not a shapes file ({first_line(exc)})") from None
    if not isinstance(raw, list):
        raise KernelSelectError(f"{path}: not a shapes file (expected a JSON list of {{op, dtype, n, m, k}} "
                                f"objects, got {type(raw).__name__})")
    sites = []
    for index, item in enumerate(raw):
        try:
            sites.append(_shape_site(item))
        except (ValueError, KernelSelectError) as exc:
            raise KernelSelectError(f"{path} entry [{index}]: {first_line(exc)}") from None
    return sites


def _shape_site(item: Any) -> Site:
    """One shapes-file entry as a Site; its problem has the dynamic size at the top of its range."""
    item = shape_fields.entry(item, SHAPE_KEYS)
    for dim in ("m", "k"):
        if dim not in item:
            raise ValueError(f"{dim}: missing; give an integer or {{\"min\": ..., \"max\": ...}}")
    ranges = {dim: _size_range(dim, item[dim]) for dim in ("m", "k") if isinstance(item[dim], dict)}
    if len(ranges) > 1:
        raise ValueError("m and k are both ranges; a GEMM follows one dynamic size, so give one "
                         "of them as an integer (split the GEMM into one entry per fixed size)")
    sizes = {dim: ranges[dim][1] if dim in ranges else shape_fields.size(item, dim)
             for dim in ("m", "k")}
    problem = Problem(sizes["m"], shape_fields.size(item, "n"), sizes["k"],
                      shape_fields.text(item, "dtype", "bfloat16"),
                      batch=shape_fields.size(item, "batch", default=1),
                      op=shape_fields.text(item, "op", "mm"))
    layout = check_layout(shape_fields.text(item, "layout", "nn"))
    for dim, (low, high) in ranges.items():
        if low != high:
            return Site(with_tf32(problem, dim, (low, high)), dim, low, high, layout)
    return Site(with_tf32(problem), layout=layout)


def _size_range(dim: str, value: dict[str, Any]) -> tuple[int, int]:
    """A dynamic size's {"min", "max"}, both sizes, min <= max."""
    shape_fields.entry(value, ("min", "max"))
    low, high = (shape_fields.size(value, key) for key in ("min", "max"))
    if low > high:
        raise ValueError(f"{dim}: min {low} is larger than max {high}; swap them")
    return low, high
