"""Probe kernels: the microbenchmarks that measure the hardware constants of the cycle-level cost model.

Each kernel isolates one mechanism the model charges for: a dependent memory round trip (pointer chase),
bytes in flight against bandwidth (read-only streaming), L2 reuse (repeated passes over a footprint),
the floor of a tiny kernel, the issue rate and dependent latency of one kind of instruction, the latency
of a dependent chain of matrix instructions, and the cost of data that crosses warps through shared
memory (a cross-warp reduction, a layout conversion).

Cycles are read inside a kernel with `%clock64` (the SM's own cycle counter) when `USE_CLOCK` is set; the
Triton interpreter cannot run inline PTX, so on the CPU the kernels run with `USE_CLOCK=False` and write
0 cycles. Every kernel loads its operands from memory and stores its result, so the compiler can neither
fold the work at compile time nor drop it as dead.

The launch helpers and references at the bottom are what the tests compare, and what the bench launches.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

# Operation kinds of the issue probe (constexpr OP) and the SASS instructions one step of each issues
# per element (sm_90, checked on the compiled kernels): FFMA; IMAD; two SHF.R + one LOP3 (the two xors fuse
# into one three-input LOP3); MUFU.EX2 (the negation is an operand modifier); `frnd_mix`: one FRND.FLOOR
# among MIX_FFMA + 1 FFMAs, so the scheduler's issue binds, not the conversion unit: what a conversion costs
# the issue slots beyond its one cycle.
ISSUE_OPS = {"fp32_fma": 0, "int32_mad": 1, "bit": 2, "exp2": 3, "frnd_mix": 4}
MIX_FFMA = 15
_MIX_FFMA = tl.constexpr(MIX_FFMA)  # the same, readable inside a kernel
INSTRUCTIONS_PER_STEP = {"fp32_fma": 1, "int32_mad": 1, "bit": 3, "exp2": 1, "frnd_mix": MIX_FFMA + 2}
ISSUE_UNROLL = 16  # steps per loop trip, so the loop's own counter, compare and branch cost < 2 % of issue slots
CACHE_LINE_BYTES = 128


@triton.jit
def read_clock(USE_CLOCK: tl.constexpr):
    """The SM cycle counter (`%clock64`) when USE_CLOCK, else 0 (the interpreter cannot run inline PTX)."""
    if USE_CLOCK:
        t = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    else:
        t = tl.full([], 0, tl.int64)
    return t


@triton.jit
def record_clock(clk_ptr, t0, t1, USE_CLOCK: tl.constexpr):
    """clk[p] = (start cycle, end cycle, SM id) of program p: per-SM spans, since each SM has its own counter."""
    pid = tl.program_id(0)
    if USE_CLOCK:
        sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)
    else:
        sm = tl.full([], 0, tl.int32)
    tl.store(clk_ptr + 3 * pid, t0)
    tl.store(clk_ptr + 3 * pid + 1, t1)
    tl.store(clk_ptr + 3 * pid + 2, sm.to(tl.int64))


# --- pointer chase -------------------------------------------------------------------------------------


@triton.jit
def chase_kernel(table_ptr, state_ptr, clk_ptr, steps, USE_CLOCK: tl.constexpr):
    """`steps` dependent loads i = table[i], from and back to state[0]; clk = `record_clock` of the chase.

    `.cg` caches the loads in L2 only, so a footprint that fits in L1 still measures L2. The next load's
    address is the previous load's value, so no two loads overlap: each step is one full round trip (plus
    the few integer instructions that form the address).
    """
    _chase(table_ptr, state_ptr, clk_ptr, steps, USE_CLOCK)


@triton.jit
def _chase(table_ptr, state_ptr, clk_ptr, steps, USE_CLOCK: tl.constexpr):
    i = tl.load(state_ptr)
    t0 = read_clock(USE_CLOCK)
    for _ in range(steps):
        i = tl.load(table_ptr + i, cache_modifier=".cg")
    t1 = read_clock(USE_CLOCK)
    tl.store(state_ptr, i)
    record_clock(clk_ptr, t0, t1, USE_CLOCK)


def chase_table(lines: int, generator: torch.Generator, device: str = "cpu") -> torch.Tensor:
    """int32 table of lines x 32 entries (one 128 B line per step); line heads form one random cycle.

    Entry 32 * p[j] holds 32 * p[j + 1] for a random permutation p, so the chase visits every line once per
    cycle in random order; the other entries are never read (left as zeros).
    """
    stride = CACHE_LINE_BYTES // 4
    if lines * stride >= 2**31:
        raise ValueError(f"{lines} lines of {CACHE_LINE_BYTES} B do not fit int32 indexing")
    perm = torch.randperm(lines, generator=generator).to(device)
    table = torch.zeros(lines * stride, dtype=torch.int32, device=device)
    table[perm * stride] = (perm.roll(-1) * stride).to(torch.int32)
    return table


def chase_ref(table: np.ndarray, start: int, steps: int) -> int:
    """Where the chase ends after `steps` loads from `start`."""
    i = start
    for _ in range(steps):
        i = int(table[i])
    return i


# --- streaming read: bytes in flight against bandwidth, and L2 reuse ----------------------------------


@triton.jit(do_not_specialize=["base_block"])
def read_sum_kernel(src_ptr, out_ptr, base_block, n_blocks, total_blocks, BLOCK: tl.constexpr,
                    CACHE_GLOBAL: tl.constexpr):
    """Program p sums blocks base + p, base + p + G, ... (mod total_blocks) below base + n_blocks; out[p] = sum.

    One iteration issues all BLOCK loads of a block before it adds any (num_stages=1: no prefetch of the
    next block), so a program has BLOCK * 4 bytes in flight, and G programs G times that. CACHE_GLOBAL
    bypasses L1 (`.cg`), so repeated blocks are served by L2, not L1.
    """
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in range(pid, n_blocks, g):
        block = (base_block + j) % total_blocks
        offs = block * BLOCK + tl.arange(0, BLOCK)
        if CACHE_GLOBAL:
            acc += tl.load(src_ptr + offs, cache_modifier=".cg")
        else:
            acc += tl.load(src_ptr + offs)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


def read_sum_ref(src: np.ndarray, programs: int, base_block: int, n_blocks: int, block: int) -> np.ndarray:
    """float64 sums per program of the blocks `read_sum_kernel` assigns it."""
    total_blocks = src.size // block
    blocks = src.reshape(total_blocks, block).astype(np.float64)
    out = np.zeros(programs)
    for j in range(n_blocks):
        out[j % programs] += blocks[(base_block + j) % total_blocks].sum()
    return out


@triton.jit(do_not_specialize=["base_tile"])
def tile_dot_kernel(src_ptr, w_ptr, out_ptr, base_tile, n_tiles, total_tiles, ROWS: tl.constexpr,
                    COLS: tl.constexpr, M: tl.constexpr):
    """Program p multiplies w [M, ROWS] by tiles base + p, base + p + G, ... (mod total_tiles) of src, each
    [ROWS, COLS] contiguous, into out[p] [M, COLS] (fp32 accumulation).

    The tile feeds a `tl.dot`, so with num_stages >= 2 Triton's software pipeline loads it with asynchronous
    copies into shared memory (sm_80+: LDGSTS, `num_stages - 1` tiles in flight a program); with num_stages=1
    it loads it through registers (LDG). The same kernel measures both ways a tile reaches a matrix unit.
    """
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    r = tl.arange(0, ROWS)
    c = tl.arange(0, COLS)
    m = tl.arange(0, M)
    w = tl.load(w_ptr + m[:, None] * ROWS + r[None, :])
    acc = tl.zeros([M, COLS], dtype=tl.float32)
    for j in range(pid, n_tiles, g):
        tile = (base_tile + j) % total_tiles
        acc = tl.dot(w, tl.load(src_ptr + (tile * ROWS + r[:, None]) * COLS + c[None, :]), acc)
    tl.store(out_ptr + pid * M * COLS + m[:, None] * COLS + c[None, :], acc)


def tile_dot_ref(src: np.ndarray, w: np.ndarray, programs: int, base_tile: int, n_tiles: int) -> np.ndarray:
    """float64 [programs, M, COLS] of `tile_dot_kernel`; src [total_tiles, ROWS, COLS], w [M, ROWS]."""
    tiles = src.astype(np.float64)
    out = np.zeros((programs, w.shape[0], src.shape[2]))
    for j in range(n_tiles):
        out[j % programs] += w.astype(np.float64) @ tiles[(base_tile + j) % src.shape[0]]
    return out


# --- tiny kernels for the launch floor -----------------------------------------------------------------


@triton.jit
def empty_kernel(x_ptr):
    """Does nothing: one node costs the launch (or graph node) alone."""
    pass


@triton.jit
def copy_release_kernel(src_ptr, dst_ptr, flags_ptr, BLOCK: tl.constexpr, RELEASES: tl.constexpr):
    """`copy_tile_kernel`, then a barrier and RELEASES flag writes with release semantics at system scope (each a
    MEMBAR.ALL.SYS and an ATOMG.EXCH.STRONG.SYS on sm_90), as QuickReduce's kernels end: flag r of program p is
    flags_ptr[r * num_programs + p], set to 1."""
    p = tl.program_id(0)
    offs = p * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs))
    tl.debug_barrier()
    for r in tl.static_range(RELEASES):
        tl.atomic_xchg(flags_ptr + r * tl.num_programs(0) + p, 1, sem="release", scope="sys")


@triton.jit
def copy_tile_kernel(src_ptr, dst_ptr, BLOCK: tl.constexpr):
    """Program p copies BLOCK elements at p * BLOCK: BLOCK = 1 is one dependent load then its store."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs))


