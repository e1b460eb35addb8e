"""`probes`: microbenchmarks of the hardware constants of the cycle-level cost model, one CSV per probe.

    python -m companion.bench probes --out DIR              # every probe; DIR defaults to $OUT
    python -m companion.bench probes --only mlp l2 --quick  # a subset, fewer configurations

Each probe isolates one mechanism the model charges for, and its CSV (`probe_<name>.csv`, columns in
`validation.probes.COLUMNS`) holds the probe's own shape columns, the timing columns (median, p10, p90
of >= 20 CUDA-event samples after warm-up), the per-row derived values and provenance, with the SM clock
nvidia-smi read before and after the probe. `validation.probes` derives the constants from the CSVs; the
summary printed at the end is its table. Cycles come from `%clock64` inside the kernel (the SM's own
counter, so they do not depend on the clock nvidia-smi samples); per-SM rates use, for each SM, the span
from its first program's start to its last program's end.

The probes, what each measures, and the GPU time each takes on one NVIDIA H200 (compilation included,
about 1-2 s per distinct kernel configuration; ~30 configurations in all):

- latency (~8 s): dependent-load latency of L2 and HBM (pointer chase over 16 KiB to 2 GiB).
- mlp (~25 s): read bandwidth per SM against bytes in flight per SM: latency under load and per-SM cap.
- async (~40 s): the same curve when tiles reach shared memory by asynchronous copy (cp.async), and through
  registers in the same kernel for comparison.
- l2 (~8 s): bandwidth of repeated reads of a footprint: the L2 plateau and where reuse falls out of L2.
- floor (~5 s): per-node time of tiny kernels in a CUDA graph: the launch floor and one DRAM round trip.
- issue (~20 s): issue rate and dependent latency of FFMA, IMAD, shift/LOP3 and MUFU.EX2, and the issue rate of
  one FRND.FLOOR among 16 FFMAs (what a conversion costs the scheduler's issue).
- mma (~8 s): latency of a dependent chain of `tl.dot` (mma.sync, wgmma).
- smem (~6 s): a cross-warp reduction's round trip, and shared-memory bandwidth of a layout conversion.
- loaded (~10 s): dependent-load latency (the pointer chase over 256 MiB) while a background kernel on other SMs
  reads, writes or copies at 0.3 to 4.4 TB/s: how far each kind of traffic lengthens a round trip.
- grouped (~10 s): what a CUTLASS grouped GEMM (`torch._grouped_mm`) pays when a persistent CTA moves to another
  group's tile: the same tiles as one group and as 1,023 groups, at depths 128 to 2,048.
- queue (~30 s, not yet recorded): how many conflicted shared stores a warp issues before the shared pipe holds
  it back (the MIO queue's depth), with one warp and with one on each scheduler.

Total about 80 s, under 2 min with start-up (`--quick`: about half). Every probe runs in its own
try/except: a failure is recorded, printed, and the next probe runs; each CSV is written when its probe ends.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from companion.bench.output import report_failures, start_timing
from validation import probes as spec
from validation.measure_output import write_csv_atomic

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30

# latency: footprints from L1-sized (served by L2: loads bypass L1) through L2 (60 MiB) to far past it.
CHASE_FOOTPRINTS = (16 * KIB, 256 * KIB, 4 * MIB, 16 * MIB, 32 * MIB, 256 * MIB, 2 * GIB)
CHASE_FOOTPRINTS_QUICK = (16 * KIB, 4 * MIB, 2 * GIB)
CHASE_STEPS = 4096
CHASE_WARM_MAX = 32 * MIB  # footprints up to this are read once before timing, so they start L2-resident
CLOCK_SAMPLES = 5  # launches whose %clock64 records are read back, per configuration

# mlp: 1 GiB of fp32; each sample reads at most MLP_ITERS blocks per program, starting where the last ended.
MLP_BUFFER_BYTES = 1 * GIB
MLP_ITERS = 512
MLP_PROGRAMS_PER_SM = (1, 2, 4)
MLP_BLOCKS = (256, 1024, 4096, 16384)
MLP_WARPS = (1, 4, 8)
MLP_SMALL_GRIDS = (1, 4, 16, 33, 66)  # one program on each of that many SMs: BLOCK 4096, 4 warps
MLP_MAX_ELEMS_PER_THREAD = 64  # above this the accumulator and the loaded block spill registers: skipped
MLP_QUICK = {"programs_per_sm": (1, 4), "blocks": (1024, 4096), "warps": (4,), "small_grids": (1, 33)}

# async: the tile-dot kernel over 1 GiB of bf16, [ROWS, COLS] tiles of 4 to 64 KiB; num_stages 1 (LDG) and 2, 3
# (LDGSTS: 1 and 2 tiles in flight a program); 1, 2, 4 programs a SM where their shared memory fits.
ASYNC_TILES = ((32, 64), (32, 128), (32, 256), (64, 256), (64, 512))  # 4, 8, 16, 32, 64 KiB of bf16
ASYNC_STAGES = (1, 2, 3)
ASYNC_PROGRAMS_PER_SM = (1, 2, 4)
ASYNC_SMALL_GRIDS = (1, 33, 66)  # one program on each of that many SMs: 16 KiB tiles, 2 stages
ASYNC_M = 16  # rows of the dot's other operand: the smallest mma tile, so the tile's bytes bind, not its math
ASYNC_WARPS = 4
ASYNC_SHARED_PER_SM = 227 * KIB  # sm_90's shared memory per SM that one block may hold (CUDA guide, H100)
ASYNC_QUICK = {"tiles": ((32, 256), (64, 512)), "programs_per_sm": (1, 4), "small_grids": (1,)}

# l2: grid of 8 programs per SM, 8 warps, 4 KiB blocks; each sample reads ~1 GiB from the footprint.
L2_FOOTPRINTS_MIB = (1, 4, 8, 16, 24, 32, 40, 48, 56, 64, 96, 128, 512)
L2_FOOTPRINTS_MIB_QUICK = (4, 16, 32, 48, 64, 128, 512)
L2_PROGRAMS_PER_SM = 8
L2_WARPS = 8
L2_BLOCK = 1024
L2_ITERS = 256

# floor: 100-node graphs; every node touches its own addresses, 1 MiB apart; L2 flushed before each sample.
FLOOR_NODES = 100
FLOOR_NODE_STRIDE = MIB
FLOOR_FLUSH_BYTES = 256 * MIB
FLOOR_SAMPLES = 30
FLOOR_GRID_PER_SM = (1, 8, 64, 256)  # empty workgroups per SM, for the dispatch cost per workgroup
FLOOR_GRID_WARPS = (4, 8)
FLOOR_TILE_BYTES = (1024, 4096, 16384)  # one tile per workgroup: loaded, stored, exit
FLOOR_TILE_PER_SM = (1, 2, 4, 8, 16, 32, 64)
FLOOR_TILE_BUFFER = 1 << 30

# issue: trips of ISSUE_UNROLL steps; two trip counts, so fixed costs (loads, prologue) cancel in dependent mode.
ISSUE_TRIPS = 256  # 4096 steps per chain at the larger count: 2 x 256 trips
ISSUE_THROUGHPUT = {"chains": 8, "warps": 8, "programs_per_sm": 4}  # 32 warps per SM, 8 independent chains
ISSUE_OPS_QUICK = ("fp32_fma", "exp2")
# shfl_mix and imad_mix: steps a loop trip. shfl_mix's ~270 instructions a step make a trip of 16 steps 68 KB of
# code, which ran 23 % slower than a trip of 4 (345 against 280 scheduler cycles a step, H200, 2026-12-01):
# instruction fetch, not the shuffles; 4 steps (17 KB) it is.
MIX_UNROLL = 4

MMA_SHAPES = ((16, 16, 16, 1), (16, 16, 16, 4), (16, 32, 16, 1), (16, 32, 16, 4), (64, 64, 16, 4),
              (16, 32, 64, 4), (16, 32, 512, 4))  # the last two: the step of one deep dot's k loop
MMA_SHAPES_QUICK = ((16, 16, 16, 1), (64, 64, 16, 4))
MMA_DOTS = 512  # and twice that

REDUCE_WARPS = (1, 4, 8)  # 1: a warp's own shuffle tree (5 steps), no shared memory
REDUCE_ROUNDS = 512  # and twice that
TRANSPOSE_T = 128
TRANSPOSE_WARPS = 8
TRANSPOSE_PROGRAMS_PER_SM = 2
TRANSPOSE_ROUNDS = 256


USE_CLOCK = True  # read %clock64 in the kernels (the Triton interpreter cannot)


class ProbeError(RuntimeError):
    """A probe computed a wrong result or could not be measured."""


def _mhz(text: str) -> float | None:
    m = re.match(r"\s*([\d.]+)\s*MHz", text)
    return float(m.group(1)) if m else None


def sm_clock_mhz() -> float | None:
    """The SM clock nvidia-smi reads now, in MHz; None if it cannot."""
    from companion.bench.timing import _nvidia_smi

    return _mhz(_nvidia_smi("clocks.sm"))


def _per_sm_rate(clk, work_per_program: float) -> float:
    """Median over SMs of (work of the SM's programs) / (cycles from its first start to its last end).

    clk: int64 [programs, 3] of (start, end, sm id) from `record_clock`.
    """
    import numpy as np

    clk = np.asarray(clk).reshape(-1, 3)
    rates = []
    for sm in np.unique(clk[:, 2]):
        mine = clk[clk[:, 2] == sm]
        span = int(mine[:, 1].max() - mine[:, 0].min())
        if span <= 0:
            raise ProbeError(f"SM {sm}: non-positive clock span {span}")
        rates.append(len(mine) * work_per_program / span)
    return float(np.median(rates))


def _chain_cycles(launch: Callable[[int], object], clk, short: int) -> float:
    """Cycles per step of a one-program chain: the difference of runs of 2*short and short steps, so the
    loads ahead of the chain and the prologue cancel; median of CLOCK_SAMPLES launches of each."""
    import numpy as np
    import torch

    spans = {}
    for steps in (short, 2 * short):
        values = []
        for _ in range(CLOCK_SAMPLES):
            launch(steps)
            torch.cuda.synchronize()
            c = clk.view(-1, 3)[0].cpu()
            values.append(int(c[1] - c[0]))
        spans[steps] = float(np.median(values))
    per_step = (spans[2 * short] - spans[short]) / short
    if per_step <= 0:
        raise ProbeError(f"non-positive cycles per step: spans {spans}")
    return per_step


# --- the probes: each returns its rows (without provenance) ------------------------------------------


def probe_latency(env: dict, quick: bool) -> list[dict]:
    """Dependent-load latency by footprint: one warp chases a random cycle of 128 B lines (L1 bypassed).

    The model charges one such latency for every dependent memory round trip (a decode step's chain of
    small kernels, an index load before a gather): the L2 and HBM latencies are its two levels. Each
    sample continues the chase where the last ended, so footprints beyond L2 keep missing; footprints up
    to 32 MiB are read once first, so they start L2-resident. ns_per_load includes one launch per 4096
    loads (< 1 %); cycles_per_load is from %clock64 around the loop. The 2 GiB footprint also misses the
    TLB: that is part of a cold random access to HBM, and the 256 MiB row shows the difference.
    """
    import torch

    from companion.bench.timing import DEVICE, bench
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    rows = []
    gen = torch.Generator().manual_seed(1234)
    for footprint in CHASE_FOOTPRINTS_QUICK if quick else CHASE_FOOTPRINTS:
        lines = footprint // k.CACHE_LINE_BYTES
        table = k.chase_table(lines, gen, DEVICE)
        state = torch.zeros(1, dtype=torch.int32, device=DEVICE)
        clk = torch.zeros(3, dtype=torch.int64, device=DEVICE)
        if footprint <= CHASE_WARM_MAX:
            table.sum()

        def launch(table=table, state=state, clk=clk) -> None:
            k.chase_kernel[(1,)](table, state, clk, CHASE_STEPS, USE_CLOCK=USE_CLOCK, num_warps=1)

        times = bench(launch, 1, hide_host_gaps=True)
        cycles = []
        for _ in range(CLOCK_SAMPLES):
            launch()
            torch.cuda.synchronize()
            c = clk.cpu()
            cycles.append(int(c[1] - c[0]))
        if int(state.item()) % (k.CACHE_LINE_BYTES // 4):
            raise ProbeError(f"footprint {footprint}: the chase left the line heads")
        stats = summarize(times)
        rows.append({"footprint_bytes": footprint, "steps": CHASE_STEPS, **stats,
                     "ns_per_load": stats["time_s_median"] / CHASE_STEPS * 1e9,
                     "cycles_per_load": sorted(cycles)[len(cycles) // 2] / CHASE_STEPS, "cycles_from": "clock64"})
        print(f"latency {footprint / KIB:9.0f} KiB: {rows[-1]['ns_per_load']:7.1f} ns "
              f"{rows[-1]['cycles_per_load']:7.1f} cycles", flush=True)
        del table
        torch.cuda.empty_cache()
    return rows


def _read_launcher(src, out, programs: int, block: int, warps: int, n_blocks: int, total_blocks: int,
                   rotate: bool, cache_global: bool) -> Callable[[], None]:
    """A launch of `read_sum_kernel`; with `rotate`, each call starts where the previous one ended."""
    from companion.kernels import probes as k

    state = {"base": 0}

    def launch() -> None:
        k.read_sum_kernel[(programs,)](src, out, state["base"], n_blocks, total_blocks, BLOCK=block,
                                       CACHE_GLOBAL=cache_global, num_warps=warps, num_stages=1)
        if rotate:
            state["base"] = (state["base"] + n_blocks) % total_blocks

    return launch


def probe_mlp(env: dict, quick: bool) -> list[dict]:
    """Read bandwidth per SM against the bytes each SM has in flight (memory-level parallelism).

    A persistent read-only kernel sums 1 GiB of fp32; a program issues all of a block's loads before it
    uses any (no prefetch: num_stages=1), so an SM with P programs of BLOCK elements has P * BLOCK * 4
    bytes in flight. Below the knee, Little's law: bandwidth = bytes in flight / loaded latency; above
    it, the per-SM (here: the HBM share per SM) cap. The model uses both to cost any memory-bound kernel
    from its occupancy and tile size. Each sample reads fresh data (a rotating start), never from L2.
    Configurations whose block does not fit in registers (> 64 fp32 per thread) are skipped.
    """
    import torch

    from companion.bench.timing import DEVICE, bench
    from validation.measure_output import summarize

    sm = env["sm_count"]
    src = torch.randn(MLP_BUFFER_BYTES // 4, device=DEVICE, dtype=torch.float32)
    q = MLP_QUICK if quick else {"programs_per_sm": MLP_PROGRAMS_PER_SM, "blocks": MLP_BLOCKS, "warps": MLP_WARPS,
                                 "small_grids": MLP_SMALL_GRIDS}
    configs = [(sm * p, b, w) for p in q["programs_per_sm"] for b in q["blocks"] for w in q["warps"]]
    configs += [(g, 4096, 4) for g in q["small_grids"]]
    out = torch.empty(max(g for g, _, _ in configs), device=DEVICE, dtype=torch.float32)
    rows = []
    for grid, block, warps in configs:
        if block // (32 * warps) > MLP_MAX_ELEMS_PER_THREAD:
            print(f"mlp grid={grid} block={block} warps={warps}: skipped (would spill registers)", flush=True)
            continue
        total_blocks = src.numel() // block
        n_blocks = min(total_blocks, grid * MLP_ITERS)
        launch = _read_launcher(src, out, grid, block, warps, n_blocks, total_blocks, rotate=True,
                                cache_global=False)
        launch()
        torch.cuda.synchronize()
        ref = src[: n_blocks * block].double().sum().item() if n_blocks == total_blocks else None
        if ref is not None and not math.isclose(out[:grid].double().sum().item(), ref, rel_tol=1e-3,
                                                abs_tol=1e-3 * math.sqrt(n_blocks * block)):
            raise ProbeError(f"mlp grid={grid} block={block}: sum {out[:grid].sum().item()} != {ref}")
        times = bench(launch, 1, hide_host_gaps=True)
        stats = summarize(times)
        active = min(grid, sm)
        nbytes = n_blocks * block * 4
        rate = nbytes / stats["time_s_median"]
        rows.append({"grid": grid, "block_elems": block, "num_warps": warps, "active_sms": active,
                     "bytes_per_sample": nbytes, "bytes_in_flight_per_sm": grid / active * block * 4, **stats,
                     "bytes_per_s": rate, "bytes_per_s_per_sm": rate / active})
        print(f"mlp grid={grid:4} block={block:5} warps={warps}: {rate / 1e9:8.1f} GB/s, "
              f"{rate / active / 1e9:6.2f} GB/s/SM at {rows[-1]['bytes_in_flight_per_sm']:.0f} B in flight",
              flush=True)
    return rows


def probe_async(env: dict, quick: bool) -> list[dict]:
    """Read bandwidth per SM against bytes in flight per SM when tiles reach shared memory by asynchronous copy.

    The same tile-dot kernel with num_stages=1 loads its tile through registers (LDG, every byte of a tile in
    flight at once); with num_stages=2 or 3 Triton pipelines it with cp.async (LDGSTS) into shared memory, one or
    two tiles ahead. A loop whose copies the compiled code waits for (the MLA decode's) moves its bytes at the rate
    this curve gives for its bytes in flight, which the LDG curve (`mlp`) may not. Each sample reads fresh data
    (a rotating start), never from L2; the first launch of each configuration is checked against float64.
    """
    import torch

    from companion.bench.timing import DEVICE, bench
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    sm = env["sm_count"]
    q = ASYNC_QUICK if quick else {"tiles": ASYNC_TILES, "programs_per_sm": ASYNC_PROGRAMS_PER_SM,
                                   "small_grids": ASYNC_SMALL_GRIDS}
    configs = [(sm * p, rows, cols, stages) for rows, cols in q["tiles"] for stages in ASYNC_STAGES
               for p in q["programs_per_sm"]]
    configs += [(g, 32, 256, 2) for g in q["small_grids"]]
    src = torch.randn(MLP_BUFFER_BYTES // 2, device=DEVICE, dtype=torch.bfloat16)
    w = torch.randn(ASYNC_M, 64, device=DEVICE, dtype=torch.bfloat16)
    rows_out = []
    for grid, rows, cols, stages in configs:
        tile_bytes = rows * cols * 2
        per_sm = -(-grid // sm)
        if per_sm * max(1, stages - 1) * tile_bytes > ASYNC_SHARED_PER_SM:  # Triton's buffers: stages - 1 tiles
            print(f"async grid={grid} tile={tile_bytes} stages={stages}: skipped (shared memory)", flush=True)
            continue
        total = src.numel() // (rows * cols)
        n_tiles = min(total, grid * MLP_ITERS)
        tiles = src[: total * rows * cols].view(total, rows, cols)
        wt = w[:, :rows].contiguous()
        out = torch.empty(grid, ASYNC_M, cols, device=DEVICE, dtype=torch.float32)
        state = {"base": 0}

        def launch(grid=grid, rows=rows, cols=cols, stages=stages, tiles=tiles, wt=wt, out=out, n=n_tiles,
                   total=total, state=state) -> None:
            k.tile_dot_kernel[(grid,)](tiles, wt, out, state["base"], n, total, ROWS=rows, COLS=cols, M=ASYNC_M,
                                       num_warps=ASYNC_WARPS, num_stages=stages)
            state["base"] = (state["base"] + n) % total

        launch()
        torch.cuda.synchronize()
        picked = torch.arange(n_tiles, device=DEVICE) % total
        ref = torch.einsum("mr,trc->mc", wt.double(), tiles[picked].double())
        got = out.double().sum(dim=0)
        if not torch.allclose(got, ref, rtol=2e-2, atol=2e-2 * math.sqrt(n_tiles * rows)):
            raise ProbeError(f"async grid={grid} tile={rows}x{cols} stages={stages}: "
                             f"max |error| {(got - ref).abs().max().item():.3g}")
        stats = summarize(bench(launch, 1, hide_host_gaps=True))
        active = min(grid, sm)
        nbytes = n_tiles * tile_bytes
        rate = nbytes / stats["time_s_median"]
        in_flight = grid / active * tile_bytes * max(1, stages - 1)
        rows_out.append({"grid": grid, "rows": rows, "cols": cols, "num_stages": stages, "num_warps": ASYNC_WARPS,
                         "active_sms": active, "tile_bytes": tile_bytes, "bytes_per_sample": nbytes,
                         "bytes_in_flight_per_sm": in_flight, **stats, "bytes_per_s": rate,
                         "bytes_per_s_per_sm": rate / active})
        print(f"async grid={grid:4} tile={rows}x{cols} stages={stages}: {rate / 1e9:8.1f} GB/s, "
              f"{rate / active / 1e9:6.2f} GB/s/SM at {in_flight:.0f} B in flight", flush=True)
    return rows_out


def probe_l2(env: dict, quick: bool) -> list[dict]:
    """Bandwidth of repeated reads of one footprint by every SM: the L2 plateau and where reuse falls out.

    Every SM runs 8 programs of 8 warps (full occupancy); together they sweep the footprint in 4 KiB
    blocks, pass after pass, ~1 GiB per sample, loads cached in L2 only (`.cg`: L1 hits would hide L2).
    Small footprints are served by L2 (its bandwidth), large ones by HBM; the model needs the L2
    bandwidth for kernels whose working set is reused (weights shared by several programs, KV re-reads)
    and the footprint beyond which that reuse stops paying.
    """
    import torch

    from companion.bench.timing import DEVICE, bench
    from validation.measure_output import summarize

    sm = env["sm_count"]
    grid = sm * L2_PROGRAMS_PER_SM
    footprints = [f * MIB for f in (L2_FOOTPRINTS_MIB_QUICK if quick else L2_FOOTPRINTS_MIB)]
    src = torch.randn(max(footprints) // 4, device=DEVICE, dtype=torch.float32)
    out = torch.empty(grid, device=DEVICE, dtype=torch.float32)
    n_blocks = grid * L2_ITERS
    rows = []
    for footprint in footprints:
        total_blocks = footprint // (L2_BLOCK * 4)
        launch = _read_launcher(src, out, grid, L2_BLOCK, L2_WARPS, n_blocks, total_blocks, rotate=False,
                                cache_global=True)
        times = bench(launch, 1, hide_host_gaps=True)
        stats = summarize(times)
        nbytes = n_blocks * L2_BLOCK * 4
        rows.append({"footprint_bytes": footprint, "grid": grid, "block_elems": L2_BLOCK, "num_warps": L2_WARPS,
                     "bytes_per_sample": nbytes, **stats, "bytes_per_s": nbytes / stats["time_s_median"]})
        print(f"l2 footprint {footprint / MIB:5.0f} MiB: {rows[-1]['bytes_per_s'] / 1e9:8.1f} GB/s", flush=True)
    return rows


def probe_floor(env: dict, quick: bool) -> list[dict]:
    """Time per node of a 100-node CUDA graph of tiny kernels: the floor under every small kernel.

    Variants: `empty` (launch only); `load_store_1` (one program loads one fp32 from HBM and stores it:
    a dependent DRAM round trip plus a store, the smallest kernel that touches memory); `tile_4k_1prog`
    and `tile_4k_sm` (one program, and one per SM, copying 4 KiB each); `tile_4k_sm_release_sys_1` and `_2`
    (that copy, then one or two flag writes with release semantics at system scope, as QuickReduce's kernels
    end); `torch_add_256` (an add of 256 fp32). Every node uses its own addresses and a 256 MiB write flushes
    L2 before each sample, so the loads go to HBM; a sleep kernel ahead of each replay hides the host.
    `eager_hidden` rows: one launch between two events, the host hidden by a sleep ahead (the GPU's own cost of
    it). The host's cost of an eager launch is the host probe's (`probe_host`). Decode steps of small batches are
    chains of such kernels: the model's per-kernel floor and graph-node cost.
    """
    import torch

    from companion.bench.timing import DEVICE, SLEEP_CYCLES, bench, capture_graph
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    sm = env["sm_count"]
    stride = FLOOR_NODE_STRIDE // 4
    src = torch.randn(FLOOR_NODES * stride, device=DEVICE)
    dst = torch.zeros_like(src)
    flags = torch.zeros(FLOOR_NODES * 2 * sm, dtype=torch.int32, device=DEVICE)
    flush = torch.empty(FLOOR_FLUSH_BYTES // 4, device=DEVICE)

    def node(i: int, variant: str) -> None:
        s, d = src[i * stride:], dst[i * stride:]
        if variant.startswith("tile_4k_sm_release_sys_"):  # the copy, then 1 or 2 system-scope releases
            k.copy_release_kernel[(sm,)](s, d, flags[i * 2 * sm:], BLOCK=1024, RELEASES=int(variant[-1]),
                                         num_warps=4)
        elif variant == "empty":
            k.empty_kernel[(1,)](s)
        elif variant == "load_store_1":
            k.copy_tile_kernel[(1,)](s, d, BLOCK=1, num_warps=1)
        elif variant == "tile_4k_1prog":
            k.copy_tile_kernel[(1,)](s, d, BLOCK=1024, num_warps=4)
        elif variant == "tile_4k_sm":
            k.copy_tile_kernel[(sm,)](s, d, BLOCK=1024, num_warps=4)
        else:
            torch.add(s[:256], s[256:512], out=d[:256])

    variants = {"empty": (1, 0), "load_store_1": (1, 8), "tile_4k_1prog": (1, 8 * KIB),
                "tile_4k_sm": (sm, sm * 8 * KIB), "tile_4k_sm_release_sys_1": (sm, sm * 8 * KIB),
                "tile_4k_sm_release_sys_2": (sm, sm * 8 * KIB), "torch_add_256": (0, 3 * 1024)}
    if quick:
        variants = {v: variants[v] for v in ("empty", "load_store_1")}
    rows = []
    for variant, (programs, moved) in variants.items():
        dst.zero_()
        flags.zero_()
        graph = capture_graph(lambda variant=variant: [node(i, variant) for i in range(FLOOR_NODES)])
        copied = {"load_store_1": 1, "tile_4k_1prog": 1024}.get(variant, 1024 * sm if "tile_4k_sm" in variant else 0)
        if copied and not torch.equal(dst[:copied], src[:copied]):
            raise ProbeError(f"floor {variant}: copy is wrong")
        if "release" in variant and not bool((flags[: int(variant[-1]) * sm] == 1).all()):
            raise ProbeError(f"floor {variant}: a flag was not set")
        for _ in range(3):
            graph.replay()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(FLOOR_SAMPLES)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(FLOOR_SAMPLES)]
        for start, end in zip(starts, ends, strict=True):
            flush.zero_()
            torch.cuda._sleep(SLEEP_CYCLES)
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) * 1e-3 / FLOOR_NODES for s, e in zip(starts, ends, strict=True)]
        rows.append({"variant": variant, "launch_mode": "graph", "nodes": FLOOR_NODES, "programs": programs,
                     "bytes_moved": moved, "l2_flushed": True, **summarize(times)})
        print(f"floor {variant:14} graph: {rows[-1]['time_s_median'] * 1e6:6.2f} us per node", flush=True)
        del graph
    # Empty kernels of many workgroups, one node each: the dispatcher's cost per workgroup handed to a CU.
    for per_sm in FLOOR_GRID_PER_SM:
        for warps in FLOOR_GRID_WARPS:
            programs = per_sm * sm

            def grid_node(programs: int = programs, warps: int = warps) -> None:
                k.empty_kernel[(programs,)](src, num_warps=warps)

            graph = capture_graph(lambda grid_node=grid_node: [grid_node() for _ in range(FLOOR_NODES)])
            for _ in range(3):
                graph.replay()
            times = bench(graph.replay, FLOOR_NODES, hide_host_gaps=True)
            rows.append({"variant": f"empty_grid_{warps}w", "launch_mode": "graph", "nodes": FLOOR_NODES,
                         "programs": programs, "bytes_moved": 0, "l2_flushed": False, **summarize(times)})
            print(f"floor empty grid {programs:6} x {warps} warps: {rows[-1]['time_s_median'] * 1e6:7.2f} us per node",
                  flush=True)
            del graph
    # Short workgroups: W one-tile copies (each program loads its tile, stores it, exits), W = 1..64 per SM, from
    # a 1 GiB buffer rotated so every node reads HBM: what a workgroup's life costs when it is short.
    big_src = torch.randn(FLOOR_TILE_BUFFER // 4, device=DEVICE)
    big_dst = torch.empty_like(big_src)
    for tile_bytes in FLOOR_TILE_BYTES:
        for warps in FLOOR_GRID_WARPS:
            for per_sm in FLOOR_TILE_PER_SM:
                programs = per_sm * sm
                block = tile_bytes // 4
                span = programs * block
                nodes = max(1, min(FLOOR_NODES, big_src.numel() // span))

                def tiles(programs=programs, block=block, warps=warps, span=span, nodes=nodes, a=big_src,
                          b=big_dst) -> None:
                    for i in range(nodes):
                        k.copy_tile_kernel[(programs,)](a[i * span:], b[i * span:], BLOCK=block, num_warps=warps)

                graph = capture_graph(tiles)
                graph.replay()
                torch.cuda.synchronize()
                if not torch.equal(big_dst[:span], big_src[:span]):
                    raise ProbeError(f"floor tiles {tile_bytes} B x {programs}: copy is wrong")
                times = bench(graph.replay, nodes, hide_host_gaps=True)
                rows.append({"variant": f"tile_{tile_bytes}B_{warps}w", "launch_mode": "graph", "nodes": nodes,
                             "programs": programs, "bytes_moved": 2 * span * 4, "l2_flushed": False,
                             **summarize(times)})
                print(f"floor tiles {tile_bytes:6} B x {programs:6} x {warps} warps: "
                      f"{rows[-1]['time_s_median'] * 1e6:7.2f} us per node", flush=True)
                del graph
    del big_src, big_dst
    a, b, c = src[:256], src[256:512], dst[:256]
    # One eager launch between two events, a sleep kernel queued ahead so the host is hidden: what the GPU itself
    # spends on a launch outside a graph (the suites' eager rows with host_gaps=hidden are timed this way).
    hidden = {"empty": (1, 0, lambda: k.empty_kernel[(1,)](src)),
              "torch_add_256": (0, 3 * 1024, lambda: torch.add(a, b, out=c))}
    for variant, (programs, moved, launch) in hidden.items():
        times = bench(launch, 1, hide_host_gaps=True)
        rows.append({"variant": variant, "launch_mode": "eager_hidden", "nodes": 1, "programs": programs,
                     "bytes_moved": moved, "l2_flushed": False, **summarize(times)})
        print(f"floor {variant} eager, host hidden: {rows[-1]['time_s_median'] * 1e6:6.2f} us per launch", flush=True)
    return rows


def probe_host(env: dict, quick: bool) -> list[dict]:
    """The host's cost of an eager launch: 100 back-to-back launches a sample of an empty kernel through Triton's
    Python launcher (`empty`) and of a PyTorch add of 256 fp32 (`torch_add_256`, the C++ dispatcher that eager
    serving kernels pay), host gaps included, per launch. The samples are taken in rounds spread over minutes
    (`timing.spaced_bench`): on the cloud VMs the cost is 1.45 times the usual in spells of tens of seconds."""
    import torch

    from companion.bench.timing import DEVICE, HOST_ROUND_GAP_S, HOST_ROUNDS, spaced_bench
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    src = torch.randn(512, device=DEVICE)
    a, b, c = src[:256], src[256:], torch.zeros(256, device=DEVICE)
    rounds = 3 if quick else HOST_ROUNDS
    launches = {"empty": lambda: [k.empty_kernel[(1,)](src) for _ in range(FLOOR_NODES)],
                "torch_add_256": lambda: [torch.add(a, b, out=c) for _ in range(FLOOR_NODES)]}
    times = spaced_bench({name: (launch, FLOOR_NODES) for name, launch in launches.items()}, rounds)
    torch.cuda.synchronize()
    if not torch.equal(c, a + b):
        raise ProbeError("host torch_add_256: the add is wrong")
    rows = []
    for variant, samples in times.items():
        rows.append({"variant": variant, "launch_mode": "eager", "nodes": FLOOR_NODES, "rounds": rounds,
                     "gap_s": HOST_ROUND_GAP_S, **summarize(samples)})
        print(f"host {variant:14} eager: {rows[-1]['time_s_median'] * 1e6:6.2f} us per launch (p10 "
              f"{rows[-1]['time_s_p10'] * 1e6:.2f}, p90 {rows[-1]['time_s_p90'] * 1e6:.2f})", flush=True)
    return rows


CLOCK_LOAD_S = 3.0  # seconds of each load, sampled by nvidia-smi every CLOCK_SAMPLE_S
CLOCK_SAMPLE_S = 0.2


def probe_clock(env: dict, quick: bool) -> list[dict]:
    """The SM clock and power while the GPU is kept busy for seconds: bf16 matmuls (8192^3, the tensor cores
    at their power limit) and a streaming copy (HBM-bound). The dense peaks of a spec hold at one clock; a
    sustained matmul may run below it under the power limit, a copy should not. nvidia-smi is read every
    0.2 s from a second thread while the GPU works; the median of the samples after the first second is
    the row's clock. `time_s_*` are the seconds per op of the load, for reference.
    """
    import threading

    import torch

    from companion.bench.timing import DEVICE, _nvidia_smi
    from validation.measure_output import summarize

    loads = {
        "matmul_bf16_8192": (lambda: torch.matmul(x, y, out=z), 2 * 8192**3),
        "copy_1gib": (lambda: big_dst.copy_(big_src), 2 * 2**30),
    }
    x = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device=DEVICE, dtype=torch.bfloat16)
    z = torch.empty_like(x)
    big_src = torch.randn(2**28, device=DEVICE)
    big_dst = torch.empty_like(big_src)
    rows = []
    for name, (op, work) in loads.items():
        samples: list[tuple[float, str]] = []
        stop = threading.Event()

        def sample(samples: list[tuple[float, str]] = samples, stop: threading.Event = stop) -> None:
            start = time.monotonic()
            while not stop.is_set():
                samples.append((time.monotonic() - start, _nvidia_smi("clocks.sm,power.draw")))
                time.sleep(CLOCK_SAMPLE_S)

        op()
        torch.cuda.synchronize()
        reader = threading.Thread(target=sample, daemon=True)
        reader.start()
        start = time.monotonic()
        events, ops = [], 0
        while time.monotonic() - start < (CLOCK_LOAD_S / 2 if quick else CLOCK_LOAD_S):
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(10):
                op()
            end.record()
            events.append((begin, end))
            ops += 10
            if len(events) > 4:
                events[-5][1].synchronize()  # keep the host at most a few batches ahead
        torch.cuda.synchronize()
        stop.set()
        reader.join()
        times = [b.elapsed_time(e) * 1e-3 / 10 for b, e in events[len(events) // 3:]]
        late = [text for t, text in samples if t >= 1.0] or [text for _, text in samples]
        clocks = sorted(v for v in (_mhz(text.split(",")[0]) for text in late) if v is not None)
        watts = sorted(float(text.split(",")[1].split()[0]) for text in late if len(text.split(",")) > 1
                       and text.split(",")[1].split()[0].replace(".", "", 1).isdigit())
        stats = summarize(times)
        rows.append({"load": name, "seconds": CLOCK_LOAD_S, "samples": len(late),
                     "work_per_op": work, **stats,
                     "sm_clock_mhz_median": clocks[len(clocks) // 2] if clocks else None,
                     "sm_clock_mhz_min": clocks[0] if clocks else None,
                     "power_w_median": watts[len(watts) // 2] if watts else None,
                     "work_per_s": work / stats["time_s_median"]})
        print(f"clock {name:18}: SM {rows[-1]['sm_clock_mhz_median']} MHz (min {rows[-1]['sm_clock_mhz_min']}), "
              f"{rows[-1]['power_w_median']} W, {rows[-1]['work_per_s'] / 1e12:7.1f} T/s", flush=True)
    return rows


def _issue_inputs(op: str, n: int):
    import torch

    from companion.bench.timing import DEVICE

    if op in ("fp32_fma", "exp2"):
        x = torch.rand(n, device=DEVICE) * 2 - 0.5
        coef = torch.tensor([0.9, 0.1], device=DEVICE)
    elif op == "frnd_mix":  # whole numbers as fp32: the floor keeps them, the multiply-adds add halves
        x = torch.randint(-(2**20), 2**20, (n,), device=DEVICE).to(torch.float32)
        coef = torch.tensor([1.0, 0.5], device=DEVICE)
    else:
        x = torch.randint(-(2**31), 2**31 - 1, (n,), device=DEVICE, dtype=torch.int64).to(torch.int32)
        coef = torch.tensor([1_103_515_245, 12_345], device=DEVICE, dtype=torch.int32)
    return x, coef


def probe_issue(env: dict, quick: bool) -> list[dict]:
    """Issue rate and dependent latency of FFMA, IMAD, shift/LOP3 and MUFU.EX2, in cycles of %clock64.

    `dependent`: one warp, one chain per thread: cycles per instruction on the chain (the difference of
    2T and T trips, so the loads and prologue cancel). The `bit` step is two independent shifts and one
    LOP3, so its chain is two instructions long. `throughput`: 8 independent chains per thread, 8 warps
    per program, 4 programs per SM (32 warps): lane-ops per clock per SM = the SM's instructions x 32 /
    the SM's span. The model uses the rates for compute-bound elementwise and epilogue work and the
    latencies for the serial chains (recurrences, reductions) that occupancy cannot hide. `frnd_mix` (one
    FRND.FLOOR and 16 FFMAs a step) is issue-bound at 8 warps a scheduler: its cycles a step beyond 16 are
    what one conversion holds the scheduler's issue.
    """
    import torch

    from companion.bench.timing import DEVICE, bench
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    sm = env["sm_count"]
    critical = {"fp32_fma": 1, "int32_mad": 1, "bit": 2, "exp2": 1, "frnd_mix": k.MIX_FFMA + 2}  # a step's chain
    rows = []
    for op in ISSUE_OPS_QUICK if quick else tuple(k.ISSUE_OPS):
        for mode in ("dependent", "throughput"):
            if mode == "dependent":
                chains, warps, programs = 1, 1, 1
            else:
                chains, warps = ISSUE_THROUGHPUT["chains"], ISSUE_THROUGHPUT["warps"]
                programs = sm * ISSUE_THROUGHPUT["programs_per_sm"]
            threads = 32 * warps
            x, coef = _issue_inputs(op, programs * chains * threads)
            out = torch.empty_like(x)
            clk = torch.zeros(3 * programs, dtype=torch.int64, device=DEVICE)

            def launch(trips: int, x=x, coef=coef, out=out, clk=clk, op=op, chains=chains, threads=threads,
                       warps=warps, programs=programs) -> None:
                k.issue_kernel[(programs,)](x, coef, out, clk, trips, OP=k.ISSUE_OPS[op], CHAINS=chains,
                                            THREADS=threads, UNROLL=k.ISSUE_UNROLL, USE_CLOCK=USE_CLOCK,
                                            num_warps=warps)

            steps = 2 * ISSUE_TRIPS * k.ISSUE_UNROLL
            instructions = k.INSTRUCTIONS_PER_STEP[op]
            row = {"op": op, "mode": mode, "chains": chains, "iterations": steps, "warps": warps,
                   "programs": programs, "instructions_per_step": instructions}
            if mode == "dependent":
                per_step = _chain_cycles(launch, clk, ISSUE_TRIPS) / k.ISSUE_UNROLL
                times = bench(lambda launch=launch: launch(2 * ISSUE_TRIPS), 1, hide_host_gaps=True)
                row.update({**summarize(times), "cycles_per_step": per_step, "cycles_per_op": per_step / critical[op]})
            else:
                times = bench(lambda launch=launch: launch(2 * ISSUE_TRIPS), 1, hide_host_gaps=True)
                rates = []
                for _ in range(CLOCK_SAMPLES):
                    launch(2 * ISSUE_TRIPS)
                    torch.cuda.synchronize()
                    rates.append(_per_sm_rate(clk.cpu().numpy(), threads * chains * steps * instructions))
                rate = sorted(rates)[len(rates) // 2]
                row.update({**summarize(times), "ops_per_clock_per_sm": rate})
            rows.append(row)
            print(f"issue {op:9} {mode:10}: {row.get('ops_per_clock_per_sm') or 0:7.1f} lane-ops/clk/SM, "
                  f"{row.get('cycles_per_op') or 0:6.2f} cycles/op", flush=True)
    if not quick:
        rows += [_mix_row(env, op) for op in ("shfl_mix", "imad_mix")]
    return rows


def _loop_mix(compiled, launch: Callable[[], object], clk, threads: int, trips: int, pipe: str,
              name: str) -> tuple[float, float, dict, float]:
    """A mix kernel's compiled loop read off its SASS, (instructions, instructions of `pipe`) a trip, then its
    timing: (loop instructions, probed instructions, timing summary, median lane-ops per clock per SM)."""
    import torch

    from companion.bench.timing import bench
    from compiled.sass_code import count, warp_timeline
    from compiled.triton_build import disassemble
    from validation.measure_output import summarize

    sass, _ = disassemble(compiled)
    loop = count(sass)[1]
    probed = warp_timeline(sass)["loop"].get("pipes", "").count(pipe)
    if not loop or not probed:
        raise ProbeError(f"issue {name}: no loop ({loop}) or no {pipe}-pipe instruction in it ({probed})")
    times = bench(launch, 1, hide_host_gaps=True)
    rates = []
    for _ in range(CLOCK_SAMPLES):
        launch()
        torch.cuda.synchronize()
        rates.append(_per_sm_rate(clk.cpu().numpy(), threads * trips * loop))
    return loop, probed, summarize(times), sorted(rates)[len(rates) // 2]


def _mix_row(env: dict, op: str) -> dict:
    """A mix kernel at the throughput shape (8 chains, 8 warps, 4 programs per SM), checked against its float64
    reference: lane-ops per clock per SM, and the instructions and probed instructions a step of its compiled
    loop (read off its SASS: the compiler decides how a warp-wide maximum is shuffled). `shfl_mix`: a lane
    maximum among FFMAs; `imad_mix`: an int32 multiply-add among FFMAs."""
    import numpy as np
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    chains, warps = ISSUE_THROUGHPUT["chains"], ISSUE_THROUGHPUT["warps"]
    programs = env["sm_count"] * ISSUE_THROUGHPUT["programs_per_sm"]
    n = programs * chains * warps * 32
    x = torch.rand(n, device=DEVICE) - 0.5
    out = torch.empty_like(x)
    coef = torch.tensor([0.5, 0.25], device=DEVICE)
    clk = torch.zeros(3 * programs, dtype=torch.int64, device=DEVICE)
    trips = 2 * ISSUE_TRIPS
    if op == "shfl_mix":
        def launch(trips: int = trips):
            return k.shfl_mix_kernel[(programs,)](x, coef, out, clk, trips, CHAINS=chains, WARPS=warps,
                                                  UNROLL=MIX_UNROLL, USE_CLOCK=USE_CLOCK, num_warps=warps)

        def right() -> bool:
            want = k.shfl_mix_ref(x.cpu().numpy().reshape(programs, chains, warps, 32), 0.5, 0.25, 2 * MIX_UNROLL)
            return np.allclose(out.cpu().numpy().reshape(want.shape), want, rtol=1e-4, atol=1e-5)
        pipe = "S"
    else:
        i = torch.randint(-(2**31), 2**31 - 1, (n,), device=DEVICE, dtype=torch.int64).to(torch.int32)
        icoef = torch.tensor([1_103_515_245, 12_345], device=DEVICE, dtype=torch.int32)
        iout = torch.empty_like(i)

        def launch(trips: int = trips):
            return k.imad_mix_kernel[(programs,)](x, i, coef, icoef, out, iout, clk, trips, CHAINS=chains,
                                                  THREADS=32 * warps, UNROLL=MIX_UNROLL, USE_CLOCK=USE_CLOCK,
                                                  num_warps=warps)

        def right() -> bool:
            want_x, want_i = k.imad_mix_ref(x.cpu().numpy(), i.cpu().numpy(), 0.5, 0.25, 1_103_515_245, 12_345,
                                            2 * MIX_UNROLL)
            return (np.allclose(out.cpu().numpy(), want_x, rtol=1e-4, atol=1e-5)
                    and np.array_equal(iout.cpu().numpy().astype(np.int64), want_i))
        pipe = "I"
    compiled = launch()  # the timed specialization (Triton compiles trips == 1 without its loop)
    launch(2)
    torch.cuda.synchronize()
    if not right():
        raise ProbeError(f"issue {op}: wrong result")
    loop, probed, stats, rate = _loop_mix(compiled, launch, clk, warps * 32, trips, pipe, op)
    row = {"op": op, "mode": "throughput", "chains": chains, "iterations": trips * MIX_UNROLL, "warps": warps,
           "programs": programs, "instructions_per_step": loop / MIX_UNROLL, "probed_per_step": probed / MIX_UNROLL,
           **stats, "ops_per_clock_per_sm": rate}
    print(f"issue {op:9} throughput: {rate:7.1f} lane-ops/clk/SM, {row['instructions_per_step']:.1f} instructions "
          f"and {row['probed_per_step']:.1f} of pipe {pipe} a step", flush=True)
    return row


def probe_mma(env: dict, quick: bool) -> list[dict]:
    """Cycles per dependent `tl.dot` (bf16 in, fp32 accumulate) of one program, for a few tile shapes.

    acc = dot(a, b, acc) in a loop: each dot waits for the previous accumulator, so the step is the
    matrix instruction's latency (16x16 and 16x32 tiles: mma.sync m16n8k16; 64x64 with 4 warps: one
    wgmma m64n64k16). The model charges it to skinny GEMMs and attention steps whose chain of dots
    over K is too short, or too few, to hide it. Differences of 2T and T dots cancel the fixed costs.
    """
    import torch

    from companion.bench.timing import DEVICE, bench
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    rows = []
    for m, n, kk, warps in MMA_SHAPES_QUICK if quick else MMA_SHAPES:
        a = (torch.randn(m, kk, device=DEVICE) * 0.1).to(torch.bfloat16)
        b = (torch.randn(kk, n, device=DEVICE) * 0.1).to(torch.bfloat16)
        out = torch.empty(m, n, device=DEVICE)
        clk = torch.zeros(3, dtype=torch.int64, device=DEVICE)

        def launch(dots: int, a=a, b=b, out=out, clk=clk, m=m, n=n, kk=kk, warps=warps) -> None:
            k.mma_chain_kernel[(1,)](a, b, out, clk, dots, M=m, N=n, K=kk, USE_CLOCK=USE_CLOCK, num_warps=warps)

        launch(MMA_DOTS)
        torch.cuda.synchronize()
        ref = MMA_DOTS * (a.double() @ b.double())
        if not torch.allclose(out.double(), ref, rtol=1e-3, atol=1e-3 * float(ref.abs().max())):
            raise ProbeError(f"mma {m}x{n}x{kk}: result differs from {MMA_DOTS} * a @ b")
        per_dot = _chain_cycles(launch, clk, MMA_DOTS)
        times = bench(lambda launch=launch: launch(2 * MMA_DOTS), 1, hide_host_gaps=True)
        rows.append({"m": m, "n": n, "k": kk, "num_warps": warps, "dots": 2 * MMA_DOTS, **summarize(times),
                     "cycles_per_dot": per_dot})
        print(f"mma {m}x{n}x{kk} warps={warps}: {per_dot:6.1f} cycles per dependent dot", flush=True)
    return rows


def probe_smem(env: dict, quick: bool) -> list[dict]:
    """Data that crosses warps through shared memory: a reduction's round trip and a conversion's bandwidth.

    Triton has no explicit shared memory; these are the two ways its kernels use it implicitly.
    `reduce_round_trip`: one program, s = sum(x * s) over a vector with one element per thread, fed
    back: each round is shuffles, a shared store, a barrier, a shared load and shuffles (and the next
    round's barrier), cycles per round (2T - T rounds) -- the model's cost of a cross-warp reduction
    (softmax max/sum, norms) on a serial path. `layout_conversion`: t = trans(t) * c on a [128, 128]
    fp32 tile, 8 warps, 2 programs per SM: every round writes the tile to shared memory and reads it
    back transposed (scalar 4 B accesses, as Triton emits them), bytes per clock per SM = 2 x 64 KiB x
    rounds x programs on the SM / the SM's span -- a lower bound on the shared-memory bandwidth the
    model charges to layout conversions, not the hardware's 128 B/clk peak.
    """
    import numpy as np
    import torch

    from companion.bench.timing import DEVICE, bench
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    sm = env["sm_count"]
    rows = []
    for warps in REDUCE_WARPS[:2] if quick else REDUCE_WARPS:
        block = 32 * warps
        x = torch.rand(block, device=DEVICE) + 0.5
        x = x / x.sum()
        s0 = torch.ones(1, device=DEVICE)
        out = torch.empty(1, device=DEVICE)
        clk = torch.zeros(3, dtype=torch.int64, device=DEVICE)

        def launch(rounds: int, x=x, s0=s0, out=out, clk=clk, block=block, warps=warps) -> None:
            k.reduce_chain_kernel[(1,)](x, s0, out, clk, rounds, BLOCK=block, USE_CLOCK=USE_CLOCK, num_warps=warps)

        per_round = _chain_cycles(launch, clk, REDUCE_ROUNDS)
        if not 0.5 < out.item() < 2:
            raise ProbeError(f"reduce chain ended at {out.item()}, not near 1")
        times = bench(lambda launch=launch: launch(2 * REDUCE_ROUNDS), 1, hide_host_gaps=True)
        rows.append({"what": "reduce_round_trip", "num_warps": warps, "programs": 1, "rounds": 2 * REDUCE_ROUNDS,
                     "bytes_per_round": 4 * warps, **summarize(times), "cycles_per_round": per_round})
        print(f"smem reduce_round_trip warps={warps}: {per_round:6.1f} cycles per round", flush=True)

    t = TRANSPOSE_T
    programs = sm * TRANSPOSE_PROGRAMS_PER_SM
    x = torch.randn(programs, t, t, device=DEVICE)
    c = 1 + 0.01 * torch.randn(t, t, device=DEVICE)
    out = torch.empty_like(x)
    clk = torch.zeros(3 * programs, dtype=torch.int64, device=DEVICE)

    def conv() -> None:
        k.transpose_chain_kernel[(programs,)](x, c, out, clk, TRANSPOSE_ROUNDS, T=t, USE_CLOCK=USE_CLOCK,
                                              num_warps=TRANSPOSE_WARPS)

    conv()
    torch.cuda.synchronize()
    ref = k.transpose_chain_ref(x[0].cpu().numpy(), c.cpu().numpy(), TRANSPOSE_ROUNDS)
    if not np.allclose(out[0].cpu().numpy(), ref, rtol=1e-3, atol=1e-3):
        raise ProbeError("layout conversion chain: wrong result")
    round_bytes = 2 * t * t * 4  # stored and loaded once each per round
    times = bench(conv, 1, hide_host_gaps=True)
    rates = []
    for _ in range(CLOCK_SAMPLES):
        conv()
        torch.cuda.synchronize()
        rates.append(_per_sm_rate(clk.cpu().numpy(), round_bytes * TRANSPOSE_ROUNDS))
    stats = summarize(times)
    rate = sorted(rates)[len(rates) // 2]
    rows.append({"what": "layout_conversion", "num_warps": TRANSPOSE_WARPS, "programs": programs,
                 "rounds": TRANSPOSE_ROUNDS, "bytes_per_round": round_bytes, **stats,
                 "cycles_per_round": round_bytes / rate, "bytes_per_clock_per_sm": rate,
                 "bytes_per_s_per_sm": round_bytes * TRANSPOSE_ROUNDS * programs / stats["time_s_median"] / sm})
    print(f"smem layout_conversion: {rate:6.1f} B/clk/SM", flush=True)
    return rows


QUEUE_STORES = (1, 2, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64)
QUEUE_STRIDES = (1, 8, 32)  # words between lanes: 1, 8 and 32 wavefronts a store
QUEUE_WARPS = (1, 4)  # one warp; one warp on each of the SM's four schedulers


def probe_queue(env: dict, quick: bool) -> list[dict]:
    """How many shared-memory instructions a warp issues before the SM's shared pipe holds it back (the MIO queue).

    One program (one SM) of 1 or 4 warps; each warp issues `stores` stores to shared memory in a row, every lane
    at a stride that makes each store take 1, 8 or 32 wavefronts (`kernels.probes.shared_queue_ptx`), and reads
    `%clock64` before the first and after the last has issued, then after a load behind them has come back.
    While the queue takes them, a store issues in a cycle or two; once it is full, each waits for the pipe to
    finish one ahead of it. Per configuration, the median over launches of the warps' median cycles.
    """
    import numpy as np
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    rows = []
    stores_list = QUEUE_STORES[::2] if quick else QUEUE_STORES
    for warps in QUEUE_WARPS:
        threads = 32 * warps
        out = torch.zeros(2 * threads, dtype=torch.int64, device=DEVICE)
        for stride in QUEUE_STRIDES:
            for stores in stores_list:
                ptx = k.shared_queue_ptx(stores, stride)
                issue, drain = [], []
                for _ in range(3 + QUEUE_LAUNCHES):
                    k.shared_queue_kernel[(1,)](out, PTX=ptx, THREADS=threads, num_warps=warps)
                    torch.cuda.synchronize()
                    values = out.cpu().numpy()
                    issue.append(float(np.median(values[:threads:32])))
                    drain.append(float(np.median(values[threads::32])))
                issue, drain = sorted(issue[3:]), sorted(drain[3:])
                rows.append({"num_warps": warps, "stride_words": stride, "wavefronts_per_store": stride,
                             "stores": stores, "launches": QUEUE_LAUNCHES,
                             "issue_cycles": issue[len(issue) // 2], "drain_cycles": drain[len(drain) // 2]})
                print(f"queue warps={warps} stride={stride} stores={stores}: issue {rows[-1]['issue_cycles']:.0f}, "
                      f"drain {rows[-1]['drain_cycles']:.0f} cycles", flush=True)
    return rows


QUEUE_LAUNCHES = 15


CLOCK_WARMUP_LAUNCHES = 3  # launches of a %clock64 probe before the ones it reads (code and data brought in)


def median_after_warmup(launch: Callable[[], float], launches: int) -> float:
    """The median of what `launch` returns (one launch, its cycles read back) over `launches` launches, after
    CLOCK_WARMUP_LAUNCHES that are not read."""
    values = [launch() for _ in range(CLOCK_WARMUP_LAUNCHES + launches)]
    return statistics.median(values[CLOCK_WARMUP_LAUNCHES:])


LDS_STEPS = 32  # a chain of this many loads and one of twice as many: their difference is the latency of LDS_STEPS
LDS_WARPS = (1, 4)  # one warp alone; one on each of the SM's four schedulers (the shared pipe is the SM's)


def probe_lds(env: dict, quick: bool) -> list[dict]:
    """Load-to-use latency of shared memory: a dependent chain of shared loads, each taking its address from the
    one before (`kernels.probes.shared_chain_ptx`), in three forms: a 32-bit load (LDS), a 128-bit one (LDS.128)
    and ldmatrix of four matrices (LDSM.16.M88.4, the mma.sync operands of the MLA and KDA loops). One program of
    1 or 4 warps; each thread reads `%clock64` around its chain. Cycles a load: the median over launches of the
    warps' median span of 2 x LDS_STEPS loads, less that of LDS_STEPS, over LDS_STEPS (the clock reads, the barrier
    ahead and the store behind cancel). They set the SASS timing's shared classes (`lds_latency_cycles`,
    `ldsm_latency_cycles`, `lds_128_latency_cycles`)."""
    import numpy as np
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    rows = []
    for form in k.SHARED_CHAIN_FORMS:
        for warps in LDS_WARPS[:1] if quick else LDS_WARPS:
            threads = 32 * warps
            out = torch.zeros(threads, dtype=torch.int64, device=DEVICE)
            spans = {}
            for steps in (LDS_STEPS, 2 * LDS_STEPS):
                ptx = k.shared_chain_ptx(form, steps)
                def chain(ptx=ptx, threads=threads, warps=warps, out=out) -> float:  # the warps' median span
                    k.shared_chain_kernel[(1,)](out, PTX=ptx, THREADS=threads, num_warps=warps)
                    torch.cuda.synchronize()
                    return float(np.median(out.cpu().numpy()[::32]))

                spans[steps] = median_after_warmup(chain, QUEUE_LAUNCHES)
            per_load = (spans[2 * LDS_STEPS] - spans[LDS_STEPS]) / LDS_STEPS
            if per_load <= 0:
                raise ProbeError(f"lds {form} warps={warps}: non-positive cycles a load, spans {spans}")
            rows.append({"form": form, "num_warps": warps, "steps": LDS_STEPS, "launches": QUEUE_LAUNCHES,
                         "cycles_per_load": per_load})
            print(f"lds {form} warps={warps}: {per_load:.1f} cycles a load (spans {spans})", flush=True)
    return rows


PEER_CHASE_FOOTPRINT = 256 * MIB  # beyond the peer's L2: every step reaches its HBM over the link
PEER_CHASE_STEPS = 1024
PEER_READ_BYTES = 1 * GIB
PEER_READ_CONFIGS = ((1, 1024, 4), (4, 1024, 4), (16, 1024, 4), (36, 1024, 4), (66, 1024, 4), (132, 1024, 4),
                     (264, 1024, 4), (132, 2048, 8), (264, 2048, 8), (528, 2048, 8))  # (grid, block, warps)


def _enable_peer_access() -> None:
    """Let GPU 0's kernels load GPU 1's memory (and back): PyTorch enables it on a copy between the two."""
    import torch

    if not (torch.cuda.can_device_access_peer(0, 1) and torch.cuda.can_device_access_peer(1, 0)):
        raise ProbeError("GPU 0 and GPU 1 cannot access each other's memory")
    a, b = torch.ones(4, device="cuda:0"), torch.zeros(4, device="cuda:1")
    b.copy_(a)
    a.copy_(b)
    try:  # the CUDA runtime call itself, where CuPy is there (it shares PyTorch's primary context)
        import cupy

        for dev, peer in ((0, 1), (1, 0)):
            with cupy.cuda.Device(dev):
                try:
                    cupy.cuda.runtime.deviceEnablePeerAccess(peer)
                except cupy.cuda.runtime.CUDARuntimeError as err:
                    if "AlreadyEnabled" not in str(err) and "already" not in str(err).lower():
                        raise
    except ImportError:
        pass
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)


def probe_peer(env: dict, quick: bool) -> list[dict]:
    """Loads that GPU 0's SMs issue to GPU 1's memory: the dependent round trip, and bandwidth against bytes in
    flight. A two-shot all-reduce (vLLM's custom all-reduce, PyTorch's symmetric memory) moves its data this
    way, not through a copy engine, so by Little's law its rate is at most the grid's bytes in flight over
    this latency, below the link's where the grid is small. Needs two GPUs with peer access (NVLink); the
    `local` rows run the same kernels on GPU 0's own memory for reference.
    """
    import torch

    from companion.bench.timing import bench
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    if torch.cuda.device_count() < 2:
        raise ProbeError("the peer probe needs two GPUs")
    torch.cuda.set_device(0)
    _enable_peer_access()
    rows = []
    gen = torch.Generator().manual_seed(4321)
    lines = PEER_CHASE_FOOTPRINT // k.CACHE_LINE_BYTES
    for location, device in (("peer", "cuda:1"), ("local", "cuda:0")):
        table = k.chase_table(lines, gen, device)
        addr = torch.tensor([table.data_ptr()], dtype=torch.int64, device="cuda:0")
        state = torch.zeros(1, dtype=torch.int32, device="cuda:0")
        clk = torch.zeros(3, dtype=torch.int64, device="cuda:0")

        def launch(addr=addr, state=state, clk=clk) -> None:
            k.peer_chase_kernel[(1,)](addr, state, clk, PEER_CHASE_STEPS, USE_CLOCK=USE_CLOCK, num_warps=1)

        times = bench(launch, 1, hide_host_gaps=True)
        if int(state.item()) % (k.CACHE_LINE_BYTES // 4):
            raise ProbeError(f"peer chase ({location}): the chase left the line heads")
        stats = summarize(times)
        rows.append({"what": "chase", "location": location, "grid": 1, "block_elems": 1, "num_warps": 1,
                     "footprint_bytes": PEER_CHASE_FOOTPRINT, "steps": PEER_CHASE_STEPS, "bytes_in_flight": 4,
                     **stats, "ns_per_load": stats["time_s_median"] / PEER_CHASE_STEPS * 1e9, "bytes_per_s": None})
        print(f"peer chase {location:5}: {rows[-1]['ns_per_load']:7.1f} ns per dependent load", flush=True)
        del table
    src1 = torch.rand(PEER_READ_BYTES // 4, device="cuda:1") + 0.5
    for location, src in (("peer", src1), ("local", src1.to("cuda:0"))):
        addr = torch.tensor([src.data_ptr()], dtype=torch.int64, device="cuda:0")
        for grid, block, warps in PEER_READ_CONFIGS[::3] if quick else PEER_READ_CONFIGS:
            n_blocks = src.numel() // block
            out = torch.empty(grid, device="cuda:0")

            def read(addr=addr, out=out, grid=grid, block=block, warps=warps, n_blocks=n_blocks) -> None:
                k.peer_read_sum_kernel[(grid,)](addr, out, n_blocks, BLOCK=block, num_warps=warps, num_stages=1)

            read()
            torch.cuda.synchronize()
            expected = float(src[: n_blocks * block].double().sum())
            if abs(float(out.double().sum()) - expected) > 1e-3 * expected:
                raise ProbeError(f"peer read ({location}, grid {grid}): the sum is wrong")
            times = bench(read, 1, hide_host_gaps=True)
            stats = summarize(times)
            nbytes = n_blocks * block * 4
            rows.append({"what": "read", "location": location, "grid": grid, "block_elems": block,
                         "num_warps": warps, "footprint_bytes": nbytes, "steps": None,
                         "bytes_in_flight": grid * block * 4, **stats, "ns_per_load": None,
                         "bytes_per_s": nbytes / stats["time_s_median"]})
            print(f"peer read {location:5} grid={grid:4} block={block:5} warps={warps}: "
                  f"{rows[-1]['bytes_per_s'] / 1e9:7.1f} GB/s", flush=True)
    return rows


GRID_BLOCK, GRID_ROUNDS, GRID_WARPS = spec.GRID_BLOCK, spec.GRID_ROUNDS, spec.GRID_WARPS  # (the SASS table's too)
GRID_TILES = 1 << 16  # 256 MiB read and 256 MiB written per launch: every sample streams HBM
GRID_PROGRAMS_PER_SM = (4, 8, 16)  # persistent grids (QuickReduce's kernels run 1024 programs: ~8 per SM)


def _bandwidth(launch: Callable[[], object], moved: int) -> dict:
    """One eager launch per sample, the host hidden: the timing columns, the bytes a sample moves, and their rate."""
    from companion.bench.timing import bench
    from validation.measure_output import summarize

    stats = summarize(bench(launch, 1, hide_host_gaps=True))
    return {"bytes_per_sample": moved, **stats, "bytes_per_s": moved / stats["time_s_median"]}


def probe_grid(env: dict, quick: bool) -> list[dict]:
    """The same tile work as one workgroup per tile and as persistent programs that stride over the tiles.

    `tile_work_kernel`: 65,536 tiles of 1024 fp32, each loaded, put through `rounds` multiply-adds per value,
    stored; 4 warps. `programs` = `tiles` is one workgroup per tile (the loop runs once; the dispatcher refills
    each freed slot); 4, 8 and 16 programs per SM are persistent grids (each program loops over every P-th
    tile). Same code, same bytes, same instructions per tile: any difference in time is how the grid is
    scheduled (do the resident workgroups' loads overlap each other's compute?). Eager launches, host gaps
    hidden, one launch per sample (256 MiB in, 256 MiB out: no reuse through L2).
    """
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    sm = env["sm_count"]
    src = torch.rand(GRID_TILES * GRID_BLOCK, device=DEVICE)
    dst = torch.empty_like(src)
    rows = []
    for rounds in (GRID_ROUNDS[::2] if quick else GRID_ROUNDS):
        want = k.tile_work_reference(src[:GRID_BLOCK * 4], rounds)
        for programs in (GRID_TILES, *(per_sm * sm for per_sm in GRID_PROGRAMS_PER_SM)):
            def launch(programs=programs, rounds=rounds) -> None:
                k.tile_work_kernel[(programs,)](src, dst, GRID_TILES, BLOCK=GRID_BLOCK, ROUNDS=rounds,
                                                num_warps=GRID_WARPS)

            dst.zero_()
            launch()
            torch.cuda.synchronize()
            got = dst[:GRID_BLOCK * 4].double()
            if not torch.allclose(got, want, rtol=1e-5, atol=1e-6) or not torch.all(dst[-GRID_BLOCK:] != 0):
                raise ProbeError(f"grid probe rounds={rounds} programs={programs}: wrong result")
            rows.append({"tiles": GRID_TILES, "block_elems": GRID_BLOCK, "num_warps": GRID_WARPS, "rounds": rounds,
                         "programs": programs, **_bandwidth(launch, 2 * GRID_TILES * GRID_BLOCK * 4)})
            print(f"grid rounds={rounds:4} programs={programs:6}: {rows[-1]['time_s_median'] * 1e6:8.2f} us "
                  f"({rows[-1]['bytes_per_s'] / 1e12:5.2f} TB/s)", flush=True)
    return rows


ROWS_PITCH_BYTES = 512  # rows this far apart: every row in its own 128-byte line, neighbours in one DRAM page
ROWS_FOOTPRINT = 1 << 30  # bytes of rows (2 Mi rows): far above L2
ROWS_PER_PROGRAM = 256
ROWS_WARPS = 4
ROWS_BYTES = (4, 8, 16, 32, 64, 128)  # bytes touched at the start of each row; 128: a whole line


def probe_rows(env: dict, quick: bool) -> list[dict]:
    """How many bytes HBM moves for a short row: the first 4 to 128 bytes of every 512-byte row of 1 GiB, loaded
    (and summed) or stored, by one program per 256 rows (`row_slice_kernel`, 4 warps). Time against the row's
    bytes: flat below the memory's access granularity, proportional above it. The model charges short rows (a
    recurrence's state tile, `Program.row_run_bytes`) whole pieces of that size. Eager launches, host hidden."""
    import numpy as np
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    pitch = ROWS_PITCH_BYTES // 4
    n_rows = ROWS_FOOTPRINT // ROWS_PITCH_BYTES
    grid = n_rows // ROWS_PER_PROGRAM
    src = torch.rand(n_rows * pitch, device=DEVICE) + 0.5  # never zero
    dst = torch.empty(n_rows * pitch, device=DEVICE)
    rows = []
    for mode, store in (("load", 0), ("store", 1)):
        for row_bytes in (ROWS_BYTES[::2] if quick else ROWS_BYTES):
            r = row_bytes // 4

            def launch(r=r, store=store) -> None:
                k.row_slice_kernel[(grid,)](src, dst, PITCH=pitch, R=r, ROWS=ROWS_PER_PROGRAM, STORE=store,
                                            num_warps=ROWS_WARPS)

            dst.zero_()
            launch()
            torch.cuda.synchronize()
            if store:
                view = dst.view(grid, ROWS_PER_PROGRAM, pitch)
                want = torch.arange(1, grid + 1, device=DEVICE, dtype=torch.float32)[:, None, None]
                if not torch.equal(view[:, :, :r], want.expand(-1, ROWS_PER_PROGRAM, r)) or view[:, :, r:].any():
                    raise ProbeError(f"rows probe: store of {row_bytes} B rows wrong")
            else:
                got = dst[:grid].double().cpu().numpy()
                want = k.row_slice_reference(src.cpu().numpy(), pitch, r, ROWS_PER_PROGRAM)
                if not np.allclose(got, want, rtol=1e-4):
                    raise ProbeError(f"rows probe: sum of {row_bytes} B rows wrong")
            rows.append({"mode": mode, "row_bytes": row_bytes, "pitch_bytes": ROWS_PITCH_BYTES, "rows": n_rows,
                         "num_warps": ROWS_WARPS, **_bandwidth(launch, n_rows * row_bytes)})
            print(f"rows {mode:5} {row_bytes:4} B of {ROWS_PITCH_BYTES} B: {rows[-1]['time_s_median'] * 1e6:8.2f} us "
                  f"({rows[-1]['bytes_per_s'] / 1e12:5.2f} TB/s useful)", flush=True)
    return rows


