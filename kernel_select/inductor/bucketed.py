"""One compiled graph per length bucket, so that a LUT pinning each bucket its own kernel is served
with each bucket's pin and nothing is benchmarked:

    import kernel_select.inductor as ks_inductor

    ks_inductor.install(kernel_lut_path="luts/serving.json")      # from `kernel-select pretune`
    compiled = torch.compile(model, options=ks_inductor.gemm_autotune_options(shape_padding=False))
    serve = ks_inductor.bucketed(compiled, {0: 0})                # argument 0, dimension 0: the length
    serve(x)

Every call marks the length dimension of the named arguments dynamic with its bucket's bounds
(`mark_bucket`: `torch._dynamo.mark_dynamic(t, dim, min=, max=)`). Dynamo compiles one graph per
bucket and guards it with `low <= length <= high`, so its guard check is the dispatcher: a length
runs the graph of its bucket, compiled on the bucket's first call. In that graph the choices handler
sees a symbolic M (or K) declared over the bucket, and the LUT entry at its hint is the bucket's.
A graph that spans several pinned entries still gets one kernel per GEMM, with a warning
(`Selection.pin_gap`).

Why graphs, not Inductor's `multi_kernel_hints` (torch 2.11): those variants exist only inside a
`MultiTemplateBuffer`, which Inductor makes only for a list of two choices or more, and it then
benchmarks each hint's choices (`MultiTemplateBuffer.choice_timings(hint_override=...)`) before it
dispatches, only among Triton templates, on the nearest hint in log2 distance rather than on the
LUT's ranges. A one-choice list (a pin) returns its choice at once, with no variants at all. So
hints cannot serve per-bucket pins without benchmarking; graphs can.

A bucket bounded by two edges is compiled at its geometric middle (`hint_override`): a pin does not
care, and where Inductor autotunes (no pin) it benchmarks a length representative of the bucket
rather than whichever came first. The first and last buckets take the first length they see.

Edges (kernel_select.buckets): the `gemm_dynamic_buckets` knob; else the edges of the LUT's range
entries for the GPU (`KernelLUT.bucket_edges`), which are lengths where the length is M or K
itself; else none, one graph for every length. Each bucket is a graph: Dynamo keeps at most
`torch._dynamo.config.recompile_limit` of them per function (one warning when there are more).

A strict range fails where tracing guards the length inside it: torch 2.11's shape padding guards
`K > M` for a dynamic M (docs/guide.md, "Serving"), so compile with `shape_padding=False`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from typing import Any

from kernel_select import runtime, warn
from kernel_select.buckets import Bucket, bucket_of, buckets, check_edges
from kernel_select.device import get_device
from kernel_select.errors import KernelSelectError, first_line
from kernel_select.inductor.choices import KernelSelectChoices
from kernel_select.inductor.settings import Settings, resolve_settings

log = logging.getLogger(__name__)

#: The upper bound Dynamo is given for the last bucket: its ranges need both ends.
UNBOUNDED = sys.maxsize - 1


def mark_bucket(tensor: Any, dim: int, edges: tuple[int, ...], *,
                tune_at_middle: bool = True) -> Bucket | None:
    """Mark `tensor`'s dimension `dim` dynamic over its bucket of `edges`; the bucket, or None for
    a size of 0 or 1 (left unmarked: Dynamo specializes it). A bucket of one length is left
    unmarked too (static), as Dynamo refuses a range of one value."""
    import torch._dynamo

    size = int(tensor.shape[dim])
    bucket = bucket_of(edges, size)
    if bucket is None or bucket.low == bucket.high:
        return bucket
    _forget_range(tensor, dim)
    hint = bucket.middle() if tune_at_middle and bucket.bounded else None
    high = bucket.high if bucket.high is not None else UNBOUNDED
    torch._dynamo.mark_dynamic(tensor, dim, min=bucket.low, max=high, hint_override=hint)
    return bucket


def _forget_range(tensor: Any, dim: int) -> None:
    # mark_dynamic adds to a set of ranges and Dynamo takes an arbitrary one of a dimension's:
    # a tensor marked before (by the caller, or in another bucket) keeps only the new range.
    ranges = getattr(tensor, "_dynamo_dynamic_range", None)
    if isinstance(ranges, set):
        ranges.difference_update({r for r in ranges if getattr(r, "dim", None) == dim})


class Bucketed:
    """`fn` called with the length dimension of some arguments marked by bucket (module doc).

    Args:
        fn: the compiled function or module.
        dims: argument -> the dimension that is the length; an int names a positional argument,
            a str a keyword argument.
        edges: where buckets begin (kernel_select.buckets); None: the knob, else the LUT's.
        tune_at_middle: compile a bounded bucket at its geometric middle (`mark_bucket`).
    """

    def __init__(self, fn: Callable[..., Any], dims: Mapping[int | str, int], *,
                 edges: tuple[int, ...] | None = None, tune_at_middle: bool = True) -> None:
        if not dims:
            raise KernelSelectError("bucketed: name at least one argument and its length dimension, "
                                    "e.g. bucketed(compiled, {0: 0})")
        self.fn, self.dims, self.tune_at_middle = fn, dict(dims), tune_at_middle
        self._edges = check_edges(edges, source="bucketed(edges=...)") if edges is not None else None
        self.seen: set[Bucket] = set()

    @property
    def edges(self) -> tuple[int, ...]:
        """The edges in use: given, or resolved on first use (module doc)."""
        if self._edges is None:
            self._edges = serving_edges()
            _check_recompile_limit(len(buckets(self._edges)))
        return self._edges

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        edges = self.edges
        for key, dim in self.dims.items():
            tensor = args[key] if isinstance(key, int) else kwargs[key]
            bucket = mark_bucket(tensor, dim, edges, tune_at_middle=self.tune_at_middle)
            if bucket is not None and bucket not in self.seen:
                self.seen.add(bucket)
                log.info("kernel_select: bucketed: first length of bucket %s (%s)", bucket,
                         f"compiled at {bucket.middle()}" if self.tune_at_middle and bucket.bounded
                         else "compiled at the length served")
        try:
            return self.fn(*args, **kwargs)
        except Exception as exc:
            if _range_violated(exc):
                raise KernelSelectError(
                    f"bucketed: tracing guards the length inside one of the buckets {list(buckets(edges))} "
                    f"({first_line(exc)}); compile with shape_padding=False (torch 2.11's shape padding "
                    "guards K > M), or add the guarded length to the edges (gemm_dynamic_buckets)") from exc
            raise

    def __repr__(self) -> str:
        return f"Bucketed({self.fn!r}, dims={self.dims}, edges={self._edges})"


def bucketed(fn: Callable[..., Any], dims: Mapping[int | str, int], *,
             edges: tuple[int, ...] | None = None, tune_at_middle: bool = True) -> Bucketed:
    """`fn` served with one compiled graph per length bucket (see `Bucketed` and the module doc)."""
    return Bucketed(fn, dims, edges=edges, tune_at_middle=tune_at_middle)


def serving_edges(settings: Settings | None = None) -> tuple[int, ...]:
    """The bucket edges in effect: the `gemm_dynamic_buckets` knob, else the LUT's for the GPU
    (`gemm_device`, else the current one), else () (one graph). A LUT that does not load gives ()
    with the one warning `runtime.load_lut` logs."""
    settings = settings or current_settings()
    if settings.gemm_dynamic_buckets is not None:
        return settings.gemm_dynamic_buckets
    if not settings.kernel_lut_path:
        return ()
    device = get_device(settings.gemm_device) if settings.gemm_device else runtime.current_device()
    if device is None:
        warn.warn_once(("bucketed", "no device"), log, "kernel_select: bucketed: no GPU to read the LUT's "
                       "bucket edges for; one graph serves every length (set gemm_device or "
                       "gemm_dynamic_buckets)")
        return ()
    return runtime.load_lut(settings.kernel_lut_path).bucket_edges(device)


def current_settings() -> Settings:
    """The knobs of the handler installed in this thread (kernel_select.inductor.install), else the
    knobs and torch options alone."""
    from torch._inductor.virtualized import V

    handler = V.choices
    return handler.settings() if isinstance(handler, KernelSelectChoices) else resolve_settings()


def _check_recompile_limit(graphs: int) -> None:
    try:
        import torch._dynamo.config as dynamo_config

        limit = int(getattr(dynamo_config, "recompile_limit", None)
                    or getattr(dynamo_config, "cache_size_limit", 8))
    except Exception:  # noqa: BLE001 -- the limit is advice here, never a failure
        return
    if graphs > limit:
        warn.warn_once(("bucketed", "recompile limit", graphs, limit), log,
                       "kernel_select: bucketed: %d buckets need %d graphs, more than Dynamo keeps per "
                       "function (torch._dynamo.config.recompile_limit = %d); raise the limit or use "
                       "fewer edges", graphs, graphs, limit)


def _range_violated(exc: BaseException) -> bool:
    """Whether `exc` (or what it wraps) is Dynamo refusing a marked range: a guard inside it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "ConstraintViolationError" or "Constraints violated" in str(current):
            return True
        current = current.__cause__ or current.__context__
    return False
