"""`kernel-select pretune`: benchmark a model's GEMMs once, offline, and write a LUT of pinned
entries, so that serving compiles with max-autotune benchmark nothing.

    kernel-select pretune --model mypkg.serving:factory --backward --out luts/serving.json

The factory returns `(module, example_inputs, dynamic)` where `dynamic` maps an input index to
`(dim, low, high)`: that dimension (a sequence length) takes values low..high at serve time. A
shapes file (JSON list of {"op", "dtype", "n", "m", "k", ["batch"], ["layout"]}, where m or k, not
both, may be {"min", "max"}) names the GEMMs directly; `layout` is "nn" (default), "nt", "tn" or
"tt": A then B, "n" row-major, "t" a transposed view (column-major).

Steps, each its own function so all but the benchmark run (and are tested) on the CPU:
1. discover: run the model once (forward, and backward when asked) under a dispatch mode that
   records every aten mm/addmm/bmm/baddbmm with its sizes; the dimension equal to the dynamic
   size is the dynamic one (M, or K as in a weight gradient), and each operand's memory layout
   (`x @ W.t()` reads B transposed), so the benchmark multiplies the layout the model serves;
2. bucket: log-spaced Ms (or Ks) over the range;
3. candidates: the union over the buckets of the model's top-k, so every bucket times the same set;
   where the cuBLAS gate skips Triton at every bucket (the handler's decision, margin and clauses
   included), ATen is pinned without a benchmark: Inductor's benchmark over-times cuBLAS where the
   clauses apply, so timing would pin a Triton config the handler itself would not offer (an
   `addmm` counts as a biased nn.Linear: the benchmark gives it a bias row);
4. benchmark (GPU): per bucket, Inductor's own autotuner times the candidates and ATen, caches
   off, through a temporary LUT and `kernel_select.inductor.record`; a GEMM Inductor lowers
   without autotuning (nothing timed) is left out of the LUT with a warning, and a run where
   that is every GEMM is an error;
5. choose: the choice with the smallest geometric mean over the buckets of time / best time;
6. write: one pinned entry per GEMM, with an m range or a k range over the dynamic size (the
   range the GEMM serves, wider than the buckets), the GEMM's operand layout and a note with the
   measured figures.

Every entry names its layout, "nn" too: an entry without one serves every layout, and one step's
GEMMs may share (m, n, k) apart from the layout (nn.Linear(3420 -> 1280): the input gradient
L x 3420 x 1280 "nn" and the weight gradient 1280 x 3420 x L "tn" meet at L = 1280), so a
layout-less "nn" entry would overlap them and the LUT would be refused. The pin was measured in
its layout only, too, so it claims no other.

Measurements are kept in `<out>.progress.json` as they arrive, so an interrupted run resumes.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.errors import KernelSelectError
from kernel_select.layouts import check_layout, layout_of
from kernel_select.lut import ATEN, BatchedLUTEntry, lut_from_rows, LUTEntry, LUTRow, SizeRange
from kernel_select.problem import Problem
from kernel_select.model.cublas import Epilogue
from kernel_select.problem import spread_ms
from kernel_select.select import select

log = logging.getLogger(__name__)

GEMM_OPS = ("mm", "addmm", "bmm", "baddbmm")


class NotAutotunedError(KernelSelectError):
    """Inductor benchmarked no choice for a GEMM: it lowers it without autotuning."""


@dataclasses.dataclass(frozen=True)
class Site:
    """One GEMM the model runs: its problem at the example sizes and which size is dynamic."""

    problem: Problem
    dynamic: str | None = None  # "m", "k" or None
    low: int = 0
    high: int = 0
    layout: str = "nn"  # A then B, see kernel_select.layouts

    def buckets(self, points: int) -> tuple[int, ...]:
        """The values of the dynamic size to benchmark at (the example size when static)."""
        if self.dynamic is None:
            return (self.problem.m,)
        return spread_ms(self.low, self.high, points)

    def at(self, value: int) -> Problem:
        return dataclasses.replace(self.problem, **{self.dynamic: value}) if self.dynamic else self.problem


# -- 1. discovery --------------------------------------------------------------------------------

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


def discover(module: Any, inputs: Sequence[Any], dynamic: dict[int, tuple[int, int, int]], *,
             backward: bool = False) -> list[Site]:
    """The distinct GEMMs `module(*inputs)` runs (and its backward, when asked), with the
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
            # A dense gradient, as training has (the gradient of a .sum() is an expanded view with
            # zero strides, which would hide the transposed layouts of the backward GEMMs).
            outs = [out] if isinstance(out, torch.Tensor) else [o for o in out if isinstance(o, torch.Tensor)]
            outs = [o for o in outs if o.requires_grad]
            torch.autograd.backward(outs, [torch.randn_like(o) for o in outs])
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
            return Site(problem, dim, *sizes[value], layout=layout)
    return Site(problem, layout=layout)


