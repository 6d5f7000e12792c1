"""What the benchmark harness will compile and run: pure Python, no GPU needed.

A *compile key* is everything that makes one Triton binary of the benchmark kernel distinct:
the dtype, the operand layout, the config, and the specializations Inductor's literal shapes and
strides would imply (EVEN_K, ALLOW_TF32, the power-of-two divisibility of N and K, and of M when
A is read transposed, and the two offset hints). Problems that share a key share a binary;
planning the keys up front lets the harness compile everything in parallel before timing anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kernel_select.configs import GemmConfig, inductor_allow_tf32
from kernel_select.device import DeviceSpec
from kernel_select.layouts import a_transposed, operand_strides
from kernel_select.problem import Problem
from kernel_select.space import for_problem

MAX_DIV = 16  # Triton's own integer specialization stops at 16; wider never changes vector width


def pow2_divisor(x: int, cap: int = MAX_DIV) -> int:
    """Largest power of two dividing x, capped (what an integer literal tells the compiler)."""
    return min(x & -x, cap)


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


def compile_key(problem: Problem, config: GemmConfig, allow_tf32: bool) -> CompileKey:
    """The key of `problem` (in its layout) with `config`; the hints follow the strides of the
    operands the timer builds (kernel_select.layouts.operand_strides)."""
    layout = problem.layout
    (stride_am, stride_ak), (stride_bk, stride_bn) = operand_strides(problem.m, problem.n, problem.k, layout)
    return CompileKey(
        dtype=problem.dtype, layout=layout, config=config.key, even_k=problem.k % config.block_k == 0,
        allow_tf32=allow_tf32 and problem.dtype == "float32",
        m_div=pow2_divisor(problem.m) if a_transposed(layout) else 1,
        n_div=pow2_divisor(problem.n), k_div=pow2_divisor(problem.k),
        a_hint=inductor_hint(problem.m, problem.k, stride_am, stride_ak, config.block_m),
        b_hint=inductor_hint(problem.n, problem.k, stride_bn, stride_bk, config.block_n),
    )


@dataclass(frozen=True)
class PlannedRun:
    problem: Problem
    config: GemmConfig
    key: CompileKey

    @property
    def layout(self) -> str:
        return self.key.layout


def plan(problems: Sequence[Problem], device: DeviceSpec, *, search_space: str = "exhaustive",
         torch_version: str | None = None, fp32_precision: str = "ieee") -> list[list[PlannedRun]]:
    """For each problem, its configs (Inductor's pruned space for the device) with compile keys
    for the problem's operand layout."""
    out = []
    for problem in problems:
        tf32 = inductor_allow_tf32(problem, torch_version=torch_version, fp32_precision=fp32_precision)
        configs = for_problem(problem, device, search_space, torch_version)  # type: ignore[arg-type]
        out.append([PlannedRun(problem, c, compile_key(problem, c, tf32)) for c in configs])
    return out


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
    needed: set[CompileKey] = set()
    ordered: list[list[PlannedRun]] = []
    while pending:
        best = min(range(len(pending)), key=lambda i: (len(pending[i] - needed), i))
        keys = pending.pop(best)
        needed |= keys
        ordered.extend(classes[keys])
    return ordered
