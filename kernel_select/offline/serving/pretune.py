"""`kernel-select pretune`: benchmark a model's GEMMs once, offline, per length bucket, and write a
LUT of pinned entries, so that serving (one graph per bucket, kernel_select.inductor.bucketed)
benchmarks nothing and runs each bucket's best kernel.

    kernel-select pretune --network mypkg.serving:factory --backward --out luts/serving.json

Steps, each its own function so all but the benchmark run (and are tested) on the CPU:
1. discover (discovery.py): the GEMMs Inductor lowers for the model, from its compiled graph
   (epilogues, operand layouts, which of M or K follows the length and over which range), or
   from an eager run or a shapes file;
2. candidates: per GEMM, the union over the measured lengths of the model's top-k, so every
   length times the same set; where the cuBLAS decision skips Triton at every length (the
   handler's decision, margin, clauses and the GEMM's epilogue included), ATen is pinned without
   a benchmark: Inductor's benchmark over-times cuBLAS where the clauses apply, so timing would
   pin a Triton config the handler itself would not offer;
3. benchmark (GPU): per length, Inductor's own autotuner times the candidates and ATen, caches
   off, with the dynamic size compiled dynamic as served (`pretune_gpu`); a GEMM Inductor lowers
   without autotuning (nothing timed) is left out of the LUT with a warning, and a run where
   that is every GEMM is an error. ATen's time is charged the launch of a pointwise epilogue it
   leaves unfused (kernel_select.model.cublas.epilogue_charge_ms), as the handler's decision is;
4. buckets (crossovers.py): the GEMMs that follow one length share its buckets, since serving
   compiles a graph per bucket: `points` log-spaced lengths are timed, split into the fewest
   runs in which every GEMM has one choice within `tolerance` of its best, the middle of every
   gap between runs is timed and the lengths split again (`refine` times), and each edge lies
   in the middle of what remains of its gap: where a best choice changes, as measured;
5. choose: per GEMM and bucket, the choice within tolerance at every length of the bucket with
   the smallest geometric mean of time / best time;
6. write: per GEMM one pinned entry per bucket (adjacent buckets with the same pin as one
   entry), with an m range or a k range over the dynamic size, the GEMM's operand layout and a
   note with the measured figures.

Every entry names its layout, "nn" too: an entry without one serves every layout, and one step's
GEMMs may share (m, n, k) apart from the layout (nn.Linear(3420 -> 1280): the input gradient
L x 3420 x 1280 "nn" and the weight gradient 1280 x 3420 x L "tn" meet at L = 1280), so a
layout-less "nn" entry would overlap them and the LUT would be refused. The pin was measured in
its layout only, too, so it claims no other.

Measurements are kept in `<out>.progress.json` as they arrive, each time replaced atomically (a
kill or a full disk leaves the previous measurements), so an interrupted run resumes.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kernel_select.buckets import edges_of_ranges
from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.atomic_write import write_atomic
from kernel_select.errors import KernelSelectError
from kernel_select.lut import ATEN, BatchedLUTEntry, lut_from_rows, LUTEntry, LUTRow, SizeRange
from kernel_select.model.cublas import epilogue_charge_ms
from kernel_select.offline.serving import crossovers
from kernel_select.offline.serving.crossovers import DEFAULT_REFINE, DEFAULT_TOLERANCE, Measured, Timings
from kernel_select.offline.serving.discovery import Site
from kernel_select.offline.serving.pretune_gpu import NotAutotunedError, benchmark_problem
from kernel_select.offline.serving.progress import load_progress, progress_path
from kernel_select.problem import Problem, spread_ms
from kernel_select.decision import select

log = logging.getLogger(__name__)

#: (problem, candidates, device, operand layout, dynamic=the size compiled dynamic) -> timings;
#: raises NotAutotunedError for a GEMM Inductor does not autotune.
Benchmark = Callable[..., Timings]


# -- candidates and the cuBLAS decision (pure) ---------------------------------------------------------

def candidates(site: Site, values: Sequence[int], k: int, model: Any,
               device: DeviceSpec) -> list[GemmConfig]:
    """The union over `values` of the dynamic size of the model's top-k, best-first per value."""
    union: dict[GemmConfig, None] = {}
    for value in values:
        for choice in select(site.at(value), model=model, gemm_topk=k).choices:
            union.setdefault(choice.config, None)
    return list(union)


def gated_to_cublas(site: Site, values: Sequence[int], model: Any, gate: Any,
                    margin: float | None) -> Any:
    """The gate's decision at the value where cuBLAS is least favoured, when the gate skips Triton
    at every one of `values` for the site's epilogue (the handler would offer ATen alone); else None."""
    if gate is None or margin is None:
        return None
    decisions = []
    for value in values:
        decision = select(site.at(value), model=model, gemm_topk=1, gate=gate, cublas_margin=margin,
                          epilogue=site.served_epilogue()).cublas
        if decision is None or not decision.prefers_cublas:
            return None
        decisions.append(decision)
    return max(decisions, key=lambda d: d.predicted_ratio)