def load_shapes(path: str | Path) -> list[Site]:
    """Sites from a shapes file (see the module doc).

    Raises:
        KernelSelectError: naming the file and the entry that is malformed.
    """
    try:
        raw = json.loads(Path(path).read_text())
        sites = []
        for index, item in enumerate(raw):
            sites.append(_shape_site(item))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        where = f" entry [{index}]" if "index" in locals() else ""
        raise KernelSelectError(f"{path}{where}: not a shapes file ({type(exc).__name__}: {exc})") from None
    return sites


def _shape_site(item: dict[str, Any]) -> Site:
    """One shapes-file entry as a Site; its problem has the dynamic size at the top of its range."""
    ranges = {dim: (int(item[dim]["min"]), int(item[dim]["max"])) for dim in ("m", "k")
              if isinstance(item[dim], dict)}
    if len(ranges) > 1:
        raise ValueError("m and k are both ranges; a GEMM follows one dynamic size, so give one "
                         "of them as an integer (split the GEMM into one entry per fixed size)")
    sizes = {dim: ranges[dim][1] if dim in ranges else int(item[dim]) for dim in ("m", "k")}
    problem = Problem(sizes["m"], int(item["n"]), sizes["k"], item.get("dtype", "bfloat16"),
                      batch=int(item.get("batch", 1)), op=item.get("op", "mm"))
    layout = check_layout(item.get("layout", "nn"))
    for dim, (low, high) in ranges.items():
        if low != high:
            return Site(problem, dim, low, high, layout)
    return Site(problem, layout=layout)


# -- 3. candidates, 5. choice, 6. LUT (pure) ----------------------------------------------------------

def candidates(site: Site, buckets: Sequence[int], k: int, model: Any,
               device: DeviceSpec) -> list[GemmConfig]:
    """The union over the buckets of the model's top-k, best-first per bucket."""
    union: dict[GemmConfig, None] = {}
    for value in buckets:
        for choice in select(site.at(value), model=model, gemm_topk=k).choices:
            union.setdefault(choice.config, None)
    return list(union)


Timings = dict[str, float]  # choice label ("aten" or GemmConfig.short()) -> ms at one bucket


def choose(per_bucket: dict[int, Timings]) -> tuple[str, float, dict[int, float]]:
    """(label, geometric-mean ratio to the per-bucket best, ratio per bucket) of the choice that
    is best over all buckets; only choices timed (finitely) at every bucket compete.

    Raises:
        KernelSelectError: when no choice ran at every bucket.
    """
    common = set.intersection(*({label for label, ms in timings.items() if math.isfinite(ms)}
                                for timings in per_bucket.values()))
    if not common:
        raise KernelSelectError("no choice ran at every bucket; nothing to pin")
    best = {bucket: min(t for t in timings.values() if math.isfinite(t))
            for bucket, timings in per_bucket.items()}

    def ratios(label: str) -> dict[int, float]:
        return {bucket: per_bucket[bucket][label] / best[bucket] for bucket in per_bucket}

    def geomean(label: str) -> float:
        values = ratios(label).values()
        return math.exp(sum(math.log(v) for v in values) / len(values))

    label = min(sorted(common), key=geomean)
    return label, geomean(label), ratios(label)


def gated_to_cublas(site: Site, buckets: Sequence[int], model: Any, gate: Any,
                    margin: float | None) -> Any:
    """The gate's decision at the bucket where cuBLAS is least favoured, when the gate skips Triton
    at every bucket (the handler would offer Inductor ATen alone there); else None."""
    if gate is None or margin is None:
        return None
    decisions = []
    for value in buckets:
        problem = site.at(value)
        decision = select(problem, model=model, gemm_topk=1, gate=gate, cublas_margin=margin,
                          epilogue=Epilogue(bias_row=problem.op == "addmm")).cublas
        if decision is None or not decision.prefers_cublas:
            return None
        decisions.append(decision)
    return max(decisions, key=lambda d: d.predicted_ratio)


def pinned_rows(site: Site, label: str, configs: Sequence[GemmConfig], geomean: float,
                ratios: dict[int, float], device: DeviceSpec) -> LUTRow:
    """The pinned LUT row for `site`: its dynamic size (m or k) as a range over low..high, in the
    site's operand layout (written for "nn" too, see the module doc)."""
    pin: GemmConfig | str = ATEN if label == ATEN else next(c for c in configs if c.short() == label)
    worst = max(ratios.values())
    note = (f"kernel-select pretune: {label}, {geomean:.3f}x the per-bucket best on average, "
            f"{worst:.3f}x at worst, over {'/'.join(str(b) for b in sorted(ratios))} "
            f"({len(configs)} Triton + aten timed)")
    return _row(site, pin, note, device)


def gated_row(site: Site, decision: Any, device: DeviceSpec) -> LUTRow:
    """The ATen pin of a site the cuBLAS gate sends to cuBLAS (`gated_to_cublas`), not benchmarked."""
    return _row(site, ATEN, f"kernel-select pretune: aten, not benchmarked: {decision.describe()}", device)


