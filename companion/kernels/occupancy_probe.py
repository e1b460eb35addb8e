"""Occupancy probe: fixed, latency-bound work per program, with a shared-memory reservation set by constexprs.

Each program does two things:

1. Stages `k_iters` fp16 tile pairs A_i (TILE x BK) and B_i (BK x TILE) through shared memory into a
   `tl.dot`: loads that feed a dot in a loop are software-pipelined by Triton into `num_stages`
   shared buffers, so the reservation is a function of BK and num_stages (sm_90, triton 3.9:
   (num_stages - 1) * 2 * TILE * BK * 2 bytes) while registers stay low, since the async copies bypass
   them. The real reservation is read from the compiled kernel (`.metadata.shared`), never assumed.
2. Chases `steps` dependent pointers through its own segment of `table`: every step is a volatile
   (L2, not L1) load whose address is the previous load's value, so a program's time is `steps`
   memory latencies, whatever else runs on the SM, until the memory system saturates.

So the time of a launch is about (waves of resident programs) x (one program's time), and a larger
reservation that lowers the programs resident per SM shows as a step.

Documented result, per program p with segment length S:
  dot[p] = sum over i of every entry of A_i @ B_i (the same for all programs);
  start  = p * S + int(dot[p]) mod S, then `steps` times idx = table[idx];
  pos[p] = idx - p * S, the final position within the segment.
Inputs hold small non-negative integers, so the dot sum is exact in fp32 and the chase reproducible.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

TILE = 16  # M and N of the staged dot: the smallest tl.dot accepts on the GPU
STAGED_TILES = 2  # k_iters the suite uses: few loads (the work stays fixed), never 1 (Triton specializes 1)
MAX_INPUT_VALUE = 3  # inputs are integers in 0..3, so sums stay exact in fp32 (< 2^24 for BK * k_iters < 2^14)


@triton.jit
def occupancy_probe_kernel(a_ptr, b_ptr, table_ptr, pos_ptr, dot_ptr, k_iters, steps, segment,
                           TILE: tl.constexpr, BK: tl.constexpr):
    """Stage k_iters tile pairs through shared memory into a dot, then chase `steps` pointers."""
    pid = tl.program_id(0)
    rt = tl.arange(0, TILE)
    rk = tl.arange(0, BK)
    a_ptrs = a_ptr + rt[:, None] * BK + rk[None, :]
    b_ptrs = b_ptr + rk[:, None] * TILE + rt[None, :]
    acc = tl.zeros([TILE, TILE], dtype=tl.float32)
    for _ in range(k_iters):
        acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
        a_ptrs += TILE * BK
        b_ptrs += BK * TILE
    total = tl.sum(tl.sum(acc, axis=1), axis=0)
    base = pid * segment
    idx = base + total.to(tl.int32) % segment
    for _ in range(steps):
        idx = tl.load(table_ptr + idx, volatile=True)
    tl.store(pos_ptr + pid, idx - base)
    tl.store(dot_ptr + pid, total)


def chase_table(programs: int, segment: int, rng: torch.Generator) -> torch.Tensor:
    """int32 table of programs x segment entries; each segment is one random cycle through all its entries."""
    order = torch.rand(programs, segment, generator=rng).argsort(dim=1)  # visiting order within a segment
    base = torch.arange(programs).unsqueeze(1) * segment
    table = torch.empty(programs, segment, dtype=torch.int64)
    table.scatter_(1, order, order.roll(-1, dims=1) + base)
    return table.flatten().to(torch.int32)


def probe_inputs(k_iters: int, block_k: int, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random integer-valued fp16 tiles A (k_iters, TILE, BK) and B (k_iters, BK, TILE) on the CPU.

    fp16, not bf16: triton 3.9's interpreter multiplies bf16 dot operands as their raw uint16 bits.
    """
    a = torch.randint(0, MAX_INPUT_VALUE + 1, (k_iters, TILE, block_k), generator=rng)
    b = torch.randint(0, MAX_INPUT_VALUE + 1, (k_iters, block_k, TILE), generator=rng)
    return a.to(torch.float16), b.to(torch.float16)


def occupancy_probe(
    a: torch.Tensor, b: torch.Tensor, table: torch.Tensor, programs: int, steps: int, *,
    num_stages: int, num_warps: int = 4,
) -> tuple[torch.Tensor, torch.Tensor, object]:
    """(pos, dot, compiled kernel) of one launch on `programs` programs; the kernel is None in the interpreter."""
    k_iters, tile, block_k = a.shape
    if tile != TILE or b.shape != (k_iters, block_k, TILE):
        raise ValueError(f"need a ({k_iters}, {TILE}, BK) and b ({k_iters}, BK, {TILE}); got {tuple(a.shape)}, "
                         f"{tuple(b.shape)}")
    if table.numel() % programs:
        raise ValueError(f"table of {table.numel()} entries does not split into {programs} segments")
    pos = torch.empty(programs, dtype=torch.int32, device=a.device)
    dot = torch.empty(programs, dtype=torch.float32, device=a.device)
    compiled = occupancy_probe_kernel[(programs,)](
        a, b, table, pos, dot, k_iters, steps, table.numel() // programs,
        TILE=TILE, BK=block_k, num_warps=num_warps, num_stages=num_stages,
    )
    return pos, dot, compiled


def occupancy_probe_ref(
    a: torch.Tensor, b: torch.Tensor, table: torch.Tensor, programs: int, steps: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference (pos int64, dot float64): the dot sum in float64, the chase in integer indexing."""
    total = torch.einsum("imk,ikn->", a.double(), b.double())
    segment = table.numel() // programs
    base = torch.arange(programs, dtype=torch.int64, device=table.device) * segment
    idx = base + int(total.item()) % segment
    table = table.long()
    for _ in range(steps):
        idx = table[idx]
    return idx - base, total.expand(programs).clone()