def charged(timings: Timings, site: Site) -> Timings:
    """`timings` with ATen's charged the launch of the pointwise kernel it leaves unfused, where
    the site's epilogue has one (a Triton template fuses it)."""
    aten = timings.get(ATEN)
    if aten is None or not site.served_epilogue().separate_pointwise or not math.isfinite(aten):
        return timings
    return {**timings, ATEN: aten + epilogue_charge_ms(aten)}


def _ratios(per_value: dict[int, Timings], label: str) -> tuple[float, dict[int, float]]:
    ratios = {value: timings[label] / crossovers.best_ms(timings) for value, timings in per_value.items()}
    return math.exp(sum(math.log(r) for r in ratios.values()) / len(ratios)), ratios


# -- buckets (pure) ----------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BucketPin:
    """One bucket of lengths (inclusive) and what a site pins there, with the measured figures."""

    low: int
    high: int
    label: str
    geomean: float
    ratios: dict[int, float]  # measured length -> time / that length's best


def bucket_pins(measured: Measured, runs: Sequence[tuple[int, ...]], low: int, high: int,
                tolerance: float) -> list[BucketPin]:
    """A site's pin per bucket: the buckets are `runs` of measured lengths (from `segment`) whose
    edges lie in the middle of each gap, low..high overall; adjacent buckets with one pin merge."""
    edges = [crossovers.edge(a, b) for a, b in crossovers.gaps(runs)]
    starts, ends = [low, *edges], [edge - 1 for edge in edges] + [high]
    pins: list[BucketPin] = []
    for run, start, end in zip(runs, starts, ends):
        fits = crossovers.fitting(measured, list(run), tolerance) or crossovers.fitting(measured, list(run),
                                                                                         math.inf)
        if not fits:
            raise KernelSelectError(f"no choice ran at every length of {start}..{end}; nothing to pin")
        per_length = {length: measured[length] for length in run}
        if pins and pins[-1].label == fits[0]:
            previous = pins.pop()
            per_length = {**{length: measured[length] for length in previous.ratios}, **per_length}
            start = previous.low
        pins.append(BucketPin(start, end, fits[0], *_ratios(per_length, fits[0])))
    return pins


# -- the LUT rows (pure) -------------------------------------------------------------------------------

def bucket_row(site: Site, pin: BucketPin, configs: Sequence[GemmConfig], device: DeviceSpec,
               bounds: tuple[int, int] | None = None) -> LUTRow:
    """The pinned LUT row of `site` over one bucket: the dynamic size's range (`bounds`, in its own
    units; default the site's whole range), in the site's operand layout."""
    value: GemmConfig | str = (ATEN if pin.label == ATEN
                               else next(c for c in configs if c.short() == pin.label))
    worst = max(pin.ratios.values())
    note = (f"kernel-select pretune: {pin.label}, {pin.geomean:.3f}x the per-length best on average, "
            f"{worst:.3f}x at worst, over {'/'.join(str(v) for v in sorted(pin.ratios))} "
            f"({len(configs)} Triton + aten timed)")
    return _row(site, value, note, device, bounds)


def gated_row(site: Site, decision: Any, device: DeviceSpec) -> LUTRow:
    """The ATen pin of a site the cuBLAS gate sends to cuBLAS (`gated_to_cublas`), not benchmarked."""
    return _row(site, ATEN, f"kernel-select pretune: aten, not benchmarked: {decision.describe()}", device)


def _row(site: Site, pin: GemmConfig | str, note: str, device: DeviceSpec,
         bounds: tuple[int, int] | None = None) -> LUTRow:
    problem = site.problem
    low, high = bounds or (site.low, site.high)
    m: int | SizeRange = SizeRange(min=low, max=high) if site.dynamic == "m" else problem.m
    k: int | SizeRange = SizeRange(min=low, max=high) if site.dynamic == "k" else problem.k
    fields: dict[str, Any] = {"m": m, "n": problem.n, "k": k, "layout": site.layout, "pin": pin, "note": note}
    if problem.op in ("bmm", "baddbmm"):
        entry: LUTEntry = BatchedLUTEntry(batch=problem.batch, **fields)
    else:
        entry = LUTEntry(**fields)
    return LUTRow(device.key, problem.op, problem.precision, entry)  # a TF32 GEMM's pin: the "tf32" list