DRIFT_BLOCK = 4096  # fp32 a tile: 16 KiB read a trip, 32 values a thread at 4 warps
DRIFT_WARPS = 4
DRIFT_BYTES = 1 << 29  # bytes of tiles a launch reads (512 MiB): far above L2
DRIFT_ROUNDS = (0, 8, 16, 24, 32, 48, 64, 96, 128)  # across the point where a trip's compute equals its memory
DRIFT_PROGRAMS_PER_SM = (1, 2, 4)
DRIFT_QUICK = {"rounds": (0, 16, 32, 64), "programs_per_sm": (1, 4)}


def probe_drift(env: dict, quick: bool) -> list[dict]:
    """Resident workgroups whose trips balance their compute against their memory, read-only or read-write.

    `drift_kernel`: persistent programs (1, 2 or 4 a SM) walk 32,768 tiles of 16 KiB with the grid's stride; each
    trip loads a tile and puts it through `rounds` multiply-adds a value, then stores it (`rw`: a recurrence's
    state update) or adds it into a running sum (`read`: split-KV attention streaming its cache). The rounds
    sweep crosses the point where a trip's compute equals its share of HBM. Written for the mean value analysis
    of drifted residents (`hwmodels.cycle_time.steady_trip_s`): exponential service queues more than the
    memory-bound split MLA decode rows (read-only, four residents, balanced) show, and about what the KDA and
    QuickReduce rows (which write) show. Eager launches, host hidden; each row checked against float64 first."""
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    sm = env["sm_count"]
    tiles = DRIFT_BYTES // (4 * DRIFT_BLOCK)
    src = torch.rand(tiles * DRIFT_BLOCK, device=DEVICE) + 0.5  # never zero
    dst = torch.empty_like(src)
    rounds_swept = DRIFT_QUICK["rounds"] if quick else DRIFT_ROUNDS
    per_sm_swept = DRIFT_QUICK["programs_per_sm"] if quick else DRIFT_PROGRAMS_PER_SM
    rows = []
    for mode, store in (("read", 0), ("rw", 1)):
        for per_sm in per_sm_swept:
            programs = per_sm * sm
            for rounds in rounds_swept:
                def launch(programs=programs, rounds=rounds, store=store) -> None:
                    k.drift_kernel[(programs,)](src, dst, tiles, BLOCK=DRIFT_BLOCK, ROUNDS=rounds, STORE=store,
                                                num_warps=DRIFT_WARPS)

                dst.zero_()
                launch()
                torch.cuda.synchronize()
                if store:
                    ok = torch.allclose(dst[:DRIFT_BLOCK * 4].double(),
                                        k.tile_work_reference(src[:DRIFT_BLOCK * 4], rounds), rtol=1e-5, atol=1e-6)
                    ok = ok and bool(torch.all(dst[-DRIFT_BLOCK:] != 0))
                else:
                    ok = torch.allclose(dst[:programs].double(), k.drift_reference(src, programs, DRIFT_BLOCK, rounds),
                                        rtol=1e-4)
                if not ok:
                    raise ProbeError(f"drift probe {mode} programs={programs} rounds={rounds}: wrong result")
                moved = tiles * DRIFT_BLOCK * 4 * (2 if store else 1)
                rows.append({"mode": mode, "tiles": tiles, "block_elems": DRIFT_BLOCK, "num_warps": DRIFT_WARPS,
                             "rounds": rounds, "programs": programs, **_bandwidth(launch, moved)})
                print(f"drift {mode:4} programs={programs:4} rounds={rounds:4}: "
                      f"{rows[-1]['time_s_median'] * 1e6:8.2f} us ({rows[-1]['bytes_per_s'] / 1e12:5.2f} TB/s)",
                      flush=True)
    return rows


