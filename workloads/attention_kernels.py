"""Softmax attention kernels: flash-attention prefill and absorbed-MLA decode with KV splits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import ClassVar

from hwmodels.dtypes import Dtype
from hwmodels.program import NO_CHAIN, Chain, Program, mma_steps, reduction_chain
from hwmodels.work import Family, Work
from workloads.kernel_base import KernelKind, cdiv, check_ints, coerce

MMA_K = 16  # reduction depth of one bf16 matrix instruction (mma.sync m16n8k16), for instruction counts
# Softmax FP32 FLOP per query-key pair: running max, subtract, exp, sum, and the final 1/sum scale.
_SOFTMAX_FLOP_PER_PAIR = 5


@dataclass(frozen=True)
class AttentionPrefill(KernelKind):
    """Flash-attention prefill with GQA over a cached prefix: one workgroup per block of queries."""

    kind: ClassVar[str] = "attention-prefill"

    seqs: int  # sequences in the batch (all the same shape)
    q_len: int  # new query tokens per sequence
    heads: int  # query heads
    kv_heads: int  # key/value heads; heads must be a multiple (GQA)
    head_dim: int  # values per head of q and k (and of v, unless head_dim_v says otherwise)
    cached: int = 0  # tokens of the prefix already in the KV cache
    causal: bool = True  # query i sees cached + i + 1 keys; False: every query sees all keys
    dtype: Dtype = Dtype.BF16  # storage and math dtype of q, k, v and o
    block_m: int = 128  # query rows per workgroup
    threads: int = 256  # threads per workgroup
    block_n: int = 64  # key rows staged in LDS per inner step
    # values per head of v and of the output; 0: head_dim. DeepSeek-style MLA prefill scores 192-wide q and k
    # (128 + 64 rotary) against 128-wide values.
    head_dim_v: int = 0

    def __post_init__(self) -> None:
        check_ints(self, ("seqs", "q_len", "heads", "kv_heads", "head_dim", "block_m", "threads",
                           "block_n"), ("cached", "head_dim_v"))
        if not isinstance(self.causal, bool):
            raise ValueError(f"causal must be a bool, got {self.causal!r}")
        coerce(self, "dtype", Dtype)
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})")

    @property
    def pairs(self) -> int:
        """Query-key pairs scored per sequence per head (causal: cached + i + 1 keys for query i)."""
        q, c = self.q_len, self.cached
        return q * c + q * (q + 1) // 2 if self.causal else q * (c + q)

    @property
    def value_dim(self) -> int:
        """Values per head of v and of the output."""
        return self.head_dim_v or self.head_dim

    def launches(self) -> tuple[Work, ...]:
        """One launch: QK^T (2 FLOP per pair per q/k value) and PV (2 per pair per v value), plus softmax per
        pair."""
        s, h, d, dv = self.seqs, self.heads, self.head_dim, self.value_dim
        keys = self.cached + self.q_len
        group = h // self.kv_heads
        # GQA packing (FlashAttention-3's pack_gqa, FlashInfer's decode): when a KV group's queries fit one
        # query block, its heads are packed into the block's rows, so the group's K and V stream once
        packed = group > 1 and self.q_len * group <= self.block_m
        rows = self.q_len * group if packed else min(self.block_m, self.q_len)
        blocks = s * self.kv_heads if packed else s * h * cdiv(self.q_len, self.block_m)
        return (
            Work(
                flop_by_dtype={
                    self.dtype: 2 * s * h * (d + dv) * self.pairs,
                    Dtype.FP32: _SOFTMAX_FLOP_PER_PAIR * s * h * self.pairs,
                },
                read_bytes=self.dtype.storage_bytes(s * self.q_len * h * d)
                + self.dtype.storage_bytes(s * keys * self.kv_heads * (d + dv)),
                write_bytes=self.dtype.storage_bytes(s * self.q_len * h * dv),
                workgroups=blocks,
                threads_per_workgroup=self.threads,
                # the Q tile plus one K and one V tile: (block_m + block_n) * head_dim + block_n * head_dim_v values
                lds_bytes_per_workgroup=cdiv(((self.block_m + self.block_n) * d + self.block_n * dv)
                                             * self.dtype.bits, 8),
                family=Family.ATTENTION_PREFILL,
                # a query block's rows against its keys: every key, or under a causal mask the mean block's
                # (assumption: the library's tile scheduler deals the unequal causal blocks out longest first,
                # as FlashAttention-3's persistent scheduler does: each CU does the mean block per round, the
                # busiest one heaviest block's excess more)
                flop_per_workgroup=(2 * (d + dv) + _SOFTMAX_FLOP_PER_PAIR) * rows * self._block_keys(keys, rows),
                flop_heaviest_workgroup=(2 * (d + dv) + _SOFTMAX_FLOP_PER_PAIR) * rows * keys,
                # the query blocks and heads of one KV group share its K and V through L2
                memory_workgroups=s * self.kv_heads,
                program=self._program(self._block_keys(keys, rows),
                                      1 if packed else cdiv(self.q_len, self.block_m) * group),
            ),
        )

    def _block_keys(self, keys: int, rows: int) -> int:
        """Keys one query block of `rows` rows scores: all of them, or under a causal mask the blocks' mean (the
        cached prefix, then on average half of the new tokens past the block's own rows)."""
        if not self.causal or self.q_len <= rows:
            return keys
        return self.cached + cdiv(self.q_len + rows, 2)

    def _program(self, keys: int, reuse: int) -> Program:
        """A query block streams K and V tiles, two stages deep (FlashAttention-2/3 pipelines).

        Per tile: the QK^T accumulator chain over head_dim, the row max and sum (FlashAttention keeps a
        row inside one warp: a shuffle tree over the tile's columns held by a quad, 2 steps each), two
        exponentials, and the PV chain over the tile's rows. The query blocks and heads of a KV group read
        the same K and V tiles (`reuse`): after the first touch they hit L2.
        """
        d, bn = self.head_dim, self.block_n
        narrow = self.dtype.bits <= 8
        chain = Chain(mma=mma_steps(d, narrow) + mma_steps(bn, narrow), shuffle=4, sfu=2, alu=3)
        return Program(trips=cdiv(keys, bn), trip_load_bytes=self.dtype.storage_bytes(bn * (d + self.value_dim)),
                       trip_chain=chain, prefetch=1, reuse=reuse)


