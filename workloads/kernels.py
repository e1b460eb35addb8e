"""Kernel kinds: frozen dataclasses of shapes whose launches are counted as `Work`, one per GPU launch.

Every kind has `kind` (its CLI name), `launches()` (one Work per launch, in order, each timed on
its own grid) and `work()` (their sum). Matmul FLOP go under the kernel's math dtype, other
arithmetic under FP32; bytes are HBM bytes, each input read and each output written once per launch.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, ClassVar

from hwmodels.dtypes import Dtype
from hwmodels.program import Chain, Program, mma_steps, reduction_chain
from hwmodels.roofline import stream_program
from hwmodels.work import Family, Work
from workloads.attention_kernels import AttentionPrefill, MlaDecode
from workloads.codecs import Codec
from workloads.kda_kernels import KdaDecode, KdaPrefill, KdaVerify
from workloads.kernel_base import KernelKind, cdiv, check_bool, check_ints, coerce, full_block_figures

if TYPE_CHECKING:
    from hwmodels.spec import GPU

__all__ = [
    "KERNEL_KINDS", "AddRmsNorm", "AttentionPrefill", "AttnResMix", "Copy", "Dequantize", "Elementwise",
    "EmptyKernel", "Gemm", "GroupedMm", "KdaDecode", "KdaPrefill", "KdaVerify", "MlaDecode", "MoeGemm", "Quantize",
    "RmsNorm",
]










def _gemm_lds_bytes(stages: int, tile_m: int, tile_n: int, tile_k: int, dtype: Dtype) -> int:
    """LDS of a pipelined GEMM workgroup: `stages` A and B tiles, stages*(tm*tk + tk*tn)*bits/8 B."""
    return cdiv(stages * (tile_m * tile_k + tile_k * tile_n) * dtype.bits, 8)


# Rows of the matrix-core instruction: a tile is computed in multiples of this, so a skinny GEMM
# still executes 16 rows (MFMA/WGMMA 16xNxK shapes; CDNA3 ISA and the Hopper WGMMA m64 split by 4 warps).
_MMA_ROWS = 16


def rescale_flop(values: int, depth: int, group: int) -> int:
    """FP32 FLOP of a block-scaled matmul's rescaling: `values` accumulator values, each taking one fused
    multiply-add per `group`-deep slice of its `depth`-deep reduction (the slice's partial product times its
    row's and column block's scales, added to the accumulator); none without groups (`group` 0)."""
    return 2 * values * cdiv(depth, group) if group else 0


def _gemm_program(depth: int, tile_n: int, tile_k: int, stages: int, dtype: Dtype, row_blocks: float) -> Program:
    """A GEMM tile: k / tile_k trips, each loading its B tile `stages - 1` trips ahead (cp.async or TMA
    pipelines; buffer_load on CDNA) and feeding the accumulators tile_k deep; the matrix rate itself is the
    roofline's compute term. The `row_blocks` row blocks of a column share its B tiles: the first touch comes
    from HBM, the rest from L2 (the few A rows a trip needs hit L2 as well). Setup: the first stage's round
    trip is the first trip's load."""
    return Program(trips=cdiv(depth, tile_k), trip_load_bytes=dtype.storage_bytes(tile_n * tile_k),
                   prefetch=max(1, stages - 1), trip_chain=Chain(mma=mma_steps(tile_k, dtype.bits <= 8)),
                   reuse=row_blocks)


# cuBLAS's split-K reduction kernel: 512 threads (32 x 16) a block, as recorded on the H200
# (validation/data/h200/library/gemm_choices.csv); assumption: each thread sums the partials of 4 output values.
_REDUCE_THREADS, _REDUCE_VALUES_PER_BLOCK = 512, 2048


def _split_reduce(values: int, splits: int, out_dtype: Dtype) -> Work:
    """The split-K reduction launch: read `splits` fp32 partials of each output value, add them, write C."""
    read, write = 4.0 * splits * values, out_dtype.storage_bytes(values)
    return Work(flop_by_dtype={Dtype.FP32: float((splits - 1) * values)}, read_bytes=read, write_bytes=write,
                workgroups=cdiv(values, _REDUCE_VALUES_PER_BLOCK), threads_per_workgroup=_REDUCE_THREADS,
                family=Family.ELEMENTWISE,
                **full_block_figures(float((splits - 1) * values), read + write, values, _REDUCE_VALUES_PER_BLOCK))


