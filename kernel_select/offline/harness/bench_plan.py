"""What the benchmark harness will compile and run: pure Python, no GPU needed.

A *compile key* is everything that makes one Triton binary of a benchmark kernel distinct:
the kernel (`mm_kernel` for mm and addmm, `bmm_kernel` for bmm and baddbmm), the dtype, the
operand layout, the config, and the specializations Inductor's literal shapes and strides would
imply (EVEN_K, ALLOW_TF32, the power-of-two divisibility of N and K, and of M when A is read
transposed, and the two offset hints). Problems that share a key share a binary, whatever their
M or batch size; planning the keys up front lets the harness compile everything in parallel
before timing anything.

With `literal_sizes` a key also carries the problem's M, N and K, which the kernel then reads as
compile-time constants, as Inductor's template has them (`M = 8` in its source): one binary per shape
and config, no sharing. That is what Inductor runs; the shared binaries differ from it for some
configs, mostly where the GEMM is memory-bound (mm_kernel.py says how much).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kernel_select.configs import GemmConfig
from kernel_select.device import DeviceSpec
from kernel_select.errors import ProblemError
from kernel_select.layouts import a_transposed, operand_strides
from kernel_select.problem import Problem
from kernel_select.space import LARGEST_BLOCK, for_problem
from kernel_select.tf32 import MIN_M, MIN_NK, TF32_PRECISION, inductor_allow_tf32

MAX_DIV = 16  # Triton's own integer specialization stops at 16; wider never changes vector width
MAX_INT32 = 2**31 - 1
MAX_GRID_Y = 65535  # CUDA's limit on a grid's second dimension


def largest_operand(batch: int, m: int, n: int, k: int) -> int:
    """Elements of the largest of A, B and C, all batches together: past MAX_INT32 the kernels'
    int32 offsets overflow (Inductor then indexes in int64), so the harness and every plan stop there."""
    return batch * max(m * k, k * n, m * n)


def pow2_divisor(x: int, cap: int = MAX_DIV) -> int:
    """Largest power of two dividing x, capped (what an integer literal tells the compiler)."""
    return min(x & -x, cap)


#: The benchmark kernel of each op: the bias epilogue of addmm / baddbmm is not timed (the
#: config space and the main loop are those of mm / bmm; data/README.md, "Batched GEMMs").
KERNEL_OF_OP = {"mm": "mm", "addmm": "mm", "bmm": "bmm", "baddbmm": "bmm"}


@dataclass(frozen=True)
class CompileKey:
    dtype: str
    layout: str  # A_T / B_T: which operand is read through a transposed view
    config: tuple[int, int, int, int, int, int]  # GemmConfig.key
    even_k: bool
    allow_tf32: bool
    m_div: int  # 1 unless A is transposed: then M is A's row stride and its divisibility matters
    n_div: int
    k_div: int
    a_hint: bool
    b_hint: bool
    kernel: str = "mm"  # "mm" (harness.mm_kernel) or "bmm" (harness.bmm_kernel): KERNEL_OF_OP
    sizes: tuple[int, int, int] | None = None  # (M, N, K) compiled in as literals; None: runtime sizes

    @property
    def gemm_config(self) -> GemmConfig:
        return GemmConfig.from_key(self.config)


def inductor_hint(rows: int, k: int, stride_rows: int, stride_k: int, block: int) -> bool:
    """Inductor's condition for the max_contiguous / multiple_of hints on one operand's wrapped
    offsets (triton_mm.py.jinja). For A (rows = M, strides stride_am / stride_ak, block BLOCK_M):

        ((stride_am == 1 and stride_ak == M) or (stride_am == K and stride_ak == 1))
            and (M >= BLOCK_M and K > 1)

    and for B the same with N, stride_bn / stride_bk and BLOCK_N."""
    contiguous = (stride_rows == 1 and stride_k == rows) or (stride_rows == k and stride_k == 1)
    return contiguous and rows >= block and k > 1


def inductor_bmm_hint(rows: int, k: int, stride_rows: int, stride_k: int) -> bool:
    """The same hint's condition in Inductor 2.11's `triton::bmm` template (triton_bmm.py.jinja),
    which tests the strides only (no `M >= BLOCK_M and K > 1` clause, unlike triton_mm):

        (stride_am == 1 and stride_ak == M) or (stride_am == K and stride_ak == 1)

    Every layout the harness builds (contiguous batches of row-major or transposed matrices)
    meets it, so both hints are on for every bmm key; the key keeps them to say so."""
    return (stride_rows == 1 and stride_k == rows) or (stride_rows == k and stride_k == 1)


def compile_key(problem: Problem, config: GemmConfig, allow_tf32: bool | None = None, *,
                literal_sizes: bool = False) -> CompileKey:
    """The key of `problem` (in its layout) with `config`; the hints follow the strides of the
    operands the timer builds (kernel_select.layouts.operand_strides: a batched problem's
    matrices are contiguous one after another, so the strides within a batch are the same).
    ALLOW_TF32 is the problem's own (`Problem.tf32`) unless `allow_tf32` says otherwise; only
    float32 operands take it. `literal_sizes`: the key's binary has M, N and K compiled in."""
    return compile_keys_of(problem, [config], allow_tf32, literal_sizes=literal_sizes)[0]