def check_sites(sites: Sequence[Site], device: DeviceSpec) -> None:
    """Refuse, before anything is measured, a site whose LUT entry the table would reject (a
    dynamic size over MAX_DIM, say): the benchmark would run for it and the write then fail.

    Raises:
        KernelSelectError: one line naming the site and the field.
    """
    from pydantic import ValidationError

    for site in sites:
        try:
            _row(site, ATEN, "", device)
        except ValidationError as exc:
            error = exc.errors()[0]
            field = ".".join(str(part) for part in error["loc"] if part not in ("exact", "range"))
            raise KernelSelectError(f"pretune: {site.problem} {site.layout} (dynamic {site.dynamic}: "
                                    f"{site.low}..{site.high}) cannot be a LUT entry: {field}: "
                                    f"{error['msg']}; nothing was measured") from None


# -- the run ---------------------------------------------------------------------------------------------

def gate_settings(device: DeviceSpec) -> dict[str, Any]:
    """`pretune`'s gate and margin as the handler would use them: the shipped gate for `device`
    and the `cublas_margin` knob (its environment variable, else the default)."""
    from kernel_select import knobs, options, runtime

    margin = options.parse_cublas_margin(knobs.gemm_cublas_margin,
                                         source="kernel_select.knobs.gemm_cublas_margin")
    return {"gate": runtime.gate(device) if margin is not None else None, "cublas_margin": margin}


@dataclasses.dataclass
class _Tuned:
    """One site being timed: its candidates and, per length, its (charged) timings."""

    site: Site
    configs: list[GemmConfig]
    measured: Measured = dataclasses.field(default_factory=dict)


class _Journal:
    """Measurements by problem and candidates, saved to `<out>.progress.json` after each one."""

    def __init__(self, out: Path, benchmark: Benchmark, device: DeviceSpec, bar: Any) -> None:
        self.path = progress_path(out)
        self.done = load_progress(self.path)
        self.benchmark, self.device, self.bar = benchmark, device, bar

    def time(self, tuned: _Tuned, length: int) -> None:
        site = tuned.site
        value = length * site.per_length if site.dynamic else length
        problem = site.at(value)
        key = f"{problem}|{','.join(c.short() for c in tuned.configs)}"
        if key not in self.done:
            self.done[key] = self.benchmark(problem, tuned.configs, self.device, site.layout,
                                            dynamic=site.dynamic)
            # Atomic: a kill or a full disk mid-write leaves the previous measurements, not a torn file.
            write_atomic(self.path, json.dumps(self.done, indent=1))
        tuned.measured[length] = charged(self.done[key], site)
        self.bar.update()


def pretune(sites: Sequence[Site], *, out: str | Path, device: DeviceSpec, model: Any, k: int = 4,
            points: int = 5, benchmark: Benchmark | None = None, progress: bool = True,
            gate: Any = None, cublas_margin: float | None = None, tolerance: float = DEFAULT_TOLERANCE,
            refine: int = DEFAULT_REFINE) -> dict[str, Any]:
    """Benchmark every site per length, choose buckets and pins, write the pinned LUT to `out`, and
    return a summary (the module doc gives the steps).

    `benchmark` times a problem's candidates and ATen (default: `pretune_gpu.benchmark_problem`,
    on the GPU); measurements are saved to `<out>.progress.json` after each one, and reused.
    `gate` (a CublasGate) at `cublas_margin` pins ATen, unbenchmarked, where it skips Triton at
    every length (`gated_to_cublas`); None benchmarks every site. `points`: lengths timed per
    length range before refining; `tolerance` and `refine`: the buckets' (crossovers.py).
    """
    from tqdm import tqdm

    from kernel_select.lut import save_lut

    benchmark = benchmark or benchmark_problem
    check_sites(sites, device)
    rows: list[LUTRow] = []
    summary: list[dict[str, Any]] = []
    groups: dict[tuple[int, int] | Problem, list[_Tuned]] = {}
    for site in sites:
        grid = _grid(site, points)
        values = [length * site.per_length for length in grid] if site.dynamic else list(grid)
        gated = gated_to_cublas(site, values, model, gate, cublas_margin)
        if gated is not None:
            rows.append(gated_row(site, gated, device))
            summary.append(_site_summary(site) | {"pin": ATEN, "gated": gated.describe()})
            continue
        key = site.lengths() if site.dynamic else site.at(site.problem.m)
        groups.setdefault(key, []).append(_Tuned(site, candidates(site, values, k, model, device)))
    serve_ranges = []
    total = sum(len(_grid(t.site, points)) for group in groups.values() for t in group)
    with tqdm(total=total, desc="pretune", unit="GEMM x length", disable=not progress) as bar:
        journal = _Journal(Path(out), benchmark, device, bar)
        for group in groups.values():
            tuned, runs = _tune_group(group, journal, points, tolerance, refine, summary)
            if not tuned:
                continue
            first = tuned[0].site
            low, high = first.lengths() if first.dynamic else (first.problem.m, first.problem.m)
            if first.dynamic:
                serve_ranges.extend(_length_buckets(runs, low, high))
            for item in tuned:
                pins = bucket_pins(item.measured, runs, low, high, tolerance)
                rows.extend(bucket_row(item.site, pin, item.configs, device, _bounds(item.site, pin))
                            for pin in pins)
                summary.append(_site_summary(item.site) | _pins_summary(pins))
    if not rows and sites:
        raise KernelSelectError(f"pretune: Inductor autotuned none of the {len(sites)} GEMMs "
                                "(is max-autotune on?); no LUT written")
    lut = lut_from_rows(rows, source="<pretune>")
    save_lut(lut, out)
    return {"out": str(out), "entries": lut.num_entries, "sites": summary,
            "gemm_dynamic_buckets": list(edges_of_ranges(serve_ranges))}


