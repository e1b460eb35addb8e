"""Absorbed-MLA decode in Triton: split-KV partials merged by log-sum-exp, with optional head padding.

One new token per sequence attends over that sequence's latent cache. Per head, the query is
[kv_lora | rope] (512 + 64 = 576 wide) and the cache holds one 576-wide latent row per token, whose
first kv_lora values are also the values: out[h] = softmax(q[h] . c[t] * sm_scale) @ c[:, :kv_lora].
Launches, in order (they match `workloads.attention_kernels.MlaDecode`):

1. `pad_heads_to > heads` only: `pad_heads_kernel` copies q into a zero-padded (seqs, pad_heads_to, 576)
   buffer, one program per padded row, so the attention kernel runs on whole 16-head blocks unmasked;
2. `mla_decode_kernel`, grid (seqs, head blocks of BLOCK_H, num_splits). Each program streams its split
   of the sequence's rows in tiles of BLOCK_N; with one split it writes the bf16 output, else an fp32
   partial output and its log2-sum-exp;
3. `num_splits > 1` only: `mla_merge_kernel`, grid (seqs, head blocks), merges the splits' partials.

Splits are whole numbers of BLOCK_N tiles (the last may be ragged), so short sequences leave trailing
splits empty; the attention kernel skips them and the merge stops before them.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

KV_LORA = 512  # latent width, also the value width per head (DeepSeek-V3 / Kimi K3)
ROPE_DIM = 64  # decoupled RoPE key width stored after the latent
QK_HEAD_DIM = 128 + 64  # unabsorbed nope + rope head dim whose sqrt scales the scores
BLOCK_H = 16  # heads per program: tl.dot needs M >= 16 on the GPU
BLOCK_N = 32  # cache rows per inner step (vLLM/SGLang's Triton MLA decode use 32 on CUDA)
NUM_WARPS = 4  # for every launch, so one `threads` describes all of them in the model
NUM_STAGES = 2  # software-pipelined cache loads in the attention kernel
LOG2E = 1.4426950408889634  # exp(x) = exp2(x * log2(e))


@triton.jit
def pad_heads_kernel(
    src_ptr, dst_ptr, n_heads, padded_heads,
    stride_sb, stride_sh, stride_db, stride_dh,
    WIDTH: tl.constexpr, BLOCK: tl.constexpr,
):
    """Row (b, h) of dst = src[b, h] for h < n_heads, else zeros; one program per padded row."""
    row = tl.program_id(0)
    b = row // padded_heads
    h = row % padded_heads
    offs = tl.arange(0, BLOCK)
    src_width = tl.where(h < n_heads, WIDTH, 0)  # padding rows load nothing and store zeros
    x = tl.load(src_ptr + b * stride_sb + h * stride_sh + offs, mask=offs < src_width, other=0.0)
    tl.store(dst_ptr + b * stride_db + h * stride_dh + offs, x, mask=offs < WIDTH)


@triton.jit
def _split_rows(length, NUM_SPLITS: tl.constexpr, BLOCK_N: tl.constexpr):
    """Rows per split: ceil(length / NUM_SPLITS) rounded up to whole BLOCK_N tiles (at least one tile)."""
    per_split = tl.cdiv(tl.cdiv(length, NUM_SPLITS), BLOCK_N) * BLOCK_N
    return tl.maximum(per_split, BLOCK_N)


@triton.jit
def mla_decode_kernel(
    q_ptr, kv_ptr, len_ptr, out_ptr, part_ptr, lse_ptr,
    n_heads, qk_scale,  # qk_scale = sm_scale * log2(e): scores in log2 units, so exp2 below
    stride_qb, stride_qh, stride_kb, stride_kt, stride_ob, stride_oh,
    stride_pb, stride_ps, stride_ph, stride_lb, stride_ls,
    KV_LORA: tl.constexpr, ROPE_DIM: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, EVEN_HEADS: tl.constexpr,
):
    """One (sequence, head block, split): online softmax over the split's rows, in fp32."""
    b = tl.program_id(0).to(tl.int64)  # b * stride_kb passes 2**31 elements for large caches
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    length = tl.load(len_ptr + b)
    per_split = _split_rows(length, NUM_SPLITS, BLOCK_N)
    start = split * per_split
    end = tl.minimum(start + per_split, length)
    offs_c = tl.arange(0, KV_LORA)
    offs_r = KV_LORA + tl.arange(0, ROPE_DIM)
    head_ok = heads < n_heads
    if start < end:
        q_row = q_ptr + b * stride_qb + heads[:, None] * stride_qh
        if EVEN_HEADS:
            q_c = tl.load(q_row + offs_c[None, :])
            q_r = tl.load(q_row + offs_r[None, :])
        else:
            q_c = tl.load(q_row + offs_c[None, :], mask=head_ok[:, None], other=0.0)
            q_r = tl.load(q_row + offs_r[None, :], mask=head_ok[:, None], other=0.0)
        m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
        acc = tl.zeros([BLOCK_H, KV_LORA], dtype=tl.float32)
        for t0 in range(start, end, BLOCK_N):
            rows = t0 + tl.arange(0, BLOCK_N)
            row_ok = rows < end
            kv_row = kv_ptr + b * stride_kb + rows[:, None] * stride_kt
            c = tl.load(kv_row + offs_c[None, :], mask=row_ok[:, None], other=0.0)  # [BLOCK_N, KV_LORA]
            r = tl.load(kv_row + offs_r[None, :], mask=row_ok[:, None], other=0.0)  # [BLOCK_N, ROPE_DIM]
            s = tl.dot(q_c, tl.trans(c)) + tl.dot(q_r, tl.trans(r))  # [BLOCK_H, BLOCK_N], fp32
            s = tl.where(row_ok[None, :], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))  # finite: every tile holds at least one row
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + tl.dot(p.to(c.dtype), c)
            m_i = m_new
        o = acc / l_i[:, None]
        if NUM_SPLITS == 1:
            o_ptrs = out_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_c[None, :]
            if EVEN_HEADS:
                tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty))
            else:
                tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=head_ok[:, None])
        else:
            p_ptrs = part_ptr + b * stride_pb + split * stride_ps + heads[:, None] * stride_ph + offs_c[None, :]
            l_ptrs = lse_ptr + b * stride_lb + split * stride_ls + heads
            if EVEN_HEADS:
                tl.store(p_ptrs, o)
                tl.store(l_ptrs, m_i + tl.log2(l_i))
            else:
                tl.store(p_ptrs, o, mask=head_ok[:, None])
                tl.store(l_ptrs, m_i + tl.log2(l_i), mask=head_ok)


