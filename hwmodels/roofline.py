"""Time of one kernel launch on one GPU, under the calibration's cost model.

Cycle-level (the default, `CostModel.CYCLE`): the largest of the whole-GPU roofline terms below (compute at
the efficient peak, scaled to the clock the matrix units hold under the power limit; bytes at the efficient
bandwidth; the busiest CU's compute rounds; instruction issue) and the waves of the workgroups' programs
(`hwmodels.cycle_time`: latency chains, Little's law on the measured curve, issue, dispatch), plus the store
drain and the launch. The latency-hiding and partial-grid heuristics below are not used: the programs state
what they approximated.

Roofline (`CostModel.ROOFLINE`, `--cost-model roofline`), per launch of W workgroups on a GPU of C CUs with k
workgroups resident per CU:

- compute_s = max(sum_d flop_d / (peak_d * eff_d),  f_wg * ceil(W / C) / (rate_cu * hiding),  issue_s)
- memory_s  = max(bytes / (bw * eff_m),              b_wg * ceil(S / C) / (bw_cu * hiding))
- time_s    = max(compute_s, memory_s) + launch_s

The first term of each is the whole-GPU roofline. The second is the busiest CU: it runs ceil(W / C)
workgroups one after another (its resident workgroups share its math units and its memory path),
each executing f_wg FLOP. Of the W workgroups, S stream distinct data (a GEMM's row blocks share
weight tiles through L2, so S is its column blocks; otherwise S = W), b_wg bytes each, and the
busiest CU serves ceil(S / C) of them. rate_cu is one CU's share of the efficient peak.
bw_cu = bw * eff_m / (s * C): one CU can pull 1 / (s * C) of the bandwidth, so a grid must keep a
share s of the CUs streaming (`hbm_saturation_cu_fraction`) to saturate HBM, and a grid of fewer
workgroups cannot. hiding = min(1, min(k, ceil(W / C)) / n_hide) scales a CU's rates down when fewer
than `latency_hiding_workgroups_per_cu` workgroups are resident to hide latency.

issue_s, when the Work counts the warp instructions i_wg of its busiest workgroup (w warps), is the time
the busiest CU's schedulers take to issue them: ceil(W / C) * i_wg / (min(simds, resident warps) * clock).
Each of a CU's `simds_per_cu` schedulers issues at most one warp instruction per clock, and a warp stays
on one scheduler, so a CU with fewer resident warps than schedulers issues from that many only. It
bounds kernels whose instructions are not FLOP (bit packing, reductions, address arithmetic, masks).

Efficiencies are at most 1 and f_wg * W >= flop, and memory_s is at least bytes / bw, so no
prediction is below the roofline floor max(flop / peak, bytes / bw).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from hwmodels import loaded_latency
from hwmodels.calibration import Calibration, CostModel
from hwmodels.cycle_time import Dispatch, MemoryCurve, Residency, completion_s, grid_s
from hwmodels.dtypes import Dtype
from hwmodels.occupancy import Occupancy, occupancy
from hwmodels.program import Program, evolved, streaming_program
from hwmodels.spec import GPU
from hwmodels.work import Family, Work


class LaunchMode(Enum):
    """How the host submits a kernel: one API call each, as a node of a captured graph, or one API call each issued
    ahead of the GPU (queued: the host's cost hidden behind the kernels before it, the GPU's own dispatch paid)."""

    EAGER = "eager"
    GRAPH = "graph"
    QUEUED = "queued"


class Bound(Enum):
    """Which term sets a launch's time."""

    COMPUTE = "compute"
    MEMORY = "memory"
    LATENCY = "latency"  # the workgroups' programs (dependent chains, loads waited on), cycle-level model only
    LAUNCH = "launch"