def _grid(site: Site, points: int) -> tuple[int, ...]:
    """The lengths timed first: `points` log-spaced over the site's length range (its size if static)."""
    return spread_ms(*site.lengths(), points) if site.dynamic else (site.problem.m,)


def _tune_group(group: list[_Tuned], journal: _Journal, points: int, tolerance: float, refine: int,
                summary: list[dict[str, Any]]) -> tuple[list[_Tuned], list[tuple[int, ...]]]:
    """Time the sites of one length range (a static site is a group of its own) on the grid, then
    the middle of every gap between buckets `refine` times; the sites that could be timed and the
    runs of lengths the buckets are made of."""
    tuned = list(group)
    lengths = list(_grid(group[0].site, points))
    tuned = _time_all(tuned, lengths, journal, summary)
    runs = crossovers.segment([t.measured for t in tuned], lengths, tolerance)
    for _ in range(refine if group[0].site.dynamic else 0):
        middles = [m for a, b in crossovers.gaps(runs) if (m := crossovers.middle(a, b)) is not None]
        if not middles or not tuned:
            break
        journal.bar.total += len(middles) * len(tuned)
        journal.bar.refresh()
        tuned = _time_all(tuned, middles, journal, summary)
        lengths = sorted({*lengths, *middles})
        runs = crossovers.segment([t.measured for t in tuned], lengths, tolerance)
    return tuned, runs


def _time_all(tuned: list[_Tuned], lengths: Sequence[int], journal: _Journal,
              summary: list[dict[str, Any]]) -> list[_Tuned]:
    """Time every site at every length; a site Inductor does not autotune is left out (module doc)."""
    kept = []
    for item in tuned:
        try:
            for length in lengths:
                journal.time(item, length)
        except NotAutotunedError as exc:
            # A tiny float32 GEMV of a rotary embedding, say: nothing to pin, and serving will not
            # autotune it either.
            log.warning("pretune: %s %s left out of the LUT: %s", item.site.problem, item.site.layout, exc)
            summary.append({"problem": str(item.site.problem), "layout": item.site.layout,
                            "skipped": str(exc)})
            continue
        kept.append(item)
    return kept


def _length_buckets(runs: Sequence[tuple[int, ...]], low: int, high: int) -> Iterator[tuple[int, int]]:
    edges = [crossovers.edge(a, b) for a, b in crossovers.gaps(runs)]
    yield from zip([low, *edges], [edge - 1 for edge in edges] + [high])


def _bounds(site: Site, pin: BucketPin) -> tuple[int, int] | None:
    """A bucket of lengths as the site's dynamic size: its whole range at either end, and in
    between every value from the bucket's first length on (M = 2 x length has only even values,
    yet the entries stay contiguous)."""
    if not site.dynamic:
        return None
    low_len, high_len = site.lengths()
    low = site.low if pin.low <= low_len else pin.low * site.per_length
    high = site.high if pin.high >= high_len else (pin.high + 1) * site.per_length - 1
    return low, high


def _site_summary(site: Site) -> dict[str, Any]:
    return {"problem": str(site.problem), "layout": site.layout, "dynamic": site.dynamic,
            "range": [site.low, site.high] if site.dynamic else None}


def _pins_summary(pins: Sequence[BucketPin]) -> dict[str, Any]:
    buckets = [{"lengths": [pin.low, pin.high], "pin": pin.label, "geomean_ratio": round(pin.geomean, 4),
                "worst_ratio": round(max(pin.ratios.values()), 4), "measured": sorted(pin.ratios)}
               for pin in pins]
    return {"pin": pins[0].label if len(pins) == 1 else "per bucket", "buckets": buckets,
            "worst_ratio": max(b["worst_ratio"] for b in buckets)}
