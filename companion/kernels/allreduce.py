"""Quantized two-shot all-reduce (QuickReduce's algorithm) over peer memory, for N ranks, in Triton.

A call on T tiles of TILE_VALUES values gives each rank S = ceil(T / N) consecutive tiles to own:
- `_scatter_kernel` (phase 1): every rank encodes each owner's tiles and writes them into the owner's
  buffer 1, slot [sender]; then it sets flag1[sender, program] in the owner's signal pad.
- `_reduce_kernel`: the owner waits for flag1 of every sender, decodes the N contributions, sums them
  in fp32, encodes the sum once into its own buffer 2 and copies those bytes into every peer's buffer 2
  (phase 2); then it sets flag2[owner, program] in every rank's signal pad.
- `_gather_kernel`: every rank waits for flag2 of every owner and decodes the whole tensor.
Every cross-rank wait sits at the start of a kernel, so N ranks can be emulated in one process by
launching a phase for every rank before the next phase (`Emulation`; the CPU test does that under
TRITON_INTERPRET=1). On GPUs each rank runs its three kernels on its own stream (`SymmetricAllReduce`).

Flags are colored: a call's flags carry an epoch read from a per-rank, per-program device counter
that `_gather_kernel` advances, so no flag is ever reset and a CUDA graph replays correctly (the
epoch is no kernel argument). A writer stores, passes a CTA barrier, then exchanges the flag with
release semantics at system scope; a waiter spins on acquire reads (atomic add of 0) at system scope,
up to `max_spin` reads, after which it raises the rank's error word instead of hanging. Program p of
every kernel on every rank handles the same tiles (j = p, p + G, ... of each segment), so flags pair
up across ranks. Buffers are reused safely: a rank starts phase 1 of the next call only after its
gather saw flag2 of every owner, which each owner set after reading its buffer 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from companion.kernels.codecs import (
    CODEC_ID,
    CODECS,
    TILE_VALUES,
    _bf16_bits,
    decode_tile,
    encode_tile,
    tile_bytes,
)
from companion.kernels.codecs_ref import QMAX

BLOCK_VALUES = 32  # values sharing one fp16 scale (the QuickReduce study)
FP16_UNIT = 2.0**-11  # fp16 unit roundoff (11-bit significand)
FLAG_BASE_WORDS_PER_RANK = 32  # torch's symmetric-memory barrier channels use the pad's first 32*N words
DEFAULT_PROGRAMS = 1024  # programs per kernel at most: ~8 per H200 SM, one 4 KiB tile each in flight
MAX_SPIN = 1 << 26  # acquire reads before a wait gives up (tens of seconds; never reached when healthy)
# One compiled kernel for every size and rank (so compiling once, on local buffers, covers a whole sweep);
# n stays specialized, because n % 16 == 0 lets the masked loads and stores of x and out be 16 bytes wide.
NO_SPEC = ["rank", "n_tiles", "seg", "g_cap", "max_spin"]


@triton.jit
def _peer(table, r, ELEM: tl.constexpr):
    """Rank r's address from an int64 table, as a pointer to ELEM (16-byte aligned: symmetric buffers are)."""
    return tl.multiple_of(tl.load(table + r).to(tl.pointer_type(ELEM)), 16)


@triton.jit
def _wait(flag, epoch, err, max_spin):
    seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
    spins = 0
    while (seen < epoch) & (spins < max_spin):
        seen = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
        spins += 1
    if seen < epoch:
        tl.store(err, 1)