@dataclass(frozen=True)
class MlaDecode(KernelKind):
    """Absorbed-MLA decode over the compressed latent, with head padding and KV splits (Kimi K3 study)."""

    kind: ClassVar[str] = "mla-decode"

    seqs: int  # sequences, one new token each
    context: int  # tokens of history per sequence
    heads: int  # query heads on this GPU (12 for Kimi K3 at TP8)
    kv_lora: int = 512  # latent (compressed KV) width; also the output width per head
    rope_dim: int = 64  # decoupled RoPE key width stored beside the latent
    num_splits: int = 1  # partitions of the history per sequence; > 1 adds a merge launch
    pad_heads_to: int = 0  # pad the query to this many heads with a copy launch (0: no padding)
    kv_dtype: Dtype = Dtype.FP8  # storage dtype of the latent cache
    q_dtype: Dtype = Dtype.BF16  # storage dtype of the (absorbed) query
    heads_per_workgroup: int = 16  # padded heads computed together by one workgroup
    threads: int = 256  # threads per workgroup
    block_n: int = 64  # latent rows staged in LDS per inner step
    # LDS a workgroup holds when its code object reserves a fixed amount (an assembly kernel's
    # group_segment_fixed_size); 0: one staged latent tile and the workgroup's query rows
    lds_reserved: int = 0
    # Each sequence's history when they differ (len == seqs); empty: every sequence has `context`, which is
    # then their mean. The grid turns irregular: a long sequence keeps its workgroups busy after the others.
    contexts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        check_ints(self, ("seqs", "context", "heads", "kv_lora", "rope_dim", "num_splits",
                           "heads_per_workgroup", "threads", "block_n"), ("pad_heads_to", "lds_reserved"))
        if self.contexts and (len(self.contexts) != self.seqs or min(self.contexts) < 1):
            raise ValueError(f"contexts must hold one positive history per sequence ({self.seqs}), "
                             f"got {len(self.contexts)} values")
        coerce(self, "kv_dtype", Dtype)
        coerce(self, "q_dtype", Dtype)
        if self.num_splits > self.context:
            raise ValueError(f"num_splits ({self.num_splits}) must not exceed context ({self.context})")

    @property
    def padded_heads(self) -> int:
        """Heads the attention kernel computes; padding heads are computed and their output dropped."""
        return max(self.heads, self.pad_heads_to)

    def launches(self) -> tuple[Work, ...]:
        """Optional padding copy, the split attention kernel, then a log-sum-exp merge if split."""
        s, t, hp, lora = self.seqs, self.context, self.padded_heads, self.kv_lora
        width = lora + self.rope_dim  # values per latent row (576 for DeepSeek-style MLA)
        head_groups = cdiv(hp, self.heads_per_workgroup)
        out_bytes = Dtype.BF16.storage_bytes(s * hp * lora)
        partial_bytes = s * self.num_splits * hp * (lora * 4 + 4)  # fp32 partial output + fp32 LSE
        launches = []
        if self.pad_heads_to > self.heads:
            launches.append(Work(
                flop_by_dtype={},
                read_bytes=self.q_dtype.storage_bytes(s * self.heads * width),
                write_bytes=self.q_dtype.storage_bytes(s * hp * width),
                workgroups=s * hp,
                threads_per_workgroup=self.threads,
                family=Family.COPY,
            ))
        launches.append(Work(
            # the latent is upcast, so the math runs in bf16: scores over width, output over kv_lora
            flop_by_dtype={
                Dtype.BF16: 2 * s * hp * t * width + 2 * s * hp * t * lora,
                Dtype.FP32: _SOFTMAX_FLOP_PER_PAIR * s * hp * t,
            },
            # each split reads its share of the history, so the whole history is read once
            read_bytes=self.kv_dtype.storage_bytes(s * t * width)
            + self.q_dtype.storage_bytes(s * hp * width),
            write_bytes=out_bytes if self.num_splits == 1 else partial_bytes,
            workgroups=s * self.num_splits * head_groups,
            threads_per_workgroup=self.threads,
            # one latent tile plus the workgroup's query rows: block_n*width*kv + hpw*width*q bytes
            lds_bytes_per_workgroup=self.lds_reserved or math.ceil(
                self.kv_dtype.storage_bytes(self.block_n * width)
                + self.q_dtype.storage_bytes(self.heads_per_workgroup * width)),
            family=Family.MLA_DECODE,
            program=self._split_program(width),
        ))
        if self.num_splits > 1:
            launches.append(_merge_launch(s, hp, self.num_splits, lora, self.heads_per_workgroup, self.threads,
                                          self._merge_trips() if self.contexts else (),
                                          cdiv(self.context, self.split_rows)))
        return tuple(launches)

    @property
    def split_rows(self) -> int:
        """History rows of one split: whole block_n tiles, at least one (as the split-KV kernels cut it)."""
        return self._split_rows(self.context)

    def _split_rows(self, context: int) -> int:
        return _split_rows(context, self.num_splits, self.block_n)

    def _split_trips(self) -> tuple[int, ...]:
        """Trips of every (sequence, head block, split) workgroup in grid order, for uneven histories."""
        groups = cdiv(self.padded_heads, self.heads_per_workgroup)
        per_context = {context: _history_split_trips(context, self.num_splits, self.block_n) * groups
                       for context in set(self.contexts)}  # a batch holds few distinct histories
        return tuple(chain.from_iterable(map(per_context.__getitem__, self.contexts)))

    def _merge_trips(self) -> tuple[int, ...]:
        groups = cdiv(self.padded_heads, self.heads_per_workgroup)
        per_context = {c: (cdiv(c, self._split_rows(c)),) * groups for c in set(self.contexts)}
        return tuple(chain.from_iterable(map(per_context.__getitem__, self.contexts)))

    def _split_program(self, width: int) -> Program:
        """One (sequence, head block, split) workgroup: block_n latent rows per trip, two stages deep (the trip's
        work: `_split_trip`), read by cp.async into shared memory (its compiled loop's LDGSTS).

        Every head reads the same latent rows (MLA's one latent per token), so the head blocks of a sequence's
        split read the same tiles (`reuse`): the first from HBM, the others from L2. They are dispatched together:
        the grid runs (sequence, head block, split) with the sequence fastest, so a split's head blocks are one
        sequence count apart in the dispatch order, within one wave of resident workgroups."""
        chain, instructions, load_bytes = _split_trip(self.block_n, self.threads, self.kv_dtype,
                                                      self.heads_per_workgroup, self.kv_lora, width)
        trips = self._split_trips() if self.contexts else ()
        return Program(trips=max(trips, default=cdiv(self.split_rows, self.block_n)), trip_load_bytes=load_bytes,
                       trip_instructions=instructions, trip_chain=chain, prefetch=1,
                       setup_chain=_SPLIT_SETUP_CHAIN, trip_counts=trips, async_loads=True,
                       reuse=cdiv(self.padded_heads, self.heads_per_workgroup),
                       setup_store_bytes=self._tile_out_bytes(split=self.num_splits > 1))

    def _tile_out_bytes(self, split: bool) -> float:
        """What one workgroup stores after its last trip: its heads' fp32 partial sums and log-sum-exps (a split of
        several), or their output rows in bf16 (one split, or the merge); only the heads that exist."""
        heads = min(self.heads_per_workgroup, self.padded_heads)
        return heads * (self.kv_lora + 1) * 4 if split else heads * self.kv_lora * 2


