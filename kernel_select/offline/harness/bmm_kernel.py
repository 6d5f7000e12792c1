"""The batched benchmark kernel: Inductor's `triton::bmm` template, compiled once per config and
reused for every problem shape and batch size.

Correspondence to Inductor's template (torch/_inductor/kernel/templates/triton_bmm.py.jinja and
bmm_grid in kernel/bmm.py, torch 2.11.0), line for line:
  * grid (cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N), batch, 1): the batch is program_id(1), and the
    1-D swizzle over (M, N) tiles ("re-order program ID for better L2 performance") with the
    tl.assume(pid >= 0) hints is mm's;
  * pid and idx_q converted to INDEX_DTYPE (tl.int32: Inductor's index type for problems whose
    offsets fit 32 bits; the harness plans only such problems);
  * row/column offsets WRAP (rm % M, rn % N); the max_contiguous / multiple_of hints on them are
    applied under the bmm template's own condition, which tests the strides only,
    ((stride_am == 1 and stride_ak == M) or (stride_am == K and stride_ak == 1)), evaluated on the
    host by bench_plan.inductor_bmm_hint -> A_HINT / B_HINT (unlike triton_mm there is no
    `M >= BLOCK_M and K > 1` clause in 2.11);
  * pointers built once, `A + (ram[:, None] * stride_am + rk[None, :] * stride_ak +
    idx_q * stride_aq)` (B likewise), and advanced by BLOCK_K * stride_ak / stride_bk each step of
    `for k in range(K, 0, -BLOCK_K)` (pointer increments, not mm's recomputed indices);
  * loads masked with `rk < k` only when EVEN_K is False (K % BLOCK_K != 0);
  * `acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)` into an ACC_TYPE (fp32) accumulator (no
    out_dtype argument, as in the template), ALLOW_TF32 on for a TF32 problem (kernel_select.tf32);
  * rm, rn and idx_q rematerialized, mask (idx_m < M) & (idx_n < N), and the store of Inductor's
    suffix for a contiguous [batch, M, N] output: index idx_n + N * idx_m + M * N * idx_q.

The one deliberate difference is mm_kernel's: Inductor bakes M, N, K and every stride into the
source as integer literals, one compile per shape. Here they are runtime arguments (the batch
size is the grid's second dimension, never an argument), and the divisibility the literals tell
the compiler is passed as constexprs: N // N_DIV and K // K_DIV are multiplied back by N_DIV /
K_DIV, and M by M_DIV where M is a row stride (A read transposed), else M_DIV is 1. The batch
strides are the products M * K, K * N and M * N of those: their divisibility as the compiler sees
it is at least that of the row stride of the same matrix, which is what bounds the alignment of
every row start (the address of a row is base + idx_q * batch stride + row * row stride), so it
vectorizes the loads and the store as with literals. `bench --literal-sizes` compiles M, N and K in
instead (M_LIT, N_LIT, K_LIT), as mm_kernel.py says why.

Layouts (kernel_select.layouts), per batch: A_T False reads A stored [batch, M, K] (stride_am = K,
stride_ak = 1), True a view of A stored [batch, K, M] (stride_am = 1, stride_ak = M); B_T False
reads B stored [batch, K, N] (stride_bk = N, stride_bn = 1), True a view of B stored [batch, N, K]
(stride_bk = 1, stride_bn = K), as k.transpose(-2, -1) in attention's q @ k^T. Batches are
contiguous (stride_aq = M * K, stride_bq = K * N).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M_q", "N_q", "K_q"])
def bmm_kernel(
    A, B, C, M_q, N_q, K_q,
    M_DIV: tl.constexpr, N_DIV: tl.constexpr, K_DIV: tl.constexpr,
    EVEN_K: tl.constexpr, ALLOW_TF32: tl.constexpr, ACC_TYPE: tl.constexpr,
    A_T: tl.constexpr, B_T: tl.constexpr, A_HINT: tl.constexpr, B_HINT: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    M_LIT: tl.constexpr, N_LIT: tl.constexpr, K_LIT: tl.constexpr,
):
    if M_LIT > 0:  # bench --literal-sizes: the sizes compiled in, as Inductor's template has them
        M = M_LIT
        N = N_LIT
        K = K_LIT
    else:
        M = M_q * M_DIV
        N = N_q * N_DIV
        K = K_q * K_DIV
    if A_T:  # A stored [batch, K, M]
        stride_am = 1
        stride_ak = M
    else:  # A stored [batch, M, K]
        stride_am = K
        stride_ak = 1
    stride_aq = M * K
    if B_T:  # B stored [batch, N, K]
        stride_bk = 1
        stride_bn = K
    else:  # B stored [batch, K, N]
        stride_bk = N
        stride_bn = 1
    stride_bq = K * N

    # based on triton.ops.matmul
    pid = tl.program_id(0).to(tl.int32)
    grid_m = (M + BLOCK_M - 1) // BLOCK_M
    grid_n = (N + BLOCK_N - 1) // BLOCK_N

    # re-order program ID for better L2 performance
    width = GROUP_M * grid_n
    group_id = pid // width
    group_size = min(grid_m - group_id * GROUP_M, GROUP_M)
    pid_m = group_id * GROUP_M + (pid % group_size)
    pid_n = (pid % width) // (group_size)
    tl.assume(pid_m >= 0)
    tl.assume(pid_n >= 0)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    if A_HINT:
        ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        ram = rm % M
    if B_HINT:
        rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        rbn = rn % N

    rk = tl.arange(0, BLOCK_K)

    idx_q = tl.program_id(1).to(tl.int32)  # batch dimension for BMM
    A = A + (ram[:, None] * stride_am + rk[None, :] * stride_ak + idx_q * stride_aq)
    B = B + (rk[:, None] * stride_bk + rbn[None, :] * stride_bn + idx_q * stride_bq)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)
    for k in range(K, 0, -BLOCK_K):
        if EVEN_K:
            a = tl.load(A)
            b = tl.load(B)
        else:
            a = tl.load(A, mask=rk[None, :] < k, other=0.)
            b = tl.load(B, mask=rk[:, None] < k, other=0.)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32)
        A += BLOCK_K * stride_ak
        B += BLOCK_K * stride_bk

    # rematerialize rm and rn to save registers
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_q = tl.program_id(1).to(tl.int32)  # batch dimension for BMM
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)

    # Inductor's suffix for a contiguous [batch, M, N] output
    xindex = idx_n + N * idx_m + (M * N) * idx_q
    tl.store(C + tl.broadcast_to(xindex, [BLOCK_M, BLOCK_N]), acc, mask)
