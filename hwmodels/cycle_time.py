"""Cycle-level time of a launch: the waves of workgroups, each running its `Program`.

Per trip of a workgroup's loop, with r workgroups resident on a CU of S schedulers, w warps each (the trip takes
the slowest of the issue, one warp's path through its load, chain and stores, and the CU's memory traffic):

- issue:   ceil(r * w / S) warps share one scheduler, which issues one warp instruction per clock, so a trip
           takes at least max(1, r * w / S) * I cycles for I instructions per warp;
- latency: one warp issues in order, so a trip takes at least I cycles plus its dependent chain (the
           chain's steps times their latencies; Hong and Kim, "An analytical model for a GPU architecture
           with memory-level and thread-level parallelism awareness", ISCA 2009, combine the two the same way);
- memory:  by Little's law a CU with x bytes in flight receives x / L bytes per second, L the DRAM latency;
           `mlp_smoothness` n bends that into the CU's ceiling c, rate = (x/L) / (1 + ((x/L)/c)^n)^(1/n),
           fitted on the memory-level-parallelism probe, and capped by the CU's share of HBM over the CUs that
           stream. Tiles that several workgroups read (`reuse`: HBM once, L2 after) contend less for HBM and
           raise that share, up to L2's bandwidth over the streaming CUs. A trip waits for its load
           unless the load was issued `prefetch` trips ahead, in which case only the part the pipeline cannot
           cover; its stores leave after its compute at the CU's share of bandwidth, and the resident
           workgroups' loads and stores together cannot pass that share.

A workgroup takes its setup chain plus `trips` trips. Workgroups run in waves of (CUs x resident); a last,
partial wave runs with fewer resident per CU. When many CUs issue their first loads at once, the memory system
takes longer to answer them than one CU's round trip (`hbm_burst_latency_s`, probed: one tile copy per SM
against one alone): once per launch, in proportion to the CUs the grid starts on. No grid finishes before the
dispatcher has handed the busiest CU its workgroups. The launch ends when the last workgroup's stores have
drained: `completion_s`, the part of the tiny-kernel floor that is neither the launch nor the load. The
roofline's whole-GPU terms stand beside this one (`hwmodels.roofline`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hwmodels.program import Chain, Program, evolved
from hwmodels.spec import GPU

# A thread holding more than this many bytes of one trip's loads, which the trip then reduces, keeps only a share
# of them in flight (the memory-level-parallelism probe: above 8 fp32 per thread the rate is that of half).
DEEP_THREAD_BYTES = 32


@dataclass(frozen=True)
class MemoryCurve:
    """A CU's HBM bandwidth against its bytes in flight: Little's law at `latency_s`, bent by `smoothness`;
    `deep_thread_share` of a deep thread's register loads are in flight at once."""

    latency_s: float
    smoothness: float
    deep_thread_share: float = 1.0


@dataclass(frozen=True)
class Residency:
    """How a launch sits on the GPU: workgroups, their warps, and how many fit on one CU at once."""

    workgroups: int
    warps_per_workgroup: int
    resident_per_cu: int


def loaded_rate(in_flight_bytes: float, latency_s: float, cap_bytes_per_s: float, smoothness: float) -> float:
    """Bytes per second one CU receives with `in_flight_bytes` outstanding (Little's law, bent to a cap)."""
    if in_flight_bytes <= 0:
        return cap_bytes_per_s
    little = in_flight_bytes / latency_s
    return little / (1.0 + (little / cap_bytes_per_s) ** smoothness) ** (1.0 / smoothness)


def moved(program: Program, gpu: GPU) -> Program:
    """The program with its short rows' setup loads and trip stores in the whole pieces memory moves them in
    (`Program.load_sector_factor`, `Program.sector_factor`); idempotent."""
    loads, stores = program.load_sector_factor(gpu), program.sector_factor(gpu)
    if loads == stores == 1.0:
        return program
    return evolved(program, setup_load_bytes=program.setup_load_bytes * loads,
                   trip_store_bytes=program.trip_store_bytes * stores, row_run_bytes=0.0)