@triton.jit(do_not_specialize=NO_SPEC)
def _scatter_kernel(x_ptr, n, bufs1, flags, epochs, rank, n_tiles, seg, g_cap,
                    WORLD: tl.constexpr, CODEC: tl.constexpr, TB: tl.constexpr, TILE: tl.constexpr,
                    CAST_FP16: tl.constexpr):
    p = tl.program_id(0)
    n_prog = tl.num_programs(0)
    epoch = tl.load(epochs + p) + 1
    offs = tl.arange(0, TILE)
    for r in tl.static_range(WORLD):
        owner = _peer(bufs1, r, tl.uint8)
        count = tl.minimum(seg, tl.maximum(n_tiles - r * seg, 0))
        for j in range(p, count, n_prog):
            idx = (r * seg + j).to(tl.int64) * TILE + offs
            v = tl.load(x_ptr + idx, mask=idx < n, other=0.0)
            if CAST_FP16:  # vLLM's default for bf16 inputs
                v = v.to(tl.float16)
            encode_tile(v.to(tl.float32), owner + (rank * seg + j).to(tl.int64) * TB, CODEC)
    tl.debug_barrier()  # every thread's stores precede the release below
    for r in tl.static_range(WORLD):
        tl.atomic_xchg(_peer(flags, r, tl.int32) + rank * g_cap + p, epoch, sem="release", scope="sys")


@triton.jit(do_not_specialize=NO_SPEC)
def _reduce_kernel(bufs1, bufs2, flags, epochs, err, rank, n_tiles, seg, g_cap, max_spin,
                   WORLD: tl.constexpr, CODEC: tl.constexpr, TB: tl.constexpr, TILE: tl.constexpr,
                   WORDS: tl.constexpr):
    p = tl.program_id(0)
    n_prog = tl.num_programs(0)
    epoch = tl.load(epochs + p) + 1
    mine = _peer(flags, rank, tl.int32)
    for s in tl.static_range(WORLD):
        _wait(mine + s * g_cap + p, epoch, err, max_spin)
    tl.debug_barrier()
    inbox = _peer(bufs1, rank, tl.uint8)
    home = _peer(bufs2, rank, tl.uint8)
    words = tl.arange(0, WORDS)
    in_tile = words < TB // 4
    count = tl.minimum(seg, tl.maximum(n_tiles - rank * seg, 0))
    for j in range(p, count, n_prog):
        acc = tl.zeros([TILE], dtype=tl.float32)
        for s in tl.static_range(WORLD):
            acc += decode_tile(inbox + (s * seg + j).to(tl.int64) * TB, CODEC)
        at = (rank * seg + j).to(tl.int64) * TB
        encode_tile(acc, home + at, CODEC)
        tl.debug_barrier()  # the encoded bytes, written by all threads, are read back by others
        packed = tl.load((home + at).to(tl.pointer_type(tl.int32)) + words, mask=in_tile)
        for r in tl.static_range(WORLD):
            if r != rank:
                dst = (_peer(bufs2, r, tl.uint8) + at).to(tl.pointer_type(tl.int32))
                tl.store(dst + words, packed, mask=in_tile)
    tl.debug_barrier()
    for r in tl.static_range(WORLD):
        tl.atomic_xchg(_peer(flags, r, tl.int32) + (WORLD + rank) * g_cap + p, epoch, sem="release", scope="sys")


@triton.jit(do_not_specialize=NO_SPEC)
def _gather_kernel(out_ptr, n, bufs2, flags, epochs, err, rank, n_tiles, seg, g_cap, max_spin,
                   WORLD: tl.constexpr, CODEC: tl.constexpr, TB: tl.constexpr, TILE: tl.constexpr):
    p = tl.program_id(0)
    n_prog = tl.num_programs(0)
    epoch = tl.load(epochs + p) + 1
    mine = _peer(flags, rank, tl.int32)
    for r in tl.static_range(WORLD):
        _wait(mine + (WORLD + r) * g_cap + p, epoch, err, max_spin)
    tl.debug_barrier()
    home = _peer(bufs2, rank, tl.uint8)
    offs = tl.arange(0, TILE)
    for r in tl.static_range(WORLD):
        count = tl.minimum(seg, tl.maximum(n_tiles - r * seg, 0))
        for j in range(p, count, n_prog):
            t = (r * seg + j).to(tl.int64)
            v = decode_tile(home + t * TB, CODEC)
            idx = t * TILE + offs
            if out_ptr.dtype.element_ty == tl.bfloat16:  # rounded by hand: the interpreter's cast truncates
                tl.store(out_ptr.to(tl.pointer_type(tl.uint16)) + idx, _bf16_bits(v), mask=idx < n)
            else:
                tl.store(out_ptr + idx, v.to(out_ptr.dtype.element_ty), mask=idx < n)
    tl.store(epochs + p, epoch)