@dataclass(frozen=True)
class KernelTime:
    """A launch's predicted time and the terms that make it, all in seconds."""

    time_s: float
    compute_s: float
    memory_s: float
    launch_s: float
    floor_s: float
    bound: Bound
    waves: int
    occupancy: Occupancy | None
    latency_s: float = 0.0  # the workgroups' programs: chains, waited loads, issue, waves (cycle-level model)
    # a dependent DRAM round trip's latency over the idle one, at the launch's own reads and writes a second
    # (`hwmodels.loaded_latency`; 1 where the GPU has no curves or the launch is held by its floor)
    dram_latency_factor: float = 1.0


# Families whose compute efficiency is a matmul throughput measured at the clock the GPU held while it ran
# (hwmodels/calibrations: [S3]'s maximum-achievable matmul rates, and the grouped GEMM's share of them): the power
# limit's clock is in that figure already, so `matrix_clock_share` does not scale it again.
SUSTAINED_FAMILIES = (Family.GEMM, Family.MOE_GEMM)


def matrix_clock_share(gpu: GPU) -> float:
    """The matrix units' sustained rate over their peak: the clock they hold under the power limit over the
    clock the peak is quoted at (1 where the spec says the peak holds)."""
    return min(1.0, gpu.matmul_clock_hz / gpu.clock_hz)


def at_matrix_clock(gpu: GPU) -> GPU:
    """The GPU as a kernel that issues matrix instructions sees it: its SMs at `GPU.matrix_boost_clock_hz` (the
    tensor-core clock probe), where the spec has one below the boost clock."""
    if gpu.matrix_boost_clock_hz is None or gpu.matrix_boost_clock_hz >= gpu.boost_clock_hz:
        return gpu
    return evolved(gpu, boost_clock_hz=gpu.matrix_boost_clock_hz)


def roofline_floor_s(work: Work, gpu: GPU) -> float:
    """The time no implementation beats: all FLOP at dense peak or all bytes at peak bandwidth."""
    compute = sum(flop / gpu.peak_flop_per_s(dtype) for dtype, flop in work.flop_by_dtype.items() if flop)
    return max(compute, work.bytes / gpu.hbm_bandwidth_bytes_per_s)


def launch_overhead_s(gpu: GPU, calib: Calibration, mode: LaunchMode, triton: bool = False) -> float:
    """Cost of one launch on the kernel's timeline; the calibration's value wins over the spec's. `triton`: an eager
    launch through Triton's Python launcher, where the GPU spec measured one (`launch_eager_triton_s`). A queued
    launch costs what the GPU spends on it alone (`gpu_launch_s`)."""
    if mode is LaunchMode.QUEUED:
        return gpu_launch_s(gpu, calib)
    if mode is LaunchMode.GRAPH:
        return calib.launch_graph_node_s if calib.launch_graph_node_s is not None else gpu.launch_graph_node_s
    if triton and gpu.launch_eager_triton_s is not None:
        return gpu.launch_eager_triton_s
    return calib.launch_eager_s if calib.launch_eager_s is not None else gpu.launch_eager_s


def gpu_launch_s(gpu: GPU, calib: Calibration) -> float:
    """GPU time of one eager launch with the host hidden (timed alone between events): the spec's measured
    `launch_eager_gpu_s`, else a graph node's (the GPU still fetches and dispatches the kernel)."""
    if gpu.launch_eager_gpu_s is not None:
        return gpu.launch_eager_gpu_s
    return launch_overhead_s(gpu, calib, LaunchMode.GRAPH)


def kernel_time(work: Work, gpu: GPU, calib: Calibration, mode: LaunchMode = LaunchMode.EAGER,
                dispatch: Dispatch | None = None) -> KernelTime:
    """Predicted time of one launch; a Work of several launches must be timed launch by launch.

    `dispatch` times an irregular grid workgroup by workgroup (the simulation layer's workgroup DES); without
    it such a grid gets the bound of `hwmodels.cycle_time.bound_dispatch_s`.
    """
    return launched(kernel_busy(work, gpu, calib, dispatch),
                    launch_overhead_s(gpu, calib, mode, work.triton_launch and work.workgroups > 0))