def from_l2(program: Program, gpu: GPU, curve: MemoryCurve, hbm_bytes_per_s: float,
            ) -> tuple[Program, MemoryCurve, float]:
    """The program, curve and bandwidth its loads see: a program whose input sits in L2 (`Program.in_l2`) waits
    L2's latency for its loads and for the memory round trips of its chains, at L2's bandwidth. The program
    returned has those chains and no fresh input left to place, so a second pass changes nothing."""
    if not program.in_l2(gpu):
        return program, curve, hbm_bytes_per_s

    def hit(chain: Chain, at_l2: Chain | None) -> Chain:
        return at_l2 if at_l2 is not None else evolved(chain, l2=chain.l2 + chain.dram, dram=0.0)

    return (evolved(program, trip_chain=hit(program.trip_chain, program.l2_trip_chain),
                    setup_chain=hit(program.setup_chain, program.l2_setup_chain), fresh_input_bytes=0.0),
            evolved(curve, latency_s=gpu.l2_latency_s), gpu.l2_bandwidth_bytes_per_s)


def trip_s(program: Program, gpu: GPU, resident: int, warps: int, streaming_cus: int, curve: MemoryCurve,
           hbm_bytes_per_s: float) -> float:
    """Seconds one trip of the loop takes with `resident` workgroups of `warps` warps on the CU, while
    `streaming_cus` CUs stream at once from a GPU of `hbm_bytes_per_s`."""
    if program.async_loads and gpu.async_copy_latency_alone is not None and not program.in_l2(gpu):
        idle_share = 1.0 - min(1.0, streaming_cus / gpu.compute_units)
        curve = evolved(curve, latency_s=curve.latency_s * (1.0 - (1.0 - gpu.async_copy_latency_alone) * idle_share))
    program, curve, hbm_bytes_per_s = from_l2(moved(program, gpu), gpu, curve, hbm_bytes_per_s)
    per_scheduler = max(1.0, resident * warps / gpu.simds_per_cu)
    # issue overlaps with the other warps' waits; one warp's own path (its loads, its chain, its stores) does not
    issue = per_scheduler * program.trip_instructions / gpu.boost_clock_hz
    latency = program.trip_instructions / gpu.boost_clock_hz + program.trip_chain.seconds(gpu)
    if program.trip_cycles_by_warps:
        # simulated: the warps sharing a scheduler, their issue and their stalls together
        issue = latency = shared_cycles(program.trip_cycles_by_warps, per_scheduler) / gpu.boost_clock_hz + (
            program.trip_chain.seconds(gpu))
    share = cu_share(program, gpu, hbm_bytes_per_s, streaming_cus)
    # the resident workgroups' stores leave after their compute, at the CU's share of bandwidth, and a
    # workgroup's next loads queue behind them in the CU's memory path; loads and stores together cannot pass
    # that share either
    store = resident * program.trip_store_bytes / share
    traffic = resident * (program.trip_load_bytes + program.trip_store_bytes) / share
    if program.trip_load_bytes <= 0:
        return max(latency + store, issue, traffic)
    stages = max(1, program.prefetch)
    in_flight = resident * program.trip_load_bytes * stages
    if program.reduces_loads and program.trip_load_bytes > DEEP_THREAD_BYTES * warps * gpu.wave_size:
        in_flight *= curve.deep_thread_share
    # the CU's own curve (its memory pipeline), capped by its share of what every streaming CU reads at once
    rate = min(loaded_rate(in_flight, curve.latency_s, gpu.cu_bandwidth_bytes_per_s, curve.smoothness), share)
    load = resident * program.trip_load_bytes * stages / rate
    # a shared operand's lines, read by many CTAs at once, queue at their L2 slices: in series with the transfer
    shared = program.trip_shared_l2 * gpu.l2_latency_s
    if program.prefetch == 0:
        # the round trips a trip waits for in series beyond its loads' first (`Chain.dram`, `Chain.l2`) are spent
        # while its own bytes arrive: the trip's memory takes the longer of the transfer and that chain
        waits = program.trip_chain.dram * gpu.dram_latency_s + program.trip_chain.l2 * gpu.l2_latency_s
        # the loads issued before the wait fly under the trip's own work: the transfer from the first one on, the
        # round trip from the last (`Program.trip_load_lead_cycles`)
        first, last = (cycles / gpu.boost_clock_hz for cycles in program.trip_load_lead_cycles)
        memory = max(load - first, curve.latency_s + waits - last, 0.0) + shared
        return max(memory + latency - waits + store, issue, traffic + shared)
    return max(latency, issue, load / stages + shared, traffic + shared)