# ------------------------------------------------------------------------------------------ host side


@dataclass(frozen=True)
class Layout:
    """Geometry of one call: tiles, the tiles each rank owns and the programs per kernel."""

    numel: int
    world: int
    tiles: int
    seg: int
    programs: int

    @classmethod
    def plan(cls, numel: int, world: int, max_programs: int) -> Layout:
        if numel < 1 or world < 1 or max_programs < 1:
            raise ValueError(f"need numel, world and max_programs >= 1, got {numel}, {world}, {max_programs}")
        tiles = math.ceil(numel / TILE_VALUES)
        seg = math.ceil(tiles / world)
        return cls(numel, world, tiles, seg, min(seg, max_programs))

    def buffer_bytes(self, codec: str) -> int:
        """Bytes of buffer 1 (N slots of one segment) and, equally, of buffer 2 (N segments)."""
        return self.world * self.seg * tile_bytes(codec)


@dataclass(frozen=True)
class Peers:
    """One process's int64 address tables (device tensors) of every rank's buffers and flag words."""

    bufs1: torch.Tensor
    bufs2: torch.Tensor
    flags: torch.Tensor
    g_cap: int  # flag slots per (rank, phase): the most programs a kernel may use


@dataclass(frozen=True)
class RankState:
    """A rank's own epoch counters (one per program) and error word (1 when a wait gave up)."""

    epochs: torch.Tensor
    err: torch.Tensor

    @classmethod
    def new(cls, g_cap: int, device) -> RankState:
        epochs = torch.zeros(g_cap, dtype=torch.int32, device=device)
        return cls(epochs, torch.zeros(1, dtype=torch.int32, device=device))


def _check_codec(codec: str) -> None:
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}; valid: {', '.join(CODECS)}")


