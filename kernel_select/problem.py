"""The GEMM problem: sizes, dtype and operation, validated once at the edge."""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from kernel_select.errors import ProblemError
from kernel_select.layouts import DEFAULT_LAYOUT, check_layout

DTypeName = Literal["float16", "bfloat16", "float32"]
OpName = Literal["mm", "addmm", "bmm", "baddbmm"]

#: Bytes per element for every dtype we model.
DTYPE_BYTES: dict[str, int] = {"float16": 2, "bfloat16": 2, "float32": 4}
SUPPORTED_DTYPES: tuple[str, ...] = tuple(DTYPE_BYTES)
SUPPORTED_OPS: tuple[str, ...] = ("mm", "addmm", "bmm", "baddbmm")
#: The precision of a float32 GEMM that runs with TF32 (`Problem.tf32`), where a dtype names a kind of
#: problem: a LUT's dtype key, a model card's stratum, an evaluation stratum. Such a GEMM runs on
#: tensor cores, about 7x the rate of float32 on CUDA cores, and ranks its configs differently.
TF32 = "tf32"
#: Every precision a problem can have: the dtypes, and float32 with TF32.
PRECISIONS: tuple[str, ...] = (*SUPPORTED_DTYPES, TF32)


def precision_dtype(precision: str) -> str:
    """The dtype of the operands of a problem of `precision` (`Problem.precision`): float32 for TF32."""
    return "float32" if precision == TF32 else precision

# Aliases users type on the CLI or get from torch (`str(torch.bfloat16)`).
_DTYPE_ALIASES = {
    "float16": "float16", "fp16": "float16", "half": "float16", "f16": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float32": "float32", "fp32": "float32", "float": "float32", "f32": "float32",
}


def dtype_name(dtype: object) -> str:
    """Normalize a dtype given as a string ("bf16", "torch.bfloat16") or a torch.dtype.

    Raises ProblemError naming the supported dtypes for anything else.
    """
    text = str(dtype).strip().lower()
    if text.startswith("torch."):
        text = text[len("torch."):]
    try:
        return _DTYPE_ALIASES[text]
    except KeyError:
        raise ProblemError(
            f"dtype: unsupported dtype {dtype!r}; use one of {', '.join(SUPPORTED_DTYPES)}"
        ) from None


def gemm_flops(batch, m, n, k):
    """Floating-point operations of a GEMM (a multiply and an add per term), `batch` of them; any of
    the arguments may be numpy arrays."""
    return 2.0 * batch * m * n * k


def _positive_int(field: str, value: object) -> int:
    # bool is an int subclass; True as a matrix size is always a bug.
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            as_int = int(value)  # type: ignore[call-overload]
        except (TypeError, ValueError):
            raise ProblemError(f"{field}: expected a positive integer, got {value!r}") from None
        if as_int != value:
            raise ProblemError(f"{field}: expected a positive integer, got {value!r}")
        value = as_int
    if value <= 0:
        raise ProblemError(f"{field}: expected a positive integer, got {value}")
    return value


@dataclass(frozen=True)
class Problem:
    """One GEMM: C[batch, m, n] = A[batch, m, k] @ B[batch, k, n] in `dtype`.

    `op` says which Inductor lowering produced it (mm, addmm, bmm, baddbmm); batch > 1 only
    makes sense for bmm/baddbmm. `layout` is how A and B lie in memory (kernel_select.layouts:
    "nt" for x @ W.t()). The model's features do not read it yet; a LUT entry with a layout
    matches only its layout, and `topk="auto"` reads it (a layout the model was not trained on gets the cap).
    `tf32` says that a float32 GEMM's kernels multiply in TF32 on tensor cores (what Inductor's
    ALLOW_TF32 does; kernel_select.tf32 says when Inductor sets it): another problem than the same
    sizes in float32, with its own id, strata, LUT key and features (`precision`).
    """

    m: int
    n: int
    k: int
    dtype: str = "bfloat16"
    batch: int = 1
    op: str = "mm"
    layout: str = DEFAULT_LAYOUT
    tf32: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "m", _positive_int("m", self.m))
        object.__setattr__(self, "n", _positive_int("n", self.n))
        object.__setattr__(self, "k", _positive_int("k", self.k))
        object.__setattr__(self, "batch", _positive_int("batch", self.batch))
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        if self.op not in SUPPORTED_OPS:
            raise ProblemError(f"op: unsupported op {self.op!r}; use one of {', '.join(SUPPORTED_OPS)}")
        if self.batch != 1 and self.op in ("mm", "addmm"):
            raise ProblemError(f"batch: op {self.op!r} has no batch dimension; use bmm or baddbmm")
        check_layout(self.layout)
        if not isinstance(self.tf32, bool):  # "no" or 0 as a flag is a bug, not False
            raise ProblemError(f"tf32: expected True or False, got {self.tf32!r}")
        if self.tf32 and self.dtype != "float32":
            raise ProblemError(f"tf32: TF32 applies to float32 GEMMs only, got dtype {self.dtype}; "
                               "drop tf32 or use float32")

    @property
    def precision(self) -> str:
        """The dtype, or TF32 ("tf32") for a float32 GEMM that runs with TF32."""
        return TF32 if self.tf32 else self.dtype

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def flops(self) -> float:
        return gemm_flops(self.batch, self.m, self.n, self.k)

    @property
    def min_bytes(self) -> float:
        """Bytes that must cross device memory at least once: read A and B, write C."""
        return float(self.batch * (self.m * self.k + self.k * self.n + self.m * self.n) * self.dtype_bytes)

    def __str__(self) -> str:
        batch = f"{self.batch}x" if self.batch != 1 else ""
        layout = f" {self.layout}" if self.layout != DEFAULT_LAYOUT else ""
        tf32 = f" {TF32}" if self.tf32 else ""
        return f"{self.op} {batch}{self.m}x{self.n}x{self.k} {self.dtype}{layout}{tf32}"


