"""Lookup runs inside every GEMM lowering of torch.compile; keep it a dict probe plus a short scan."""

from __future__ import annotations

from kernel_select.configs import GemmConfig
from kernel_select.lut import KernelLUT, lut_from_rows, LUTEntry, LUTRow, MRange
from kernel_select.problem import Problem

CONFIG = GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, num_warps=4)


def _big_lut() -> KernelLUT:
    # 1000 exact entries over 100 (n, k) pairs, plus one m range per pair.
    rows = [LUTRow("h100", "mm", "bfloat16", LUTEntry(m=m, n=n, k=1024, configs=[CONFIG]))
            for n in range(16, 1616, 16) for m in range(1, 11)]
    rows += [LUTRow("h100", "mm", "bfloat16",
                    LUTEntry(m=MRange(min=11, max=4096), n=n, k=1024, configs=[CONFIG]))
             for n in range(16, 1616, 16)]
    return lut_from_rows(rows)


def test_lookup_hit(benchmark):
    lut, problem = _big_lut(), Problem(2000, 800, 1024)
    assert benchmark(lut.lookup, problem, "h100") == [CONFIG]


def test_lookup_miss(benchmark):
    lut, problem = _big_lut(), Problem(2000, 801, 1024)
    assert benchmark(lut.lookup, problem, "NVIDIA H100 80GB HBM3") == []