def _words(codec: str) -> int:
    return triton.next_power_of_2(tile_bytes(codec) // 4)


def scatter(x, rank: int, peers: Peers, state: RankState, codec: str, lay: Layout, num_warps: int = 4) -> None:
    """Phase 1 of one rank: encode each owner's tiles of x into the owner's buffer 1, then flag."""
    _check_codec(codec)
    cast = x.dtype == torch.bfloat16
    _scatter_kernel[(lay.programs,)](
        x, lay.numel, peers.bufs1, peers.flags, state.epochs, rank, lay.tiles, lay.seg, peers.g_cap,
        WORLD=lay.world, CODEC=CODEC_ID[codec], TB=tile_bytes(codec), TILE=TILE_VALUES, CAST_FP16=cast,
        num_warps=num_warps,
    )


def reduce(rank: int, peers: Peers, state: RankState, codec: str, lay: Layout, max_spin: int = MAX_SPIN,
           num_warps: int = 4) -> None:
    """Owner's step: wait, sum the N contributions in fp32, re-encode, copy into every buffer 2, flag."""
    _reduce_kernel[(lay.programs,)](
        peers.bufs1, peers.bufs2, peers.flags, state.epochs, state.err, rank, lay.tiles, lay.seg, peers.g_cap,
        max_spin, WORLD=lay.world, CODEC=CODEC_ID[codec], TB=tile_bytes(codec), TILE=TILE_VALUES,
        WORDS=_words(codec), num_warps=num_warps,
    )


def gather(out, rank: int, peers: Peers, state: RankState, codec: str, lay: Layout, max_spin: int = MAX_SPIN,
           num_warps: int = 4) -> None:
    """Phase 2's receiving end: wait for every owner, decode the whole tensor into out, advance the epoch."""
    _gather_kernel[(lay.programs,)](
        out, lay.numel, peers.bufs2, peers.flags, state.epochs, state.err, rank, lay.tiles, lay.seg, peers.g_cap,
        max_spin, WORLD=lay.world, CODEC=CODEC_ID[codec], TB=tile_bytes(codec), TILE=TILE_VALUES,
        num_warps=num_warps,
    )


class Emulation:
    """N ranks in one process: plain tensors stand in for the peer buffers; phase k runs on every rank first."""

    def __init__(self, world: int, max_numel: int, device, max_programs: int = DEFAULT_PROGRAMS, num_warps: int = 4):
        self.world, self.max_programs, self.num_warps = world, max_programs, num_warps
        self.g_cap = Layout.plan(max_numel, world, max_programs).programs
        nbytes = Layout.plan(max_numel, world, max_programs).buffer_bytes("fp")  # fp has the largest tiles
        self.bufs = [torch.full((2, nbytes), 0xA5, dtype=torch.uint8, device=device) for _ in range(world)]
        self.pads = [torch.zeros(2 * world * self.g_cap, dtype=torch.int32, device=device) for _ in range(world)]

        def table(ts) -> torch.Tensor:
            return torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64, device=device)

        self.peers = Peers(table([b[0] for b in self.bufs]), table([b[1] for b in self.bufs]), table(self.pads),
                           self.g_cap)
        self.states = [RankState.new(self.g_cap, device) for _ in range(world)]

    def run(self, inputs, codec: str, outs=None, max_spin: int = MAX_SPIN):
        """All-reduce of inputs[r] (one per rank) into outs[r] (allocated when None); returns outs."""
        if len(inputs) != self.world:
            raise ValueError(f"{len(inputs)} inputs for {self.world} ranks")
        lay = Layout.plan(inputs[0].numel(), self.world, self.max_programs)
        if lay.buffer_bytes(codec) > self.bufs[0].shape[1]:
            raise ValueError(f"{inputs[0].numel()} values do not fit this emulation's buffers")
        outs = [torch.empty_like(x) for x in inputs] if outs is None else outs
        w = self.num_warps
        for r, x in enumerate(inputs):
            scatter(x, r, self.peers, self.states[r], codec, lay, num_warps=w)
        for r in range(self.world):
            reduce(r, self.peers, self.states[r], codec, lay, max_spin, num_warps=w)
        for r in range(self.world):
            gather(outs[r], r, self.peers, self.states[r], codec, lay, max_spin, num_warps=w)
        return outs