def row_program(row_bytes: float, values: int, threads: int, store_bytes: float = 0.0) -> Program:
    """A row kernel (RMSNorm, add + RMSNorm): load the row, square and sum it over the whole workgroup
    (a block reduction), one reciprocal square root, scale, store. About six instructions per value a
    thread holds, plus thirty for addressing and the reduction. `row_bytes` are the row's own (the weight
    vector, read by every row, stays in L2 and is left out)."""
    chain = Chain(alu=3, sfu=1) + reduction_chain(threads, max(1, threads // 32), 32)
    return Program(trips=1, trip_load_bytes=row_bytes, trip_store_bytes=store_bytes, trip_chain=chain,
                   trip_instructions=6 * values / threads + 30, reduces_loads=True)


def _tile_figures(rows: int, cols: int, k: int, executed_rows: int, column_blocks: int, dtype: Dtype,
                  out_dtype: Dtype) -> dict[str, float]:
    """FLOP one output tile executes; what one column block streams: its B columns and its C tile.

    A is shared by every column block through L2, so it counts in the whole-GPU bytes only.
    """
    return {
        "flop_per_workgroup": 2 * executed_rows * cols * k,
        "memory_workgroups": column_blocks,
        "bytes_per_workgroup": dtype.storage_bytes(k * cols) + out_dtype.storage_bytes(rows * cols),
    }


@dataclass(frozen=True)
class Gemm(KernelKind):
    """C = A·B, the dense projections; the tiles set the grid and the LDS that limits occupancy."""

    kind: ClassVar[str] = "gemm"

    m: int  # rows of A and C (tokens)
    n: int  # columns of B and C (output features)
    k: int  # reduction depth (input features)
    dtype: Dtype = Dtype.BF16  # storage and math dtype of A and B; MX/NVFP4 scales count as bytes
    out_dtype: Dtype = Dtype.BF16  # storage dtype of C
    tile_m: int = 128  # rows of C per workgroup
    tile_n: int = 128  # columns of C per workgroup
    tile_k: int = 32  # reduction depth of one pipeline stage
    stages: int = 2  # pipeline stages resident in LDS at once (2 x 32 KiB fits the 64 KiB of CDNA3)
    threads: int = 256  # threads per workgroup
    split_k: int = 1  # reduction splits (skinny GEMMs fill the GPU this way); > 1 adds fp32 partial sums
    # output tiles whose k loop is split (stream-K's region: the tiles of the last waves, the rest data-parallel);
    # 0: every tile (split-K)
    split_tiles: int = 0
    # a split over k sums its fp32 partials in a kernel of its own, launched after the tiles (cuBLAS's
    # splitKreduce_kernel); False: the last split of a tile sums them in the same launch (a fix-up)
    reduce_launch: bool = False
    # Block-scaled operands (an FP8 checkpoint's 128 x 128 weight blocks and 1 x 128 activation groups, FP32
    # scales): reduction depth per scale group, whose partial product the kernel rescales into its accumulator on
    # the vector ALUs (`rescale_flop`, FP32); 0: unscaled or scaled once after the loop (per-tensor)
    scale_group_k: int = 0
    # AITER's Triton block-scaled FP8 GEMM (companion/kernels/aiter_gemm.py, the kernel SGLang runs on ROCm): A's
    # rows wrap modulo m instead of being masked, so every tile computes and loads all tile_m rows, and each trip
    # loads its A and B tiles and their scales; timed from its compiled code where that can be had
    # (`compiled.companion`). False: a vendor library's GEMM.
    aiter_triton: bool = False

    def __post_init__(self) -> None:
        check_ints(self, ("m", "n", "k", "tile_m", "tile_n", "tile_k", "stages", "threads", "split_k"),
                   ("scale_group_k",))
        check_bool(self, "aiter_triton")
        if isinstance(self.split_tiles, bool) or not isinstance(self.split_tiles, int) or self.split_tiles < 0:
            raise ValueError(f"split_tiles must be a whole number >= 0 (0: every tile), got {self.split_tiles!r}")
        coerce(self, "dtype", Dtype)
        coerce(self, "out_dtype", Dtype)
        if self.split_k > self.k:
            raise ValueError(f"split_k ({self.split_k}) must not exceed k ({self.k})")
        check_bool(self, "reduce_launch")

    def launches(self) -> tuple[Work, ...]:
        """One launch over ceil(m/tile_m) x ceil(n/tile_n) output tiles, each split split_k ways over k.

        With split_k > 1 every split of a split tile writes an fp32 partial C tile and the last reads them back to
        sum (the fix-up, in one launch): 2 x split_k x 4 bytes per value of the split tiles, all of C under split-K,
        `split_tiles` of them under stream-K's hybrid (the data-parallel tiles write C once).
        """
        m, n, k, splits = self.m, self.n, self.k, self.split_k
        rows, cols, depth = min(m, self.tile_m), min(n, self.tile_n), cdiv(k, splits)
        split_values = m * n if not self.split_tiles else min(m * n, self.split_tiles * self.tile_m * self.tile_n)
        partials = 2 * splits * split_values * 4 if splits > 1 else 0
        executed = self.tile_m if self.aiter_triton else min(self.tile_m, cdiv(m, _MMA_ROWS) * _MMA_ROWS)
        figures = _tile_figures(rows, cols, depth, executed, cdiv(n, self.tile_n) * splits, self.dtype,
                                self.out_dtype)
        figures["flop_per_workgroup"] += rescale_flop(executed * cols, depth, self.scale_group_k)
        separate = self.reduce_launch and splits > 1
        reads_back = 0.0 if separate else partials / 2
        output = 0.0 if separate else self.out_dtype.storage_bytes(m * n)
        rescale = rescale_flop(m * n, depth, self.scale_group_k) * splits
        tiles = (
            Work(
                flop_by_dtype={self.dtype: 2 * m * n * k, **({Dtype.FP32: rescale} if rescale else {})},
                read_bytes=self.dtype.storage_bytes(m * k) + self.dtype.storage_bytes(k * n) + reads_back,
                write_bytes=output + partials / 2,
                workgroups=cdiv(m, self.tile_m) * cdiv(n, self.tile_n) * splits,
                threads_per_workgroup=self.threads,
                lds_bytes_per_workgroup=_gemm_lds_bytes(
                    self.stages, self.tile_m, self.tile_n, self.tile_k, self.dtype
                ),
                family=Family.GEMM,
                program=(self._aiter_program(depth) if self.aiter_triton else
                         _gemm_program(depth, cols, self.tile_k, self.stages, self.dtype, cdiv(m, self.tile_m))),
                **figures,
            ),
        )
        return tiles + ((_split_reduce(m * n, splits, self.out_dtype),) if separate else ())

    def _aiter_program(self, depth: int) -> Program:
        """AITER's loop (companion/kernels/aiter_gemm.py): each trip loads all tile_m rows of A (wrapped), the B
        tile, and an fp32 scale for each of the tile's rows and columns; the grid reads A, B and the scales from HBM
        once and the rest of its loads hit L2 (`reuse`: the loads over the bytes)."""
        group = self.scale_group_k or self.tile_k
        trip = self.dtype.storage_bytes((self.tile_m + self.tile_n) * self.tile_k) + 4 * (self.tile_m + self.tile_n)
        trips = cdiv(depth, self.tile_k)
        tiles = cdiv(self.m, self.tile_m) * cdiv(self.n, self.tile_n) * self.split_k
        hbm = (self.dtype.storage_bytes((self.m + self.n) * self.k)
               + 4 * cdiv(self.k, group) * (self.m + cdiv(self.n, group)))
        return Program(trips=trips, trip_load_bytes=trip, prefetch=max(1, self.stages - 1),
                       trip_chain=Chain(mma=mma_steps(self.tile_k, self.dtype.bits <= 8)),
                       reuse=max(1.0, tiles * trips * trip / hbm))


def _check_expert_rows(kernel: MoeGemm | GroupedMm) -> None:
    """Uneven rows by expert (`rows_by_expert`), when given, agree with `experts` and `tokens_per_expert`."""
    rows = kernel.rows_by_expert
    if not rows:
        return
    if any(not isinstance(r, int) or r < 0 for r in rows):
        raise ValueError(f"rows_by_expert must be non-negative integers, got {rows!r}")
    if len(rows) != kernel.experts or max(rows) != kernel.tokens_per_expert:
        raise ValueError(f"rows_by_expert has {len(rows)} experts and at most {max(rows)} rows; experts="
                         f"{kernel.experts} and tokens_per_expert={kernel.tokens_per_expert} must match")


@dataclass(frozen=True)
class MoeGemm(KernelKind):
    """Grouped expert GEMM with rows padded to tile_m: padding costs FLOP, idle experts cost nothing."""

    kind: ClassVar[str] = "moe-gemm"

    experts: int  # experts in the group (all with the same token count)
    tokens_per_expert: int  # rows routed to each expert; 0 leaves the experts idle
    n: int  # output features per expert
    k: int  # input features per expert
    dtype: Dtype = Dtype.BF16  # storage and math dtype of tokens and weights
    out_dtype: Dtype = Dtype.BF16  # storage dtype of the output
    tile_m: int = 64  # token rows per workgroup; each expert's rows are padded to a multiple
    tile_n: int = 128  # output columns per workgroup
    tile_k: int = 32  # reduction depth of one pipeline stage
    stages: int = 2  # pipeline stages resident in LDS at once (2 x 32 KiB fits the 64 KiB of CDNA3)
    threads: int = 256  # threads per workgroup
    # rows routed to each expert when they differ (a skewed router); empty: every one of `experts` gets
    # `tokens_per_expert`. Given, `experts` and `tokens_per_expert` must be its length and its largest.
    rows_by_expert: tuple[int, ...] = ()
    scale_group_k: int = 0  # block-scaled operands: reduction depth per scale group, as `Gemm.scale_group_k`
    # Row tiles of the launched grid where it is sized for the worst padding of any routing (vLLM's and SGLang's
    # Triton fused-MoE kernel: routed rows + experts x (tile_m - 1), so that one captured graph serves every
    # routing; `worst_case_row_tiles`), its programs past the padded rows exiting at once; 0: the row tiles the
    # routing fills (AITER's and CUTLASS's grouped kernels)
    grid_row_tiles: int = 0

    def __post_init__(self) -> None:
        check_ints(self, ("experts", "n", "k", "tile_m", "tile_n", "tile_k", "stages", "threads"),
                    ("tokens_per_expert", "scale_group_k", "grid_row_tiles"))
        coerce(self, "dtype", Dtype)
        coerce(self, "out_dtype", Dtype)
        _check_expert_rows(self)

    def _rows(self) -> tuple[int, ...]:
        return self.rows_by_expert or (self.tokens_per_expert,) * self.experts

    def launches(self) -> tuple[Work, ...]:
        """One launch over every expert's padded row tiles; an idle expert reads no weights. Uneven experts add
        their own row tiles; the weight tile of an expert is shared by its row tiles (through L2) on average."""
        n, k, rows = self.n, self.k, self._rows()
        active = [r for r in rows if r]

        def tiles_of(r: int) -> int:
            return cdiv(r, self.tile_m)

        row_tiles = sum(map(tiles_of, active))
        routed = sum(active)
        mean_tiles = row_tiles / len(active) if active else 0.0
        if self.grid_row_tiles and self.grid_row_tiles < row_tiles:
            raise ValueError(f"grid_row_tiles ({self.grid_row_tiles}) must hold the {row_tiles} row tiles the "
                             f"routing fills")
        figures = _tile_figures(min(max(rows), self.tile_m), min(n, self.tile_n), k, self.tile_m,
                                len(active) * cdiv(n, self.tile_n), self.dtype, self.out_dtype)
        figures["flop_per_workgroup"] += rescale_flop(self.tile_m * min(n, self.tile_n), k, self.scale_group_k)
        rescale = rescale_flop(row_tiles * self.tile_m * n, k, self.scale_group_k)
        return (
            Work(
                flop_by_dtype={self.dtype: 2 * row_tiles * self.tile_m * n * k,
                               **({Dtype.FP32: rescale} if rescale else {})},
                read_bytes=self.dtype.storage_bytes(routed * k) + len(active) * self.dtype.storage_bytes(k * n),
                write_bytes=self.out_dtype.storage_bytes(routed * n),
                workgroups=row_tiles * cdiv(n, self.tile_n),
                threads_per_workgroup=self.threads,
                lds_bytes_per_workgroup=_gemm_lds_bytes(
                    self.stages, self.tile_m, self.tile_n, self.tile_k, self.dtype
                ),
                family=Family.MOE_GEMM,
                program=_gemm_program(k, min(n, self.tile_n), self.tile_k, self.stages, self.dtype,
                                      max(1.0, mean_tiles)),
                exiting_workgroups=max(0, self.grid_row_tiles - row_tiles) * cdiv(n, self.tile_n),
                l2_phases=_group_phases(active, n, k, self.tile_n, tiles_of, self.dtype, self.out_dtype),
                **figures,
            ),
        )


def _group_phases(rows: list[int], n: int, k: int, tile_n: int, row_tiles: Callable[[int], int], dtype: Dtype,
                  out_dtype: Dtype) -> tuple[tuple[float, float], ...]:
    """(HBM bytes, L2 reads) of each group's workgroups, which run together: a fused MoE walks its row tiles in
    the sorted order of their rows and a persistent grouped GEMM its tiles group by group, expert after expert
    (`Work.l2_phases`). A group's weight comes from HBM once and is read by each of its `row_tiles(rows)` row
    tiles; its rows are read by each column tile and its output written once. Groups with equal rows are one phase
    of their summed bytes (the same bound, added)."""
    weight, column_tiles = dtype.storage_bytes(k * n), cdiv(n, tile_n)
    phases = []
    for r, count in sorted(Counter(rows).items()):
        hbm = weight + dtype.storage_bytes(r * k) + out_dtype.storage_bytes(r * n)
        phases.append((count * hbm, count * (row_tiles(r) * weight + column_tiles * dtype.storage_bytes(r * k))))
    return tuple(phases)


def worst_case_row_tiles(routed_rows: int, experts: int, tile_m: int, capped: bool = True) -> int:
    """Row tiles of vLLM's fused-MoE grid for `routed_rows` rows over `experts` experts: `moe_align_block_size`
    sizes its sorted rows for the worst padding of any routing, routed rows + experts x (tile_m - 1), at most
    routed rows x tile_m where the rows are fewer than the experts (vllm/model_executor/layers/fused_moe/
    moe_align_block_size.py, `max_num_tokens_padded`), and `fused_moe_kernel`'s grid is cdiv(that, BLOCK_SIZE_M) x
    cdiv(N, BLOCK_SIZE_N) (fused_moe.py, `invoke_fused_moe_kernel`). SGLang's fused_moe_triton sizes it the same way
    (assumption: its align and grid follow the vLLM code they were adapted from). `capped` False: the rule before
    vLLM capped small batches, which the companion kernel (`companion.kernels.moe.align`) keeps."""
    worst = routed_rows + experts * (tile_m - 1)
    return cdiv(min(routed_rows * tile_m, worst) if capped else worst, tile_m)


# `torch._grouped_mm` on Hopper: PyTorch's CUTLASS ptr-array TMA grouped GEMM (pytorch/pytorch
# aten/src/ATen/native/cuda/GroupMM.cu). One call is two launches: `prepare_grouped_gemm_data<<<1, groups>>>`
# writes each group's pointers, strides and problem size (3 pointers, 3 strides, 3 int32: 60 bytes), then the GEMM,
# a persistent grid of 2 x 1 clusters. Its tile by the rows a group holds on average (`M = rows / groups`):
# M <= 128 or N <= 128 takes 64 x 128 x 128 tiles (ping-pong), else 128 x 256 x 64 (cooperative); both a
# producer and two consumer warpgroups; stages fill the shared memory the epilogue leaves (StageCountAutoCarveout:
# four of 48 KiB either way). Fewer than 1,024 groups.
GROUPED_SMALL_TILE, GROUPED_LARGE_TILE = (64, 128, 128), (128, 256, 64)
GROUPED_CLUSTER_M, GROUPED_STAGES, GROUPED_THREADS, GROUPED_MAX_GROUPS = 2, 4, 384, 1023
_GROUPED_PREP_BYTES = 60  # written per group by the preparation kernel; it reads the group's int32 offset
# The persistent grid walks the tiles group by group, each cluster taking every S-th tile: S = 66, the clusters of
# two on the 132 SMs of an H100 SXM or H200 (the Hopper path this kind models)
GROUPED_GRID_CLUSTERS = 66
# A CTA whose next tile is another group's rewrites its TMA descriptors in global memory and fences them before
# that tile's first load. The grouped probe measured 1.03 us a switch on one H200 (median over k = 128-2048 of the
# extra time of 1,023 one-cluster groups over one group of the same tiles, per tile a SM:
# validation/data/h200/probe_grouped.csv, `validation.grouped_gemm.switch_s`), 2.95 times its idle DRAM round
# trip (349.5 ns, probe_latency.csv): counted as that many round trips in each switching tile's set-up.
GROUPED_SWITCH_ROUND_TRIPS = 2.95
# A group's rows of A are read by every cluster that runs one of the group's column tiles, each k-step, and the
# persistent grid hands consecutive tiles (a group's column tiles in turn) to its clusters, so min(C, 66) clusters
# read the same lines at once and queue at the L2 slices that hold them. The grouped probe's wide layouts (about
# 1,023 cluster tiles as groups of C = 2 to 56 column tiles and 1 to 32 rows, each group its own [n, k] weights,
# validation/data/h200/probe_grouped.csv) take longer than the same bytes as one-column-tile groups
# (`distinct1t`) by a time per trip that grows with C and falls with the rows: counted as
# GROUPED_SHARED_A_ROUND_TRIPS x sqrt(readers - 1) / rows idle L2 round trips (142.7 ns) a trip
# (`grouped_shared_a_round_trips`). The constant is the median over those layouts and k of the extra time per trip
# in that unit (`validation.grouped_gemm.shared_a_round_trips`). The square root and the 1 / rows are assumptions:
# the simplest forms that follow the probe's two sweeps (readers 1 to 55: 0.02 to 0.20 us a trip; rows 1, 2, 8:
# 0.15, 0.09, 0.02 us at 24 readers); the Nsight Compute profiles of `wide1t` found the busiest L2 slice serving
# 1.22 times the mean slice's reads against 1.04 in the one-tile layout, and the same DRAM bytes.
GROUPED_SHARED_A_ROUND_TRIPS = 0.195


def grouped_shared_a_round_trips(column_tiles: int, rows: float) -> float:
    """Idle L2 round trips one trip of a grouped GEMM's tile waits for its group's rows of A, when `column_tiles`
    clusters' tiles read the same `rows` rows (see `GROUPED_SHARED_A_ROUND_TRIPS`); 0 for one reader."""
    readers = min(column_tiles, GROUPED_GRID_CLUSTERS)
    if readers <= 1:
        return 0.0
    return GROUPED_SHARED_A_ROUND_TRIPS * math.sqrt(readers - 1) / max(1.0, rows)


@dataclass(frozen=True)
class GroupedMm(KernelKind):
    """`torch._grouped_mm` (CUTLASS's grouped GEMM on Hopper) over experts' rows sorted by expert, bf16: the
    library's own tile, cluster and persistent walk, not tiles chosen here. Each group's rows are padded to whole
    clusters (an expert with two rows still runs two 64-row CTAs per column tile); a CTA moving to another group's
    tile pays the descriptor switch (`GROUPED_SWITCH_ROUND_TRIPS`), and after its last tile every CTA walks the
    empty groups that follow the last one with rows (`Calibration.library_grouped_scan_s` each)."""

    kind: ClassVar[str] = "grouped-mm"

    experts: int  # groups (weight matrices)
    tokens_per_expert: int  # rows of each group when they are even; the largest group's rows otherwise
    n: int
    k: int
    rows_by_expert: tuple[int, ...] = ()  # rows of each group when they differ (a skewed router)

    def __post_init__(self) -> None:
        check_ints(self, ("experts", "n", "k"), ("tokens_per_expert",))
        if self.experts > GROUPED_MAX_GROUPS:
            raise ValueError(f"torch._grouped_mm takes at most {GROUPED_MAX_GROUPS} groups, got experts="
                             f"{self.experts}")
        _check_expert_rows(self)

    def _rows(self) -> tuple[int, ...]:
        return self.rows_by_expert or (self.tokens_per_expert,) * self.experts

    def check_gpu(self, gpu: GPU) -> None:
        """Only Hopper's kernel is modelled: Blackwell's tiles (128 x 256 and 256 x 256) and ROCm's grouped GEMM
        are other kernels."""
        if "sm_90" not in gpu.arch.lower():  # the spec's "hopper (sm_90)"
            raise ValueError(f"grouped-mm models torch._grouped_mm's Hopper (sm_90) kernel; {gpu.name} is not a "
                             f"Hopper GPU (valid: h100, h200)")

    def tile(self) -> tuple[int, int, int]:
        """(tile_m, tile_n, tile_k) the library picks for these groups."""
        mean_rows = sum(self._rows()) // self.experts
        return GROUPED_SMALL_TILE if mean_rows <= 128 or self.n <= 128 else GROUPED_LARGE_TILE

    def switch_share(self) -> float:
        """Share of the cluster tiles whose cluster came from another group's tile (or started with it)."""
        tile_m, tile_n, _ = self.tile()
        per_group = [cdiv(cdiv(r, tile_m), GROUPED_CLUSTER_M) * cdiv(self.n, tile_n) for r in self._rows() if r]
        total = sum(per_group)
        stays = sum(max(0, t - GROUPED_GRID_CLUSTERS) for t in per_group)
        return 1.0 - stays / total if total else 0.0

    def launches(self) -> tuple[Work, ...]:
        rows, dtype = self._rows(), Dtype.BF16
        tile_m, tile_n, tile_k = self.tile()
        active = [r for r in rows if r]
        prep_bytes = float(_GROUPED_PREP_BYTES * self.experts)
        prep = Work(flop_by_dtype={}, read_bytes=4.0 * self.experts, write_bytes=prep_bytes, workgroups=1,
                    threads_per_workgroup=self.experts, family=Family.ELEMENTWISE,
                    **full_block_figures(0.0, prep_bytes + 4.0 * self.experts, 1, 1))
        if not active:
            return (prep,)

        def tiles_of(r: int) -> int:  # a group's row tiles, padded to whole clusters
            return cdiv(cdiv(r, tile_m), GROUPED_CLUSTER_M) * GROUPED_CLUSTER_M

        row_tiles = sum(map(tiles_of, active))
        col_tiles = cdiv(self.n, tile_n)
        routed = sum(active)
        program = _gemm_program(self.k, min(self.n, tile_n), tile_k, GROUPED_STAGES, dtype,
                                max(1.0, row_tiles / len(active)))
        program = replace(program, setup_chain=Chain(dram=self.switch_share() * GROUPED_SWITCH_ROUND_TRIPS),
                          trip_shared_l2=grouped_shared_a_round_trips(col_tiles, min(routed / len(active), tile_m)))
        gemm = Work(
            flop_by_dtype={dtype: 2.0 * row_tiles * tile_m * self.n * self.k},
            read_bytes=dtype.storage_bytes(routed * self.k) + len(active) * dtype.storage_bytes(self.k * self.n),
            write_bytes=dtype.storage_bytes(routed * self.n),
            workgroups=row_tiles * col_tiles, threads_per_workgroup=GROUPED_THREADS,
            lds_bytes_per_workgroup=_gemm_lds_bytes(GROUPED_STAGES, tile_m, tile_n, tile_k, dtype),
            family=Family.MOE_GEMM, program=program, grouped_library=True,
            grouped_tail_groups=len(rows) - max(i for i, r in enumerate(rows) if r) - 1,
            l2_phases=_group_phases(active, self.n, self.k, tile_n, tiles_of, dtype, dtype),
            **_tile_figures(min(max(rows), tile_m), min(self.n, tile_n), self.k, tile_m, len(active) * col_tiles,
                            dtype, dtype),
        )
        return prep, gemm


# Row kernels (norms, AttnRes mixing) reduce a row with wave shuffles and a few words of scratch, so
# their LDS (threads/64 * 4 B at most) never limits occupancy: assumption, counted as 0.


@dataclass(frozen=True)
class RmsNorm(KernelKind):
    """RMSNorm over each token's hidden vector: one workgroup per token row, memory-bound."""

    kind: ClassVar[str] = "rmsnorm"

    tokens: int  # rows
    hidden: int  # values per row
    dtype: Dtype = Dtype.BF16  # storage dtype of input, weight and output
    threads: int = 256  # threads per workgroup

    def __post_init__(self) -> None:
        check_ints(self, ("tokens", "hidden", "threads"))
        coerce(self, "dtype", Dtype)

    def launches(self) -> tuple[Work, ...]:
        """One launch; 4 FLOP per value: square, sum, scale by 1/rms, scale by weight."""
        t, h = self.tokens, self.hidden
        return (
            Work(
                flop_by_dtype={Dtype.FP32: 4 * t * h},
                read_bytes=self.dtype.storage_bytes(t * h) + self.dtype.storage_bytes(h),
                write_bytes=self.dtype.storage_bytes(t * h),
                workgroups=t,
                threads_per_workgroup=self.threads,
                family=Family.NORM,
                program=row_program(self.dtype.storage_bytes(h), h, self.threads, self.dtype.storage_bytes(h)),
            ),
        )


@dataclass(frozen=True)
class AddRmsNorm(KernelKind):
    """Residual add then RMSNorm; fusing keeps the sum in registers and saves a launch and a re-read."""

    kind: ClassVar[str] = "add-rmsnorm"

    tokens: int  # rows
    hidden: int  # values per row
    fused: bool = True  # one kernel; False: an elementwise add, then an RmsNorm that re-reads the sum
    dtype: Dtype = Dtype.BF16  # storage dtype of every tensor
    threads: int = 256  # threads per workgroup

    def __post_init__(self) -> None:
        check_ints(self, ("tokens", "hidden", "threads"))
        check_bool(self, "fused")
        coerce(self, "dtype", Dtype)

    def launches(self) -> tuple[Work, ...]:
        """Fused: read x, residual and weight, write the new residual and the normed output."""
        t, h = self.tokens, self.hidden
        if not self.fused:
            add = Elementwise(elements=t * h, inputs=2, ops_per_element=1, dtype=self.dtype,
                              threads=self.threads)
            norm = RmsNorm(tokens=t, hidden=h, dtype=self.dtype, threads=self.threads)
            return add.launches() + norm.launches()
        return (
            Work(
                flop_by_dtype={Dtype.FP32: 5 * t * h},  # the add, then RMSNorm's 4 per value
                read_bytes=self.dtype.storage_bytes(2 * t * h) + self.dtype.storage_bytes(h),
                write_bytes=self.dtype.storage_bytes(2 * t * h),
                workgroups=t,
                threads_per_workgroup=self.threads,
                family=Family.NORM,
                program=row_program(self.dtype.storage_bytes(2 * h), 2 * h, self.threads,
                                    self.dtype.storage_bytes(2 * h)),
            ),
        )


@dataclass(frozen=True)
class AttnResMix(KernelKind):
    """AttnRes: each token attends over earlier block outputs (depth), optionally fused with RMSNorm."""

    kind: ClassVar[str] = "attnres-mix"

    tokens: int  # rows
    hidden: int  # values per row
    sources: int  # earlier block outputs mixed into each token
    fused_norm: bool = False  # True: RMSNorm applied in registers; False: an RmsNorm launch re-reads
    dtype: Dtype = Dtype.BF16  # storage dtype of every tensor
    threads: int = 256  # threads per workgroup; one workgroup per token

    def __post_init__(self) -> None:
        check_ints(self, ("tokens", "hidden", "sources", "threads"))
        check_bool(self, "fused_norm")
        coerce(self, "dtype", Dtype)

    def launches(self) -> tuple[Work, ...]:
        """Per token: s dot products (2sH), softmax over s (5s) and the weighted sum (2sH)."""
        t, h, s = self.tokens, self.hidden, self.sources
        mix_flop = t * (4 * s * h + 5 * s)
        sources_bytes = self.dtype.storage_bytes(s * t * h) + self.dtype.storage_bytes(h)  # + query
        if self.fused_norm:
            return (
                Work(
                    flop_by_dtype={Dtype.FP32: mix_flop + 4 * t * h},
                    read_bytes=sources_bytes + self.dtype.storage_bytes(h),  # + norm weight
                    write_bytes=self.dtype.storage_bytes(2 * t * h),  # the mixture and its norm
                    workgroups=t,
                    threads_per_workgroup=self.threads,
                    family=Family.NORM,
                ),
            )
        mix = Work(
            flop_by_dtype={Dtype.FP32: mix_flop},
            read_bytes=sources_bytes,
            write_bytes=self.dtype.storage_bytes(t * h),
            workgroups=t,
            threads_per_workgroup=self.threads,
            family=Family.ELEMENTWISE,
        )
        return (mix, *RmsNorm(tokens=t, hidden=h, dtype=self.dtype, threads=self.threads).launches())


@dataclass(frozen=True)
class Elementwise(KernelKind):
    """A pointwise kernel over `elements` values: pure bandwidth and launch cost."""

    kind: ClassVar[str] = "elementwise"

    elements: int  # output values
    inputs: int = 2  # input tensors of `elements` values each
    ops_per_element: int = 1  # FP32 arithmetic per output value
    dtype: Dtype = Dtype.BF16  # storage dtype of inputs and output
    threads: int = 256  # threads per workgroup
    elements_per_workgroup: int = 4096  # values per workgroup (16 per thread at 256 threads)
    # the inputs were written by the launch just before (an in-place update launched back to back, `x.add_(1)`), so
    # where they fit they are read from L2 (`Program.fresh_input_bytes`)
    input_in_l2: bool = False

    def __post_init__(self) -> None:
        check_ints(self, ("elements", "threads", "elements_per_workgroup"), ("inputs", "ops_per_element"))
        coerce(self, "dtype", Dtype)
        check_bool(self, "input_in_l2")

    def launches(self) -> tuple[Work, ...]:
        """One launch; no LDS, since no value is shared between threads."""
        e = self.elements
        flop = self.ops_per_element * e
        read, write = self.inputs * self.dtype.storage_bytes(e), self.dtype.storage_bytes(e)
        work = Work(
            flop_by_dtype={Dtype.FP32: flop},
            read_bytes=read,
            write_bytes=write,
            workgroups=cdiv(e, self.elements_per_workgroup),
            threads_per_workgroup=self.threads,
            family=Family.ELEMENTWISE,
            **full_block_figures(flop, read + write, e, self.elements_per_workgroup),
        )
        if self.input_in_l2:  # each workgroup loads its share and stores its share once
            share = 1 / work.workgroups
            work = replace(work, program=Program(trips=1, trip_load_bytes=read * share,
                                                 trip_store_bytes=write * share, fresh_input_bytes=read))
        return (work,)


@dataclass(frozen=True)
class EmptyKernel(KernelKind):
    """A Triton kernel whose body does nothing: one workgroup of one warp, no FLOP, no bytes, launched through
    Triton's launcher when eager. Its time is the launch's cost alone: what a graph node or an eager launch adds."""

    kind: ClassVar[str] = "empty"

    def launches(self) -> tuple[Work, ...]:
        return (Work({}, 0.0, 0.0, workgroups=1, threads_per_workgroup=32, family=Family.ELEMENTWISE,
                     triton_launch=True),)


@dataclass(frozen=True)
class Copy(KernelKind):
    """A device copy: the matmul dispatcher's useless packing copies (Kimi K3 study) cost launches and bandwidth."""

    kind: ClassVar[str] = "copy"

    size_bytes: int  # bytes copied (read once, written once)
    threads: int = 256  # threads per workgroup
    bytes_per_workgroup: int = 16384  # 64 B per thread at 256 threads
    # the workgroups are persistent programs, each looping over every grid-th block of the copy (a grid smaller
    # than the blocks): they get `Calibration.grid_stride_efficiency` of the bandwidth (the grid probe)
    grid_stride: bool = False

    def __post_init__(self) -> None:
        check_ints(self, ("size_bytes", "threads", "bytes_per_workgroup"))

    def launches(self) -> tuple[Work, ...]:
        """One launch, no arithmetic."""
        work = Work(
            flop_by_dtype={},
            read_bytes=self.size_bytes,
            write_bytes=self.size_bytes,
            workgroups=cdiv(self.size_bytes, self.bytes_per_workgroup),
            threads_per_workgroup=self.threads,
            family=Family.COPY,
            **full_block_figures(0.0, 2 * self.size_bytes, self.size_bytes, self.bytes_per_workgroup),
        )
        return (replace(work, program=stream_program(work, grid_stride=True)) if self.grid_stride else work,)


def _codec_launch(values: int, codec: Codec, threads: int, flop_per_value: int, encode: bool) -> Work:
    """One workgroup per 2048-value tile; fp16 on one side, the codec's wire format on the other."""
    flop = 0 if codec is Codec.FP else flop_per_value * values
    plain, wire = Dtype.FP16.storage_bytes(values), codec.wire_bytes(values)
    tile = min(values, codec.tile_values)
    plain_tile, wire_tile = Dtype.FP16.storage_bytes(tile), codec.wire_bytes(tile)
    program = Program(trips=1, trip_load_bytes=plain_tile if encode else wire_tile,
                      trip_store_bytes=wire_tile if encode else plain_tile,
                      trip_chain=_codec_chain(codec, encode), trip_instructions=12 * tile / threads + 30,
                      reduces_loads=encode and codec is not Codec.FP)  # the encoder's absmax reduces its tile
    return Work(
        flop_by_dtype={Dtype.FP32: flop} if flop else {},
        read_bytes=plain if encode else wire,
        write_bytes=wire if encode else plain,
        workgroups=cdiv(values, codec.tile_values),
        threads_per_workgroup=threads,
        family=Family.CODEC,
        program=program,
        **full_block_figures(flop, plain + wire, values, codec.tile_values),
    )


def _codec_chain(codec: Codec, encode: bool) -> Chain:
    """Dependent steps of one QuickReduce tile after its load. Encode: a thread's local absmax over its
    values (3 levels), the group's absmax across the lanes that share a scale (2 shuffles), the scale's
    reciprocal, scale, round and clip, then packing into the wire words (shifts and ors). Decode: unpack,
    unbias, scale. The FP codec is a copy."""
    if codec is Codec.FP:
        return Chain()
    if encode:
        return Chain(alu=6, shuffle=2, sfu=1, int=4)
    return Chain(int=3, alu=2)


@dataclass(frozen=True)
class Quantize(KernelKind):
    """fp16 to a QuickReduce codec, one 2048-value tile per workgroup (QuickReduce study)."""

    kind: ClassVar[str] = "quantize"

    values: int  # fp16 values to encode
    codec: Codec = Codec.INT4  # wire format
    threads: int = 256  # threads per workgroup (QuickReduce: 256 threads x 8 values per tile)

    def __post_init__(self) -> None:
        check_ints(self, ("values", "threads"))
        coerce(self, "codec", Codec)

    def launches(self) -> tuple[Work, ...]:
        """5 FLOP per value: absmax, scale, round, clip twice; the FP codec is a plain copy."""
        return (_codec_launch(self.values, self.codec, self.threads, 5, encode=True),)


@dataclass(frozen=True)
class Dequantize(Quantize):
    """A QuickReduce codec back to fp16, one 2048-value tile per workgroup (QuickReduce study)."""

    kind: ClassVar[str] = "dequantize"

    def launches(self) -> tuple[Work, ...]:
        """2 FLOP per value: unbias and scale; the FP codec is a plain copy."""
        return (_codec_launch(self.values, self.codec, self.threads, 2, encode=False),)


KERNEL_KINDS: Mapping[str, type] = MappingProxyType({
    cls.kind: cls
    for cls in (
        Gemm, MoeGemm, GroupedMm, AttentionPrefill, MlaDecode, KdaPrefill, KdaDecode, KdaVerify,
        RmsNorm, AddRmsNorm, AttnResMix, Elementwise, Copy, Quantize, Dequantize, EmptyKernel,
    )
})