def _row(site: Site, pin: GemmConfig | str, note: str, device: DeviceSpec) -> LUTRow:
    problem = site.problem
    m: int | SizeRange = SizeRange(min=site.low, max=site.high) if site.dynamic == "m" else problem.m
    k: int | SizeRange = SizeRange(min=site.low, max=site.high) if site.dynamic == "k" else problem.k
    fields: dict[str, Any] = {"m": m, "n": problem.n, "k": k, "layout": site.layout, "pin": pin, "note": note}
    if problem.op in ("bmm", "baddbmm"):
        entry: LUTEntry = BatchedLUTEntry(batch=problem.batch, **fields)
    else:
        entry = LUTEntry(**fields)
    return LUTRow(device.key, problem.op, problem.dtype, entry)


def label_of(kind: str, config: GemmConfig | None) -> str | None:
    """The label a timing gets in `Timings`: "aten", a Triton config's short form, or None."""
    if kind == "extern":
        return ATEN
    return config.short() if kind == "triton" and config is not None else None


# -- the run --------------------------------------------------------------------------------------

def gate_settings(device: DeviceSpec) -> dict[str, Any]:
    """`pretune`'s gate and margin as the handler would use them: the shipped gate for `device`
    and the `cublas_margin` knob (its environment variable, else the default)."""
    from kernel_select import knobs, options, runtime

    margin = options.parse_cublas_margin(knobs.gemm_cublas_margin,
                                         source="kernel_select.knobs.gemm_cublas_margin")
    return {"gate": runtime.gate(device) if margin is not None else None, "cublas_margin": margin}

#: (problem, candidates, device, operand layout) -> timings
Benchmark = Callable[[Problem, list[GemmConfig], DeviceSpec, str], Timings]


def pretune(sites: Sequence[Site], *, out: str | Path, device: DeviceSpec, model: Any, k: int = 4,
            points: int = 5, benchmark: Benchmark | None = None, progress: bool = True,
            gate: Any = None, cublas_margin: float | None = None) -> dict[str, Any]:
    """Benchmark every site per bucket, write the pinned LUT to `out`, and return a summary.

    `benchmark` times a problem's candidates and ATen (default: `pretune_gpu.benchmark_problem`,
    on the GPU); measurements are saved to `<out>.progress.json` after each one, and reused.
    `gate` (a CublasGate) at `cublas_margin` pins ATen, unbenchmarked, where it skips Triton at
    every bucket (`gated_to_cublas`); None benchmarks every site.
    """
    from tqdm import tqdm

    from kernel_select.lut import save_lut

    if benchmark is None:
        from kernel_select.offline.serving.pretune_gpu import benchmark_problem as benchmark
    out = Path(out)
    journal = out.with_name(out.name + ".progress.json")
    done: dict[str, Timings] = json.loads(journal.read_text()) if journal.exists() else {}
    plan = [(site, site.buckets(points)) for site in sites]
    rows, summary = [], []
    with tqdm(total=sum(len(b) for _, b in plan), desc="pretune", unit="bucket", disable=not progress) as bar:
        for site, buckets in plan:
            gated = gated_to_cublas(site, buckets, model, gate, cublas_margin)
            if gated is not None:
                rows.append(gated_row(site, gated, device))
                summary.append({"problem": str(site.problem), "layout": site.layout, "dynamic": site.dynamic,
                                "buckets": list(buckets), "pin": ATEN, "gated": gated.describe()})
                bar.update(len(buckets))
                continue
            configs = candidates(site, buckets, k, model, device)
            per_bucket: dict[int, Timings] = {}
            try:
                for value in buckets:
                    # "nn" adds nothing to the key, so progress files written before layouts stay valid
                    layout = "" if site.layout == "nn" else f"|{site.layout}"
                    key = f"{site.at(value)}|{','.join(c.short() for c in configs)}{layout}"
                    if key not in done:
                        done[key] = benchmark(site.at(value), configs, device, site.layout)
                        journal.write_text(json.dumps(done, indent=1))
                    per_bucket[value] = done[key]
                    bar.update()
            except NotAutotunedError as exc:
                # Inductor lowers this GEMM without autotuning (a tiny float32 GEMV of a rotary
                # embedding, say): there is no choice to pin, and serving will not autotune it either.
                log.warning("pretune: %s %s left out of the LUT: %s", site.problem, site.layout, exc)
                summary.append({"problem": str(site.problem), "layout": site.layout, "skipped": str(exc)})
                bar.update(len(buckets) - len(per_bucket))
                continue
            # One choice over all buckets, whether the dynamic size is M or K (a k-range entry).
            label, geomean, ratios = choose(per_bucket)
            rows.append(pinned_rows(site, label, configs, geomean, ratios, device))
            summary.append({"problem": str(site.problem), "layout": site.layout, "dynamic": site.dynamic,
                            "buckets": sorted(per_bucket), "pin": label, "geomean_ratio": round(geomean, 4),
                            "worst_ratio": round(max(ratios.values()), 4)})
    if not rows and sites:
        raise KernelSelectError(f"pretune: Inductor autotuned none of the {len(sites)} GEMMs "
                                "(is max-autotune on?); no LUT written")
    lut = lut_from_rows(rows, source="<pretune>")
    save_lut(lut, out)
    return {"out": str(out), "entries": lut.num_entries, "sites": summary}