def load_s(in_flight_bytes: float, gpu: GPU, curve: MemoryCurve, share_bytes_per_s: float) -> float:
    """Seconds a CU takes to receive `in_flight_bytes` issued at once: Little's law on its memory curve, at most
    its share of the GPU's bandwidth."""
    rate = min(loaded_rate(in_flight_bytes, curve.latency_s, gpu.cu_bandwidth_bytes_per_s, curve.smoothness),
               share_bytes_per_s)
    return in_flight_bytes / rate


def shared_cycles(by_warps: tuple[tuple[int, float], ...], warps: float) -> float:
    """Cycles of a trip with `warps` warps on a scheduler (rounded up), interpolated linearly between the
    simulated (warps, cycles) pairs; beyond the last, its cycles per warp."""
    n = max(1, math.ceil(warps - 1e-9))
    for (n0, c0), (n1, c1) in itertools.pairwise(by_warps):
        if n0 <= n <= n1:
            return c0 + (c1 - c0) * (n - n0) / (n1 - n0)
    if n <= by_warps[0][0]:
        return by_warps[0][1]
    last_n, last_c = by_warps[-1]
    return last_c * n / last_n


def cu_share(program: Program, gpu: GPU, hbm_bytes_per_s: float, streaming_cus: int) -> float:
    """One CU's share of what the trips read while `streaming_cus` stream: HBM's bandwidth, stretched by the
    tiles' reuse through L2 (the first touch of a tile comes from HBM, the others hit L2, so HBM is contended
    `reuse` times less), at most L2's, over the streaming CUs. A small grid, latency-bound, gains nothing."""
    return min(hbm_bytes_per_s * program.reuse, gpu.l2_bandwidth_bytes_per_s) / max(1, streaming_cus)


def workgroup_s(program: Program, gpu: GPU, resident: int, warps: int, streaming_cus: int,
                curve: MemoryCurve, hbm_bytes_per_s: float) -> float:
    """Seconds one workgroup takes from its first instruction to its last, sharing the CU with `resident`."""
    program, curve, hbm_bytes_per_s = from_l2(moved(program, gpu), gpu, curve, hbm_bytes_per_s)
    setup = _setup_s(program, gpu, resident, warps, streaming_cus, curve, hbm_bytes_per_s)
    if program.trips <= 0:
        return setup
    return setup + program.trips * trip_s(program, gpu, resident, warps, streaming_cus, curve, hbm_bytes_per_s)


def _setup_s(program: Program, gpu: GPU, resident: int, warps: int, streaming_cus: int, curve: MemoryCurve,
             hbm_bytes_per_s: float) -> float:
    """`workgroup_s` of the program's setup alone (its trips left out), for a program already placed (`moved`,
    `from_l2`)."""
    per_scheduler = max(1.0, resident * warps / gpu.simds_per_cu)
    setup = (per_scheduler * program.setup_instructions / gpu.boost_clock_hz
             + program.setup_chain.seconds(gpu))
    if program.setup_cycles_by_warps:  # simulated: the residents' warps issuing their setups together
        setup = (shared_cycles(program.setup_cycles_by_warps, per_scheduler) / gpu.boost_clock_hz
                 + program.setup_chain.seconds(gpu))
    if program.setup_load_bytes > 0:
        setup += load_s(resident * program.setup_load_bytes, gpu, curve,
                        cu_share(program, gpu, hbm_bytes_per_s, streaming_cus))
    if program.setup_store_bytes > 0:  # the residents' output tiles leave through the CU's share of bandwidth
        setup += resident * program.setup_store_bytes / cu_share(program, gpu, hbm_bytes_per_s, streaming_cus)
    return setup


