"""Grouped expert GEMM in Triton, as vLLM's fused-MoE kernel runs it, and the routing it needs.

vLLM's `fused_moe_kernel` (vllm/model_executor/layers/fused_moe/fused_moe.py) multiplies each routed row by its
expert's weight in one launch: `moe_align_block_size` sorts the routed rows by expert and pads each expert's
rows to a multiple of BLOCK_M with an out-of-range index; a program takes one BLOCK_M x BLOCK_N tile of one
expert, gathers its rows from the tokens (routed row r reads token r // top_k), streams the expert's weight
over K and scatters its output rows back to routed-row order. The grid is sized for the worst padding
(routed rows + experts x (BLOCK_M - 1)) so that one captured graph serves any routing, and the programs past
the padded rows exit at once. Weights are stored [E, N, K] (each expert's output features by input features,
PyTorch's Linear layout). Storage bf16, fp32 accumulation.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from companion.kernels.kda import _dot_bf16, _interpreted

GROUP_M = 8  # row tiles that share a column tile in the launch order (vLLM's tuned configs: 1 to 64)


@triton.jit
def grouped_gemm_kernel(a_ptr, w_ptr, c_ptr, sorted_ptr, expert_ptr, padded_ptr, n, k, routed, top_k,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP: tl.constexpr, DOT_F32: tl.constexpr):
    """One BLOCK_M x BLOCK_N output tile of one expert; programs past the padded rows exit."""
    pid = tl.program_id(0)
    padded = tl.load(padded_ptr)
    tiles_m = tl.cdiv(tl.num_programs(0), tl.cdiv(n, BLOCK_N))
    tiles_n = tl.cdiv(n, BLOCK_N)
    in_group = GROUP * tiles_n
    first_m = (pid // in_group) * GROUP
    group_rows = min(tiles_m - first_m, GROUP)
    pid_m = first_m + (pid % in_group) % group_rows
    pid_n = (pid % in_group) // group_rows
    if pid_m * BLOCK_M >= padded:
        return
    rows = tl.load(sorted_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = rows < routed
    expert = tl.load(expert_ptr + pid_m).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rows // top_k).to(tl.int64)[:, None] * k + depth[None, :]
    w_ptrs = w_ptr + expert * n * k + cols.to(tl.int64)[None, :] * k + depth[:, None]
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for step in range(0, tl.cdiv(k, BLOCK_K)):
        left = k - step * BLOCK_K
        a = tl.load(a_ptrs, mask=valid[:, None] & (depth[None, :] < left), other=0.0)
        w = tl.load(w_ptrs, mask=(depth[:, None] < left) & (cols[None, :] < n), other=0.0)
        acc += _dot_bf16(a, w, DOT_F32)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    out = c_ptr + rows.to(tl.int64)[:, None] * n + cols[None, :]
    tl.store(out, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & (cols[None, :] < n))


def align(expert_of_row: torch.Tensor, experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                           torch.Tensor, int]:
    """vLLM's `moe_align_block_size`: (routed-row indices sorted by expert, each expert's padded to a multiple of
    block_m with the out-of-range index `routed`; the expert of each row tile; the padded row count as a
    one-element int32 tensor; the grid's row tiles, sized for the worst padding)."""
    routed = expert_of_row.numel()
    flat = expert_of_row.flatten().to(torch.int64)
    counts = torch.bincount(flat, minlength=experts)
    padded_counts = (counts + block_m - 1) // block_m * block_m
    order = torch.argsort(flat, stable=True)
    worst = routed + experts * (block_m - 1)
    sorted_rows = torch.full((worst,), routed, dtype=torch.int32, device=flat.device)
    starts = torch.cumsum(padded_counts, 0) - padded_counts
    firsts = torch.cumsum(counts, 0) - counts
    rank = torch.arange(routed, device=flat.device) - firsts[flat[order]]
    sorted_rows[starts[flat[order]] + rank] = order.to(torch.int32)
    tiles = -(-worst // block_m)
    tile_expert = torch.zeros(tiles, dtype=torch.int32, device=flat.device)
    used = int(padded_counts.sum()) // block_m
    tile_expert[:used] = torch.repeat_interleave(torch.arange(experts, device=flat.device, dtype=torch.int32),
                                                 (padded_counts // block_m))
    padded = torch.tensor([int(padded_counts.sum())], dtype=torch.int32, device=flat.device)
    return sorted_rows, tile_expert, padded, tiles


def grouped_gemm(a: torch.Tensor, w: torch.Tensor, expert_of_row: torch.Tensor, block_m: int, block_n: int,
                 block_k: int, num_warps: int = 4, num_stages: int = 3, out: torch.Tensor | None = None,
                 aligned: tuple | None = None) -> torch.Tensor:
    """Routed rows [tokens * top_k, N]: row r = a[r // top_k] @ w[expert_of_row[r]].T (`expert_of_row` is the
    router's [tokens, top_k] choice). `aligned` passes `align`'s result to reuse it across launches."""
    tokens, k = a.shape
    experts, n, kw = w.shape
    if kw != k or expert_of_row.shape[0] != tokens:
        raise ValueError(f"a {tuple(a.shape)}, w {tuple(w.shape)} and routing {tuple(expert_of_row.shape)} disagree")
    top_k = expert_of_row.shape[1]
    routed = tokens * top_k
    sorted_rows, tile_expert, padded, tiles = aligned or align(expert_of_row, experts, block_m)
    if out is None:
        out = torch.empty(routed, n, device=a.device, dtype=a.dtype)
    grid = (tiles * triton.cdiv(n, block_n),)
    grouped_gemm_kernel[grid](a, w, out, sorted_rows, tile_expert, padded, n, k, routed, top_k,
                              BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP=GROUP_M,
                              DOT_F32=_interpreted(a), num_warps=num_warps, num_stages=num_stages)
    return out


def grouped_gemm_ref(a: torch.Tensor, w: torch.Tensor, expert_of_row: torch.Tensor) -> torch.Tensor:
    """The routed rows in float64: row r = a[r // top_k] @ w[expert_of_row[r]].T, one expert at a time."""
    top_k = expert_of_row.shape[1]
    flat = expert_of_row.flatten().long()
    out = torch.zeros(flat.numel(), w.shape[1], dtype=torch.float64, device=a.device)
    for e in torch.unique(flat).tolist():
        rows = torch.nonzero(flat == e).flatten()
        out[rows] = a[rows // top_k].double() @ w[e].double().T
    return out