def _split_rows(context: int, num_splits: int, block_n: int) -> int:
    """History rows of one split of `context` rows: whole block_n tiles, at least one (as the split-KV kernels cut
    it)."""
    per_split = cdiv(cdiv(context, num_splits), block_n) * block_n
    return min(max(per_split, block_n), context)


@lru_cache(maxsize=4096)
def _history_split_trips(context: int, num_splits: int, block_n: int) -> tuple[int, ...]:
    """Trips of each of the `num_splits` splits of one history (kept: a serving run's batches hold the same few
    bucketed histories)."""
    rows = _split_rows(context, num_splits, block_n)
    return tuple(cdiv(min(rows, max(0, context - split * rows)), block_n) for split in range(num_splits))


_SPLIT_SETUP_CHAIN = Chain(dram=1, sfu=1)
_MERGE_TRIP_CHAIN = Chain(sfu=2, alu=3)


@lru_cache(maxsize=4096)
def _merge_launch(seqs: int, padded_heads: int, num_splits: int, kv_lora: int, heads_per_workgroup: int,
                  threads: int, trips: tuple[int, ...], even_trips: int) -> Work:
    """`MlaDecode`'s log-sum-exp merge of its splits' partials: per split and output value, a rescale by
    exp(lse - max) and an accumulation, 4 FLOP for the LSEs. Its program: one (sequence, head block) workgroup with a
    trip per split that held rows (`trips` of each in grid order for uneven histories, else `even_trips`), each
    waiting for that split's partial (the partials of the block's heads that exist: a block wider than the padded
    heads holds no more), which the split launch just wrote. Kept by its values: histories that fill the same splits
    share one merge, which a serving run's batches make over and over."""
    s, hp, lora = seqs, padded_heads, kv_lora
    partial_bytes = s * num_splits * hp * (lora * 4 + 4)  # fp32 partial output + fp32 LSE
    heads = min(heads_per_workgroup, hp)  # as `MlaDecode._tile_out_bytes`
    part = heads * (lora + 1) * 4
    program = Program(trips=max(trips, default=even_trips), trip_load_bytes=part, trip_chain=_MERGE_TRIP_CHAIN,
                      trip_instructions=3 * part / 4 / threads, setup_chain=NO_CHAIN, trip_counts=trips,
                      fresh_input_bytes=partial_bytes, setup_store_bytes=heads * lora * 2)
    return Work(flop_by_dtype={Dtype.FP32: s * hp * num_splits * (2 * lora + 4)}, read_bytes=partial_bytes,
                write_bytes=Dtype.BF16.storage_bytes(s * hp * lora), workgroups=s * cdiv(hp, heads_per_workgroup),
                threads_per_workgroup=threads, family=Family.MLA_DECODE, program=program)


