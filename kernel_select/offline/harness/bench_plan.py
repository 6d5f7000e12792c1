"""What the benchmark harness will compile and run: pure Python, no GPU needed.

A *compile key* is everything that makes one Triton binary of the benchmark kernel distinct:
the dtype, the config, and the specializations Inductor's literal shapes would imply (EVEN_K,
ALLOW_TF32, the power-of-two divisibility of N and K, and the two offset hints). Problems that
share a key share a binary; planning the keys up front lets the harness compile everything in
parallel before timing anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel_select.configs import GemmConfig, inductor_allow_tf32
from kernel_select.device import DeviceSpec
from kernel_select.problem import Problem
from kernel_select.space import for_problem

MAX_DIV = 16  # Triton's own integer specialization stops at 16; wider never changes vector width


def pow2_divisor(x: int, cap: int = MAX_DIV) -> int:
    """Largest power of two dividing x, capped (what an integer literal tells the compiler)."""
    return min(x & -x, cap)


@dataclass(frozen=True)
class CompileKey:
    dtype: str
    config: tuple[int, int, int, int, int, int]  # GemmConfig.key
    even_k: bool
    allow_tf32: bool
    n_div: int
    k_div: int
    a_hint: bool
    b_hint: bool

    @property
    def gemm_config(self) -> GemmConfig:
        return GemmConfig.from_key(self.config)


def compile_key(problem: Problem, config: GemmConfig, allow_tf32: bool) -> CompileKey:
    # Inductor's hint condition: operand contiguous (always, here), M >= BLOCK_M (N >= BLOCK_N), K > 1.
    return CompileKey(
        dtype=problem.dtype, config=config.key, even_k=problem.k % config.block_k == 0,
        allow_tf32=allow_tf32 and problem.dtype == "float32",
        n_div=pow2_divisor(problem.n), k_div=pow2_divisor(problem.k),
        a_hint=problem.m >= config.block_m and problem.k > 1,
        b_hint=problem.n >= config.block_n and problem.k > 1,
    )


@dataclass(frozen=True)
class PlannedRun:
    problem: Problem
    config: GemmConfig
    key: CompileKey


def plan(problems: list[Problem], device: DeviceSpec, *, search_space: str = "exhaustive",
         torch_version: str | None = None, fp32_precision: str = "ieee") -> list[list[PlannedRun]]:
    """For each problem, its configs (Inductor's pruned space for the device) with compile keys."""
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
