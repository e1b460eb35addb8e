"""Kimi Delta Attention kernels: chunked prefill, single-token decode and speculative verification.

Counts follow the FLA implementation (fla-org/flash-linear-attention @ bc3b101d, fla/ops/kda; [S28] in
hwmodels/specs/SOURCES.md): the state is K x V fp32 per head; activations are bf16; gates g are fp32
per key channel; beta is one fp32 per token. K is key_dim, V is value_dim, c the tokens of one chunk
(the last may be partial).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar

from hwmodels.dtypes import Dtype
from hwmodels.program import Chain, Program, mma_steps, reduction_chain, streaming_program
from hwmodels.roofline import STREAM_BYTES_PER_THREAD as _STREAM_BYTES_PER_THREAD
from hwmodels.work import Family, Work
from workloads.kernel_base import KernelKind, cdiv, check_bool, check_ints

_BF16_BYTES = 2  # activations q, k, v, w, u, kg, o
_FP32_BYTES = 4  # state, gates, beta, A_qk, chunk summaries
_CHUNK_SIZES = (32, 64)  # FLA chunk_kda_fwd allows BT in {32, 64} (fla/ops/kda [S28])


@dataclass(frozen=True)
class KdaPrefill(KernelKind):
    """KDA chunked prefill as FLA runs it; grouped_scan is the Kimi K3 study's mechanism 6 (2 launches to 4)."""

    kind: ClassVar[str] = "kda-prefill"

    seqs: int  # sequences in the batch
    tokens: int  # prompt tokens per sequence
    heads: int  # KDA heads on this GPU
    key_dim: int = 128  # K: key channels per head
    value_dim: int = 128  # V: value channels per head
    chunk: int = 64  # tokens per chunk, 32 or 64 as in FLA
    grouped_scan: bool = False  # True: summaries, an ordered scan and a parallel replay (4 launches)
    block_v: int = 64  # value columns per workgroup of the scan and replay kernels
    threads: int = 256  # threads per workgroup
    # True: the intra launch also writes qg = scale * q * exp(G) (bf16, T x K) and each chunk's decay
    # exp(G_last) (fp32, K), which the scan reads in place of q and of the gates (FLA's optional qg);
    # the companion kernel companion/kernels/kda.py works this way. Plain path only.
    stores_qg: bool = False

    def __post_init__(self) -> None:
        check_ints(self, ("seqs", "tokens", "heads", "key_dim", "value_dim", "chunk", "block_v",
                           "threads"))
        if self.chunk not in _CHUNK_SIZES:
            raise ValueError(f"chunk must be one of {_CHUNK_SIZES}, got {self.chunk}")
        check_bool(self, "grouped_scan")
        check_bool(self, "stores_qg")
        if self.stores_qg and self.grouped_scan:
            raise ValueError("stores_qg describes the plain two-launch path; it cannot be combined with grouped_scan")

    @property
    def chunks(self) -> int:
        """Chunks per sequence, the last one possibly partial."""
        return cdiv(self.tokens, self.chunk)

    def _over_chunks(self, per_chunk: Callable[[int], int]) -> int:
        """Sum of per_chunk(c) over one sequence's chunk sizes c."""
        full, rest = divmod(self.tokens, self.chunk)
        return full * per_chunk(self.chunk) + (per_chunk(rest) if rest else 0)

    def launches(self) -> tuple[Work, ...]:
        """Plain: intra transform, then a sequential scan with output; grouped: see class docstring."""
        kd, vd, c_max = self.key_dim, self.value_dim, self.chunk
        sh, n, t = self.seqs * self.heads, self.chunks, self.tokens
        v_tiles = cdiv(vd, self.block_v)
        state = kd * vd * _FP32_BYTES
        wuk = t * (2 * kd + vd) * _BF16_BYTES  # w, kg (K wide) and u (V wide) of every token
        a_qk = self._over_chunks(lambda c: c * c * _FP32_BYTES)
        q = t * kd * _BF16_BYTES
        o = t * vd * _BF16_BYTES
        # LDS of one state-carrying workgroup: its K x block_v fp32 state slice plus one c x K bf16
        # operand tile (w or kg) staged for tl.dot
        scan_lds = kd * self.block_v * _FP32_BYTES + c_max * kd * _BF16_BYTES

        def launch(flop: dict[Dtype, int], read: int, write: int, workgroups: int, lds: int,
                   per_chunk: tuple[int, int] | None = None, program: Program | None = None) -> Work:
            # per_chunk: (FLOP, bytes) of one full chunk of one head, for a launch that runs chunks in
            # parallel: its busiest workgroup holds a full chunk even when the last chunk is short
            figures = {} if per_chunk is None else {"flop_per_workgroup": per_chunk[0],
                                                    "bytes_per_workgroup": per_chunk[1]}
            return Work(flop_by_dtype=flop, read_bytes=read, write_bytes=write, workgroups=workgroups,
                        threads_per_workgroup=self.threads, lds_bytes_per_workgroup=lds,
                        family=Family.KDA_PREFILL, program=program, **figures)

        c_full = min(c_max, t)
        inputs_per_token = 2 * kd * _BF16_BYTES + vd * _BF16_BYTES + kd * _FP32_BYTES + _FP32_BYTES
        wuk_per_token = (2 * kd + vd) * _BF16_BYTES
        decays = n * kd * _FP32_BYTES if self.stores_qg else 0  # exp(G_last) of every chunk
        qg = t * kd * _BF16_BYTES + decays if self.stores_qg else 0
        qg_per_chunk = c_full * kd * _BF16_BYTES + kd * _FP32_BYTES if self.stores_qg else 0

        intra = launch(
            # A_qk and A_kk (2c^2 K), w and u (2c^2 K + 2c^2 V); the UT forward substitution, whose
            # (c^3 - c)/3 is an integer because (c-1)c(c+1) has a factor 3
            {Dtype.BF16: sh * self._over_chunks(lambda c: 4 * c * c * kd + 2 * c * c * vd),
             Dtype.FP32: sh * self._over_chunks(lambda c: (c**3 - c) // 3)},
            # q, k, v bf16; g fp32 per key channel; beta fp32 per token
            read=sh * t * (2 * kd * _BF16_BYTES + vd * _BF16_BYTES + kd * _FP32_BYTES + _FP32_BYTES),
            write=sh * (wuk + a_qk + qg),
            workgroups=sh * n,
            # q and k tiles bf16 (2*c*K*2), gate tile fp32 (c*K*4), A block fp32 (c*c*4): 80 KiB at
            # c=64, K=128, near the 79.5 KiB the Kimi K3 study reports for the real prologue
            lds=2 * c_max * kd * _BF16_BYTES + c_max * kd * _FP32_BYTES + c_max * c_max * _FP32_BYTES,
            per_chunk=(4 * c_full * c_full * kd + 2 * c_full * c_full * vd + (c_full**3 - c_full) // 3,
                       c_full * (inputs_per_token + wuk_per_token) + c_full * c_full * _FP32_BYTES
                       + qg_per_chunk),
            program=self._intra_program(c_full),
        )
        if not self.grouped_scan:
            scan = launch(
                # state update (v_new 2cKV, h 2cKV) and output (q.h 2cKV, A_qk.v_new 2c^2 V)
                {Dtype.BF16: sh * self._over_chunks(lambda c: 6 * c * kd * vd + 2 * c * c * vd)},
                # the V tiles share w, kg and q (or qg) through L2, so those count once
                read=sh * (wuk + a_qk + q + decays + state),
                write=sh * (o + state),
                workgroups=sh * v_tiles,
                lds=scan_lds,
                program=self._scan_program(c_full, n),
            )
            return (intra, scan)
        summary = (kd * kd + kd * vd) * _FP32_BYTES  # a K x K transition and a K x V offset per chunk
        summaries = launch(
            {Dtype.BF16: sh * self._over_chunks(lambda c: 2 * c * kd * kd + 2 * c * kd * vd)},
            read=sh * wuk,
            write=sh * n * summary,
            workgroups=sh * n,
            # w and kg tiles (2*c*K*2) and a u tile (c*V*2), bf16
            lds=2 * c_max * kd * _BF16_BYTES + c_max * vd * _BF16_BYTES,
            per_chunk=(2 * c_full * kd * kd + 2 * c_full * kd * vd, c_full * wuk_per_token + summary),
            # a full chunk's w, u and kg streamed in, its summary stored: the busiest workgroup's own mix of
            # loads and stores (the launch's mix shifts with a short last chunk)
            program=_streamed(c_full * wuk_per_token, summary, self.threads),
        )
        ordered = launch(
            # transition x state per chunk on the matrix cores: FLA stores per-chunk states in the activation
            # dtype (chunk_gated_delta_rule_fwd_h [S28]), so the dot runs at the bf16 rate; the carry stays fp32
            {Dtype.BF16: sh * n * 2 * kd * kd * vd},
            read=sh * (n * summary + state),
            write=sh * (n * state + state),  # every chunk's start state, then the final state
            workgroups=sh * v_tiles,
            # the K x K fp32 transition and the K x block_v fp32 state slice
            lds=kd * kd * _FP32_BYTES + kd * self.block_v * _FP32_BYTES,
            # per chunk: its transition (K x K fp32) loaded one chunk ahead, the K-deep product, and the
            # state slice through LDS to the next product's operand layout
            program=Program(trips=n, trip_load_bytes=kd * kd * _FP32_BYTES, prefetch=1,
                            trip_chain=Chain(mma=mma_steps(kd), lds=1), setup_chain=Chain(dram=1)),
        )
        replay = launch(
            # v_new (2cKV), q.h (2cKV) and A_qk.v_new (2c^2 V), from the chunk's start state
            {Dtype.BF16: sh * self._over_chunks(lambda c: 4 * c * kd * vd + 2 * c * c * vd)},
            read=sh * (n * state + wuk + a_qk + q),
            write=sh * o,
            workgroups=sh * n * v_tiles,
            lds=scan_lds,
            program=self._scan_program(c_full, 1),
            per_chunk=(cdiv(4 * c_full * kd * vd + 2 * c_full * c_full * vd, v_tiles),
                       cdiv(state + c_full * (wuk_per_token + kd * _BF16_BYTES + c_full * _FP32_BYTES
                                              + vd * _BF16_BYTES), v_tiles)),
        )
        return (intra, summaries, ordered, replay)

    def _intra_program(self, c: int) -> Program:
        """One (head, chunk) workgroup: the chunk's dots, then the UT forward substitution, row by row.

        Setup: the chunk's inputs (one HBM round trip), the A_kk and A_qk products (a K-deep accumulator
        chain each) and, after the substitution, the w and u products (c-deep chains). The substitution
        is c - 1 dependent trips: row i needs every earlier row, so each trip is a reduction over the
        chunk's c columns spread over the warps, and its update.
        """
        warps = max(1, self.threads // 32)
        setup = Chain(dram=1, mma=2 * mma_steps(self.key_dim) + 2 * mma_steps(c), sfu=2, lds=4)
        per_thread = c * c / self.threads
        macs = c * c * (2 * self.key_dim + self.key_dim + self.value_dim)  # A_kk, A_qk, then w and u
        return Program(trips=c - 1, trip_chain=reduction_chain(c, warps, 32) + Chain(alu=2),
                       trip_instructions=3 * per_thread + 20, setup_chain=setup,
                       setup_instructions=2 * macs / (16 * 8 * 16) / warps + 12 * per_thread)

    def _scan_program(self, c: int, trips: int) -> Program:
        """A (head, value tile) workgroup walks `trips` chunks in order, its state slice carried in registers.

        Per chunk, loaded one chunk ahead: w, kg, qg (c x K bf16), u (c x block_v bf16) and A_qk (c x c fp32).
        Its chain: v_new = u - w.h (K deep), then o = qg.h + A_qk.v_new (c deep after it) and
        h = h.decay + kg^T.v_new (c deep), with the state and v_new moved to operand layout through LDS.
        """
        kd, bv, warps = self.key_dim, self.block_v, max(1, self.threads // 32)
        load = c * (3 * kd + bv) * _BF16_BYTES + c * c * _FP32_BYTES
        macs = c * kd * bv * 3 + c * c * bv
        chain = Chain(mma=mma_steps(kd) + 2 * mma_steps(c), lds=2, alu=2, sfu=1)
        return Program(trips=trips, trip_load_bytes=load, prefetch=1, trip_chain=chain, async_loads=True,
                       trip_instructions=2 * macs / (16 * 8 * 16) / warps + kd * bv * 3 / self.threads,
                       setup_chain=Chain(dram=1))


# Decode and verify keep each workgroup's K x tile fp32 state slice in registers (FLA's fused_recurrent_kda
# [S28] loads the state once and keeps it in registers across tokens), so they ask for no LDS.
_RECURRENCE_FLOP_PER_KV = 7  # decay K*V, k^T S 2KV, rank-1 update 2KV, q^T S 2KV (fla/ops/kda/naive.py [S28])
_NORM_FLOP_PER_VALUE = 4  # gated RMSNorm of the output: square, sum, scale, gate


def _streamed(load_bytes: float, store_bytes: float, threads: int) -> Program:
    """A workgroup that streams `load_bytes` in, 64 B a thread a trip (as `hwmodels.roofline.default_program`),
    and stores `store_bytes` over its trips."""
    program = streaming_program(load_bytes, _STREAM_BYTES_PER_THREAD * threads)
    return replace(program, trip_store_bytes=store_bytes / max(1.0, program.trips))


def recurrent_program(trips: int, trip_load_bytes: float, key_dim: int, block_v: int, threads: int,
                      trip_store_bytes: float = 0.0) -> Program:
    """A (sequence, head, value tile) workgroup stepping through `trips` tokens of the delta rule in order.

    Setup: the K x block_v fp32 state slice comes from HBM before the loop (`setup_load_bytes`), each of its K rows
    a run of block_v x 4 bytes in a row-major K x V state (`row_run_bytes`: a 4-column tile's 16-byte rows cost
    whole sectors, as do its state stores). Each token waits
    for its own q, k, v, g and beta (the loop has no matrix product, so nothing pipelines the loads), then:
    decay by exp(g), k^T S and q^T S (each a reduction over the K rows, which the warps split), the rank-1
    update. Instructions per thread: about five per state value it holds, plus addressing.
    """
    warps = max(1, threads // 32)
    chain = Chain(sfu=1, alu=4) + 2 * reduction_chain(key_dim, warps, 32)
    return Program(trips=trips, trip_load_bytes=trip_load_bytes, trip_store_bytes=trip_store_bytes, trip_chain=chain,
                   trip_instructions=5 * key_dim * block_v / threads + 40,
                   setup_load_bytes=key_dim * block_v * _FP32_BYTES, row_run_bytes=block_v * _FP32_BYTES)


@dataclass(frozen=True)
class KdaDecode(KernelKind):
    """One KDA token per sequence: state-bandwidth bound; unfused, the 5 launches of the Kimi K3 study."""

    kind: ClassVar[str] = "kda-decode"

    seqs: int  # sequences, one token each
    heads: int  # KDA heads on this GPU
    key_dim: int = 128  # K: key channels per head
    value_dim: int = 128  # V: value channels per head
    fused: bool = True  # False: gate prep, recurrence, output norm, then two copies of the output
    block_v: int = 32  # value columns per recurrence workgroup (FLA fused_recurrent BV = 32)
    threads: int = 128  # threads per workgroup (FLA: num_warps = 4)

    def __post_init__(self) -> None:
        check_ints(self, ("seqs", "heads", "key_dim", "value_dim", "block_v", "threads"))
        check_bool(self, "fused")

    def launches(self) -> tuple[Work, ...]:
        """Fused: one launch doing the same arithmetic as the unfused five, with no temporaries."""
        kd, vd, sh = self.key_dim, self.value_dim, self.seqs * self.heads
        state = kd * vd * _FP32_BYTES
        inputs = 2 * kd * _BF16_BYTES + vd * _BF16_BYTES + kd * _FP32_BYTES + _FP32_BYTES  # q k v g beta
        o = vd * _BF16_BYTES
        recurrence_flop = _RECURRENCE_FLOP_PER_KV * kd * vd
        grid = sh * cdiv(vd, self.block_v)

        bv = min(self.block_v, vd)
        # one token: its inputs in, its output tile and the final state slice out
        recurrent = recurrent_program(1, inputs - vd * _BF16_BYTES + bv * _BF16_BYTES, kd, bv, self.threads,
                                      bv * _BF16_BYTES + kd * bv * _FP32_BYTES)

        def launch(flop: int, read: int, write: int, workgroups: int, family: Family,
                   program: Program | None = None) -> Work:
            return Work(flop_by_dtype={Dtype.FP32: flop} if flop else {}, read_bytes=read,
                        write_bytes=write, workgroups=workgroups, threads_per_workgroup=self.threads,
                        family=family, program=program)

        if self.fused:
            flop = recurrence_flop + kd + _NORM_FLOP_PER_VALUE * vd  # + exp(g) and the output norm
            return (launch(sh * flop, sh * (state + inputs), sh * (state + o), grid, Family.KDA_DECODE,
                           recurrent),)
        gate_prep = launch(sh * kd, sh * kd * _FP32_BYTES, sh * kd * _FP32_BYTES, sh, Family.KDA_DECODE)
        recurrence = launch(sh * recurrence_flop, sh * (state + inputs), sh * (state + o), grid,
                            Family.KDA_DECODE, recurrent)
        norm = launch(sh * _NORM_FLOP_PER_VALUE * vd, sh * o, sh * o, sh, Family.KDA_DECODE)
        copy = launch(0, sh * o, sh * o, sh, Family.COPY)
        return (gate_prep, recurrence, norm, copy, copy)


@dataclass(frozen=True)
class KdaVerify(KernelKind):
    """KDA over speculative positions, tiled over value columns (Kimi K3 study, mechanism 7: 48 vs 384)."""

    kind: ClassVar[str] = "kda-verify"

    seqs: int  # sequences being verified
    positions: int  # draft positions verified per sequence
    heads: int  # KDA heads on this GPU
    head_dim: int = 128  # K = V channels per head
    tile_cols: int = 32  # value columns per workgroup; need not divide head_dim
    store_states: bool = True  # keep every position's state for rollback, else only the final one
    threads: int = 128  # threads per workgroup

    def __post_init__(self) -> None:
        check_ints(self, ("seqs", "positions", "heads", "head_dim", "tile_cols", "threads"))
        if self.tile_cols > self.head_dim:
            raise ValueError(f"tile_cols ({self.tile_cols}) must not exceed head_dim ({self.head_dim})")
        check_bool(self, "store_states")

    def launches(self) -> tuple[Work, ...]:
        """One launch; each tile re-reads every position's full q, k and g: the byte price of a wider grid."""
        d, p, sh = self.head_dim, self.positions, self.seqs * self.heads
        tiles = cdiv(d, self.tile_cols)
        state = d * d * _FP32_BYTES
        per_tile_inputs = 2 * d * _BF16_BYTES + d * _FP32_BYTES  # q, k bf16 and g fp32, full K
        shared_inputs = d * _BF16_BYTES + _FP32_BYTES  # v bf16 (each tile its columns) and beta
        states_written = p if self.store_states else 1
        written = sh * (p * d * _BF16_BYTES + states_written * state)
        program = recurrent_program(p, per_tile_inputs + self.tile_cols * _BF16_BYTES + _FP32_BYTES, d,
                                    self.tile_cols, self.threads,
                                    self.tile_cols * _BF16_BYTES
                                    + (d * self.tile_cols * _FP32_BYTES if self.store_states else 0))
        return (
            Work(
                flop_by_dtype={Dtype.FP32: _RECURRENCE_FLOP_PER_KV * d * d * p * sh},
                read_bytes=sh * (state + p * (tiles * per_tile_inputs + shared_inputs)),
                write_bytes=written,
                workgroups=sh * tiles,
                threads_per_workgroup=self.threads,
                family=Family.KDA_VERIFY,
                # per position: its inputs in, its output tile out and, stored for rollback, its state slice; the
                # tiles of a head write whole rows of its states between them
                program=replace(program, store_footprint_bytes=written),
            ),
        )