@lru_cache(maxsize=256)
def _split_trip(bn: int, threads: int, kv_dtype: Dtype, hpw: int, kv_lora: int, width: int
                ) -> tuple[Chain, float, int | float]:
    """One split-KV trip of block_n latent rows: (its chain, instructions per warp, bytes loaded).

    The chain: the score tile's accumulator chain over the 576-wide row and the output's over block_n rows; the row
    max and the row sum, each a reduction over block_n columns that the warps split (a cross-warp reduction each);
    two exponentials; P moved from the accumulator to the operand layout through LDS; and the LDS barrier that
    hands over the next pipeline stage. Instructions per warp: its share of the matrix instructions (16x8x16
    each) with one operand load apiece, ~12 per score (scale, mask, max, exp, sum, convert) and one rescale per
    output value.
    """
    warps = max(1, threads // 32)
    narrow = kv_dtype.bits <= 8
    chain = (Chain(mma=mma_steps(width, narrow) + mma_steps(bn, narrow), sfu=2, alu=3, lds=2)
             + 2 * reduction_chain(bn, warps, 32))
    mmas = hpw * bn * (width + kv_lora) / (16 * 8 * MMA_K) / warps
    per_thread = (hpw * bn * 12 + hpw * kv_lora) / threads
    return chain, 2 * mmas + per_thread, kv_dtype.storage_bytes(bn * width)