def compile_keys_of(problem: Problem, configs: Sequence[GemmConfig],
                    allow_tf32: bool | None = None, *, literal_sizes: bool = False) -> list[CompileKey]:
    """`compile_key` of each config, what depends on the problem alone worked out once (a planner
    asks for hundreds of configs of a problem)."""
    allow_tf32 = problem.tf32 if allow_tf32 is None else allow_tf32
    layout = problem.layout
    m, n, k = problem.m, problem.n, problem.k
    (stride_am, stride_ak), (stride_bk, stride_bn) = operand_strides(m, n, k, layout)
    kernel = KERNEL_OF_OP[problem.op]
    shared = {"dtype": problem.dtype, "layout": layout, "kernel": kernel,
              "allow_tf32": allow_tf32 and problem.dtype == "float32",
              "m_div": pow2_divisor(m) if a_transposed(layout) else 1, "n_div": pow2_divisor(n),
              "k_div": pow2_divisor(k), "sizes": (m, n, k) if literal_sizes else None}
    if kernel == "bmm":  # bmm's hints do not depend on the tile
        a_hint = inductor_bmm_hint(m, k, stride_am, stride_ak)
        b_hint = inductor_bmm_hint(n, k, stride_bn, stride_bk)
    keys = []
    for config in configs:
        if kernel != "bmm":
            a_hint = inductor_hint(m, k, stride_am, stride_ak, config.block_m)
            b_hint = inductor_hint(n, k, stride_bn, stride_bk, config.block_n)
        keys.append(CompileKey(config=config.key, even_k=k % config.block_k == 0, a_hint=a_hint,
                               b_hint=b_hint, **shared))
    return keys


def check_benchmarkable(problem: Problem, torch_version: str | None = None) -> None:
    """Refuse what the benchmark kernels do not reproduce: offsets past 32 bits (the kernels
    index in int32, Inductor's INDEX_DTYPE for problems within it; beyond, Inductor compiles
    int64 indexing), batches past the grid dimension the bmm grid puts them in, and a TF32
    problem that Inductor of `torch_version` (default: the installed torch) would run without
    TF32 even where the user allows it (kernel_select.tf32): its rows would say TF32 of a GEMM
    no program runs so.

    Raises:
        ProblemError: naming the problem and the limit.
    """
    if problem.tf32 and not inductor_allow_tf32(
            problem.m, problem.n, problem.k, fp32_precision=TF32_PRECISION, torch_version=torch_version,
            force_same_precision=running_force_same_precision()):
        raise ProblemError(f"{problem}: Inductor of torch {torch_version or 'installed here'} runs this GEMM "
                           f"without TF32 even under fp32_precision='tf32' (kernel_select.tf32: from 2.13, "
                           f"M >= {MIN_M} and min(N, K) >= {MIN_NK}); plan it without tf32")
    batch = problem.batch if KERNEL_OF_OP[problem.op] == "bmm" else 1
    largest = largest_operand(batch, problem.m, problem.n, problem.k)
    if largest > MAX_INT32:
        raise ProblemError(f"{problem}: an operand of {largest} elements needs 64-bit offsets, which the "
                           "benchmark kernels do not use; plan a smaller batch or size")
    if batch > MAX_GRID_Y:
        raise ProblemError(f"{problem}: batch {batch} exceeds the grid's second dimension ({MAX_GRID_Y}), "
                           "where Inductor 2.11's bmm grid puts the batch; plan a smaller batch")


@dataclass(frozen=True)
class PlannedRun:
    problem: Problem
    config: GemmConfig
    key: CompileKey

    @property
    def layout(self) -> str:
        return self.key.layout


@dataclass
class PlanMemo:
    """What `plan` works out once and looks up after: each problem signature's configs and keys
    (`key_signature`, with the device, search space and torch version), and one object per
    distinct key. Every call makes its own unless given one: a planner that plans a slice of
    problems at a time passes one memo to every call, so a signature seen in an earlier slice is
    not planned again and a key shared by two slices stays one object."""

    keys: dict[CompileKey, CompileKey] = field(default_factory=dict)
    pairs: dict[tuple, list[tuple[GemmConfig, CompileKey]]] = field(default_factory=dict)


