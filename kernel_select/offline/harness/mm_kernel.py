"""The benchmark kernel: Inductor's `triton::mm` template, compiled once per config and reused
for every problem shape.

Correspondence to Inductor's template (torch/_inductor/kernel/templates/triton_mm.py.jinja,
torch 2.11/2.13), line for line:
  * 1-D grid of cdiv(M, BLOCK_M) * cdiv(N, BLOCK_N) programs with the GROUP_M swizzle
    ("re-order program ID for better L2 performance") and tl.assume(pid >= 0) hints;
  * row/column offsets WRAP (rm % M, rn % N) instead of masking loads; out-of-range rows and
    columns are computed and only masked at the store;
  * the same max_contiguous/multiple_of hints on the wrapped offsets, under the same condition
    (((stride_am == 1 and stride_ak == M) or (stride_am == K and stride_ak == 1)) and M >= BLOCK_M
    and K > 1, and the same for B with N), evaluated on the host by bench_plan.inductor_hint from
    the strides of the layout -> A_HINT / B_HINT;
  * K loop over tl.cdiv(K, BLOCK_K) with indices recomputed from k_idx (no pointer increments),
    masked only when EVEN_K is False (K % BLOCK_K != 0), exactly Inductor's EVEN_K specialization;
  * load indices `idx_k + stride * idx_m` (A) and `idx_n + stride * idx_k` (B) as Inductor's
    load_input writes them for a row-major operand, and `idx_m + M * idx_k` (A read transposed) /
    `idx_k + K * idx_n` (B read transposed) for a transposed view, the unit stride first;
  * `acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)` with an fp32 accumulator,
    ALLOW_TF32 on for a TF32 problem (Problem.tf32; when Inductor sets it: kernel_select.tf32);
  * masked store of the accumulator, converted to the output dtype by tl.store;
  * int32 indexing (Inductor's INDEX_DTYPE for problems that fit 32-bit offsets).

The one deliberate difference: Inductor bakes M, N, K and the strides into the source as integer
literals, which costs one compile per shape. Here they are runtime arguments, so one compile per
(config, dtype, layout, specialization) serves every shape. What the literals tell Triton's
compiler is kept: N and K are passed as N // N_DIV and K // K_DIV and multiplied back by the
constexprs N_DIV / K_DIV (the largest power of two dividing them, capped at 16), so the compiler
sees the same divisibility (and hence the same vector widths) as with literals. M is a row stride
only when A is read transposed (stride_ak == M); then it is passed the same way (M_DIV), else
M_DIV is 1 and M is a plain argument, so row-major problems of any M share a binary.

That difference is not free. With the same divisibility the compiler still emits other code for some
configs when it knows the sizes, and times them otherwise: on an H200, 16x128x128 s4 w2 at 8 x 14336 x
4096 (`nt`) runs 31 us shared and 42 us with the sizes compiled in, as Inductor's own kernel does in a
network (docs/results.md, "Harness fidelity"); other configs move the other way. `bench --literal-sizes`
sets M_LIT, N_LIT and K_LIT (CompileKey.sizes) and the kernel then reads the sizes as literals, as
Inductor's does: one binary per shape and config.

Layouts (kernel_select.layouts): the constexprs A_T / B_T pick each operand's strides, one compile
per layout: A_T False reads A stored [M, K] (stride_am = K, stride_ak = 1), True a view of A
stored [K, M] (stride_am = 1, stride_ak = M); B_T False reads B stored [K, N] (stride_bk = N,
stride_bn = 1), True a view of B stored [N, K] (stride_bk = 1, stride_bn = K). C is row-major.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M_q", "N_q", "K_q"])
def mm_kernel(
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
    stride_cm = N
    pid = tl.program_id(0)
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
        offs_a_m = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    else:
        offs_a_m = rm % M
    if B_HINT:
        offs_b_n = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    else:
        offs_b_n = rn % N
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=ACC_TYPE)

    for k_idx in range(0, tl.cdiv(K, BLOCK_K)):
        a_k_idx_vals = offs_k[None, :] + (k_idx * BLOCK_K)
        b_k_idx_vals = offs_k[:, None] + (k_idx * BLOCK_K)
        if A_T:  # A stored [K, M]: stride_am == 1, stride_ak == M
            a_index = offs_a_m[:, None] + M * a_k_idx_vals
        else:  # A stored [M, K]: stride_am == K, stride_ak == 1
            a_index = a_k_idx_vals + K * offs_a_m[:, None]
        if B_T:  # B stored [N, K]: stride_bk == 1, stride_bn == K
            b_index = b_k_idx_vals + K * offs_b_n[None, :]
        else:  # B stored [K, N]: stride_bk == N, stride_bn == 1
            b_index = offs_b_n[None, :] + N * b_k_idx_vals
        if EVEN_K:
            a = tl.load(A + a_index)
            b = tl.load(B + b_index)
        else:
            a_mask = offs_k[None, :] < (K - k_idx * BLOCK_K)
            b_mask = offs_k[:, None] < (K - k_idx * BLOCK_K)
            a = tl.load(A + a_index, mask=a_mask, other=0.0)
            b = tl.load(B + b_index, mask=b_mask, other=0.0)
        acc += tl.dot(a, b, allow_tf32=ALLOW_TF32, out_dtype=ACC_TYPE)

    # rematerialize rm and rn to save registers
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    idx_m = rm[:, None]
    idx_n = rn[None, :]
    mask = (idx_m < M) & (idx_n < N)
    tl.store(C + (idx_n + stride_cm * idx_m), acc, mask)
