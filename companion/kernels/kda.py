"""Kimi Delta Attention in Triton: chunked prefill (chunk 64, fp32 UT transform), recurrent decode, speculative verify.

The recurrence and its float64 reference are in `kda_ref.py` (reference C.3, FLA `fla/ops/kda`). Layouts, as in FLA:
q, k [B, T, H, K] and v [B, T, H, V] bf16; g [B, T, H, K] fp32 log gates; beta [B, T, H] fp32; state
[B, H, K, V] fp32. Keys (and queries) come L2-normalised from the caller, as FLA's layer makes them
(`use_qk_l2norm_in_kernel`); the kernels do not renormalise. K, V and the value tile BV are powers of two;
the head count is a runtime argument. No vendor-specific code: the same source runs on CUDA and ROCm.

Prefill, two launches mirroring FLA's `chunk_kda_fwd` (the plain path of `workloads.kda_kernels.KdaPrefill`):
1. `kda_intra_kernel`, grid (chunks, B*H), 8 warps: per 64-token chunk the in-chunk gate cumsum G, A_kk and
   A_qk with the gates, T = (I + diag(beta) A_kk)^-1 by forward substitution, and the WY representation
   w = T (beta k e^G), u = T (beta v), all on fp32 values: the solve is elementwise fp32, the dots take fp32
   operands at tl.dot's default precision (tf32 on NVIDIA, as FLA's; full fp32 on AMD). It stores w, u,
   kg = k e^(G_last - G) and qg = scale q e^G in bf16, A_qk in fp32 and each chunk's decay e^(G_last).
   Gates must lie in K3's safe range [-5, 0) (reference C.3), which keeps the split gate factors finite.
2. `kda_scan_kernel`, grid (V/BV, B*H), 8 warps: the sequential scan over chunks with the state slice
   (K x BV fp32) in registers: v_new = u - w h; o = qg h + A_qk v_new; h <- e^(G_last) h + kg^T v_new.
   As in FLA the dots take bf16 operands (h and v_new rounded) and accumulate in fp32.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

CHUNK = 64  # tokens per chunk (FLA default BT, reference C.3)
SUB_CHUNK = 16  # rows of A built per dot; one exp reference point each (FLA's BC)
# The gate factors of A_kk/A_qk are split around a reference token in the middle of each 16-row
# sub-chunk: e^(G_r - G_ref) e^(G_ref - G_j). Both stay below e^(8*5) for log gates >= -5 (K3's safe
# gate, reference C.3); the clamp keeps the factors of masked (j > r) columns finite.
EXP_CLAMP = 80.0
PREFILL_WARPS = 8
RECURRENT_WARPS = 4  # FLA fused_recurrent: num_warps = 4


@triton.jit
def _dot_bf16(a, b, F32: tl.constexpr):
    """a @ b on bf16-rounded operands, fp32 accumulation; F32: the same products as fp32 dots (interpreter)."""
    a = a.to(tl.bfloat16)
    b = b.to(tl.bfloat16)
    return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee") if F32 else tl.dot(a, b)


@triton.jit
def kda_intra_kernel(q, k, v, g, beta, w, u, kg, qg, a_qk, decay, T, H, scale,
                     K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BC: tl.constexpr,
                     CLAMP: tl.constexpr):
    """One chunk of one head: UT transform and WY representation, all in fp32; see the module docstring."""
    n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b, h = bh // H, bh % H
    n_chunks = tl.cdiv(T, BT)
    t0 = n * BT
    rows = tl.arange(0, BT)
    ck = tl.arange(0, K)
    cv = tl.arange(0, V)
    valid = (t0 + rows) < T
    tok = (b * T + t0 + rows) * H + h  # row of each token in the [B*T*H] token index
    g_all = tl.load(g + tok[:, None] * K + ck[None, :], mask=valid[:, None], other=0.0)
    G = tl.cumsum(g_all, axis=0)  # rows past T add 0, so the last row holds G_last
    k_all = tl.load(k + tok[:, None] * K + ck[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
    q_all = tl.load(q + tok[:, None] * K + ck[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
    beta_all = tl.load(beta + tok, mask=valid, other=0.0).to(tl.float32)

    # A[r, j] = sum_d x_rd k_jd e^(G_rd - G_jd), built 16 rows at a time with the factors split at the
    # sub-chunk's middle token; rows outside the sub-chunk and later columns are zeroed, not computed apart
    a_kk = tl.zeros([BT, BT], dtype=tl.float32)
    a_qk_c = tl.zeros([BT, BT], dtype=tl.float32)
    for i in tl.static_range(BT // BC):
        ref = tl.sum(tl.where(rows[:, None] == i * BC + BC // 2, G, 0.0), axis=0)
        in_i = (rows >= i * BC) & (rows < (i + 1) * BC)
        row_f = tl.where(in_i[:, None], tl.exp(tl.minimum(G - ref[None, :], CLAMP)), 0.0)
        col = tl.where(rows[:, None] < (i + 1) * BC, k_all * tl.exp(tl.minimum(ref[None, :] - G, CLAMP)), 0.0)
        col = tl.trans(col)
        # fp32 operands at tl.dot's default precision: tf32 on NVIDIA (as FLA), fp32 on AMD matrix cores
        a_kk += tl.dot(k_all * row_f, col)
        a_qk_c += tl.dot(q_all * row_f, col)
    a_kk = tl.where(rows[:, None] > rows[None, :], a_kk, 0.0)  # strictly lower
    a_qk_c = tl.where(rows[:, None] >= rows[None, :], a_qk_c, 0.0)  # the output sees its own token

    e_g = tl.exp(G)
    g_last = tl.sum(tl.where(rows[:, None] == BT - 1, G, 0.0), axis=0)
    row = bh * T + t0 + rows  # row in the [B*H, T, *] intermediates
    mk = valid[:, None]
    tl.store(qg + row[:, None] * K + ck[None, :], (q_all * e_g * scale).to(tl.bfloat16), mask=mk)
    tl.store(kg + row[:, None] * K + ck[None, :], (k_all * tl.exp(g_last[None, :] - G)).to(tl.bfloat16), mask=mk)
    a_row = (bh * n_chunks + n) * BT + rows
    tl.store(a_qk + a_row[:, None] * BT + rows[None, :], a_qk_c * scale)
    tl.store(decay + (bh * n_chunks + n) * K + ck, tl.exp(g_last))

    # T = (I + L)^-1 with L = diag(beta) A_kk strictly lower, by forward substitution in fp32:
    # T[r] = e_r - sum_{j<r} L[r, j] T[j]. L is kept transposed so that row r comes out indexed by j.
    lower_t = tl.trans(a_kk * beta_all[:, None])
    t_inv = (rows[:, None] == rows[None, :]).to(tl.float32)
    for rr in range(1, BT):
        l_r = tl.sum(tl.where(rows[None, :] == rr, lower_t, 0.0), axis=1)
        t_r = tl.sum(l_r[:, None] * t_inv, axis=0)
        t_inv = tl.where(rows[:, None] == rr, t_inv - t_r[None, :], t_inv)

    w_c = tl.dot(t_inv, k_all * (beta_all[:, None] * e_g))
    tl.store(w + row[:, None] * K + ck[None, :], w_c.to(tl.bfloat16), mask=mk)
    v_all = tl.load(v + tok[:, None] * V + cv[None, :], mask=valid[:, None], other=0.0).to(tl.float32)
    u_c = tl.dot(t_inv, v_all * beta_all[:, None])
    tl.store(u + row[:, None] * V + cv[None, :], u_c.to(tl.bfloat16), mask=mk)


@triton.jit
def kda_scan_kernel(w, u, kg, qg, a_qk, decay, h0, o, ht, T, H,
                    K: tl.constexpr, V: tl.constexpr, BT: tl.constexpr, BV: tl.constexpr, DOT_F32: tl.constexpr):
    """One value tile of one head: the ordered pass over chunks, writing o and the final state."""
    i_v = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b, h = bh // H, bh % H
    n_chunks = tl.cdiv(T, BT)
    rows = tl.arange(0, BT)
    ck = tl.arange(0, K)
    cv = i_v * BV + tl.arange(0, BV)
    state_offs = bh * K * V + ck[:, None] * V + cv[None, :]
    state = tl.load(h0 + state_offs)
    for n in range(n_chunks):
        t0 = n * BT
        mk = ((t0 + rows) < T)[:, None]
        row = bh * T + t0 + rows
        w_n = tl.load(w + row[:, None] * K + ck[None, :], mask=mk, other=0.0)
        u_n = tl.load(u + row[:, None] * V + cv[None, :], mask=mk, other=0.0).to(tl.float32)
        v_new = (u_n - _dot_bf16(w_n, state, DOT_F32)).to(tl.bfloat16)
        qg_n = tl.load(qg + row[:, None] * K + ck[None, :], mask=mk, other=0.0)
        a_n = tl.load(a_qk + ((bh * n_chunks + n) * BT + rows)[:, None] * BT + rows[None, :])
        out = _dot_bf16(qg_n, state, DOT_F32) + _dot_bf16(a_n, v_new, DOT_F32)
        tok = (b * T + t0 + rows) * H + h
        tl.store(o + tok[:, None] * V + cv[None, :], out.to(tl.bfloat16), mask=mk)
        kg_n = tl.load(kg + row[:, None] * K + ck[None, :], mask=mk, other=0.0)
        d_n = tl.load(decay + (bh * n_chunks + n) * K + ck)
        state = state * d_n[:, None] + _dot_bf16(tl.trans(kg_n), v_new, DOT_F32)
    tl.store(ht + state_offs, state)


@triton.jit
def kda_recurrent_kernel(q, k, v, g, beta, state, o, states, T, H, scale,
                         K: tl.constexpr, V: tl.constexpr, BV: tl.constexpr, STORE_STATES: tl.constexpr):
    """T tokens of one head on one value tile, token by token, the K x BV fp32 state in registers."""
    i_v = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    b, h = bh // H, bh % H
    ck = tl.arange(0, K)
    cv = i_v * BV + tl.arange(0, BV)
    tile = ck[:, None] * V + cv[None, :]
    s = tl.load(state + bh * K * V + tile)
    for t in range(T):
        tok = (b * T + t) * H + h
        q_t = tl.load(q + tok * K + ck).to(tl.float32)
        k_t = tl.load(k + tok * K + ck).to(tl.float32)
        g_t = tl.load(g + tok * K + ck).to(tl.float32)
        v_t = tl.load(v + tok * V + cv).to(tl.float32)
        b_t = tl.load(beta + tok).to(tl.float32)
        s = s * tl.exp(g_t)[:, None]
        delta = b_t * (v_t - tl.sum(s * k_t[:, None], axis=0))
        s = s + k_t[:, None] * delta[None, :]
        tl.store(o + tok * V + cv, (tl.sum(s * q_t[:, None], axis=0) * scale).to(tl.bfloat16))
        if STORE_STATES:
            tl.store(states + tok * K * V + tile, s)
    if not STORE_STATES:
        tl.store(state + bh * K * V + tile, s)


def _interpreted(x: torch.Tensor) -> bool:
    """Whether the Triton interpreter runs the kernels: its tl.dot multiplies bf16 bit patterns (triton#11584).

    CPU tensors can only run there; TRITON_INTERPRET=1 is how Triton itself is told to use it.
    """
    return x.device.type == "cpu" or os.environ.get("TRITON_INTERPRET") == "1"


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
           state: torch.Tensor, block_v: int, min_block: int) -> tuple[int, int, int, int, int]:
    """(B, T, H, K, V) after checking shapes, dtypes and contiguity; raises ValueError naming the problem."""
    b, t, h, kd = q.shape
    vd = v.shape[-1]
    shapes = {"k": (k, (b, t, h, kd)), "v": (v, (b, t, h, vd)), "g": (g, (b, t, h, kd)),
              "beta": (beta, (b, t, h)), "state": (state, (b, h, kd, vd))}
    for name, (x, want) in shapes.items():
        if tuple(x.shape) != want:
            raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {want}")
    for name, x in (("q", q), *((n, x) for n, (x, _) in shapes.items())):
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    if state.dtype != torch.float32 or g.dtype != torch.float32:
        raise ValueError(f"state and g must be float32, got {state.dtype} and {g.dtype}")
    if not (_is_pow2(kd) and _is_pow2(vd) and kd >= 16 and vd >= 16):
        raise ValueError(f"K and V must be powers of two >= 16, got {kd} and {vd}")
    if not (_is_pow2(block_v) and min_block <= block_v <= vd):
        raise ValueError(f"block_v must be a power of two in [{min_block}, V={vd}], got {block_v}")
    return b, t, h, kd, vd


def _output(buf: torch.Tensor | None, shape: tuple[int, ...], like: torch.Tensor, dtype: torch.dtype,
            name: str) -> torch.Tensor:
    """`buf` after checking it, else a new tensor: callers pass their own to rotate outputs across launches."""
    if buf is None:
        return torch.empty(shape, device=like.device, dtype=dtype)
    if tuple(buf.shape) != shape or buf.dtype != dtype or not buf.is_contiguous() or buf.device != like.device:
        raise ValueError(f"{name} must be a contiguous {dtype} tensor of shape {shape} on {like.device}")
    return buf


def kda_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                state: torch.Tensor, scale: float | None = None, block_v: int = 32, num_warps: int = PREFILL_WARPS,
                o: torch.Tensor | None = None, final: torch.Tensor | None = None,
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(o [B,T,H,V] bf16, final state [B,H,K,V] fp32) of a chunked prefill from `state` (left unchanged)."""
    b, t, h, kd, vd = _check(q, k, v, g, beta, state, block_v, min_block=16)  # tl.dot needs N >= 16
    scale = kd**-0.5 if scale is None else scale
    n_chunks = triton.cdiv(t, CHUNK)
    dev = q.device
    w = torch.empty(b * h, t, kd, device=dev, dtype=torch.bfloat16)
    kg, qg = torch.empty_like(w), torch.empty_like(w)
    u = torch.empty(b * h, t, vd, device=dev, dtype=torch.bfloat16)
    a_qk = torch.empty(b * h, n_chunks * CHUNK, CHUNK, device=dev, dtype=torch.float32)
    decay = torch.empty(b * h, n_chunks, kd, device=dev, dtype=torch.float32)
    kda_intra_kernel[(n_chunks, b * h)](q, k, v, g, beta, w, u, kg, qg, a_qk, decay, t, h, scale,
                                        K=kd, V=vd, BT=CHUNK, BC=SUB_CHUNK, CLAMP=EXP_CLAMP,
                                        num_warps=num_warps)
    o = _output(o, tuple(v.shape), v, torch.bfloat16, "o")
    final = _output(final, tuple(state.shape), v, torch.float32, "final")
    kda_scan_kernel[(vd // block_v, b * h)](w, u, kg, qg, a_qk, decay, state, o, final, t, h,
                                            K=kd, V=vd, BT=CHUNK, BV=block_v, DOT_F32=_interpreted(q),
                                            num_warps=num_warps)
    return o, final


def kda_verify(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor, store_states: bool = True, scale: float | None = None, block_v: int = 32,
               num_warps: int = RECURRENT_WARPS, o: torch.Tensor | None = None,
               states: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(o [B,T,H,V] bf16, states [B,T,H,K,V] fp32 or None) over T positions per sequence.

    store_states: every position's state goes to `states` for rollback and `state` is left as it was;
    otherwise only the final state is written, in place into `state`.
    """
    b, t, h, kd, vd = _check(q, k, v, g, beta, state, block_v, min_block=1)
    scale = kd**-0.5 if scale is None else scale
    o = _output(o, tuple(v.shape), v, torch.bfloat16, "o")
    if store_states:
        states = _output(states, (b, t, h, kd, vd), v, torch.float32, "states")
    elif states is not None:
        raise ValueError("states is written only with store_states=True")
    kda_recurrent_kernel[(vd // block_v, b * h)](q, k, v, g, beta, state, o, state if states is None else states,
                                                 t, h, scale, K=kd, V=vd, BV=block_v,
                                                 STORE_STATES=store_states, num_warps=num_warps)
    return o, states


def kda_decode(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
               state: torch.Tensor, scale: float | None = None, block_v: int = 32,
               num_warps: int = RECURRENT_WARPS, o: torch.Tensor | None = None) -> torch.Tensor:
    """o [B,1,H,V] bf16 of one token per sequence; `state` [B,H,K,V] fp32 is updated in place."""
    if q.shape[1] != 1:
        raise ValueError(f"decode takes one token per sequence, got {q.shape[1]}")
    return kda_verify(q, k, v, g, beta, state, store_states=False, scale=scale, block_v=block_v,
                      num_warps=num_warps, o=o)[0]
