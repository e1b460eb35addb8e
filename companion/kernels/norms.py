"""Residual add + RMSNorm in Triton: one fused kernel against the unfused pair (add, then a norm that re-reads).

This is vLLM's `fused_add_rms_norm` against `x + residual` followed by `rms_norm`. Storage is bf16
(any float dtype works), arithmetic is fp32. Both paths return `(normed, new_residual)` with
new_residual = x + residual and normed = new_residual / sqrt(mean(new_residual²) + eps) · weight.
The fused kernel keeps the fp32 sum for the mean square and the scaling (vLLM's scales the stored
sum: the bytes are the same); the unfused norm reads the stored, rounded sum back.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ROW_NUM_WARPS = 8  # 256 threads per row program, the `threads` default of workloads.kernels.RmsNorm (assumption)
ADD_BLOCK = 4096  # values per add program: Elementwise.elements_per_workgroup's default, so the model matches
ADD_NUM_WARPS = 8  # 256 threads, 16 values each


@triton.jit
def add_rmsnorm_fused_kernel(x_ptr, res_ptr, w_ptr, out_ptr, new_res_ptr, hidden, eps, BLOCK: tl.constexpr):
    """One program per row: the sum stays in registers between the add and the norm."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    offs = row * hidden + cols
    s = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s += tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(new_res_ptr + offs, s.to(new_res_ptr.dtype.element_ty), mask=mask)
    inv_rms = 1.0 / tl.sqrt(tl.sum(s * s, axis=0) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (s * inv_rms * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_kernel(x_ptr, res_ptr, sum_ptr, n, BLOCK: tl.constexpr):
    """sum = x + residual over n values, BLOCK per program, in fp32 then stored."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    s = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s += tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(sum_ptr + offs, s.to(sum_ptr.dtype.element_ty), mask=mask)


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, out_ptr, hidden, eps, BLOCK: tl.constexpr):
    """One program per row: out = x / rms(x) · weight."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < hidden
    offs = row * hidden + cols
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / hidden + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x * inv_rms * w).to(out_ptr.dtype.element_ty), mask=mask)


def row_block(hidden: int) -> int:
    """Values one row program holds: the next power of two of hidden (tl.arange needs one)."""
    return triton.next_power_of_2(hidden)


def _check(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor) -> None:
    if x.dim() != 2 or x.shape != residual.shape or weight.shape != (x.shape[1],):
        raise ValueError(f"need x, residual (tokens, hidden) and weight (hidden,); got {tuple(x.shape)}, "
                         f"{tuple(residual.shape)}, {tuple(weight.shape)}")
    if not (x.is_contiguous() and residual.is_contiguous() and weight.is_contiguous()):
        raise ValueError("x, residual and weight must be contiguous")


def _outputs(x: torch.Tensor, out: tuple[torch.Tensor, torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.empty_like(x), torch.empty_like(x)) if out is None else out


def add_rmsnorm_fused(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normed, new_residual) in one launch; `out` lends preallocated outputs (timing loops, graphs)."""
    _check(x, residual, weight)
    normed, new_res = _outputs(x, out)
    tokens, hidden = x.shape
    add_rmsnorm_fused_kernel[(tokens,)](x, residual, weight, normed, new_res, hidden, eps,
                                        BLOCK=row_block(hidden), num_warps=ROW_NUM_WARPS)
    return normed, new_res


def add_rmsnorm_unfused(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(normed, new_residual) in two launches: the add writes the sum, the norm reads it back from memory."""
    _check(x, residual, weight)
    normed, new_res = _outputs(x, out)
    tokens, hidden = x.shape
    n = tokens * hidden
    add_kernel[(triton.cdiv(n, ADD_BLOCK),)](x, residual, new_res, n, BLOCK=ADD_BLOCK, num_warps=ADD_NUM_WARPS)
    rmsnorm_kernel[(tokens,)](new_res, weight, normed, hidden, eps, BLOCK=row_block(hidden),
                              num_warps=ROW_NUM_WARPS)
    return normed, new_res


def add_rmsnorm_ref(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Float64 reference (normed, new_residual) of the exact sum, no intermediate rounding."""
    s = x.double() + residual.double()
    inv_rms = torch.rsqrt(s.square().mean(dim=-1, keepdim=True) + eps)
    return s * inv_rms * weight.double(), s
