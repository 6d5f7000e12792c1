"""A real @triton.autotune matmul pruned by kernel_select: correct, and only top_k configs timed."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")


@triton.jit
def _matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = tl.minimum(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // group_size
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(kk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc.to(c_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=s, num_warps=w)
    for bm, bn, bk, s, w in [(32, 32, 32, 2, 4), (64, 64, 32, 3, 4), (64, 128, 64, 3, 4), (128, 64, 32, 4, 8),
                             (128, 128, 32, 3, 8), (128, 128, 64, 3, 8), (64, 64, 64, 4, 4),
                             (128, 256, 64, 3, 8), (32, 64, 64, 5, 2), (256, 64, 32, 3, 8)]
]


def _run(kernel, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # noqa: ANN001
    m, k = a.shape
    n = b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    grid = lambda meta: (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)  # noqa: E731
    kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1))
    return c


@pytest.mark.parametrize("top_k", [3, 0.2])
def test_pruned_autotune_is_correct_and_times_only_top_k(top_k: int | float):
    import kernel_select

    kernel = triton.autotune(configs=CONFIGS, key=["M", "N", "K"],
                             prune_configs_by=kernel_select.triton_pruner(top_k=top_k))(_matmul)
    a = torch.randn(560, 3420, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(3420, 1280, device="cuda", dtype=torch.bfloat16)
    c = _run(kernel, a, b)
    torch.cuda.synchronize()
    expected = 3 if top_k == 3 else 2
    assert len(kernel.configs_timings) == expected
    assert kernel.best_config in kernel.configs_timings
    torch.testing.assert_close(c.float(), a.float() @ b.float(), rtol=2e-2, atol=1.5)