BURST_BYTES = (4096, 8192, 16384, 24576, 32768, 36864, 40960)  # 36 KiB: the MLA decode trip's cache tile
BURST_WARPS = (4, 8)
BURST_BUFFER_BYTES = 1 << 30  # the HBM bursts walk through it, each launch at fresh addresses
BURST_LAUNCHES = 15


def probe_burst(env: dict, quick: bool) -> list[dict]:
    """One SM receiving a burst of asynchronous copies: one program of 4 or 8 warps copies 4-40 KiB into its shared
    memory with `cp.async.cg` (the LDGSTS.E.BYPASS.128 of the MLA decode loop), waits for all of it and meets at a
    barrier (`kernels.probes.async_burst_ptx`), cycles read with `%clock64` around the burst. `hbm`: every launch
    copies bytes no launch before it touched; `l2`: the same bytes each launch, after one that brought them into L2.
    The median over BURST_LAUNCHES launches (after three) of thread 0's cycles. What one SM's copies cost against
    their bytes: the latency and ceiling the model's trip of waited-for copies (`hwmodels.cycle_time.trip_s`)
    charges, today with the ceiling fitted to register loads (the MLP probe)."""
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    src = torch.rand(BURST_BUFFER_BYTES // 4, device=DEVICE)
    rows = []
    fresh = 0  # fp32 elements: where the next hbm burst starts
    for warps in BURST_WARPS[:1] if quick else BURST_WARPS:
        threads = 32 * warps
        out = torch.zeros(threads, dtype=torch.int64, device=DEVICE)
        for nbytes in BURST_BYTES:
            ptx = k.async_burst_ptx(nbytes, threads)
            for mode in ("hbm", "l2"):
                def burst(mode=mode, nbytes=nbytes, ptx=ptx, threads=threads, warps=warps, out=out) -> float:
                    nonlocal fresh
                    base = fresh if mode == "hbm" else 0
                    if mode == "hbm":
                        fresh = (fresh + nbytes // 4) % (src.numel() - k.BURST_MAX_BYTES // 4)
                    k.async_burst_kernel[(1,)](src, out, base, PTX=ptx, THREADS=threads, num_warps=warps)
                    torch.cuda.synchronize()
                    return float(out[0].item())

                cycles = median_after_warmup(burst, BURST_LAUNCHES)
                if cycles <= 0:
                    raise ProbeError(f"burst {mode} {nbytes} B warps={warps}: non-positive cycles")
                rows.append({"mode": mode, "bytes": nbytes, "num_warps": warps, "launches": BURST_LAUNCHES,
                             "cycles": cycles})
                print(f"burst {mode:3} {nbytes:6} B warps={warps}: {cycles:7.0f} cycles", flush=True)
    return rows


SMCLOCK_KINDS = {"fma": (16, False), "mma_sync": (16, True), "wgmma": (64, True)}  # kind -> (tile rows M, dots)
SMCLOCK_FMAS = {"fma": (8,), "mma_sync": (0, 4, 16, 64), "wgmma": (0, 4, 16, 64)}  # FFMAs a step beside the dot
SMCLOCK_PROGRAMS = (1, 16, 66, 132)
SMCLOCK_WARPS = 4
SMCLOCK_LAUNCHES = 6  # back to back in one CUDA graph; the last one's clock is the row's
SMCLOCK_CYCLES = 2_500_000  # about 1.3 ms of a step's cycles at 1.9 GHz: long enough for the timer's resolution


def probe_smclock(env: dict, quick: bool) -> list[dict]:
    """The SM clock a kernel runs at, read inside it: each program times its loop with the SM's cycle counter
    (`%clock64`) and the GPU's nanosecond timer (`%globaltimer`), cycles over nanoseconds
    (`kernels.probes.sm_clock_kernel`). A loop of FFMAs alone (`fma`), and loops that issue matrix instructions
    (`mma_sync`: tl.dot of a 16-row tile, mma.sync on sm_90; `wgmma`: a 64-row tile, wgmma) with 0-64 FFMAs a dot
    beside them, on 1 to 132 programs of 4 warps, launched back to back in a CUDA graph (the last launch read). A
    GPU that holds its SMs at a lower clock while they issue matrix instructions (NVIDIA's data-center parts quote
    their tensor-core peaks at such a clock) shows it here; the row's value is the programs' median and least."""
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    gen = torch.Generator(device="cpu").manual_seed(2049)
    n = kk = 64
    rows = []
    for kind, (m, dot) in SMCLOCK_KINDS.items():
        a = (torch.rand(m, kk, generator=gen) + 0.5).to(torch.bfloat16).to(DEVICE) / kk
        b = (torch.rand(kk, n, generator=gen) + 0.5).to(torch.bfloat16).to(DEVICE)
        x = (torch.rand(m, n, generator=gen) + 0.5).to(DEVICE)
        for fmas in SMCLOCK_FMAS[kind][:2] if quick else SMCLOCK_FMAS[kind]:
            for programs in (SMCLOCK_PROGRAMS[0], SMCLOCK_PROGRAMS[-1]) if quick else SMCLOCK_PROGRAMS:
                acc = torch.empty(programs * m * n, device=DEVICE)
                y = torch.empty(programs * m * n, device=DEVICE)
                clk = torch.zeros(2 * programs, dtype=torch.int64, device=DEVICE)
                steps = max(1, SMCLOCK_CYCLES // (40 * dot + 4 * max(fmas, 1)))  # ~40 cycles a dot, 4 an FFMA

                def launch(programs=programs, steps=steps, fmas=fmas, dot=dot, m=m, a=a, b=b, x=x, acc=acc, y=y,
                           clk=clk) -> None:
                    k.sm_clock_kernel[(programs,)](a, b, x, acc, y, clk, steps, 0.999, 0.001,
                                                   M=m, N=n, K=kk, DOT=dot, FMAS=fmas, USE_CLOCK=True,
                                                   num_warps=SMCLOCK_WARPS)

                launch()
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(SMCLOCK_LAUNCHES):
                        launch()
                for _ in range(2):
                    graph.replay()
                torch.cuda.synchronize()
                spans = clk.view(programs, 2).double().cpu()
                if not bool((spans > 0).all()):
                    raise ProbeError(f"smclock {kind} fmas={fmas} programs={programs}: a program read no clock")
                mhz = (spans[:, 0] / spans[:, 1] * 1e3).sort().values
                rows.append({"kind": kind, "m": m, "fmas_per_step": fmas, "programs": programs,
                             "num_warps": SMCLOCK_WARPS, "steps": steps, "launches": SMCLOCK_LAUNCHES,
                             "sm_clock_mhz_median": float(mhz[len(mhz) // 2]), "sm_clock_mhz_min": float(mhz[0])})
                print(f"smclock {kind:8} fmas={fmas:2} programs={programs:3}: {rows[-1]['sm_clock_mhz_median']:7.1f} "
                      f"MHz (least {rows[-1]['sm_clock_mhz_min']:7.1f})", flush=True)
                del acc, y, clk, graph
    return rows


MLATRIP_HEADS = 12  # one head block of the companion kernel (16 heads a workgroup): one workgroup a split
MLATRIP_SPLITS = (1, 16)
MLATRIP_CONTEXTS = (4096, 16384)  # 4.7 and 18.9 MB of bf16 cache: both inside L2, so a warm replay reads L2 alone
MLATRIP_CALLS = 20  # calls a graph
MLATRIP_ROTATION_BYTES = 256 << 20  # cold: input sets rotated through this many bytes, far above L2


def probe_mlatrip(env: dict, quick: bool) -> list[dict]:
    """One sequence of the companion MLA decode kernel (12 heads, one workgroup a split, 32 keys a trip), unsplit
    and in 16 splits, at two history lengths, its cache read from HBM (`cold`: the graph's calls rotate through
    input sets far larger than L2) or from L2 (`warm`: every call reads the same set). The difference of the two
    lengths over the trips between them is a trip of one workgroup alone on its SM: with the cache in L2 mostly
    the trip's own instructions and waits (the SASS simulation's part), from HBM that plus its wait for 36 KB.
    The split kernel's trip is measured 0.57 us longer than the unsplit one's, where the model has 0.41 us:
    this says on which side of the trip the difference lies. Checked against float64 first; CUDA graphs."""
    import torch

    from companion.bench.timing import DEVICE, bench, capture_graph
    from companion.kernels.mla_decode import mla_decode, mla_decode_ref
    from validation.measure_output import summarize
    from validation.suites.mla_decode import WIDTH

    rows = []
    for context in MLATRIP_CONTEXTS:
        set_bytes = context * WIDTH * 2
        n_cold = -(-MLATRIP_ROTATION_BYTES // set_bytes)
        sets = [(torch.randn(1, MLATRIP_HEADS, WIDTH, device=DEVICE, dtype=torch.bfloat16),
                 torch.randn(1, context, WIDTH, device=DEVICE, dtype=torch.bfloat16)) for _ in range(n_cold)]
        lengths = torch.full((1,), context, device=DEVICE, dtype=torch.int32)
        for splits in MLATRIP_SPLITS:
            q, cache = sets[0]
            out = mla_decode(q, cache, lengths, num_splits=splits)
            ref = mla_decode_ref(q, cache, lengths)
            err = float((out.double() - ref).norm() / ref.norm())
            if not err < 2e-2:
                raise ProbeError(f"mlatrip context={context} splits={splits}: relative error {err:.3g}")
            for mode in ("cold", "warm"):
                chosen = sets if mode == "cold" else sets[:1]

                def body(chosen=chosen, splits=splits, lengths=lengths) -> None:
                    for j in range(MLATRIP_CALLS):
                        q, cache = chosen[j % len(chosen)]
                        mla_decode(q, cache, lengths, num_splits=splits)

                graph = capture_graph(body)
                stats = summarize(bench(graph.replay, MLATRIP_CALLS, hide_host_gaps=True))
                del graph
                keys = -(-context // splits)  # a split's keys, 32 a trip
                trips = -(-keys // 32)
                rows.append({"mode": mode, "splits": splits, "context": context, "heads": MLATRIP_HEADS,
                             "trips_per_workgroup": trips, "calls": MLATRIP_CALLS,
                             "input_sets": len(chosen), **stats})
                print(f"mlatrip {mode} splits={splits:2} context={context:6}: {stats['time_s_median'] * 1e6:8.2f} us "
                      f"({trips} trips)", flush=True)
        del sets
        torch.cuda.empty_cache()
    return rows


SCATTER_PITCH_BYTES = 8192  # a row of 4,096 bf16: the hidden size of the down projections whose outputs it mimics
SCATTER_FOOTPRINT = 1 << 30  # bytes of rows (128 Ki rows): far above L2
SCATTER_RUN_BYTES = (64, 128, 256, 512, 1024, 2048, 8192)  # bytes of each row one program touches; 8192: whole rows
SCATTER_ORDERS = ("sequential", "random")
SCATTER_GROUP_M = 8  # the companion fused-MoE kernel's GROUP_M (companion/kernels/moe.py)
SCATTER_TILE_BYTES = 16 << 10  # a program's tile (rows x run): 65,536 programs a launch, 32 fp32 registers a thread
SCATTER_WARPS = 4


def probe_scatter(env: dict, quick: bool) -> list[dict]:
    """Short runs of rows named by an index, as the Triton fused-MoE kernel gathers its activations and scatters its
    output at the sorted token ids: each program takes a tile of ROWS rows and one column tile of R bytes in that
    kernel's grouped order (`scattered_tile_kernel`), over 1 GiB of 8 KiB rows, every byte touched once a launch.
    `sequential`: the index is 0, 1, 2, ... (a tile's rows adjacent); `random`: a seeded permutation (each row of a
    tile in another DRAM page). Loaded and summed, or stored. Against the whole-row stream (R = 8 KiB) and against
    each other: what HBM delivers for runs of 64 B to 2 KiB when the rows around them are not touched at the same
    time. Eager launches, host hidden. Sets no constant yet: written for the fused-MoE rows whose output stores
    (the down projections at 4,096 tokens) run at 2-3 TB/s where the model streams them at HBM's rate."""
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    pitch = SCATTER_PITCH_BYTES // 4
    n_rows = SCATTER_FOOTPRINT // SCATTER_PITCH_BYTES
    src = torch.rand(n_rows * pitch, device=DEVICE) + 0.5  # never zero
    dst = torch.empty(n_rows * pitch, device=DEVICE)
    generator = torch.Generator(device="cpu").manual_seed(20261208)
    indices = {"sequential": torch.arange(n_rows, dtype=torch.int32),
               "random": torch.randperm(n_rows, generator=generator).to(torch.int32)}
    runs = SCATTER_RUN_BYTES[1::2] + SCATTER_RUN_BYTES[-1:] if quick else SCATTER_RUN_BYTES
    rows = []
    for order in SCATTER_ORDERS:
        index = indices[order].to(DEVICE)
        for mode, store in (("load", 0), ("store", 1)):
            for run in runs:
                r = run // 4
                tile_rows = SCATTER_TILE_BYTES // run  # 64 rows at 256 B: the fused-MoE kernel's 64 x 128 bf16 tile
                num_pid_m = n_rows // tile_rows
                programs = num_pid_m * (pitch // r)
                sums = torch.zeros(programs, device=DEVICE)

                def launch(r=r, store=store, tile_rows=tile_rows, num_pid_m=num_pid_m, programs=programs,
                           out=(dst if store else sums), index=index) -> None:
                    k.scattered_tile_kernel[(programs,)](src, out, index, num_pid_m, PITCH=pitch, R=r,
                                                         ROWS=tile_rows, GROUP_M=SCATTER_GROUP_M, STORE=store,
                                                         num_warps=SCATTER_WARPS)

                dst.zero_()
                launch()
                torch.cuda.synchronize()
                if store:
                    want = ((torch.arange(n_rows, device=DEVICE)[:, None] % 4096) * pitch
                            + torch.arange(pitch, device=DEVICE)[None, :] + 1).to(torch.float32)
                    if not torch.equal(dst.view(n_rows, pitch), want):
                        raise ProbeError(f"scatter probe: {order} store of {run} B runs wrong")
                    del want
                else:
                    # the float64 reference on the GPU (`scattered_tile_reference` is its CPU form, for the tests)
                    tiles = src.view(n_rows, pitch)[index.long()].view(num_pid_m, tile_rows, pitch // r, r)
                    sums64 = tiles.double().sum(dim=(1, 3))
                    at = torch.from_numpy(k.scattered_tile_order(num_pid_m, pitch // r, SCATTER_GROUP_M)).to(DEVICE)
                    want = sums64[at[:, 0], at[:, 1]]
                    if not torch.allclose(sums.double(), want, rtol=1e-4):
                        raise ProbeError(f"scatter probe: {order} sums of {run} B runs wrong")
                    del tiles, sums64, want
                rows.append({"mode": mode, "order": order, "run_bytes": run, "pitch_bytes": SCATTER_PITCH_BYTES,
                             "rows": n_rows, "rows_per_program": tile_rows, "group_m": SCATTER_GROUP_M,
                             "num_warps": SCATTER_WARPS, "programs": programs,
                             **_bandwidth(launch, n_rows * SCATTER_PITCH_BYTES)})
                print(f"scatter {order:10} {mode:5} {run:5} B runs: {rows[-1]['time_s_median'] * 1e6:8.2f} us "
                      f"({rows[-1]['bytes_per_s'] / 1e12:5.2f} TB/s)", flush=True)
                del sums
    return rows


TILES_PITCH = 128  # fp32 a row: a 128 x 128 fp32 recurrent state, 64 KiB a block
TILES_ROWS = 128
TILES_WARPS = 4
TILES_COLUMNS = (1, 4, 8, 32, 128)  # fp32 a tile: 4, 16, 32, 128 bytes of a row, and whole 512-byte rows
TILES_FOOTPRINTS = tuple(m << 20 for m in (1, 4, 16, 32, 48, 64, 128, 512))  # bytes one launch writes
TILES_ROTATION = 256 << 20  # launches write in turn over at least this much (and two footprints): no slot stays in L2


def probe_tiles(env: dict, quick: bool) -> list[dict]:
    """Stores of column tiles, as a recurrence tiled over value columns writes its state: program (t, b) writes
    column tile t (4 to 512 bytes of each row) of the 128 rows of 64 KiB block b (`column_tile_store_kernel`,
    4 warps), the tiles of one block consecutive in the grid, so neighbouring programs fill each other's
    sectors. Launch footprints from 1 MiB (in L2) to 512 MiB (far above it); successive launches write
    successive slots of a buffer of at least 256 MiB, so each launch also pays the write-back of what earlier
    ones left dirty, as a kernel timed on rotated buffers does. Against the whole-row stores of the same
    footprint: whether L2 merges the partial sectors of neighbouring workgroups, and up to what footprint.
    Eager launches, host hidden."""
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k

    block = TILES_ROWS * TILES_PITCH
    most = max(TILES_FOOTPRINTS)
    dst = torch.zeros(max(TILES_ROTATION, 2 * most) // 4, device=DEVICE)
    rows = []
    for footprint in (TILES_FOOTPRINTS[::2] if quick else TILES_FOOTPRINTS):
        blocks = footprint // (block * 4)
        slots = max(2, -(-TILES_ROTATION // footprint))
        for c in TILES_COLUMNS:
            turn = [0]

            def launch(c=c, blocks=blocks, slots=slots, turn=turn) -> None:
                base = (turn[0] % slots) * blocks * block
                turn[0] += 1
                k.column_tile_store_kernel[(TILES_PITCH // c, blocks)](dst, base, PITCH=TILES_PITCH, ROWS=TILES_ROWS,
                                                                       C=c, num_warps=TILES_WARPS)

            dst[: blocks * block].zero_()
            launch()
            torch.cuda.synchronize()
            view = dst[: blocks * block].view(blocks, TILES_ROWS, TILES_PITCH)
            want = (torch.arange(blocks, device=DEVICE, dtype=torch.float32)[:, None, None] * TILES_PITCH
                    + torch.arange(TILES_PITCH, device=DEVICE, dtype=torch.float32)[None, None, :] + 1)
            if not torch.equal(view, want.expand(-1, TILES_ROWS, -1)):
                raise ProbeError(f"tiles probe: {c * 4} B tiles of {footprint >> 20} MiB written wrong")
            rows.append({"tile_bytes": c * 4, "pitch_bytes": TILES_PITCH * 4, "rows_per_block": TILES_ROWS,
                         "footprint_bytes": footprint, "rotation_bytes": slots * footprint,
                         "num_warps": TILES_WARPS, **_bandwidth(launch, footprint)})
            print(f"tiles {c * 4:4} B of {TILES_PITCH * 4} B, {footprint >> 20:4} MiB: "
                  f"{rows[-1]['time_s_median'] * 1e6:8.2f} us ({rows[-1]['bytes_per_s'] / 1e12:5.2f} TB/s)", flush=True)
    return rows


LOADED_MODES = {"load": 0, "store": 1, "copy": 2}  # the background's traffic (`stream_kernel`'s MODE)
LOADED_PROGRAMS = (0, 8, 16, 33, 66, 132, 264, 528)  # background programs: none, a few SMs, every SM, 2 and 4 a SM
LOADED_PROGRAMS_QUICK = (0, 33, 132, 528)
LOADED_BLOCK = 4096  # fp32 a background block (16 KiB, 32 a thread at 4 warps)
LOADED_WARPS = 4
LOADED_BUFFER_BYTES = 1 << 30  # each of the background's source and destination: far above L2
LOADED_FOOTPRINT = 256 * MIB  # the chase's lines: far above L2, few TLB misses (`probe_latency`: 344 ns here)
LOADED_STEPS = 2048
LOADED_SAMPLES = 7
LOADED_BACKGROUND_S = 8e-3  # each sample's background runs at least this long; the chase takes 1-3 ms
LOADED_LEAD_CYCLES = 100_000  # the chase's stream sleeps this long first (~50 us), so it starts inside the background


def probe_loaded(env: dict, quick: bool) -> list[dict]:
    """Dependent-load latency while other SMs stream: one warp chases a random cycle of 128-byte lines over 256 MiB
    (as `probe_latency`) on its own stream while a background kernel of P programs (4 warps, 16 KiB blocks, a
    persistent grid-stride loop over 1 GiB) reads, writes or copies on another. The chase's stream sleeps ~50 us
    first, and every sample checks that the chase ended before the background did (`overlapped`). Per row: the
    background's time and bytes (event-timed, with the chase beside it) and the chase's cycles per load
    (`%clock64`). P = 0 is the chase alone. What a kernel that waits on its loads pays when the rest of the GPU
    keeps the memory busy, by what kind of traffic, which the single-program chase cannot show."""
    import numpy as np
    import torch

    from companion.bench.timing import DEVICE
    from companion.kernels import probes as k
    from validation.measure_output import summarize

    gen = torch.Generator().manual_seed(4321)
    table = k.chase_table(LOADED_FOOTPRINT // k.CACHE_LINE_BYTES, gen, DEVICE)
    state = torch.zeros(1, dtype=torch.int32, device=DEVICE)
    clk = torch.zeros(3, dtype=torch.int64, device=DEVICE)
    total_blocks = LOADED_BUFFER_BYTES // (4 * LOADED_BLOCK)
    src = torch.rand(total_blocks * LOADED_BLOCK, device=DEVICE) + 0.5  # never zero
    dst = torch.empty_like(src)
    out = torch.empty(max(LOADED_PROGRAMS), device=DEVICE)
    background, chaser = torch.cuda.Stream(), torch.cuda.Stream()
    block_bytes = 4 * LOADED_BLOCK

    def chase() -> None:
        k.chase_kernel[(1,)](table, state, clk, LOADED_STEPS, USE_CLOCK=USE_CLOCK, num_warps=1)

    def stream(programs: int, mode: int, base: int, n_blocks: int) -> None:
        target = out if mode == 0 else dst
        k.stream_kernel[(programs,)](src, target, base, n_blocks, total_blocks, BLOCK=LOADED_BLOCK, MODE=mode,
                                     num_warps=LOADED_WARPS)

    def check(programs: int, mode: int, n_blocks: int) -> None:
        """The first launch of a configuration, from block 0, checked against its reference."""
        dst.zero_()
        stream(programs, mode, 0, n_blocks)
        torch.cuda.synchronize()
        span = slice(0, n_blocks * LOADED_BLOCK)
        if mode == 0:
            want = src[span].double().sum().item()
            if not math.isclose(out[:programs].double().sum().item(), want, rel_tol=1e-4):
                raise ProbeError(f"loaded load P={programs}: sum {out[:programs].sum().item()} != {want}")
        elif mode == 1:
            blocks = torch.arange(1, n_blocks + 1, device=DEVICE, dtype=torch.float32)
            if not torch.equal(dst[span].view(n_blocks, LOADED_BLOCK), blocks[:, None].expand(-1, LOADED_BLOCK)):
                raise ProbeError(f"loaded store P={programs}: wrong blocks")
        elif not torch.equal(dst[span], src[span]):
            raise ProbeError(f"loaded copy P={programs}: the copy differs")

    def chase_cycles() -> int:
        c = clk.cpu()
        if int(state.item()) % (k.CACHE_LINE_BYTES // 4):
            raise ProbeError("loaded: the chase left the line heads")
        return int(c[1] - c[0])

    chase()  # compile, and leave the chase somewhere in its cycle
    torch.cuda.synchronize()
    rows = []
    for mode_name, mode in LOADED_MODES.items():
        for programs in LOADED_PROGRAMS_QUICK if quick else LOADED_PROGRAMS:
            cycles, chase_s, times, overlapped, n_blocks = [], [], [], [], 0
            if programs == 0:
                if mode:  # the chase alone is one row, under the first mode
                    continue
                for _ in range(LOADED_SAMPLES):
                    e2, e3 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    e2.record()
                    chase()
                    e3.record()
                    torch.cuda.synchronize()
                    cycles.append(chase_cycles())
                    chase_s.append(e2.elapsed_time(e3) * 1e-3)
            else:
                check(programs, mode, programs * 32)
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0.record()
                stream(programs, mode, 0, programs * 64)
                t1.record()
                torch.cuda.synchronize()
                per_block_s = t0.elapsed_time(t1) * 1e-3 / (programs * 64)
                n_blocks = max(programs * 8, math.ceil(LOADED_BACKGROUND_S / per_block_s))
                base = 0
                for _ in range(LOADED_SAMPLES):
                    e0, e1, e2, e3 = (torch.cuda.Event(enable_timing=True) for _ in range(4))
                    torch.cuda.synchronize()
                    with torch.cuda.stream(background):
                        e0.record(background)
                        stream(programs, mode, base, n_blocks)
                        e1.record(background)
                    with torch.cuda.stream(chaser):
                        torch.cuda._sleep(LOADED_LEAD_CYCLES)
                        e2.record(chaser)
                        chase()
                        e3.record(chaser)
                    torch.cuda.synchronize()
                    cycles.append(chase_cycles())
                    chase_s.append(e2.elapsed_time(e3) * 1e-3)
                    times.append(e0.elapsed_time(e1) * 1e-3)
                    overlapped.append(e0.elapsed_time(e2) > 0 and e0.elapsed_time(e3) < e0.elapsed_time(e1))
                    base = (base + n_blocks) % total_blocks
            moved = n_blocks * block_bytes * (2 if mode == 2 else 1)
            stats = summarize(times) if times else {"time_s_median": None, "time_s_p10": None, "time_s_p90": None,
                                                    "repeats": 0}
            per_load = float(np.median(cycles)) / LOADED_STEPS
            rows.append({"mode": "alone" if programs == 0 else mode_name, "programs": programs,
                         "block_elems": LOADED_BLOCK, "num_warps": LOADED_WARPS, "footprint_bytes": LOADED_FOOTPRINT,
                         "steps": LOADED_STEPS, "bytes_per_sample": moved, **stats,
                         "background_bytes_per_s": moved / stats["time_s_median"] if times else 0.0,
                         "cycles_per_load": per_load, "ns_per_load": float(np.median(chase_s)) / LOADED_STEPS * 1e9,
                         "overlapped": int(all(overlapped)) if overlapped else 1})
            rate = rows[-1]["background_bytes_per_s"] / 1e12
            print(f"loaded {rows[-1]['mode']:5} P={programs:4}: background {rate:5.2f} TB/s, chase {per_load:6.1f} "
                  f"cycles ({rows[-1]['ns_per_load']:6.1f} ns) a load, overlapped {rows[-1]['overlapped']}",
                  flush=True)
    return rows


GROUPED_GROUPS = 1023  # torch._grouped_mm takes fewer than 1,024 groups (aten/src/ATen/native/cuda/GroupMM.cu)
GROUPED_ROWS = 128  # rows a group: one cluster of two 64-row tiles of the Hopper kernel's 64 x 128 x 128 tile
GROUPED_N = 128  # output columns: one column tile, so each group is one cluster's work
GROUPED_K = (128, 256, 512, 1024, 2048)
GROUPED_K_QUICK = (128, 512, 2048)
GROUPED_FEW = 66  # groups that hold rows in `tail1` and `few1`: one a cluster of the 132-SM grid
GROUPED_WIDE_GROUPS, GROUPED_WIDE_N = 43, 3072  # `wide1t`'s groups and their columns
# `wide{C}x{r}`: `wide1t` swept, about 1,023 cluster tiles as groups of C column tiles (n = 128 C) and r rows (one
# cluster tile a group while r <= 64): how the extra time of a group's many column tiles grows with the clusters that
# read one group's rows of A at once (C = 2 to 56; 24 is `wide1t`) and with the rows that spread them (r = 2 to 32)
GROUPED_WIDE_SWEEP = ((2, 1), (4, 1), (8, 1), (56, 1), (24, 2), (24, 8), (24, 32))
# (layout, groups, rows a group, weights): `same` and `switch` read one [k, 128] matrix viewed by every group
# (stride 0: L2 after the first touch); `switch1` is `switch` with one row a group, as a MoE decode routes its tokens
# (each still padded to a cluster of two 64-row tiles); `distinct` and `distinct1` give every group its own weights,
# from HBM once they pass L2 (`GROUPED_DISTINCT_MIN_K`: 1,023 x k x 128 bf16 from k = 512 is 134 MB), stored
# [k, n]; `distinct1t` stores them [n, k] as MoE checkpoints do (each tile's weights are rows of 2k bytes apart)
GROUPED_LAYOUTS = (("same", 1, GROUPED_GROUPS * GROUPED_ROWS, "shared"),
                   ("switch", GROUPED_GROUPS, GROUPED_ROWS, "shared"), ("one", 1, 64, "shared"),
                   ("switch1", GROUPED_GROUPS, 1, "shared"),
                   ("distinct", GROUPED_GROUPS, GROUPED_ROWS, "distinct"), ("distinct1", GROUPED_GROUPS, 1, "distinct"),
                   ("distinct1t", GROUPED_GROUPS, 1, "distinct-nk"), ("few1", GROUPED_FEW, 1, "shared"),
                   ("tail1", GROUPED_GROUPS, 1, "shared"), ("wide1t", GROUPED_WIDE_GROUPS, 1, "distinct-nk"),
                   *((f"wide{c}x{r}", round(GROUPED_GROUPS / c), r, "distinct-nk") for c, r in GROUPED_WIDE_SWEEP))
# `wide1t`: `distinct1t`'s work as 43 groups of 3,072 columns (24 column tiles a group, 1,032 cluster tiles against
# 1,023) instead of 1,023 groups of one column tile: what a group's many column tiles cost
# `tail1`: only the first `GROUPED_FEW` of the 1,023 groups hold a row (one tile for each cluster of the grid), the
# rest are empty, as a decode's experts past those its tokens picked; `few1` is the same work as 66 groups
GROUPED_DISTINCT_MIN_K = 512


def _wide_columns(layout: str) -> int:
    """Column tiles a group of a `wide{C}x{r}` layout (1 for the others)."""
    match = re.fullmatch(r"wide(\d+)x\d+", layout)
    return int(match.group(1)) if match else 1


def probe_grouped(env: dict, quick: bool) -> list[dict]:
    """What a CUTLASS grouped GEMM (`torch._grouped_mm`, the ptr-array TMA kernel PyTorch runs on Hopper) pays each
    time a persistent CTA moves to another group's tile. The same 1,023 clusters of work (128 rows, 128 columns,
    depth k) as one group of 130,944 rows (`same`: a CTA's next tile is the same group's) and as 1,023 groups of
    128 rows (`switch`: every next tile is another group's, so the CTA rewrites its TMA descriptors first). The
    groups' weights are one [k, 128] matrix viewed 1,023 times (stride 0), so both layouts read the same bytes,
    from L2; the rows of A stream from HBM in both. Also `one`: a single 64-row tile, the call's floor. Each call
    is PyTorch's two launches (`prepare_grouped_gemm_data`, then the GEMM), timed as a CUDA graph, one call a
    replay. Checked against float64 on a sample of groups, on fresh random inputs."""
    import torch

    from companion.bench.timing import DEVICE, bench_graph
    from validation.measure_output import summarize

    gen = torch.Generator(device=DEVICE).manual_seed(2027)
    rows = []
    for k in (GROUPED_K_QUICK if quick else GROUPED_K):
        base = (torch.randn(k, GROUPED_N, device=DEVICE, generator=gen) / k**0.5).to(torch.bfloat16)
        for layout, groups, per_group, weights in GROUPED_LAYOUTS:
            if (layout == "one" and k != GROUPED_K[0]) or (weights != "shared" and k < GROUPED_DISTINCT_MIN_K):
                continue
            active = GROUPED_FEW if layout == "tail1" else groups
            n = GROUPED_WIDE_N if layout == "wide1t" else GROUPED_N * _wide_columns(layout)
            total = active * per_group
            a = torch.randn(total, k, device=DEVICE, generator=gen).to(torch.bfloat16) + 0.5  # never zero
            if weights == "distinct":
                w = (torch.randn(groups, k, n, device=DEVICE, generator=gen) / k**0.5).to(torch.bfloat16)
            elif weights == "distinct-nk":  # stored [n, k] a group, as checkpoints hold experts, read transposed
                w = (torch.randn(groups, n, k, device=DEVICE, generator=gen) / k**0.5).to(torch.bfloat16)
                w = w.transpose(-2, -1)
            else:
                w = base.unsqueeze(0).expand(groups, k, GROUPED_N)
            offs = torch.arange(1, groups + 1, device=DEVICE, dtype=torch.int32).clamp(max=active) * per_group
            try:
                out = torch._grouped_mm(a, w, offs=offs)
            except RuntimeError:  # a PyTorch that refuses the stride-0 view: distinct copies (more bytes)
                w, weights = w.contiguous(), "distinct"
                out = torch._grouped_mm(a, w, offs=offs)
            torch.cuda.synchronize()
            picks = sorted({0, active // 2, active - 1})
            for g in picks:
                span = slice(g * per_group, (g + 1) * per_group)
                want = a[span].double() @ w[g].double()
                scale = want.abs().max().item()
                if not (out[span].double() - want).abs().max().item() <= 2.0**-7 * scale:
                    raise ProbeError(f"grouped probe: {layout} k={k} group {g} differs from float64")

            def call(a=a, w=w, offs=offs) -> None:
                torch._grouped_mm(a, w, offs=offs)

            stats = summarize(bench_graph(call, 1))
            cta_tiles = active * -(-per_group // 64) * -(-n // GROUPED_N)
            rows.append({"layout": layout, "groups": groups, "active_groups": active, "rows_per_group": per_group,
                         "n": n, "k": k,
                         "weights": weights, "launch_mode": "graph", "cta_tiles": cta_tiles, **stats,
                         "s_per_tile_per_sm": stats["time_s_median"] / (cta_tiles / env["sm_count"])})
            print(f"grouped {layout:9} k={k:5} {groups:4} groups x {per_group:6} rows ({weights}): "
                  f"{stats['time_s_median'] * 1e6:8.2f} us, {rows[-1]['s_per_tile_per_sm'] * 1e6:6.3f} us a tile "
                  f"a SM", flush=True)
            del a, w, out
    return rows


# The fused-MoE kernel's grid sized for the worst padding (routed rows + experts x (BLOCK_M - 1)), as vLLM launches
# it so that one captured graph serves any routing, against the same launch with only the row tiles the routing
# uses: what the programs that exit at once cost beside the real ones. Decode token counts, balanced routing.
MOETAIL_SHAPES = ((8, 2, 4096, 1792), (64, 8, 4096, 192), (128, 8, 4096, 192), (256, 8, 7168, 256),
                  (256, 8, 7168, 2048), (384, 8, 7168, 256))  # (experts, top_k, n, k): Mixtral/Qwen3/DS-V3/Kimi
MOETAIL_TOKENS = (1, 4, 16, 64)
MOETAIL_TILE = (16, 128, 64, 4, 3)  # BLOCK_M, BLOCK_N, BLOCK_K, warps, stages: the moe suite's at few rows


def probe_moetail(env: dict, quick: bool) -> list[dict]:
    """The fused-MoE kernel (`companion.kernels.moe`) at decode: each routing timed with the grid vLLM launches,
    sized for the worst padding (`worst`: most programs exit at once), and with the row tiles the routing fills
    (`exact`), each call one CUDA-graph replay. The difference over the empty programs per SM is what one costs
    beside the real ones. Each configuration checked against float64 first, fresh random inputs."""
    import torch

    from companion.bench.timing import DEVICE, bench_graph
    from companion.kernels import moe
    from validation.measure_output import summarize

    gen = torch.Generator(device=DEVICE).manual_seed(2028)
    block_m, block_n, block_k, warps, stages = MOETAIL_TILE
    rows = []
    for experts, top_k, n, k in (MOETAIL_SHAPES[::2] if quick else MOETAIL_SHAPES):
        w = (torch.randn(experts, n, k, device=DEVICE, generator=gen) / k**0.5).to(torch.bfloat16)
        for tokens in MOETAIL_TOKENS:
            a = torch.randn(tokens, k, device=DEVICE, generator=gen).to(torch.bfloat16) + 0.5  # never zero
            choice = torch.rand(tokens, experts, device=DEVICE, generator=gen).argsort(dim=1)[:, :top_k]
            aligned = moe.align(choice, experts, block_m)
            sorted_rows, tile_expert, padded, tiles = aligned
            used = int(padded.item()) // block_m
            out = moe.grouped_gemm(a, w, choice, block_m, block_n, block_k, warps, stages, aligned=aligned)
            want = moe.grouped_gemm_ref(a.double(), w.double(), choice)
            if not (out.double() - want).abs().max().item() <= 2.0**-7 * want.abs().max().item():
                raise ProbeError(f"moetail probe: experts={experts} tokens={tokens} differs from float64")
            for grid, row_tiles in (("worst", tiles), ("exact", used)):
                exact = (sorted_rows, tile_expert, padded, row_tiles)

                def call(a=a, w=w, choice=choice, exact=exact, out=out) -> None:
                    moe.grouped_gemm(a, w, choice, block_m, block_n, block_k, warps, stages, out=out, aligned=exact)

                stats = summarize(bench_graph(call, 1))
                columns = -(-n // block_n)
                rows.append({"experts": experts, "tokens": tokens, "top_k": top_k, "n": n, "k": k,
                             "block_m": block_m, "block_n": block_n, "block_k": block_k, "num_warps": warps,
                             "num_stages": stages, "grid": grid, "programs": row_tiles * columns,
                             "real_programs": used * columns, "launch_mode": "graph", **stats})
            worst, exact_row = rows[-2], rows[-1]
            empties = (worst["programs"] - worst["real_programs"]) / env["sm_count"]
            extra = worst["time_s_median"] - exact_row["time_s_median"]
            for row in (worst, exact_row):
                row["s_per_empty_program_per_sm"] = extra / empties if empties else 0.0
            print(f"moetail E={experts:3} t={tokens:3} n={n} k={k:5}: worst {worst['time_s_median'] * 1e6:8.2f} us "
                  f"({worst['programs']} programs), exact {exact_row['time_s_median'] * 1e6:8.2f} us "
                  f"({exact_row['programs']}): {extra / empties * 1e9 if empties else 0:6.1f} ns an empty program "
                  f"a SM", flush=True)
            del a, out
        del w
    return rows


PROBE_FUNCTIONS: dict[str, Callable[[dict, bool], list[dict]]] = {
    "latency": probe_latency, "mlp": probe_mlp, "l2": probe_l2, "floor": probe_floor, "issue": probe_issue,
    "mma": probe_mma, "smem": probe_smem, "clock": probe_clock, "peer": probe_peer, "grid": probe_grid,
    "rows": probe_rows, "host": probe_host, "queue": probe_queue, "tiles": probe_tiles, "async": probe_async,
    "loaded": probe_loaded, "grouped": probe_grouped, "moetail": probe_moetail, "scatter": probe_scatter,
    "drift": probe_drift, "lds": probe_lds, "mlatrip": probe_mlatrip, "burst": probe_burst, "smclock": probe_smclock,
}
if tuple(PROBE_FUNCTIONS) != spec.PROBES:
    raise RuntimeError(f"bench probes {tuple(PROBE_FUNCTIONS)} differ from validation.probes.PROBES {spec.PROBES}")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=None, help="output folder (default: $OUT)")
    parser.add_argument("--only", nargs="+", choices=spec.PROBES, metavar="NAME",
                        help=f"run only these probes, of: {' '.join(spec.PROBES)}")
    parser.add_argument("--quick", action="store_true", help="fewer configurations per probe (about half the time)")


def run(args: argparse.Namespace) -> int:
    started = start_timing(args.out, "bench probes")
    if isinstance(started, int):
        return started
    out, env = started
    import torch

    from companion.bench import timing

    failures: list[str] = []
    names = args.only or [p for p in spec.PROBES if p not in spec.MULTI_GPU_PROBES or torch.cuda.device_count() > 1]
    for name in names:
        t0 = time.monotonic()
        before = sm_clock_mhz()
        try:
            rows = PROBE_FUNCTIONS[name](env, args.quick)
        except Exception as e:
            traceback.print_exc()
            failures.append(f"{name}: {type(e).__name__}: {e}")
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            continue
        after = sm_clock_mhz()
        clocks = {"sm_clock_mhz_before": before, "sm_clock_mhz_after": after}
        rows = [{**row, **timing.provenance(env), **clocks} for row in rows]
        path = out / spec.csv_name(name)
        write_csv_atomic(path, spec.COLUMNS[name], rows)
        torch.cuda.empty_cache()
        print(f"wrote {path} ({len(rows)} rows, {time.monotonic() - t0:.1f} s); nvidia-smi: {timing.smi_clocks()}",
              flush=True)
    try:
        print("\n" + spec.format_summary(spec.summary(out)))
    except Exception as e:
        traceback.print_exc()
        failures.append(f"summary: {type(e).__name__}: {e}")
    return report_failures("bench probes", failures)