def plan(problems: Sequence[Problem], device: DeviceSpec, *, search_space: str = "exhaustive",
         torch_version: str | None = None, memo: PlanMemo | None = None,
         literal_sizes: bool = False) -> list[list[PlannedRun]]:
    """For each problem, its configs (Inductor's pruned space for the device) with compile keys
    for the problem's operand layout and precision (ALLOW_TF32 on for a TF32 problem, off for every
    other, whatever this process's fp32_precision). A bmm problem's space is that of its per-batch
    (m, n, k): Inductor 2.11 registers one heuristic class for `triton::mm` and `triton::bmm`
    (CUDAMMTemplateConfigHeuristic) and feeds it the per-batch sizes. `memo`: see PlanMemo.
    `literal_sizes`: keys with M, N and K compiled in (module docstring), one per shape.

    Raises:
        ProblemError: for a problem `check_benchmarkable` refuses."""
    memo = PlanMemo() if memo is None else memo
    # Equal keys of different problems become one object (memo.keys): every later lookup of a key
    # (the compile pipeline's, reuse_order's, cost.py's) then matches by identity instead of
    # comparing 11 fields. Problems of one signature have the same configs and keys: computed once
    # (planning a plan of 4,586 problems, 3.5 million keys, took minutes, inside the bound of every
    # bounded run).
    out = []
    for problem in problems:
        check_benchmarkable(problem, torch_version)
        # Literal sizes are part of the key, so only problems of one shape share a signature.
        shape = (problem.m, problem.n, problem.k) if literal_sizes else None
        signature = (device, search_space, torch_version, shape,
                     *key_signature(problem, problem.tf32 and problem.dtype == "float32"))
        pairs = memo.pairs.get(signature)
        if pairs is None:
            configs = for_problem(problem, device, search_space, torch_version)  # type: ignore[arg-type]
            keys = compile_keys_of(problem, configs, literal_sizes=literal_sizes)
            pairs = [(c, memo.keys.setdefault(key, key)) for c, key in zip(configs, keys)]
            memo.pairs[signature] = pairs
        out.append([PlannedRun(problem, c, key) for c, key in pairs])
    return out


def key_signature(problem: Problem, allow_tf32: bool) -> tuple:
    """What a problem's configs and compile keys depend on: its dtype, kernel, layout and
    ALLOW_TF32; each size's next power of two (what the space clamps blocks to) and its largest
    power of two not above it (which blocks the offsets hint holds for: size >= BLOCK), both as
    far as the largest block reads them; the divisors the key holds (M's where A is read
    transposed, N's, K's) and, for K a multiple of 16, K mod the largest block (EVEN_K for every
    BLOCK_K; a K that is not is a multiple of no BLOCK_K, all 16 or more). The batch plays no
    part (a bmm's space is its per-batch mm space)."""
    sizes = (problem.m, problem.n, problem.k)
    return (problem.dtype, KERNEL_OF_OP[problem.op], problem.layout, allow_tf32,
            *(min(1 << (x - 1).bit_length(), 2 * LARGEST_BLOCK) for x in sizes),
            *(min(1 << (x.bit_length() - 1), LARGEST_BLOCK) for x in sizes),
            pow2_divisor(problem.m) if a_transposed(problem.layout) else 1, pow2_divisor(problem.n),
            pow2_divisor(problem.k), problem.k % LARGEST_BLOCK if problem.k % MAX_DIV == 0 else 0)


def distinct_keys(planned: list[list[PlannedRun]]) -> list[CompileKey]:
    """Every compile key the plan needs, each once, in first-use order."""
    seen: dict[CompileKey, None] = {}
    for runs in planned:
        for run in runs:
            seen.setdefault(run.key, None)
    return list(seen)


def reuse_order(planned: list[list[PlannedRun]]) -> list[list[PlannedRun]]:
    """The same problems, reordered so that problems needing the same compile keys run together.

    Compiling is the wall (about 0.65 core-seconds a kernel): a file in random order makes almost
    every problem a new compile class, so a run bounded by --max-seconds spends its time compiling
    keys of problems it never reaches (a random 1,000-problem sample on an H200: 24 problems in 530 s
    from a cold cache). Problems with identical key sets form a class, kept in file order; classes
    follow greedily, each next the one adding the fewest keys not yet needed, ties in file order.
    Every problem is still measured once; only which ones a bounded run reaches changes."""
    classes: dict[frozenset[CompileKey], list[list[PlannedRun]]] = {}
    for runs in planned:
        classes.setdefault(frozenset(r.key for r in runs), []).append(runs)
    pending = list(classes)
    # Each class's count of keys not yet needed, kept up to date as keys become needed (through the
    # classes holding each key), so a step is one pass over the counts, not a set difference per class.
    new = [len(keys) for keys in pending]
    holders: dict[CompileKey, list[int]] = {}
    for i, keys in enumerate(pending):
        for key in keys:
            holders.setdefault(key, []).append(i)
    left = set(range(len(pending)))
    needed: set[CompileKey] = set()
    ordered: list[list[PlannedRun]] = []
    while left:
        best = min(left, key=lambda i: (new[i], i))
        left.remove(best)
        for key in pending[best] - needed:
            needed.add(key)
            for i in holders[key]:
                new[i] -= 1
        ordered.extend(classes[pending[best]])
    return ordered


def running_force_same_precision() -> bool:
    """Inductor's `force_same_precision` in this process (torch 2.11: False unless
    TORCHINDUCTOR_FORCE_SAME_PRECISION=1; torch 2.13 has none), for kernel_select.tf32's rule."""
    try:
        from torch._inductor import config as inductor_config
    except ImportError:
        return False
    return bool(getattr(inductor_config, "force_same_precision", False))