@triton.jit
def mla_merge_kernel(
    part_ptr, lse_ptr, len_ptr, out_ptr, n_heads,
    stride_pb, stride_ps, stride_ph, stride_lb, stride_ls, stride_ob, stride_oh,
    KV_LORA: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, EVEN_HEADS: tl.constexpr,
):
    """One (sequence, head block): weight each non-empty split's partial by 2**(lse - max), in fp32."""
    b = tl.program_id(0).to(tl.int64)
    heads = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    head_ok = heads < n_heads
    offs_c = tl.arange(0, KV_LORA)
    length = tl.load(len_ptr + b)
    n_valid = tl.cdiv(length, _split_rows(length, NUM_SPLITS, BLOCK_N))  # the splits that held rows
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_H], dtype=tl.float32)
    acc = tl.zeros([BLOCK_H, KV_LORA], dtype=tl.float32)
    for split in range(0, n_valid):
        p_ptrs = part_ptr + b * stride_pb + split * stride_ps + heads[:, None] * stride_ph + offs_c[None, :]
        l_ptrs = lse_ptr + b * stride_lb + split * stride_ls + heads
        if EVEN_HEADS:
            part = tl.load(p_ptrs)
            lse = tl.load(l_ptrs)
        else:
            part = tl.load(p_ptrs, mask=head_ok[:, None], other=0.0)
            lse = tl.load(l_ptrs, mask=head_ok, other=0.0)
        m_new = tl.maximum(m_i, lse)
        alpha = tl.exp2(m_i - m_new)
        w = tl.exp2(lse - m_new)
        acc = acc * alpha[:, None] + w[:, None] * part
        l_i = l_i * alpha + w
        m_i = m_new
    o = (acc / l_i[:, None]).to(out_ptr.dtype.element_ty)
    o_ptrs = out_ptr + b * stride_ob + heads[:, None] * stride_oh + offs_c[None, :]
    if EVEN_HEADS:
        tl.store(o_ptrs, o)
    else:
        tl.store(o_ptrs, o, mask=head_ok[:, None])


def default_sm_scale() -> float:
    """1 / sqrt(192): the softmax scale of the unabsorbed nope + rope head dim (DeepSeek-V3)."""
    return 1.0 / math.sqrt(QK_HEAD_DIM)