@triton.jit
def tile_work_kernel(src_ptr, dst_ptr, n_tiles, BLOCK: tl.constexpr, ROUNDS: tl.constexpr):
    """Tiles p, p + P, p + 2P, ... of P programs: each loaded, put through ROUNDS multiply-adds per value (each
    value's its own dependent chain), stored. A grid of one program per tile runs the loop once."""
    for t in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        offs = t * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(src_ptr + offs)
        for _ in tl.static_range(ROUNDS):
            x = x * 0.75 + 0.25
        tl.store(dst_ptr + offs, x)


@triton.jit(do_not_specialize=["n_tiles"])
def drift_kernel(src_ptr, dst_ptr, n_tiles, BLOCK: tl.constexpr, ROUNDS: tl.constexpr, STORE: tl.constexpr):
    """Tiles p, p + P, p + 2P, ... of P persistent programs, each loaded and put through ROUNDS multiply-adds per
    value (each value its own dependent chain). STORE = 1 stores each tile to dst (reads and writes, as a
    recurrence's state update); STORE = 0 adds it into the program's running sum, written to dst[p] once at the
    end (reads only, as split-KV attention streams its cache)."""
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for t in range(tl.program_id(0), n_tiles, tl.num_programs(0)):
        offs = t * BLOCK + tl.arange(0, BLOCK)  # under 2**31 values at the probe's sizes
        x = tl.load(src_ptr + offs)
        for _ in tl.static_range(ROUNDS):
            x = x * 0.75 + 0.25
        if STORE:
            tl.store(dst_ptr + offs, x)
        else:
            acc += x
    if not STORE:
        tl.store(dst_ptr + tl.program_id(0), tl.sum(acc, axis=0))


