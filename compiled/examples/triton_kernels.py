"""Triton kernels as a user writes them, to predict with `infersim kernel --triton` before running them anywhere.

None of these is a companion kernel: the product has no model of them beyond their compiled code and what
Triton's interpreter counts of their loops and bytes. The H200 measurements of them (graph-launched) are in
validation/data/h200/user_kernels/, compared with the predictions by `python -m validation.user_kernels`.

    infersim kernel --hw mi355x --triton compiled.examples.triton_kernels:row_sums --grid 8192 \\
        --arg x=fp16[8192,4096] --arg out=fp32[8192] --arg cols=4096 --arg stride=4096 --arg BLOCK=1024
"""

import triton
import triton.language as tl


@triton.jit
def scale_add(x, y, out, n, alpha, BLOCK: tl.constexpr):
    """out = alpha * x + y over n values, one BLOCK per program (the last one masked)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out + offs, alpha * tl.load(x + offs, mask=mask) + tl.load(y + offs, mask=mask), mask=mask)


@triton.jit
def matmul(a, b, c, M, N, K, sam, sak, sbk, sbn, scm, scn, BM: tl.constexpr, BN: tl.constexpr,
           BK: tl.constexpr):
    """c = a @ b in bf16 with fp32 accumulation: one BM x BN tile per program, a loop over K in BK steps."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        x = tl.load(a + rm[:, None] * sam + (k + rk)[None, :] * sak,
                    mask=(rm[:, None] < M) & ((k + rk)[None, :] < K), other=0.0)
        y = tl.load(b + (k + rk)[:, None] * sbk + rn[None, :] * sbn,
                    mask=((k + rk)[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(x, y)
    tl.store(c + rm[:, None] * scm + rn[None, :] * scn, acc.to(tl.bfloat16),
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def row_sums(x, out, cols, stride, BLOCK: tl.constexpr):
    """out[row] = the fp32 sum of x[row, :cols]: one row per program, a loop over the row in BLOCK steps."""
    row = tl.program_id(0)
    total = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        total += tl.load(x + row * stride + offs, mask=offs < cols, other=0.0).to(tl.float32)
    tl.store(out + row, tl.sum(total))


@triton.jit
def softmax(x, out, cols, stride, BLOCK: tl.constexpr):
    """out[row] = softmax(x[row, :cols]) in one pass: the whole row in one BLOCK, no loop."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + row * stride + offs, mask=offs < cols, other=-float("inf")).to(tl.float32)
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out + row * stride + offs, (e / tl.sum(e, axis=0)).to(tl.float16), mask=offs < cols)