def launched(busy: KernelTime, launch_s: float) -> KernelTime:
    """A launch's time from its busy time (`kernel_busy`) and the overhead of launching it in some mode."""
    return KernelTime(busy.time_s + launch_s, busy.compute_s, busy.memory_s, launch_s, busy.floor_s,
                      Bound.LAUNCH if launch_s > busy.time_s else busy.bound, busy.waves, busy.occupancy,
                      busy.latency_s, busy.dram_latency_factor)


def kernel_busy(work: Work, gpu: GPU, calib: Calibration, dispatch: Dispatch | None = None) -> KernelTime:
    """`kernel_time` before the launch overhead (`launch_s` 0): what the GPU spends on the launch's work, the same
    in every launch mode, so one busy time serves a graph replay and an eager launch of the same kernel."""
    if work.launches != 1:
        raise ValueError(f"kernel_time times one launch; this Work has {work.launches} (time each of launches())")
    if work.workgroups == 0:
        if work.flop or work.bytes:
            raise ValueError("a launch with work to do needs at least one workgroup")
        return KernelTime(0.0, 0.0, 0.0, 0.0, 0.0, Bound.LAUNCH, 0, None)

    occ = occupancy(gpu, lds_bytes=work.lds_bytes_per_workgroup, threads=work.threads_per_workgroup,
                    vgprs=work.registers_per_thread)
    cus = gpu.compute_units
    per_cu_rounds = -(-work.workgroups // cus)
    resident = min(occ.workgroups_per_cu, per_cu_rounds)
    cycle = calib.cost_model is CostModel.CYCLE
    # The cycle-level model states latency hiding in the workgroups' programs instead of this heuristic.
    hiding = 1.0 if cycle else min(1.0, resident / calib.latency_hiding_workgroups_per_cu)

    compute_s = 0.0
    total_flop, family = work.flop, work.family
    if total_flop:
        # Seconds per FLOP at the efficient peaks, weighted by the datatype mix of this launch; the matrix units'
        # clock share applies to the math below FP32 of the families not fitted at their sustained rate.
        clock_share = matrix_clock_share(gpu) if cycle and family not in SUSTAINED_FAMILIES else 1.0
        s_per_flop = sum(
            (flop / total_flop) / (gpu.peak_flop_per_s(dtype) * calib.compute_efficiency_for(family, dtype)
                                   * (clock_share if dtype is not Dtype.FP32 else 1.0))
            for dtype, flop in work.flop_by_dtype.items() if flop
        )
        busiest_cu_flop = work.workgroup_flop * per_cu_rounds
        if work.flop_heaviest_workgroup is not None:  # dealt out longest first: one heaviest block's excess
            busiest_cu_flop += max(0.0, work.flop_heaviest_workgroup - work.workgroup_flop)
        compute_s = max(total_flop * s_per_flop, busiest_cu_flop * cus * s_per_flop / hiding)

    if work.warp_instructions_per_workgroup is not None:
        compute_s = max(compute_s, issue_s(work, gpu, per_cu_rounds, resident))

    bandwidth = gpu.hbm_bandwidth_bytes_per_s * calib.memory_efficiency_for(work.family)
    if cycle and work.family is Family.GEMM:
        # each output tile is stored after its main loop (the cooperative schedule of the library's persistent
        # kernels): across the grid the launch's output leaves at HBM's rate after the compute, not under it
        compute_s += work.write_bytes / bandwidth
    latency_s, dram_factor = 0.0, 1.0
    if cycle:
        if work.program is not None and work.program.grid_stride:
            bandwidth *= calib.grid_stride_efficiency
        memory_s = work.bytes / bandwidth
        if work.program is not None:  # short rows' pieces pass the L2 at its rate of pieces, across the GPU
            memory_s = max(memory_s, work.program.short_rows_s(gpu, work.workgroups))
        memory_s = max(memory_s, work.phased_memory_s(bandwidth, gpu.l2_bandwidth_bytes_per_s))
        residency = Residency(work.workgroups, -(-work.threads_per_workgroup // gpu.wave_size),
                              occ.workgroups_per_cu)
        curve = MemoryCurve(calib.mlp_latency_s or gpu.dram_latency_s * calib.mlp_latency_ratio, calib.mlp_smoothness,
                            calib.mlp_deep_thread_share)
        program = work.program or default_program(work, gpu)
        completion = completion_s(gpu) if work.write_bytes else 0.0
        clocked = at_matrix_clock(gpu) if program.issues_matrix else gpu

        def latency_at(round_trip: float) -> float:
            """The grid's seconds with its dependent DRAM round trips `round_trip` times the idle latency."""
            loaded_gpu = (clocked if round_trip == 1.0
                          else evolved(clocked, dram_latency_s=clocked.dram_latency_s * round_trip))
            return grid_s(program, loaded_gpu, residency, curve, bandwidth, dispatch) + completion

        latency_s, dram_factor = under_load(latency_at, max(compute_s, memory_s), work, gpu)
    else:
        cu_bandwidth = bandwidth / (calib.hbm_saturation_cu_fraction * cus)
        stream_rounds = -(-work.streams // cus)
        memory_s = max(work.bytes / bandwidth, work.workgroup_bytes * stream_rounds / (cu_bandwidth * hiding))

    floor_s = roofline_floor_s(work, gpu)
    bound = Bound.COMPUTE if compute_s >= memory_s else Bound.MEMORY
    if latency_s > max(compute_s, memory_s):
        bound = Bound.LATENCY
    # a fitted scale below 1 never takes a launch under the roofline floor
    # a library GEMM's set-up and completion run in series with its tiles (the gemm-floor probe)
    setup_s = 0.0
    if cycle and work.family is Family.GEMM:
        setup_s = calib.library_gemm_setup_s
    elif cycle and work.grouped_library:
        setup_s = calib.library_grouped_setup_s + work.grouped_tail_groups * calib.library_grouped_scan_s
    # programs that exit at once, launched after the real ones, are handed to the CUs at the dispatcher's rate
    exiting_s = -(-work.exiting_workgroups // cus) * gpu.workgroup_dispatch_s
    busy_s = max(max(compute_s, memory_s, latency_s) * calib.time_scale_for(work.family, bound.value) + setup_s
                 + exiting_s, floor_s)
    return KernelTime(
        time_s=busy_s,
        compute_s=compute_s,
        memory_s=memory_s,
        launch_s=0.0,
        floor_s=floor_s,
        bound=bound,
        waves=-(-work.workgroups // (cus * occ.workgroups_per_cu)),
        occupancy=occ,
        latency_s=latency_s,
        dram_latency_factor=dram_factor,
    )


# Bytes one thread of a streaming kernel keeps in flight: four 16-byte vector loads (assumption: what
# Triton and PyTorch's vectorized elementwise kernels issue per thread before first use of the values).
STREAM_BYTES_PER_THREAD = 64


# Steps of the false-position search for a loaded launch's time (`under_load`): each times the grid once; three
# leave the time within a fraction of a per cent of the fixed point on the H200's curves (a test holds it).
LOAD_STEPS = 3


def under_load(latency_at: Callable[[float], float], floor_s: float, work: Work, gpu: GPU
               ) -> tuple[float, float]:
    """The launch's latency path with its DRAM round trips at the latency its own traffic makes
    (`hwmodels.loaded_latency`): the time t where the traffic's rates (bytes / t) give the factors that give t.

    `latency_at(factor)` times the grid with its round trips at that factor; `floor_s` is the launch's compute
    and memory terms, which no latency changes. With the idle latency the launch takes t0 and moves its bytes
    fastest; at the factor of t0's rates it takes t1 >= t0. The time lies between: slower means lower rates and a
    smaller factor. A launch that stays under its floor at t1's factor is not held by latency, and is left as it
    is. Returns the latency path and the round trip's factor it was timed at."""
    idle = latency_at(1.0)
    if not loaded_latency.measured(gpu) or work.bytes <= 0:
        return idle, 1.0

    def at(t: float) -> tuple[float, float, float]:
        """(the latency path at the factors of the rates of a launch that takes t, how far that misses t, the
        round trip's factor)"""
        factor = loaded_latency.latency_factor(gpu, work.read_bytes / t, work.write_bytes / t)
        latency = idle if factor == 1.0 else latency_at(factor)
        return latency, max(floor_s, latency) - t, factor

    low = max(floor_s, idle)
    if low <= 0:  # nothing takes time: no rate to speak of
        return idle, 1.0
    loaded, _, factor = at(low)
    high = max(floor_s, loaded)
    if loaded <= floor_s or high <= low:
        return (idle, 1.0) if loaded <= floor_s else (loaded, factor)
    miss_low, (latency, miss_high, factor) = high - low, at(high)
    if miss_high >= 0:
        return latency, factor
    side = 0
    for _ in range(LOAD_STEPS):  # false position, the Illinois way (Dowell and Jarratt, BIT 11, 1971)
        t = high - miss_high * (high - low) / (miss_high - miss_low)
        latency, miss, factor = at(t)
        if miss > 0:
            low, miss_low = t, miss
            if side > 0:  # the same end moved twice: halve the other's miss
                miss_high /= 2
            side = 1
        else:
            high, miss_high = t, miss
            if side < 0:
                miss_low /= 2
            side = -1
    return latency, factor


def default_program(work: Work, gpu: GPU) -> Program:
    """A workgroup that streams its share of the launch's reads, 64 B per thread per trip, and its writes.

    Its instructions, when counted, are issued once (they are spread over the trips in reality, but a
    streaming kernel's trips are few); kernels with loops, pipelines or dependent chains state their own.
    """
    return stream_program(work, -(-work.threads_per_workgroup // gpu.wave_size))


def stream_program(work: Work, warps: int = 1, grid_stride: bool = False) -> Program:
    """`default_program` for a workgroup of `warps` warps (which only its counted instructions depend on);
    `grid_stride`: its workgroups are persistent programs that loop over the launch's blocks."""
    read_share = work.read_bytes / work.bytes if work.bytes else 0.0
    program = streaming_program(work.workgroup_bytes * read_share,
                                STREAM_BYTES_PER_THREAD * work.threads_per_workgroup)
    stores = work.workgroup_bytes * (1 - read_share) / max(1.0, program.trips)
    return Program(trips=program.trips, trip_load_bytes=program.trip_load_bytes, trip_store_bytes=stores,
                   setup_instructions=(work.warp_instructions_per_workgroup or 0.0) / warps, grid_stride=grid_stride)


def issue_s(work: Work, gpu: GPU, per_cu_rounds: int, resident: int) -> float:
    """Seconds the busiest CU takes to issue its workgroups' warp instructions, one per scheduler per clock."""
    warps = -(-work.threads_per_workgroup // gpu.wave_size)
    schedulers = min(gpu.simds_per_cu, resident * warps)
    return per_cu_rounds * (work.warp_instructions_per_workgroup or 0.0) / (schedulers * gpu.clock_hz)


def kernel_time_s(work: Work, gpu: GPU, calib: Calibration, mode: LaunchMode = LaunchMode.EAGER) -> float:
    """Predicted seconds of one launch."""
    return kernel_time(work, gpu, calib, mode).time_s


def launches_time_s(launches: Iterable[Work], gpu: GPU, calib: Calibration,
                    mode: LaunchMode = LaunchMode.EAGER) -> float:
    """Seconds of launches run back to back on one stream."""
    return sum(kernel_time_s(work, gpu, calib, mode) for work in launches)