def drift_reference(src: torch.Tensor, programs: int, block: int, rounds: int) -> torch.Tensor:
    """What `drift_kernel` writes in its read-only mode (float64): each program's sum over its tiles of the values
    after `rounds` multiply-adds."""
    tiles = tile_work_reference(src, rounds).view(-1, block)
    sums = torch.zeros(programs, dtype=torch.float64, device=src.device)
    sums.index_add_(0, torch.arange(tiles.shape[0], device=src.device) % programs, tiles.sum(dim=1))
    return sums


@triton.jit
def row_slice_kernel(src_ptr, dst_ptr, PITCH: tl.constexpr, R: tl.constexpr, ROWS: tl.constexpr,
                     STORE: tl.constexpr):
    """Program p touches the first R fp32 of each of rows p * ROWS ... (p + 1) * ROWS - 1, rows PITCH fp32 apart:
    STORE = 0 loads them and writes their sum to dst[p]; STORE = 1 writes p + 1 into them (no load)."""
    p = tl.program_id(0)
    rows = p.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    offs = rows[:, None] * PITCH + tl.arange(0, R)[None, :]
    if STORE:
        tl.store(dst_ptr + offs, tl.full([ROWS, R], 1.0, tl.float32) * (p + 1).to(tl.float32))
    else:
        tl.store(dst_ptr + p, tl.sum(tl.sum(tl.load(src_ptr + offs), axis=1), axis=0))