#: How many Ms represent a range when no buckets are given: enough to see a tile-size change across
#: a 16x range (one point per factor of two), few enough to keep selection cheap.
SPREAD_POINTS = 5
#: The default range around a hinted M when nothing says which Ms the program will see.
DEFAULT_SPREAD_FACTOR = 4


def spread_ms(low: int, high: int, points: int = SPREAD_POINTS) -> tuple[int, ...]:
    """`points` log-spaced Ms from `low` to `high` inclusive (fewer if the range is narrow).

    Raises:
        ProblemError: if low < 1 or low > high.
    """
    if not (1 <= low <= high):
        raise ProblemError(f"m range: expected 1 <= low <= high, got {low}..{high}")
    if low == high or points < 2:
        return (low,)
    ratio = (high / low) ** (1 / (points - 1))
    return tuple(sorted({low, high, *(int(round(low * ratio**i)) for i in range(1, points - 1))}))


def default_spread(hint: int) -> tuple[int, ...]:
    """Ms around a hint when nothing else is known: hint/4 .. hint*4, log-spaced."""
    return spread_ms(max(1, hint // DEFAULT_SPREAD_FACTOR), hint * DEFAULT_SPREAD_FACTOR)


def m_values_to_rank(hint: int, entry_range: tuple[int, int] | None, knob: tuple[int, ...] | None,
                     declared: tuple[int, int] | None) -> tuple[tuple[int, ...], str]:
    """(the Ms to rank a dynamic M for, where they came from), from the first of: the m range of the
    LUT entry serving the hint; the declared range where it is a bucket inside the span of the
    `gemm_dynamic_m` knob (a graph of kernel_select.inductor.bucketed serves that bucket alone); the
    knob; the declared range; hint/4 .. hint*4."""
    if entry_range is not None and entry_range[0] < entry_range[1]:
        return spread_ms(*entry_range), "lut m range"
    if knob and declared is not None and _narrower(declared, (knob[0], knob[-1])):
        return spread_ms(*declared), "declared range (a bucket of gemm_dynamic_m)"
    if knob:
        return knob, "gemm_dynamic_m"
    if declared is not None and declared[0] < declared[1]:
        return spread_ms(max(declared[0], 1), declared[1]), "declared range"
    return default_spread(hint), "hint/4..hint*4"


def _narrower(inner: tuple[int, int], outer: tuple[int, int]) -> bool:
    """Whether `inner` is a range of at least two sizes inside `outer` and not all of it."""
    return inner[0] < inner[1] and outer[0] <= inner[0] and inner[1] <= outer[1] and inner != outer


def checked_m_values(m_values: Sequence[int] | None, problem: Problem) -> tuple[int, ...]:
    """The values of M to rank `problem` for, sorted and distinct (() for None).

    Raises:
        ProblemError: for an empty list, or a value that is not a positive integer.
    """
    if m_values is None:
        return ()
    values = tuple(m_values)
    if not values or any(isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1 for m in values):
        raise ProblemError(f"m_values: expected positive integers (values of M to rank for {problem}), "
                           f"got {m_values!r}")
    return tuple(sorted({int(m) for m in values}))