class SymmetricAllReduce:
    """The all-reduce of one rank over torch symmetric memory (peer pointers and signal pads); no multicast."""

    def __init__(self, group, max_numel: int, device, max_programs: int = DEFAULT_PROGRAMS, num_warps: int = 4):
        import torch.distributed._symmetric_memory as symm

        self.world, self.rank, self.num_warps = group.size(), group.rank(), num_warps
        base = FLAG_BASE_WORDS_PER_RANK * self.world
        if hasattr(symm, "set_signal_pad_size") and hasattr(symm, "get_signal_pad_size"):
            symm.set_signal_pad_size(max(symm.get_signal_pad_size(), 4 * (base + 2 * self.world * max_programs)))
        nbytes = Layout.plan(max_numel, self.world, max_programs).buffer_bytes("fp")
        self.buf = symm.empty(2 * nbytes, dtype=torch.uint8, device=device)
        self.handle = symm.rendezvous(self.buf, group.group_name)
        self.g_cap = min(max_programs, (self.handle.signal_pad_size // 4 - base) // (2 * self.world))
        if self.g_cap < 1:
            raise RuntimeError(f"signal pad of {self.handle.signal_pad_size} B holds no flags for {self.world} ranks")
        # The allocator zeroes signal pads; zero our words again where torch lets us, before any peer writes.
        if hasattr(self.handle, "get_signal_pad"):
            self.handle.get_signal_pad(self.rank, [2 * self.world * self.g_cap], torch.int32, base).zero_()
        torch.cuda.synchronize(device)
        torch.distributed.barrier(group=group)
        self.max_programs = self.g_cap
        # buffer_ptrs are the allocations' bases; the tensor sits at the same offset in every rank's allocation
        at = self.buf.data_ptr() - self.handle.buffer_ptrs[self.rank]
        ptrs, pads = [a + at for a in self.handle.buffer_ptrs], list(self.handle.signal_pad_ptrs)

        def table(addrs) -> torch.Tensor:
            return torch.tensor(addrs, dtype=torch.int64, device=device)

        self.peers = Peers(table(ptrs), table([a + nbytes for a in ptrs]), table([a + 4 * base for a in pads]),
                           self.g_cap)
        self.state = RankState.new(self.g_cap, device)

    def __call__(self, x, codec: str, out) -> None:
        """out = sum over ranks of x (same shape and dtype), through `codec`; graph-capturable."""
        lay = Layout.plan(x.numel(), self.world, self.max_programs)
        if 2 * lay.buffer_bytes(codec) > self.buf.numel() or out.shape != x.shape or out.dtype != x.dtype:
            raise ValueError(f"bad all-reduce: {x.shape} {x.dtype} -> {out.shape} {out.dtype}")
        w = self.num_warps
        scatter(x, self.rank, self.peers, self.state, codec, lay, num_warps=w)
        reduce(self.rank, self.peers, self.state, codec, lay, num_warps=w)
        gather(out, self.rank, self.peers, self.state, codec, lay, num_warps=w)


# ------------------------------------------------------------------------------------- references


def all_reduce_ref(inputs) -> torch.Tensor:
    """The float64 sum of every rank's input: what any codec approximates."""
    return torch.stack([x.double().cpu() for x in inputs]).sum(0)


def block_absmax(x: torch.Tensor) -> torch.Tensor:
    """Per-element absmax of its 32-value block (float64, zero-padded tail), the quantizer's scale basis."""
    flat = x.double().flatten()
    pad = (-flat.numel()) % BLOCK_VALUES
    blocks = torch.nn.functional.pad(flat, (0, pad)).view(-1, BLOCK_VALUES).abs().amax(1, keepdim=True)
    return blocks.expand(-1, BLOCK_VALUES).flatten()[: flat.numel()]


def error_bound(abs_sum, absmax_sum, ref, codec: str, out_dtype, world: int) -> torch.Tensor:
    """Per-element bound on |out - ref| after the two quantizations (float64), from the inputs alone.

    abs_sum = sum over ranks of |x_r|, absmax_sum = sum over ranks of block_absmax(x_r), ref the exact sum.
    With c = 1 / qmax (codecs: scale d = fp16(absmax / qmax), 0 for fp), phase 1 moves x_r by at most
    c k absmax_r: half a step inside the range, a whole step where the top code qmax - 1 clips, and the fp16
    scale's 2^-11 times up to qmax - 1 codes (k = 1 + qmax 2^-10 covers it twice over). Phase 2 quantizes the
    decoded sum, whose block absmax is at most block_absmax(ref) + c k absmax_sum. Also: fp16 roundings (inputs
    cast, the fp codec's wire) 2^-11 of each magnitude, the encode scale's + 1e-7 (qmax 1e-7 absolute per
    quantization), fp32 sums, and half an ulp of out_dtype.
    """
    qmax = QMAX.get(codec, 0)
    ck = (1.0 + qmax * 2.0**-10) / qmax if qmax else 0.0
    quant = ck * (absmax_sum + block_absmax(ref) + ck * absmax_sum)
    out_unit = torch.finfo(out_dtype).eps / 2
    fp = FP16_UNIT * (abs_sum + 2 * ref.abs()) + (world + 2) * (qmax * 1e-7 + 2.0**-24)
    return quant + fp + out_unit * (ref.abs() + quant + fp)