@triton.jit
def scattered_tile_kernel(src_ptr, dst_ptr, index_ptr, num_pid_m, PITCH: tl.constexpr, R: tl.constexpr,
                          ROWS: tl.constexpr, GROUP_M: tl.constexpr, STORE: tl.constexpr):
    """The memory access of the Triton fused-MoE kernel's tiles: program p takes row tile m and column tile n in
    that kernel's order (GROUP_M row tiles, every column tile of them, then the next GROUP_M), and touches R fp32
    from column n * R of the ROWS rows named by index[m * ROWS ...] (rows PITCH fp32 apart; as the kernel reads its
    activations and writes its output at the sorted token ids). STORE = 0 loads them and writes their sum to
    dst[p]; STORE = 1 writes (row % 4096) * PITCH + column + 1 into them (exact in fp32 for PITCH <= 4096)."""
    pid = tl.program_id(0)
    num_pid_n = PITCH // R
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    rows = tl.load(index_ptr + pid_m * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    cols = pid_n * R + tl.arange(0, R)
    offs = rows[:, None] * PITCH + cols[None, :]
    if STORE:
        tl.store(dst_ptr + offs, ((rows[:, None] % 4096) * PITCH + cols[None, :] + 1).to(tl.float32))
    else:
        tl.store(dst_ptr + pid, tl.sum(tl.sum(tl.load(src_ptr + offs), axis=1), axis=0))


def scattered_tile_order(num_pid_m: int, num_pid_n: int, group_m: int) -> np.ndarray:
    """(pid_m, pid_n) of each program of `scattered_tile_kernel` (the fused-MoE kernel's grouped order), [P, 2]."""
    pid = np.arange(num_pid_m * num_pid_n)
    in_group = group_m * num_pid_n
    first = pid // in_group * group_m
    size = np.minimum(num_pid_m - first, group_m)
    return np.stack([first + pid % in_group % size, pid % in_group // size], axis=1)


def scattered_tile_reference(src: np.ndarray, index: np.ndarray, pitch: int, r: int, rows: int,
                             group_m: int) -> np.ndarray:
    """What `scattered_tile_kernel` writes in load mode (float64): per program, the sum of its tile."""
    table = src.reshape(-1, pitch)[index].astype(np.float64)  # rows in index order
    num_pid_m, num_pid_n = index.size // rows, pitch // r
    sums = table.reshape(num_pid_m, rows, num_pid_n, r).sum(axis=(1, 3))
    order = scattered_tile_order(num_pid_m, num_pid_n, group_m)
    return sums[order[:, 0], order[:, 1]]


@triton.jit(do_not_specialize=["base"])
def column_tile_store_kernel(dst_ptr, base, PITCH: tl.constexpr, ROWS: tl.constexpr, C: tl.constexpr):
    """Program (t, b) writes column tile t, C fp32 wide, of the ROWS rows of block b (rows PITCH fp32 apart), from
    `base` on: the programs of one block, consecutive in the grid, fill its rows between them (the state store of a
    recurrence tiled over value columns). It writes b * PITCH + column + 1 (never zero)."""
    t = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    cols = t * C + tl.arange(0, C)
    rows = tl.arange(0, ROWS)
    offs = base + b * ROWS * PITCH + rows[:, None] * PITCH + cols[None, :]
    value = (b * PITCH + cols + 1).to(tl.float32)
    tl.store(dst_ptr + offs, tl.zeros([ROWS, C], tl.float32) + value[None, :])


@triton.jit(do_not_specialize=["base_block", "n_blocks"])
def stream_kernel(src_ptr, dst_ptr, base_block, n_blocks, total_blocks, BLOCK: tl.constexpr, MODE: tl.constexpr):
    """Background traffic of the loaded-latency probe: program p takes blocks base + p, base + p + G, ... (mod
    total_blocks) below base + n_blocks, BLOCK fp32 each. MODE 0 reads them (and adds them up, into dst[p]), 1
    writes each block's number + 1 (never zero) over it, 2 copies it from src to dst."""
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in range(pid, n_blocks, g):
        block = (base_block + j) % total_blocks
        offs = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        if MODE == 0:
            acc += tl.load(src_ptr + offs, cache_modifier=".cg")
        elif MODE == 1:
            tl.store(dst_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32) + (block + 1).to(tl.float32))
        else:
            tl.store(dst_ptr + offs, tl.load(src_ptr + offs, cache_modifier=".cg"))
    if MODE == 0:
        tl.store(dst_ptr + pid, tl.sum(acc, axis=0))


def row_slice_reference(src: np.ndarray, pitch: int, r: int, rows: int) -> np.ndarray:
    """What `row_slice_kernel` writes in load mode (float64): per program, the sum of its rows' first r values."""
    grid = src.size // (pitch * rows)
    return src[: grid * rows * pitch].reshape(grid, rows, pitch)[:, :, :r].astype(np.float64).sum(axis=(1, 2))


def tile_work_reference(src, rounds: int):
    """What `tile_work_kernel` writes, computed in float64 (x -> 0.75 x + 0.25, `rounds` times)."""
    x = src.double()
    for _ in range(rounds):
        x = x * 0.75 + 0.25
    return x


# --- issue rate and dependent latency of one kind of instruction ---------------------------------------


@triton.jit
def _step(x, a, b, OP: tl.constexpr):
    if OP == 0 or OP == 1:  # fp32 fma, or int32 multiply-add (wrapping): the dtype of x decides
        y = x * a + b
    elif OP == 2:  # xor-shift: two shifts and one three-input xor (an invertible map: never collapses to 0)
        y = (x ^ (x >> 7)) ^ (x >> 3)
    elif OP == 3:  # exp2 of the negation: stays in (0, 1), converges to x = 2^-x
        y = tl.exp2(-x)
    else:  # floor of a multiply-add, then MIX_FFMA multiply-adds (a = 1, b = 1/2: whole numbers step up by 8)
        y = tl.floor(x * a + b)
        for _ in tl.static_range(_MIX_FFMA):
            y = y * a + b
    return y


@triton.jit
def issue_kernel(x_ptr, coef_ptr, out_ptr, clk_ptr, trips, OP: tl.constexpr, CHAINS: tl.constexpr,
                 THREADS: tl.constexpr, UNROLL: tl.constexpr, USE_CLOCK: tl.constexpr):
    """Each thread runs CHAINS independent chains of trips * UNROLL dependent steps of one op kind.

    The tile is [CHAINS, THREADS] with THREADS = 32 * num_warps, so each thread holds CHAINS values (one
    per chain): with CHAINS = 1 every step waits for the previous one (latency), with CHAINS = 8 the
    scheduler has 8 independent instructions per warp per step (issue rate). Inputs and coefficients are
    loaded, the result stored, so nothing folds; clk = `record_clock` around the loop.
    """
    pid = tl.program_id(0)
    offs = pid * CHAINS * THREADS + tl.arange(0, CHAINS)[:, None] * THREADS + tl.arange(0, THREADS)[None, :]
    x = tl.load(x_ptr + offs)
    a = tl.load(coef_ptr)
    b = tl.load(coef_ptr + 1)
    t0 = read_clock(USE_CLOCK)
    for _ in range(trips):
        for _u in tl.static_range(UNROLL):
            x = _step(x, a, b, OP)
    t1 = read_clock(USE_CLOCK)
    tl.store(out_ptr + offs, x)
    record_clock(clk_ptr, t0, t1, USE_CLOCK)


@triton.jit
def shfl_mix_kernel(x_ptr, coef_ptr, out_ptr, clk_ptr, trips, CHAINS: tl.constexpr, WARPS: tl.constexpr,
                    UNROLL: tl.constexpr, USE_CLOCK: tl.constexpr):
    """The issue kernel's throughput shape with a warp-wide maximum in each step: x is [CHAINS, WARPS, 32] with
    the last axis across a warp's lanes, so `tl.max(x, axis=2)` is a shuffle tree (SHFL.BFLY and FMNMX), then
    x = x * a + max * b and MIX_FFMA multiply-adds; issue-bound at 8 warps a scheduler."""
    pid = tl.program_id(0)
    offs = (pid * CHAINS * WARPS * 32 + tl.arange(0, CHAINS)[:, None, None] * (WARPS * 32)
            + tl.arange(0, WARPS)[None, :, None] * 32 + tl.arange(0, 32)[None, None, :])
    x = tl.load(x_ptr + offs)
    a = tl.load(coef_ptr)
    b = tl.load(coef_ptr + 1)
    t0 = read_clock(USE_CLOCK)
    for _ in range(trips):
        for _u in tl.static_range(UNROLL):
            x = x * a + tl.max(x, axis=2)[:, :, None] * b
            for _k in tl.static_range(2 * _MIX_FFMA):
                x = x * a + b
    t1 = read_clock(USE_CLOCK)
    tl.store(out_ptr + offs, x)
    record_clock(clk_ptr, t0, t1, USE_CLOCK)


@triton.jit
def imad_mix_kernel(x_ptr, i_ptr, coef_ptr, icoef_ptr, out_ptr, iout_ptr, clk_ptr, trips, CHAINS: tl.constexpr,
                    THREADS: tl.constexpr, UNROLL: tl.constexpr, USE_CLOCK: tl.constexpr):
    """The issue kernel's throughput shape with two chains a value: an int32 multiply-add (IMAD) and 2 x MIX_FFMA
    fp32 multiply-adds a step; issue-bound at 8 warps a scheduler."""
    pid = tl.program_id(0)
    offs = pid * CHAINS * THREADS + tl.arange(0, CHAINS)[:, None] * THREADS + tl.arange(0, THREADS)[None, :]
    x = tl.load(x_ptr + offs)
    i = tl.load(i_ptr + offs)
    a = tl.load(coef_ptr)
    b = tl.load(coef_ptr + 1)
    ia = tl.load(icoef_ptr)
    ib = tl.load(icoef_ptr + 1)
    t0 = read_clock(USE_CLOCK)
    for _ in range(trips):
        for _u in tl.static_range(UNROLL):
            i = i * ia + ib
            for _k in tl.static_range(2 * _MIX_FFMA):
                x = x * a + b
    t1 = read_clock(USE_CLOCK)
    tl.store(out_ptr + offs, x)
    tl.store(iout_ptr + offs, i)
    record_clock(clk_ptr, t0, t1, USE_CLOCK)


def imad_mix_ref(x: np.ndarray, i: np.ndarray, a: float, b: float, ia: int, ib: int, steps: int):
    """What `imad_mix_kernel` writes: the fp32 chain in float64, the int32 chain wrapping exactly."""
    y = x.astype(np.float64)
    j = i.astype(np.int64)
    for _ in range(steps):
        j = (j * ia + ib) & 0xFFFFFFFF
        j = np.where(j >= 1 << 31, j - (1 << 32), j)
        for _ in range(2 * MIX_FFMA):
            y = y * a + b
    return y, j


def shfl_mix_ref(x: np.ndarray, a: float, b: float, steps: int) -> np.ndarray:
    """What `shfl_mix_kernel` writes, in float64: x of shape [..., 32], per step the lane maximum, then the
    multiply-adds."""
    y = x.astype(np.float64)
    for _ in range(steps):
        y = y * a + y.max(axis=-1, keepdims=True) * b
        for _ in range(2 * MIX_FFMA):
            y = y * a + b
    return y


def issue_ref(op: str, x: np.ndarray, a, b, steps: int) -> np.ndarray:
    """The issue kernel's result after `steps` steps: float64 for the float ops, exact wrapping int32 else."""
    if op == "frnd_mix":
        y = x.astype(np.float64)
        for _ in range(steps):
            y = np.floor(y * float(a) + float(b))
            for _ in range(MIX_FFMA):
                y = y * float(a) + float(b)
        return y
    if op in ("fp32_fma", "exp2"):
        y = x.astype(np.float64)
        for _ in range(steps):
            y = y * float(a) + float(b) if op == "fp32_fma" else np.exp2(-y)
        return y
    y = x.astype(np.int64)
    mask = (1 << 32) - 1

    def wrap(v: np.ndarray) -> np.ndarray:
        v = v & mask
        return np.where(v >= 1 << 31, v - (1 << 32), v)

    for _ in range(steps):  # bit: arithmetic right shifts of the signed value, as Triton's int32 >>
        y = wrap(y * int(a) + int(b)) if op == "int32_mad" else (y ^ (y >> 7)) ^ (y >> 3)
    return y


# --- dependent matrix instructions ---------------------------------------------------------------------


@triton.jit
def mma_chain_kernel(a_ptr, b_ptr, out_ptr, clk_ptr, dots, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                     USE_CLOCK: tl.constexpr):
    """acc = dot(a, b, acc) `dots` times on tiles held in registers; each dot needs the previous acc.

    out = acc = dots * (a @ b) in fp32; clk = `record_clock` of the chain. Triton keeps the operands in shared
    memory and re-reads them every iteration (ldmatrix for mma.sync; wgmma reads them from shared memory
    itself); those reads do not depend on acc, so they overlap the chain, whose step is the dot's latency.
    """
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    acc = tl.zeros([M, N], dtype=tl.float32)
    t0 = read_clock(USE_CLOCK)
    for _ in range(dots):
        acc = tl.dot(a, b, acc)
    t1 = read_clock(USE_CLOCK)
    tl.store(out_ptr + rm[:, None] * N + rn[None, :], acc)
    record_clock(clk_ptr, t0, t1, USE_CLOCK)


@triton.jit
def read_timer(USE_CLOCK: tl.constexpr):
    """The GPU's nanosecond timer (`%globaltimer`) when USE_CLOCK, else 0."""
    if USE_CLOCK:
        t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    else:
        t = tl.full([], 0, tl.int64)
    return t


@triton.jit
def sm_clock_kernel(a_ptr, b_ptr, x_ptr, acc_ptr, y_ptr, clk_ptr, steps, c, d, M: tl.constexpr, N: tl.constexpr,
                    K: tl.constexpr, DOT: tl.constexpr, FMAS: tl.constexpr, USE_CLOCK: tl.constexpr):
    """`steps` steps of (acc = dot(a, b, acc) when DOT) then FMAS dependent y = y * c + d on a [M, N] tile, each
    program on its own copy; clk[p] = (SM cycles, timer ns) of program p's loop: its SM's clock over the loop.

    acc = steps * (a @ b) (zero without DOT); y = x after steps * FMAS steps of y * c + d. With DOT the loop issues
    matrix instructions (mma.sync for M = 16, wgmma for M = 64 on sm_90), without it only FFMAs."""
    pid = tl.program_id(0)
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    y = tl.load(x_ptr + rm[:, None] * N + rn[None, :])
    acc = tl.zeros([M, N], dtype=tl.float32)
    t0 = read_clock(USE_CLOCK)
    n0 = read_timer(USE_CLOCK)
    for _ in range(steps):
        if DOT:
            acc = tl.dot(a, b, acc)
        for _ in tl.static_range(FMAS):
            y = y * c + d
    t1 = read_clock(USE_CLOCK)
    n1 = read_timer(USE_CLOCK)
    tile = pid * M * N + rm[:, None] * N + rn[None, :]
    tl.store(acc_ptr + tile, acc)
    tl.store(y_ptr + tile, y)
    tl.store(clk_ptr + 2 * pid, t1 - t0)
    tl.store(clk_ptr + 2 * pid + 1, n1 - n0)


def sm_clock_reference(a: np.ndarray, b: np.ndarray, x: np.ndarray, steps: int, fmas: int, c: float, d: float,
                       dot: bool) -> tuple[np.ndarray, np.ndarray]:
    """(acc, y) of one `sm_clock_kernel` program, in float64."""
    acc = steps * (a.astype(np.float64) @ b.astype(np.float64)) if dot else np.zeros((a.shape[0], b.shape[1]))
    y = x.astype(np.float64)
    for _ in range(steps * fmas):
        y = y * c + d
    return acc, y


# --- data across warps: reduction round trip and layout conversion -------------------------------------


@triton.jit
def reduce_chain_kernel(x_ptr, s_ptr, out_ptr, clk_ptr, rounds, BLOCK: tl.constexpr, USE_CLOCK: tl.constexpr):
    """s = sum(x * s) `rounds` times over a BLOCK vector spread across every warp; out[0] = s.

    Each round is a full cross-warp reduction whose result every thread needs before the next round:
    in-warp shuffles, a shared-memory store, a barrier, a shared-memory load and the final combine.
    """
    x = tl.load(x_ptr + tl.arange(0, BLOCK))
    s = tl.load(s_ptr)
    t0 = read_clock(USE_CLOCK)
    for _ in range(rounds):
        s = tl.sum(x * s, axis=0)
    t1 = read_clock(USE_CLOCK)
    tl.store(out_ptr, s)
    record_clock(clk_ptr, t0, t1, USE_CLOCK)


@triton.jit
def transpose_chain_kernel(x_ptr, c_ptr, out_ptr, clk_ptr, rounds, T: tl.constexpr, USE_CLOCK: tl.constexpr):
    """t = trans(t) * c `rounds` times on a [T, T] fp32 tile per program; out = the program's final tile.

    c is [T, T] in the tile's own layout, so trans(t) must be brought back to that layout every round:
    a layout conversion that writes the whole tile to shared memory and reads it back in the other order
    (T = 128, 8 warps, sm_90: 64 STS.32 and 64 LDS.32 per thread and two barriers per round, 64 KiB of
    shared memory and ~180 registers per thread, so one program is resident per SM at a time).
    """
    pid = tl.program_id(0)
    r = tl.arange(0, T)
    offs = r[:, None] * T + r[None, :]
    t = tl.load(x_ptr + pid * T * T + offs)
    c = tl.load(c_ptr + offs)
    t0 = read_clock(USE_CLOCK)
    for _ in range(rounds):
        t = tl.trans(t) * c
    t1 = read_clock(USE_CLOCK)
    tl.store(out_ptr + pid * T * T + offs, t)
    record_clock(clk_ptr, t0, t1, USE_CLOCK)


def transpose_chain_ref(x: np.ndarray, c: np.ndarray, rounds: int) -> np.ndarray:
    """float64 result of `transpose_chain_kernel` for one [T, T] tile."""
    t = x.astype(np.float64)
    for _ in range(rounds):
        t = t.T * c
    return t


# --- loads from a peer GPU's memory --------------------------------------------------------------------


@triton.jit
def peer_chase_kernel(addr_ptr, state_ptr, clk_ptr, steps, USE_CLOCK: tl.constexpr):
    """`chase_kernel` over a table whose address is held in addr_ptr[0] (another GPU's memory, reached over
    NVLink with peer access enabled): every step is one dependent load round trip to the peer."""
    _chase(tl.load(addr_ptr).to(tl.pointer_type(tl.int32)), state_ptr, clk_ptr, steps, USE_CLOCK)


@triton.jit
def peer_read_sum_kernel(addr_ptr, out_ptr, n_blocks, BLOCK: tl.constexpr):
    """`read_sum_kernel` (no rotation) over fp32 data whose address is held in addr_ptr[0]: program p sums
    blocks p, p + G, ... below n_blocks, BLOCK loads in flight per iteration; out[p] = the sum."""
    src = tl.load(addr_ptr).to(tl.pointer_type(tl.float32))
    pid = tl.program_id(0)
    g = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for j in range(pid, n_blocks, g):
        acc += tl.load(src + j * BLOCK + tl.arange(0, BLOCK), cache_modifier=".cg")
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


# --- the shared-memory (MIO) queue ----------------------------------------------------------------------------

QUEUE_BUFFER_WORDS = 4096  # the probe's shared buffer: 32 lanes x 32 words of stride, warps and stores beyond


def shared_queue_ptx(stores: int, stride_words: int) -> str:
    """PTX of one thread of the shared-queue probe: `stores` stores to shared memory in a row, lane l of warp w at
    word l * stride_words + w + i for the i-th store (a stride of 32 words puts every lane of a warp in one bank:
    32 wavefronts a store; 8 words, 8; 1 word, one), timed with `%clock64` before the first and after the last has
    issued, and after a load of the first address has come back behind them. Outputs: (issue cycles, drain
    cycles); input: the thread's index in the workgroup. A barrier first lines the warps up."""
    if not stores >= 1 or not 1 <= stride_words <= 32:
        raise ValueError(f"stores must be positive and stride_words in 1..32, got {stores} and {stride_words}")
    if 31 * stride_words + 32 + stores > QUEUE_BUFFER_WORDS:
        raise ValueError(f"{stores} stores at a stride of {stride_words} words overflow the buffer")
    lines = ["{", f".shared .align 16 .b32 buf[{QUEUE_BUFFER_WORDS}];", ".reg .u64 t0, t1, t2;",
             ".reg .u32 a, b, v, x, lane, warp;", ".reg .pred p;", "mov.u32 b, buf;", "and.b32 lane, $2, 31;",
             "shr.u32 warp, $2, 5;", f"mul.lo.u32 a, lane, {4 * stride_words};", "mad.lo.u32 a, warp, 4, a;",
             "add.u32 a, a, b;", "mov.u32 v, $2;", "bar.sync 0;", "mov.u64 t0, %clock64;"]
    lines += [f"st.volatile.shared.b32 [a+{4 * i}], v;" for i in range(stores)]
    lines += ["mov.u64 t1, %clock64;", "ld.volatile.shared.b32 x, [a];", "setp.ne.u32 p, x, 4294967295;",
              "mov.u64 t2, 0;", "@p mov.u64 t2, %clock64;", "sub.u64 $0, t1, t0;", "sub.u64 $1, t2, t0;", "}"]
    return "\n".join(lines)


@triton.jit
def shared_queue_kernel(out_ptr, PTX: tl.constexpr, THREADS: tl.constexpr):
    """out[t] = issue cycles, out[THREADS + t] = drain cycles of thread t (`shared_queue_ptx`)."""
    tid = tl.arange(0, THREADS)
    issue, drain = tl.inline_asm_elementwise(PTX, "=l,=l,r", [tid], dtype=(tl.int64, tl.int64), is_pure=False,
                                             pack=1)
    tl.store(out_ptr + tid, issue)
    tl.store(out_ptr + THREADS + tid, drain)


# --- shared-memory load latency ----------------------------------------------------------------------------

# The forms of shared load the chain probe times, as the PTX that loads register `a` from the address in `a`, and
# the SASS instruction it becomes on sm_90 (checked on the compiled kernel): a 32-bit load (LDS), a 128-bit vector
# load (LDS.128: the companion kernels' staged tiles), and ldmatrix of four 8x8 b16 matrices (LDSM.16.M88.4: the
# operands of a warp's mma.sync, the MLA and KDA loops' most frequent shared access).
SHARED_CHAIN_FORMS = {
    "lds32": ("ld.volatile.shared.u32 a, [a];", "LDS"),
    "lds128": ("ld.volatile.shared.v4.u32 {a, x, y, z}, [a];", "LDS.128"),
    "ldsm_x4": ("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {a, x, y, z}, [a];", "LDSM.16.M88.4"),
}
SHARED_CHAIN_WORDS = 128  # 512 bytes: the vector form's 32 slots of 16 bytes; the others use the first 32 words


def shared_chain_ptx(form: str, steps: int) -> str:
    """PTX of one thread of the shared-latency probe: `steps` dependent shared loads of one form, each taking its
    address from the register the one before it loaded, timed with `%clock64` before the first and after a store
    of the last result (which waits for it). Output: the cycles; input: the thread's index in the workgroup.

    The table makes every load return its own address. The scalar load: lane l at word l, which holds its own
    address (32 lanes, 32 banks: one wavefront). The vector load: lane l at 16-byte slot l, whose first word holds
    the slot's address (512 bytes a warp: four wavefronts, as any LDS.128 of a whole warp). ldmatrix: lane l
    gives the address of 16-byte row l mod 8 (all four matrices read rows 0-7) and receives word l of matrix 0,
    which holds the address of row l mod 8: the one it gave. Each lane writes its own word; a barrier follows."""
    if form not in SHARED_CHAIN_FORMS:
        raise ValueError(f"unknown shared load form {form!r}; valid: {', '.join(SHARED_CHAIN_FORMS)}")
    if not 1 <= steps <= 1024:
        raise ValueError(f"steps must be in 1..1024, got {steps}")
    load, _ = SHARED_CHAIN_FORMS[form]
    lines = ["{", f".shared .align 16 .b32 sbuf[{SHARED_CHAIN_WORDS}];", ".reg .u64 t0, t1;",
             ".reg .u32 a, b, x, y, z, lane, v;", "mov.u32 b, sbuf;", "and.b32 lane, $1, 31;"]
    if form == "ldsm_x4":  # word `lane` holds the address of row lane mod 8
        lines += ["and.b32 v, lane, 7;", "mad.lo.u32 v, v, 16, b;", "mad.lo.u32 x, lane, 4, b;",
                  "st.volatile.shared.u32 [x], v;"]
    else:  # the lane's own word (scalar) or its slot's first word (vector) holds its own address
        lines += [f"mad.lo.u32 v, lane, {4 if form == 'lds32' else 16}, b;", "st.volatile.shared.u32 [v], v;"]
    lines += ["mov.u32 a, v;", "bar.sync 0;", "mov.u64 t0, %clock64;"]
    lines += [load] * steps
    lines += [f"st.volatile.shared.u32 [b+{4 * SHARED_CHAIN_WORDS - 4}], a;", "mov.u64 t1, %clock64;",
              "sub.u64 $0, t1, t0;", "}"]
    return "\n".join(lines)


@triton.jit
def shared_chain_kernel(out_ptr, PTX: tl.constexpr, THREADS: tl.constexpr):
    """out[t] = the cycles of thread t's chain (`shared_chain_ptx`)."""
    tid = tl.arange(0, THREADS)
    cycles = tl.inline_asm_elementwise(PTX, "=l,r", [tid], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr + tid, cycles)


# --- a burst of asynchronous copies into shared memory -----------------------------------------------------------

BURST_MAX_BYTES = 40 << 10  # the static shared buffer of one program (below the 48 KiB a static declaration holds)


def async_burst_ptx(nbytes: int, threads: int) -> str:
    """PTX of one thread of the burst probe: after a barrier, copy its 16-byte pieces of `nbytes` (every thread
    `nbytes / (16 * threads)` pieces, a stride of 16 * threads bytes apart) from global memory into the program's
    shared buffer with `cp.async.cg` (LDGSTS.E.BYPASS.128, the form the MLA decode loop copies its cache with), commit
    and wait for them, meet the other warps at a barrier, and return the cycles from before the first copy to after
    the barrier. Inputs: the thread's global address, its index in the program."""
    if not 1 <= threads <= 1024 or threads % 32:
        raise ValueError(f"threads must be a whole number of warps up to 1024, got {threads}")
    if not 0 < nbytes <= BURST_MAX_BYTES or nbytes % (16 * threads):
        raise ValueError(f"nbytes must be a multiple of 16 x {threads} threads up to {BURST_MAX_BYTES}, got {nbytes}")
    lines = ["{", f".shared .align 16 .b8 abuf[{nbytes}];", ".reg .u64 t0, t1;", ".reg .u32 s;", "mov.u32 s, abuf;",
             "mad.lo.u32 s, $2, 16, s;", "bar.sync 0;", "mov.u64 t0, %clock64;"]
    lines += [f"cp.async.cg.shared.global [s+{16 * threads * i}], [$1+{16 * threads * i}], 16;"
              for i in range(nbytes // (16 * threads))]
    lines += ["cp.async.commit_group;", "cp.async.wait_group 0;", "bar.sync 0;", "mov.u64 t1, %clock64;",
              "sub.u64 $0, t1, t0;", "}"]
    return "\n".join(lines)


@triton.jit
def async_burst_kernel(src_ptr, out_ptr, base, PTX: tl.constexpr, THREADS: tl.constexpr):
    """out[t] = the cycles of thread t's burst (`async_burst_ptx`) of the bytes from fp32 element `base` on."""
    tid = tl.arange(0, THREADS)
    address = (src_ptr + base + tid * 4).to(tl.int64, bitcast=True)
    cycles = tl.inline_asm_elementwise(PTX, "=l,l,r", [address, tid], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out_ptr + tid, cycles)
