# SPDX-License-Identifier: MIT
# The kernel body below is ported from AITER (github.com/ROCm/aiter, v0.1.10.post3,
# aiter/ops/triton/_triton_kernels/gemm/basic/gemm_a8w8_blockscale.py), Copyright (C) 2024-2025, Advanced Micro
# Devices, Inc. All rights reserved. Released under the MIT licence, which allows this copy with this notice.
"""AITER's Triton block-scaled FP8 GEMM, the kernel SGLang's ROCm images run for DeepSeek-style FP8 linear layers.

SGLang with `SGLANG_USE_AITER=1` sends every block-scaled FP8 linear layer on gfx942 to AITER's Triton
`gemm_a8w8_blockscale` (sglang 0.5.9 and 0.5.12, `srt/layers/quantization/fp8_utils.py:
aiter_w8a8_block_fp8_linear`). AITER v0.1.10.post3, the one in SGLang's v0.5.9 ROCm image, holds only a generic
gfx942 configuration for it (`aiter/ops/triton/configs/gemm/gfx942-GEMM-A8W8_BLOCKSCALE.json`, "any"): 128 x 128
x 128 tiles, 4 warps, 2 stages, no split over k. The product times that configuration from this kernel's compiled
code (`compiled.companion`, `workloads.deployment.AITER_GENERIC_FP8_TILES`).

C = A @ W^T with A (M, K) FP8 and one FP32 scale per row and 128 columns of K, W (N, K) FP8 and one FP32 scale per
128 x 128 block, C (M, N) bf16. The body is AITER's with NUM_KSPLIT 1 and GROUP_SIZE_M 1 (its generic
configuration), K a multiple of BLOCK_SIZE_K (EVEN_K), and its two helpers inlined: `pid_grid` at GROUP_SIZE_M 1 is
row-major over the output tiles, and the `remap_xcd` call, whose result AITER discards, is left out. A's row
offsets wrap modulo M instead of being masked (AITER's `% M`), so every program computes all BLOCK_SIZE_M rows of
its tile whatever M is; the store masks the rows past M. The accumulator takes each 128-deep slice's product times
its row's and column block's scales, as AITER's loop does.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# AITER's generic gfx942 configuration (gfx942-GEMM-A8W8_BLOCKSCALE.json "any" at v0.1.10.post3)
BLOCK_SIZE_M = BLOCK_SIZE_N = BLOCK_SIZE_K = 128
NUM_WARPS, NUM_STAGES = 4, 2
GROUP_K = GROUP_N = 128  # DeepSeek-V3/R1's quantization blocks: 1 x 128 activation groups, 128 x 128 weight blocks


@triton.jit
def gemm_a8w8_blockscale_kernel(a_ptr, b_ptr, c_ptr, a_scale_ptr, b_scale_ptr, M, N, K,
                                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                                stride_ascale_m, stride_ascale_k, stride_bscale_k, stride_bscale_n,
                                GROUP_K: tl.constexpr, GROUP_N: tl.constexpr, BLOCK_SIZE_M: tl.constexpr,
                                BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    num_k_iter = tl.cdiv(K, BLOCK_SIZE_K)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    a_scale_ptrs = a_scale_ptr + offs_am * stride_ascale_m
    offs_b_scale_n = offs_bn // GROUP_N
    b_scale_ptrs = b_scale_ptr + offs_b_scale_n * stride_bscale_n
    offs_ks_step = BLOCK_SIZE_K // GROUP_K
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for _ in range(0, num_k_iter):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs, cache_modifier=".cg")
        a_scale = tl.load(a_scale_ptrs)
        b_scale = tl.load(b_scale_ptrs)
        accumulator += tl.dot(a, b, input_precision="ieee") * a_scale[:, None] * b_scale[None, :]
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
        a_scale_ptrs += offs_ks_step * stride_ascale_k
        b_scale_ptrs += offs_ks_step * stride_bscale_k
    c = accumulator.to(c_ptr.type.element_ty)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M).to(tl.int64)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N).to(tl.int64)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def gemm_a8w8_blockscale(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor, w_scale: torch.Tensor,
                         out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """C (M, N) = (A * a_scale) @ (W * w_scale)^T: `a` (M, K) and `w` (N, K) FP8, `a_scale` (M, K / 128) and
    `w_scale` (N / 128, K / 128) FP32, as AITER's wrapper launches its kernel (one program per output tile)."""
    m, k = a.shape
    n = w.shape[0]
    if w.shape[1] != k or k % BLOCK_SIZE_K:
        raise ValueError(f"a {tuple(a.shape)} and w {tuple(w.shape)} need the same K, a multiple of {BLOCK_SIZE_K}")
    if a_scale.shape != (m, k // GROUP_K) or w_scale.shape != (triton.cdiv(n, GROUP_N), k // GROUP_K):
        raise ValueError(f"scales {tuple(a_scale.shape)} and {tuple(w_scale.shape)} do not match 1 x {GROUP_K} "
                         f"groups of a and {GROUP_N} x {GROUP_K} blocks of w")
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    grid = (triton.cdiv(m, BLOCK_SIZE_M) * triton.cdiv(n, BLOCK_SIZE_N),)
    gemm_a8w8_blockscale_kernel[grid](
        a, w, c, a_scale, w_scale, m, n, k, a.stride(0), a.stride(1), w.stride(1), w.stride(0), c.stride(0),
        c.stride(1), a_scale.stride(0), a_scale.stride(1), w_scale.stride(1), w_scale.stride(0),
        GROUP_K=GROUP_K, GROUP_N=GROUP_N, BLOCK_SIZE_M=BLOCK_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N,
        BLOCK_SIZE_K=BLOCK_SIZE_K, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return c


def gemm_a8w8_blockscale_ref(a: torch.Tensor, w: torch.Tensor, a_scale: torch.Tensor,
                             w_scale: torch.Tensor) -> torch.Tensor:
    """The same product in float64: each operand dequantized with its block scales, then one matmul."""
    a64 = a.to(torch.float64) * a_scale.to(torch.float64).repeat_interleave(GROUP_K, dim=1)
    blocks = w_scale.to(torch.float64).repeat_interleave(GROUP_N, dim=0)[: w.shape[0]]
    w64 = w.to(torch.float64) * blocks.repeat_interleave(GROUP_K, dim=1)
    return a64 @ w64.T