def mla_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    lengths: torch.Tensor,
    *,
    num_splits: int = 1,
    pad_heads_to: int = 0,
    sm_scale: float | None = None,
    kv_lora: int = KV_LORA,
    block_n: int = BLOCK_N,
    num_warps: int = NUM_WARPS,
    num_stages: int = NUM_STAGES,
) -> torch.Tensor:
    """Attention output (seqs, heads, kv_lora) in q's dtype for q (seqs, heads, kv_lora + rope).

    kv_cache is (seqs, max_len, kv_lora + rope) in q's dtype; lengths (seqs,) int32 holds each
    sequence's rows, each in [1, max_len] (not checked: that would synchronize the host). With
    pad_heads_to > heads the result is a view of the padded output, whose padding heads are dropped.
    """
    seqs, heads, width = q.shape
    rope = width - kv_lora
    if kv_cache.dim() != 3 or kv_cache.shape[0] != seqs or kv_cache.shape[2] != width:
        raise ValueError(f"kv_cache {tuple(kv_cache.shape)} does not match q {tuple(q.shape)}")
    if kv_cache.dtype != q.dtype or q.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"q and kv_cache must share bf16 or fp16, got {q.dtype} and {kv_cache.dtype}")
    if lengths.shape != (seqs,) or lengths.dtype != torch.int32:
        raise ValueError(f"lengths must be int32 of shape ({seqs},), got {lengths.dtype} {tuple(lengths.shape)}")
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    for name, value in (("kv_lora", kv_lora), ("rope", rope), ("block_n", block_n)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.arange and tl.dot), got {value}")
    if q.stride(2) != 1 or kv_cache.stride(2) != 1:
        raise ValueError("q and kv_cache must be contiguous in their last dimension")
    scale = default_sm_scale() if sm_scale is None else sm_scale
    padded = max(heads, pad_heads_to)
    if padded > heads:
        q_in = torch.empty(seqs, padded, width, device=q.device, dtype=q.dtype)
        pad_heads_kernel[(seqs * padded,)](
            q, q_in, heads, padded, q.stride(0), q.stride(1), q_in.stride(0), q_in.stride(1),
            WIDTH=width, BLOCK=triton.next_power_of_2(width), num_warps=num_warps,
        )
    else:
        q_in = q
    head_blocks = triton.cdiv(padded, BLOCK_H)
    even = padded % BLOCK_H == 0
    out = torch.empty(seqs, padded, kv_lora, device=q.device, dtype=q.dtype)
    if num_splits == 1:
        part = lse = out  # unused by the one-split kernel; any tensor fills the pointer slots
        part_strides, lse_strides = (0, 0, 0), (0, 0)
    else:
        part = torch.empty(seqs, num_splits, padded, kv_lora, device=q.device, dtype=torch.float32)
        lse = torch.empty(seqs, num_splits, padded, device=q.device, dtype=torch.float32)
        part_strides, lse_strides = part.stride()[:3], lse.stride()[:2]
    mla_decode_kernel[(seqs, head_blocks, num_splits)](
        q_in, kv_cache, lengths, out, part, lse, padded, scale * LOG2E,
        q_in.stride(0), q_in.stride(1), kv_cache.stride(0), kv_cache.stride(1), out.stride(0), out.stride(1),
        *part_strides, *lse_strides,
        KV_LORA=kv_lora, ROPE_DIM=rope, BLOCK_H=BLOCK_H, BLOCK_N=block_n, NUM_SPLITS=num_splits,
        EVEN_HEADS=even, num_warps=num_warps, num_stages=num_stages,
    )
    if num_splits > 1:
        mla_merge_kernel[(seqs, head_blocks)](
            part, lse, lengths, out, padded, *part_strides, *lse_strides, out.stride(0), out.stride(1),
            KV_LORA=kv_lora, BLOCK_H=BLOCK_H, BLOCK_N=block_n, NUM_SPLITS=num_splits, EVEN_HEADS=even,
            num_warps=num_warps,
        )
    return out[:, :heads] if padded > heads else out


def mla_decode_ref(
    q: torch.Tensor, kv_cache: torch.Tensor, lengths: torch.Tensor, *, sm_scale: float | None = None,
    kv_lora: int = KV_LORA,
) -> torch.Tensor:
    """Float64 plain softmax attention, sequence by sequence: (seqs, heads, kv_lora)."""
    scale = default_sm_scale() if sm_scale is None else sm_scale
    out = torch.empty(q.shape[0], q.shape[1], kv_lora, dtype=torch.float64, device=q.device)
    for b, n in enumerate(lengths.tolist()):
        c = kv_cache[b, :n].double()  # [n, width]
        p = torch.softmax((q[b].double() @ c.t()) * scale, dim=-1)  # [heads, n]
        out[b] = p @ c[:, :kv_lora]
    return out