# Dispatch of an irregular grid: (durations of the workgroups in dispatch order, slots) -> seconds until the last
# ends. The simulation layer's workgroup DES is one (simulator/cost/workgroup_des.py).
Dispatch = Callable[[Sequence[float], int], float]


def burst_s(program: Program, gpu: GPU, workgroups: int) -> float:
    """What a launch's first loads cost beyond one CU's round trip when many CUs issue them at once: the GPU's
    `hbm_burst_latency_s` (every CU at once against one alone, probed) times the share of CUs the grid starts
    on (linear in between: an assumption); nothing for a program that loads nothing per trip."""
    if program.trip_load_bytes <= 0 or workgroups <= 0:
        return 0.0
    return gpu.hbm_burst_latency_s * min(gpu.compute_units, workgroups) / gpu.compute_units


def bound_dispatch_s(durations: Sequence[float], slots: int) -> float:
    """Without a dispatcher: the larger of the longest workgroup and the work spread evenly over the slots.

    Both are lower bounds of any dispatch; greedy dispatch is within the longest workgroup of their sum.
    """
    return max(max(durations, default=0.0), sum(durations) / slots) if durations else 0.0


def grid_s(program: Program, gpu: GPU, residency: Residency, curve: MemoryCurve, hbm_bytes_per_s: float,
           dispatch: Dispatch | None = None) -> float:
    """Seconds the grid takes: `waves_s` for a uniform grid; an irregular one (`trip_counts`) is dispatched
    workgroup by workgroup onto CUs x resident slots, each workgroup's duration taken at full residency.
    Either way the grid's first loads pay the GPU-wide burst (`burst_s`), and no grid is faster than the
    dispatcher hands the busiest CU its workgroups (`workgroup_dispatch_s`)."""
    handed_s = -(-residency.workgroups // gpu.compute_units) * gpu.workgroup_dispatch_s
    burst = burst_s(program, gpu, residency.workgroups)
    if not program.trip_counts:
        return max(handed_s, burst + waves_s(program, gpu, residency, curve, hbm_bytes_per_s))
    slots = gpu.compute_units * residency.resident_per_cu
    resident = min(residency.resident_per_cu, -(-len(program.trip_counts) // gpu.compute_units))
    streaming = min(gpu.compute_units, len(program.trip_counts))
    warps = residency.warps_per_workgroup
    # placed once (`moved`, `from_l2`: each a no-op on what it returns) for the setup and the trips below, which
    # read neither `trips` nor `trip_counts`
    placed, curve, hbm_bytes_per_s = from_l2(moved(program, gpu), gpu, curve, hbm_bytes_per_s)
    # a workgroup's setup, then its trips: pipelined, each as `trip_s` (what `workgroup_s` adds per trip);
    # unpipelined, at the drifted steady state of its residents
    setup = _setup_s(placed, gpu, resident, warps, streaming, curve, hbm_bytes_per_s)
    per_trip = (steady_trip_s if _drifts(program) else trip_s)(placed, gpu, resident, warps, streaming, curve,
                                                               hbm_bytes_per_s)
    per_trips = {trips: setup + trips * per_trip if trips > 0 else setup for trips in set(program.trip_counts)}
    durations = list(map(per_trips.__getitem__, program.trip_counts))
    return max(handed_s, burst + (dispatch or bound_dispatch_s)(durations, slots))


def steady_trip_s(program: Program, gpu: GPU, resident: int, warps: int, streaming_cus: int, curve: MemoryCurve,
                  hbm_bytes_per_s: float) -> float:
    """Seconds per trip of each of `resident` unpipelined workgroups once their trips have drifted apart.

    A closed queueing network solved by exact mean value analysis (Reiser and Lavenberg, J. ACM 27(2), 1980):
    each resident workgroup cycles through the CU's schedulers (a queue; its demand: its warps' trip
    instructions over the schedulers, or, where the trip was simulated, the simulated cycles of all residents'
    warps sharing a scheduler over the residents: issue, stalls and pipes together), the CU's memory path (a
    queue; its trip's loads and stores at the CU's share of bandwidth) and its own latency (a delay: what one
    workgroup alone on the CU takes beyond both demands: its loads' round trip, its dependent chain). One
    workgroup alone gets `trip_s` of one; many approach the busier queue's rate. While one workgroup waits for
    its loads the others compute, which a lockstep wave (`trip_s` of all of them) does not let them do.

    At either queue a workgroup that arrives finds the one in service with (1 + c^2) / 2 of a service left (the
    residual life of a renewal process; c the service time's coefficient of variation), where the exact analysis
    of exponential servers takes all of it: the residence is D (1 + Q - (1 - c^2) U / 2) with the queue's Q and
    utilization U at one resident fewer. At the schedulers a trip is a fixed instruction stream (c^2 = 0,
    assumption: the same trip's instructions every time, no data-dependent branch). At the memory path its loads
    are a fixed tile at the path's rate (c^2 = 0, assumption) and its stores leave in the bursts the memory
    controllers drain writes in (c^2 = 1, assumption: the loaded-latency probe's writes hold reads back); a
    trip's c^2 there is its stores' share of its bytes.
    """
    alone = trip_s(program, gpu, 1, warps, streaming_cus, curve, hbm_bytes_per_s)
    if resident <= 1:
        return alone
    program, curve, hbm_bytes_per_s = from_l2(moved(program, gpu), gpu, curve, hbm_bytes_per_s)
    compute = warps * program.trip_instructions / (gpu.simds_per_cu * gpu.boost_clock_hz)
    if program.trip_cycles_by_warps:  # simulated: the scheduler busy with all residents' trips, shared out
        per_scheduler = max(1.0, resident * warps / gpu.simds_per_cu)
        compute = max(compute, shared_cycles(program.trip_cycles_by_warps, per_scheduler)
                      / gpu.boost_clock_hz / resident)
    moved_bytes = program.trip_load_bytes + program.trip_store_bytes
    memory = moved_bytes / cu_share(program, gpu, hbm_bytes_per_s, streaming_cus)
    delay = max(0.0, alone - compute - memory)
    regular = program.trip_load_bytes / moved_bytes if moved_bytes else 0.0  # 1 - c^2 of the memory path
    queued_compute = queued_memory = throughput = 0.0
    for n in range(1, resident + 1):
        # each queue's utilization with n - 1 residents, a fixed instruction stream's c^2 = 0 at the schedulers
        at_compute = compute * (1 + queued_compute - throughput * compute / 2)
        at_memory = memory * (1 + queued_memory - regular * throughput * memory / 2)
        # the residual correction can promise more than the busier queue serves: never past its rate
        throughput = n / (at_compute + at_memory + delay)
        if max(compute, memory) > 0:
            throughput = min(throughput, 1.0 / max(compute, memory))
        queued_compute, queued_memory = throughput * at_compute, throughput * at_memory
    return resident / throughput


def waves_s(program: Program, gpu: GPU, residency: Residency, curve: MemoryCurve, hbm_bytes_per_s: float) -> float:
    """Seconds the whole grid takes on the busiest CU.

    Unpipelined trips (`drifting_s`): the resident workgroups' first trip together, every later one drifted
    apart. Pipelined ones: full waves of CUs x resident workgroups, then a partial one, each trip already
    overlapping its loads with its compute.
    """
    cus, per_cu = gpu.compute_units, residency.resident_per_cu
    if residency.workgroups <= 0:
        return 0.0
    if _drifts(program):
        return drifting_s(program, gpu, residency, curve, hbm_bytes_per_s)

    def wave(resident: int, streaming_cus: int) -> float:
        return workgroup_s(program, gpu, resident, residency.warps_per_workgroup, streaming_cus, curve,
                           hbm_bytes_per_s)

    full, rest = divmod(residency.workgroups, cus * per_cu)
    total = full * wave(per_cu, cus) if full else 0.0
    if rest:
        total += wave(-(-rest // cus), min(cus, rest))
    return total


def _drifts(program: Program) -> bool:
    """Whether the program's trips wait for their own loads (no pipeline), so resident workgroups drift apart."""
    return program.prefetch == 0 and program.trip_load_bytes > 0 and program.trips > 0


# The coefficient of variation of one trip's time, from which a generation's spread follows (`drifting_s`).
# Assumption: 1, an exponential's; the mean value analysis gives a trip's mean only, and what spreads it (the memory
# system's service of one SM's requests against every other SM's) is not probed. 0.5 was tried beside it and is worse
# on both GPUs' rows (validation/NOTES.md, 2026-12-06).
TRIP_TIME_CV = 1.0


def drifting_s(program: Program, gpu: GPU, residency: Residency, curve: MemoryCurve, hbm_bytes_per_s: float) -> float:
    """An unpipelined grid on its busiest CU: the resident workgroups start together, so their first trip runs in
    lockstep (`trip_s`: all load, all compute, all store); every later trip, of these workgroups and of those
    that take their slots, at the drifted steady state (`steady_trip_s`); each wave's setups in turn.

    Measured on the H200 (`validation/data/h200/probe_grid.csv`): the same tile work (load 4 KiB, 0 to 128
    dependent multiply-adds a value, store) takes 130 µs as a copy and 130 µs with 32 multiply-adds a value,
    one workgroup per tile or persistent programs alike: the compute hides under other workgroups' memory
    traffic, which lockstep waves would add to it (+28 to +52 %).

    Where the CU's workgroups are not a whole number of generations of `resident`, the last few run after the
    others, at their own residency. How much of that tail the even split over the slots hides depends on how far
    the slots have drifted apart by then: after k generations of n trips each, a slot's finish spreads by about
    sqrt(k n) trips' spread (`TRIP_TIME_CV` of a trip), against a generation's n trips. Long-lived workgroups
    leave their slots together, and the remainder runs as a generation of its own (the H100's generations grid:
    one workgroup past a SM's four slots, 72.7 -> 95.7 us at 16 trips); short-lived ones leave at scattered times
    and the next fill them as they free, as the even split has it. The time is the even split's plus (1 - a) of
    the lockstep generations' excess, a = min(1, cv sqrt(k / n)).
    """
    cus, warps = gpu.compute_units, residency.warps_per_workgroup
    rounds = -(-residency.workgroups // cus)
    resident = min(residency.resident_per_cu, rounds)
    streaming = min(cus, residency.workgroups)
    setup = workgroup_s(evolved(program, trips=0), gpu, resident, warps, streaming, curve, hbm_bytes_per_s)
    first = trip_s(program, gpu, resident, warps, streaming, curve, hbm_bytes_per_s)
    steady = steady_trip_s(program, gpu, resident, warps, streaming, curve, hbm_bytes_per_s)
    slot_trips = rounds * program.trips / resident  # trips each resident slot runs
    even = -(-rounds // resident) * setup + first + max(0.0, slot_trips - 1) * steady
    generations, rest = divmod(rounds, resident)
    drifted = min(1.0, TRIP_TIME_CV * math.sqrt(generations / program.trips))  # resident <= rounds: generations >= 1
    if not rest or drifted >= 1.0:
        return even
    # whole generations in lockstep, then the remainder as a generation of its own at its residency
    lockstep = (generations + 1) * setup + generations * (first + (program.trips - 1) * steady) + (
        trip_s(program, gpu, rest, warps, streaming, curve, hbm_bytes_per_s)
        + (program.trips - 1) * steady_trip_s(program, gpu, rest, warps, streaming, curve, hbm_bytes_per_s))
    return even + (1.0 - drifted) * max(0.0, lockstep - even)


def completion_s(gpu: GPU) -> float:
    """End of a launch after its last workgroup: the tiny-kernel floor less the launch and one load."""
    return max(0.0, gpu.kernel_floor_s - gpu.launch_graph_node_s - gpu.dram_latency_s)
